//! `kiln patch apply` killed (SIGKILL) at every write point of a real sglang 0.5.9 apply: the
//! next `check` tells the truth, and `revert` (or the next `apply`) ends byte-identical to the
//! original (or to a clean apply), with no temp file or journal left behind.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};

use crate::common::{copy_tree, wheel_site, Workspace};

/// The files the sm120 sets patch (the rest of the wheels is not read by them).
const FILES: [(&str, &str); 4] = [
    (
        "sglang==0.5.9",
        "sglang/srt/distributed/device_communicators/all_reduce_utils.py",
    ),
    (
        "sglang==0.5.9",
        "sglang/srt/distributed/device_communicators/torch_symm_mem.py",
    ),
    ("sglang==0.5.9", "sglang/srt/layers/communicator.py"),
    ("flashinfer-python==0.6.3", "flashinfer/jit/comm.py"),
];
const DIST_INFO: [(&str, &str); 2] = [
    ("sglang==0.5.9", "sglang-0.5.9.dist-info"),
    (
        "flashinfer-python==0.6.3",
        "flashinfer_python-0.6.3.dist-info",
    ),
];

/// A site-packages holding the real wheels' metadata and the files the sets patch, with the
/// flashinfer set (which the sglang set requires) applied.
fn new_site(ws: &Workspace) -> PathBuf {
    let site = ws.path().join("site");
    for (spec, dir) in DIST_INFO {
        copy_tree(&wheel_site(spec).join(dir), &site.join(dir));
    }
    for (spec, file) in FILES {
        std::fs::create_dir_all(site.join(file).parent().unwrap()).unwrap();
        std::fs::copy(wheel_site(spec).join(file), site.join(file)).unwrap();
    }
    let (code, out) = patch(ws, &site, "apply", "flashinfer-0.6.3-sm120", None);
    assert_eq!(code, Some(0), "{out}");
    site
}

/// Every file under `dir` (temp files included) with its bytes' sha256.
fn tree(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let p = entry.path();
            if entry.file_type().unwrap().is_dir() {
                stack.push(p);
            } else {
                let bytes = std::fs::read(&p).unwrap();
                out.insert(
                    p.strip_prefix(dir).unwrap().to_path_buf(),
                    kiln::hash::sha256_bytes(&bytes),
                );
            }
        }
    }
    out
}

/// `kiln patch ACTION SET`, killed at write point `kill_at` if given: (exit code, output).
fn patch(
    ws: &Workspace,
    site: &Path,
    action: &str,
    set: &str,
    kill_at: Option<u32>,
) -> (Option<i32>, String) {
    let mut cmd = ws.kiln();
    cmd.args(["patch", action, set, "--site-packages"])
        .arg(site);
    if let Some(n) = kill_at {
        #[cfg(not(debug_assertions))]
        panic!("KILN_TEST_PATCH_KILL_AT exists in debug builds only: run these tests without --release");
        cmd.env("KILN_TEST_PATCH_KILL_AT", n.to_string());
    }
    let out = cmd.output().unwrap();
    if kill_at.is_some() && out.status.code().is_none() {
        assert_eq!(out.status.signal(), Some(libc::SIGKILL));
    }
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn journal_left(ws: &Workspace) -> bool {
    std::fs::read_dir(ws.state().join("patches/journal")).is_ok_and(|mut d| d.next().is_some())
}

const SET: &str = "sglang-0.5.9-sm120";

#[test]
fn a_kill_at_any_write_point_of_an_apply_is_undone_or_finished() {
    // The trees before and after a clean apply.
    let ws = Workspace::new();
    let site0 = new_site(&ws);
    let original = tree(&site0);
    let (code, out) = patch(&ws, &site0, "apply", SET, None);
    assert_eq!(code, Some(0), "{out}");
    let applied = tree(&site0);
    assert_ne!(original, applied);

    let mut points = 0;
    for n in 1.. {
        // Killed at point n, then check, revert, apply, revert.
        let ws = Workspace::new();
        let site = new_site(&ws);
        let (code, out) = patch(&ws, &site, "apply", SET, Some(n));
        if code == Some(0) {
            assert_eq!(tree(&site), applied, "{out}");
            break;
        }
        assert_eq!(code, None, "point {n}: not killed:\n{out}");
        points = n;
        let interrupted = journal_left(&ws);
        let (code, out) = patch(&ws, &site, "check", SET, None);
        if code == Some(0) {
            assert_eq!(
                tree(&site),
                applied,
                "point {n}: check says applied:\n{out}"
            );
            assert!(!interrupted, "point {n}:\n{out}");
        } else {
            assert_eq!(code, Some(1), "point {n}:\n{out}");
        }
        if interrupted {
            assert!(
                out.contains("interrupted: an apply of this set by process"),
                "point {n}: check hides the interrupted apply:\n{out}"
            );
        }
        let (code, out) = patch(&ws, &site, "revert", SET, None);
        assert_eq!(code, Some(0), "point {n}:\n{out}");
        assert_eq!(
            tree(&site),
            original,
            "point {n}: revert did not restore the originals:\n{out}"
        );
        assert!(!journal_left(&ws), "point {n}: journal kept");
        let (code, out) = patch(&ws, &site, "apply", SET, None);
        assert_eq!(code, Some(0), "point {n}:\n{out}");
        assert_eq!(tree(&site), applied, "point {n}:\n{out}");
        let (code, out) = patch(&ws, &site, "revert", SET, None);
        assert_eq!((code, tree(&site) == original), (Some(0), true), "{out}");

        // Killed at point n, then apply again straight away.
        let ws = Workspace::new();
        let site = new_site(&ws);
        let (code, _) = patch(&ws, &site, "apply", SET, Some(n));
        assert_eq!(code, None);
        let (code, out) = patch(&ws, &site, "apply", SET, None);
        assert_eq!(code, Some(0), "point {n}:\n{out}");
        assert_eq!(
            tree(&site),
            applied,
            "point {n}: apply after a kill:\n{out}"
        );
        assert!(!journal_left(&ws));
        let (code, out) = patch(&ws, &site, "revert", SET, None);
        assert_eq!(code, Some(0), "point {n}:\n{out}");
        assert_eq!(
            tree(&site),
            original,
            "point {n}: revert after a kill:\n{out}"
        );
    }
    // 3 backups, the journal, each of 3 files before and after its rename, the record, the
    // journal's removal.
    assert!(points >= 11, "only {points} write points");
}

/// A file changed since the kill (a hand edit, a reinstall) is neither the original nor the
/// patched content the journal names: `revert` and the next `apply` refuse to finish the undo,
/// name the file, and overwrite nothing; the journal stays for after the reinstall.
#[test]
fn an_interrupted_apply_never_overwrites_a_file_changed_since() {
    // The first write point where the journal is left and a file already holds its new bytes.
    let (ws, site, file) = (1..30)
        .find_map(|n| {
            let ws = Workspace::new();
            let site = new_site(&ws);
            let before = tree(&site);
            let (code, out) = patch(&ws, &site, "apply", SET, Some(n));
            assert_eq!(code, None, "point {n}: the apply finished first:\n{out}");
            let after = tree(&site);
            let file = FILES
                .iter()
                .map(|(_, f)| PathBuf::from(f))
                .find(|f| before.get(f) != after.get(f))?;
            journal_left(&ws).then_some((ws, site, file))
        })
        .expect("a write point with a file replaced and the journal left");
    let edited = site.join(&file);
    let mut bytes = std::fs::read(&edited).unwrap();
    bytes.extend_from_slice(b"\n# changed by hand after the kill\n");
    std::fs::write(&edited, &bytes).unwrap();
    let kept = tree(&site);
    for action in ["revert", "apply"] {
        let (code, out) = patch(&ws, &site, action, SET, None);
        assert_eq!(code, Some(1), "{action}:\n{out}");
        assert!(
            out.contains(&format!(
                "{} is neither its original nor its patched content",
                edited.display()
            )),
            "{action}:\n{out}"
        );
        assert_eq!(tree(&site), kept, "{action} overwrote a file:\n{out}");
        assert_eq!(std::fs::read(&edited).unwrap(), bytes);
        assert!(journal_left(&ws), "{action} dropped the journal");
    }
}
#[test]
fn a_kill_at_any_write_point_of_a_revert_leaves_nothing_a_later_revert_or_apply_keeps() {
    // The trees before and after a clean apply.
    let ws = Workspace::new();
    let site0 = new_site(&ws);
    let original = tree(&site0);
    let (code, out) = patch(&ws, &site0, "apply", SET, None);
    assert_eq!(code, Some(0), "{out}");
    let applied = tree(&site0);

    let mut points = 0;
    for n in 1.. {
        for then in ["revert", "apply"] {
            let ws = Workspace::new();
            let site = new_site(&ws);
            let (code, out) = patch(&ws, &site, "apply", SET, None);
            assert_eq!(code, Some(0), "{out}");
            let (code, out) = patch(&ws, &site, "revert", SET, Some(n));
            if code == Some(0) {
                assert_eq!(tree(&site), original, "{out}");
                assert!(points >= 3, "only {points} write points in a revert");
                return;
            }
            assert_eq!(code, None, "point {n}: not killed:\n{out}");
            points = n;
            // Whatever the kill left (a temp file `.NAME.kiln-PID` beside a patched file), the
            // next revert or apply ends in exactly the tree it makes from a clean start.
            let (code, out) = patch(&ws, &site, then, SET, None);
            assert_eq!(code, Some(0), "point {n}, then {then}:\n{out}");
            let want = if then == "revert" {
                &original
            } else {
                &applied
            };
            let got = tree(&site);
            let strays: Vec<_> = got.keys().filter(|p| !want.contains_key(*p)).collect();
            assert!(strays.is_empty(), "point {n}, then {then}: left {strays:?}");
            assert_eq!(&got, want, "point {n}, then {then}:\n{out}");
        }
    }
}

#[test]
fn a_revert_without_the_apply_record_says_the_tree_stays_patched() {
    let ws = Workspace::new();
    let site = new_site(&ws);
    let (code, out) = patch(&ws, &site, "apply", SET, None);
    assert_eq!(code, Some(0), "{out}");
    let applied = tree(&site);
    let records = ws.state().join("patches/records");
    for entry in std::fs::read_dir(&records).unwrap().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap();
        if text.contains(SET) {
            std::fs::remove_file(entry.path()).unwrap();
        }
    }
    let (code, out) = patch(&ws, &site, "revert", SET, None);
    assert_eq!(tree(&site), applied, "{out}");
    assert_eq!(
        code,
        Some(1),
        "a revert that reverted nothing exited {code:?}:\n{out}"
    );
    assert!(
        out.contains("no record") && out.contains("hint: ") && out.contains("reinstall"),
        "{out}"
    );
}

#[test]
fn a_symlinked_source_file_is_refused_never_replaced_by_a_regular_file() {
    let ws = Workspace::new();
    let site = new_site(&ws);
    // A development install: the file in site-packages links to a checkout elsewhere.
    let file = site.join(FILES[0].1);
    let checkout = ws.path().join("checkout/all_reduce_utils.py");
    std::fs::create_dir_all(checkout.parent().unwrap()).unwrap();
    std::fs::rename(&file, &checkout).unwrap();
    std::os::unix::fs::symlink(&checkout, &file).unwrap();
    let before = tree(&ws.path().join("checkout"));
    let (code, out) = patch(&ws, &site, "apply", SET, None);
    assert!(
        std::fs::symlink_metadata(&file)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the symlink was replaced:\n{out}"
    );
    assert_eq!(tree(&ws.path().join("checkout")), before, "{out}");
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("is a symbolic link")
            && out.contains("nothing was changed")
            && out.contains("hint: "),
        "{out}"
    );
}
