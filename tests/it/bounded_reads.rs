//! Every read and wait is bounded: a FIFO, `/dev/zero` or a directory named as `serve --log`,
//! `--metrics`, `bench --prompt-file` or `--baseline` is refused at once (nothing blocks, nothing
//! grows), a FIFO planted as a receipt is read as no receipt, and a Python whose `import torch`
//! hangs (with a grandchild holding its output) ends at the probe's deadline with every process
//! of it gone.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::Workspace;

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo on a valid C string path the test owns.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// The non-regular inputs, each with the words its refusal holds.
fn hostile(ws: &Workspace) -> Vec<(PathBuf, &'static str)> {
    let fifo = ws.path().join("in.fifo");
    mkfifo(&fifo);
    vec![
        (
            "/dev/zero".into(),
            "it is a character device, not a regular file",
        ),
        (fifo, "it is a FIFO, not a regular file"),
        (
            ws.path().to_path_buf(),
            "it is a directory, not a regular file",
        ),
    ]
}

/// Run `cmd` (killed after 60 s, so a regression fails instead of hanging the suite) and
/// require a refusal with `why` and a hint.
fn refused(cmd: &mut assert_cmd::Command, why: &str) {
    let out = cmd.timeout(Duration::from_secs(60)).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{why}:\n{stderr}");
    assert!(
        stderr.contains(why) && stderr.contains("hint:"),
        "{why}:\n{stderr}"
    );
}

#[test]
fn serve_log_and_metrics_must_be_regular_files() {
    let ws = Workspace::new();
    ws.write(
        "r.toml",
        "[recipe]\nname = \"capture\"\n\n[profile.p]\ncmd = [\"true\"]\nsignatures = \"sglang-0.5.9\"\napi = \"sglang\"\n",
    );
    let log = ws.write("server.log", "nothing to see\n");
    for (path, why) in hostile(&ws) {
        refused(ws.kiln().args(["serve", "r.toml", "--log"]).arg(&path), why);
        refused(
            ws.kiln()
                .args(["serve", "r.toml", "--log"])
                .arg(&log)
                .arg("--metrics")
                .arg(&path),
            why,
        );
    }
}

#[test]
fn bench_prompt_file_and_baseline_must_be_regular_files() {
    let ws = Workspace::new();
    for (path, why) in hostile(&ws) {
        // Nothing listens on port 1: the refusal comes before any request.
        refused(
            ws.kiln()
                .args(["bench", "--url", "http://127.0.0.1:1", "--prompt-file"])
                .arg(&path),
            why,
        );
        refused(
            ws.kiln()
                .args(["bench", "--url", "http://127.0.0.1:1", "--baseline"])
                .arg(&path),
            why,
        );
    }
}

#[test]
fn a_fifo_planted_as_a_receipt_reads_as_no_receipt() {
    let ws = Workspace::new();
    ws.write(
        "r.toml",
        "[recipe]\nname = \"r\"\n\n[[step]]\nid = \"a\"\nkind = \"run\"\ncmd = [\"true\"]\n",
    );
    ws.kiln()
        .args(["up", "r.toml", "--no-serve", "--no-doctor"])
        .assert()
        .success();
    let receipt = ws.state().join("runs/r/receipts/a.json");
    assert!(
        receipt.is_file(),
        "the receipt lives at {}",
        receipt.display()
    );
    std::fs::remove_file(&receipt).unwrap();
    mkfifo(&receipt);
    let out = ws
        .kiln()
        .args(["plan", "r.toml"])
        .env("KILN_NO_RECIPE_CACHE", "1")
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        crate::common::status_of(&stdout, "a").starts_with("stale a"),
        "{stdout}"
    );
}

/// A site-packages whose `sitecustomize` (run by every python start that sees it) starts a
/// background child holding the output and writes its pid to `pid_file`, then never returns (as
/// a broken CUDA install's import hooks can).
fn hung_python(ws: &Workspace, pid_file: &Path) -> PathBuf {
    let site = ws.path().join("site");
    std::fs::create_dir_all(site.join("torch")).unwrap();
    std::fs::create_dir_all(site.join("torch-2.9.0.dist-info")).unwrap();
    std::fs::write(
        site.join("torch-2.9.0.dist-info/METADATA"),
        "Metadata-Version: 2.1\nName: torch\nVersion: 2.9.0\n",
    )
    .unwrap();
    // Plain doctor never imports torch (it reads its files), so the hang sits where every
    // python start runs it: `sitecustomize`, found on PYTHONPATH.
    std::fs::write(
        site.join("sitecustomize.py"),
        format!(
            "import subprocess, time\n\
             p = subprocess.Popen(['sleep', '1000'])\n\
             open({:?}, 'w').write(str(p.pid))\n\
             time.sleep(1000)\n",
            pid_file.display().to_string()
        ),
    )
    .unwrap();
    site
}

/// Whether `pid` is a live process (a zombie waiting for init is not).
fn alive(pid: i32) -> bool {
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    state
        .rsplit_once(") ")
        .is_some_and(|(_, rest)| !rest.starts_with('Z'))
}

fn read_pid(path: &Path) -> i32 {
    std::fs::read_to_string(path)
        .expect("the hung import started its child")
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_hung_python_start_ends_at_the_probe_deadline_with_its_grandchild() {
    let ws = Workspace::new();
    let pid_file = ws.path().join("grandchild.pid");
    let site = hung_python(&ws, &pid_file);
    let out = ws
        .kiln()
        .args(["doctor", "--json", "--python", "python3"])
        .env("PYTHONPATH", &site)
        .env("KILN_PYTHON_PROBE_TIMEOUT", "3")
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code().is_some(),
        "doctor finished on its own:\n{stderr}"
    );
    assert!(
        stdout.contains("did not answer within 3s (its processes were ended)"),
        "{stdout}\n{stderr}"
    );
    let pid = read_pid(&pid_file);
    assert!(!alive(pid), "the grandchild outlived the probe");
}

#[test]
fn a_killed_doctor_takes_the_hung_probe_and_its_grandchild_along() {
    let ws = Workspace::new();
    let pid_file = ws.path().join("grandchild.pid");
    let site = hung_python(&ws, &pid_file);
    let mut doctor = std::process::Command::new(assert_cmd::cargo::cargo_bin("kiln"))
        .args(["doctor", "--json", "--python", "python3"])
        .current_dir(ws.path())
        .env("KILN_HOME", ws.state())
        .env("PYTHONPATH", &site)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait (bounded) for the hung import to be running.
    for _ in 0..600 {
        if std::fs::read_to_string(&pid_file).is_ok_and(|t| !t.trim().is_empty()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let pid = read_pid(&pid_file);
    doctor.kill().unwrap();
    doctor.wait().unwrap();
    // The watchdog ends the probe's process group once it sees doctor gone (bounded wait).
    for _ in 0..600 {
        if !alive(pid) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the probe's grandchild {pid} outlived a killed doctor");
}

/// Run `cmd` with a deadline a hang would hit: (exit code, stderr). A kill at the deadline
/// has no exit code, and fails the caller's assertion.
fn ends(cmd: &mut assert_cmd::Command) -> (Option<i32>, String) {
    let out = cmd.timeout(Duration::from_secs(60)).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn fifos_planted_in_the_state_directory_are_never_waited_on() {
    let ws = Workspace::new();
    ws.write(
        "r.toml",
        "[recipe]\nname = \"planted\"\n\n[[step]]\nid = \"a\"\nkind = \"run\"\ninputs = [\"in.txt\"]\ncmd = [\"true\"]\n\n[profile.p]\ncmd = [\"true\"]\n",
    );
    ws.write("in.txt", "x");
    let (code, err) = ends(
        ws.kiln()
            .args(["up", "r.toml", "--no-serve", "--no-doctor"]),
    );
    assert_eq!(code, Some(0), "{err}");
    // Every state file kiln reads back, replaced by a FIFO (the recipe cache's entries too).
    let state = ws.state();
    let mut planted = vec![
        state.join("hashmemo.json"),
        state.join("clock-granularity"),
        state.join("serve/planted.json"),
        state.join("running/1"),
    ];
    planted.extend(
        std::fs::read_dir(state.join("recipe-cache"))
            .unwrap()
            .flatten()
            .map(|e| e.path()),
    );
    for path in &planted {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let _ = std::fs::remove_file(path);
        mkfifo(path);
    }
    ws.write("in.txt", "y");
    let (code, err) = ends(
        ws.kiln()
            .args(["up", "r.toml", "--no-serve", "--no-doctor"]),
    );
    assert_eq!(code, Some(0), "kiln up with planted FIFOs:\n{err}");
    let (code, err) = ends(ws.kiln().args(["serve", "r.toml", "--stop"]));
    assert!(matches!(code, Some(0 | 1)), "kiln serve --stop:\n{err}");
}

#[test]
fn a_fifo_as_a_packages_metadata_is_refused_by_patch_naming_it() {
    let ws = Workspace::new();
    let site = ws.path().join("site");
    let info = site.join("sglang-0.5.9.dist-info");
    std::fs::create_dir_all(&info).unwrap();
    std::fs::create_dir_all(site.join("sglang")).unwrap();
    mkfifo(&info.join("METADATA"));
    let (code, err) = ends(
        ws.kiln()
            .args(["patch", "check", "sglang-0.5.9-sm120", "--site-packages"])
            .arg(&site),
    );
    assert!(matches!(code, Some(1 | 2)), "{err}");
    assert!(
        err.contains("METADATA") && err.contains("it is a FIFO, not a regular file"),
        "{err}"
    );
}

#[test]
fn a_python_that_writes_dev_zero_is_ended_past_the_output_cap_and_the_check_says_why() {
    let ws = Workspace::new();
    let python = ws.path().join("python3");
    std::fs::write(&python, "#!/bin/sh\nexec cat /dev/zero\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // The probe's deadline is far away: only the output cap can end it.
    let out = ws
        .kiln()
        .args(["doctor", "--json", "--python"])
        .arg(&python)
        .env("KILN_PYTHON_PROBE_TIMEOUT", "600")
        .timeout(Duration::from_secs(300))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.code().is_some(),
        "doctor finished on its own:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("wrote more than 32 MiB while printing its facts: it was ended there"),
        "{stdout}"
    );
}
