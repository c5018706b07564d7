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
