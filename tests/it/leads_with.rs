//! Output that leads with what matters: `kiln cache ls` says what the cache holds before what
//! it does not.

use crate::step_cache::Setup;

#[test]
fn cache_ls_lists_its_step_entries_before_saying_it_has_no_wheels() {
    let s = Setup::new();
    s.up("state-a");
    let out =
        s.ws.kiln()
            .args(["cache", "ls"])
            .env("KILN_CACHE_DIR", s.cache())
            .output()
            .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].contains("  step cc-demo/build  "), "{text}");
    assert!(lines[1].starts_with("no compiled wheels in "), "{text}");
}

/// `kiln up --json > file` at a terminal: the JSON lines go to the file, and the terminal shows
/// the run's progress instead of nothing (a real pseudo-terminal: util-linux `script`).
#[test]
fn json_to_a_file_still_shows_progress_on_the_terminal() {
    let ws = crate::common::Workspace::new();
    ws.write(
        "r.toml",
        "[recipe]\nname = \"quiet\"\n\n[[step]]\nid = \"work\"\nkind = \"run\"\ncmd = [\"true\"]\n",
    );
    let kiln = assert_cmd::cargo::cargo_bin("kiln");
    let out = std::process::Command::new("script")
        .args([
            "-qec",
            &format!("{} up --json r.toml > events.jsonl", kiln.display()),
            "/dev/null",
        ])
        .current_dir(ws.path())
        .env("KILN_HOME", ws.state())
        .env_remove("KILN_NO_PROGRESS")
        .env("NO_COLOR", "1")
        .env("TERM", "xterm")
        .output()
        .expect("script runs (util-linux)");
    let terminal = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{terminal}");
    assert!(terminal.contains("✓ ran    work ("), "{terminal}");
    assert!(terminal.contains("kiln: done in "), "{terminal}");
    assert!(!terminal.contains("\"event\""), "{terminal}");
    let events = std::fs::read_to_string(ws.path().join("events.jsonl")).unwrap();
    let kinds: Vec<String> = events
        .lines()
        .map(|l| {
            let e: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            e["event"].as_str().unwrap().to_string()
        })
        .collect();
    assert!(kinds.iter().any(|k| k == "step_finished"), "{events}");
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("outcome"),
        "{events}"
    );
}
