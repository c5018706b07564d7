//! Streaming generation clients: SGLang's native `/generate` and OpenAI `/v1/completions` (SSE,
//! read line by line). One request in, one measured `Generation` out. Tokens are counted from
//! what was streamed; the server's own count is cross-checked, and a count above `max_tokens`
//! is refused. Redirects to another origin are not followed; same-origin ones keep the method.

use std::io::{BufRead, BufReader, Read};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::generation::Stream;
use super::protocol;
use crate::error::{Error, Result};
use crate::oci::auth::same_origin;

pub use super::generation::{Generation, Request};
pub use crate::recipe::Api;

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

/// Stream one completion from `base` (e.g. `http://127.0.0.1:30000`).
pub fn generate(base: &str, api: Api, req: &Request) -> Result<Generation> {
    generate_with(base, api, req, &[])
}

/// [`generate`] with per-request fields added to the body (`kiln tune`'s per-request knobs:
/// top-level for OpenAI, in `sampling_params` for SGLang).
pub fn generate_with(
    base: &str,
    api: Api,
    req: &Request,
    extra: &[(String, Value)],
) -> Result<Generation> {
    generate_watched(base, api, req, extra, &mut |_, _| {})
}

/// [`generate_with`], telling `watch` the tokens streamed so far and the seconds since the
/// request after each chunk (a live line of the run).
pub fn generate_watched(
    base: &str,
    api: Api,
    req: &Request,
    extra: &[(String, Value)],
    watch: &mut dyn FnMut(u64, f64),
) -> Result<Generation> {
    let base = base.trim_end_matches('/');
    let (path, body) = (api.spec().endpoint, protocol::request(api, req, extra));
    let url = format!("{base}{path}");
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(5))
        .timeout_read(req.timeout.min(IDLE_TIMEOUT))
        .timeout(req.timeout)
        .redirects(0)
        .build();
    let start = Instant::now();
    let body = body.to_string();
    super::sent::one_more(base);
    let (resp, url) = follow(&url, |u| {
        agent
            .post(u)
            .set("Content-Type", "application/json")
            .send_string(&body)
            .map_err(|e| http_error(u, e, req.timeout))
    })?;
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
        // An event with empty data (allowed by the SSE spec; proxies send them to keep a
        // stream alive) carries no chunk.
        if data.is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(data).map_err(|e| {
            Error::other(
                format!("{url} sent a chunk that is not JSON ({e}): {}", clip(data)),
                None,
            )
        })?;
        if let Some(err) = v.get("error") {
            return Err(Error::other(
                format!(
                    "{url} reported an error mid-stream: {}",
                    clip(&err.to_string())
                ),
                None,
            ));
        }
        let now = start.elapsed().as_secs_f64();
        protocol::chunk(api, &mut s, &v, now);
        watch(s.count(), now);
    }
    s.finish(api, req.max_tokens)
}

/// Redirect hops followed within one origin.
const MAX_REDIRECTS: usize = 5;

/// Send `send(url)`, following a redirect only within the origin (scheme, host and port) and
/// with the same method and body; a redirect elsewhere is an error naming its `Location`.
fn follow(
    url: &str,
    send: impl Fn(&str) -> Result<ureq::Response>,
) -> Result<(ureq::Response, String)> {
    let mut url = url.to_string();
    for _ in 0..=MAX_REDIRECTS {
        let resp = send(&url)?;
        if !(300..400).contains(&resp.status()) {
            return Ok((resp, url));
        }
        let code = resp.status();
        let location = resp.header("Location").unwrap_or("").to_string();
        let next = resolve(&url, &location);
        match next {
            Some(n) if same_origin(&n, &url) => url = n,
            _ => {
                return Err(Error::other(
                    format!(
                        "{url} answered HTTP {code} redirecting to {}: not followed (another origin)",
                        crate::bench::wire::escape_controls(&location)
                    ),
                    Some("point --url at the server itself; kiln does not report another host's numbers as this one's".into()),
                ))
            }
        }
    }
    Err(Error::other(
        format!("{url}: more than {MAX_REDIRECTS} redirects"),
        Some("point --url at the server itself".into()),
    ))
}

/// `location` resolved against `base` (RFC 3986 reference resolution, the `url` crate); None
/// for an empty or unparsable one.
fn resolve(base: &str, location: &str) -> Option<String> {
    if location.trim().is_empty() {
        return None;
    }
    let joined = url::Url::parse(base).ok()?.join(location).ok()?;
    Some(joined.into())
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

/// At most 200 characters of a server's text, control characters escaped.
fn clip(s: &str) -> String {
    super::wire::escape_controls(&s.chars().take(200).collect::<String>())
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
        ureq::Error::Transport(t) => match Unanswered::of(&t) {
            Unanswered::HeaderTooLarge(why) => header_too_large(url, &why),
            Unanswered::TimedOut => Error::other(
                format!("no answer from {url} within {} s: {t}", deadline.as_secs()),
                Some("the server accepted the connection but did not answer; is it stuck? (`--request-timeout` sets the limit)".into()),
            ),
            Unanswered::Broken => Error::other(
                format!("{url} ended the connection without a whole answer: {t}"),
                Some("did the server crash? its log says why".into()),
            ),
            Unanswered::Unreachable => Error::other(
                format!("cannot reach {url}: {t}"),
                Some("is the server running? start it with `kiln serve`, and point --url at its port".into()),
            ),
        },
    }
}

/// Why a request got no answer kiln can read, from ureq's transport error.
enum Unanswered {
    /// A header line over ureq's 100 KiB, or over 100 header fields: refused at once, not a
    /// wait (why, in ureq's words).
    HeaderTooLarge(String),
    /// Nothing (or not all of the header) within the deadline.
    TimedOut,
    /// The connection ended or broke before the header was whole.
    Broken,
    /// No connection (refused, no such host, a bad URL).
    Unreachable,
}

impl Unanswered {
    fn of(t: &ureq::Transport) -> Unanswered {
        let io = std::iter::successors(std::error::Error::source(t), |e| e.source())
            .find_map(|e| e.downcast_ref::<std::io::Error>());
        let said = io.map(ToString::to_string).unwrap_or_default();
        if t.kind() == ureq::ErrorKind::BadHeader
            && t.message().is_some_and(|m| m.contains("header fields"))
        {
            return Unanswered::HeaderTooLarge(t.message().unwrap_or_default().to_string());
        }
        if said.starts_with("header field longer than") {
            return Unanswered::HeaderTooLarge(said);
        }
        match (t.kind(), io.map(std::io::Error::kind)) {
            (
                ureq::ErrorKind::Io,
                Some(std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock),
            ) => Unanswered::TimedOut,
            (ureq::ErrorKind::Io, _) => Unanswered::Broken,
            _ => Unanswered::Unreachable,
        }
    }
}

/// The error of an answer whose header kiln does not read to its end.
fn header_too_large(url: &str, why: &str) -> Error {
    Error::other(
        format!("{url} answered with a header larger than kiln reads ({why})"),
        Some("kiln reads header lines of up to 100 KiB and up to 100 of them; is this an LLM server, or a proxy in front of it that pads its answers?".into()),
    )
}

/// GET `url` with a short timeout: the status code and body, or `None` when nothing answered.
pub fn get(url: &str, timeout: Duration) -> Option<(u16, String)> {
    answer(url, timeout).ok().flatten()
}

/// [`get`], with the answer kiln refuses to read (a header too large) as an error: no later
/// poll will read it either.
pub fn answer(url: &str, timeout: Duration) -> Result<Option<(u16, String)>> {
    Ok(probe(url, timeout)?.map(|a| (a.status, a.body)))
}

/// What a GET was answered with.
struct Answer {
    status: u16,
    /// The `Server` header.
    server: Option<String>,
    body: String,
}

/// GET `url`: what answered (`None`: nothing did), or the error of an answer kiln refuses to
/// read (a header too large is said as one, not as silence).
fn probe(url: &str, timeout: Duration) -> Result<Option<Answer>> {
    let agent = ureq::AgentBuilder::new()
        .timeout(timeout)
        .redirects(0)
        .build();
    let refused = std::cell::Cell::new(false);
    let sent = follow(url, |u| {
        agent.get(u).call().or_else(|e| match e {
            ureq::Error::Status(_, r) => Ok(r),
            ureq::Error::Transport(t) => match Unanswered::of(&t) {
                Unanswered::HeaderTooLarge(why) => {
                    refused.set(true);
                    Err(header_too_large(u, &why))
                }
                _ => Err(Error::other(t.to_string(), None)),
            },
        })
    });
    let r = match sent {
        Ok((r, _)) => r,
        Err(e) if refused.get() => return Err(e),
        Err(_) => return Ok(None),
    };
    Ok(Some(Answer {
        status: r.status(),
        server: r.header("Server").map(str::to_string),
        body: r.into_string().unwrap_or_default(),
    }))
}

/// Which API the server at `base` speaks, and how that was told: SGLang answers
/// `/get_model_info` with its `model_path`; llama.cpp's llama-server names itself in the
/// `Server` header; any other OpenAI-compatible server lists its models at `/v1/models`.
/// A server none of these tell apart is an error naming the `--api` to pass.
pub fn detect(base: &str) -> Result<(Api, String)> {
    let base = base.trim_end_matches('/');
    let timeout = Duration::from_secs(10);
    let json = |a: &Answer| serde_json::from_str::<Value>(&a.body).ok();
    let info_url = format!("{base}/get_model_info");
    let models_url = format!("{base}/v1/models");
    let info = probe(&info_url, timeout)?;
    if let Some(a) = &info {
        if a.status == 200 && json(a).is_some_and(|v| v.get("model_path").is_some()) {
            return Ok((
                Api::Sglang,
                format!("{info_url} answered with a model_path"),
            ));
        }
    }
    let models = probe(&models_url, timeout)?;
    let server = info
        .iter()
        .chain(models.iter())
        .find_map(|a| a.server.clone());
    if let Some(s) = server.as_deref().filter(|s| s.starts_with("llama.cpp")) {
        return Ok((Api::Openai, format!("its Server header says {}", clip(s))));
    }
    if let Some(a) = &models {
        if a.status == 200 && json(a).is_some_and(|v| v.get("data").is_some_and(Value::is_array)) {
            return Ok((Api::Openai, format!("{models_url} lists its models")));
        }
    }
    if info.is_none() && models.is_none() {
        return Err(Error::other(
            format!("cannot reach {base}: nothing answered {info_url} or {models_url}"),
            Some("is the server running? start it with `kiln serve`, or point --url at it".into()),
        ));
    }
    let said = |a: &Option<Answer>| {
        a.as_ref()
            .map_or("no answer".into(), |a| format!("HTTP {}", a.status))
    };
    Err(Error::usage(
        format!(
            "cannot tell which API {base} speaks: /get_model_info gave {}, /v1/models gave {}{}",
            said(&info),
            said(&models),
            server.map_or(String::new(), |s| format!(", Server: {}", clip(&s)))
        ),
        Some(
            "pass `--api sglang` (POST /generate) or `--api openai` (POST /v1/completions)".into(),
        ),
    ))
}
