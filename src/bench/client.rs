//! Streaming generation clients: SGLang's native `/generate` and OpenAI `/v1/completions` (SSE,
//! read line by line). One request in, one measured `Generation` out.

use std::io::{BufRead, BufReader, Read};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};

use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    Sglang,
    Openai,
}

impl Api {
    pub fn parse(s: &str) -> Result<Api> {
        match s {
            "sglang" => Ok(Api::Sglang),
            "openai" => Ok(Api::Openai),
            _ => Err(Error::usage(
                format!("unknown api `{s}`"),
                Some("use `sglang` or `openai`".into()),
            )),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Api::Sglang => "sglang",
            Api::Openai => "openai",
        }
    }
}

/// What one streamed request measured.
#[derive(Debug, Clone, Serialize)]
pub struct Generation {
    /// Completion tokens: the server's count when it reports one, else the streamed pieces.
    pub tokens: u64,
    pub prompt_tokens: Option<u64>,
    /// Seconds from sending the request to the first token.
    pub ttft_s: f64,
    /// Seconds from sending the request to the last token.
    pub e2e_s: f64,
    /// (tokens after the first event) / (last token time − first token time).
    pub decode_tok_s: Option<f64>,
    /// The server's own decode rate where it reports one (llama.cpp `timings.predicted_per_second`).
    pub server_decode_tok_s: Option<f64>,
    pub spec_verify_ct: Option<u64>,
    /// completion_tokens / spec_verify_ct, per request.
    pub accept_length: Option<f64>,
    pub finish_reason: Option<String>,
    /// Token ids (SGLang) or streamed pieces (OpenAI): what greedy A/B compares.
    #[serde(skip)]
    pub pieces: Vec<String>,
    #[serde(skip)]
    pub text: String,
}

impl Generation {
    pub fn e2e_tok_s(&self) -> f64 {
        if self.e2e_s > 0.0 {
            self.tokens as f64 / self.e2e_s
        } else {
            0.0
        }
    }
}

/// Without one byte from the server, a request has stalled (capped by the request's deadline).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// The longest line of a response stream kiln reads.
pub const MAX_LINE_BYTES: u64 = 1 << 20;
/// The most bytes one streamed response may send (2048 tokens take well under 1 MiB).
pub const MAX_STREAM_BYTES: u64 = 64 << 20;

/// The default whole-request deadline: two minutes, plus 0.2 s per requested token (5 tok/s).
pub fn default_deadline(max_tokens: u32) -> Duration {
    Duration::from_secs(120) + Duration::from_millis(200) * max_tokens
}

pub struct Request<'a> {
    pub prompt: &'a str,
    pub max_tokens: u32,
    /// Greedy (temperature 0).
    pub greedy: bool,
    pub ignore_eos: bool,
    /// The whole request, first byte to last.
    pub timeout: Duration,
}

/// Stream one completion from `base` (e.g. `http://127.0.0.1:30000`).
pub fn generate(base: &str, api: Api, req: &Request) -> Result<Generation> {
    let base = base.trim_end_matches('/');
    let (path, body) = match api {
        Api::Sglang => (
            "/generate",
            json!({
                "text": req.prompt,
                "stream": true,
                "sampling_params": {
                    "max_new_tokens": req.max_tokens,
                    "temperature": if req.greedy { 0.0 } else { 1.0 },
                    "ignore_eos": req.ignore_eos,
                },
            }),
        ),
        Api::Openai => (
            "/v1/completions",
            json!({
                "prompt": req.prompt,
                "max_tokens": req.max_tokens,
                "temperature": if req.greedy { 0.0 } else { 1.0 },
                "stream": true,
                "ignore_eos": req.ignore_eos,
                "stream_options": {"include_usage": true},
                "cache_prompt": false,
            }),
        ),
    };
    let url = format!("{base}{path}");
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(5))
        .timeout_read(req.timeout.min(IDLE_TIMEOUT))
        .timeout(req.timeout)
        .build();
    let start = Instant::now();
    let resp = agent
        .post(&url)
        .set("Content-Type", "application/json")
        .send_string(&body.to_string())
        .map_err(|e| http_error(&url, e, req.timeout))?;
    let mut s = Stream::default();
    let mut reader = BufReader::new(Read::take(resp.into_reader(), MAX_STREAM_BYTES));
    loop {
        let line = match read_line(&mut reader) {
            Ok(Some(line)) => line,
            Ok(None) if reader.get_ref().limit() == 0 => {
                return Err(Error::other(
                    format!(
                        "{url} sent more than {} MiB in one response",
                        MAX_STREAM_BYTES >> 20
                    ),
                    Some("is this an LLM server? check --url and --api".into()),
                ))
            }
            Ok(None) => break,
            Err(e) => {
                let received = MAX_STREAM_BYTES - reader.get_ref().limit();
                return Err(stream_error(&url, e, received, start, req.timeout));
            }
        };
        let Some(data) = line.strip_prefix("data:") else {
            continue;
        };
        let data = data.trim();
        if data == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(data).map_err(|e| {
            Error::other(
                format!("{url} sent a chunk that is not JSON ({e}): {}", clip(data)),
                None,
            )
        })?;
        if let Some(err) = v.get("error") {
            return Err(Error::other(
                format!("{url} reported an error mid-stream: {err}"),
                None,
            ));
        }
        let now = start.elapsed().as_secs_f64();
        match api {
            Api::Sglang => s.sglang_chunk(&v, now),
            Api::Openai => s.openai_chunk(&v, now),
        }
    }
    s.finish(api)
}

#[derive(Default)]
struct Stream {
    first: Option<(f64, u64)>,
    last: f64,
    count: u64,
    server_tokens: Option<u64>,
    prompt_tokens: Option<u64>,
    server_rate: Option<f64>,
    verify_ct: Option<u64>,
    finish: Option<String>,
    pieces: Vec<String>,
    text: String,
}

impl Stream {
    fn saw_tokens(&mut self, now: f64, total: u64) {
        if total > self.count {
            self.first.get_or_insert((now, total));
            self.last = now;
            self.count = total;
        }
    }

    fn sglang_chunk(&mut self, v: &Value, now: f64) {
        let meta = &v["meta_info"];
        if let Some(ids) = v["output_ids"].as_array() {
            // Cumulative unless the server runs with --stream-output.
            let ids: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
            if ids.len() as u64 >= self.pieces.len() as u64 && ids.starts_with(&self.pieces) {
                self.pieces = ids;
            } else {
                self.pieces.extend(ids);
            }
        }
        if let Some(t) = v["text"].as_str() {
            self.text = t.to_string();
        }
        let total = meta["completion_tokens"]
            .as_u64()
            .unwrap_or(self.pieces.len() as u64);
        self.saw_tokens(now, total);
        self.server_tokens = meta["completion_tokens"].as_u64().or(self.server_tokens);
        self.prompt_tokens = meta["prompt_tokens"].as_u64().or(self.prompt_tokens);
        self.verify_ct = meta["spec_verify_ct"].as_u64().or(self.verify_ct);
        if let Some(f) = meta["finish_reason"].get("type").and_then(Value::as_str) {
            self.finish = Some(f.to_string());
        }
    }

    fn openai_chunk(&mut self, v: &Value, now: f64) {
        if let Some(choice) = v["choices"].as_array().and_then(|c| c.first()) {
            if let Some(t) = choice["text"].as_str().filter(|t| !t.is_empty()) {
                self.pieces.push(t.to_string());
                self.text.push_str(t);
                let n = self.count + 1;
                self.saw_tokens(now, n);
            }
            if let Some(f) = choice["finish_reason"].as_str() {
                self.finish = Some(f.to_string());
            }
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.server_tokens = u["completion_tokens"].as_u64();
            self.prompt_tokens = u["prompt_tokens"].as_u64();
        }
        if let Some(r) = v["timings"]["predicted_per_second"].as_f64() {
            self.server_rate = Some(r);
        }
    }

    fn finish(self, api: Api) -> Result<Generation> {
        let Some((t_first, n_first)) = self.first else {
            return Err(Error::other(
                format!(
                    "the server streamed no tokens (finish reason: {})",
                    self.finish.as_deref().unwrap_or("none")
                ),
                Some(format!(
                    "check the prompt and max tokens; api `{}`",
                    api.name()
                )),
            ));
        };
        let tokens = self.server_tokens.unwrap_or(self.count);
        let span = self.last - t_first;
        let decode =
            (self.count > n_first && span > 0.0).then(|| (self.count - n_first) as f64 / span);
        let accept = self
            .verify_ct
            .filter(|&c| c > 0)
            .map(|c| tokens as f64 / c as f64);
        Ok(Generation {
            tokens,
            prompt_tokens: self.prompt_tokens,
            ttft_s: t_first,
            e2e_s: self.last,
            decode_tok_s: decode,
            server_decode_tok_s: self.server_rate,
            spec_verify_ct: self.verify_ct,
            accept_length: accept,
            finish_reason: self.finish,
            pieces: self.pieces,
            text: self.text,
        })
    }
}

/// One line (without its `\n`), at most [`MAX_LINE_BYTES`]; `None` at the end of the stream.
fn read_line(r: &mut impl BufRead) -> std::io::Result<Option<String>> {
    let mut buf = Vec::new();
    let n = r
        .by_ref()
        .take(MAX_LINE_BYTES + 1)
        .read_until(b'\n', &mut buf)?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() != Some(&b'\n') && n as u64 > MAX_LINE_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a line longer than {} MiB", MAX_LINE_BYTES >> 20),
        ));
    }
    while matches!(buf.last(), Some(b'\n' | b'\r')) {
        buf.pop();
    }
    Ok(Some(String::from_utf8_lossy(&buf).into_owned()))
}

/// A stream that failed: a stall or the deadline names the URL, the time and the bytes so far.
fn stream_error(
    url: &str,
    e: std::io::Error,
    got: u64,
    start: Instant,
    deadline: Duration,
) -> Error {
    if e.kind() != std::io::ErrorKind::TimedOut {
        return Error::io(
            format!("reading the stream from {url} failed after {got} bytes"),
            e,
        );
    }
    let elapsed = start.elapsed();
    let what = if elapsed + Duration::from_millis(500) >= deadline {
        format!("did not finish within {} s", deadline.as_secs())
    } else {
        format!(
            "stalled: no data for {} s",
            deadline.min(IDLE_TIMEOUT).as_secs()
        )
    };
    Error::other(
        format!("the response from {url} {what} ({got} bytes received)"),
        Some(
            "a slow server needs a longer `--request-timeout`; a stuck one needs a restart".into(),
        ),
    )
}

fn clip(s: &str) -> String {
    s.chars().take(200).collect()
}

fn http_error(url: &str, e: ureq::Error, deadline: Duration) -> Error {
    match e {
        ureq::Error::Status(code, resp) => {
            let body = resp.into_string().unwrap_or_default();
            Error::other(
                format!("POST {url} answered HTTP {code}: {}", clip(body.trim())),
                None,
            )
        }
        ureq::Error::Transport(t) if t.kind() == ureq::ErrorKind::Io => Error::other(
            format!("no answer from {url} within {} s: {t}", deadline.as_secs()),
            Some("the server accepted the connection but did not answer; is it stuck? (`--request-timeout` sets the limit)".into()),
        ),
        ureq::Error::Transport(t) => Error::other(
            format!("cannot reach {url}: {t}"),
            Some("is the server running? start it with `kiln serve`".into()),
        ),
    }
}

/// GET `url` with a short timeout: the status code and body, or `None` when nothing answered.
pub fn get(url: &str, timeout: Duration) -> Option<(u16, String)> {
    let agent = ureq::AgentBuilder::new().timeout(timeout).build();
    match agent.get(url).call() {
        Ok(r) => {
            let code = r.status();
            Some((code, r.into_string().unwrap_or_default()))
        }
        Err(ureq::Error::Status(code, r)) => Some((code, r.into_string().unwrap_or_default())),
        Err(ureq::Error::Transport(_)) => None,
    }
}
