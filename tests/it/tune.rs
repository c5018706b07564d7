//! `kiln tune` end to end on the CPU demo with the real llama-server: variants judged, compared with
//! the baseline's greedy output, benchmarked, ranked; the winner file is servable.

use crate::bench::tiny_cpu;
use crate::common::Workspace;
use crate::serve::free_port;

fn recipe() -> String {
    format!("{}/recipes/tiny-cpu.toml", env!("CARGO_MANIFEST_DIR"))
}

/// `kiln tune` of tiny-cpu's `tuned` profile, served from the llama-server at `prefix` on a free
/// port.
fn tune_tuned(ws: &Workspace, prefix: &std::path::Path) -> assert_cmd::Command {
    let mut cmd = ws.kiln();
    cmd.args(["tune", &recipe(), "--profile", "tuned"])
        .args(["--set", &format!("prefix={}", prefix.display())])
        .args(["--set", &format!("port={}", free_port())]);
    cmd
}

#[test]
fn halving_ranks_qualified_variants_and_disqualifies_a_fallen_back_tuning() {
    let prefix = tiny_cpu();
    let ws = Workspace::new();
    let out = tune_tuned(&ws, &prefix)
        .args(["--vary=-fa=on,off", "--vary=-b=256,1024"])
        .args([
            "--runs",
            "2",
            "--warmup",
            "1",
            "--max-tokens",
            "64",
            "--ab-tokens",
            "16",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    // `tuned` expects flash attention: the `-fa off` variants fell back and cannot win.
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("rank variant"), "{stdout}");
    assert!(
        lines[1].starts_with("1    -fa=on -b=") && lines[1].ends_with("winner"),
        "{stdout}"
    );
    let disqualified: Vec<&&str> = lines
        .iter()
        .filter(|l| l.contains("disqualified: flash-attn fell back"))
        .collect();
    assert_eq!(disqualified.len(), 2, "{stdout}");
    assert!(
        disqualified.iter().all(|l| l.contains("-fa=off")),
        "{stdout}"
    );

    let dir = ws.state().join("tune/tiny-cpu");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("tuned.json")).unwrap()).unwrap();
    assert_eq!(json["method"], "halving");
    let entries = json["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 4);
    let winner = &entries[0];
    assert!(
        winner["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e.as_str().unwrap().starts_with("greedy A/B: identical")),
        "{winner}"
    );
    let svg = std::fs::read_to_string(dir.join("tuned.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("disqualified: flash-attn fell back"));

    // The winner file is a recipe: its profile replays the variant's own log as active.
    let best = dir.join("tuned-best.toml");
    let text = std::fs::read_to_string(&best).unwrap();
    assert!(
        text.contains("[profile.tuned-best]") && text.contains("baseline = \"baseline\""),
        "{text}"
    );
    let log = ws.state().join("serve/tiny-cpu-tuned.log");
    let judged = ws
        .kiln()
        .arg("serve")
        .arg(&best)
        .args(["--profile", "tuned-best", "--log"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&judged.stdout).contains("flash-attn                   active"),
        "{}",
        String::from_utf8_lossy(&judged.stdout)
    );
}

#[test]
fn a_variable_the_recipe_lacks_is_refused_with_a_suggestion() {
    let ws = Workspace::new();
    let out = ws
        .kiln()
        .args([
            "tune",
            &recipe(),
            "--profile",
            "tuned",
            "--vary",
            "thread_tuned=1,2",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("recipe `tiny-cpu` has no variable `thread_tuned`")
            && stderr.contains("did you mean `threads_tuned`?"),
        "{stderr}"
    );
}

#[test]
fn when_every_variant_falls_back_there_is_no_winner_and_the_error_says_why() {
    let prefix = tiny_cpu();
    let ws = Workspace::new();
    let out = tune_tuned(&ws, &prefix)
        .args([
            "--vary=-fa=off",
            "--runs",
            "1",
            "--warmup",
            "0",
            "--max-tokens",
            "32",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("disqualified: flash-attn fell back"),
        "{stdout}"
    );
    assert!(
        stderr.contains("error: no variant of `tuned` qualified"),
        "{stderr}"
    );
    assert!(!ws.state().join("tune/tiny-cpu/tuned-best.toml").exists());
}

#[test]
fn zero_measured_runs_is_refused_before_anything_launches() {
    let ws = Workspace::new();
    for args in [
        &["tune", "r.toml", "--profile", "tuned", "--runs", "0"][..],
        &["bench", "--url", "http://127.0.0.1:9", "--runs", "0"][..],
    ] {
        let out = ws.kiln().args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("invalid value '0' for '--runs <RUNS>'"),
            "{args:?}: {stderr}"
        );
    }
}
