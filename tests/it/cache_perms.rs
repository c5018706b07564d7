//! The caches' permissions at every level (issue 46), not only their root: an entry directory,
//! `entry.json`, `outputs.tar`, the `steps/` and `wheels/` directories, a wheel entry and the
//! signing key that another user could change (group- or world-writable, or owned by another
//! uid) are refused naming the path and the `chmod` that fixes it; what kiln creates under a
//! permissive umask (002) is writable by no one else.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::step_cache::Setup;

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), None).unwrap();
}

fn text(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// A level of an entry, a change another user could make to it, its undoing, and what the
/// refusal says.
type Hostile = (PathBuf, Box<dyn Fn()>, Box<dyn Fn()>, &'static str);

/// Each way another user could have changed a level of state A's entry, and how to undo it.
fn hostile_levels(entry: &Path) -> Vec<Hostile> {
    let steps = entry.parent().unwrap().to_path_buf();
    let json = entry.join("entry.json");
    let tar = entry.join("outputs.tar");
    let mut v: Vec<Hostile> = Vec::new();
    for (path, bad, good, why) in [
        (entry.to_path_buf(), 0o775, 0o755, "writable by its group"),
        (json.clone(), 0o664, 0o644, "writable by its group"),
        (tar.clone(), 0o646, 0o644, "writable by everyone"),
        (steps.clone(), 0o777, 0o755, "writable by everyone"),
    ] {
        let (p1, p2) = (path.clone(), path.clone());
        v.push((
            path,
            Box::new(move || chmod(&p1, bad)),
            Box::new(move || chmod(&p2, good)),
            why,
        ));
    }
    // Tests run as root: a file another uid owns is one kiln's user did not write.
    if unsafe { libc::geteuid() } == 0 {
        let (p1, p2) = (json.clone(), json.clone());
        v.push((
            json,
            Box::new(move || chown(&p1, 4242)),
            Box::new(move || chown(&p2, 0)),
            "owned by uid 4242",
        ));
    }
    v
}

#[test]
fn an_entry_another_user_could_change_at_any_level_is_refused_naming_the_path_and_the_chmod() {
    let s = Setup::new();
    s.up("A");
    let entry = s.entries()[0].clone();
    for (i, (path, spoil, mend, why)) in hostile_levels(&entry).into_iter().enumerate() {
        spoil();
        let state = format!("B{i}");
        let out = s.kiln_in(&state, &s.cache(), &["up", "r.toml"]);
        let said = text(&out);
        mend();
        assert!(out.status.success(), "{said}");
        assert!(
            said.contains("ran    build"),
            "{} ({why}) was restored from:\n{said}",
            path.display()
        );
        assert!(
            said.contains(&path.display().to_string())
                && said.contains(why)
                && said.contains(&format!("chmod go-w {}", path.display())),
            "the refusal names {} ({why}) and the chmod:\n{said}",
            path.display()
        );
    }
    assert_eq!(s.compiler_runs(), 1 + hostile_levels(&entry).len());
    // Mended, the same entry restores.
    let c = s.up("C");
    assert!(c.contains("restored from cache (entry"), "{c}");
}

#[test]
fn cache_ls_gc_and_export_refuse_a_level_another_user_could_change_and_remove_nothing() {
    let s = Setup::new();
    s.up("A");
    let entry = s.entries()[0].clone();
    let json = entry.join("entry.json");
    chmod(&json, 0o666);
    let archive = s.ws.path().join("out.tar");
    for args in [
        vec!["cache", "ls"],
        vec!["cache", "gc"],
        vec!["cache", "export", archive.to_str().unwrap()],
    ] {
        let out = s.kiln_in("A", &s.cache(), &args);
        let said = text(&out);
        assert!(!out.status.success(), "kiln {args:?} used it:\n{said}");
        assert!(
            said.contains(&format!("{} is writable by everyone", json.display()))
                && said.contains(&format!(
                    "hint: if its content is yours, `chmod go-w {}`",
                    json.display()
                )),
            "kiln {args:?}:\n{said}"
        );
    }
    assert!(json.is_file(), "gc removed the entry");
    assert!(!archive.exists());
}

/// `kiln up` in state `state` under umask 002 (a group-writable default), with the workspace's
/// signing key: run through `sh` so that only this child gets the umask.
fn up_under_umask_002(s: &Setup, state: &str) -> String {
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", "umask 002 && exec \"$0\" \"$@\""])
        .arg(assert_cmd::cargo::cargo_bin("kiln"))
        .args(["up", "r.toml"])
        .current_dir(s.ws.path())
        .env("KILN_HOME", s.ws.path().join(state))
        .env("KILN_CACHE_DIR", s.cache())
        .env("KILN_NO_PROGRESS", "1")
        .env("CC_COUNT", s.ws.path().join("cc-count"))
        .env(
            "PATH",
            format!(
                "{}:{}",
                s.ws.path().join("bin").display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env_remove("KILN_CACHE_TRUSTED_KEYS")
        .env_remove("KILN_CACHE_REQUIRE_SIGS");
    // The workspace's fleet key (written by `Workspace::kiln`).
    let _ = s.ws.kiln();
    cmd.env(
        "KILN_CACHE_SIGNING_KEY",
        s.ws.path().join(".fleet-test.key"),
    );
    let out = cmd.output().unwrap();
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    said
}

/// Every path under `root` whose mode lets its group or everyone write.
fn writable_by_others(root: &Path) -> Vec<(PathBuf, u32)> {
    let mut found = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(p) = todo.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        if m.mode() & 0o022 != 0 && !m.file_type().is_symlink() {
            found.push((p.clone(), m.mode() & 0o7777));
        }
        if m.is_dir() {
            todo.extend(std::fs::read_dir(&p).unwrap().flatten().map(|e| e.path()));
        }
    }
    found
}

#[test]
fn what_kiln_creates_in_a_cache_under_umask_002_is_writable_by_no_one_else_and_restores() {
    let s = Setup::new();
    let a = up_under_umask_002(&s, "A");
    assert!(a.contains("ran    build"), "{a}");
    let steps = s.cache().join("steps");
    assert_eq!(writable_by_others(&steps), [], "under {}", steps.display());
    let own = s.ws.path().join("A/cache-own");
    assert_eq!(writable_by_others(&own), []);
    let b = up_under_umask_002(&s, "B");
    assert!(b.contains("restored from cache (entry"), "{b}");
    assert_eq!(s.compiler_runs(), 1);
}

#[test]
fn a_signing_key_another_user_could_change_or_a_fifo_is_refused_at_once() {
    let s = Setup::new();
    s.up("A");
    let key = s.ws.write("writable.key", crate::common::FLEET_TEST_KEY);
    chmod(&key, 0o622);
    let fifo = s.ws.path().join("fifo.key");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo on a valid C string path the test owns.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let archive = s.ws.path().join("out.tar");
    // The key's path is shown as `***`: kiln redacts its signing key's path in what it prints.
    for (path, why) in [
        (&key, "is writable by everyone (mode 0622)"),
        (&fifo, "is not a regular file"),
    ] {
        let out = s
            .kiln_cmd("A", &s.cache())
            .env("KILN_CACHE_SIGNING_KEY", path)
            .args(["cache", "export", archive.to_str().unwrap()])
            .timeout(Duration::from_secs(60))
            .output()
            .unwrap();
        let said = text(&out);
        assert_eq!(out.status.code(), Some(2), "{said}");
        assert!(
            said.contains("refusing the signing key") && said.contains(why),
            "{said}"
        );
        assert!(!archive.exists());
    }
}

/// A wheel entry made here: `wheels/<id>/entry.json` and its `.whl`, `<id>` the sha256 of the
/// key as kiln types it. The entry directory.
pub(crate) fn wheel_entry(cache: &Path, wheel_name: &str, wheel: &[u8]) -> PathBuf {
    let key = format!(
        r#"{{"package":"demo","version":"1.0","source_sha256":"{}","python_tag":"cp311","torch":null,"cuda":null,"arch_list":null,"env":{{}}}}"#,
        "0".repeat(64)
    );
    let id = crate::step_cache_forged::hex(key.as_bytes());
    let dir = cache.join("wheels").join(&id);
    std::fs::create_dir_all(&dir).unwrap();
    let entry = format!(
        r#"{{"key":{key},"wheel":"{wheel_name}","sha256":"{}","size":{},"created_unix":1}}"#,
        crate::step_cache_forged::hex(wheel),
        wheel.len()
    );
    std::fs::write(dir.join("entry.json"), entry).unwrap();
    if !wheel_name.starts_with('/') {
        std::fs::write(dir.join(wheel_name), wheel).unwrap();
    }
    dir
}

#[test]
fn a_wheel_entry_another_user_could_change_is_refused_by_ls_and_gc() {
    let s = Setup::new();
    let dir = wheel_entry(&s.cache(), "demo-1.0-py3-none-any.whl", b"wheel");
    let ok = s.kiln_in("A", &s.cache(), &["cache", "ls"]);
    assert!(
        ok.status.success() && text(&ok).contains("demo 1.0"),
        "{}",
        text(&ok)
    );
    chmod(&dir, 0o775);
    for args in [["cache", "ls"], ["cache", "gc"]] {
        let out = s.kiln_in("A", &s.cache(), &args);
        let said = text(&out);
        assert!(!out.status.success(), "{said}");
        assert!(
            said.contains(&format!("{} is writable by its group", dir.display()))
                && said.contains(&format!("chmod go-w {}", dir.display())),
            "{said}"
        );
    }
    assert!(dir.join("entry.json").is_file());
}
