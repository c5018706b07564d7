//! The state directory is kiln's alone: a state or cache directory others can write is refused
//! (like ssh's), temp files are never written through a planted symlink, appends to the bench
//! history survive a full disk, and what a user types stays what they typed (`--set` values,
//! `env` names).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::common::{stderr_of, Workspace};

const RECIPE: &str =
    "[recipe]\nname = \"mine\"\n\n[[step]]\nid = \"x\"\nkind = \"run\"\ncmd = [\"true\"]\n";

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn a_state_or_cache_dir_others_can_write_is_refused() {
    let ws = Workspace::new();
    ws.write("r.toml", RECIPE);
    // kiln creates a missing state directory private to its user.
    ws.kiln().args(["plan", "r.toml"]).assert().success();
    let mode = std::fs::metadata(ws.state()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);

    let state = ws.state().display().to_string();
    for (mode, who) in [
        (0o777, "everyone"),
        (0o770, "its group"),
        (0o722, "everyone"),
    ] {
        chmod(&ws.state(), mode);
        let err = stderr_of(ws.kiln().args(["plan", "r.toml"]), 2);
        assert!(
            err.contains(&format!(
                "refusing the state directory {state}: it is writable by {who} (mode {mode:04o})"
            )) && err.contains("hint: ")
                && err.contains("chmod go-w"),
            "{err}"
        );
        // Nothing is written into a refused directory.
        assert!(!ws.state().join("lock").exists());
    }
    chmod(&ws.state(), 0o700);

    // Owned by another user (the tests run as root, who can give it away).
    std::os::unix::fs::chown(ws.state(), Some(4321), Some(4321)).unwrap();
    let err = stderr_of(ws.kiln().args(["serve", "r.toml", "--stop"]), 2);
    assert!(
        err.contains(&format!(
            "refusing the state directory {state}: it is owned by uid 4321, not by you"
        )),
        "{err}"
    );
    std::os::unix::fs::chown(ws.state(), Some(0), Some(0)).unwrap();

    let cache = ws.path().join("shared-cache");
    std::fs::create_dir(&cache).unwrap();
    chmod(&cache, 0o1777);
    let err = stderr_of(
        ws.kiln()
            .env("KILN_CACHE_DIR", &cache)
            .args(["plan", "r.toml"]),
        2,
    );
    assert!(
        err.contains(&format!(
            "refusing the cache directory {}: it is writable by everyone",
            cache.display()
        )),
        "{err}"
    );
    ws.kiln().args(["plan", "r.toml"]).assert().success();
}

#[test]
fn a_planted_temp_symlink_is_not_written_through() {
    // kiln runs as pid 2 of a new pid namespace, so its temp names (`.NAME.tmp-2`) are known in
    // advance; each is planted as a symlink to a 0600 file that must stay as it is.
    let ws = Workspace::new();
    ws.write("r.toml", RECIPE);
    let victim = ws.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    chmod(&victim, 0o600);
    let receipts = ws.state().join("runs/mine/receipts");
    std::fs::create_dir_all(&receipts).unwrap();
    chmod(&ws.state(), 0o700);
    let planted: Vec<PathBuf> = [
        ws.state().join(".hashmemo.json.tmp-2"),
        ws.state().join(".clock-granularity.tmp-2"),
        receipts.join(".x.json.tmp-2"),
        ws.state().join("runs/mine/.receipts.idx.tmp-2"),
    ]
    .into();
    for link in &planted {
        std::os::unix::fs::symlink(&victim, link).unwrap();
    }
    if std::env::var_os("KILN_TEST_SKIP_PIDNS").is_some_and(|v| v == "1") {
        eprintln!("KILN_TEST_SKIP_PIDNS=1: pid-namespace test skipped on request");
        return;
    }
    let out = std::process::Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--mount-proc",
            "sh",
            "-c",
            "\"$0\" up r.toml; echo \"kiln exit $?\"",
        ])
        .arg(assert_cmd::cargo::cargo_bin("kiln"))
        .current_dir(ws.path())
        .env("KILN_HOME", ws.state())
        .env("KILN_NO_PROGRESS", "1")
        .output()
        .expect("unshare runs; KILN_TEST_SKIP_PIDNS=1 skips on purpose");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("kiln exit 0"), "{text}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert_eq!(
        std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // The files behind the names kiln used are its own regular files, not the planted links.
    for (file, link) in [
        (receipts.join("x.json"), &planted[2]),
        (ws.state().join("clock-granularity"), &planted[1]),
    ] {
        let meta = std::fs::symlink_metadata(&file).unwrap();
        assert!(meta.is_file(), "{} is not a regular file", file.display());
        assert!(
            std::fs::symlink_metadata(link).is_err(),
            "{}",
            link.display()
        );
    }
}

/// A mounted file system at `dir`, unmounted on drop.
pub(crate) struct Mount(pub PathBuf);

impl Mount {
    /// `mount ARGS DIR`; fails the test if it cannot, unless `KILN_TEST_SKIP_MOUNT=1` (then
    /// `None`: skipped on purpose).
    pub(crate) fn new(dir: &Path, args: &[&str]) -> Option<Mount> {
        if std::env::var_os("KILN_TEST_SKIP_MOUNT").is_some_and(|v| v == "1") {
            eprintln!("KILN_TEST_SKIP_MOUNT=1: test on a mounted file system skipped on request");
            return None;
        }
        std::fs::create_dir_all(dir).unwrap();
        let out = std::process::Command::new("mount")
            .args(args)
            .arg(dir)
            .output()
            .expect("mount runs");
        assert!(
            out.status.success(),
            "cannot mount {args:?} on {} (needs root; KILN_TEST_SKIP_MOUNT=1 skips on purpose): {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Some(Mount(dir.to_path_buf()))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// A real bench record (a captured GPU run's), with a warning long enough that the record
/// cannot fit in the last, partly used page of a full file system.
fn bench_record() -> kiln::bench::Report {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/gpu-llama/h200-run2/report-tuned.json");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture).unwrap()).unwrap();
    let mut bench: kiln::bench::Report = serde_json::from_value(report["bench"].clone()).unwrap();
    bench.warnings.push("w".repeat(6000));
    bench
}

fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_full_disk_leaves_no_torn_history_line() {
    let ws = Workspace::new();
    let Some(disk) = Mount::new(
        &ws.path().join("small"),
        &["-t", "tmpfs", "-o", "size=96k", "tmpfs"],
    ) else {
        return;
    };
    let paths = kiln::paths::StatePaths::new(disk.0.join("state"), None);
    let record = bench_record();
    let history = kiln::bench::append_history(&paths, &record).unwrap();
    let before = std::fs::read(&history).unwrap();

    // Fill the file system to ENOSPC.
    let filler = disk.0.join("filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 4096];
        while f.write_all(&chunk).is_ok() {}
        while f.write_all(&chunk[..1]).is_ok() {}
    }
    let err = kiln::bench::append_history(&paths, &record).unwrap_err();
    assert!(
        err.to_string().contains("cannot append to")
            && format!("{err:?}").contains("No space left"),
        "{err:?}"
    );
    assert_eq!(
        std::fs::read(&history).unwrap(),
        before,
        "a failed append left part of its record"
    );

    std::fs::remove_file(&filler).unwrap();
    kiln::bench::append_history(&paths, &record).unwrap();
    let lines = lines_of(&history);
    assert_eq!(lines.len(), 2);
    for line in &lines {
        serde_json::from_str::<kiln::bench::Report>(line).unwrap();
    }
}

#[test]
fn a_torn_history_line_is_skipped_and_reported() {
    let ws = Workspace::new();
    let paths = kiln::paths::StatePaths::new(ws.state(), None);
    let mut record = bench_record();
    record.warnings.clear();
    let history = kiln::bench::append_history(&paths, &record).unwrap();
    // What an older kiln left after ENOSPC: part of a record, no newline.
    let whole = std::fs::read_to_string(&history).unwrap();
    std::fs::write(&history, format!("{whole}{}", &whole[..100])).unwrap();
    let mut warned = Vec::new();
    let base = kiln::bench::read_baseline(&history, &mut |w| warned.push(w.to_string())).unwrap();
    assert_eq!(base.fingerprint_id, record.fingerprint_id);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].starts_with(&format!("{}:2: skipped a line", history.display())),
        "{warned:?}"
    );
    // The next append starts a line of its own instead of gluing onto the torn one.
    record.unix_time += 1;
    kiln::bench::append_history(&paths, &record).unwrap();
    let lines = lines_of(&history);
    assert_eq!(lines.len(), 3);
    let mut warned = Vec::new();
    let last = kiln::bench::read_baseline(&history, &mut |w| warned.push(w.to_string())).unwrap();
    assert_eq!((last.unix_time, warned.len()), (record.unix_time, 0));
}

#[test]
fn set_values_are_taken_literally() {
    let ws = Workspace::new();
    ws.write(
        "r.toml",
        "[recipe]\nname = \"lit\"\n[vars]\nword = \"plain\"\n\n[[step]]\nid = \"say\"\nkind = \"run\"\n\
         cmd = [\"sh\", \"-c\", 'printf %s \"$1\" > \"$2\"', \"sh\", \"${word}\", \"${recipe.dir}/said\"]\n",
    );
    let value = "pa$$w0rd${not.a.var}$${x}${";
    ws.kiln()
        .args(["up", "r.toml", "--set"])
        .arg(format!("word={value}"))
        .assert()
        .success();
    assert_eq!(
        std::fs::read_to_string(ws.path().join("said")).unwrap(),
        value
    );
}

#[test]
fn env_names_that_no_process_can_receive_are_refused_where_written() {
    for (key, why) in [
        ("\"A=B\"", "environment variable name `A=B` contains `=`"),
        ("\"\"", "environment variable name `` is empty"),
    ] {
        for (section, line) in [("step", 8), ("recipe", 4)] {
            let ws = Workspace::new();
            let text = match section {
                "step" => format!(
                    "[recipe]\nname = \"envs\"\n\n[[step]]\nid = \"x\"\nkind = \"run\"\ncmd = [\"true\"]\nenv = {{ {key} = \"v\" }}\n"
                ),
                _ => format!(
                    "[recipe]\nname = \"envs\"\n[env]\n{key} = \"v\"\n\n[[step]]\nid = \"x\"\nkind = \"run\"\ncmd = [\"true\"]\n"
                ),
            };
            ws.write("r.toml", &text);
            let err = stderr_of(ws.kiln().args(["plan", "r.toml"]), 2);
            assert!(
                err.contains(why)
                    && err.contains(&format!("r.toml:{line}:"))
                    && err.contains("hint: "),
                "{section} {key}:\n{err}"
            );
        }
    }
}

#[test]
fn two_recipes_of_one_name_keep_their_own_receipts() {
    let ws = Workspace::new();
    let twin = "[recipe]\nname = \"twin\"\n\n[[step]]\nid = \"build\"\nkind = \"run\"\ncwd = \"${recipe.dir}\"\n\
                cmd = [\"sh\", \"-c\", \"echo run >> counts\"]\n";
    ws.write("a/r.toml", twin);
    ws.write("b/r.toml", twin);
    let count = |dir: &str| {
        std::fs::read_to_string(ws.path().join(dir).join("counts"))
            .unwrap_or_default()
            .lines()
            .count()
    };
    for dir in ["a", "b", "a", "b"] {
        ws.kiln()
            .args(["up", &format!("{dir}/r.toml")])
            .assert()
            .success();
    }
    assert_eq!(
        (count("a"), count("b")),
        (1, 1),
        "one recipe's run undid the other's"
    );
    let plan = ws.kiln().args(["plan", "a/r.toml"]).output().unwrap();
    let plan = String::from_utf8_lossy(&plan.stdout);
    assert!(
        crate::common::status_of(&plan, "build").starts_with("fresh"),
        "{plan}"
    );
}

#[test]
fn serve_stop_does_not_need_the_required_values() {
    let ws = Workspace::new();
    ws.write(
        "r.toml",
        "[recipe]\nname = \"needy\"\n[vars]\nmodel = { help = \"path to the model\" }\n\n\
         [[step]]\nid = \"x\"\nkind = \"run\"\ncmd = [\"echo\", \"${model}\"]\n\n\
         [profile.s]\ncmd = [\"sleep\", \"${model}\"]\nport = \"18123\"\n",
    );
    let err = stderr_of(ws.kiln().args(["serve", "r.toml", "--stop"]), 0);
    assert!(
        err.contains("no running server recorded for needy"),
        "{err}"
    );
    // Everything else still asks for them.
    let err = stderr_of(ws.kiln().args(["plan", "r.toml"]), 2);
    assert!(err.contains("pass `--set model=...`"), "{err}");
}
