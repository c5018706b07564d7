//! Proof that cannot be forged (issue 19): every case of the hostile-input audit, as a captured
//! log judged by `kiln serve --log` or a small loopback server written here, asserting the honest
//! verdict and exit code; plus a deterministic property test: no line of user text built from the
//! shipped signature patterns, rendered in the server's own request-log format, turns a verdict
//! that is not active into active.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::common::Workspace;

/// A recipe `r` with one profile `p`: `cmd` + `args`, the given signature set, extra lines.
fn recipe(ws: &Workspace, sigs: &str, args: &[&str], extra: &str) -> PathBuf {
    let args = args
        .iter()
        .map(|a| format!("{a:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    ws.write(
        "r.toml",
        &format!(
            "[recipe]\nname = \"r\"\n\n[profile.p]\ncmd = [\"server\"]\nargs = [{args}]\nsignatures = \"{sigs}\"\n{extra}"
        ),
    )
}

/// `kiln serve r.toml --log LOG [--metrics M] --json`: (exit code, verdicts by feature, stdout).
fn judge(ws: &Workspace, log: &str, metrics: Option<&str>) -> (i32, serde_json::Value, String) {
    let log = ws.write("captured.log", log);
    let mut cmd = ws.kiln();
    cmd.args(["serve", "r.toml", "--log"])
        .arg(&log)
        .arg("--json");
    if let Some(m) = metrics {
        cmd.arg("--metrics").arg(ws.write("metrics.txt", m));
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let v = crate::reporter::json_event(&text, "verdicts");
    let mut by = serde_json::Map::new();
    for verdict in v["verdicts"].as_array().unwrap() {
        by.insert(
            verdict["feature"].as_str().unwrap().to_string(),
            verdict.clone(),
        );
    }
    (out.status.code().unwrap(), by.into(), text)
}

const LLAMA_HONEST: &str = "\
0.00.100.000 I cmn  common_param: system_info: n_threads = 1 (n_threads_batch = 1) / 16 | CPU : SSE3 = 1 |
0.00.200.000 I llama_context: flash_attn            = disabled
0.00.300.000 I srv  llama_server: listening on http://127.0.0.1:30090
0.01.000.000 I slot print_timing: id  0 | task 0 | draft acceptance = 0.10000 (   10 accepted /   100 generated), mean len =  1.10
";

const INJECTED: &str = "please repeat: flash_attn = 1 and n_threads = 2 and draft acceptance = 1.0 (100000 accepted / 100000 generated)";

fn llama_recipe(ws: &Workspace) {
    recipe(
        ws,
        "llama-server",
        &["-fa", "on", "-t", "2", "-md", "draft.gguf"],
        "",
    );
}

#[test]
fn a_request_log_line_cannot_turn_fell_back_active() {
    let ws = Workspace::new();
    llama_recipe(&ws);
    let forged = format!(
        "{LLAMA_HONEST}srv log_server_r: request: {{\"prompt\":\"{INJECTED}\"}}\n\
         0.01.100.000 D srv  log_server_r: request:  {{\"prompt\":\"{INJECTED}\"}}\n\
         0.01.100.001 D srv  log_server_r: response: {{\"content\":\"0.01.100.002 I llama_context: flash_attn = enabled\"}}\n\
         flash_attn = 1\n"
    );
    for log in [LLAMA_HONEST.to_string(), forged] {
        let (code, v, text) = judge(&ws, &log, None);
        assert_eq!(code, 1, "{text}");
        assert_eq!(v["flash-attn"]["status"], "fell_back", "{text}");
        assert_eq!(
            v["flash-attn"]["evidence"],
            "0.00.200.000 I llama_context: flash_attn            = disabled"
        );
        assert_eq!(v["threads"]["status"], "fell_back", "{text}");
        assert_eq!(v["speculative"]["status"], "fell_back", "{text}");
        assert!(
            v["speculative"]["reason"]
                .as_str()
                .unwrap()
                .starts_with("10/100 draft tokens accepted"),
            "{text}"
        );
    }
}

#[test]
fn a_positive_and_a_negative_line_are_conflicting_and_fail() {
    let ws = Workspace::new();
    recipe(&ws, "llama-server", &["-fa", "on"], "");
    let log = "0.00.200.000 I llama_context: flash_attn            = enabled\n\
               0.00.201.000 I llama_context: flash_attn            = disabled\n";
    let (code, v, text) = judge(&ws, log, None);
    assert_eq!(code, 2, "{text}");
    assert_eq!(v["flash-attn"]["status"], "conflicting");
    assert_eq!(
        v["flash-attn"]["evidence"],
        "0.00.200.000 I llama_context: flash_attn            = enabled | against: 0.00.201.000 I llama_context: flash_attn            = disabled"
    );
}

#[test]
fn a_line_that_starts_like_kilns_header_moves_no_boundary_in_a_capture() {
    let ws = Workspace::new();
    llama_recipe(&ws);
    let log = format!(
        "=== kiln serve r --profile p [launch 0]: server\n{LLAMA_HONEST}=== kiln serve r --profile p: model output\n"
    );
    let (code, v, text) = judge(&ws, &log, None);
    assert_eq!(code, 1, "{text}");
    assert_eq!(v["flash-attn"]["status"], "fell_back", "{text}");
    assert_eq!(v["threads"]["status"], "fell_back", "{text}");
}

#[test]
fn glued_llama_entries_are_split_on_the_logger_prefix() {
    // The H200 capture's glued line: the acceptance count after a debug line without newline.
    let ws = Workspace::new();
    recipe(&ws, "llama-server", &["-md", "draft.gguf"], "");
    let log = "1.07.920.927 D No parser definition detected, assuming pure content parser.1.07.920.934 I slot print_timing: id  0 | task 8369 | draft acceptance = 0.00000 (    0 accepted / 16340 generated), mean len =  1.00\n";
    let (code, v, text) = judge(&ws, log, None);
    assert_eq!(code, 1, "{text}");
    assert_eq!(v["speculative"]["status"], "fell_back", "{text}");
    assert_eq!(
        v["speculative"]["evidence"],
        "1.07.920.934 I slot print_timing: id  0 | task 8369 | draft acceptance = 0.00000 (    0 accepted / 16340 generated), mean len =  1.00"
    );
}

#[test]
fn metrics_counters_that_cannot_be_true_are_unknown() {
    let ws = Workspace::new();
    recipe(&ws, "llama-server", &["-md", "draft.gguf"], "");
    let a = "llamacpp:spec_decode_num_accepted_tokens_total";
    let d = "llamacpp:spec_decode_num_draft_tokens_total";
    for (metrics, why) in [
        (format!("{a} 500\n{d} 100\n"), "500 is more than the 100"),
        (format!("{a} +Inf\n{d} 100\n"), "is +Inf"),
        (format!("{a} -5\n{d} 100\n"), "is -5"),
    ] {
        let (code, v, text) = judge(&ws, "", Some(&metrics));
        assert_eq!(code, 1, "{text}");
        assert_eq!(v["speculative"]["status"], "unknown", "{metrics}: {text}");
        assert!(
            v["speculative"]["reason"].as_str().unwrap().contains(why),
            "{text}"
        );
    }
    // A series with other labels is not summed in: 10 of 100, fell back.
    let metrics = format!("{a} 10\n{a}{{slot=\"1\"}} 90\n{d} 100\n");
    let (_, v, text) = judge(&ws, "", Some(&metrics));
    assert_eq!(v["speculative"]["status"], "fell_back", "{text}");
    assert!(
        v["speculative"]["reason"]
            .as_str()
            .unwrap()
            .starts_with("10/100 draft tokens accepted"),
        "{text}"
    );
}

const SGLANG_START: &str = "\
[2026-11-30 08:41:40] server_args=ServerArgs(model_path='m', tp_size=2, attention_backend='flashinfer', enable_torch_symm_mem=True)
[2026-11-30 08:41:45 TP0] Load weight begin.
[2026-11-30 08:41:50 TP0] Load weight end.
[2026-11-30 08:42:00] The server is fired up and ready to roll!
";

#[test]
fn sglang_symm_mem_is_never_active_without_proof() {
    let ws = Workspace::new();
    // TP=2, no disabling line: SGLang logs nothing positive, so unknown, not active.
    recipe(
        &ws,
        "sglang-0.5.9",
        &["--enable-torch-symm-mem", "--tp-size", "2"],
        "api = \"sglang\"\n",
    );
    let (code, v, text) = judge(&ws, SGLANG_START, None);
    assert_eq!(code, 1, "{text}");
    assert_eq!(v["torch-symm-mem"]["status"], "unknown", "{text}");
    // A lone `KeyError: 12` (user text, no traceback) is not a crash.
    let log = format!("{SGLANG_START}KeyError: 12\n[2026-11-30 08:42:01] Receive: obj=GenerateReqInput(text='KeyError: 12')\n");
    let (code, v, text) = judge(&ws, &log, None);
    assert_eq!(code, 1, "{text}");
    assert_eq!(v["torch-symm-mem"]["status"], "unknown", "{text}");
    // TP=1 (the default): predicted fell back from the launch itself.
    recipe(
        &ws,
        "sglang-0.5.9",
        &["--enable-torch-symm-mem"],
        "api = \"sglang\"\n",
    );
    let (code, v, text) = judge(&ws, SGLANG_START, None);
    assert_eq!(code, 1, "{text}");
    assert_eq!(v["torch-symm-mem"]["status"], "fell_back", "{text}");
    assert!(
        v["torch-symm-mem"]["reason"].as_str().unwrap().starts_with(
            "predicted: TP=1: SGLang creates the communicator only when world_size > 1"
        ),
        "{text}"
    );
    assert_eq!(
        v["torch-symm-mem"]["evidence"],
        "from the launch: --tp-size not given (the default)"
    );
    // Multicast disabled in the profile's environment: predicted fell back too.
    recipe(
        &ws,
        "sglang-0.5.9",
        &["--enable-torch-symm-mem", "--tp-size", "2"],
        "api = \"sglang\"\nenv = { TORCH_SYMM_MEM_DISABLE_MULTICAST = \"1\" }\n",
    );
    let (_, v, text) = judge(&ws, SGLANG_START, None);
    assert_eq!(v["torch-symm-mem"]["status"], "fell_back", "{text}");
}

#[test]
fn a_resolved_configuration_echo_is_configured_not_active() {
    let ws = Workspace::new();
    recipe(
        &ws,
        "sglang-0.5.9",
        &["--attention-backend", "flashinfer"],
        "api = \"sglang\"\n",
    );
    let (code, v, text) = judge(&ws, SGLANG_START, None);
    assert_eq!(code, 1, "{text}");
    assert_eq!(v["attention-backend"]["status"], "configured", "{text}");
}

#[test]
fn sglang_accept_len_one_is_no_speculation() {
    let ws = Workspace::new();
    recipe(
        &ws,
        "sglang-0.5.9",
        &["--speculative-algorithm", "EAGLE3"],
        "api = \"sglang\"\n",
    );
    let batch = |len: &str| {
        format!("[2026-11-30 08:43:00 TP0] Decode batch. #running-req: 1, #token: 108, token usage: 0.00, accept len: {len}, accept rate: 0.00, cuda graph: True, gen throughput (token/s): 40.00, #queue-req: 0, \n")
    };
    let log = format!("{SGLANG_START}{}{}", batch("1.00"), batch("1.00"));
    let (code, v, text) = judge(&ws, &log, None);
    assert_eq!(code, 1, "{text}");
    assert_eq!(v["speculative-decoding"]["status"], "fell_back", "{text}");
    assert!(
        v["speculative-decoding"]["reason"]
            .as_str()
            .unwrap()
            .contains("no draft token accepted"),
        "{text}"
    );
    let (code, v, text) = judge(&ws, &format!("{SGLANG_START}{}", batch("2.17")), None);
    assert_eq!(code, 0, "{text}");
    assert_eq!(v["speculative-decoding"]["status"], "active", "{text}");
}

#[test]
fn control_characters_from_a_log_reach_the_terminal_escaped() {
    let ws = Workspace::new();
    recipe(&ws, "llama-server", &["-t", "2"], "");
    ws.write(
        "captured.log",
        "0.00.100.000 I cmn  common_param: system_info: n_threads = 1 \u{1b}]0;owned\u{7}\u{1b}[2J |\n",
    );
    let out = ws
        .kiln()
        .args(["serve", "r.toml", "--log", "captured.log"])
        .output()
        .unwrap();
    let all = [out.stdout, out.stderr].concat();
    let text = String::from_utf8_lossy(&all);
    assert!(!all.contains(&0x1b) && !all.contains(&0x07), "{text:?}");
    assert!(
        text.contains("n_threads = 1 \\u{1b}]0;owned\\u{7}\\u{1b}[2J |"),
        "{text}"
    );
}

// ---- loopback servers -------------------------------------------------------------------------

/// What a loopback server answers: (status line + headers, body chunks).
type Answer = (String, Vec<String>);

/// A loopback HTTP server answering `handle(method, path, body)`; counts the requests.
fn http(
    handle: impl Fn(&str, &str, &str) -> Answer + Send + Sync + 'static,
) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    let handle = Arc::new(handle);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let handle = handle.clone();
            seen.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || answer(stream, &*handle));
        }
    });
    (port, count)
}

fn answer(mut stream: TcpStream, handle: &dyn Fn(&str, &str, &str) -> Answer) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut first = String::new();
    if reader.read_line(&mut first).is_err() {
        return;
    }
    let mut length = 0;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    let mut parts = first.split(' ');
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (head, chunks) = handle(method, path, &String::from_utf8_lossy(&body));
    let _ = write!(stream, "{head}\r\nConnection: close\r\n\r\n");
    for c in chunks {
        let _ = stream.write_all(c.as_bytes());
        let _ = stream.flush();
    }
}

fn max_tokens(body: &str) -> usize {
    serde_json::from_str::<serde_json::Value>(body)
        .map_or(8, |v| v["max_tokens"].as_u64().unwrap_or(8) as usize)
}

/// An OpenAI-style completion stream of `n` tokens `w0 w1 …`, `per_chunk` tokens a chunk, the
/// usage saying `usage` (default: `n`).
fn stream(n: usize, per_chunk: usize, usage: Option<usize>) -> Answer {
    let tokens: Vec<String> = (0..n).map(|i| format!("w{i} ")).collect();
    let mut chunks: Vec<String> = tokens
        .chunks(per_chunk)
        .map(|c| {
            format!(
                "data: {}\n\n",
                serde_json::json!({"choices": [{"text": c.concat(), "finish_reason": null}]})
            )
        })
        .collect();
    chunks.push(format!(
        "data: {}\n\ndata: [DONE]\n\n",
        serde_json::json!({"choices": [{"text": "", "finish_reason": "length"}],
            "usage": {"completion_tokens": usage.unwrap_or(n), "prompt_tokens": 3}})
    ));
    (
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream".into(),
        chunks,
    )
}

fn not_found() -> Answer {
    ("HTTP/1.1 404 Not Found\r\nContent-Length: 0".into(), vec![])
}

fn ok_json(v: &serde_json::Value) -> Answer {
    let body = v.to_string();
    (
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}",
            body.len()
        ),
        vec![body],
    )
}

/// A completion server: `/health` answers 200; completions stream `limit(max_tokens)` tokens.
fn completions(per_chunk: usize, limit: fn(usize) -> usize) -> u16 {
    http(move |_, path, body| match path {
        "/health" => ok_json(&serde_json::json!({"status": "ok"})),
        "/v1/completions" => stream(limit(max_tokens(body)), per_chunk, None),
        _ => not_found(),
    })
    .0
}

fn two_url_profiles(ws: &Workspace, a: u16, b: u16) {
    ws.write(
        "ab.toml",
        &format!(
            "[recipe]\nname = \"ab\"\n\n\
             [profile.base]\ncmd = [\"sleep\", \"600\"]\nurl = \"http://127.0.0.1:{a}\"\napi = \"openai\"\n\n\
             [profile.cand]\ncmd = [\"sleep\", \"600\"]\nurl = \"http://127.0.0.1:{b}\"\napi = \"openai\"\nbaseline = \"base\"\n"
        ),
    );
}

#[test]
fn greedy_ab_compares_text_not_chunks_and_an_early_stop_is_wrong_output() {
    let one = completions(1, |n| n);
    let two = completions(2, |n| n);
    let ws = Workspace::new();
    two_url_profiles(&ws, one, two);
    let out = ws
        .kiln()
        .args(["verify", "ab.toml", "--profile", "cand"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("verdict: identical"), "{text}");

    // The candidate stops at token 40 of 64: past min_prefix, and still wrong output.
    let short = completions(1, |n| if n > 8 { 40 } else { n });
    two_url_profiles(&ws, one, short);
    let out = ws
        .kiln()
        .args(["verify", "ab.toml", "--profile", "cand"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("verdict: wrong output") && text.contains("\"<end>\""),
        "{text}"
    );
}

fn bench(ws: &Workspace, port: u16, extra: &[&str]) -> std::process::Output {
    ws.kiln()
        .args([
            "bench",
            "--api",
            "openai",
            "--runs",
            "1",
            "--warmup",
            "0",
            "--max-tokens",
            "64",
        ])
        .arg("--url")
        .arg(format!("http://127.0.0.1:{port}"))
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn the_bench_counts_what_it_received() {
    let ws = Workspace::new();
    // One piece claiming 8000 tokens: refused (more than max_tokens).
    let (port, _) = http(|_, _, _| stream(1, 1, Some(8000)));
    let out = bench(&ws, port, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("the server reported 8000 completion tokens (the server's usage) for a request of at most 64"),
        "{err}"
    );
    // One piece claiming 30: counted as 1, with a warning (which fails it under --strict).
    let (port, _) = http(|_, _, _| stream(1, 1, Some(30)));
    let out = bench(&ws, port, &["--json", "--strict"]);
    assert_eq!(out.status.code(), Some(1));
    let report = crate::reporter::json_event(&String::from_utf8_lossy(&out.stdout), "bench")
        ["report"]
        .clone();
    assert_eq!(report["runs"][0]["tokens"], 1);
    assert!(
        report["warnings"][0].as_str().unwrap().starts_with(
            "run 1: the server's usage says 30 completion tokens but the stream shows 1"
        ),
        "{report}"
    );
}

#[test]
fn redirects_to_another_origin_are_not_followed_and_same_origin_keeps_post() {
    let ws = Workspace::new();
    let (elsewhere, hits) = http(|_, _, _| stream(64, 1, None));
    let (port, _) = http(move |_, _, _| {
        (
            format!("HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:{elsewhere}/v1/completions\r\nContent-Length: 0"),
            vec![],
        )
    });
    let out = bench(&ws, port, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!(
            "redirecting to http://127.0.0.1:{elsewhere}/v1/completions: not followed"
        )),
        "{err}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the other host was asked");

    let (port, _) = http(|method, path, _| match (method, path) {
        ("POST", "/v1/completions") => (
            "HTTP/1.1 307 Temporary Redirect\r\nLocation: /v2/completions\r\nContent-Length: 0"
                .into(),
            vec![],
        ),
        ("POST", "/v2/completions") => stream(64, 1, None),
        _ => not_found(),
    });
    let out = bench(&ws, port, &[]);
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("Run 1/1: 64 tokens"));
}

/// A server that echoes what it generates into its own log, the way the audit's did: kiln's
/// readiness request puts a fake header and positive-looking text there. It is ready once its
/// start-up lines (the log's `listening on`) are written.
fn echoing_server(log: PathBuf) -> u16 {
    http(move |_, path, body| match path {
        "/health" if std::fs::read_to_string(&log).unwrap_or_default().contains("listening on") => {
            ok_json(&serde_json::json!({"status": "ok"}))
        }
        "/health" => ("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0".into(), vec![]),
        "/v1/completions" => {
            let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
            let _ = write!(
                f,
                "=== kiln serve r --profile p: echo\nllama_context: flash_attn            = enabled\nsystem_info: n_threads = 2 |\n"
            );
            stream(max_tokens(body), 1, None)
        }
        _ => not_found(),
    })
    .0
}

#[test]
fn live_the_launch_boundary_is_the_recorded_offset_and_echoed_text_proves_nothing() {
    let ws = Workspace::new();
    let log = ws.state().join("serve/r-p.log");
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    // An earlier launch in the same appended log said flash attention was on.
    std::fs::write(
        &log,
        "=== kiln serve r --profile p [launch 1]: earlier\n0.00.200.000 I llama_context: flash_attn            = enabled\n",
    )
    .unwrap();
    let port = echoing_server(log.clone());
    let startup = ws.write(
        "startup.txt",
        "0.00.100.000 I cmn  common_param: system_info: n_threads = 1 |\n0.00.200.000 I llama_context: flash_attn            = disabled\n0.00.300.000 I srv  llama_server: listening on http://127.0.0.1\n",
    );
    ws.write(
        "r.toml",
        &format!(
            "[recipe]\nname = \"r\"\n\n[profile.p]\ncmd = [\"sh\", \"-c\", \"cat \\\"$0\\\"; sleep 600\", {:?}]\nargs = [\"-fa\", \"on\", \"-t\", \"2\"]\nurl = \"http://127.0.0.1:{port}\"\napi = \"openai\"\nsignatures = \"llama-server\"\n",
            startup.display().to_string()
        ),
    );
    let out = ws
        .kiln()
        .args(["serve", "r.toml", "--detach", "--json"])
        .output()
        .unwrap();
    ws.kiln()
        .args(["serve", "r.toml", "--stop"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = crate::reporter::json_event(&text, "verdicts");
    let by = |id: &str| {
        v["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["feature"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(by("flash-attn")["status"], "fell_back", "{text}");
    assert_eq!(
        by("flash-attn")["evidence"],
        "0.00.200.000 I llama_context: flash_attn            = disabled"
    );
    assert_eq!(by("threads")["status"], "fell_back", "{text}");
    let written = std::fs::read_to_string(&log).unwrap();
    assert!(
        written.contains(
            "llama_context: flash_attn            = enabled\n=== kiln serve r --profile p [launch "
        ),
        "{written}"
    );
}

/// A server kiln starts (`sh -c 'sleep 600' llama-server ARGS`) whose /props and completions a
/// loopback server answers: the bench fingerprint holds its launch arguments.
#[test]
fn a_baseline_from_other_server_arguments_is_refused_naming_them() {
    let (port, _) = http(|_, path, body| match path {
        "/health" => ok_json(&serde_json::json!({"status": "ok"})),
        "/props" => ok_json(&serde_json::json!({
            "model_path": "/m.gguf", "total_slots": 1, "build_info": "b1",
            "default_generation_settings": {"n_ctx": 4096}
        })),
        "/v1/completions" => stream(max_tokens(body), 1, None),
        _ => not_found(),
    });
    let ws = Workspace::new();
    let profile = |name: &str, args: &str| {
        format!("[profile.{name}]\ncmd = [\"sh\", \"-c\", \"sleep 600\", \"llama-server\"]\nargs = [{args}]\nurl = \"http://127.0.0.1:{port}\"\napi = \"openai\"\n\n")
    };
    ws.write(
        "b.toml",
        &format!(
            "[recipe]\nname = \"b\"\n\n{}{}",
            profile("one", "\"-t\", \"1\""),
            profile("two", "\"-t\", \"2\", \"-fa\", \"on\"")
        ),
    );
    let serve = |p: &str| {
        let out = ws
            .kiln()
            .args(["serve", "b.toml", "--profile", p, "--detach"])
            .output()
            .unwrap();
        assert!(
            out.status.code().is_some_and(|c| c <= 1),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let stop = || {
        ws.kiln()
            .args(["serve", "b.toml", "--stop"])
            .output()
            .unwrap()
    };
    serve("one");
    let out = bench(&ws, port, &["--json"]);
    stop();
    // The JSON lines `bench --json` writes, and the one document earlier kilns wrote: both are
    // read as the same baseline.
    let stream = String::from_utf8_lossy(&out.stdout).into_owned();
    let base = ws.write("base.json", &stream);
    let report = crate::reporter::json_event(&stream, "bench")["report"].clone();
    let document = ws.write("doc.json", &serde_json::to_string_pretty(&report).unwrap());
    serve("two");
    let outs = [base, document].map(|b| bench(&ws, port, &["--baseline", b.to_str().unwrap()]));
    stop();
    for out in outs {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(
                "was measured on a different setup: server arguments: -fa (not set) → on, -t 1 → 2"
            ),
            "{err}"
        );
    }
}

/// The rule for signature-set writers, on every shipped set: its `[logger]` reads the real
/// capture's lines as logger entries, and its request-log lines as none.
#[test]
fn every_shipped_set_knows_its_servers_logger_lines() {
    use kiln::serve::signatures::Signatures;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (set, capture, user) in [
        ("llama-server", "tests/fixtures/gpu-llama/h200-run2/llama-cuda-tuned.log", "0.00.800.000 D srv  log_server_r: request:  {\"prompt\":\"0.00.800.001 I llama_context: flash_attn = enabled\"}"),
        ("sglang-0.5.9", "tests/fixtures/serve/sglang-0.5.9-symm-mem-fell-back-h200x2.log", "[2026-11-30 08:42:00] Receive: obj=GenerateReqInput(text='FlashInfer workspace initialized for rank 0')"),
        ("torch-symm-mem-probe", "tests/fixtures/serve/symm-mem-probe-h200x2-kiln.log", "RESULTS {\"multicast_ptr\": 7}"),
    ] {
        let sigs = Signatures::resolve(set, root).unwrap();
        let logger = sigs.logger.as_ref().unwrap_or_else(|| panic!("{set} has no [logger]"));
        let lines: Vec<String> = std::fs::read_to_string(root.join(capture))
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        let entries = logger.entries(&lines);
        assert!(entries.len() >= 2, "{set}: {entries:?}");
        assert!(
            entries.iter().all(|e| !e.message.starts_with("=== kiln")),
            "{set}: kiln's header is no logger line"
        );
        assert!(logger.entries(&[user.to_string()]).is_empty(), "{set}: {user}");
    }
}

// ---- the property test ------------------------------------------------------------------------

/// xorshift64*: a deterministic generator, no crate needed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[(self.next() % v.len() as u64) as usize]
    }
}

/// Every pattern of a shipped signature set's features (and its ready lines).
fn patterns(set: &toml::Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut add = |v: &toml::Value| match v {
        toml::Value::String(s) => out.push(s.clone()),
        toml::Value::Array(a) => {
            for x in a {
                match x {
                    toml::Value::String(s) => out.push(s.clone()),
                    toml::Value::Table(t) => {
                        if let Some(toml::Value::String(s)) = t.get("match") {
                            out.push(s.clone());
                        }
                    }
                    _ => {}
                }
            }
        }
        toml::Value::Table(t) => {
            if let Some(toml::Value::String(s)) = t.get("match") {
                out.push(s.clone());
            }
        }
        _ => {}
    };
    if let Some(r) = set.get("ready") {
        add(r);
    }
    for f in set
        .get("feature")
        .and_then(|f| f.as_array())
        .into_iter()
        .flatten()
    {
        for key in [
            "active",
            "fell_back",
            "crashed",
            "configured",
            "ratio",
            "level",
        ] {
            if let Some(v) = f.get(key) {
                add(v);
            }
        }
    }
    out
}

/// A text that a pattern matches, roughly: regex syntax dropped for plausible values.
fn render(pattern: &str, rng: &mut Rng) -> String {
    let mut s = pattern.to_string();
    for (from, to) in [
        ("{value}", "2"),
        ("\\s+", "  "),
        ("\\s*", " "),
        ("\\d+", "100000"),
        ("\\S+", "12.0"),
        ("\\w+", "llama_context"),
        ("[0-9.]+", "1.0"),
        ("[1-9][0-9]*", "7"),
        ("\\b", ""),
        ("\\", ""),
        ("^", ""),
        ("$", ""),
        ("(?:", "("),
        ("?", ""),
        ("*", ""),
        ("+", ""),
    ] {
        s = s.replace(from, to);
    }
    // `(a|b)` → one alternative.
    while let (Some(open), Some(close)) = (s.find('('), s.find(')')) {
        if close < open {
            s.replace_range(close..=close, "");
            continue;
        }
        let inner = s[open + 1..close].to_string();
        let alts: Vec<&str> = inner.split('|').collect();
        let alt = rng.pick(&alts).to_string();
        s.replace_range(open..=close, &alt);
    }
    s.replace(['[', ']'], "")
}

/// One line of user text in the server's own request-log format: a prompt or an output.
fn request_log(set: &str, text: &str, rng: &mut Rng) -> String {
    let t = format!(
        "{}.{:02}.{:03}.{:03}",
        rng.next() % 9,
        rng.next() % 60,
        rng.next() % 1000,
        rng.next() % 1000
    );
    let json = serde_json::Value::String(text.to_string()).to_string();
    let py = format!("{text:?}").replace('"', "'");
    match (set, rng.next() % 3) {
        ("llama-server", 0) => format!("{t} D srv  log_server_r: request:  {{\"prompt\":{json}}}"),
        ("llama-server", 1) => format!("{t} D srv  log_server_r: response: {{\"content\":{json}}}"),
        ("llama-server", _) => {
            format!("{t} D srv  handle_compl: converted request: {{\"prompt\":{json}}}")
        }
        (_, 0) => format!(
            "[2026-11-30 08:42:0{} TP0] Receive: obj=GenerateReqInput(text={py}, rid='r')",
            rng.next() % 10
        ),
        (_, 1) => format!(
            "[2026-11-30 08:42:0{}] Finish: obj=GenerateReqInput(rid='r'), out={{'text': {py}}}",
            rng.next() % 10
        ),
        (_, _) => format!(
            "[2026-11-30 08:42:0{} DP0 TP1] Receive: obj=GenerateReqInput(text={py})",
            rng.next() % 10
        ),
    }
}

/// An honest launch: (signature set, profile args, env, log).
type Honest = (
    &'static str,
    Vec<&'static str>,
    Vec<(&'static str, &'static str)>,
    String,
);

/// Honest launches whose verdicts are not all active.
fn honest_logs() -> Vec<Honest> {
    let fixture = |p: &str| {
        std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures")
                .join(p),
        )
        .unwrap()
    };
    vec![
        (
            "llama-server",
            vec!["-fa", "on", "-t", "2", "-md", "d.gguf", "-ngl", "99"],
            vec![],
            LLAMA_HONEST.to_string(),
        ),
        (
            "llama-server",
            vec!["-fa", "on", "-t", "2", "-md", "d.gguf"],
            vec![],
            String::new(),
        ),
        (
            "llama-server",
            vec!["-md", "d.gguf"],
            vec![],
            fixture("gpu-llama/h200-run1/llama-cuda-spec.log"),
        ),
        (
            "sglang-0.5.9",
            vec![
                "--enable-torch-symm-mem",
                "--tp-size",
                "2",
                "--enable-flashinfer-allreduce-fusion",
                "--attention-backend",
                "flashinfer",
                "--speculative-algorithm",
                "EAGLE3",
            ],
            vec![],
            SGLANG_START.to_string(),
        ),
        (
            "sglang-0.5.9",
            vec!["--enable-torch-symm-mem", "--tp-size", "2"],
            vec![],
            fixture("serve/sglang-0.5.9-symm-mem-fell-back-h200x2.log"),
        ),
        (
            "sglang-0.5.9",
            vec!["--enable-torch-symm-mem"],
            vec![],
            SGLANG_START.to_string(),
        ),
        (
            "sglang-0.5.9",
            vec!["--enable-torch-symm-mem", "--tp-size", "4"],
            vec![("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")],
            SGLANG_START.to_string(),
        ),
        (
            "torch-symm-mem-probe",
            vec!["--enable-torch-symm-mem"],
            vec![],
            fixture("serve/symm-mem-probe-h200x2-kiln.log"),
        ),
    ]
}

#[test]
fn no_user_text_built_from_any_shipped_pattern_turns_a_verdict_active() {
    use kiln::recipe::Profile;
    use kiln::serve::signatures::Signatures;
    use kiln::serve::verdict::{judge, Evidence};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes/signatures");
    let mut texts: Vec<String> = Vec::new();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let set: toml::Value = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        names.push(set["name"].as_str().unwrap().to_string());
        for p in patterns(&set) {
            texts.push(p.clone());
            for _ in 0..3 {
                texts.push(render(&p, &mut rng));
            }
        }
    }
    assert!(
        names.len() >= 3 && texts.len() > 100,
        "{names:?}: {} texts",
        texts.len()
    );
    let mut checked = 0;
    for (set, args, env, log) in honest_logs() {
        let sigs = Signatures::resolve(set, &dir).unwrap();
        let profile = Profile {
            cmd: vec!["server".into()],
            args: args.iter().map(|a| (*a).to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect(),
            ..Profile::default()
        };
        let lines: Vec<String> = log.lines().map(String::from).collect();
        let verdicts = |lines: &[String]| {
            let ev = Evidence {
                log: lines,
                after_traffic: true,
                ..Evidence::default()
            };
            judge(&sigs, &profile, &ev)
        };
        let honest = verdicts(&lines);
        assert!(
            honest.iter().any(|v| !v.status.proven_active()),
            "{set}: {honest:?}"
        );
        for _ in 0..300 {
            // One to three lines of user text, each built from one or two patterns, appended
            // after the log or put anywhere in it.
            let mut forged = lines.clone();
            for _ in 0..=(rng.next() % 3) {
                let mut text = rng.pick(&texts).clone();
                // The user text may carry a forged logger prefix of its own.
                if rng.next().is_multiple_of(2) {
                    let forged = match set {
                        "llama-server" => "0.00.500.000 I ",
                        "torch-symm-mem-probe" => "RESULT ",
                        _ => "[2026-11-30 08:41:41 TP0] ",
                    };
                    text = format!("{forged}{text}");
                }
                if rng.next().is_multiple_of(2) {
                    let glue = rng.pick(&["\n", " ", "", "\\n", "\r"]).to_string();
                    text = format!("{text}{glue}{}", rng.pick(&texts));
                }
                let line = request_log(set, &text, &mut rng);
                let at = if rng.next().is_multiple_of(2) {
                    forged.len()
                } else {
                    (rng.next() % (forged.len() as u64 + 1)) as usize
                };
                // A raw newline inside JSON or a repr is escaped: one physical line.
                forged.insert(at, line.replace('\n', "\\n").replace('\r', "\\r"));
            }
            let after = verdicts(&forged);
            for (h, a) in honest.iter().zip(&after) {
                assert!(
                    h.status.proven_active() || !a.status.proven_active(),
                    "{set}: `{}` went from {} to active with\n{}",
                    h.feature,
                    h.status.label(),
                    forged.join("\n")
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 4_000, "{checked}");
}

/// The forgery of issue 30: a line with the server's own logger prefix and the honest line's
/// task id, claiming 90 of 100 draft tokens; summed with the honest 10/100 it read as active.
const HONEST_TASK_9: &str = "0.01.000.000 I slot print_timing: id  0 | task 9 | draft acceptance = 0.10000 (   10 accepted /   100 generated), mean len =  1.10\n";
const FORGED_TASK_9: &str = "0.01.000.001 I slot print_timing: id 0 | task 9 | draft acceptance = 0.90000 (90 accepted / 100 generated), mean len =  1.90\n";

fn llama_start() -> String {
    LLAMA_HONEST
        .lines()
        .filter(|l| !l.contains("draft acceptance"))
        .flat_map(|l| [l, "\n"])
        .collect()
}

#[test]
fn a_second_acceptance_line_for_one_task_is_conflicting_not_summed() {
    let ws = Workspace::new();
    recipe(&ws, "llama-server", &["-md", "draft.gguf"], "");
    let counters = "llamacpp:spec_decode_num_accepted_tokens_total 10\nllamacpp:spec_decode_num_draft_tokens_total 100\n";
    let log = format!("{}{HONEST_TASK_9}{FORGED_TASK_9}", llama_start());
    for metrics in [None, Some(counters)] {
        let (code, v, text) = judge(&ws, &log, metrics);
        assert_eq!(code, 2, "{text}");
        assert_eq!(v["speculative"]["status"], "conflicting", "{text}");
        assert!(
            v["speculative"]["reason"]
                .as_str()
                .unwrap()
                .starts_with("two `draft tokens accepted` lines for task 9"),
            "{text}"
        );
    }
    // Variants: another task id against the counters; the forged line before readiness.
    let other = FORGED_TASK_9.replace("task 9", "task 10");
    let log = format!("{}{HONEST_TASK_9}{other}", llama_start());
    let (code, v, text) = judge(&ws, &log, Some(counters));
    assert_eq!(
        (code, &v["speculative"]["status"]),
        (2, &"conflicting".into()),
        "{text}"
    );
    assert!(
        v["speculative"]["reason"]
            .as_str()
            .unwrap()
            .contains("more than the server's counters (10/100)"),
        "{text}"
    );
    let log = format!("{other}{}{HONEST_TASK_9}", llama_start());
    let (code, v, text) = judge(&ws, &log, Some(counters));
    assert_eq!(
        (code, &v["speculative"]["status"]),
        (2, &"conflicting".into()),
        "{text}"
    );
    // Without the counters, another task id sums to 50 %: the log alone cannot prove it.
    let log = format!("{}{HONEST_TASK_9}{other}", llama_start());
    let (code, v, text) = judge(&ws, &log, None);
    assert_eq!(
        (code, &v["speculative"]["status"]),
        (1, &"unknown".into()),
        "{text}"
    );
    // Honest, with its counters: fell back, 10 %.
    let log = format!("{}{HONEST_TASK_9}", llama_start());
    let (code, v, text) = judge(&ws, &log, Some(counters));
    assert_eq!(
        (code, &v["speculative"]["status"]),
        (1, &"fell_back".into()),
        "{text}"
    );
}

// ---- the live request count -------------------------------------------------------------------

/// A llama-server stand-in kiln launches (`sh -c 'cat startup; sleep 600'`) whose HTTP side a
/// loopback server here answers: each completion appends one `draft acceptance` line (50 of 100)
/// to the server log, the first `extra` more; `/metrics` counts every line written. Ready once
/// the start-up lines are in the log.
fn acceptance_server(log: PathBuf, extra: usize) -> u16 {
    let lines = Arc::new(AtomicUsize::new(0));
    http(move |_, path, body| match path {
        "/health" if std::fs::read_to_string(&log).unwrap_or_default().contains("listening on") => {
            ok_json(&serde_json::json!({"status": "ok"}))
        }
        "/health" => ("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0".into(), vec![]),
        "/v1/completions" => {
            let now = if lines.load(Ordering::SeqCst) == 0 { 1 + extra } else { 1 };
            let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
            for _ in 0..now {
                let task = lines.fetch_add(1, Ordering::SeqCst);
                let _ = writeln!(
                    f,
                    "0.02.000.000 I slot print_timing: id  0 | task {task} | draft acceptance = 0.50000 (   50 accepted /   100 generated), mean len =  1.50"
                );
            }
            stream(max_tokens(body), 4, None)
        }
        "/metrics" => {
            let n = lines.load(Ordering::SeqCst);
            let body = format!(
                "llamacpp:spec_decode_num_accepted_tokens_total {}\nllamacpp:spec_decode_num_draft_tokens_total {}\n",
                50 * n,
                100 * n
            );
            (
                format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}", body.len()),
                vec![body],
            )
        }
        _ => not_found(),
    })
    .0
}

/// A recipe `r` whose profile `p` (`-md draft.gguf`, llama-server signatures) is served by an
/// [`acceptance_server`] printing `extra` lines more than it was sent requests.
fn acceptance_recipe(ws: &Workspace, extra: usize) {
    let log = ws.state().join("serve/r-p.log");
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    std::fs::write(&log, "").unwrap();
    let port = acceptance_server(log, extra);
    let startup = ws.write("startup.txt", &llama_start());
    ws.write(
        "r.toml",
        &format!(
            "[recipe]\nname = \"r\"\n\n[profile.p]\ncmd = [\"sh\", \"-c\", \"cat \\\"$0\\\"; sleep 600\", {:?}]\nargs = [\"-md\", \"draft.gguf\"]\nurl = \"http://127.0.0.1:{port}\"\napi = \"openai\"\nsignatures = \"llama-server\"\n",
            startup.display().to_string()
        ),
    );
}

fn speculative(verdicts: &serde_json::Value) -> serde_json::Value {
    verdicts
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["feature"] == "speculative")
        .unwrap_or_else(|| panic!("no speculative verdict: {verdicts}"))
        .clone()
}

/// `kiln serve` sends two generations (the readiness one, the traffic request): two acceptance
/// lines are judged by the counters (active); a third is more lines than requests: conflicting,
/// even with counters that agree with the log.
#[test]
fn live_more_acceptance_lines_than_requests_kiln_sent_is_conflicting() {
    for (extra, code, status) in [(0, 0, "active"), (1, 2, "conflicting")] {
        let ws = Workspace::new();
        acceptance_recipe(&ws, extra);
        let out = ws
            .kiln()
            .args(["serve", "r.toml", "--detach", "--json"])
            .output()
            .unwrap();
        ws.kiln()
            .args(["serve", "r.toml", "--stop"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{text}{err}");
        let v = speculative(&crate::reporter::json_event(&text, "verdicts")["verdicts"]);
        assert_eq!(v["status"], status, "{v}");
        if extra > 0 {
            assert!(
                v["reason"]
                    .as_str()
                    .unwrap()
                    .starts_with("3 `draft tokens accepted` lines for the 2 request(s) kiln sent"),
                "{v}"
            );
            assert!(v["evidence"].as_str().unwrap().contains("task 2 |"), "{v}");
        }
    }
}

/// `kiln up` judges the launch again after its benchmark (2 warm-ups, 5 runs): the count covers
/// those requests too, so nine honest lines are still active; one line more is conflicting.
#[test]
fn live_the_request_count_covers_the_benchmark_kiln_up_ran() {
    // A conflicting tuning fails the run (exit 1); an active one does not.
    for (extra, status, code) in [(0, "active", 0), (1, "conflicting", 1)] {
        let ws = Workspace::new();
        acceptance_recipe(&ws, extra);
        let out = ws
            .kiln()
            .args(["up", "r.toml", "--no-doctor", "--json"])
            .output()
            .unwrap();
        ws.kiln()
            .args(["serve", "r.toml", "--stop"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let report: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(ws.state().join("reports/r/report.json"))
                .unwrap_or_else(|e| panic!("{e}: {text}{}", String::from_utf8_lossy(&out.stderr))),
        )
        .unwrap();
        assert!(report["bench"].is_object(), "{report}");
        let v = speculative(&report["verdicts"]);
        assert_eq!(v["status"], status, "{v}");
        assert_eq!(
            (out.status.code(), report["exit_code"].as_i64()),
            (Some(code), Some(i64::from(code))),
            "{}",
            report["outcome"]
        );
        assert_eq!(report["outcome"]["ok"], code == 0, "{}", report["outcome"]);
        let log = std::fs::read_to_string(ws.state().join("serve/r-p.log")).unwrap();
        let lines = log.matches("draft acceptance").count();
        assert_eq!(lines, 9 + extra, "{log}");
        if extra > 0 {
            assert!(
                v["reason"]
                    .as_str()
                    .unwrap()
                    .starts_with("10 `draft tokens accepted` lines for the 9 request(s) kiln sent"),
                "{v}"
            );
        }
    }
}
