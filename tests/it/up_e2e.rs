//! `kiln up` end to end on the CPU demo stack: steps (already built: fresh) → serve the `tuned`
//! profile → verdicts → greedy A/B against `baseline` → smoke bench → report.json / report.md.

use std::process::Command;

use crate::bench::tiny_cpu;
use crate::common::test_cache;
use crate::serve::free_port;

#[test]
fn kiln_up_serves_proves_benches_and_reports_on_the_cpu_demo() {
    let prefix = tiny_cpu();
    let root = test_cache();
    // The build's state dir holds the step receipts; serialize with other users of it.
    let lock = std::fs::File::create(root.join(".tiny-cpu.lock")).unwrap();
    lock.lock().unwrap();
    let state = root.join("tiny-cpu-state");
    let recipe = format!("{}/recipes/tiny-cpu.toml", env!("CARGO_MANIFEST_DIR"));
    let port = free_port();
    let sets = [
        format!("prefix={}", prefix.display()),
        format!("port={port}"),
    ];
    let kiln = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
        c.args(args)
            .arg(&recipe)
            .arg("--state-dir")
            .arg(&state)
            .env("KILN_NO_PROGRESS", "1");
        for s in &sets {
            c.arg("--set").arg(s);
        }
        c
    };
    let out = kiln(&["up"]).output().unwrap();
    let stop = kiln(&["serve", "--stop"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Bench noise on a busy 2-core box is a warning, not the exit code (issue 10).
    assert_eq!(
        out.status.code(),
        Some(0),
        "exit {:?}\n{stderr}\n{stdout}",
        out.status.code()
    );
    assert!(
        stop.status.success(),
        "{}",
        String::from_utf8_lossy(&stop.stderr)
    );
    assert!(
        stderr.contains("0 of 5 steps to run"),
        "the built steps are fresh: {stderr}"
    );
    assert!(stderr.contains("serving profile `tuned`"), "{stderr}");
    // The A/B reads the served server's outputs: `tuned` is loaded once, `baseline` once.
    assert_eq!(
        stderr.matches("started profile `tuned`").count(),
        1,
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("started profile `baseline`").count(),
        1,
        "{stderr}"
    );

    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join("reports/tiny-cpu/report.json")).unwrap())
            .unwrap();
    assert_eq!(report["profile"], "tuned");
    assert_eq!(report["outcome"]["ok"], true, "{report}");
    assert!(report["outcome"]["error"].is_null(), "{report}");
    let verdicts = report["verdicts"].as_array().unwrap();
    assert!(!verdicts.is_empty(), "{report}");
    assert!(
        verdicts.iter().all(|v| v["status"] != "crashed"),
        "{report}"
    );
    assert!(
        report["ab"].is_object(),
        "the A/B against baseline ran: {report}"
    );
    assert!(report["bench"].is_object(), "the bench ran: {report}");
    let md = std::fs::read_to_string(state.join("reports/tiny-cpu/report.md")).unwrap();
    assert!(
        md.contains("## Tuning verdicts")
            && md.contains("## Greedy A/B")
            && md.contains("## Benchmark"),
        "{md}"
    );
    crate::report_html::assert_renders_in_chromium(&state.join("reports/tiny-cpu/report.html"));

    // --json: stdout is one JSON event per line, the result blocks included.
    let out = kiln(&["up", "--json"]).output().unwrap();
    let stop = kiln(&["serve", "--stop"]).output().unwrap();
    assert!(stop.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let events: Vec<String> = stdout
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}\n{stdout}"));
            v["event"].as_str().unwrap_or_default().to_string()
        })
        .collect();
    for wanted in ["run_finished", "verdicts", "greedy_ab", "bench"] {
        assert!(events.iter().any(|e| e == wanted), "{wanted}: {events:?}");
    }
}
