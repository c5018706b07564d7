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

/// Register step process groups under `dir`, end leftovers of an earlier run there, and start
/// the watchdog for this process.
pub(crate) fn start(dir: &Path) -> Result<Watchdog> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    let stale = reap(dir);
    let registry = dir.join(std::process::id().to_string());
    let mut file = File::options()
        .create(true)
        .append(true)
        .open(&registry)
        .map_err(|e| Error::io(format!("cannot create {}", registry.display()), e))?;
    let boot = identity::boot_id().unwrap_or_default();
    file.write_all(format!("boot {boot}\n").as_bytes())
        .map_err(|e| Error::io(format!("cannot write {}", registry.display()), e))?;
    let spawned = std::env::current_exe().and_then(|exe| {
        use std::os::unix::process::CommandExt;
        std::process::Command::new(exe)
            .arg("__watchdog")
            .arg(std::process::id().to_string())
            .arg(dir)
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

/// The groups a registry leaves running, as identities of their leaders: those added and not
/// removed since (a group id the system reused is added again after its removal), with the
/// boot id of the registry's first line. A line cut short is ignored; a `+` line without a
/// start time (an older kiln) gives an identity that can never match.
fn live_groups(registry: &str) -> Vec<Identity> {
    let mut boot = String::new();
    let mut live = std::collections::BTreeMap::new();
    for line in registry.split_inclusive('\n') {
        let Some(line) = line.strip_suffix('\n') else {
            continue;
        };
        if let Some(b) = line.strip_prefix("boot ") {
            boot = b.trim().to_string();
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
    live.into_iter()
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
        .collect()
}

/// End every group the registries under `dir` leave running whose leader is still the process
/// recorded, and forget them all; returns what was not ended and why.
pub(crate) fn reap(dir: &Path) -> Vec<String> {
    let mut stale = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let registry = crate::bounded::read_state(&entry.path(), crate::bounded::STATE_CAP)
            .unwrap_or_default();
        for leader in live_groups(&registry) {
            match super::stop_recorded_group(&leader) {
                Ok(()) | Err(identity::Refusal::Gone(_)) => {}
                Err(why) => stale.push(format!(
                    "{}: process group {} left alone: {why}",
                    entry.path().display(),
                    leader.pid
                )),
            }
        }
        let _ = std::fs::remove_file(entry.path());
    }
    stale
}

/// The watchdog's body: wait until `parent` is gone, then end what it left running.
pub(crate) fn watch(parent: u32, dir: &Path) -> ! {
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
    reap(dir);
    std::process::exit(0)
}

#[cfg(test)]
mod tests {
    use super::live_groups;

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
}
