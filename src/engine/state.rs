//! One recipe's run state: receipts of finished steps, step logs, the run lock (paths from
//! `StatePaths`).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::fingerprint::Fingerprint;
use crate::error::{Error, Result};
use crate::fs::{create_dir, temp_owner, write_atomic};
use crate::paths::StatePaths;

/// Proof that a step succeeded and its check passed, for one fingerprint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Receipt {
    pub step: String,
    pub fingerprint: Fingerprint,
    pub finished_unix: u64,
    pub duration_ms: u64,
    pub kiln_version: String,
}

/// One recipe's run state: receipts, logs, the memo and the lock (paths from [`StatePaths`]).
#[derive(Debug, Clone)]
pub(crate) struct StateDir {
    pub paths: StatePaths,
    pub recipe: String,
}

impl StateDir {
    pub(crate) fn new(paths: &StatePaths, recipe: &str) -> Self {
        StateDir {
            paths: paths.clone(),
            recipe: recipe.to_string(),
        }
    }

    pub(crate) fn receipt_path(&self, step: &str) -> PathBuf {
        self.paths.receipt(&self.recipe, step)
    }

    pub(crate) fn log_path(&self, step: &str) -> PathBuf {
        self.paths.step_log(&self.recipe, step)
    }

    pub(crate) fn memo_path(&self) -> PathBuf {
        self.paths.hash_memo()
    }

    /// The receipt of `step`, if one exists and is readable.
    pub(crate) fn receipt(&self, step: &str) -> Option<Receipt> {
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

    pub(crate) fn write_receipt(&self, r: &Receipt) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(r).expect("receipts serialize");
        write_atomic(&self.receipt_path(&r.step), &bytes)
    }

    pub(crate) fn remove_receipt(&self, step: &str) -> Result<()> {
        match std::fs::remove_file(self.receipt_path(step)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::io("cannot remove a receipt", e))
            }
            _ => Ok(()),
        }
    }

    /// Take the state directory's lock for the duration of a run.
    pub(crate) fn lock(&self) -> Result<RunLock> {
        create_dir(self.paths.root())?;
        let path = self.paths.lock();
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
                    path: self.paths.root().to_path_buf(),
                    holder,
                });
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(Error::io(format!("cannot lock {}", path.display()), e))
            }
        }
        file.set_len(0)
            .and_then(|()| write!(file, "{}", std::process::id()))
            .map_err(|e| Error::io("cannot write the lock file", e))?;
        self.remove_leftovers();
        Ok(RunLock { _file: file })
    }

    /// Temp files of runs killed inside [`write_atomic`] (SIGKILL, ENOSPC): receipts of every
    /// recipe and the hash memo. Called under the lock, so no other kiln writes here now; a temp
    /// file of this very process is left alone.
    fn remove_leftovers(&self) {
        let mut dirs = vec![self.paths.root().to_path_buf()];
        if let Ok(runs) = std::fs::read_dir(self.paths.runs()) {
            let recipes = runs
                .flatten()
                .map(|r| r.file_name().to_string_lossy().into_owned());
            dirs.extend(recipes.map(|recipe| self.paths.receipts(&recipe)));
        }
        for dir in dirs {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(pid) = temp_owner(&name) {
                    if pid != std::process::id() {
                        let _ = std::fs::remove_file(e.path());
                    }
                }
            }
        }
    }
}

/// Held while a run owns the state directory; released on drop or when the process dies.
#[derive(Debug)]
pub(crate) struct RunLock {
    _file: File,
}
