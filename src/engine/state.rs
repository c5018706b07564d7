//! The state directory: receipts of finished steps, step logs, the run lock; atomic writes.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::fingerprint::Fingerprint;
use crate::error::{Error, Result};

/// Proof that a step succeeded and its check passed, for one fingerprint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Receipt {
    pub step: String,
    pub fingerprint: Fingerprint,
    pub finished_unix: u64,
    pub duration_ms: u64,
    pub kiln_version: String,
}

/// Paths inside the state directory for one recipe.
#[derive(Debug, Clone)]
pub struct StateDir {
    pub root: PathBuf,
    pub recipe: String,
}

impl StateDir {
    pub fn new(root: &Path, recipe: &str) -> Self {
        StateDir {
            root: root.to_path_buf(),
            recipe: recipe.to_string(),
        }
    }

    fn run_dir(&self) -> PathBuf {
        self.root.join("runs").join(&self.recipe)
    }

    pub fn receipt_path(&self, step: &str) -> PathBuf {
        self.run_dir().join("receipts").join(format!("{step}.json"))
    }

    pub fn log_path(&self, step: &str) -> PathBuf {
        self.run_dir().join("logs").join(format!("{step}.log"))
    }

    pub fn memo_path(&self) -> PathBuf {
        self.root.join("hashmemo.json")
    }

    /// The receipt of `step`, if one exists and is readable.
    pub fn receipt(&self, step: &str) -> Option<Receipt> {
        // Through `take`: `File::read_to_end` asks for a size hint (statx + lseek per file), which
        // was half the syscalls of a no-op plan; receipts are small.
        let mut bytes = Vec::with_capacity(4096);
        File::open(self.receipt_path(step))
            .ok()?
            .take(1 << 20)
            .read_to_end(&mut bytes)
            .ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    pub fn write_receipt(&self, r: &Receipt) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(r).expect("receipts serialize");
        write_atomic(&self.receipt_path(&r.step), &bytes)
    }

    pub fn remove_receipt(&self, step: &str) -> Result<()> {
        match std::fs::remove_file(self.receipt_path(step)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::io("cannot remove a receipt", e))
            }
            _ => Ok(()),
        }
    }

    /// Take the state directory's lock for the duration of a run.
    pub fn lock(&self) -> Result<RunLock> {
        create_dir(&self.root)?;
        let path = self.root.join("lock");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(format!("cannot open {}", path.display()), e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let holder = std::fs::read_to_string(&path)
                    .ok()
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .map_or(String::new(), |pid| format!(" (pid {pid})"));
                return Err(Error::Locked {
                    path: self.root.clone(),
                    holder,
                });
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(Error::io(format!("cannot lock {}", path.display()), e))
            }
        }
        file.set_len(0)
            .and_then(|_| write!(file, "{}", std::process::id()))
            .map_err(|e| Error::io("cannot write the lock file", e))?;
        self.remove_leftovers();
        Ok(RunLock { _file: file })
    }

    /// Temp files of runs killed inside [`write_atomic`] (SIGKILL, ENOSPC): receipts of every
    /// recipe and the hash memo. Called under the lock, so no other kiln writes here now; a temp
    /// file of this very process is left alone.
    fn remove_leftovers(&self) {
        let mut dirs = vec![self.root.clone()];
        if let Ok(runs) = std::fs::read_dir(self.root.join("runs")) {
            dirs.extend(runs.flatten().map(|r| r.path().join("receipts")));
        }
        for dir in dirs {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(pid) = tmp_owner(&name) {
                    if pid != std::process::id() {
                        let _ = std::fs::remove_file(e.path());
                    }
                }
            }
        }
    }
}

/// The PID in a [`write_atomic`] temp name (`.NAME.tmp-PID`).
fn tmp_owner(name: &str) -> Option<u32> {
    let (_, pid) = name.strip_prefix('.')?.rsplit_once(".tmp-")?;
    pid.parse().ok()
}

/// Whether process `pid` exists (it may belong to someone else).
pub fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists; nothing is sent.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Held while a run owns the state directory; released on drop or when the process dies.
#[derive(Debug)]
pub struct RunLock {
    _file: File,
}

pub fn create_dir(path: &Path) -> Result<()> {
    std::fs::create_dir_all(path)
        .map_err(|e| Error::io(format!("cannot create {}", path.display()), e))
}

/// Write `bytes` to `path` so readers see the old content or the new, never a mix.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    create_dir(dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let ctx = |e| Error::io(format!("cannot write {}", path.display()), e);
    let written = File::create(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|_| f.sync_all()))
        .and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        // A full disk must not also leave a temp file behind.
        let _ = std::fs::remove_file(&tmp);
        return Err(ctx(e));
    }
    File::open(dir).and_then(|d| d.sync_all()).map_err(ctx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_give_their_owner() {
        assert_eq!(tmp_owner(".build.json.tmp-4242"), Some(4242));
        assert_eq!(tmp_owner(".hashmemo.json.tmp-7"), Some(7));
        assert_eq!(tmp_owner("build.json"), None);
        assert_eq!(tmp_owner(".x.tmp-notapid"), None);
        assert!(pid_alive(std::process::id()));
    }
}
