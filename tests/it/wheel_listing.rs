//! `kiln cache ls` checks each wheel against its entry (#47): a pulled wheel whose local copy
//! was damaged since (a flipped byte, a cut file, a missing file) is listed as corrupt, with
//! what to run, never as a good cached wheel.

use std::path::Path;

use crate::common::Workspace;

/// A wheel entry as `kiln cache pull` leaves one: its entry.json (the wheel's sha256 and size)
/// beside the wheel. The wheel's path.
fn pulled(wheels: &Path, bytes: &[u8]) -> std::path::PathBuf {
    let key = serde_json::json!({
        "package": "six", "version": "1.17.0", "source_sha256": "0".repeat(64),
        "python_tag": "cp311", "torch": null, "cuda": null, "arch_list": null, "env": {},
    });
    let id = kiln::hash::sha256_bytes(&serde_json::to_vec(&key).unwrap());
    let dir = wheels.join(&id);
    std::fs::create_dir_all(&dir).unwrap();
    let name = "six-1.17.0-py2.py3-none-any.whl";
    std::fs::write(dir.join(name), bytes).unwrap();
    let entry = serde_json::json!({
        "key": key, "wheel": name, "sha256": kiln::hash::sha256_bytes(bytes),
        "size": bytes.len(), "created_unix": 1_700_000_000u64,
    });
    std::fs::write(
        dir.join("entry.json"),
        serde_json::to_vec_pretty(&entry).unwrap(),
    )
    .unwrap();
    dir.join(name)
}

/// `kiln cache ls`: its human listing, and the `cache` event's wheel entries.
fn ls(ws: &Workspace) -> (String, Vec<serde_json::Value>) {
    let human = ws.kiln().args(["cache", "ls"]).output().unwrap();
    assert!(human.status.success(), "{human:?}");
    let json = ws.kiln().args(["cache", "ls", "--json"]).output().unwrap();
    let event = crate::reporter::json_event(&String::from_utf8_lossy(&json.stdout), "cache");
    (
        String::from_utf8_lossy(&human.stdout).into_owned(),
        event["entries"].as_array().unwrap().clone(),
    )
}

#[test]
fn a_corrupt_local_wheel_is_listed_as_corrupt() {
    let ws = Workspace::new();
    let wheel = pulled(
        &ws.state().join("cache/wheels"),
        b"PK\x03\x04 a wheel's bytes",
    );
    let (human, entries) = ls(&ws);
    assert!(
        human.contains("six 1.17.0") && !human.contains("corrupt"),
        "{human}"
    );
    assert_eq!(
        entries[0]["problem"],
        serde_json::Value::Null,
        "{entries:?}"
    );
    let damaged: [(&str, &dyn Fn()); 3] = [
        ("a flipped byte", &|| {
            std::fs::write(&wheel, b"PK\x03\x04 a wheel's bytez").unwrap();
        }),
        ("a cut file", &|| {
            std::fs::write(&wheel, b"PK\x03\x04").unwrap();
        }),
        ("no file", &|| std::fs::remove_file(&wheel).unwrap()),
    ];
    for (what, damage) in damaged {
        damage();
        let (human, entries) = ls(&ws);
        let line = human
            .lines()
            .find(|l| l.contains("six 1.17.0"))
            .unwrap_or_else(|| panic!("{what}: not listed:\n{human}"));
        assert!(
            line.contains("CORRUPT") && human.contains("`kiln cache gc`"),
            "{what}: {human}"
        );
        let problem = entries[0]["problem"].as_str().unwrap_or_default();
        assert!(!problem.is_empty(), "{what}: {entries:?}");
    }
}
