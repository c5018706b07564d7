//! Steps' process groups die with kiln, even when kiln is SIGKILLed: PDEATHSIG reaches only a
//! step's direct child, so a small watchdog (kiln itself, `kiln __watchdog`) outlives kiln by a
//! moment and ends every process group still registered in the state directory.
//!
//! Registration is a file per running group (`<state>/running/<pgid>`), so the next run can also
//! end groups a previous run left behind (if the watchdog itself was killed).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use super::kill_group;
use crate::error::{Error, Result};

static REGISTRY: OnceLock<PathBuf> = OnceLock::new();

/// The running watchdog; dropping it (a normal end of kiln) ends it too.
pub(crate) struct Watchdog {
    child: std::process::Child,
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Register step process groups under `dir`, end leftovers of an earlier run there, and start
/// the watchdog for this process.
pub(crate) fn start(dir: &Path) -> Result<Watchdog> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    reap(dir);
    let _ = REGISTRY.set(dir.to_path_buf());
    let exe =
        std::env::current_exe().map_err(|e| Error::io("cannot find the kiln executable", e))?;
    let child = std::process::Command::new(exe)
        .arg("__watchdog")
        .arg(std::process::id().to_string())
        .arg(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| Error::io("cannot start kiln's process watchdog", e))?;
    Ok(Watchdog { child })
}

/// Record a step's process group while it runs.
pub(super) fn register(pgid: u32) {
    if let Some(dir) = REGISTRY.get() {
        let _ = std::fs::write(dir.join(pgid.to_string()), b"");
    }
}

pub(super) fn unregister(pgid: u32) {
    if let Some(dir) = REGISTRY.get() {
        let _ = std::fs::remove_file(dir.join(pgid.to_string()));
    }
}

/// End every registered group under `dir` and forget it.
pub(crate) fn reap(dir: &Path) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if let Ok(pgid) = entry.file_name().to_string_lossy().parse::<u32>() {
            if pgid > 1 {
                kill_group(pgid);
            }
        }
        let _ = std::fs::remove_file(entry.path());
    }
}

/// The watchdog's body: wait until `parent` is gone, then end what it left running.
pub(crate) fn watch(parent: u32, dir: &Path) -> ! {
    // SAFETY: getppid has no preconditions.
    while unsafe { libc::getppid() } as u32 == parent {
        std::thread::sleep(Duration::from_millis(100));
    }
    reap(dir);
    std::process::exit(0)
}
