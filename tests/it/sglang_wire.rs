//! SGLang 0.5.9's wire protocol, for real: `tests/support/sglang_wire_server.py` speaks what the
//! 0.5.9 wheel's own `/generate`, `/v1/completions`, `/health_generate`, `/get_model_info` and
//! `/server_info` send (each field cited by the wheel's file:line there), on 127.0.0.1 at a free
//! port, and the real `kiln` binary is driven against it: `kiln bench --api sglang` (cumulative
//! `output_ids`, `--stream-output`'s incremental ones, coalesced and speculative chunks, the final
//! chunk that alone carries the acceptance figures), `kiln serve`'s readiness wait, and `kiln up`'s
//! greedy A/B over token ids.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::Workspace;
use crate::serve::free_port;

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/sglang_wire_server.py")
}

/// A recipe `name` whose `baseline` serves the stand-in on `port` (SGLang 0.5.15's signatures,
/// `step_ms` per forward pass) and whose `tuned` extends it with `tuned` (TOML keys).
pub(crate) fn standin_recipe(name: &str, port: u16, step_ms: &str, tuned: &str) -> String {
    format!(
        "[recipe]\nname = \"{name}\"\n[profile.baseline]\ncmd = [\"python3\", {:?}]\n\
         args = [\"--model-path\", \"tiny-sglang\", \"--port\", \"{port}\", \"--startup-s\", \"0.4\", \"--step-ms\", \"{step_ms}\"]\n\
         port = \"{port}\"\napi = \"sglang\"\nsignatures = \"sglang-0.5.15\"\n\
         [profile.tuned]\nextends = \"baseline\"\nbaseline = \"baseline\"\n{tuned}",
        script().display().to_string()
    )
}

/// The stand-in server, started by the test and killed (its own pid) when dropped; bench_cli.rs
/// starts it here too, and holds its other servers (llama-server, Python's http.server) in it.
pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) url: String,
}

impl Server {
    /// Start it with `flags` and wait until `/health_generate` answers 200 (its log is dropped,
    /// a Python error shows on stderr).
    pub(crate) fn start(flags: &[&str]) -> Server {
        let port = free_port();
        let child = Command::new("python3")
            .arg(script())
            .args(["--model-path", "tiny-sglang", "--port", &port.to_string()])
            .args(["--startup-s", "0.2", "--step-ms", "0.5"])
            .args(flags)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs the SGLang stand-in");
        let server = Server {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let until = Instant::now() + Duration::from_secs(30);
        while get(&format!("{}/health_generate", server.url)).0 != 200 {
            assert!(Instant::now() < until, "the stand-in never became healthy");
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    /// Its own non-streamed answer to `max_new_tokens` tokens: the final out's `meta_info`.
    fn final_meta(&self, max_new_tokens: u32) -> Value {
        let body =
            serde_json::json!({"text": "x", "sampling_params": {"max_new_tokens": max_new_tokens}});
        let resp = ureq::post(&format!("{}/generate", self.url))
            .send_string(&body.to_string())
            .unwrap()
            .into_string()
            .unwrap();
        let resp: Value = serde_json::from_str(&resp).unwrap();
        resp["meta_info"].clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn get(url: &str) -> (u16, String) {
    match ureq::get(url).timeout(Duration::from_secs(5)).call() {
        Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
        Err(ureq::Error::Status(c, r)) => (c, r.into_string().unwrap_or_default()),
        Err(_) => (0, String::new()),
    }
}

/// `kiln bench --api sglang` against `url`: (exit code, the report, stderr).
fn bench(url: &str, max_tokens: u32) -> (Option<i32>, Value, String) {
    let ws = Workspace::new();
    let out = ws
        .kiln()
        .args(["bench", "--url", url, "--api", "sglang", "--json"])
        .args([
            "--max-tokens",
            &max_tokens.to_string(),
            "--runs",
            "2",
            "--warmup",
            "1",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = crate::reporter::events(&stdout)
        .into_iter()
        .find(|e| e["event"] == "bench")
        .map_or(Value::Null, |e| e["report"].clone());
    (out.status.code(), report, format!("{stderr}\n{stdout}"))
}

/// Every shape SGLang 0.5.9 streams `/generate` in gives exactly the tokens asked for, the
/// server's prompt count, and, where it decodes speculatively, the acceptance length its own
/// final chunk says (tokenizer_manager.py:1852, completion_tokens / spec_verify_ct). Counting
/// cumulative `output_ids` twice, taking `--stream-output`'s new ids as every id so far (one
/// token id over and over looks like a prefix), or missing the final chunk (it alone has the
/// last ids and `spec_verify_ct`) fails here.
#[test]
fn kiln_bench_counts_every_sglang_stream_shape_exactly() {
    let spec = [
        "--speculative-algorithm",
        "EAGLE",
        "--speculative-num-draft-tokens",
        "4",
    ];
    let shapes: Vec<(&str, Vec<&str>)> = vec![
        ("cumulative, one id per chunk", vec![]),
        ("cumulative, one id repeated", vec!["--repeat-token"]),
        (
            "cumulative, a slow reader (only the newest out is sent)",
            vec!["--slow-reader-every", "3"],
        ),
        (
            "cumulative, speculative, --stream-interval 3",
            [&spec[..], &["--stream-interval", "3"]].concat(),
        ),
        (
            "incremental (--stream-output), speculative",
            [&spec[..], &["--stream-output"]].concat(),
        ),
        (
            "incremental (--stream-output), one id repeated",
            vec!["--stream-output", "--repeat-token"],
        ),
    ];
    let max_tokens = 48;
    for (shape, flags) in shapes {
        let server = Server::start(&flags);
        let own = server.final_meta(max_tokens);
        let (code, report, said) = bench(&server.url, max_tokens);
        // No gate and no --strict: exit 0 (a warning would show in `said`).
        assert_eq!(code, Some(0), "{shape}: {said}");
        assert!(
            !said.contains("the server's usage says"),
            "{shape}: kiln's count disagreed with the server's: {said}"
        );
        let runs = report["runs"]
            .as_array()
            .unwrap_or_else(|| panic!("{shape}: no runs: {said}"));
        assert_eq!(runs.len(), 2, "{shape}");
        for r in runs {
            assert_eq!(r["tokens"], max_tokens, "{shape}: {r}");
            assert!(r["prompt_tokens"].as_u64().unwrap() > 0, "{shape}: {r}");
            assert_eq!(
                r["accept_length"], own["spec_accept_length"],
                "{shape}: kiln's accept length is not the server's own: {r} vs {own}"
            );
        }
        if flags.contains(&"EAGLE") {
            assert!(own["spec_accept_length"].as_f64().unwrap() > 1.0, "{own}");
        }
    }
}

/// Over `/generate`, SGLang streams every token id, so its `completion_tokens` must equal the ids
/// streamed, not merely fall in the range a text stream allows (a piece of text can hold several
/// tokens): a server that says 43 for 40 ids (an EOS after 40 of 48) is counted 40, with a
/// warning that names both counts.
#[test]
fn kiln_bench_counts_the_ids_sglang_streamed_not_a_usage_that_disagrees() {
    let server = Server::start(&["--stop-after", "40", "--usage-extra", "3"]);
    assert_eq!(server.final_meta(48)["completion_tokens"], 43);
    let (code, report, said) = bench(&server.url, 48);
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains("the server's usage says 43 completion tokens but the stream shows 40"),
        "{said}"
    );
    let runs = report["runs"]
        .as_array()
        .unwrap_or_else(|| panic!("{said}"));
    assert_eq!(runs.len(), 2, "{said}");
    for r in runs {
        assert_eq!(r["tokens"], 40, "{r}");
    }
}

/// `kiln bench --api openai` against SGLang's `/v1/completions`: text deltas of several tokens a
/// chunk (`--stream-interval 3`, serving_completions.py:268) and the usage chunk kiln asks for
/// with `stream_options.include_usage` (:343-360) give the server's count, 48, not the 16 chunks.
#[test]
fn kiln_bench_over_sglang_openai_completions_counts_by_its_usage_chunk() {
    let server = Server::start(&["--stream-interval", "3"]);
    let ws = Workspace::new();
    let out = ws
        .kiln()
        .args(["bench", "--url", &server.url, "--api", "openai", "--json"])
        .args(["--max-tokens", "48", "--runs", "2", "--warmup", "0"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(!said.contains("the server's usage says"), "{said}");
    let report = crate::reporter::json_event(&String::from_utf8_lossy(&out.stdout), "bench")
        ["report"]
        .clone();
    for r in report["runs"].as_array().unwrap() {
        assert_eq!(r["tokens"], 48, "{r}");
        assert!(r["prompt_tokens"].as_u64().unwrap() > 0, "{r}");
    }
}

/// A `/generate` stream that ends before its final out (no `finish_reason`, no `data: [DONE]`:
/// http_server.py:668 always sends it after the last out) is not a clean run: each run says it
/// returned fewer tokens than asked, a warning (an advisory, as in `kiln up`: exit 0, and 1 with
/// `--strict`, which bench_cli.rs pins).
#[test]
fn an_sglang_stream_cut_before_its_final_chunk_is_not_a_clean_run() {
    let server = Server::start(&["--cut-after", "20"]);
    let (code, report, said) = bench(&server.url, 48);
    assert_eq!(code, Some(0), "{said}");
    for r in report["runs"].as_array().unwrap() {
        assert_eq!(r["tokens"], 20, "{r}");
    }
    assert!(
        said.contains("run 1 returned 20 of 48 tokens") && said.contains("not comparable"),
        "{said}"
    );
}

/// `kiln serve` on an SGLang profile waits through `/health_generate`'s 503s (the warm-up,
/// http_server.py:478) and proves a generation before it says ready; a server that stops
/// before the tokens asked for (an EOS, `finish_reason` `stop`) is not ready. The server's
/// fingerprint reads `/server_info` (its version and model path).
#[test]
fn kiln_serve_waits_for_sglang_readiness_and_proves_a_generation() {
    let ws = Workspace::new();
    let port = free_port();
    let recipe = |extra: &str| {
        format!(
            "[recipe]\nname = \"sgw\"\n[profile.s]\ncmd = [\"python3\", {:?}]\n\
             args = [\"--model-path\", \"tiny-sglang\", \"--port\", \"{port}\", \"--startup-s\", \"3\"{extra}]\n\
             port = \"{port}\"\napi = \"sglang\"\nsignatures = \"sglang-0.5.9\"\n",
            script().display().to_string()
        )
    };
    ws.write("r.toml", &recipe(""));
    let out = ws
        .kiln()
        .args(["serve", "r.toml", "--detach"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let stop = || {
        let _ = ws.kiln().args(["serve", "r.toml", "--stop"]).output();
    };
    if out.status.code().is_none_or(|c| c > 1) {
        stop();
        panic!("{err}");
    }
    let at = |what: &str| -> f64 {
        let line = err
            .lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no `{what}` in:\n{err}"));
        line.split('[')
            .nth(1)
            .unwrap()
            .split('s')
            .next()
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let http_up = at("] HTTP server up");
    let healthy = at("/health_generate answered 200");
    assert!(
        err.contains("ready: a real generation returned 8 tokens"),
        "{err}"
    );
    // The port opens half way through the start-up; /health_generate answers 503 until the
    // warm-up ends 1.5 s later and then takes a second of its own.
    assert!(healthy - http_up >= 1.5, "ready too early: {err}");
    let (_, info) = get(&format!("http://127.0.0.1:{port}/server_info"));
    let out = ws
        .kiln()
        .args([
            "bench",
            "--url",
            &format!("http://127.0.0.1:{port}"),
            "--api",
            "sglang",
        ])
        .args([
            "--max-tokens",
            "32",
            "--runs",
            "1",
            "--warmup",
            "0",
            "--json",
        ])
        .output()
        .unwrap();
    stop();
    let report = crate::reporter::json_event(&String::from_utf8_lossy(&out.stdout), "bench")
        ["report"]
        .clone();
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(report["fingerprint"]["server"], "sglang 0.5.9", "{report}");
    assert_eq!(
        report["fingerprint"]["model"], info["model_path"],
        "{report}"
    );

    // An EOS after 3 tokens, whatever `ignore_eos` says.
    ws.write("r.toml", &recipe(", \"--stop-after\", \"3\""));
    let out = ws.kiln().args(["serve", "r.toml"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    stop();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("answered its health check but a generation returned 3 of 8 tokens"),
        "{err}"
    );
}

/// A settings endpoint that says a tuning is on (`/server_info`'s `enable_torch_symm_mem: true`)
/// proves nothing: with no line of the log showing it at work, `kiln serve` reads it as
/// `configured`, never `active`, and exits 1.
#[test]
fn a_settings_endpoint_saying_enabled_is_configured_never_active() {
    let ws = Workspace::new();
    let port = free_port();
    ws.write(
        "r.toml",
        &format!(
            "[recipe]\nname = \"sgc\"\n[profile.s]\ncmd = [\"python3\", {:?}]\n\
             args = [\"--model-path\", \"tiny-sglang\", \"--port\", \"{port}\", \"--startup-s\", \"0.4\", \"--step-ms\", \"0.2\", \"--tp-size\", \"2\", \"--enable-torch-symm-mem\"]\n\
             port = \"{port}\"\napi = \"sglang\"\nsignatures = \"sglang-0.5.9\"\n",
            script().display().to_string()
        ),
    );
    let out = ws
        .kiln()
        .args(["serve", "r.toml", "--detach", "--json"])
        .output()
        .unwrap();
    let _ = ws.kiln().args(["serve", "r.toml", "--stop"]).output();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}{err}");
    let v = crate::reporter::json_event(&text, "verdicts");
    let symm = v["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["feature"] == "torch-symm-mem")
        .unwrap_or_else(|| panic!("{v}"))
        .clone();
    assert_eq!(symm["status"], "configured", "{symm}");
    assert!(
        symm["reason"]
            .as_str()
            .unwrap()
            .starts_with("/server_info says it is enabled; no line shows it at work"),
        "{symm}"
    );
    assert!(
        symm["evidence"]
            .as_str()
            .unwrap()
            .contains("/server_info: enable_torch_symm_mem=true"),
        "{symm}"
    );
}

/// `kiln up`'s greedy A/B over SGLang: a tuned launch that streams the same ids in other chunks
/// (speculative, every 4th token) is identical, compared token id by token id; one whose ids
/// change after the 5th is wrong output.
#[test]
fn kiln_up_greedy_ab_compares_sglang_token_ids() {
    let ws = Workspace::new();
    let port = free_port();
    let recipe = |tuned: &str| {
        format!(
            "[recipe]\nname = \"sgab\"\n[profile.baseline]\ncmd = [\"python3\", {:?}]\n\
             args = [\"--model-path\", \"tiny-sglang\", \"--port\", \"{port}\", \"--startup-s\", \"0.4\", \"--step-ms\", \"0.2\"]\n\
             port = \"{port}\"\napi = \"sglang\"\nsignatures = \"sglang-0.5.9\"\n\
             [profile.tuned]\nextends = \"baseline\"\nbaseline = \"baseline\"\nargs = [{tuned}]\n",
            script().display().to_string()
        )
    };
    let up = |tuned: &str| {
        ws.write("r.toml", &recipe(tuned));
        let out = ws
            .kiln()
            .args(["up", "r.toml", "--no-doctor"])
            .output()
            .unwrap();
        let _ = ws.kiln().args(["serve", "r.toml", "--stop"]).output();
        let report: Value = serde_json::from_str(
            &std::fs::read_to_string(ws.state().join("reports/sgab/report.json"))
                .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr))),
        )
        .unwrap();
        (out, report)
    };
    let (out, report) = up(
        "\"--speculative-algorithm\", \"EAGLE\", \"--speculative-num-draft-tokens\", \"4\", \"--stream-interval\", \"4\"",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // Identical output and every verdict judged: `kiln up` exits 0.
    assert_eq!(out.status.code(), Some(0), "{text}");
    let ab = &report["ab"];
    assert_eq!(ab["verdict"], "identical", "{ab}");
    for p in ab["prompts"].as_array().unwrap() {
        assert_eq!(p["unit"], "tokens", "{p}");
        assert_eq!(
            (p["agree"].as_u64(), p["total"].as_u64()),
            (Some(64), Some(64)),
            "{p}"
        );
    }

    let (out, report) = up("\"--diverge-after\", \"5\"");
    let ab = &report["ab"];
    assert_eq!(ab["verdict"], "wrong output", "{ab}");
    // Wrong greedy output fails the run: exit 1.
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    for p in ab["prompts"].as_array().unwrap() {
        assert_eq!(p["agree"], 5, "{p}");
        assert_eq!(p["first_divergence"][0], 5, "{p}");
    }
}

/// Two launches of the same settings give one fingerprint, though SGLang draws a new
/// `random_seed` for each (server_args.py:853-854) and the port differs: a baseline from the
/// first gates the second. A launch with another speed setting (`--stream-interval`) is refused
/// as a different setup. Depends on the SGLang arm of `bench::protocol::fingerprint` leaving
/// the per-launch values out (`random_seed`, `port`, `host`).
#[test]
fn a_baseline_from_one_sglang_launch_gates_the_next() {
    let ws = Workspace::new();
    let bench = |url: &str, extra: &[&str]| {
        ws.kiln()
            .args(["bench", "--url", url, "--api", "sglang"])
            .args(["--max-tokens", "64", "--runs", "3", "--warmup", "1"])
            .args(extra)
            .output()
            .unwrap()
    };
    let first = Server::start(&[]);
    let (_, info_1) = get(&format!("{}/server_info", first.url));
    let out = bench(&first.url, &["--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let base = ws.write("base.json", &String::from_utf8_lossy(&out.stdout));
    drop(first);

    let second = Server::start(&[]);
    let (_, info_2) = get(&format!("{}/server_info", second.url));
    let seeds = |info: &str| serde_json::from_str::<Value>(info).unwrap()["random_seed"].clone();
    assert_ne!(
        seeds(&info_1),
        seeds(&info_2),
        "the marker must differ per launch"
    );
    let out = bench(&second.url, &["--baseline", base.to_str().unwrap()]);
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!err.contains("different setup"), "{err}");
    let gate = text
        .lines()
        .find(|l| l.starts_with("baseline: median decode tok/s"))
        .unwrap_or_else(|| panic!("no gate line:\n{text}\n{err}"));
    // Noise on a shared box may fail the gate; the verdict and the exit code must agree.
    let passed = gate.ends_with(": pass");
    assert!(passed || gate.ends_with(": FAIL"), "{gate}");
    assert_eq!(out.status.code() == Some(2), !passed, "{gate}\n{err}");
    drop(second);

    let other = Server::start(&["--stream-interval", "4"]);
    let out = bench(&other.url, &["--baseline", base.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("was measured on a different setup"), "{err}");
}

#[test]
fn an_sse_data_line_with_nothing_after_it_is_skipped_not_an_error() {
    let server = Server::start(&["--empty-data-lines"]);
    let (code, report, out) = bench(&server.url, 32);
    assert_eq!(code, Some(0), "{out}");
    let runs = report["runs"].as_array().unwrap_or_else(|| panic!("{out}"));
    assert!(runs.iter().all(|r| r["tokens"] == 32), "{report}");
}

/// `kiln tune` over SGLang ranks variants although nothing SGLang logs proves its attention
/// backend at work (0.5.9 and 0.5.15 name it only in the start-up `server_args` dump): that
/// tuning qualifies as configured, said in each variant's evidence (on an H100, session 19,
/// every variant was disqualified by it). A variant whose draft accepts nothing (the negative
/// control) still never ranks.
#[test]
fn kiln_tune_over_sglang_ranks_variants_whose_attention_backend_is_only_configured() {
    let ws = Workspace::new();
    let port = free_port();
    ws.write(
        "r.toml",
        &standin_recipe(
            "sgtune",
            port,
            "0.2",
            "args = [\"--attention-backend\", \"triton\"]\nexpect = [\"attention-backend\"]\n",
        ),
    );
    let out = ws
        .kiln()
        .args(["tune", "r.toml", "--profile", "tuned", "--method", "grid"])
        .args(["--vary=--stream-interval=1,4"])
        .args([
            "--runs",
            "2",
            "--warmup",
            "0",
            "--max-tokens",
            "16",
            "--ab-tokens",
            "8",
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let results: Value =
        serde_json::from_slice(&std::fs::read(ws.state().join("tune/sgtune/tuned.json")).unwrap())
            .unwrap();
    let text = results.to_string();
    assert!(
        text.contains("verdict attention-backend: configured: ")
            && text.contains("(the server shows no more than its settings for this tuning)"),
        "{text}"
    );
    assert!(
        !text.contains("\"disqualified\":\"attention-backend"),
        "{text}"
    );
    let ranked = stdout
        .lines()
        .filter(|l| {
            let mut words = l.split_whitespace();
            words.next().is_some_and(|w| w.parse::<u32>().is_ok())
                && words
                    .next()
                    .is_some_and(|w| w.starts_with("--stream-interval="))
        })
        .count();
    assert_eq!(ranked, 2, "both variants ranked:\n{stdout}");
}
