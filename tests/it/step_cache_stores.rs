//! Stores that never collide (issue 46): staging directories a live store holds (a `flock` on
//! the directory) are never touched by `kiln cache gc`, a killed store's staging is swept by the
//! next store, and an entry whose archive is not what its manifest says (one run's manifest with
//! another's archive, every hash in entry.json matching) is dropped by gc and refused by import.

use std::process::{Command, Stdio};

use serde_json::Value;

use crate::step_cache::Setup;
use crate::step_cache_forged::{forge_entry, forge_outputs, hex, import_archive, Member};

const HELLO: Member<'static> = Member::File("0/hello", 0o755, b"#!/bin/sh\n");

/// State A's entry with its manifest swapped for another's: entry.json's archive hash and size
/// still match the archive, its manifest does not.
fn poisoned(s: &Setup) -> (String, Vec<u8>, Vec<u8>) {
    let (id, entry, outputs) = forge_entry(s, &[Member::Dir("0", 0o755), HELLO]);
    let (_, other) = forge_outputs(&[
        Member::Dir("0", 0o755),
        Member::File("0/hello", 0o755, b"the other run's\n"),
    ]);
    let mut entry: Value = serde_json::from_slice(&entry).unwrap();
    entry["manifest"] = other;
    assert_eq!(entry["archive_sha256"], hex(&outputs));
    (id, serde_json::to_vec(&entry).unwrap(), outputs)
}

fn gc_removed(s: &Setup) -> Value {
    let out = s.kiln_ok("A", &s.cache(), &["cache", "gc", "--json"]);
    out.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["event"] == "cache_gc")
        .unwrap_or_else(|| panic!("no cache_gc event:\n{out}"))["removed"]
        .clone()
}

#[test]
fn cache_gc_never_touches_a_staging_dir_a_live_store_holds() {
    let s = Setup::new();
    s.up("A");
    let steps = s.cache().join("steps");
    let live = steps.join(".staging-live-1");
    let dead = steps.join(".staging-dead-1");
    for d in [&live, &dead] {
        std::fs::create_dir(d).unwrap();
        std::fs::write(d.join("outputs.tar"), b"partial").unwrap();
    }
    // A live store: util-linux flock holds the directory's lock while its child runs.
    let ready = s.ws.path().join("ready");
    let mut holder = Command::new("flock")
        .arg(&live)
        .args(["sh", "-c", "touch \"$0\"; exec sleep 60"])
        .arg(&ready)
        .stdout(Stdio::null())
        .spawn()
        .expect("flock (util-linux) is installed");
    while !ready.exists() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let removed = gc_removed(&s);
    let _ = holder.kill();
    let _ = holder.wait();
    assert!(
        live.join("outputs.tar").is_file(),
        "gc removed a live store: {removed}"
    );
    assert!(!dead.exists(), "gc kept a dead staging dir: {removed}");
    assert_eq!(
        removed,
        serde_json::json!([{"kind": "step", "id": ".staging-dead-1", "reason": "unfinished insert"}])
    );
}

#[test]
fn a_killed_stores_staging_is_removed_by_the_next_store() {
    let s = Setup::new();
    let left = s.cache().join("steps/.staging-killed-7");
    std::fs::create_dir_all(&left).unwrap();
    std::fs::write(left.join("outputs.tar"), vec![0u8; 1 << 20]).unwrap();
    s.up("A");
    assert_eq!(s.entries().len(), 1);
    assert!(!left.exists(), "a killed store's staging stayed");
}

#[test]
fn cache_gc_drops_an_entry_whose_manifest_is_not_its_archive() {
    let s = Setup::new();
    let (id, entry, outputs) = poisoned(&s);
    let dir = s.cache().join("steps").join(&id);
    std::fs::write(dir.join("entry.json"), &entry).unwrap();
    std::fs::write(dir.join("outputs.tar"), &outputs).unwrap();
    let removed = gc_removed(&s);
    assert_eq!(removed[0]["id"], id.as_str(), "{removed}");
    assert!(
        removed[0]["reason"]
            .as_str()
            .unwrap()
            .contains("`0/hello` is not what the manifest says"),
        "{removed}"
    );
    assert!(!dir.exists());
}

#[test]
fn an_import_of_an_entry_whose_manifest_is_not_its_archive_is_refused() {
    let s = Setup::new();
    let (id, entry, outputs) = poisoned(&s);
    let archive = s.ws.path().join("poisoned.tar");
    std::fs::write(&archive, import_archive(&id, &entry, &outputs)).unwrap();
    let fresh = s.ws.path().join("fresh-cache");
    let out = s.kiln_in("B", &fresh, &["cache", "import", archive.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("`0/hello` is not what the manifest says"),
        "{err}"
    );
    assert!(!fresh.join("steps").join(&id).exists());
}

/// Three independent cacheable steps.
const THREE_STEPS: &str = r#"[recipe]
name = "three"

[[step]]
id = "one"
kind = "run"
cmd = ["sh", "-c", "mkdir -p \"$1\" && echo 1 > \"$1/f\"", "sh", "${kiln.work_dir}/one"]
outputs = ["${kiln.work_dir}/one"]

[[step]]
id = "two"
kind = "run"
cmd = ["sh", "-c", "mkdir -p \"$1\" && echo 2 > \"$1/f\"", "sh", "${kiln.work_dir}/two"]
outputs = ["${kiln.work_dir}/two"]

[[step]]
id = "three"
kind = "run"
cmd = ["sh", "-c", "mkdir -p \"$1\" && echo 3 > \"$1/f\"", "sh", "${kiln.work_dir}/three"]
outputs = ["${kiln.work_dir}/three"]
"#;

#[test]
fn a_remote_cache_that_fails_once_is_not_asked_again_in_the_run_and_said_once() {
    // A registry that accepts connections and closes them without a word.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(conn);
        }
    });
    let s = Setup::new();
    s.ws.write("r.toml", THREE_STEPS);
    let out = s
        .kiln_cmd("A", &s.cache())
        .env(
            "KILN_REMOTE_CACHE",
            format!("127.0.0.1:{port}/kiln/cache:t"),
        )
        .args(["up", "r.toml", "--jobs", "1"])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert_eq!(
        text.matches("the remote cache is unavailable").count(),
        1,
        "said once:\n{text}"
    );
    assert!(
        text.contains("not asking the remote cache again in this run"),
        "{text}"
    );
    assert_eq!(text.matches("✓ ran").count(), 3, "{text}");
}

/// `kiln <args>` in state `state` on the shared cache, stopped after a minute (a hang fails).
fn bounded(s: &Setup, state: &str, args: &[&str]) -> (bool, String) {
    let out = s
        .kiln_cmd(state, &s.cache())
        .args(args)
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code().is_some(), "kiln {args:?} hung:\n{text}");
    (out.status.success(), text)
}

#[test]
fn a_fifo_as_entry_json_or_dev_zero_as_the_archive_never_hangs_a_command() {
    let s = Setup::new();
    s.up("A");
    let dir = s.entries()[0].clone();
    // The archive a link to /dev/zero (the entry states its real size).
    let tar = dir.join("outputs.tar");
    std::fs::remove_file(&tar).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &tar).unwrap();
    let (ok, b) = bounded(&s, "B", &["up", "r.toml"]);
    assert!(ok && b.contains("ran    build"), "{b}");
    assert!(
        b.contains("cannot read outputs.tar: Too many levels of symbolic links"),
        "refused as a link, never read: {b}"
    );
    let export = s.ws.path().join("out.tar");
    let (_, _) = bounded(&s, "B", &["cache", "export", export.to_str().unwrap()]);
    // entry.json a FIFO nobody writes.
    let entry = dir.join("entry.json");
    std::fs::remove_file(&entry).unwrap();
    let status = std::process::Command::new("mkfifo")
        .arg(&entry)
        .status()
        .unwrap();
    assert!(status.success());
    for args in [
        &["cache", "ls"][..],
        &["cache", "gc"],
        &["plan", "r.toml"],
        &["up", "r.toml"],
    ] {
        let (ok, text) = bounded(&s, "C", args);
        assert!(ok, "kiln {args:?}:\n{text}");
    }
}

#[test]
fn entry_names_reach_cache_ls_with_their_control_characters_escaped() {
    let s = Setup::new();
    s.up("A");
    let path = s.entries()[0].join("entry.json");
    let mut entry: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    entry["recipe"] = Value::String("evil\u{1b}]0;owned\u{7}\u{1b}[2J".into());
    entry["step"] = Value::String("line\nbreak".into());
    std::fs::write(&path, entry.to_string()).unwrap();
    let ls = s.kiln_ok("A", &s.cache(), &["cache", "ls"]);
    assert!(!ls.contains('\u{1b}') && !ls.contains('\u{7}'), "{ls:?}");
    assert!(
        ls.contains("step evil\\u{1b}]0;owned\\u{7}\\u{1b}[2J/line\\u{a}break"),
        "{ls}"
    );
}

#[test]
fn a_remote_cache_that_accepts_and_never_answers_costs_a_run_seconds_not_minutes() {
    // A registry that accepts connections and never says a word (the connections held open).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            held.push(conn);
        }
    });
    let s = Setup::new();
    s.ws.write("r.toml", THREE_STEPS);
    // The guard is a minute: before the miss path had its own deadlines, one silent request
    // took the OCI client's 120 s.
    let out = s
        .kiln_cmd("A", &s.cache())
        .env(
            "KILN_REMOTE_CACHE",
            format!("127.0.0.1:{port}/kiln/cache:t"),
        )
        .args(["up", "r.toml"])
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "kiln up did not finish within a minute:\n{text}"
    );
    assert_eq!(
        text.matches("the remote cache is unavailable").count(),
        1,
        "{text}"
    );
    assert_eq!(text.matches("✓ ran").count(), 3, "{text}");
}
