//! The state directory: receipts of finished steps, step logs, the run lock; atomic writes.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use super::fingerprint::Fingerprint;
use super::flush::Flusher;
use super::index::{self, Entry, Known, Summary};
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

/// Paths inside the state directory for one recipe, and what this process knows of its receipts
/// (see [`index`]).
#[derive(Debug, Clone)]
pub struct StateDir {
    pub root: PathBuf,
    pub recipe: String,
    known: Arc<Mutex<Known>>,
    flusher: Arc<Flusher>,
    /// This process holds the run lock: no other kiln changes the receipts.
    exclusive: Arc<AtomicBool>,
}

/// What the receipts index says about a step whose fingerprint digest is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Indexed {
    /// Its receipt has this digest.
    Matches,
    /// It has no receipt.
    NoReceipt,
}

impl StateDir {
    pub fn new(root: &Path, recipe: &str) -> Self {
        StateDir {
            root: root.to_path_buf(),
            recipe: recipe.to_string(),
            known: Arc::default(),
            flusher: Arc::default(),
            exclusive: Arc::default(),
        }
    }

    fn receipts_dir(&self) -> PathBuf {
        self.run_dir().join("receipts")
    }

    fn index_path(&self) -> PathBuf {
        self.run_dir().join("receipts.idx")
    }

    /// What is known of the receipts, the index loaded on first use.
    fn known(&self) -> MutexGuard<'_, Known> {
        let mut k = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if !k.is_loaded() {
            k.load(&self.index_path(), &self.receipts_dir());
        }
        k
    }

    /// The index's answer for `step` at fingerprint `digest`, or `None`: read the receipt.
    pub fn indexed(&self, step: &str, digest: &str) -> Option<Indexed> {
        match self.known().get(step)? {
            Entry::Present(s) if s.digest == digest => Some(Indexed::Matches),
            Entry::Absent => Some(Indexed::NoReceipt),
            _ => None,
        }
    }

    /// Whether `step` has a (readable) receipt.
    pub fn has_receipt(&self, step: &str) -> bool {
        let indexed = match self.known().get(step) {
            Some(Entry::Present(_)) => Some(true),
            Some(Entry::Absent) => Some(false),
            _ => None,
        };
        indexed.unwrap_or_else(|| self.receipt(step).is_some())
    }

    /// Make the receipts written so far durable (see [`Flusher`]).
    pub fn sync_receipts(&self) -> Result<()> {
        let dir = self.receipts_dir();
        self.flusher
            .finish(&dir)
            .map_err(|e| Error::io(format!("cannot sync {}", dir.display()), e))
    }

    /// Delete the index before receipts change (a kill then leaves no index to trust).
    pub fn invalidate_index(&self) {
        let _ = std::fs::remove_file(self.index_path());
    }

    /// After a plan: write the index if the one on disk could not be used (missing or stale).
    pub fn refresh_index<'a>(&self, steps: impl Iterator<Item = &'a str>) {
        let complete = self.known().complete;
        if !complete {
            self.save_index(steps);
        }
    }

    /// Write the index for the receipts of `steps` (the recipe's steps), if it can be trusted
    /// (see [`Known::stamp_for_save`]); best effort: without it the next plan reads receipts.
    pub fn save_index<'a>(&self, steps: impl Iterator<Item = &'a str>) {
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
                _ if wanted.contains(id.as_str()) => match self.receipt(id) {
                    Some(r) => summary_entry(&r),
                    None => Entry::Unknown,
                },
                _ => Entry::Unknown,
            };
            entries.push((id.as_str(), entry));
        }
        // Receipts that changed while reading make this index useless, never wrong.
        if !exclusive && index::dir_stamp(&dir) != stamp {
            return;
        }
        let bytes = index::render(stamp, entries.iter().map(|(id, e)| (*id, e)));
        let _ = index::replace(&self.index_path(), &bytes);
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
        let receipt: Option<Receipt> = File::open(self.receipt_path(step))
            .ok()
            .and_then(|f| f.take(1 << 20).read_to_end(&mut bytes).ok())
            .and_then(|_| serde_json::from_slice(&bytes).ok());
        let entry = receipt.as_ref().map_or(Entry::Absent, summary_entry);
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known.entries.insert(step.to_string(), entry);
        receipt
    }

    pub fn write_receipt(&self, r: &Receipt) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(r).expect("receipts serialize");
        let path = self.receipt_path(&r.step);
        self.flusher
            .write(&path, &bytes)
            .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known.entries.insert(r.step.clone(), summary_entry(r));
        Ok(())
    }

    pub fn remove_receipt(&self, step: &str) -> Result<()> {
        let removed = match std::fs::remove_file(self.receipt_path(step)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
        // After a failed removal, whether the receipt is still there is unknown.
        let entry = removed.as_ref().map_or(Entry::Unknown, |_| Entry::Absent);
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known.entries.insert(step.to_string(), entry);
        removed.map_err(|e| Error::io("cannot remove a receipt", e))
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
        self.exclusive.store(true, Ordering::Relaxed);
        self.remove_leftovers();
        Ok(RunLock { _file: file })
    }

    /// Temp files of runs killed inside [`write_atomic`] (SIGKILL, ENOSPC): receipts of every
    /// recipe and the hash memo. Called under the lock, so no other kiln writes here now; a temp
    /// file of this very process is left alone.
    fn remove_leftovers(&self) {
        let mut dirs = vec![self.root.clone()];
        if let Ok(runs) = std::fs::read_dir(self.root.join("runs")) {
            // Receipts, and the receipts index next to them.
            dirs.extend(
                runs.flatten()
                    .flat_map(|r| [r.path().join("receipts"), r.path()]),
            );
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

fn summary_entry(r: &Receipt) -> Entry {
    Entry::Present(Summary {
        digest: r.fingerprint.digest.clone(),
        finished_unix: r.finished_unix,
        duration_ms: r.duration_ms,
    })
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
