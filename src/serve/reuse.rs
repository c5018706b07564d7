//! A port that is already taken when a profile starts: a server an earlier kiln run left running
//! (`kiln up` leaves its profile serving; run twice, the second run's first launch meets it) is
//! found by this recipe's record, its process identity checked, and restarted cleanly; anything
//! else on the port stays an error that names the process holding it.
//!
//! Why restart, never reuse: a re-run re-proves, and the proof reads the server's start-up log
//! (which gates opened or fell back), the greedy A/B needs the port for its baseline, and a server
//! whose command line differs from the profile's now would prove the wrong thing.

use std::time::Duration;

use super::{read_record, record_path, Launch, Record};
use crate::error::{Error, Result};
use crate::process;

/// Make `port` free for `l`, or say who holds it. A server this recipe's record names and whose
/// identity checks out is stopped (saying which and why); any other holder is an error.
pub(super) fn clear_port(
    l: &Launch,
    port: u16,
    cmd: &[String],
    say: &mut dyn FnMut(&str),
) -> Result<()> {
    if !port_taken(port) {
        return Ok(());
    }
    let record = read_record(l.paths, l.recipe)
        .filter(|r| r.url.as_deref().is_some_and(|u| on_port(u, port)));
    let identity = record.as_ref().map(|r| (r, identity(r)));
    let Some((record, Ok(how))) = identity else {
        let not_ours = identity.map(|(r, why)| {
            format!(
                "; this recipe's record names profile `{}` (pid {}) there, which does not check out: {}",
                r.profile,
                r.pid,
                why.err().unwrap_or_default()
            )
        });
        return Err(port_in_use(l, port, not_ours.as_deref()));
    };
    let then = if record.profile != l.profile_name {
        format!("then starting profile `{}` there", l.profile_name)
    } else if record.cmd_sha256 == super::command_digest(cmd) {
        "then starting it again: its command line is unchanged, but a re-run proves from a fresh start-up log".to_string()
    } else {
        "then starting it again: its command line differs from the profile's now".to_string()
    };
    say(&format!(
        "port {port} is held by profile `{}` of {}, which an earlier kiln run left running (pid {}; {how}): stopping it cleanly, {then}",
        record.profile, l.recipe, record.pid
    ));
    process::kill_group(record.pid);
    let _ = std::fs::remove_file(record_path(l.paths, l.recipe));
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while port_taken(port) && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    if port_taken(port) {
        return Err(port_in_use(
            l,
            port,
            Some(" after the earlier server was stopped"),
        ));
    }
    Ok(())
}

/// Whether something accepts connections on 127.0.0.1:`port`.
fn port_taken(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(300))
        .is_ok()
}

fn on_port(url: &str, port: u16) -> bool {
    url.trim_end_matches('/').ends_with(&format!(":{port}"))
}

/// Whether the live process `r.pid` is the one kiln started for the record, and how that was
/// checked: its boot and start ticks are the recorded ones (never the wall clock, which NTP or a
/// VM may step: `started_unix` is for people), it leads its own process group (kiln starts every
/// server so), and its command line is the one kiln launched. One function, so that a
/// stronger process-identity record can replace these checks in one place.
fn identity(r: &Record) -> std::result::Result<String, String> {
    // The recorded identity (start time, boot) first: a reused pid is never taken for kiln's.
    match &r.identity {
        Some(id) => id.verify().map_err(|e| e.to_string())?,
        None => return Err("the record has no process identity (written by an older kiln)".into()),
    }
    let stat = ProcStat::read(r.pid).ok_or("its /proc entry cannot be read")?;
    if stat.pgrp != r.pid {
        return Err(format!(
            "it is not a process group leader (group {})",
            stat.pgrp
        ));
    }
    if r.cmd.is_empty() {
        return Err("the record has no command line (written by an older kiln)".into());
    }
    let argv = proc_cmdline(r.pid).ok_or("its command line cannot be read")?;
    if !runs(&argv, r.cmd.len(), &r.cmd_sha256) {
        return Err(format!("it runs `{}`", argv.join(" ")));
    }
    Ok("identity checked: its recorded start time and boot, its own process group, the recorded command line".into())
}

/// Whether the process argv `argv` is the launch recorded as `words` words with the digest
/// `digest`: its last `words` words (after the interpreter the kernel put before a script) are
/// that command line, the program by its file name (the record keeps the words redacted).
fn runs(argv: &[String], words: usize, digest: &str) -> bool {
    let Some(at) = argv.len().checked_sub(words) else {
        return false;
    };
    words > 0 && super::command_digest(&argv[at..]) == digest
}

fn proc_cmdline(pid: u32) -> Option<Vec<String>> {
    let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        bytes
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
    )
}

/// The fields of `/proc/PID/stat` identity needs.
struct ProcStat {
    pgrp: u32,
}

impl ProcStat {
    fn read(pid: u32) -> Option<ProcStat> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // After "pid (comm) ": state ppid pgrp ...
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        Some(ProcStat {
            pgrp: fields.get(2)?.parse().ok()?,
        })
    }
}

/// The error for a port that something holds: which process, when it can be found; `detail`
/// says why a recorded server there is not taken for kiln's (none: kiln has no record of it).
fn port_in_use(l: &Launch, port: u16, detail: Option<&str>) -> Error {
    let started = if detail.is_some() {
        ""
    } else {
        ", which kiln did not start"
    };
    let holder = listener(port);
    let (by, stop) = match &holder {
        Some((pid, argv)) => (
            format!(" by pid {pid} (`{}`){started}", argv.join(" ")),
            format!("stop it (`kill {pid}`) if it is yours"),
        ),
        None => (
            format!(" by a process not visible to this user{started}"),
            "stop what listens there (`ss -ltnp`)".to_string(),
        ),
    };
    let detail = detail.unwrap_or_default();
    Error::other(
        format!(
            "cannot start profile `{}`: port {port} is already in use{by}{detail}",
            l.profile_name
        ),
        Some(format!(
            "{stop}, or pick another port (`--set port={}` where the recipe has a `port` variable, else the profile's `port`)",
            port.saturating_add(1)
        )),
    )
}

/// The process listening on TCP `port` (IPv4 or IPv6), from /proc: the socket's inode in
/// /proc/net/tcp*, then the process holding a descriptor to it.
pub(crate) fn listener(port: u16) -> Option<(u32, Vec<String>)> {
    let want = format!(":{port:04X}");
    let inodes: Vec<String> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|t| {
            t.lines()
                .skip(1)
                .filter_map(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    // local_address rem_address st ... inode (field 9); st 0A = LISTEN
                    (f.len() > 9 && f[1].ends_with(&want) && f[3] == "0A").then(|| f[9].to_string())
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let sockets: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    for pid in crate::process::identity::pids()? {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|t| sockets.iter().any(|s| t.as_os_str() == s.as_str()))
        });
        if holds {
            return Some((pid, proc_cmdline(pid).unwrap_or_default()));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| (*a).to_string()).collect()
    }

    #[test]
    fn a_launch_is_recognised_by_its_arguments_after_the_program() {
        let cmd = v(&["llama-server", "--port", "30080", "--api-key", "sk-secret"]);
        let digest = crate::serve::command_digest(&cmd);
        let runs = |argv: &[&str]| runs(&v(argv), cmd.len(), &digest);
        assert!(runs(&[
            "/opt/x/bin/llama-server",
            "--port",
            "30080",
            "--api-key",
            "sk-secret"
        ]));
        // A script: the kernel puts its interpreter first.
        assert!(runs(&[
            "/bin/sh",
            "/opt/x/bin/llama-server",
            "--port",
            "30080",
            "--api-key",
            "sk-secret"
        ]));
        assert!(!runs(&[
            "llama-server",
            "--port",
            "30081",
            "--api-key",
            "sk-secret"
        ]));
        assert!(!runs(&[
            "llama-server",
            "--port",
            "30080",
            "--api-key",
            "sk-other"
        ]));
        assert!(!runs(&[
            "python3",
            "-m",
            "http.server",
            "--port",
            "30080",
            "--api-key",
            "sk-secret"
        ]));
        assert!(!runs(&["--port", "30080"]));
    }

    #[test]
    fn a_listener_is_found_by_port() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let (pid, argv) = listener(port).expect("this process listens there");
        assert_eq!(pid, std::process::id());
        assert!(!argv.is_empty());
    }

    /// A record of `child` as kiln writes it, with `started_unix` as given (a wall-clock time
    /// that a clock step may have moved) and the identity's start ticks moved by `skew`.
    fn record_of(
        child: &std::process::Child,
        cmd: &[String],
        started_unix: u64,
        skew: u64,
    ) -> Record {
        let mut identity = crate::process::Identity::of(child.id()).expect("child identity");
        identity.start_ticks += skew;
        serde_json::from_value(serde_json::json!({
            "recipe": "r", "profile": "p", "pid": child.id(), "url": null, "api": "openai",
            "log": "/nonexistent", "started_unix": started_unix, "identity": identity,
            "cmd": cmd, "cmd_sha256": crate::serve::command_digest(cmd),
        }))
        .unwrap()
    }

    #[test]
    fn a_server_is_known_by_its_boot_and_start_ticks_not_by_the_wall_clock() {
        use std::os::unix::process::CommandExt;
        let cmd = v(&["sleep", "300"]);
        let mut child = std::process::Command::new(&cmd[0])
            .args(&cmd[1..])
            .process_group(0)
            .spawn()
            .unwrap();
        // Right after the spawn returns, the new program may not have its arguments yet.
        let execed = (0..500).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            proc_cmdline(child.id()).as_ref() == Some(&cmd)
        });
        assert!(execed, "sleep did not start");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        // The clock stepped 6 s, and an hour, since the record was written: still this server.
        for off in [6, 3600] {
            for started in [now - off, now + off] {
                let got = identity(&record_of(&child, &cmd, started, 0));
                assert!(got.is_ok(), "clock step of {off} s: {got:?}");
            }
        }
        // Another start time in the same boot is another process, whatever the wall clock says.
        let got = identity(&record_of(&child, &cmd, now, 1));
        assert!(
            got.as_ref()
                .is_err_and(|e| e.contains("now belongs to another process")),
            "{got:?}"
        );
        let _ = child.kill();
        let _ = child.wait();
    }
}
