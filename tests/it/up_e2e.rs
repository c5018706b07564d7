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
    // The build's state dir holds the step receipts: no build may start while this test runs on
    // it (a build takes the lock exclusive); tests that only serve the demo go on beside it.
    let lock = std::fs::File::create(root.join(".tiny-cpu.lock")).unwrap();
    lock.lock_shared().unwrap();
    let state = root.join("tiny-cpu-state");
    let recipe = format!("{}/recipes/tiny-cpu.toml", env!("CARGO_MANIFEST_DIR"));
    let port = free_port();
    let sets = [
        format!("prefix={}", prefix.display()),
        format!("port={port}"),
    ];
    // The smallest smoke bench that still proves what this test claims (runs that generate every
    // asked token at a decode rate, a median, a ceiling test chosen by size): 3 runs of 256
    // tokens, not the default 5 of 2048 (most of this test's time on a busy box).
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
    // The optional llama-bench step's output (shared build cache): absent for the first run, so
    // that its report says the ceiling is missing; the second run (llama_bench=on) writes it.
    let ceiling_file = prefix.join("llama-bench.json");
    let _ = std::fs::remove_file(&ceiling_file);
    let small_bench = ["--bench-runs", "3", "--bench-max-tokens", "256"];
    let out = kiln(&["up"]).args(small_bench).output().unwrap();
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
        stderr.contains("0 of 6 steps to run"),
        "the built steps are fresh (llama-bench is off): {stderr}"
    );
    assert!(stderr.contains("serving profile `tuned`"), "{stderr}");
    // How to stop it names the recipe as this command did (a bare `kiln serve --stop` would stop
    // the host's default recipe's server).
    assert!(
        stderr.contains(&format!("; stop it with `kiln serve {recipe} --stop`")),
        "{stderr}"
    );
    // `tuned` has evidence-only args (`-lv 5`): a judged launch (verdicts, and the A/B reads its
    // outputs), stopped, then a bench launch without them; `baseline` once.
    assert_eq!(
        stderr.matches("started profile `tuned`").count(),
        2,
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "judged launch stopped; bench launch: profile `tuned` without its evidence-only args"
        ),
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
    assert_eq!(runs.len(), 3, "{bench}");
    assert_eq!(bench["max_tokens"], 256, "{bench}");
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
    assert_two_launches(&report);
    // No llama-bench output: its step is off by default, said as such, not an error.
    assert!(report["ceiling"]["figure"].is_null(), "{report}");
    assert_eq!(
        report["ceiling"]["skipped"],
        "step `llama-bench` is skipped (`when = \"var.llama_bench == on\"` is false on this host)",
        "{report}"
    );
    let md = std::fs::read_to_string(state.join("reports/tiny-cpu/report.md")).unwrap();
    let (judged_pid, bench_pid) = (&report["launches"][0]["pid"], &report["launches"][1]["pid"]);
    assert!(
        md.contains(&format!(
            "## Tuning verdicts (judged launch, pid {judged_pid})"
        )) && md.contains(&format!("## Greedy A/B (judged launch, pid {judged_pid})"))
            && md.contains(&format!("## Benchmark (bench launch, pid {bench_pid})"))
            && md.contains(&format!(
                "## Verdicts of the bench launch (pid {bench_pid})"
            ))
            && md.contains("| judged launch |")
            && md.contains("-lv 5 (was -lv 4)")
            && md.contains(
                // kiln's own sentence, its backticks escaped like every text report.md quotes
                "no ceiling: step \\`llama-bench\\` is skipped (\\`when = \"var.llama_bench == on\"\\` is false on this host)"
            ),
        "{md}"
    );
    crate::report_html::assert_renders_in_chromium(&state.join("reports/tiny-cpu/report.html"));

    // Run twice (README): the second `kiln up`, with the first one's server still running on the
    // port, rebuilds nothing, restarts that server cleanly and proves again; --json: stdout is one
    // JSON event per line, the result blocks included, the last one saying how the run ended.
    // With llama_bench=on the optional step builds llama-bench from the same tree and runs it;
    // the report puts its decode figure beside the bench launch's.
    let out = kiln(&["up", "--json"])
        .args(small_bench)
        .args(["--set", "llama_bench=on"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{stdout}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join("reports/tiny-cpu/report.json")).unwrap())
            .unwrap();
    assert_two_launches(&report);
    let ceiling = &report["ceiling"];
    // llama-bench ran `-n 128,2048`: the test closest to the bench's 256 tokens.
    assert_eq!(ceiling["figure"]["test"], "tg128", "{ceiling}");
    let (served, top) = (
        ceiling["served_decode_tok_s"].as_f64().unwrap(),
        ceiling["figure"]["tok_s"].as_f64().unwrap(),
    );
    assert_eq!(
        ceiling["served_decode_tok_s"], report["bench"]["decode_tok_s"]["median"],
        "the served figure is the bench launch's decode median"
    );
    assert!(top > 0.0, "{ceiling}");
    let ratio = ceiling["ratio"].as_f64().unwrap();
    assert!((ratio - served / top).abs() < 1e-9, "{ceiling}");
    let md = std::fs::read_to_string(state.join("reports/tiny-cpu/report.md")).unwrap();
    assert!(
        md.contains(&format!(
            "served {served:.1} tok/s (bench launch, pid {}) · ceiling llama-bench tg128 {top:.1} tok/s",
            report["pid"]
        )),
        "{md}"
    );
    let html = std::fs::read_to_string(state.join("reports/tiny-cpu/report.html")).unwrap();
    assert!(
        html.contains("<h2>Ceiling</h2>") && html.contains("<h2>Launches</h2>"),
        "{html}"
    );
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

/// report.json of a `tuned` run: a judged launch with `-lv 5`, then the bench launch at the
/// profile's own `-lv 4`, the one left running; each figure names its launch, and each launch's
/// own lines in the log (from its recorded offset) show its command and the verbosity the
/// server itself reports.
fn assert_two_launches(report: &serde_json::Value) {
    let launches = report["launches"].as_array().unwrap();
    assert_eq!(launches.len(), 2, "{report}");
    let (judged, bench) = (&launches[0], &launches[1]);
    assert_eq!(judged["launch"], "judged", "{report}");
    assert_eq!(bench["launch"], "bench", "{report}");
    assert_ne!(judged["pid"], bench["pid"], "{report}");
    assert_eq!(
        report["pid"], bench["pid"],
        "the bench launch is left running"
    );
    assert_eq!(
        judged["args_difference"],
        serde_json::json!(["-lv 5 (was -lv 4)"])
    );
    assert_eq!(bench["args_difference"], serde_json::json!([]));
    assert_eq!(
        judged["figures"],
        serde_json::json!(["verdicts", "greedy_ab"])
    );
    assert_eq!(
        bench["figures"],
        serde_json::json!(["bench_launch_verdicts", "bench", "ceiling_ratio"])
    );
    // Both launches prove flash attention and threads: their start-up lines show at -lv 4.
    for l in launches {
        let verdicts = l["verdicts"].as_array().unwrap();
        assert_eq!(verdicts.len(), 2, "{l}");
        for v in verdicts {
            assert_eq!(v["status"], "active", "{v}");
        }
    }
    let lines = |l: &serde_json::Value| -> Vec<String> {
        use std::io::{Read, Seek, SeekFrom};
        let mut f = std::fs::File::open(l["log"].as_str().unwrap()).unwrap();
        f.seek(SeekFrom::Start(l["log_offset"].as_u64().unwrap()))
            .unwrap();
        let mut text = String::new();
        f.read_to_string(&mut text).unwrap();
        let header = text.lines().next().unwrap_or_default().to_string();
        assert!(
            header.contains(&format!("[launch {}]", l["launch_id"].as_str().unwrap())),
            "{header}"
        );
        // Up to the next launch's header.
        text.lines()
            .take_while(|x| *x == header || !x.starts_with("=== kiln serve"))
            .map(String::from)
            .collect()
    };
    let (j, b) = (lines(judged), lines(bench));
    assert!(
        j[0].contains(" -lv 5 ") && !j[0].contains(" -lv 4 "),
        "{}",
        j[0]
    );
    assert!(
        b[0].contains(" -lv 4 ") && !b[0].contains(" -lv 5"),
        "{}",
        b[0]
    );
    assert!(j.iter().any(|l| l.contains("verbosity = 5")), "{j:?}");
    assert!(b.iter().any(|l| l.contains("verbosity = 4")), "{b:?}");
}
