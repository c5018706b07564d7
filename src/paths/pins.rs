//! Pins of the state directory's layout (issue 48's mutation run): every path `StatePaths`
//! builds, as docs/architecture.md lays it out. A later kiln finds what an earlier one wrote
//! only where the layout stays put, so each getter is pinned, not only a sample.

use super::*;

#[test]
fn every_path_of_the_state_and_cache_directories_is_the_documented_one() {
    let p = StatePaths::new(PathBuf::from("/s"), Some(PathBuf::from("/c")));
    let want: [(PathBuf, &str); 27] = [
        (p.root().to_path_buf(), "/s"),
        (p.cache().to_path_buf(), "/c"),
        (p.runs(), "/s/runs"),
        (p.run_dir("r"), "/s/runs/r"),
        (p.receipts("r"), "/s/runs/r/receipts"),
        (p.receipt("r", "a"), "/s/runs/r/receipts/a.json"),
        (p.receipts_index("r"), "/s/runs/r/receipts.idx"),
        (p.step_log("r", "a"), "/s/runs/r/logs/a.log"),
        (p.recipe_cache(), "/s/recipe-cache"),
        (p.hash_memo(), "/s/hashmemo.json"),
        (p.lock(), "/s/lock"),
        (p.clock_granularity(), "/s/clock-granularity"),
        (p.work("r"), "/s/work/r"),
        (p.shipped(), "/s/shipped"),
        (p.serve_dir(), "/s/serve"),
        (p.serve_record("r"), "/s/serve/r.json"),
        (p.serve_log("r", "fast"), "/s/serve/r-fast.log"),
        (p.reports("r"), "/s/reports/r"),
        (p.tune("r"), "/s/tune/r"),
        (p.bench(), "/s/bench"),
        (p.patches(), "/s/patches"),
        (p.running(), "/s/running"),
        (p.downloads(), "/c/downloads"),
        (p.download("AB12"), "/c/downloads/ab12"),
        (p.wheels(), "/c/wheels"),
        (p.steps(), "/c/steps"),
        (p.tool("uv"), "/c/tools/uv"),
    ];
    for (got, want) in want {
        assert_eq!(got, Path::new(want));
    }
    assert_eq!(p.python_facts(), Path::new("/c/python-facts"));
}

/// Whose directory is private (issue 48: `&&` → `||` survived, the tests running as root): a
/// user's own and the superuser's are, another user's is not, whoever asks.
#[test]
fn a_directory_is_private_to_its_owner_and_to_the_superusers_but_not_to_another_user() {
    assert_eq!(not_private_to(1000, 1000, 0o700), None);
    assert_eq!(not_private_to(1000, 0, 0o755), None);
    assert_eq!(not_private_to(0, 0, 0o700), None);
    assert_eq!(
        not_private_to(1000, 1001, 0o700).as_deref(),
        Some("it is owned by uid 1001, not by you (uid 1000)")
    );
    assert_eq!(
        not_private_to(0, 1001, 0o700).as_deref(),
        Some("it is owned by uid 1001, not by you (uid 0)")
    );
    assert_eq!(
        not_private_to(1000, 1000, 0o770).as_deref(),
        Some("it is writable by its group (mode 0770)")
    );
}

/// A state directory kiln cannot read (its path runs through a file) is that error, never taken
/// for one that does not exist yet and created (issue 48: the NotFound guard → true survived).
#[test]
fn a_state_directory_that_cannot_be_read_is_that_error_not_a_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let p = StatePaths::new(file.join("state"), Some(dir.path().join("cache")));
    let e = p.ensure_private().unwrap_err().render();
    assert!(e.contains("cannot read the state directory"), "{e}");
}

/// A state directory that is a link to nothing is named as such, not "cannot create: File
/// exists", and kiln creates nothing at the link's target.
#[test]
fn a_state_directory_linked_to_nothing_is_named_a_dangling_link() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("elsewhere/kiln");
    let link = dir.path().join("state");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let p = StatePaths::new(link.clone(), Some(dir.path().join("cache")));
    let e = p.ensure_private().unwrap_err().render();
    assert!(
        e.contains(&format!(
            "the state directory {} is a link to {}, which does not exist",
            link.display(),
            target.display()
        )),
        "{e}"
    );
    assert!(!dir.path().join("elsewhere").exists());
}
