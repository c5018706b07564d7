//! Children that hold on (issue 34): a tool kiln reads that exits but leaves a process of its
//! own holding its stdout must not hold kiln. The real nvidia-smi captures (the fake replays
//! them, tests/fixtures/gpu/bin) behind a wrapper that starts a sleeper on the same stdout; and
//! a short command read whole (the patch step's site-packages probe of a Python) whose Python
//! leaves such a sleeper, or writes without end.

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use crate::common::Workspace;

#[test]
fn an_nvidia_smi_whose_child_keeps_stdout_open_still_gives_the_gpu_facts() {
    let ws = Workspace::new();
    let fixtures = crate::common::gpu_fixtures();
    let token = format!("300.{}", std::process::id());
    let bin = ws.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let smi = bin.join("nvidia-smi");
    std::fs::write(
        &smi,
        format!(
            "#!/bin/sh\n\"{}\" \"$@\"\ncode=$?\nsleep {token} &\nexit $code\n",
            fixtures.join("bin/nvidia-smi").display()
        ),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = ws
        .kiln_with_gpu_bin(&bin, "h200x2")
        .args(["doctor", "--json", "nvidia.driver"])
        .timeout(std::time::Duration::from_secs(300))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let report = crate::reporter::json_event(&text, "doctor");
    let driver = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "nvidia.driver")
        .unwrap_or_else(|| panic!("no nvidia.driver check:\n{text}"))
        .clone();
    // Before: each call waited for the sleeper's pipe until its 15-s timeout, and the check
    // said nvidia-smi timed out. Now the output read up to its exit is used.
    assert!(
        driver["summary"]
            .as_str()
            .is_some_and(|s| s.contains("driver 580.159.04, 2× NVIDIA H200")),
        "{driver}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // No sleeper outlives the check: each was ended with its group.
    let left = running_with(&token);
    assert!(left.is_empty(), "sleepers left running: {left:?}");
}

/// The live (not zombie) processes whose command line holds `token`, by pid.
fn running_with(token: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let zombie = stat.rsplit(')').next()?.trim_start().starts_with('Z');
            (!zombie && String::from_utf8_lossy(&cmdline).contains(token))
                .then(|| e.file_name().to_string_lossy().into_owned())
        })
        .collect()
}

/// An executable `python` in `ws` that runs `body` (sh).
fn fake_python(ws: &Workspace, body: &str) -> PathBuf {
    let python = ws.write("bin/python", &format!("#!/bin/sh\n{body}\n"));
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    python
}

/// `patch::site_packages_of(python)` on a thread of its own, so that a regression (the probe
/// waiting for the sleeper's pipe) fails the test after 240 s instead of hanging the suite.
fn probe(python: PathBuf) -> kiln::error::Result<PathBuf> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(kiln::patch::site_packages_of(&python));
    });
    rx.recv_timeout(Duration::from_secs(240))
        .expect("the site-packages probe is held by a process its Python left running")
}

#[test]
fn a_python_probe_whose_child_keeps_stdout_open_still_gives_site_packages() {
    let ws = Workspace::new();
    let site = ws.path().join("site-packages");
    std::fs::create_dir_all(&site).unwrap();
    let token = format!("600.{}", std::process::id());
    let python = fake_python(
        &ws,
        &format!("echo '{}'\nsleep {token} &\nexit 0", site.display()),
    );
    // Before: `process::capture` read stdout to its end, which the sleeper held for 600 s.
    assert_eq!(probe(python).unwrap(), site);
    let left = running_with(&token);
    assert!(left.is_empty(), "sleepers left running: {left:?}");
}

#[test]
fn a_python_probe_that_writes_without_end_is_cut_at_the_cap() {
    let ws = Workspace::new();
    let token = format!("zero.{}", std::process::id());
    // cat reads /dev/zero for ever; the second name only marks the process.
    let python = fake_python(&ws, &format!("exec cat /dev/zero /nonexistent/{token}"));
    // Before: the probe's stdout grew in memory without bound.
    let err = probe(python).unwrap_err().to_string();
    assert!(err.contains("wrote more than 16.0 MiB"), "{err}");
    let left = running_with(&token);
    assert!(left.is_empty(), "writers left running: {left:?}");
}
