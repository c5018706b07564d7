//! Steps' process groups die with kiln, even when kiln is SIGKILLed: PDEATHSIG reaches only a
//! step's direct child, so a small watchdog (kiln itself, `kiln __watchdog`) outlives kiln by a
//! moment and ends every process group still registered in the state directory.
//!
//! Registration is one file per kiln run (`<state>/running/<kiln pid>`), a line appended when a
//! step's group starts (`+PGID`) and when it ends (`-PGID`), so the next run can also end groups
//! a previous run left behind (if the watchdog itself was killed). Appending to one file, rather
//! than a file per group, creates no inode per step: on a file system without a journal,
//! allocating inodes next to many recently deleted ones was most of a 10,000-step run's time.
//!
//! A registry is read back after kiln died, possibly after a reboot or long after its groups
//! ended and their ids went to unrelated processes: its first line is the boot id, each `+`
//! line carries the group leader's start time, and a group is ended only while its leader is
//! still that process (see [`super::identity`]). Anything else is left alone and reported.
//!
//! A registry is another run's until its writer is gone: its second line (`kiln PID TICKS`)
//! names the kiln that wrote it, and a registry is swept only when that process no longer runs
//! (another start time, another boot, a zombie, no process). Only a run that is about to start
//! steps sweeps the leftovers of others ([`Leftovers::End`]); `kiln doctor` never does. A dead
//! run's watchdog ends only its own run's registry, and only while it is still its run's: a late
//! watchdog never touches the registry of the run that replaced it.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use super::identity::{self, Identity};
use crate::error::{Error, Result};

/// This run's registry, while its watchdog runs.
static REGISTRY: Mutex<Option<File>> = Mutex::new(None);

fn current() -> std::sync::MutexGuard<'static, Option<File>> {
    REGISTRY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether a watchdog runs: step groups registered now are ended if kiln dies.
pub(super) fn active() -> bool {
    current().is_some()
}

/// The running watchdog; dropping it (a normal end of kiln) ends it too.
pub(crate) struct Watchdog {
    child: std::process::Child,
    registry: PathBuf,
    /// Terminating signals held off while a step spawns (see [`super::deferred_signals`]).
    deferred: Vec<libc::c_int>,
    /// Groups earlier runs left registered that were not ended, and why (stale records).
    pub stale: Vec<String>,
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        super::deferred_signals::restore(&self.deferred);
        // Every step has ended by now: nothing is left to reap.
        *current() = None;
        let _ = std::fs::remove_file(&self.registry);
    }
}

/// What [`start`] does with the registries of runs that are gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leftovers {
    /// End their groups and remove them: a run about to start steps (`kiln up`).
    End,
    /// Leave every other registry alone: a command that runs no steps (`kiln doctor`).
    LeaveAlone,
}

/// Register step process groups under `dir`, end (with [`Leftovers::End`]) what runs that are
/// gone left there, and start the watchdog for this process.
pub(crate) fn start(dir: &Path, leftovers: Leftovers) -> Result<Watchdog> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    let stale = match leftovers {
        Leftovers::End => reap(dir),
        Leftovers::LeaveAlone => Vec::new(),
    };
    let me = std::process::id();
    let ticks = identity::start_ticks(me).unwrap_or(0);
    // Named by pid and start time: no other process of this boot ever takes the name. One left
    // by another boot can signal nothing (its groups are refused as another boot's): removed.
    let registry = dir.join(format!("{me}-{ticks}"));
    if registry.exists() {
        reap_registry(&registry);
    }
    let mut file = File::options()
        .create(true)
        .append(true)
        .open(&registry)
        .map_err(|e| Error::io(format!("cannot create {}", registry.display()), e))?;
    let boot = identity::boot_id().unwrap_or_default();
    // One write: a reader never sees the boot line without the writer's.
    file.write_all(format!("boot {boot}\nkiln {me} {ticks}\n").as_bytes())
        .map_err(|e| Error::io(format!("cannot write {}", registry.display()), e))?;
    let spawned = std::env::current_exe().and_then(|exe| {
        use std::os::unix::process::CommandExt;
        std::process::Command::new(exe)
            .arg("__watchdog")
            .arg(me.to_string())
            .arg(&registry)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            // Not in kiln's process group: Ctrl-C at the terminal ends kiln, not its watchdog.
            .process_group(0)
            .spawn()
    });
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let _ = std::fs::remove_file(&registry);
            return Err(Error::io("cannot start kiln's process watchdog", e));
        }
    };
    let deferred = match super::deferred_signals::defer() {
        Ok(deferred) => deferred,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_file(&registry);
            return Err(Error::io("cannot set up kiln's signal handling", e));
        }
    };
    *current() = Some(file);
    Ok(Watchdog {
        child,
        registry,
        deferred,
        stale,
    })
}

/// Append a line to this run's registry (one write: appends do not interleave).
fn record(line: &str) {
    if let Some(file) = current().as_mut() {
        let _ = file.write_all(line.as_bytes());
    }
}

/// Record a step's process group while it runs: `+PGID START_TICKS`, the leader's start time
/// read now (the leader is kiln's unreaped child: its pid cannot have been reused yet).
pub(super) fn register(pgid: u32) {
    if let Some(start) = identity::start_ticks(pgid) {
        record(&format!("+{pgid} {start}\n"));
    }
}

pub(super) fn unregister(pgid: u32) {
    record(&format!("-{pgid}\n"));
}

/// What a registry says: the boot it was written in, the kiln that wrote it (`kiln PID TICKS`;
/// absent in an older kiln's), and the groups it leaves running, as identities of their
/// leaders: those added and not removed since (a group id the system reused is added again
/// after its removal). A line cut short is ignored; a `+` line without a start time (an older
/// kiln) gives an identity that can never match.
#[derive(Debug, Default)]
struct Registry {
    boot: String,
    writer: Option<(u32, u64)>,
    live: Vec<Identity>,
}

fn parse(registry: &str) -> Registry {
    let mut boot = String::new();
    let mut writer = None;
    let mut live = std::collections::BTreeMap::new();
    for line in registry.split_inclusive('\n') {
        let Some(line) = line.strip_suffix('\n') else {
            continue;
        };
        if let Some(b) = line.strip_prefix("boot ") {
            boot = b.trim().to_string();
            continue;
        }
        if let Some(w) = line.strip_prefix("kiln ") {
            let mut f = w.split(' ').map(str::parse::<u64>);
            if let (Some(Ok(pid)), Some(Ok(ticks))) = (f.next(), f.next()) {
                writer = u32::try_from(pid).ok().map(|pid| (pid, ticks));
            }
            continue;
        }
        let (sign, rest) = line.split_at(line.len().min(1));
        let mut fields = rest.split(' ');
        let Some(Ok(pgid)) = fields.next().map(str::parse::<u32>) else {
            continue;
        };
        match sign {
            "+" => {
                let start = fields.next().and_then(|t| t.parse::<u64>().ok());
                live.insert(pgid, start);
            }
            "-" => {
                live.remove(&pgid);
            }
            _ => {}
        }
    }
    let live = live
        .into_iter()
        .map(|(pid, start)| Identity {
            pid,
            start_ticks: start.unwrap_or(0),
            boot_id: if start.is_some() {
                boot.clone()
            } else {
                String::new()
            },
            exe: PathBuf::new(),
        })
        .collect();
    Registry { boot, writer, live }
}

/// Whether the kiln that wrote `registry` is gone, so that its groups are leftovers: its
/// recorded process no longer runs. An older kiln's registry names its writer only by the file
/// name (`<pid>`): gone when no live process holds that pid or it is this very process (which
/// did not write it). A registry that cannot be read is left alone.
fn writer_gone(path: &Path, registry: &Registry) -> bool {
    if let Some((pid, ticks)) = registry.writer {
        return !identity::still_running(pid, ticks, &registry.boot);
    }
    let named = path
        .file_name()
        .and_then(|n| n.to_str()?.parse::<u32>().ok());
    named.is_none_or(|pid| pid == std::process::id() || !super::pid_alive(pid))
}

fn read_registry(path: &Path) -> Option<Registry> {
    let text = crate::bounded::read_state(path, crate::bounded::STATE_CAP).ok()?;
    Some(parse(&text))
}

fn registry_writer_gone(path: &Path) -> bool {
    read_registry(path).is_some_and(|r| writer_gone(path, &r))
}

/// End the groups of the registry at `path` whose leader is still the process recorded, and
/// remove it; returns what was not ended and why. The caller has checked its writer is gone.
fn reap_registry(path: &Path) -> Vec<String> {
    let mut stale = Vec::new();
    let Some(registry) = read_registry(path) else {
        return stale;
    };
    for leader in registry.live {
        match super::stop_recorded_group(&leader) {
            Ok(()) | Err(identity::Refusal::Gone(_)) => {}
            Err(why) => stale.push(format!(
                "{}: process group {} left alone: {why}",
                path.display(),
                leader.pid
            )),
        }
    }
    let _ = std::fs::remove_file(path);
    stale
}

/// End every group the registries under `dir` of runs that are gone leave running whose leader
/// is still the process recorded, and forget those registries; returns what was not ended and
/// why. The registry of a run that still runs is never read past its header.
pub(crate) fn reap(dir: &Path) -> Vec<String> {
    let mut stale = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if registry_writer_gone(&path) {
            stale.extend(reap_registry(&path));
        }
    }
    stale
}

/// The watchdog's body: wait until `parent` is gone, then end what it left running: the groups
/// of `registry` (its run's own, never another's), and only while that registry is still the
/// one `parent` wrote and `parent` is gone.
pub(crate) fn watch(parent: u32, registry: &Path) -> ! {
    // A terminal's Ctrl-C or hang-up is for kiln; this outlives it to end what it left.
    // SAFETY: setting a signal's disposition to "ignore" has no preconditions.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
    // SAFETY: getppid has no preconditions.
    while unsafe { libc::getppid() } as u32 == parent {
        std::thread::sleep(Duration::from_millis(100));
    }
    let own = read_registry(registry).is_some_and(|r| {
        r.writer.is_some_and(|(pid, _)| pid == parent) && writer_gone(registry, &r)
    });
    if own {
        reap_registry(registry);
    }
    std::process::exit(0)
}

#[cfg(test)]
mod tests {
    use super::parse;

    fn live_groups(registry: &str) -> Vec<super::Identity> {
        parse(registry).live
    }

    #[test]
    fn a_registry_leaves_running_what_was_added_and_not_removed() {
        let live = live_groups("boot b-1\n+10 5\n+11 6\n-10\n+12 7\n-12\n+12 8\n+13 9");
        let got: Vec<(u32, u64, &str)> = live
            .iter()
            .map(|i| (i.pid, i.start_ticks, i.boot_id.as_str()))
            .collect();
        assert_eq!(got, [(11, 6, "b-1"), (12, 8, "b-1")]);
        assert!(live_groups("").is_empty());
        assert!(live_groups("garbage\n+\n-x\n").is_empty());
        // An older kiln's line has no start time: an identity no process matches.
        let old = live_groups("+10\n");
        assert_eq!((old[0].pid, old[0].boot_id.as_str()), (10, ""));
    }

    #[test]
    fn a_registry_is_a_leftover_only_once_its_writer_is_gone() {
        use super::{identity, writer_gone};
        use std::path::Path;
        let me = std::process::id();
        let ticks = identity::start_ticks(me).unwrap();
        let boot = identity::boot_id().unwrap();
        let at = Path::new("/nonexistent/running/x");
        let header = |pid: u32, t: u64, b: &str| parse(&format!("boot {b}\nkiln {pid} {t}\n"));
        assert_eq!(header(me, ticks, &boot).writer, Some((me, ticks)));
        assert!(!writer_gone(at, &header(me, ticks, &boot)), "a live writer");
        assert!(writer_gone(at, &header(me, ticks + 1, &boot)), "pid reused");
        let other_boot = "00000000-0000-0000-0000-000000000000";
        assert!(writer_gone(at, &header(me, ticks, other_boot)), "rebooted");
        // A writer that exited and is not waited for yet (a zombie) is gone.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let child_ticks = identity::start_ticks(pid).unwrap();
        let exited = (0..500).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            !super::super::pid_alive(pid)
        });
        assert!(exited, "`true` did not exit");
        assert!(
            writer_gone(at, &header(pid, child_ticks, &boot)),
            "a zombie"
        );
        child.wait().unwrap();
        // An older kiln's registry: its name is its writer's pid.
        let old = parse("boot b\n+10 5\n");
        assert_eq!(old.writer, None);
        let named = |pid: u32| std::path::PathBuf::from(format!("/x/running/{pid}"));
        assert!(
            writer_gone(&named(me), &old),
            "this very process wrote nothing yet"
        );
        let mut live = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        assert!(!writer_gone(&named(live.id()), &old), "a live older kiln");
        let _ = live.kill();
        let _ = live.wait();
    }
}
