//! A baseline recorded on one real launch gates the next (issue 30): two `kiln serve` launches of
//! tiny-cpu's real llama-server with identical settings measure the same setup (the second bench
//! is gated, not refused); a launch whose settings really differ is refused, naming them.

use std::path::Path;

use serde_json::Value;

use crate::common::Workspace;
use crate::serve::free_port;

fn recipe_path() -> String {
    format!("{}/recipes/tiny-cpu.toml", env!("CARGO_MANIFEST_DIR"))
}

/// `kiln serve tiny-cpu --profile NAME --detach` on `port`, asserting it came up.
fn serve(ws: &Workspace, prefix: &Path, port: u16, profile: &str) {
    let out = ws
        .kiln()
        .args(["serve", &recipe_path(), "--profile", profile, "--detach"])
        .arg("--set")
        .arg(format!("prefix={}", prefix.display()))
        .arg("--set")
        .arg(format!("port={port}"))
        .output()
        .unwrap();
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn stop(ws: &Workspace) {
    let out = ws
        .kiln()
        .args(["serve", &recipe_path(), "--stop"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `kiln bench --json` of the server on `port` (short: 32 tokens, 1 warm-up, 2 runs).
fn bench(ws: &Workspace, port: u16, extra: &[&str]) -> std::process::Output {
    ws.kiln()
        .args(["bench", "--url", &format!("http://127.0.0.1:{port}")])
        .args([
            "--api",
            "openai",
            "--max-tokens",
            "32",
            "--runs",
            "2",
            "--warmup",
            "1",
        ])
        .arg("--json")
        .args(extra)
        .output()
        .unwrap()
}

fn report(out: &std::process::Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    crate::reporter::json_event(&text, "bench")["report"].clone()
}

#[test]
fn a_baseline_from_one_llama_server_launch_gates_the_next_and_refuses_other_settings() {
    let prefix = crate::bench::tiny_cpu();
    let ws = Workspace::new();
    let port = free_port();

    serve(&ws, &prefix, port, "baseline");
    let first = bench(&ws, port, &[]);
    stop(&ws);
    let err = String::from_utf8_lossy(&first.stderr);
    assert!(first.status.code().is_some_and(|c| c <= 1), "{err}");
    let base = ws.write("first.json", &String::from_utf8_lossy(&first.stdout));
    let fp = report(&first)["fingerprint"].clone();
    assert!(
        fp["server"].as_str().unwrap().starts_with("llama.cpp "),
        "{fp}"
    );
    assert_eq!(fp["settings"]["-t"], "1", "{fp}");

    // A second launch, identical settings: the same fingerprint, so the gate measures it.
    serve(&ws, &prefix, port, "baseline");
    let second = bench(&ws, port, &["--baseline", base.to_str().unwrap()]);
    stop(&ws);
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(!err.contains("different setup"), "{err}");
    let again = report(&second);
    assert_eq!(again["fingerprint"], fp, "{err}");
    let gate = &again["gate"];
    // Noise on a shared box may fail the gate; the verdict and the exit code must agree.
    let passed = gate["passed"]
        .as_bool()
        .unwrap_or_else(|| panic!("no gate: {again}\n{err}"));
    assert_eq!(second.status.code() == Some(2), !passed, "{gate}\n{err}");
    assert!(gate["baseline_median"].as_f64().unwrap() > 0.0, "{gate}");

    // `tuned` launches the same server and model with other settings: refused, naming them.
    serve(&ws, &prefix, port, "tuned");
    let other = bench(&ws, port, &["--baseline", base.to_str().unwrap()]);
    stop(&ws);
    let err = String::from_utf8_lossy(&other.stderr);
    assert_eq!(other.status.code(), Some(2), "{err}");
    assert!(err.contains("was measured on a different setup"), "{err}");
    assert!(err.contains("-t 1 → 2"), "{err}");
    assert!(err.contains("--flash-attn (not set) → on"), "{err}");
}
