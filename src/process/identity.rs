//! Which process a recorded pid meant: its start time (`/proc/PID/stat` field 22, clock ticks
//! since boot), the boot it ran in (`/proc/sys/kernel/random/boot_id`) and its executable. A
//! pid read back from the state directory is signalled only while the process holding it is
//! still that one; pids 0 and 1 and kiln's own process group never are.
//!
//! The start time is what decides: the kernel never gives one pid to two processes started in
//! the same tick of one boot, and an `exec` keeps it (a `sh -c 'exec server'` wrapper is still the
//! process kiln started). The executable is recorded with them, and must still be readable: a
//! process whose `/proc/PID/exe` kiln cannot read (another user's) is not signalled.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// What identifies one process across time: enough to tell it from a later holder of its pid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Identity {
    pub(crate) pid: u32,
    /// `/proc/PID/stat` field 22: clock ticks after boot when it started.
    pub(crate) start_ticks: u64,
    pub(crate) boot_id: String,
    pub(crate) exe: PathBuf,
}

/// Why a recorded process is not signalled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// pid 0 or 1: `kill(-pid)` would mean kiln's own group or every process.
    Reserved(u32),
    /// The group kiln itself runs in.
    OwnGroup(u32),
    /// No process holds the pid any more.
    Gone(u32),
    /// Recorded in an earlier boot.
    OtherBoot(u32),
    /// The pid now belongs to a process started at another time.
    Reused { pid: u32, recorded: u64, now: u64 },
    /// The record says nothing that identifies the process (an older kiln wrote it).
    Unidentified(u32),
    /// Its executable cannot be read (another user's process).
    Unreadable(u32),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Reserved(p) => write!(
                f,
                "pid {p} is never signalled (as a process group it means {})",
                if *p == 0 {
                    "kiln's own group"
                } else {
                    "every process"
                }
            ),
            Refusal::OwnGroup(p) => write!(f, "process group {p} is kiln's own"),
            Refusal::Gone(p) => write!(f, "no process {p} is running"),
            Refusal::OtherBoot(p) => {
                write!(f, "pid {p} was recorded before the machine restarted")
            }
            Refusal::Reused { pid, recorded, now } => write!(
                f,
                "pid {pid} now belongs to another process (started at tick {now}, not {recorded})"
            ),
            Refusal::Unidentified(p) => write!(
                f,
                "the record of pid {p} has no start time to tell the process from a later one"
            ),
            Refusal::Unreadable(p) => write!(
                f,
                "the executable of pid {p} cannot be read (not kiln's user's process)"
            ),
        }
    }
}

/// This boot's id, if the kernel says it.
pub(crate) fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The pids `/proc` lists now; `None` where it cannot be read.
pub(crate) fn pids() -> Option<impl Iterator<Item = u32>> {
    let dir = std::fs::read_dir("/proc").ok()?;
    Some(
        dir.flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok()),
    )
}

/// Whether process group `pgid` has a member that still runs: one that is not a zombie (an
/// exited child kiln has not reaped yet is still a member, and `killpg(pgid, 0)` still finds
/// it). `None` where `/proc` cannot be read.
pub(crate) fn group_running(pgid: u32) -> Option<bool> {
    for pid in pids()? {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue; // it exited while we looked
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        // rest starts at field 3 (state); field 5 is the process group.
        let mut f = rest.split_whitespace();
        let (state, group) = (f.next(), f.nth(1).and_then(|g| g.parse::<u32>().ok()));
        if group == Some(pgid) && state != Some("Z") && state != Some("X") {
            return Some(true);
        }
    }
    Some(false)
}

/// `/proc/PID/stat` field 22 (the start time); fields are counted after the `(comm)`, which
/// may itself hold spaces and parentheses.
pub(crate) fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    // rest starts at field 3 (state).
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// Whether the process recorded as `pid`, started at `start_ticks` in boot `boot`, still runs:
/// the same process (same boot, same start time) and not a zombie (an exited process its parent
/// has not waited for has ended). Where the kernel gives no boot id (now or in the record), the
/// start time alone decides: an unknown is taken as still running.
pub(crate) fn still_running(pid: u32, start_ticks: u64, boot: &str) -> bool {
    let now = boot_id().unwrap_or_default();
    if !boot.is_empty() && !now.is_empty() && boot != now {
        return false;
    }
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    let mut fields = rest.split_whitespace();
    let state = fields.next();
    let started = fields.nth(22 - 4).and_then(|t| t.parse::<u64>().ok());
    !matches!(state, Some("Z" | "X")) && started == Some(start_ticks)
}

fn exe(pid: u32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

/// kiln's own process group.
fn own_group() -> u32 {
    // SAFETY: getpgrp has no preconditions and cannot fail.
    u32::try_from(unsafe { libc::getpgrp() }).unwrap_or(0)
}

impl Identity {
    /// The identity of the live process `pid`, read now (`None` if it is gone or unreadable).
    pub(crate) fn of(pid: u32) -> Option<Identity> {
        Some(Identity {
            pid,
            start_ticks: start_ticks(pid)?,
            boot_id: boot_id()?,
            exe: exe(pid)?,
        })
    }

    /// Whether the process holding `self.pid` now is the one recorded, and may be signalled
    /// as the leader of its group.
    pub(crate) fn verify(&self) -> Result<(), Refusal> {
        let pid = self.pid;
        if pid <= 1 {
            return Err(Refusal::Reserved(pid));
        }
        if pid == own_group() {
            return Err(Refusal::OwnGroup(pid));
        }
        if self.boot_id.is_empty() {
            return Err(Refusal::Unidentified(pid));
        }
        if boot_id().as_deref() != Some(self.boot_id.as_str()) {
            return Err(Refusal::OtherBoot(pid));
        }
        let now = start_ticks(pid).ok_or(Refusal::Gone(pid))?;
        if now != self.start_ticks {
            return Err(Refusal::Reused {
                pid,
                recorded: self.start_ticks,
                now,
            });
        }
        exe(pid).ok_or(Refusal::Unreadable(pid))?;
        Ok(())
    }
}

/// A pid read from a record that has no identity (written by an older kiln): nothing proves
/// it is still the process kiln started, so it is always refused, with the reason.
pub(crate) fn verify_bare(pid: u32) -> Result<(), Refusal> {
    if pid <= 1 {
        return Err(Refusal::Reserved(pid));
    }
    if pid == own_group() {
        return Err(Refusal::OwnGroup(pid));
    }
    Err(Refusal::Unidentified(pid))
}

/// Whether kiln may signal process group `pgid` at all (a last guard in front of `killpg`):
/// never 0 or 1, never kiln's own group.
pub(crate) fn signallable_group(pgid: u32) -> bool {
    pgid > 1 && pgid != own_group() && libc::pid_t::try_from(pgid).is_ok()
}

#[cfg(test)]
#[path = "identity_pins.rs"]
mod pins;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_itself_and_a_changed_start_time_or_boot_is_not() {
        // A child, not this process: a harness that runs each test in its own process group
        // (cargo-nextest) makes this process its group's leader, which `verify` refuses first.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let me = Identity::of(child.id()).expect("the child's identity");
        assert!(me.start_ticks > 0 && !me.boot_id.is_empty());
        assert_ne!(
            me.pid,
            own_group(),
            "a child is in its parent's group, not its leader"
        );
        assert_eq!(me.verify(), Ok(()));
        let older = Identity {
            start_ticks: me.start_ticks - 1,
            ..me.clone()
        };
        assert_eq!(
            older.verify(),
            Err(Refusal::Reused {
                pid: me.pid,
                recorded: me.start_ticks - 1,
                now: me.start_ticks
            })
        );
        let rebooted = Identity {
            boot_id: "00000000-0000-0000-0000-000000000000".into(),
            ..me.clone()
        };
        assert_eq!(rebooted.verify(), Err(Refusal::OtherBoot(me.pid)));
        for pid in [0, 1] {
            let hostile = Identity { pid, ..me.clone() };
            assert_eq!(hostile.verify(), Err(Refusal::Reserved(pid)));
        }
        let group = Identity {
            pid: own_group(),
            ..me.clone()
        };
        assert_eq!(group.verify(), Err(Refusal::OwnGroup(own_group())));
        assert!(!signallable_group(0) && !signallable_group(1));
        assert!(!signallable_group(own_group()));
        assert!(!signallable_group(u32::MAX));
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(me.verify(), Err(Refusal::Gone(me.pid)));
    }

    #[test]
    fn an_exited_unreaped_group_is_not_running_though_killpg_still_finds_it() {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read line"])
            .stdin(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = child.id();
        assert_eq!(group_running(pgid), Some(true), "sh waits on its stdin");
        drop(child.stdin.take()); // EOF: sh exits and stays a zombie until waited for
        let zombie = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            group_running(pgid) == Some(false)
        });
        // SAFETY: signal 0 only probes; the group is this test's child.
        let probed = unsafe { libc::killpg(pgid as libc::pid_t, 0) };
        assert!(zombie, "the exited group still reads as running");
        assert_eq!(probed, 0, "killpg still finds the unreaped zombie");
        child.wait().unwrap();
    }

    /// Clock ticks since boot now, read from the kernel's boot-time clock (what a process's
    /// start time is counted on): a source independent of `/proc/PID/stat`.
    fn boot_ticks_now() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes the timespec it is given.
        assert_eq!(
            unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &raw mut ts) },
            0
        );
        // SAFETY: sysconf only reads a constant of the running system.
        let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap();
        let ns =
            u64::try_from(ts.tv_sec).unwrap() * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap();
        ns / (1_000_000_000 / hz)
    }

    #[test]
    fn a_comm_with_spaces_and_parentheses_does_not_shift_the_fields() {
        // The kernel names a process (`comm`) after the file it executes.
        let dir = tempfile::tempdir().unwrap();
        let odd = dir.path().join("a) b (c");
        std::os::unix::fs::symlink(which::which("sleep").unwrap(), &odd).unwrap();
        // The child's start, observed on the boot-time clock around its spawn.
        let before = boot_ticks_now();
        let mut child = std::process::Command::new(&odd).arg("5").spawn().unwrap();
        let after = boot_ticks_now();
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap();
        assert!(stat.contains("(a) b (c)"), "{stat}");
        let id = Identity::of(child.id()).expect("child identity");
        assert!(
            (before..=after).contains(&id.start_ticks),
            "read {}, observed between {before} and {after}",
            id.start_ticks
        );
        assert_eq!(start_ticks(child.id()), Some(id.start_ticks));
        assert!(still_running(child.id(), id.start_ticks, &id.boot_id));
        assert!(!still_running(child.id(), id.start_ticks + 1, &id.boot_id));
        let _ = child.kill();
        let _ = child.wait();
        assert!(!still_running(child.id(), id.start_ticks, &id.boot_id));
    }
}
