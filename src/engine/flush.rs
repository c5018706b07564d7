//! Receipts written in a burst are made durable together: each is written to a temp file and
//! renamed into place (a kill leaves the old receipt or the new one, never a mix), and the
//! file system is synced (`syncfs`) when a second has passed since the last sync and at the end
//! of a run, instead of two `fsync`s per receipt.
//!
//! After a power loss, up to about a second of finished steps may lose their receipts (or find
//! them empty, which reads as no receipt) and run again; a receipt is never kept for a step whose
//! outputs were lost, because the sync also flushes what the steps wrote before it.

use std::fs::File;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How much finished work a power loss may cost at most (plus the steps still running).
const SYNC_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub(super) struct Flusher {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// When the file system was last synced.
    synced_at: Instant,
    /// Receipts were written since.
    dirty: bool,
    /// A sync between receipts that failed: reported by [`Flusher::finish`], not blamed on the
    /// step whose receipt was already in place.
    failed: Option<std::io::Error>,
}

impl Default for Flusher {
    fn default() -> Self {
        Flusher {
            state: Mutex::new(State {
                synced_at: Instant::now(),
                dirty: false,
                failed: None,
            }),
        }
    }
}

impl Flusher {
    /// Write `bytes` to `path` by rename (the temp name `.NAME.tmp-PID` is swept after a kill),
    /// then sync the file system if the last sync is a second old.
    pub(super) fn write(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        crate::fs::replace_unsynced(path, bytes)?;
        let mut state = self.lock();
        state.dirty = true;
        if state.synced_at.elapsed() >= SYNC_EVERY {
            let synced = syncfs(path.parent().unwrap_or(Path::new(".")));
            state.synced_at = Instant::now();
            match synced {
                Ok(()) => state.dirty = false,
                Err(e) => {
                    state.failed.get_or_insert(e);
                }
            }
        }
        Ok(())
    }

    /// Sync what was written since the last sync (the end of a run); a sync that failed on the
    /// way is reported here.
    pub(super) fn finish(&self, dir: &Path) -> std::io::Result<()> {
        let mut state = self.lock();
        if let Some(e) = state.failed.take() {
            return Err(e);
        }
        if state.dirty {
            syncfs(dir)?;
            state.synced_at = Instant::now();
            state.dirty = false;
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Flush the file system that holds `dir` (data and metadata: renames included); a signal
/// that interrupts the open or the sync (`EINTR`) is not a failure: it is tried again.
fn syncfs(dir: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let d = crate::fs::retry_interrupted(|| File::open(dir))?;
    crate::fs::retry_interrupted(|| {
        // SAFETY: `d` is an open descriptor for the duration of the call.
        if unsafe { libc::syncfs(d.as_raw_fd()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_by_rename_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = Flusher::default();
        let path = dir.path().join("r").join("a.json");
        f.write(&path, b"one").unwrap();
        f.write(&path, b"two").unwrap();
        f.finish(&dir.path().join("r")).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path().join("r"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["a.json"]);
    }
}
