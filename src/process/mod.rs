//! The one owner of child processes (through duct): own process group, merged output streamed
//! line by line into a log, timeouts that end the whole group, and the output tail for errors.

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::redact::Redactor;

mod capture;
mod deferred_signals;
pub(crate) mod identity;
mod lines;
pub(crate) use capture::{capture, capture_timeout};
pub(crate) use lines::Limits;
pub(crate) mod watchdog;

pub(crate) use identity::{Identity, Refusal};

/// How many trailing output lines an error shows.
pub(crate) const TAIL_LINES: usize = 40;

/// A fully resolved command: no shell unless the program is one.
#[derive(Debug, Clone, Default)]
pub(crate) struct CommandSpec {
    pub program: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
}

impl CommandSpec {
    pub(crate) fn new(
        program: impl Into<String>,
        args: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        CommandSpec {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            ..CommandSpec::default()
        }
    }

    /// The command as a human would type it (for logs and messages).
    pub(crate) fn display(&self) -> String {
        std::iter::once(&self.program)
            .chain(&self.args)
            .map(|a| crate::shell::quote(a))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The one child-process builder: stdin null, its own process group, tied to kiln (see
    /// [`Tie`]), the spec's environment and directory; a non-zero exit is the caller's to judge.
    /// Every logged run starts here; the captures (`capture`, `capture_timeout`: one path) and
    /// `spawn_detached` apply the same [`own_group`] to a plain `Command`.
    fn expression(&self, tie: Tie) -> duct::Expression {
        let mut expr = duct::cmd(self.resolved_program(), &self.args)
            .stdin_null()
            .unchecked()
            .before_spawn(move |cmd| {
                own_group(cmd, tie == Tie::DeathSignal);
                Ok(())
            });
        for (k, v) in &self.env {
            expr = expr.env(k, v);
        }
        if let Some(dir) = &self.cwd {
            expr = expr.dir(dir);
        }
        expr
    }

    /// The program found on the PATH the child will have, as the child's `execvp` would. Given
    /// a full path, the standard library spawns with `posix_spawn` (no copy of kiln's page
    /// tables; it would otherwise fork, because duct sets `PATH` in the child's environment).
    /// A program not found stays bare, so that spawning fails with "not found" as before.
    fn resolved_program(&self) -> std::ffi::OsString {
        if self.program.contains('/') {
            return self.program.clone().into();
        }
        let path = match self.env.get("PATH") {
            Some(v) => Some(std::ffi::OsString::from(v)),
            None => std::env::var_os("PATH"),
        };
        let cwd = self.cwd.clone().or_else(|| std::env::current_dir().ok());
        match (path, cwd) {
            (Some(path), Some(cwd)) => which::which_in(&self.program, Some(path), cwd)
                .map_or_else(|_| self.program.clone().into(), PathBuf::into_os_string),
            _ => self.program.clone().into(),
        }
    }
}

/// How a child is made to end with kiln.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tie {
    /// SIGTERM when kiln's spawning thread dies (PR_SET_PDEATHSIG, set in the child before exec:
    /// the standard library then forks).
    DeathSignal,
    /// Registered with the running watchdog, which ends the group when kiln dies: the
    /// steps of `kiln up`, spawned without a hook in the child (`posix_spawn`).
    Watchdog,
}

/// A child in its own process group (pgid = pid), so that kiln can end it with everything it
/// started; `tie_to_parent`: it also dies with kiln.
fn own_group(cmd: &mut std::process::Command, tie_to_parent: bool) {
    cmd.process_group(0);
    if tie_to_parent {
        die_with_parent(cmd);
    }
}

/// The child gets SIGTERM when kiln's spawning thread dies (and exits at once if kiln is
/// already gone).
fn die_with_parent(cmd: &mut std::process::Command) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: prctl and getppid are async-signal-safe; nothing else runs here.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// How a logged run ended.
#[derive(Debug)]
pub(crate) struct Finished {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub tail: String,
    /// Pieces of output that did not end their line: a line longer than a piece of
    /// [`lines::Limits`] comes in several (0: every line came whole).
    pub pieces_cut: usize,
    /// Its output went past [`Limits::total_cap`]: its group was ended there.
    pub over_cap: bool,
}

impl Finished {
    pub(crate) fn success(&self) -> bool {
        self.code == Some(0) && !self.timed_out
    }

    pub(crate) fn describe(&self) -> String {
        match (self.timed_out, self.code, self.signal) {
            (true, _, _) => "timed out".into(),
            (_, Some(c), _) => format!("exited with status {c}"),
            (_, None, Some(s)) => format!("killed by signal {s}"),
            _ => "ended without a status".into(),
        }
    }
}

/// Run `spec`, writing every output line (secrets redacted) to `log` and passing it to `on_line`.
pub(crate) fn run_logged(
    spec: &CommandSpec,
    log: &mut dyn Write,
    timeout: Option<Duration>,
    on_line: &mut dyn FnMut(&str),
) -> Result<Finished> {
    run_logged_with(spec, log, timeout, Limits::LOG, on_line)
}

/// [`run_logged`] with other limits on a line's pieces (a reader of one long line of its own).
pub(crate) fn run_logged_with(
    spec: &CommandSpec,
    log: &mut dyn Write,
    timeout: Option<Duration>,
    limits: Limits,
    on_line: &mut dyn FnMut(&str),
) -> Result<Finished> {
    let redactor = Redactor::from_env(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let (reader, writer) = os_pipe::pipe().map_err(|e| Error::io("cannot create a pipe", e))?;
    let pipe = || {
        writer
            .try_clone()
            .map_err(|e| Error::io("cannot create a pipe", e))
    };
    let tie = if watchdog::active() {
        Tie::Watchdog
    } else {
        Tie::DeathSignal
    };
    // A terminating signal waits until the group is registered (the watchdog ends it then).
    let spawning = deferred_signals::spawning();
    let handle = spec
        .expression(tie)
        .stdout_file(pipe()?)
        .stderr_file(pipe()?)
        .start()
        .map_err(|e| spawn_error(spec, e))?;
    drop(writer);
    let pgid = handle.pids().first().copied();
    if tie == Tie::Watchdog {
        deferred_signals::signal_point();
    }
    if let Some(g) = pgid {
        watchdog::register(g);
    }
    drop(spawning);

    let (tx, rx) = mpsc::channel::<(String, bool)>();
    let whole = redactor.with_spaces();
    let read = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = Counted {
        inner: reader,
        read: read.clone(),
    };
    let pump = std::thread::spawn(move || {
        lines::split(BufReader::new(counted), limits, &whole, |line, ends| {
            tx.send((line, ends)).is_ok()
        });
    });
    let mut over_cap = false;

    let deadline = timeout.map(|t| Instant::now() + t);
    let mut tail = VecDeque::with_capacity(TAIL_LINES);
    let mut timed_out = false;
    let mut exited_at: Option<Instant> = None;
    let mut pieces_cut = 0;
    loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok((line, ends)) => {
                pieces_cut += usize::from(!ends);
                let line = redactor.redact(&line);
                writeln!(log, "{line}").map_err(|e| Error::io("cannot write the step log", e))?;
                on_line(&line);
                if tail.len() == TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(line);
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if !over_cap && read.load(std::sync::atomic::Ordering::Relaxed) > limits.total_cap {
            over_cap = true;
            if let Some(pid) = pgid {
                kill_group(pid);
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) && !timed_out {
            timed_out = true;
            if let Some(pid) = pgid {
                kill_group(pid);
            }
        }
        // A background grandchild may hold the pipe open after the command itself ended.
        if handle.try_wait().ok().flatten().is_some() {
            let at = *exited_at.get_or_insert_with(Instant::now);
            if at.elapsed() > Duration::from_millis(500) {
                break;
            }
        }
    }
    let output = handle
        .wait()
        .map_err(|e| Error::io(format!("waiting for `{}` failed", spec.program), e))?;
    if let Some(g) = pgid {
        watchdog::unregister(g);
    }
    drop(pump);
    use std::os::unix::process::ExitStatusExt;
    Ok(Finished {
        code: output.status.code(),
        signal: output.status.signal(),
        timed_out,
        tail: tail.into_iter().collect::<Vec<_>>().join("\n"),
        pieces_cut,
        over_cap,
    })
}

/// A reader that counts the bytes read through it (a child's output, for [`Limits::total_cap`]).
struct Counted<R> {
    inner: R,
    read: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl<R: std::io::Read> std::io::Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read
            .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

/// How long [`kill_group`] waits after SIGTERM before SIGKILL.
pub(crate) const KILL_GRACE: Duration = Duration::from_secs(3);

/// End a process group: SIGTERM, a grace period of up to [`KILL_GRACE`] for every member to
/// exit, then SIGKILL. Never group 0 or 1 (which `killpg` reads as kiln's own group and every process) nor
/// kiln's own group.
pub(crate) fn kill_group(pgid: u32) {
    if !identity::signallable_group(pgid) {
        return;
    }
    let pgid = pgid as libc::pid_t;
    // SAFETY: plain syscalls on a process group this module created.
    unsafe {
        libc::killpg(pgid, libc::SIGTERM);
    }
    let until = Instant::now() + KILL_GRACE;
    while Instant::now() < until {
        // SAFETY: signal 0 only probes for existence.
        let gone = unsafe { libc::killpg(pgid, 0) } != 0;
        // An exited child of kiln's stays a member (a zombie) until its handle reaps it: it has
        // ended, and waiting out the grace period for it cost every stop 3 s.
        if gone || identity::group_running(pgid as u32) == Some(false) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: as above.
    unsafe {
        libc::killpg(pgid, libc::SIGKILL);
    }
}

/// End the process group led by the recorded process `id`, only if that process is still the
/// one recorded (see [`identity`]); otherwise nothing is signalled and the reason is returned.
pub(crate) fn stop_recorded_group(id: &Identity) -> std::result::Result<(), Refusal> {
    id.verify()?;
    kill_group(id.pid);
    Ok(())
}

fn spawn_error(spec: &CommandSpec, e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::NotFound {
        Error::other(
            format!("cannot run `{}`: program not found", spec.program),
            Some(
                "install it or fix the PATH; kiln runs programs directly, not through a shell"
                    .into(),
            ),
        )
    } else if let Some(what) = nul_byte_in(spec) {
        Error::other(
            format!("cannot run `{}`: {what} contains a NUL byte", spec.program.escape_debug()),
            Some("a program's arguments and environment cannot hold NUL (\\0) bytes; check the value that produced it (a variable, an escape in the recipe)".into()),
        )
    } else {
        Error::io(format!("cannot run `{}`", spec.display()), e)
    }
}

/// Which part of `spec` holds a NUL byte (the OS refuses to start such a command).
fn nul_byte_in(spec: &CommandSpec) -> Option<String> {
    if spec.program.contains('\0') {
        return Some("the program name".into());
    }
    if let Some(i) = spec.args.iter().position(|a| a.contains('\0')) {
        return Some(format!("argument {}", i + 1));
    }
    if let Some((k, _)) = spec
        .env
        .iter()
        .find(|(k, v)| k.contains('\0') || v.contains('\0'))
    {
        return Some(format!("environment variable `{}`", k.escape_debug()));
    }
    spec.cwd
        .as_ref()
        .filter(|c| c.as_os_str().as_encoded_bytes().contains(&0))
        .map(|_| "the working directory".into())
}

/// A child started into its own process group whose output goes to a log file.
#[derive(Debug)]
pub(crate) struct Detached {
    pub pid: u32,
    child: std::process::Child,
}

impl Detached {
    /// Its exit status, once it has ended (`None` while it runs).
    pub(crate) fn try_exit(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

/// Start `spec` in its own process group (pgid = pid), stdin null, stdout and stderr appended to
/// `log`. With `tie_to_parent` the child gets SIGTERM when kiln dies; without it, it keeps running
/// after kiln exits (`--detach`). The caller ends it with `kill_group(pid)`.
pub(crate) fn spawn_detached(
    spec: &CommandSpec,
    log: &std::path::Path,
    tie_to_parent: bool,
) -> Result<Detached> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| Error::io(format!("cannot open the server log {}", log.display()), e))?;
    let err = file
        .try_clone()
        .map_err(|e| Error::io("cannot duplicate the log file", e))?;
    let mut cmd = std::process::Command::new(&spec.program);
    cmd.args(&spec.args)
        .envs(&spec.env)
        .stdin(std::process::Stdio::null())
        .stdout(file)
        .stderr(err);
    own_group(&mut cmd, tie_to_parent);
    if let Some(dir) = &spec.cwd {
        cmd.current_dir(dir);
    }
    let child = cmd.spawn().map_err(|e| spawn_error(spec, e))?;
    Ok(Detached {
        pid: child.id(),
        child,
    })
}

/// Whether process `pid` exists (it may belong to someone else; a zombie counts).
pub(crate) fn pid_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists; nothing is sent.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Whether process `pid` exists and is not a zombie.
pub(crate) fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// The command names (`comm`) of every live process in group `pgid`.
pub(crate) fn group_commands(pgid: u32) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some((head, rest))) = (stat.find('('), stat.rsplit_once(')')) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // rest: state ppid pgrp ...
        if fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string() {
            out.push(head[open + 1..].to_string());
        }
    }
    out
}

static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn note_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// From now on, SIGINT (Ctrl-C), SIGTERM and SIGHUP only set a flag that `interrupted()` reads, so a
/// long wait can end its children's process groups before returning.
pub(crate) fn catch_interrupts() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(
                sig,
                note_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
    }
}

/// Whether a signal caught by `catch_interrupts` arrived.
pub(crate) fn interrupted() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parent-death signal the child runs with (PR_GET_PDEATHSIG), read by the child itself.
    const PDEATHSIG: &str = "import ctypes; s = ctypes.c_int(); \
        ctypes.CDLL(None).prctl(2, ctypes.byref(s)); print(s.value)";

    #[test]
    fn a_program_is_found_on_the_path_the_child_gets() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let tool = dir.path().join("kiln-test-tool");
        std::fs::write(&tool, "#!/bin/sh\necho found\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut spec = CommandSpec::new("kiln-test-tool", Vec::<String>::new());
        assert_eq!(
            spec.resolved_program(),
            "kiln-test-tool",
            "not on kiln's PATH"
        );
        spec.env
            .insert("PATH".into(), format!("/nowhere:{}", dir.path().display()));
        assert_eq!(spec.resolved_program(), tool.as_os_str());
        let mut log = Vec::new();
        assert!(run_logged(&spec, &mut log, None, &mut |_| {})
            .unwrap()
            .success());
        assert!(String::from_utf8_lossy(&log).contains("found"));
    }

    #[test]
    fn this_process_exists() {
        assert!(pid_exists(std::process::id()));
    }

    #[test]
    fn every_way_to_run_a_child_ties_it_to_kiln() {
        let sigterm = libc::SIGTERM.to_string();
        let out = capture("python3", &["-c", PDEATHSIG]).unwrap();
        assert_eq!(out.trim(), sigterm, "capture");
        let spec = CommandSpec::new("python3", ["-c", PDEATHSIG]);
        let got = capture_timeout(&spec, Duration::from_secs(30)).unwrap();
        assert_eq!(got.stdout.trim(), sigterm, "capture_timeout: {got:?}");
        let mut log = Vec::new();
        let done = run_logged(&spec, &mut log, None, &mut |_| {}).unwrap();
        assert!(done.success());
        assert!(
            String::from_utf8_lossy(&log).contains(&sigterm),
            "run_logged: {}",
            String::from_utf8_lossy(&log)
        );
    }
}
