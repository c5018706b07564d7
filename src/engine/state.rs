//! One recipe's run state: receipts of finished steps, step logs, the run lock (paths from
//! `StatePaths`).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use super::fingerprint::Fingerprint;
use super::flush::Flusher;
use super::index::{self, Entry, Known, Summary};
use crate::error::{Error, Result};
use crate::fs::{create_dir, temp_owner};
use crate::paths::StatePaths;

/// Proof that a step succeeded and its check passed, for one fingerprint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Receipt {
    pub step: String,
    pub fingerprint: Fingerprint,
    pub finished_unix: u64,
    pub duration_ms: u64,
    pub kiln_version: String,
    /// The step-cache key id of this step (dependents' keys are built from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_key: Option<String>,
    /// `restored from cache (entry <short id>)`: the outputs came from the step cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_from: Option<String>,
}

/// One recipe's run state: receipts, logs, the memo and the lock (paths from [`StatePaths`]),
/// and what this process knows of its receipts (see [`index`]).
#[derive(Debug, Clone)]
pub(crate) struct StateDir {
    pub paths: StatePaths,
    pub recipe: String,
    known: Arc<Mutex<Known>>,
    flusher: Arc<Flusher>,
    /// This process holds the run lock: no other kiln changes the receipts.
    exclusive: Arc<AtomicBool>,
}

/// What the receipts index says about a step whose fingerprint digest is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Indexed {
    /// Its receipt has this digest.
    Matches,
    /// It has no receipt.
    NoReceipt,
}

impl StateDir {
    pub(crate) fn new(paths: &StatePaths, recipe: &str) -> Self {
        StateDir {
            paths: paths.clone(),
            recipe: recipe.to_string(),
            known: Arc::default(),
            flusher: Arc::default(),
            exclusive: Arc::default(),
        }
    }

    /// The run state of `recipe`, in the run directory of its name and file (see
    /// [`StatePaths::run_key`]).
    pub(crate) fn of(paths: &StatePaths, recipe: &crate::recipe::Recipe) -> Self {
        Self::new(paths, &paths.run_key(&recipe.name, &recipe.origin))
    }

    fn receipts_dir(&self) -> PathBuf {
        self.paths.receipts(&self.recipe)
    }

    fn index_path(&self) -> PathBuf {
        self.paths.receipts_index(&self.recipe)
    }

    /// What is known of the receipts, the index loaded on first use.
    fn known(&self) -> MutexGuard<'_, Known> {
        let mut k = self
            .known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !k.is_loaded() {
            k.load(&self.index_path(), &self.receipts_dir());
        }
        k
    }

    /// The index's answer for `step` at fingerprint `digest`, or `None`: read the receipt.
    pub(crate) fn indexed(&self, step: &str, digest: &str) -> Option<Indexed> {
        match self.known().get(step)? {
            Entry::Present(s) if s.digest == digest => Some(Indexed::Matches),
            Entry::Absent => Some(Indexed::NoReceipt),
            _ => None,
        }
    }

    /// Whether `step` has a (readable) receipt.
    pub(crate) fn has_receipt(&self, step: &str) -> bool {
        let indexed = match self.known().get(step) {
            Some(Entry::Present(_)) => Some(true),
            Some(Entry::Absent) => Some(false),
            _ => None,
        };
        indexed.unwrap_or_else(|| self.receipt(step).is_some())
    }

    /// Make the receipts written so far durable (see [`Flusher`]).
    pub(crate) fn sync_receipts(&self) -> Result<()> {
        let dir = self.receipts_dir();
        self.flusher
            .finish(&dir)
            .map_err(|e| Error::io(format!("cannot sync {}", dir.display()), e))
    }

    /// Delete the index before receipts change (a kill then leaves no index to trust).
    pub(crate) fn invalidate_index(&self) {
        let _ = std::fs::remove_file(self.index_path());
    }

    /// After a plan: write the index if the one on disk could not be used (missing or stale).
    pub(crate) fn refresh_index<'a>(&self, steps: impl Iterator<Item = &'a str>) {
        let complete = self.known().complete;
        if !complete {
            self.save_index(steps);
        }
    }

    /// The receipts directory's mtime for a fresh record of the plan just made: `None` when it
    /// changed since the plan read it, or so recently that a change to come could go unseen.
    pub(crate) fn stamp_for_record(&self) -> Option<index::DirStamp> {
        self.known().stamp_for_save(&self.receipts_dir(), false)
    }

    /// Write the index for the receipts of `steps` (the recipe's steps), if it can be trusted
    /// (see [`Known::stamp_for_save`]); best effort: without it the next plan reads receipts.
    pub(crate) fn save_index<'a>(&self, steps: impl Iterator<Item = &'a str>) {
        let dir = self.receipts_dir();
        let exclusive = self.exclusive.load(Ordering::Relaxed);
        let mut names: Vec<String> = match std::fs::read_dir(&dir) {
            Ok(rd) => rd
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name().into_string().ok()?;
                    let id = name.strip_suffix(".json")?;
                    (!id.starts_with('.')).then(|| id.to_string())
                })
                .collect(),
            Err(_) => Vec::new(),
        };
        names.sort_unstable();
        let Some(stamp) = self.known().stamp_for_save(&dir, exclusive) else {
            return;
        };
        let wanted: std::collections::HashSet<&str> = steps.collect();
        let mut entries = Vec::with_capacity(names.len());
        for id in &names {
            let known = self.known().entries.get(id.as_str()).cloned();
            let entry = match known {
                Some(e @ Entry::Present(_)) => e,
                _ if wanted.contains(id.as_str()) => self
                    .receipt(id)
                    .map_or(Entry::Unknown, |r| summary_entry(&r)),
                _ => Entry::Unknown,
            };
            entries.push((id.as_str(), entry));
        }
        // Receipts that changed while reading make this index useless, never wrong.
        if !exclusive && index::dir_stamp(&dir) != stamp {
            return;
        }
        let bytes = index::render(stamp, entries.iter().map(|(id, e)| (*id, e)));
        let _ = crate::fs::replace_unsynced(&self.index_path(), &bytes);
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
        let receipt: Option<Receipt> = crate::bounded::open(&self.receipt_path(step))
            .ok()
            .and_then(|f| f.take(1 << 20).read_to_end(&mut bytes).ok())
            .and_then(|_| serde_json::from_slice(&bytes).ok());
        let entry = receipt.as_ref().map_or(Entry::Absent, summary_entry);
        let mut known = self
            .known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        known.entries.insert(step.to_string(), entry);
        receipt
    }

    /// Write a receipt by rename; made durable in batches (see [`Flusher`]).
    pub(crate) fn write_receipt(&self, r: &Receipt) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(r).expect("receipts serialize");
        let path = self.receipt_path(&r.step);
        self.flusher
            .write(&path, &bytes)
            .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
        let mut known = self
            .known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        known.entries.insert(r.step.clone(), summary_entry(r));
        Ok(())
    }

    pub(crate) fn remove_receipt(&self, step: &str) -> Result<()> {
        let removed = match std::fs::remove_file(self.receipt_path(step)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
        // After a failed removal, whether the receipt is still there is unknown.
        let entry = removed.as_ref().map_or(Entry::Unknown, |()| Entry::Absent);
        let mut known = self
            .known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        known.entries.insert(step.to_string(), entry);
        removed.map_err(|e| Error::io("cannot remove a receipt", e))
    }

    /// Take the state directory's lock for the duration of a run, and sweep what killed runs
    /// left behind.
    pub(crate) fn lock(&self) -> Result<RunLock> {
        let lock = self.hold_lock()?;
        self.remove_leftovers();
        Ok(lock)
    }

    /// Take the state directory's lock, for a run that writes nothing (a no-op).
    pub(crate) fn hold_lock(&self) -> Result<RunLock> {
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
        self.exclusive.store(true, Ordering::Relaxed);
        Ok(RunLock {
            _file: file,
            exclusive: self.exclusive.clone(),
        })
    }

    /// Temp files of runs killed inside [`crate::fs::write_atomic`] or a receipt write (SIGKILL, ENOSPC): receipts of every
    /// recipe and the hash memo. Called under the lock, so no other kiln writes here now; a temp
    /// file of this very process is left alone.
    fn remove_leftovers(&self) {
        let mut dirs = vec![self.paths.root().to_path_buf()];
        if let Ok(runs) = std::fs::read_dir(self.paths.runs()) {
            let recipes = runs
                .flatten()
                .map(|r| r.file_name().to_string_lossy().into_owned());
            // Receipts, and the receipts index next to them.
            dirs.extend(
                recipes
                    .flat_map(|recipe| [self.paths.receipts(&recipe), self.paths.run_dir(&recipe)]),
            );
        }
        for dir in dirs {
            // Under the lock, every other writer of these temp files is gone.
            crate::fs::remove_left_behind(&dir, temp_owner, |_, _| true);
        }
    }
}

fn summary_entry(r: &Receipt) -> Entry {
    Entry::Present(Summary {
        digest: r.fingerprint.digest.clone(),
        finished_unix: r.finished_unix,
        duration_ms: r.duration_ms,
    })
}

/// Held while a run owns the state directory; released on drop or when the process dies.
#[derive(Debug)]
pub(crate) struct RunLock {
    _file: File,
    /// The state's "this process holds the lock", cleared with it.
    exclusive: Arc<AtomicBool>,
}

impl Drop for RunLock {
    fn drop(&mut self) {
        self.exclusive.store(false, Ordering::Relaxed);
    }
}
