//! Forged step-cache entries (issue 46), each built here by the test (a tar and a manifest the
//! forger controls, every hash matching): through `kiln cache import`, a shared `KILN_CACHE_DIR`
//! and a registry pull, a restore never writes or links outside its output, never restores a
//! setuid/setgid bit, refuses `..` names, and never deletes a user's file in an output directory.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::step_cache::Setup;

pub(crate) fn hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .fold(String::new(), |mut s, b| {
            use std::fmt::Write;
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// One member of a forged outputs.tar.
pub(crate) enum Member<'a> {
    Dir(&'a str, u32),
    File(&'a str, u32, &'a [u8]),
    Link(&'a str, &'a str),
}

/// A forged outputs.tar and the manifest that describes it exactly.
pub(crate) fn forge_outputs(members: &[Member]) -> (Vec<u8>, Value) {
    let mut b = tar::Builder::new(Vec::new());
    let mut manifest = serde_json::Map::new();
    for m in members {
        let mut h = tar::Header::new_gnu();
        let name = match m {
            Member::Dir(n, mode) => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(*mode);
                h.set_size(0);
                manifest.insert(n.to_string(), json!({"type": "dir", "mode": mode}));
                n
            }
            Member::File(n, mode, data) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(*mode);
                h.set_size(data.len() as u64);
                manifest.insert(
                    n.to_string(),
                    json!({"type": "file", "sha256": hex(data), "size": data.len(), "mode": mode}),
                );
                n
            }
            Member::Link(n, to) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(0o777);
                h.set_size(0);
                manifest.insert(n.to_string(), json!({"type": "symlink", "target": to}));
                b.append_link(&mut h, n, to).unwrap();
                continue;
            }
        };
        // The raw name: the tar crate's own setters refuse `..`, a forger's tools do not.
        if name.len() < 100 {
            h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
            h.set_cksum();
            let data: &[u8] = match m {
                Member::File(_, _, d) => d,
                _ => &[],
            };
            b.append(&h, data).unwrap();
        } else {
            let data: &[u8] = match m {
                Member::File(_, _, d) => d,
                _ => &[],
            };
            b.append_data(&mut h, name, data).unwrap();
        }
    }
    (b.into_inner().unwrap(), Value::Object(manifest))
}

/// State A's real entry for `build` (its key is what B asks for), its manifest and archive
/// replaced by the forger's: the entry directory's name and the new entry.json.
pub(crate) fn forge_entry(s: &Setup, members: &[Member]) -> (String, Vec<u8>, Vec<u8>) {
    s.up("A");
    let dir = &s.entries()[0];
    let id = dir.file_name().unwrap().to_string_lossy().into_owned();
    let mut entry: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("entry.json")).unwrap()).unwrap();
    let (tar, manifest) = forge_outputs(members);
    entry["manifest"] = manifest;
    entry["archive_sha256"] = Value::String(hex(&tar));
    entry["size"] = json!(tar.len());
    (id, serde_json::to_vec(&entry).unwrap(), tar)
}

/// A `kiln cache export`-format archive holding one step entry.
pub(crate) fn import_archive(id: &str, entry: &[u8], outputs: &[u8]) -> Vec<u8> {
    let files: BTreeMap<String, String> = [
        (format!("steps/{id}/entry.json"), hex(entry)),
        (format!("steps/{id}/outputs.tar"), hex(outputs)),
    ]
    .into();
    let manifest =
        serde_json::to_vec(&json!({"format": "kiln-wheel-cache-v1", "files": files})).unwrap();
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in [
        ("manifest.json".to_string(), &manifest[..]),
        (format!("steps/{id}/entry.json"), entry),
        (format!("steps/{id}/outputs.tar"), outputs),
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, name, data).unwrap();
    }
    b.into_inner().unwrap()
}

/// `kiln <args>` in state `state` with signatures not required (a private cache): what a
/// forged entry meets past the signature check. Its output.
pub(crate) fn unsigned_ok(
    s: &Setup,
    state: &str,
    cache: &Path,
    args: &[&str],
) -> std::process::Output {
    s.kiln_cmd(state, cache)
        .env("KILN_CACHE_REQUIRE_SIGS", "false")
        .args(args)
        .output()
        .unwrap()
}

/// Import the forged entry into a fresh cache, then `kiln up` in a fresh state B with it, with
/// signatures not required (tests/it/step_cache_trust.rs has such entries refused unsigned).
fn import_then_up(s: &Setup, members: &[Member]) -> (String, PathBuf) {
    let (id, entry, outputs) = forge_entry(s, members);
    let archive = s.ws.path().join("forged.tar");
    std::fs::write(&archive, import_archive(&id, &entry, &outputs)).unwrap();
    let fresh = s.ws.path().join("fresh-cache");
    let imported = unsigned_ok(
        s,
        "B",
        &fresh,
        &["cache", "import", archive.to_str().unwrap()],
    );
    assert!(imported.status.success(), "{imported:?}");
    let out = unsigned_ok(s, "B", &fresh, &["up", "r.toml"]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (text, s.ws.path().join("B/work/cc-demo/bin"))
}

/// The issue's trick: `0/x -> .`, then a link 20 levels of `x` down that climbs 20 levels (on
/// disk: from the output itself, to `/`) into the victim directory, then a file through it.
fn climbing_members(victim: &Path) -> (String, String) {
    let deep = format!("0/{}L", "x/".repeat(20));
    let to = format!(
        "{}{}",
        "../".repeat(20),
        victim.display().to_string().trim_start_matches('/')
    );
    (deep, to)
}

#[test]
fn a_forged_link_chain_through_an_imported_entry_never_writes_outside_the_output() {
    let s = Setup::new();
    let victim = s.ws.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    let (deep, to) = climbing_members(&victim);
    let file = format!("{deep}/pwned.pth");
    let (b, _) = import_then_up(
        &s,
        &[
            Member::Dir("0", 0o755),
            Member::File("0/hello", 0o755, b"#!/bin/sh\n"),
            Member::Link("0/x", "."),
            Member::Link(&deep, &to),
            Member::File(&file, 0o644, b"import os\n"),
        ],
    );
    assert!(
        !victim.join("pwned.pth").exists(),
        "the restore wrote outside its output:\n{b}"
    );
    assert!(
        b.contains("ran    build"),
        "the forged entry was used:\n{b}"
    );
    assert!(
        b.contains("is not a directory this restore made"),
        "the refusal says why:\n{b}"
    );
}

#[test]
fn a_forged_link_in_a_shared_cache_dir_never_writes_outside_the_output() {
    let s = Setup::new();
    let victim = s.ws.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    let (deep, to) = climbing_members(&victim);
    let file = format!("{deep}/pwned.pth");
    let (id, entry, outputs) = forge_entry(
        &s,
        &[
            Member::Dir("0", 0o755),
            Member::File("0/hello", 0o755, b"#!/bin/sh\n"),
            Member::Link("0/x", "."),
            Member::Link(&deep, &to),
            Member::File(&file, 0o644, b"import os\n"),
        ],
    );
    // Another machine wrote the shared cache: the forged entry replaces A's in place.
    let dir = s.cache().join("steps").join(&id);
    std::fs::write(dir.join("entry.json"), &entry).unwrap();
    std::fs::write(dir.join("outputs.tar"), &outputs).unwrap();
    let out = unsigned_ok(&s, "B", &s.cache(), &["up", "r.toml"]);
    let b =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(!victim.join("pwned.pth").exists(), "written outside:\n{b}");
    assert!(
        b.contains("ran    build"),
        "the forged entry was used:\n{b}"
    );
}

#[test]
fn a_link_that_climbs_out_only_through_other_links_is_refused_on_disk() {
    let s = Setup::new();
    // By its text `d/L` stays inside (`up/d/up/d/up/../..` never climbs above `d`'s depth); on
    // disk `up` is the output itself, and the last `..`s leave it.
    let (b, bin) = import_then_up(
        &s,
        &[
            Member::Dir("0", 0o755),
            Member::File("0/hello", 0o755, b"#!/bin/sh\n"),
            Member::Dir("0/d", 0o755),
            Member::Link("0/d/up", ".."),
            Member::Link("0/d/L", "up/d/up/d/up/../.."),
        ],
    );
    let link = bin.join("d/L");
    if std::fs::symlink_metadata(&link).is_ok() {
        let resolved = std::fs::canonicalize(&link).unwrap();
        assert!(
            resolved.starts_with(std::fs::canonicalize(&bin).unwrap()),
            "a restored link resolves to {}, outside the output:\n{b}",
            resolved.display()
        );
    }
    assert!(b.contains("resolves outside its output"), "{b}");
}

#[test]
fn setuid_setgid_and_sticky_bits_are_never_restored() {
    let s = Setup::new();
    let (b, bin) = import_then_up(
        &s,
        &[
            Member::Dir("0", 0o2755),
            Member::File("0/hello", 0o4755, b"#!/bin/sh\n"),
            Member::Dir("0/sub", 0o3777),
            Member::File("0/sub/tool", 0o2755, b"#!/bin/sh\n"),
        ],
    );
    assert!(b.contains("restored from cache (entry"), "{b}");
    for p in [
        bin.clone(),
        bin.join("hello"),
        bin.join("sub"),
        bin.join("sub/tool"),
    ] {
        let mode = std::fs::symlink_metadata(&p).unwrap().permissions().mode();
        assert_eq!(mode & 0o7000, 0, "{} has mode {mode:o}", p.display());
    }
}

#[test]
fn a_manifest_name_that_climbs_is_refused_before_anything_is_laid_out() {
    let s = Setup::new();
    let (b, _) = import_then_up(
        &s,
        &[
            Member::Dir("0", 0o755),
            Member::File("0/hello", 0o755, b"#!/bin/sh\n"),
            Member::File("0/../../../../evil", 0o644, b"x"),
        ],
    );
    assert!(
        b.contains("manifest path `0/../../../../evil` is absolute, empty or climbs"),
        "{b}"
    );
    assert!(b.contains("ran    build"), "{b}");
    assert!(!s.ws.path().join("B/evil").exists() && !s.ws.path().join("evil").exists());
}

/// A step that adds one file to a directory the user already has (its output, as `check.paths`
/// would make it).
const ADDS_ONE_FILE: &str = r#"[recipe]
name = "adds"

[[step]]
id = "add"
kind = "run"
cmd = ["sh", "-c", "echo made > \"$1/made.txt\"", "sh", "${recipe.dir}/U"]
outputs = ["${recipe.dir}/U"]
check = { paths = ["${recipe.dir}/U/made.txt"] }
"#;

#[test]
fn an_entry_holds_only_what_the_step_wrote_and_a_restore_keeps_the_users_files() {
    let s = Setup::new();
    s.ws.write("r.toml", ADDS_ONE_FILE);
    s.ws.write("U/old.txt", "the user's\n");
    s.kiln_ok("A", &s.cache(), &["up", "r.toml"]);
    let entry: Value =
        serde_json::from_str(&std::fs::read_to_string(s.entries()[0].join("entry.json")).unwrap())
            .unwrap();
    let names: Vec<&String> = entry["manifest"].as_object().unwrap().keys().collect();
    assert_eq!(
        names,
        ["0", "0/made.txt"],
        "stored what the step did not write"
    );
    // The user adds a file; a fresh state sharing the cache restores the step.
    s.ws.write("U/notes.txt", "mine\n");
    std::fs::remove_file(s.ws.path().join("U/made.txt")).unwrap();
    let b = s.kiln_ok("B", &s.cache(), &["up", "r.toml"]);
    assert!(b.contains("restored from cache (entry"), "{b}");
    let u = s.ws.path().join("U");
    assert_eq!(
        std::fs::read_to_string(u.join("notes.txt")).unwrap(),
        "mine\n"
    );
    assert_eq!(
        std::fs::read_to_string(u.join("old.txt")).unwrap(),
        "the user's\n"
    );
    assert_eq!(
        std::fs::read_to_string(u.join("made.txt")).unwrap(),
        "made\n"
    );
}

#[test]
fn a_restore_that_would_have_to_delete_a_users_directory_is_refused_naming_it() {
    let s = Setup::new();
    s.ws.write("r.toml", ADDS_ONE_FILE);
    s.ws.write("U/old.txt", "the user's\n");
    s.kiln_ok("A", &s.cache(), &["up", "r.toml"]);
    // Where the entry has a file, the user now has a directory with a file in it.
    std::fs::remove_file(s.ws.path().join("U/made.txt")).unwrap();
    s.ws.write("U/made.txt/keep", "mine\n");
    let out = s.kiln_in("B", &s.cache(), &["up", "r.toml"]);
    let b =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    let made = s.ws.path().join("U/made.txt");
    assert!(
        b.contains(&format!("not restored: {} is a directory", made.display())),
        "{b}"
    );
    assert!(b.contains(&format!("move {} away", made.display())), "{b}");
    assert_eq!(
        std::fs::read_to_string(made.join("keep")).unwrap(),
        "mine\n"
    );
}
