//! The compiled-wheel cache against the classes of issue 46: a FIFO as a wheel or an entry.json
//! naming `/dev/zero` never hangs a command (gc drops the entry); a pull never deletes a local
//! entry or a file in it (a different build of the same key stays).

use std::time::Duration;

use crate::cache_perms::wheel_entry;
use crate::image::LocalRegistry;
use crate::step_cache::Setup;

fn bounded(s: &Setup, args: &[&str]) -> (bool, String) {
    let out = s
        .kiln_cmd("A", &s.cache())
        .args(args)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code().is_some(), "kiln {args:?} hung:\n{text}");
    (out.status.success(), text)
}

#[test]
fn a_fifo_as_a_wheel_or_a_wheel_named_dev_zero_never_hangs_gc_and_is_dropped() {
    let s = Setup::new();
    let dir = wheel_entry(&s.cache(), "demo-1.0-py3-none-any.whl", b"wheel");
    let whl = dir.join("demo-1.0-py3-none-any.whl");
    std::fs::remove_file(&whl).unwrap();
    let c = std::ffi::CString::new(whl.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo on a valid C string path the test owns.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let (ok, text) = bounded(&s, &["cache", "gc"]);
    assert!(ok && text.contains("1 entry removed"), "{text}");
    assert!(!dir.exists());

    let dir = wheel_entry(&s.cache(), "/dev/zero", b"wheel");
    let (ok, text) = bounded(&s, &["cache", "gc"]);
    assert!(ok && text.contains("1 entry removed"), "{text}");
    assert!(!dir.exists());
}

#[test]
fn a_pull_never_deletes_a_local_wheel_entry_or_a_file_in_it() {
    let registry = LocalRegistry::start();
    let reference = format!("127.0.0.1:{}/kiln/cache:wheels", registry.port);
    let s = Setup::new();
    let theirs = s.ws.path().join("their-cache");
    wheel_entry(&theirs, "demo-1.0-py3-none-any.whl", b"their build");
    let pushed = s
        .kiln_cmd("T", &theirs)
        .env("KILN_CACHE_REQUIRE_SIGS", "false")
        .args(["cache", "push", &reference])
        .output()
        .unwrap();
    assert!(pushed.status.success(), "{pushed:?}");
    // Here: the same key built locally (wheels are not byte-reproducible), and a note in it.
    let ours = wheel_entry(&s.cache(), "demo-1.0-py3-none-any.whl", b"our build");
    std::fs::write(ours.join("notes.txt"), "mine").unwrap();
    let pulled = s
        .kiln_cmd("A", &s.cache())
        .env("KILN_CACHE_REQUIRE_SIGS", "false")
        .args(["cache", "pull", &reference])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&pulled.stdout).into_owned()
        + &String::from_utf8_lossy(&pulled.stderr);
    assert!(pulled.status.success(), "{text}");
    assert_eq!(
        std::fs::read(ours.join("notes.txt")).unwrap(),
        b"mine",
        "{text}"
    );
    assert_eq!(
        std::fs::read(ours.join("demo-1.0-py3-none-any.whl")).unwrap(),
        b"our build",
        "{text}"
    );
}

#[test]
fn gc_never_removes_what_is_not_a_cache_entry() {
    let s = Setup::new();
    s.up("A");
    for dir in ["wheels/my-notes", "steps/my-notes"] {
        let path = s.cache().join(dir);
        std::fs::create_dir_all(&path).unwrap();
        std::fs::write(path.join("todo.txt"), "mine").unwrap();
    }
    let (ok, text) = bounded(&s, &["cache", "gc"]);
    assert!(ok, "{text}");
    for dir in ["wheels/my-notes", "steps/my-notes"] {
        assert!(
            s.cache().join(dir).join("todo.txt").is_file(),
            "gc removed {dir}:\n{text}"
        );
    }
    assert_eq!(s.entries().len(), 1, "the real entry stays: {text}");
}
