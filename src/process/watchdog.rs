//! Steps' process groups die with kiln, even when kiln is SIGKILLed: PDEATHSIG reaches only a
//! step's direct child, so a small watchdog (kiln itself, `kiln __watchdog`) outlives kiln by a
//! moment and ends every process group still registered in the state directory.
//!
//! Registration is one file per kiln run (`<state>/running/<kiln pid>`), a line appended when a
//! step's group starts (`+PGID`) and when it ends (`-PGID`), so the next run can also end groups
//! a previous run left behind (if the watchdog itself was killed). Appending to one file, rather
//! than a file per group, creates no inode per step: on a file system without a journal,
//! allocating inodes next to many recently deleted ones was most of a 10,000-step run's time.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use super::kill_group;
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
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
    reap(dir);
    let registry = dir.join(std::process::id().to_string());
    let file = File::options()
        .create(true)
        .append(true)
        .open(&registry)
        .map_err(|e| Error::io(format!("cannot create {}", registry.display()), e))?;
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
    let child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let _ = std::fs::remove_file(&registry);
            return Err(Error::io("cannot start kiln's process watchdog", e));
        }
    };
    *current() = Some(file);
    Ok(Watchdog { child, registry })
}

/// Append `+PGID` or `-PGID` to this run's registry (one write: appends do not interleave).
fn record(sign: char, pgid: u32) {
    if let Some(file) = current().as_mut() {
        let _ = file.write_all(format!("{sign}{pgid}\n").as_bytes());
    }
}

/// Record a step's process group while it runs.
pub(super) fn register(pgid: u32) {
    record('+', pgid);
}

pub(super) fn unregister(pgid: u32) {
    record('-', pgid);
}

/// The groups a registry leaves running: those added and not removed since (a group id the
/// system reused is added again after its removal). A line cut short is ignored.
fn live_groups(registry: &str) -> std::collections::BTreeSet<u32> {
    let mut live = std::collections::BTreeSet::new();
    for line in registry.split_inclusive('\n') {
        let Some(line) = line.strip_suffix('\n') else {
            continue;
        };
        let (sign, pgid) = line.split_at(line.len().min(1));
        match (sign, pgid.parse::<u32>()) {
            ("+", Ok(g)) => {
                live.insert(g);
            }
            ("-", Ok(g)) => {
                live.remove(&g);
            }
            _ => {}
        }
    }
    live
}

/// End every group the registries under `dir` leave running and forget them.
pub(crate) fn reap(dir: &Path) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let registry = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for pgid in live_groups(&registry) {
            if pgid > 1 {
                kill_group(pgid);
            }
        }
        let _ = std::fs::remove_file(entry.path());
    }
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
        let live = live_groups("+10\n+11\n-10\n+12\n-12\n+12\n+13");
        assert_eq!(live.into_iter().collect::<Vec<_>>(), [11, 12]);
        assert!(live_groups("").is_empty());
        assert!(live_groups("garbage\n+\n-x\n").is_empty());
    }
}
