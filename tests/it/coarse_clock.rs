//! On a file system that keeps whole-second timestamps (ext4 with 128-byte inodes, loop
//! mounted), an input edited twice within one second, same size, is still seen as changed:
//! the racy window comes from the granularity kiln measured for the state directory.
//!
//! The race is built, not waited for: both versions get the same whole-second times with
//! `debugfs` (the file system unmounted meanwhile), a second ahead of the clock, so kiln reads
//! the first version within its timestamp however long a debug `kiln up` takes.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::common::{status_of, Workspace};
use crate::state_dir::Mount;

const RECIPE: &str = r#"[recipe]
name = "coarse"

[[step]]
id = "use"
kind = "run"
cwd = "${recipe.dir}"
inputs = ["src/*.txt"]
cmd = ["sh", "-c", "echo run >> counts"]
"#;

/// A 1-second-granularity ext4 mounted in the workspace (`None`: skipped on purpose).
fn coarse_fs(ws: &Workspace) -> Option<(Mount, String)> {
    if std::env::var_os("KILN_TEST_SKIP_MOUNT").is_some_and(|v| v == "1") {
        eprintln!("KILN_TEST_SKIP_MOUNT=1: coarse-clock test skipped on request");
        return None;
    }
    let image = ws.path().join("ext4.img");
    std::fs::File::create(&image)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    let out = std::process::Command::new("mkfs.ext4")
        .args(["-q", "-F", "-I", "128"])
        .arg(&image)
        .output()
        .expect("mkfs.ext4 runs (e2fsprogs); KILN_TEST_SKIP_MOUNT=1 skips on purpose");
    assert!(
        out.status.success(),
        "mkfs.ext4: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let image = image.to_str().unwrap().to_string();
    // What the loop mount needs, said before it is tried: to root, "needs root" is no help.
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    assert!(
        uid == 0 && Path::new("/dev/loop-control").exists(),
        "the coarse-clock test loop-mounts an ext4 image: it needs root (euid is {uid}), \
         CAP_SYS_ADMIN and loop devices (/dev/loop-control {}; in a container: \
         --privileged, or --cap-add SYS_ADMIN --device /dev/loop-control --device /dev/loop0); \
         KILN_TEST_SKIP_MOUNT=1 skips it on purpose",
        if Path::new("/dev/loop-control").exists() {
            "exists"
        } else {
            "is missing"
        }
    );
    Mount::new(&ws.path().join("coarse"), &["-o", "loop", &image]).map(|m| (m, image))
}

fn kiln(root: &Path, args: &[&str]) -> String {
    let out = assert_cmd::Command::cargo_bin("kiln")
        .unwrap()
        .args(args)
        .current_dir(root)
        .env("KILN_HOME", root.join("state"))
        .env("KILN_NO_PROGRESS", "1")
        .env_remove("XDG_STATE_HOME")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "kiln {args:?}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn runs(root: &Path) -> usize {
    std::fs::read_to_string(root.join("counts"))
        .unwrap_or_default()
        .lines()
        .count()
}

/// Give `rel` (a file on the mounted image) the mtime and ctime `secs`: unmount, set them
/// with `debugfs`, mount again (same image, same inode).
fn set_times(fs: &Mount, image: &str, rel: &str, secs: u64) {
    let run = |program: &str, args: &[&str]| {
        let out = std::process::Command::new(program)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{program} runs (e2fsprogs, util-linux): {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let dir = fs.0.to_str().unwrap();
    run("umount", &[dir]);
    for field in ["mtime", "ctime"] {
        let set = format!("set_inode_field /{rel} {field} @{secs}");
        run("debugfs", &["-w", "-R", &set, image]);
    }
    run("mount", &["-o", "loop", image, dir]);
}

/// The memo's stamps for `rel` as (len, mtime_ns, ctime_ns, ino).
fn memo_stamps(root: &Path, rel: &str) -> Vec<(u64, i128, i128, u64)> {
    let Ok(text) = std::fs::read_to_string(root.join("state/hashmemo.json")) else {
        return Vec::new();
    };
    let memo: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&text).unwrap();
    memo.iter()
        .filter(|(path, _)| path.ends_with(rel))
        .map(|(_, s)| {
            let n = |k: &str| s[k].as_i64().unwrap_or_else(|| panic!("memo {k}: {s}"));
            (
                u64::try_from(n("len")).unwrap(),
                i128::from(n("mtime_ns")),
                i128::from(n("ctime_ns")),
                u64::try_from(n("ino")).unwrap(),
            )
        })
        .collect()
}

#[test]
fn an_input_edited_twice_within_a_second_is_never_missed() {
    let ws = Workspace::new();
    let Some((fs, image)) = coarse_fs(&ws) else {
        return;
    };
    let root = fs.0.clone();
    std::fs::write(root.join("r.toml"), RECIPE).unwrap();
    std::fs::create_dir(root.join("src")).unwrap();
    let input = root.join("src/a.txt");
    std::fs::write(&input, "start\n").unwrap();
    let meta = std::fs::metadata(&input).unwrap();
    assert_eq!(
        (meta.mtime_nsec(), meta.ctime_nsec()),
        (0, 0),
        "not a whole-second file system"
    );
    kiln(&root, &["up", "r.toml"]);
    assert_eq!(runs(&root), 1);
    // Measured once for the state directory: whole seconds.
    let measured = std::fs::read_to_string(root.join("state/clock-granularity")).unwrap();
    assert_eq!(
        measured.trim(),
        format!(
            "{} 1000000000",
            std::fs::metadata(root.join("state")).unwrap().dev()
        )
    );

    // One whole second for both versions, a day ahead of the clock: every read kiln makes
    // falls within the racy window of either version, as when both edits share one second.
    let second = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 86_400;
    std::fs::write(&input, "edit a\n").unwrap();
    set_times(&fs, &image, "src/a.txt", second);
    let first = std::fs::metadata(&input).unwrap();
    assert_eq!(
        (first.mtime(), first.ctime()),
        (second as i64, second as i64)
    );
    kiln(&root, &["up", "r.toml"]);
    assert_eq!(runs(&root), 2, "the first edit was missed");
    std::fs::write(&input, "edit b\n").unwrap();
    set_times(&fs, &image, "src/a.txt", second);
    let version = |m: &std::fs::Metadata| (m.len(), m.mtime(), m.ctime(), m.ino());
    let edited = std::fs::metadata(&input).unwrap();
    assert_eq!(
        version(&edited),
        version(&first),
        "the two versions must be indistinguishable by stat"
    );
    let plan = kiln(&root, &["plan", "r.toml"]);
    assert!(
        status_of(&plan, "use").starts_with("stale"),
        "the second edit went unseen:\n{plan}"
    );
    // Nor later: the memo keeps no stamp a version with this stat would match once the
    // clock passes the window.
    let now = (
        edited.len(),
        i128::from(edited.mtime()) * 1_000_000_000,
        i128::from(edited.ctime()) * 1_000_000_000,
        edited.ino(),
    );
    assert!(
        !memo_stamps(&root, "src/a.txt").contains(&now),
        "kiln kept the stamp of a version it read within its timestamp"
    );
    kiln(&root, &["up", "r.toml"]);
    assert_eq!(runs(&root), 3);
}
