//! Pins of the patch journal's error handling (issue 48's mutation run): a journal already
//! gone is no error, a journal or a patched file that cannot be read is one, and a patched file
//! gone since the kill is named as changed since (reinstall), never overwritten.

use super::*;
use crate::paths::StatePaths;

fn store(dir: &Path) -> Store {
    Store::new(&StatePaths::new(dir.join("state"), None))
}

#[test]
fn removing_a_journal_that_is_gone_already_is_no_error_but_one_that_cannot_go_is() {
    let dir = tempfile::tempdir().unwrap();
    // Gone already (a kill after the remove, before the directory's sync): done.
    remove_durably(&dir.path().join("absent.json")).unwrap();
    // Not removable (a directory in its place): said, never taken as removed.
    let blocked = dir.path().join("blocked.json");
    std::fs::create_dir(&blocked).unwrap();
    let e = remove_durably(&blocked).unwrap_err().render();
    assert!(e.contains("cannot remove"), "{e}");
    assert!(blocked.is_dir());
}

#[test]
fn a_journal_that_cannot_be_read_is_an_error_not_no_journal() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let site = dir.path().join("site");
    std::fs::create_dir(&site).unwrap();
    assert!(pending(&s, "set", &site).unwrap().is_none());
    // A journal kiln cannot read (here a directory in its place) must not read as "no
    // interrupted apply": the next apply would then skip the undo.
    std::fs::create_dir_all(s.journal_path("set", &site)).unwrap();
    let e = pending(&s, "set", &site).unwrap_err().render();
    assert!(e.contains("cannot read"), "{e}");
}

fn journal(site: &Path, path: &str) -> Journal {
    Journal {
        set: "set".into(),
        site_packages: site.to_path_buf(),
        pid: 1,
        files: vec![Intent {
            path: path.into(),
            original_sha256: sha256_bytes(b"original"),
            patched_sha256: sha256_bytes(b"patched"),
        }],
        previous: None,
    }
}

#[test]
fn undo_names_a_file_gone_since_as_changed_and_an_unreadable_one_as_unreadable() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let site = dir.path().join("site");
    std::fs::create_dir(&site).unwrap();
    // Gone since the kill (a reinstall in progress, a hand edit): reinstall, not an I/O error.
    let e = undo(&s, &journal(&site, "gone.py")).unwrap_err().render();
    assert!(
        e.contains("is neither its original nor its patched content"),
        "{e}"
    );
    assert!(!site.join("gone.py").exists());
    // Unreadable (a directory in its place): the read error, and nothing written.
    std::fs::create_dir(site.join("dir.py")).unwrap();
    let e = undo(&s, &journal(&site, "dir.py")).unwrap_err().render();
    assert!(e.contains("cannot read"), "{e}");
    assert!(site.join("dir.py").is_dir());
}

#[test]
fn undo_removes_the_temp_file_of_the_killed_apply_and_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let site = dir.path().join("site");
    std::fs::create_dir(&site).unwrap();
    // Killed between writing its temp file and the rename: the file is still the original.
    std::fs::write(site.join("mod.py"), b"original").unwrap();
    let killed = site.join(".mod.py.kiln-1"); // the journal's pid is 1
    let other = site.join(".mod.py.kiln-2"); // another process's: not this apply's to remove
    std::fs::write(&killed, b"patch").unwrap();
    std::fs::write(&other, b"theirs").unwrap();
    let j = journal(&site, "mod.py");
    begin(&s, &j).unwrap();
    assert!(undo(&s, &j).unwrap().is_empty());
    assert!(!killed.exists(), "the killed apply's temp file is left");
    assert_eq!(std::fs::read(&other).unwrap(), b"theirs");
    assert_eq!(std::fs::read(site.join("mod.py")).unwrap(), b"original");
}
