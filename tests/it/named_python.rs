//! An interpreter named with `kiln doctor --python` that does not answer is a failing check with
//! what to do, whatever the recipe needs: never "no Python environment … No issues found". Both
//! ways a real venv hangs at start: a `.pth` line that sleeps (as a hanging sitecustomize does),
//! and a package's METADATA
//! that is a FIFO (`importlib.metadata` blocks opening it). The default deadline runs (no
//! `KILN_PYTHON_PROBE_TIMEOUT`).

use std::path::PathBuf;
use std::time::Duration;

use crate::common::Workspace;

/// A real venv (no pip) in the workspace; its interpreter and its site-packages.
fn venv(ws: &Workspace) -> (PathBuf, PathBuf) {
    let dir = ws.path().join("venv");
    let status = std::process::Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&dir)
        .status()
        .expect("python3 -m venv runs");
    assert!(status.success(), "python3 -m venv failed");
    let python = dir.join("bin/python");
    let out = std::process::Command::new(&python)
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .unwrap();
    let site = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(site.is_dir(), "{}", site.display());
    (python, site)
}

fn doctor_says_the_interpreter_fails(ws: &Workspace, python: &std::path::Path, case: &str) {
    let out = ws
        .kiln()
        .args(["doctor", "--python"])
        .arg(python)
        .env_remove("KILN_PYTHON_PROBE_TIMEOUT")
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let all = format!("{stdout}\n{stderr}");
    assert_eq!(out.status.code(), Some(2), "{case}: not a failure:\n{all}");
    assert!(
        !stdout.contains("no Python environment") && !stdout.contains("No issues found"),
        "{case}: the named interpreter was dropped:\n{all}"
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("[✗] python.torch"))
        .unwrap_or_else(|| panic!("{case}: no failing python check:\n{all}"));
    assert!(
        line.contains(&python.display().to_string())
            && line.contains("did not answer within")
            && line.contains("its processes were ended"),
        "{case}: {line}"
    );
    assert!(
        stdout.contains("sitecustomize") && stdout.contains("-X importtime"),
        "{case}: no fix says what to do:\n{all}"
    );
}

#[test]
fn a_named_interpreter_that_hangs_at_start_up_fails_its_check() {
    // A `.pth` line that sleeps runs at every start, as a hanging sitecustomize does; a venv's
    // own sitecustomize.py would be shadowed by Debian's /usr/lib/python3.*/sitecustomize.py.
    let ws = Workspace::new();
    let (python, site) = venv(&ws);
    std::fs::write(site.join("hang.pth"), "import time; time.sleep(1000)\n").unwrap();
    doctor_says_the_interpreter_fails(&ws, &python, "a .pth file sleeps");
}

#[test]
fn a_named_interpreter_with_a_fifo_as_metadata_fails_its_check() {
    let ws = Workspace::new();
    let (python, site) = venv(&ws);
    let info = site.join("sglang-0.5.9.dist-info");
    std::fs::create_dir_all(&info).unwrap();
    let fifo = info.join("METADATA");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    doctor_says_the_interpreter_fails(&ws, &python, "METADATA is a FIFO");
}
