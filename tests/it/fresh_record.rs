//! The fresh record (`recipe-cache/<slot>.fresh`): a re-run with nothing to do is answered from
//! it without loading the recipe, says exactly what a full plan says, and is never trusted past
//! a change to anything the plan depended on.

use std::path::PathBuf;
use std::time::Duration;

use crate::common::{status_of, Workspace};

const RECIPE: &str = r#"
[recipe]
name = "fresh"

[[step]]
id = "make"
kind = "run"
cwd = "${recipe.dir}"
cmd = ["sh", "-c", "echo run >> counts; touch made"]
check = { paths = ["made"] }

[[step]]
id = "use"
kind = "run"
needs = ["make"]
cwd = "${recipe.dir}"
inputs = ["src/*.txt"]
cmd = ["sh", "-c", "echo run >> counts"]

[[step]]
id = "blackwell"
kind = "run"
when = "gpu.cc >= 12.0"
cmd = ["true"]
"#;

const HOPPER: (&str, &str) = ("KILN_FACT_GPU_CC", "9.0");

struct Ran {
    stdout: String,
    stderr: String,
}

fn kiln(ws: &Workspace, args: &[&str], env: &[(&str, &str)]) -> Ran {
    let mut cmd = ws.kiln();
    cmd.args(args).timeout(Duration::from_secs(60));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("kiln runs");
    let ran = Ran {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(out.status.success(), "kiln {args:?}:\n{}", ran.stderr);
    ran
}

fn cache_entries(ws: &Workspace, ext: &str) -> Vec<PathBuf> {
    std::fs::read_dir(ws.state().join("recipe-cache"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == ext))
                .collect()
        })
        .unwrap_or_default()
}

/// A plan once everything it read is older than the racy window: it records what it found,
/// and the next plan is answered from that record: it does not load the recipe (which would
/// write the recipe cache's entry back).
fn recorded(ws: &Workspace) -> String {
    std::thread::sleep(Duration::from_millis(120));
    let plan = kiln(ws, &["plan", "r.toml"], &[HOPPER]).stdout;
    assert_eq!(cache_entries(ws, "fresh").len(), 1, "no record:\n{plan}");
    for entry in cache_entries(ws, "json") {
        std::fs::remove_file(entry).unwrap();
    }
    assert_eq!(kiln(ws, &["plan", "r.toml"], &[HOPPER]).stdout, plan);
    assert!(
        cache_entries(ws, "json").is_empty(),
        "the record was not used"
    );
    plan
}

fn workspace() -> Workspace {
    let ws = Workspace::new();
    ws.write("r.toml", RECIPE);
    ws.write("src/a.txt", "one");
    kiln(&ws, &["up", "r.toml"], &[HOPPER]);
    ws
}

#[test]
fn a_no_op_from_the_record_says_what_a_full_plan_says_without_loading_the_recipe() {
    let ws = workspace();
    let full = recorded(&ws);
    assert!(full.contains("2 fresh, 1 skipped"), "{full}");
    let no_cache = [HOPPER, ("KILN_NO_RECIPE_CACHE", "1")];
    let full_json = kiln(&ws, &["plan", "r.toml", "--json"], &no_cache).stdout;
    let full_up = kiln(&ws, &["up", "r.toml"], &no_cache).stderr;
    // `recorded` again: the commands below are answered from the record alone.
    recorded(&ws);
    assert_eq!(kiln(&ws, &["plan", "r.toml"], &[HOPPER]).stdout, full);
    assert_eq!(
        kiln(&ws, &["plan", "r.toml", "--json"], &[HOPPER]).stdout,
        full_json
    );
    assert_eq!(kiln(&ws, &["up", "r.toml"], &[HOPPER]).stderr, full_up);
    assert!(full_up.contains("0 of 3 steps to run"), "{full_up}");
    assert!(
        full_up.contains("skip   blackwell: `when = \"gpu.cc >= 12.0\"` is false on this host"),
        "{full_up}"
    );
    assert!(
        cache_entries(&ws, "json").is_empty(),
        "a command loaded the recipe"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("counts")).unwrap(),
        "run\nrun\n"
    );
}

#[test]
fn the_record_is_not_trusted_past_a_change_to_what_the_plan_read() {
    let ws = workspace();
    type Change = fn(&Workspace) -> Vec<(&'static str, &'static str)>;
    let changes: [(&str, Change, &str, &str); 6] = [
        (
            "an input edited",
            |ws| {
                ws.write("src/a.txt", "two");
                vec![]
            },
            "use",
            "stale use run input",
        ),
        (
            "an input added",
            |ws| {
                ws.write("src/b.txt", "new");
                vec![]
            },
            "use",
            "stale use run input",
        ),
        (
            "a checked path removed",
            |ws| {
                std::fs::remove_file(ws.path().join("made")).unwrap();
                vec![]
            },
            "make",
            "stale make run check path",
        ),
        (
            "a receipt removed",
            |ws| {
                let receipt = ws.state().join("runs/fresh/receipts/use.json");
                std::fs::remove_file(receipt).unwrap();
                vec![]
            },
            "use",
            "stale use run never completed",
        ),
        (
            "a host fact a condition reads",
            |_| vec![("KILN_FACT_GPU_CC", "12.0")],
            "blackwell",
            "stale blackwell run never completed",
        ),
        (
            "the recipe edited",
            |ws| {
                ws.write(
                    "r.toml",
                    &RECIPE.replace("echo run >> counts\"]", "echo ran >> counts\"]"),
                );
                vec![]
            },
            "use",
            "stale use run its definition changed",
        ),
    ];
    for (what, change, step, expected) in changes {
        recorded(&ws);
        let env = change(&ws);
        let env = if env.is_empty() { vec![HOPPER] } else { env };
        let plan = kiln(&ws, &["plan", "r.toml"], &env).stdout;
        assert!(
            status_of(&plan, step).starts_with(expected),
            "after {what}:\n{plan}"
        );
        let up = kiln(&ws, &["up", "r.toml"], &env).stderr;
        // A removed output whose step key did not change comes back from the step cache (its
        // files checked against the entry); every other change reruns the step.
        let done = if what == "a checked path removed" {
            format!("cached {step}: restored from cache (entry ")
        } else {
            format!("ran    {step}")
        };
        assert!(up.contains(&done), "after {what}:\n{up}");
        if what == "a host fact a condition reads" {
            // Back to the facts the other changes are planned with.
            kiln(&ws, &["up", "r.toml"], &[HOPPER]);
        }
    }
}

#[test]
fn a_no_op_from_the_record_fails_on_a_lock_another_run_holds() {
    let ws = workspace();
    recorded(&ws);
    // Another holder of the state directory's lock (flock(2), as kiln takes it).
    let mut holder = std::process::Command::new("flock")
        .arg(ws.state().join("lock"))
        .args(["sleep", "30"])
        .spawn()
        .expect("flock runs");
    let mut locked = false;
    for _ in 0..100 {
        let out = ws
            .kiln()
            .args(["up", "r.toml"])
            .env(HOPPER.0, HOPPER.1)
            .output()
            .unwrap();
        if out.status.code() == Some(1) {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("is in use by another kiln run")
                    && stderr.contains("hint: wait for the other run to finish"),
                "{stderr}"
            );
            locked = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(locked, "kiln up never saw the lock held");
    assert!(
        cache_entries(&ws, "json").is_empty(),
        "answered from the record, not by loading the recipe"
    );
}
