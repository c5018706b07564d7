//! Receipts written in a burst are made durable together: each is written to a temp file and
//! renamed into place (a kill leaves the old receipt or the new one, never a mix), and the
//! file system is synced (`syncfs`) when a second has passed since the last sync and at the end
//! of a run, instead of two `fsync`s per receipt.
//!
//! After a power loss, up to about a second of finished steps may lose their receipts (or find
//! them empty, which reads as no receipt) and run again; a receipt is never kept for a step whose
//! outputs were lost, because the sync also flushes what the steps wrote before it.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How much finished work a power loss may cost at most (plus the steps still running).
const SYNC_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub(super) struct Flusher {
    /// When the file system was last synced, and whether receipts were written since.
    state: Mutex<(Instant, bool)>,
}

impl Default for Flusher {
    fn default() -> Self {
        Flusher {
            state: Mutex::new((Instant::now(), false)),
        }
    }
}

impl Flusher {
    /// Write `bytes` to `path` by rename (the temp name `.NAME.tmp-PID` is swept after a kill),
    /// then sync the file system if the last sync is a second old.
    pub(super) fn write(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(
            ".{}.tmp-{}",
            path.file_name().unwrap_or_default().to_string_lossy(),
            std::process::id()
        ));
        let written = File::create(&tmp)
            .and_then(|mut f| f.write_all(bytes))
            .and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = written {
            // A full disk must not also leave a temp file behind.
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.1 = true;
        if state.0.elapsed() >= SYNC_EVERY {
            syncfs(dir)?;
            *state = (Instant::now(), false);
        }
        Ok(())
    }

    /// Sync what was written since the last sync (the end of a run).
    pub(super) fn finish(&self, dir: &Path) -> std::io::Result<()> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.1 {
            syncfs(dir)?;
            *state = (Instant::now(), false);
        }
        Ok(())
    }
}

/// Flush the file system that holds `dir` (data and metadata: renames included).
fn syncfs(dir: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let d = File::open(dir)?;
    // SAFETY: `d` is an open descriptor for the duration of the call.
    if unsafe { libc::syncfs(d.as_raw_fd()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
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
