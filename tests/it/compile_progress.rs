//! Progress of a long compile: a step that prints the CPU demo's real llama-server build output
//! (cmake -G Ninja) reports objects done of total as `--json` events, with an ETA from the last
//! run of the step once it has one; the full output stays in the step log.

use std::path::Path;

use crate::common::Workspace;

fn recipe(ws: &Workspace, round: u32) {
    let log =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/build/llama-server-ninja.log");
    ws.write(
        "p.toml",
        &format!(
            r#"[recipe]
name = "p"
[[step]]
id = "build"
kind = "run"
env = {{ ROUND = "{round}" }}
cmd = ["cat", "{}"]
"#,
            log.display()
        ),
    );
}

fn progress_events(ws: &Workspace) -> Vec<serde_json::Value> {
    let out = ws.kiln().args(["up", "--json", "p.toml"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["event"] == "step_progress")
        .collect()
}

#[test]
fn a_ninja_build_reports_objects_done_of_total_and_an_eta_from_the_last_run() {
    let ws = Workspace::new();
    recipe(&ws, 1);
    let first = progress_events(&ws);
    assert_eq!(first.len(), 206, "{first:?}");
    for (i, e) in first.iter().enumerate() {
        assert_eq!(
            (e["step"].as_str(), e["done"].as_u64(), e["total"].as_u64()),
            (Some("build"), Some(i as u64 + 1), Some(206)),
            "{e}"
        );
        assert!(
            e["elapsed_ms"].is_u64() && e.get("last_run_ms").is_none(),
            "{e}"
        );
    }
    let log = std::fs::read_to_string(ws.state().join("runs/p/logs/build.log")).unwrap();
    assert!(
        log.contains("[206/206] Linking CXX executable bin/llama-server")
            && log.contains("-- Configuring done")
    );
    // The step changed: it runs again, and now knows how long it took last time.
    recipe(&ws, 2);
    let second = progress_events(&ws);
    assert_eq!(second.len(), 206);
    assert!(
        second.iter().all(|e| e["last_run_ms"].is_u64()),
        "{:?}",
        second[0]
    );
}

/// A log (plain lines: no terminal) sees the compile move: a line at each quarter of its
/// objects, with the time so far.
#[test]
fn a_plain_log_shows_a_long_compile_at_each_quarter() {
    let ws = Workspace::new();
    recipe(&ws, 1);
    let out = ws.kiln().args(["up", "p.toml"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("    build: "))
        .collect();
    let counts: Vec<&str> = lines
        .iter()
        .map(|l| l.split(" objects").next().unwrap())
        .collect();
    assert_eq!(
        counts,
        [
            "    build: 52 of 206",
            "    build: 103 of 206",
            "    build: 155 of 206",
            "    build: 206 of 206"
        ],
        "{stderr}"
    );
    assert!(lines.iter().all(|l| l.contains(" objects, ")), "{stderr}");
}
