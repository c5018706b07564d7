//! A run's processes are its own: `kiln doctor` on the state directory of a running `kiln up`
//! leaves the build running, and a SIGKILLed run's watchdog, however late it wakes, never ends
//! the steps of the run that replaced it. Every wait is on a condition (a file, a process),
//! bounded only so that a hang fails instead of blocking the suite.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::Workspace;

/// A recipe whose one step (a shell with `token` among its arguments, for the process table)
/// touches `<ws>/<tag>.started`, waits until `<ws>/<tag>.release` exists, then touches
/// `<ws>/<tag>.built`.
fn held_step(name: &str, tag: &str, token: &str) -> String {
    format!(
        "[recipe]\nname = \"{name}\"\n\n[[step]]\nid = \"build\"\nkind = \"run\"\n\
         cmd = [\"sh\", \"-c\", 'touch \"$1.started\"; while [ ! -e \"$1.release\" ]; do sleep 0.05; done; touch \"$1.built\"', \"sh\", \"${{recipe.dir}}/{tag}\", \"{token}\"]\n"
    )
}

fn spawn_up(ws: &Workspace, recipe: &str) -> Child {
    std::process::Command::new(assert_cmd::cargo::cargo_bin("kiln"))
        .args(["up", recipe, "--no-doctor"])
        .current_dir(ws.path())
        .env("KILN_HOME", ws.state())
        .env("KILN_NO_PROGRESS", "1")
        .env_remove("XDG_STATE_HOME")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kiln starts")
}

fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(120);
    while !ready() {
        assert!(Instant::now() < until, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait for `child` to end; its exit code and stderr.
fn finish(child: Child) -> (Option<i32>, String) {
    let out = child.wait_with_output().expect("kiln ends");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The command line of live (not zombie) process `pid`, NULs as spaces; `None` when gone.
fn cmdline(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let state = stat
        .rsplit_once(')')?
        .1
        .split_whitespace()
        .next()?
        .to_string();
    if state == "Z" || state == "X" {
        return None;
    }
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(String::from_utf8_lossy(&raw).replace('\0', " "))
}

/// Pids of live processes whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| cmdline(pid).is_some_and(|c| c.contains(needle)))
        .collect()
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: a signal to a process this test started (or its kiln's watchdog).
    unsafe { libc::kill(libc::pid_t::try_from(pid).unwrap(), sig) };
}

#[test]
fn doctor_on_the_state_dir_of_a_running_build_leaves_the_build_running() {
    let token = format!("own-runs-long-{}", std::process::id());
    let ws = Workspace::new();
    ws.write("long.toml", &held_step("long", "long", &token));
    let up = spawn_up(&ws, "long.toml");
    wait_for("the build step to start", || {
        ws.path().join("long.started").exists()
    });
    let doctor = ws
        .kiln()
        .args(["doctor"])
        .timeout(Duration::from_secs(300))
        .output()
        .expect("kiln doctor runs");
    // Whatever doctor finds on this host, it must not have touched the build.
    let doctor_err = String::from_utf8_lossy(&doctor.stderr).into_owned();
    assert!(
        !processes_with(&token).is_empty(),
        "kiln doctor ended the running build's step:\n{doctor_err}"
    );
    std::fs::write(ws.path().join("long.release"), "").unwrap();
    let (code, err) = finish(up);
    assert_eq!(code, Some(0), "kiln up after kiln doctor:\n{err}");
    assert!(ws.path().join("long.built").exists(), "{err}");
    // The build's registry went with it; doctor's too.
    let left: Vec<_> = std::fs::read_dir(ws.state().join("running"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "registries left behind: {left:?}");
}

#[test]
fn a_killed_runs_late_watchdog_never_ends_the_next_runs_step() {
    // Rounds alternate: the dead run's watchdog held stopped until the next run's step runs (it
    // wakes as late as a loaded machine makes it), and left to run as the scheduler has it.
    for round in 0..4 {
        let late = round % 2 == 0;
        let ws = Workspace::new();
        let first = format!("own-runs-a{round}-{}", std::process::id());
        let second = format!("own-runs-b{round}-{}", std::process::id());
        ws.write("a.toml", &held_step("first", "a", &first));
        ws.write("b.toml", &held_step("second", "b", &second));
        let a = spawn_up(&ws, "a.toml");
        let a_pid = a.id();
        wait_for("the first run's step", || {
            ws.path().join("a.started").exists()
        });
        let watchdog = format!("__watchdog {a_pid} ");
        wait_for("the first run's watchdog", || {
            !processes_with(&watchdog).is_empty()
        });
        let dog = processes_with(&watchdog)[0];
        if late {
            signal(dog, libc::SIGSTOP);
        }
        signal(a_pid, libc::SIGKILL);
        let _ = finish(a);
        let b = spawn_up(&ws, "b.toml");
        wait_for("the second run's step", || {
            ws.path().join("b.started").exists()
        });
        if late {
            signal(dog, libc::SIGCONT);
        }
        wait_for("the first run's watchdog to end", || cmdline(dog).is_none());
        wait_for("the first run's step to end", || {
            processes_with(&first).is_empty()
        });
        assert!(
            !processes_with(&second).is_empty(),
            "round {round}: the dead run's watchdog ended the next run's step"
        );
        std::fs::write(ws.path().join("b.release"), "").unwrap();
        let (code, err) = finish(b);
        assert_eq!(code, Some(0), "round {round}: the second run:\n{err}");
        assert!(ws.path().join("b.built").exists(), "round {round}: {err}");
    }
}

/// A command that runs no watchdog (`kiln patch` probing the interpreter it was given) ties its
/// children to itself by a death signal: SIGKILLed while the probe runs, kiln leaves nothing
/// running. (Under `kiln up` the watchdog ends them instead; a child tied to neither would
/// outlive kiln.)
#[test]
fn a_sigkilled_command_without_a_watchdog_leaves_no_child_running() {
    let ws = Workspace::new();
    let token = format!("kiln-orphan-probe-{}", std::process::id());
    let python = ws.path().join("python3");
    std::fs::write(
        &python,
        format!(
            "#!/bin/sh\ntouch \"$0.started\"\nexec sh -c 'while :; do sleep 0.2; done' {token}\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&python, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let kiln = std::process::Command::new(assert_cmd::cargo::cargo_bin("kiln"))
        .args(["patch", "apply", "sglang-0.5.9-sm120", "--python"])
        .arg(&python)
        .env("KILN_HOME", ws.state())
        .env_remove("XDG_STATE_HOME")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("kiln starts");
    let started = ws.path().join("python3.started");
    wait_for("the probe to start", || {
        started.exists() && !processes_with(&token).is_empty()
    });
    signal(kiln.id(), libc::SIGKILL);
    let _ = finish(kiln);
    // A death signal acts at once: 10 s is a bound for a loaded machine, not a measurement.
    let until = Instant::now() + Duration::from_secs(10);
    while !processes_with(&token).is_empty() {
        assert!(
            Instant::now() < until,
            "the probe outlived the SIGKILLed kiln by 10 s: {:?}",
            processes_with(&token)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A step that has ended is struck from the run's registry (`-PGID`) while the run goes on, so
/// that a watchdog woken by kiln's death never looks for it: the registry holds only what runs.
#[test]
fn a_finished_steps_group_leaves_the_registry_while_the_run_goes_on() {
    let ws = Workspace::new();
    ws.write(
        "r.toml",
        "[recipe]\nname = \"twosteps\"\n\n[[step]]\nid = \"quick\"\nkind = \"run\"\n\
         cmd = [\"sh\", \"-c\", 'cut -d\" \" -f5 /proc/$$$$/stat > \"$1.pgid\"', \"sh\", \"${recipe.dir}/quick\"]\n\n\
         [[step]]\nid = \"held\"\nkind = \"run\"\nneeds = [\"quick\"]\n\
         cmd = [\"sh\", \"-c\", 'touch \"$1.started\"; while [ ! -e \"$1.release\" ]; do sleep 0.05; done', \"sh\", \"${recipe.dir}/held\"]\n",
    );
    let kiln = spawn_up(&ws, "r.toml");
    let started = ws.path().join("held.started");
    wait_for("the second step", || started.exists());
    let pgid = std::fs::read_to_string(ws.path().join("quick.pgid")).unwrap();
    let pgid = pgid.trim();
    let registry: String = std::fs::read_dir(ws.state().join("running"))
        .unwrap()
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    std::fs::write(ws.path().join("held.release"), "").unwrap();
    let (code, err) = finish(kiln);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        registry
            .lines()
            .any(|l| l.starts_with(&format!("+{pgid} "))),
        "the quick step (group {pgid}) was registered: {registry}"
    );
    assert!(
        registry.lines().any(|l| l == format!("-{pgid}")),
        "the quick step was struck out when it ended: {registry}"
    );
}
