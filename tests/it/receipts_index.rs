//! The receipts index (`runs/<recipe>/receipts.idx`): a cache of the receipt files that a no-op
//! plan reads instead of one receipt per step, and that is never trusted over the receipts.

use std::path::PathBuf;
use std::time::Duration;

use crate::common::{status_of, Workspace};

const RECIPE: &str = r#"
[recipe]
name = "idx"

[[step]]
id = "a"
kind = "run"
cmd = ["sh", "-c", "echo run >> \"$1\"", "sh", "${recipe.dir}/counts-a"]

[[step]]
id = "b"
kind = "run"
needs = ["a"]
cmd = ["sh", "-c", "echo run >> \"$1\"", "sh", "${recipe.dir}/counts-b"]
"#;

fn run_dir(ws: &Workspace) -> PathBuf {
    ws.state().join("runs").join("idx")
}

fn kiln_ok(ws: &Workspace, args: &[&str]) -> String {
    let out = ws
        .kiln()
        .args(args)
        .timeout(Duration::from_secs(60))
        .output()
        .expect("kiln runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kiln {args:?} failed:\n{stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn runs(ws: &Workspace, id: &str) -> usize {
    std::fs::read_to_string(ws.path().join(format!("counts-{id}"))).map_or(0, |t| t.lines().count())
}

/// A run, then a plan once the receipts are older than the racy window: the index exists.
fn indexed_workspace() -> Workspace {
    let ws = Workspace::new();
    ws.write("r.toml", RECIPE);
    kiln_ok(&ws, &["up", "r.toml"]);
    std::thread::sleep(Duration::from_millis(120));
    let plan = kiln_ok(&ws, &["plan", "r.toml"]);
    assert!(status_of(&plan, "b").starts_with("fresh"), "{plan}");
    let index = std::fs::read_to_string(run_dir(&ws).join("receipts.idx")).expect("an index");
    assert!(index.starts_with("kiln-receipts-index 1 "), "{index}");
    assert!(index.ends_with("end 2\n"), "{index}");
    ws
}

#[test]
fn a_receipt_removed_by_hand_is_seen_although_the_index_lists_it() {
    let ws = indexed_workspace();
    std::fs::remove_file(run_dir(&ws).join("receipts").join("b.json")).unwrap();
    let plan = kiln_ok(&ws, &["plan", "r.toml"]);
    assert_eq!(status_of(&plan, "a"), "fresh a run");
    assert_eq!(status_of(&plan, "b"), "stale b run never completed");
    kiln_ok(&ws, &["up", "r.toml"]);
    assert_eq!((runs(&ws, "a"), runs(&ws, "b")), (1, 2));
}

#[test]
fn a_garbled_or_cut_index_falls_back_to_the_receipts_and_is_rewritten() {
    let ws = indexed_workspace();
    let path = run_dir(&ws).join("receipts.idx");
    let good = std::fs::read_to_string(&path).unwrap();
    for bad in [
        "garbage".to_string(),
        good.replace("end 2\n", ""),
        good.replace(" 1 ", " 1 0 "),
    ] {
        std::fs::write(&path, &bad).unwrap();
        // Without the recipe cache's fresh record, which would answer before the index.
        let out = ws
            .kiln()
            .args(["plan", "r.toml"])
            .env("KILN_NO_RECIPE_CACHE", "1")
            .output()
            .expect("kiln runs");
        assert!(out.status.success());
        let plan = String::from_utf8_lossy(&out.stdout);
        assert!(status_of(&plan, "a").starts_with("fresh"), "{plan}");
        assert!(status_of(&plan, "b").starts_with("fresh"), "{plan}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), good);
    }
    kiln_ok(&ws, &["up", "r.toml"]);
    assert_eq!((runs(&ws, "a"), runs(&ws, "b")), (1, 1));
}

#[test]
fn a_run_that_changes_receipts_deletes_the_index_first() {
    let ws = indexed_workspace();
    let path = run_dir(&ws).join("receipts.idx");
    let before = std::fs::read_to_string(&path).unwrap();
    kiln_ok(&ws, &["up", "r.toml", "--force", "a"]);
    // The run just wrote receipts: its index, if any, is not the old one.
    let after = std::fs::read_to_string(&path).unwrap_or_default();
    assert_ne!(after, before);

    // Even an old index put back is not trusted: the receipts directory changed since. The
    // recipe changes and runs (every receipt is now for the new commands), then the old recipe
    // and its old index are put back: that index says both steps are fresh, their receipts say
    // they were made for other commands, and the plan follows the receipts. No receipt is
    // touched by hand, so only the index is on trial.
    ws.write("r.toml", &RECIPE.replace("echo run", "echo changed"));
    kiln_ok(&ws, &["up", "r.toml"]);
    assert_eq!((runs(&ws, "a"), runs(&ws, "b")), (3, 2));
    ws.write("r.toml", RECIPE);
    std::fs::write(&path, &before).unwrap();
    let out = ws
        .kiln()
        .args(["plan", "r.toml"])
        .env("KILN_NO_RECIPE_CACHE", "1")
        .output()
        .expect("kiln runs");
    assert!(out.status.success());
    let plan = String::from_utf8_lossy(&out.stdout);
    for id in ["a", "b"] {
        let line = status_of(&plan, id);
        assert!(
            line.starts_with(&format!("stale {id} run")) && !line.contains("never completed"),
            "{plan}"
        );
    }
}
