//! `kiln up` end to end on the CPU demo stack: steps (already built: fresh) → serve the `tuned`
//! profile → verdicts → greedy A/B against `baseline` → smoke bench → report.json / report.md;
//! then run twice, as README says, and against a port something else holds.

use std::process::Command;

use crate::bench::tiny_cpu;
use crate::common::test_cache;
use crate::serve::free_port;

/// Runs its closure when dropped.
struct OnDrop<'a>(&'a dyn Fn());

impl Drop for OnDrop<'_> {
    fn drop(&mut self) {
        (self.0)();
    }
}

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
    // The server stays up for the second run below; stopped at the end, also when an assertion
    // fails.
    let _stop = OnDrop(&|| {
        let _ = kiln(&["serve", "--stop"]).output();
    });
    let out = kiln(&["up"]).output().unwrap();
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
    for v in verdicts {
        assert_eq!(v["status"], "active", "{v}");
    }
    // What the A/B found: tuned's greedy tokens equal baseline's, prompt by prompt.
    let ab = &report["ab"];
    assert_eq!(report["baseline"], "baseline", "{report}");
    assert_eq!(ab["verdict"], "identical", "{ab}");
    assert_eq!(ab["agreement"], 1.0, "{ab}");
    let prompts = ab["prompts"].as_array().unwrap();
    assert_eq!(prompts.len(), kiln::bench::ab::PROMPTS.len(), "{ab}");
    for p in prompts {
        assert_eq!(p["status"], "identical", "{p}");
        assert!(p["total"].as_u64().unwrap() > 0, "{p}");
        assert_eq!(p["agree"], p["total"], "{p}");
    }
    // What the bench found: every run generated the asked tokens at a decode rate.
    let bench = &report["bench"];
    let runs = bench["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 5, "{bench}");
    for r in runs {
        assert_eq!(r["tokens"], bench["max_tokens"], "{r}");
        assert!(r["decode_tok_s"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert!(
        bench["decode_tok_s"]["median"].as_f64().unwrap() > 0.0,
        "{bench}"
    );
    assert_eq!(
        bench["fingerprint"]["model"], "tiny-random-llama",
        "{bench}"
    );
    let md = std::fs::read_to_string(state.join("reports/tiny-cpu/report.md")).unwrap();
    assert!(
        md.contains("## Tuning verdicts")
            && md.contains("## Greedy A/B")
            && md.contains("## Benchmark"),
        "{md}"
    );
    crate::report_html::assert_renders_in_chromium(&state.join("reports/tiny-cpu/report.html"));

    // Run twice (README): the second `kiln up`, with the first one's server still running on the
    // port, rebuilds nothing, restarts that server cleanly and proves again; --json: stdout is one
    // JSON event per line, the result blocks included, the last one saying how the run ended.
    let out = kiln(&["up", "--json"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{stdout}");
    // With --json the milestones are `note` events on stdout.
    assert!(
        stdout.contains(&format!("port {port} is held by profile `tuned` of tiny-cpu, which an earlier kiln run left running"))
            && stdout.contains("identity checked")
            && stdout.contains("stopping it cleanly, then starting profile `baseline` there"),
        "{stdout}"
    );
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}\n{stdout}"))
        })
        .collect();
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap_or_default())
        .collect();
    for wanted in ["run_finished", "verdicts", "greedy_ab", "bench"] {
        assert!(names.contains(&wanted), "{wanted}: {names:?}");
    }
    let last = events.last().unwrap();
    assert_eq!(
        (&last["event"], &last["ok"]),
        (&"outcome".into(), &true.into()),
        "{last}"
    );
    let reports = state.join("reports/tiny-cpu");
    let prev: serde_json::Value =
        serde_json::from_slice(&std::fs::read(reports.join("report.prev.json")).unwrap()).unwrap();
    assert_eq!(
        prev["outcome"]["ok"], true,
        "the first run's report is kept: {prev}"
    );

    // A port held by something kiln did not start: the error names it, the run's last event says
    // it failed after its steps, and the good report is kept beside the failure's.
    let stop = kiln(&["serve", "--stop"]).output().unwrap();
    assert!(
        stop.status.success(),
        "{}",
        String::from_utf8_lossy(&stop.stderr)
    );
    let squatter = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    // A record naming the squatter (as if its pid had been reused) is not taken for kiln's.
    let record = state.join("serve/tiny-cpu.json");
    let forged = serde_json::json!({
        "recipe": "tiny-cpu", "profile": "tuned", "pid": std::process::id(),
        "url": format!("http://127.0.0.1:{port}"), "api": "openai", "log": "/dev/null",
        "started_unix": 1, "cmd": ["llama-server", "--port", port.to_string()],
    });
    std::fs::write(&record, forged.to_string()).unwrap();
    let out = kiln(&["up"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    // The launch preflight refuses it before any step, naming the holder: the forged record
    // has no process identity, so it is not taken for kiln's server.
    assert!(
        stderr.contains(&format!(
            "port {port} is already in use by pid {}",
            std::process::id()
        )) && stderr.contains("which kiln did not start for tiny-cpu"),
        "{stderr}"
    );
    std::fs::remove_file(&record).unwrap();
    let out = kiln(&["up", "--json"]).output().unwrap();
    drop(squatter);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}\n{stdout}");
    assert!(
        stdout.contains(&format!(
            "port {port} is already in use by pid {}",
            std::process::id()
        )) && stdout.contains("which kiln did not start"),
        "{stdout}"
    );
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let last = events.last().unwrap();
    assert_eq!(
        (&last["event"], &last["ok"]),
        (&"outcome".into(), &false.into()),
        "{stdout}"
    );
    let error = &events[events.len() - 2];
    assert_eq!(error["event"], "error", "{stdout}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("cannot launch on this host"),
        "{error}"
    );
    assert!(
        stdout.contains("already in use") && stdout.contains("the last good report is kept as"),
        "{stdout}"
    );
    let now: serde_json::Value =
        serde_json::from_slice(&std::fs::read(reports.join("report.json")).unwrap()).unwrap();
    assert_eq!(now["outcome"]["ok"], false, "{now}");
    let prev: serde_json::Value =
        serde_json::from_slice(&std::fs::read(reports.join("report.prev.json")).unwrap()).unwrap();
    assert_eq!(prev["outcome"]["ok"], true, "{prev}");
}
