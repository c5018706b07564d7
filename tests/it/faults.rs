//! Faults (issue 11): a full disk names ENOSPC for a step and for a receipt, leaving no temp file;
//! leftovers of killed runs (receipt temp files, partial downloads, extract staging) are removed at
//! the next run, under the state lock.

use std::path::Path;
use std::time::Duration;

use crate::common::{scrub, Workspace};

fn up(ws: &Workspace, args: &[&str]) -> (Option<i32>, String) {
    let out = ws
        .kiln()
        .arg("up")
        .args(args)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    (
        out.status.code(),
        scrub(&String::from_utf8_lossy(&out.stderr), ws),
    )
}

/// The PID of a process that has exited.
fn dead_pid() -> u32 {
    let mut c = std::process::Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    pid
}

#[test]
fn leftovers_of_killed_runs_are_removed_at_the_next_run() {
    let ws = Workspace::new();
    let dead = dead_pid();
    let state = ws.state();
    let stale = [
        state.join(format!("runs/r/receipts/.a.json.tmp-{dead}")),
        state.join(format!("runs/other/receipts/.b.json.tmp-{dead}")),
        state.join(format!(".hashmemo.json.tmp-{dead}")),
        state.join(format!("cache/downloads/.partial-{dead}-12345")),
    ];
    for p in &stale {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "half").unwrap();
    }
    // A partial download is stale only once nothing has written it for ten minutes.
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&stale[3])
        .unwrap()
        .set_modified(hour_ago)
        .unwrap();
    // A download being written by a process this host cannot see (another container sharing
    // the cache): its PID is not alive here, but it was written just now.
    let elsewhere = state.join(format!("cache/downloads/.partial-{dead}-999"));
    std::fs::write(&elsewhere, "busy").unwrap();
    let staging = ws.path().join(format!(".dest.partial-{dead}"));
    std::fs::create_dir_all(staging.join("pkg")).unwrap();
    // A download in progress by a live process (pid 1) sharing the cache is left alone.
    let live = state.join("cache/downloads/.partial-1-777");
    std::fs::write(&live, "busy").unwrap();

    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(2);
    h.set_mode(0o644);
    b.append_data(&mut h, "f", &b"ok"[..]).unwrap();
    std::fs::write(ws.path().join("a.tar"), b.into_inner().unwrap()).unwrap();
    ws.write(
        "r.toml",
        "[[step]]\nid = \"a\"\nkind = \"extract\"\narchive = \"${recipe.dir}/a.tar\"\ndest = \"${recipe.dir}/dest\"\n",
    );
    let (code, err) = up(&ws, &["r.toml"]);
    assert_eq!(code, Some(0), "{err}");
    for p in &stale {
        assert!(!p.exists(), "left behind: {}", p.display());
    }
    assert!(!staging.exists(), "extract staging left behind");
    assert!(live.exists(), "a live process's download was removed");
    assert!(
        elsewhere.exists(),
        "a download written just now was removed"
    );
}

/// A tmpfs of `size` mounted on a fresh directory, unmounted on drop. Mounting needs root (in a
/// container, CAP_SYS_ADMIN): without it the test fails, unless `KILN_TEST_SKIP_TMPFS=1` skips
/// it explicitly (None), which it says on stderr past the test harness's capture.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(size: &str, test: &str) -> Option<Tmpfs> {
        use std::io::Write;
        if std::env::var_os("KILN_TEST_SKIP_TMPFS").is_some_and(|v| v == "1") {
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {test}: KILN_TEST_SKIP_TMPFS=1 (it mounts a tmpfs to fill a disk)"
            );
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("mount (util-linux) runs");
        assert!(
            out.status.success(),
            "{test} mounts a tmpfs to fill a disk, which needs root (in a container, --cap-add SYS_ADMIN): {}\nrun it as root, or skip it explicitly with KILN_TEST_SKIP_TMPFS=1",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Some(Tmpfs(dir))
    }
    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.0.path())
            .status();
    }
}

#[test]
fn a_full_disk_is_named_for_a_step_and_for_a_receipt() {
    let Some(disk) = Tmpfs::mount("256k", "a_full_disk_is_named_for_a_step_and_for_a_receipt")
    else {
        return;
    };
    // The step fills the disk: its archive does not fit on it.
    let ws = Workspace::new();
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(1 << 20);
    h.set_mode(0o644);
    b.append_data(&mut h, "big", &vec![1u8; 1 << 20][..])
        .unwrap();
    std::fs::write(ws.path().join("a.tar"), b.into_inner().unwrap()).unwrap();
    ws.write(
        "r.toml",
        &format!("[[step]]\nid = \"a\"\nkind = \"extract\"\narchive = \"${{recipe.dir}}/a.tar\"\ndest = \"{}/dest\"\n", disk.path().display()),
    );
    let (code, err) = up(&ws, &["r.toml"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("No space left on device (os error 28)"),
        "{err}"
    );
    assert!(err.contains("hint: the disk is full"), "{err}");
    let log = std::fs::read_to_string(ws.state().join("runs/r/logs/a.log")).unwrap();
    assert!(log.contains("No space left on device"), "{log}");

    // The disk fills during the step: the receipt cannot be written, and says why.
    let ws = Workspace::new();
    let state = disk.path().join("state");
    ws.write(
        "r.toml",
        "[[step]]\nid = \"fill\"\nkind = \"run\"\ncmd = [\"sh\", \"-c\", \"head -c 1M /dev/zero > ${kiln.state_dir}/filler; true\"]\n",
    );
    let (code, err) = up(&ws, &["r.toml", "--state-dir", state.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("cannot write"), "{err}");
    assert!(
        err.contains("receipts/fill.json: No space left on device (os error 28)"),
        "{err}"
    );
    let receipts = state.join("runs/r/receipts");
    let left: Vec<_> = std::fs::read_dir(&receipts)
        .map_or(vec![], |d| d.flatten().map(|e| e.file_name()).collect());
    assert!(left.is_empty(), "temp receipt left behind: {left:?}");
}

#[test]
fn a_detached_server_whose_record_cannot_be_written_is_stopped() {
    let Some(disk) = Tmpfs::mount(
        "256k",
        "a_detached_server_whose_record_cannot_be_written_is_stopped",
    ) else {
        return;
    };
    let ws = Workspace::new();
    let token = format!("600.{}", std::process::id());
    ws.write(
        "r.toml",
        &format!(
            "[recipe]\nname = \"full\"\n\n[profile.p]\ncmd = [\"sleep\", \"{token}\"]\n\
             url = \"http://127.0.0.1:{}\"\n",
            crate::serve::free_port()
        ),
    );
    let state = disk.path().join("state");
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&state)
            .unwrap();
    }
    std::fs::create_dir(state.join("serve")).unwrap();
    // Fill the disk to the last byte.
    {
        use std::io::Write;
        let mut filler = std::fs::File::create(disk.path().join("filler")).unwrap();
        while filler.write_all(&[0u8; 4096]).is_ok() {}
        while filler.write_all(&[0u8; 1]).is_ok() {}
    }
    let out = ws
        .kiln()
        .args([
            "serve",
            "r.toml",
            "--profile",
            "p",
            "--detach",
            "--state-dir",
        ])
        .arg(&state)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let err = scrub(&String::from_utf8_lossy(&out.stderr), &ws);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    assert!(err.contains("was stopped: without its record"), "{err}");
    assert!(!state.join("serve/full.json").exists());
    // The server did not outlive the failed start.
    let alive = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
                let zombie = stat
                    .rsplit(')')
                    .next()
                    .is_some_and(|s| s.trim_start().starts_with('Z'));
                !zombie
                    && std::fs::read(e.path().join("cmdline"))
                        .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&token))
            })
            .count()
    };
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while alive() > 0 {
        assert!(
            std::time::Instant::now() < until,
            "the server runs on with no record"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
