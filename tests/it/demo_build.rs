//! The CPU demo's llama-server (recipes/tiny-cpu.toml), built at most once per test cache and
//! shared by every test that serves it: threads of this binary and other `cargo test` processes
//! wait on one file lock, and the step receipts in `$KILN_TEST_CACHE/tiny-cpu-state` make every
//! later call (this run's other tests, the next run) a plan with nothing to do. A build, and a wait
//! for another test's build, are said on the terminal past the test harness's capture, with the
//! time they take, so that a cold run does not look hung.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::test_cache;

/// What a cold build takes on 2 idle cores (BENCHMARKS.md: ~10 min; 30+ under load).
const COLD_BUILD: &str = "~10 min on 2 idle cores, 30+ min on a loaded box";

/// A line on stderr past the harness's capture (the harness captures `eprintln!`, not writes
/// to the stderr handle), so that it shows while the test runs.
pub(crate) fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "tests: {line}");
}

/// `12m 5s`, `40s`.
fn mins(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 {
        format!("{}m {}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// Build (once) and return the tiny-cpu prefix: `$KILN_TEST_CACHE/tiny-cpu`. Checking that it
/// is built takes the lock shared (many tests at once, and beside up_e2e's run on the same
/// state, which holds it shared too); building takes it exclusive.
pub(crate) fn tiny_cpu() -> PathBuf {
    let root = test_cache();
    std::fs::create_dir_all(&root).unwrap();
    let prefix = root.join("tiny-cpu");
    let state = root.join("tiny-cpu-state");
    let lock = std::fs::File::create(root.join(".tiny-cpu.lock")).unwrap();
    wait_for(&root, || lock.try_lock_shared(), || lock.lock_shared());
    if steps_to_run(&prefix, &state).is_empty() {
        return prefix;
    }
    lock.unlock().unwrap();
    wait_for(&root, || lock.try_lock(), || lock.lock());
    let to_run = steps_to_run(&prefix, &state);
    if to_run.is_empty() {
        return prefix;
    }
    say(&format!(
        "building the CPU demo's llama-server from source into {} (steps {}): {COLD_BUILD}, once per test cache (KILN_TEST_CACHE); kiln's step lines follow",
        prefix.display(),
        to_run.join(", ")
    ));
    let since = Instant::now();
    let mut child = kiln(
        &["up", "recipes/tiny-cpu.toml", "--no-serve"],
        &prefix,
        &state,
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut log = String::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        let _ = writeln!(std::io::stderr(), "tests: tiny-cpu | {line}");
        log.push_str(&line);
        log.push('\n');
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "building tiny-cpu failed:\n{log}");
    say(&format!(
        "built the CPU demo's llama-server in {}; later tests and runs reuse it",
        mins(since.elapsed())
    ));
    prefix
}

/// Take the lock with `take`, saying past the capture when `try_take` finds it held (another
/// test builds the demo, or runs on its state) and how long the wait was.
fn wait_for(
    root: &Path,
    try_take: impl Fn() -> Result<(), std::fs::TryLockError>,
    take: impl Fn() -> std::io::Result<()>,
) {
    match try_take() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let since = Instant::now();
            say(&format!(
                "waiting for another test (or `cargo test` process) that builds the CPU demo's llama-server or runs on its state (lock {})",
                root.join(".tiny-cpu.lock").display()
            ));
            take().unwrap();
            say(&format!(
                "the CPU demo's llama-server is ready after {} of waiting",
                mins(since.elapsed())
            ));
        }
        Err(std::fs::TryLockError::Error(e)) => panic!("cannot lock the CPU demo's build: {e}"),
    }
}

/// `kiln ARGS` on the test cache's tiny-cpu state and prefix, from the repository root.
fn kiln(args: &[&str], prefix: &Path, state: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
    c.args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("KILN_NO_PROGRESS", "1")
        .arg("--state-dir")
        .arg(state)
        .arg("--set")
        .arg(format!("prefix={}", prefix.display()));
    c
}

/// The steps `kiln plan` says are stale (none once the build is in the test cache).
fn steps_to_run(prefix: &Path, state: &Path) -> Vec<String> {
    let out = kiln(&["plan", "recipes/tiny-cpu.toml", "--json"], prefix, state)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kiln plan tiny-cpu failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let plan: serde_json::Value = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| e["event"] == "plan")
        .unwrap_or_else(|| panic!("no plan event in kiln plan --json's output:\n{text}"));
    plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["status"] == "stale")
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}
