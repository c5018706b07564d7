//! Short commands whose output kiln reads (`nvidia-smi`, a server's `--help`, the doctor's
//! probes, `nvcc --version`, a venv's Python probes): every captured child takes this one path,
//! stdout and stderr captured separately and concurrently, each up to a cap, under a
//! deadline. The wait ends with the child, not with its pipes: a grandchild that keeps stdout
//! open after the child exited gets a short grace period, then the whole group is ended and
//! what was read is kept. Past the cap (a `/dev/zero` writer) the group is ended at once and
//! the capture says so; it never grows or waits without end.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use super::{kill_group, own_group, spawn_error, CommandSpec};
use crate::error::{Error, Result};

/// The most kiln keeps of each stream of a short command.
pub(crate) const CAPTURE_CAP: usize = 16 << 20;
/// How long the pipes may stay open after the child exited (a grandchild holding them).
const EXIT_GRACE: Duration = Duration::from_secs(2);
/// The deadline of a short command that names none ([`capture`]: `nvcc --version`, a Python
/// probe of a venv): long enough for a cold `import` on a slow disk.
pub(crate) const SHORT_DEADLINE: Duration = Duration::from_secs(300);

/// What a short command printed and how it ended (see [`capture_timeout`]).
#[derive(Debug, Clone)]
pub(crate) struct Captured {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// Set when the deadline passed first (the pipes held open after the child exited do not
    /// count: `code` is then the child's own, and its output up to its exit is whole). Output
    /// past the cap makes `code` `None` and ends `stderr` with why.
    pub timed_out: bool,
}

impl Captured {
    pub(crate) fn success(&self) -> bool {
        self.code == Some(0) && !self.timed_out
    }
}

/// Run `spec` in its own process group with stdout and stderr captured separately; after
/// `timeout` the whole group is ended and `timed_out` is set. A non-zero exit is not an error
/// here (callers judge it); only a failure to start is.
pub(crate) fn capture_timeout(spec: &CommandSpec, timeout: Duration) -> Result<Captured> {
    capture_capped(spec, timeout, CAPTURE_CAP)
}

/// Run a short command and return its stdout, through the same capture as
/// [`capture_timeout`] (the cap, the grace for a grandchild holding the pipes, the whole group
/// ended) under [`SHORT_DEADLINE`]; an error carries how it ended and its stderr.
pub(crate) fn capture(program: &str, args: &[&str]) -> Result<String> {
    let spec = CommandSpec::new(program, args.iter().copied());
    let c = capture_timeout(&spec, SHORT_DEADLINE)?;
    if c.success() {
        return Ok(c.stdout);
    }
    let how = match c.code {
        _ if c.timed_out => format!("still running after {} s", SHORT_DEADLINE.as_secs()),
        Some(code) => format!("exit status: {code}"),
        None => "ended by a signal or by kiln".to_string(),
    };
    Err(Error::other(
        format!(
            "`{program} {}` failed ({how}): {}",
            args.join(" "),
            c.stderr.trim()
        ),
        None,
    ))
}

/// One stream's reader: its bytes so far, and whether it went past the cap.
struct Stream {
    bytes: Arc<Mutex<Vec<u8>>>,
    over: Arc<AtomicBool>,
}

impl Stream {
    /// Read `from` into the buffer on a thread of its own, up to `cap` bytes; `done` is told
    /// when it reaches the end or the cap.
    fn read(mut from: impl Read + Send + 'static, cap: usize, done: mpsc::Sender<()>) -> Stream {
        let bytes = Arc::new(Mutex::new(Vec::new()));
        let over = Arc::new(AtomicBool::new(false));
        let (b, o) = (bytes.clone(), over.clone());
        std::thread::spawn(move || {
            let mut chunk = vec![0u8; 64 << 10];
            loop {
                match from.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => {
                        let mut buf = b.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                        let room = cap.saturating_sub(buf.len());
                        buf.extend_from_slice(&chunk[..n.min(room)]);
                        if n > room {
                            o.store(true, Ordering::SeqCst);
                            break;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            let _ = done.send(());
        });
        Stream { bytes, over }
    }

    fn text(&self) -> String {
        let buf = self
            .bytes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        String::from_utf8_lossy(&buf).into_owned()
    }
}

/// Whether `pid` (kiln's child) has exited, without reaping it: while it is a zombie its pid
/// and process group cannot be reused, so ending the group after this is safe.
fn exited(pid: u32) -> bool {
    // SAFETY: siginfo_t is plain data; all zeroes is a valid value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid on kiln's own child with a buffer it fills; WNOWAIT leaves it unreaped.
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &raw mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: si_pid is set by a successful waitid that found a child (0 when none changed).
    r == 0 && unsafe { info.si_pid() } != 0
}

fn capture_capped(spec: &CommandSpec, timeout: Duration, cap: usize) -> Result<Captured> {
    let mut cmd = std::process::Command::new(spec.resolved_program());
    cmd.args(&spec.args)
        .envs(&spec.env)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let Some(dir) = &spec.cwd {
        cmd.current_dir(dir);
    }
    // Under a watchdog (`kiln up`, `kiln doctor`) the group is registered as a step's is, and
    // the watchdog ends all of it when kiln dies; a death signal would end only the leader, and
    // first: the watchdog then cannot prove the group is still the one it registered.
    let registered = super::watchdog::active();
    own_group(&mut cmd, !registered);
    let spawning = super::deferred_signals::spawning();
    let mut child = cmd.spawn().map_err(|e| spawn_error(spec, e))?;
    let pid = child.id();
    if registered {
        super::deferred_signals::signal_point();
        super::watchdog::register(pid);
    }
    drop(spawning);
    let (done, ended) = mpsc::channel();
    let streams = [
        child
            .stdout
            .take()
            .map(|s| Stream::read(s, cap, done.clone())),
        child
            .stderr
            .take()
            .map(|s| Stream::read(s, cap, done.clone())),
    ];
    drop(done);
    let deadline = Instant::now() + timeout;
    let (mut open, mut exited_at) = (streams.iter().flatten().count(), None);
    let (mut timed_out, mut cut, mut over_cap) = (false, None, false);
    loop {
        while ended.try_recv().is_ok() {
            open -= 1;
        }
        if streams
            .iter()
            .flatten()
            .any(|s| s.over.load(Ordering::SeqCst))
        {
            cut = Some(format!(
                "it wrote more than {} to a stream: it was ended there",
                crate::units::human_bytes(cap as f64)
            ));
            over_cap = true;
            break;
        }
        let now = Instant::now();
        if exited_at.is_none() && exited(pid) {
            exited_at = Some(now);
        }
        match exited_at {
            Some(_) if open == 0 => break,
            Some(at) if now - at >= EXIT_GRACE => {
                cut = Some(format!(
                    "it exited, but a process it started kept its output open {} s later: \
                     that process group was ended",
                    EXIT_GRACE.as_secs()
                ));
                break;
            }
            _ => {}
        }
        if now >= deadline {
            timed_out = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if cut.is_some() || timed_out {
        kill_group(pid);
    }
    let status = child
        .wait()
        .map_err(|e| Error::io(format!("waiting for `{}` failed", spec.program), e))?;
    if registered {
        super::watchdog::unregister(pid);
    }
    let [out, err] = streams.map(|s| s.map(|s| s.text()).unwrap_or_default());
    let mut stderr = err;
    if let Some(why) = cut.as_ref().filter(|_| over_cap) {
        stderr.push_str(&format!("\nkiln: `{}`: {why}\n", spec.program));
    }
    Ok(Captured {
        code: if over_cap { None } else { status.code() },
        stdout: out,
        stderr,
        timed_out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> CommandSpec {
        CommandSpec::new("sh", ["-c", script])
    }

    #[test]
    fn a_grandchild_holding_stdout_does_not_hold_the_capture() {
        // The child prints, starts a sleeper that inherits stdout, and exits. Waiting for the
        // pipe to close would take the sleeper's 300 s (or the 60-s deadline: `timed_out`).
        let c = capture_timeout(
            &sh("echo ready; sleep 300 & exit 0"),
            Duration::from_secs(60),
        )
        .unwrap();
        assert_eq!((c.code, c.stdout.as_str()), (Some(0), "ready\n"));
        assert!(!c.timed_out, "{c:?}");
        assert!(c.success());
    }

    #[test]
    fn output_past_the_cap_ends_the_writer_and_says_so() {
        let spec = CommandSpec::new("cat", ["/dev/zero"]);
        let c = capture_capped(&spec, Duration::from_secs(60), 1 << 20).unwrap();
        assert_eq!(c.stdout.len(), 1 << 20);
        assert!(!c.timed_out && !c.success());
        assert!(c.stderr.contains("wrote more than 1.0 MiB"), "{}", c.stderr);
    }

    #[test]
    fn a_plain_command_is_captured_whole_with_its_exit_code() {
        let c = capture_timeout(
            &sh("echo out; echo err >&2; exit 3"),
            Duration::from_secs(60),
        )
        .unwrap();
        assert_eq!(
            (c.code, c.stdout.as_str(), c.stderr.as_str()),
            (Some(3), "out\n", "err\n")
        );
        assert!(!c.timed_out);
    }
}
