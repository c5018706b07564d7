//! On a file system that keeps whole-second timestamps (ext4 with 128-byte inodes, loop
//! mounted), an input edited twice within one second, same size, is still seen as changed:
//! the racy window comes from the granularity kiln measured for the state directory.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
fn coarse_fs(ws: &Workspace) -> Option<Mount> {
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
    Mount::new(&ws.path().join("coarse"), &["-o", "loop", &image])
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

/// Sleep until just after the next whole second.
fn next_second() {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    std::thread::sleep(Duration::from_nanos(
        1_000_000_000 - u64::from(now.subsec_nanos()) + 20_000_000,
    ));
}

#[test]
fn an_input_edited_twice_within_a_second_is_never_missed() {
    let ws = Workspace::new();
    let Some(fs) = coarse_fs(&ws) else {
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

    let mut reproduced = 0;
    for trial in 0..5 {
        next_second();
        std::fs::write(&input, format!("edit {trial} a\n")).unwrap();
        let first = std::fs::metadata(&input).unwrap();
        kiln(&root, &["up", "r.toml"]);
        assert_eq!(runs(&root), 2 + trial * 2, "the first edit was missed");
        std::fs::write(&input, format!("edit {trial} b\n")).unwrap();
        let second = std::fs::metadata(&input).unwrap();
        let plan = kiln(&root, &["plan", "r.toml"]);
        assert!(
            status_of(&plan, "use").starts_with("stale"),
            "trial {trial}: the second edit went unseen:\n{plan}"
        );
        if (second.mtime(), second.ctime(), second.len(), second.ino())
            == (first.mtime(), first.ctime(), first.len(), first.ino())
        {
            // The two versions are indistinguishable by stat: the case that was missed.
            reproduced += 1;
            std::thread::sleep(Duration::from_millis(1200));
            let plan = kiln(&root, &["plan", "r.toml"]);
            assert!(
                status_of(&plan, "use").starts_with("stale"),
                "trial {trial}: the edit went unseen for good:\n{plan}"
            );
        }
        kiln(&root, &["up", "r.toml"]);
        assert_eq!(runs(&root), 3 + trial * 2);
    }
    assert!(
        reproduced > 0,
        "no trial edited the input twice within one second (the machine is too slow?)"
    );
}
