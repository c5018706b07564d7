//! `kiln bench`'s own contract, with the real binary against the SGLang 0.5.9 stand-in
//! (`tests/support/sglang_wire_server.py`) on loopback: an advisory (runs that came back short)
//! is a warning and exit 0, `--strict` makes it exit 1; each run is a typed `bench_run` event.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::Workspace;
use crate::serve::free_port;
use crate::sglang_wire::Server;

fn bench(url: &str, extra: &[&str]) -> Output {
    Workspace::new()
        .kiln()
        .args(["bench", "--url", url, "--max-tokens", "40", "--runs", "2"])
        .args(["--warmup", "1"])
        .args(extra)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    )
}

/// Runs that end early (the server stops at 24 of 40 tokens) are an advisory: the warning is
/// said once and the exit is 0; `--strict` turns the same run into exit 1.
#[test]
fn an_advisory_warns_and_exits_0_and_strict_fails_it() {
    let s = Server::start(&["--stop-after", "24"]);
    let plain = bench(&s.url, &["--api", "sglang"]);
    let all = text(&plain);
    assert_eq!(plain.status.code(), Some(0), "{all}");
    assert_eq!(
        all.matches("(its tok/s is not comparable)").count(),
        1,
        "the warning, once: {all}"
    );
    let strict = bench(&s.url, &["--api", "sglang", "--strict"]);
    let all = text(&strict);
    assert_eq!(strict.status.code(), Some(1), "{all}");
    assert!(all.contains("returned 24 of 40 tokens"), "{all}");
}

/// `--json`: each run is a `bench_run` event of typed fields (no prose field), and the
/// advisory is a `warning` event.
#[test]
fn bench_runs_are_typed_json_events() {
    let s = Server::start(&["--stop-after", "24"]);
    let out = bench(&s.url, &["--api", "sglang", "--json"]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let events = crate::reporter::events(&stdout);
    let runs: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "bench_run")
        .collect();
    assert_eq!(runs.len(), 2, "{stdout}");
    for (i, r) in runs.iter().enumerate() {
        assert_eq!(r["run"], i as u64 + 1, "{r}");
        assert_eq!(r["of"], 2, "{r}");
        assert_eq!(r["tokens"], 24, "{r}");
        assert!(r["prompt_tokens"].as_u64().is_some_and(|p| p > 0), "{r}");
        for f in ["seconds", "e2e_tok_s", "ttft_ms"] {
            assert!(r[f].as_f64().is_some_and(|x| x > 0.0), "{f}: {r}");
        }
        assert!(
            r.get("decode_tok_s").is_some() && r.get("accept_length").is_some(),
            "{r}"
        );
        assert!(
            r.get("line").is_none(),
            "prose belongs in note/warning events: {r}"
        );
    }
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "warning" && e.to_string().contains("returned 24 of 40")),
        "{stdout}"
    );
}

/// Bare `kiln bench --url` against SGLang: `/get_model_info` names it, and the runs go to
/// `/generate` (the stand-in answers nothing else with tokens).
#[test]
fn bare_bench_finds_sglang_by_its_model_info() {
    let s = Server::start(&[]);
    let out = bench(&s.url, &[]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(
        all.contains("API: sglang (") && all.contains("/get_model_info answered with a model_path"),
        "{all}"
    );
    assert!(all.contains("Run 2/2: 40 tokens"), "{all}");
}

/// Bare `kiln bench --url` against the real llama.cpp llama-server (tiny-cpu's build and
/// model): its `Server: llama.cpp` header picks the OpenAI API.
#[test]
fn bare_bench_finds_llama_server_by_its_server_header() {
    let prefix = crate::bench::tiny_cpu();
    let port = free_port();
    let child = Command::new(prefix.join("bin/llama-server"))
        .arg("-m")
        .arg(prefix.join("model/tiny.gguf"))
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "-t",
            "1",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let s = Server {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let until = Instant::now() + Duration::from_secs(60);
    while ureq::get(&format!("{}/health", s.url))
        .call()
        .map_or(true, |r| r.status() != 200)
    {
        assert!(Instant::now() < until, "llama-server never became healthy");
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = bench(&s.url, &[]);
    let all = text(&out);
    assert!(out.status.code().is_some_and(|c| c <= 1), "{all}");
    assert!(
        all.contains("API: openai (its Server header says llama.cpp"),
        "{all}"
    );
    assert!(all.contains("Run 2/2:"), "{all}");
}

/// A server that is neither (Python's own file server: 404 for both probes) is an error that
/// says what it answered and which flag to pass.
#[test]
fn bare_bench_against_an_unknown_server_names_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let child = Command::new("python3")
        .args([
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            &port.to_string(),
        ])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let s = Server {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let until = Instant::now() + Duration::from_secs(30);
    while ureq::get(&s.url).call().is_err() {
        assert!(Instant::now() < until, "http.server never answered");
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = bench(&s.url, &[]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(
        all.contains("cannot tell which API")
            && all.contains("/get_model_info gave HTTP 404")
            && all.contains("`--api sglang`")
            && all.contains("`--api openai`"),
        "{all}"
    );
}

/// A noisy bench (every second request 10× slower) says how big it was and which flags set its
/// size, so that a person on a busy box knows how to make it shorter.
#[test]
fn a_noisy_bench_names_its_size_and_the_flags_that_set_it() {
    let s = Server::start(&["--every-other-step-ms", "20"]);
    let out = bench(&s.url, &["--api", "sglang"]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(
        all.contains(
            "(this bench: 2 runs of 40 tokens, 1 warm-up; `--runs N --max-tokens N` sets its size)"
        ),
        "{all}"
    );
}
