//! sha256 of bytes, readers and files (with a stat-based memo so an unchanged file is never hashed
//! twice), and a writer that hashes what passes through it.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::fs::write_atomic;

/// Stream a reader through sha256 (1 MiB reads).
pub fn sha256_reader(mut r: impl Read) -> std::io::Result<(String, u64)> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        total += n as u64;
    }
    Ok((hex(&h.finalize()), total))
}

pub fn sha256_bytes(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

pub fn hex(bytes: &[u8]) -> String {
    // A table, not `write!("{:02x}")`: fingerprints of a large plan format many digests.
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    s
}

/// What tells one version of a file from another without reading it: size, mtime, ctime and
/// inode (the memo's rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileVersion {
    pub len: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
    pub ino: u64,
}

impl FileVersion {
    pub fn of(meta: &std::fs::Metadata) -> FileVersion {
        FileVersion {
            len: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
            ino: meta.ino(),
        }
    }

    pub fn read(path: &Path) -> Option<FileVersion> {
        std::fs::metadata(path).ok().map(|m| FileVersion::of(&m))
    }

    /// Whether this version was made at least the racy window ([`racy_window`]) before `t`:
    /// then any change after `t` makes a different version, even within one timestamp of the
    /// file system (git's "racy" rule; the ctime, which no one can set back, is what is
    /// compared). A version whose times have no sub-second part at all comes from a file
    /// system that keeps whole seconds (the odds of both being 0 on a finer one are 1 in
    /// 10^18): it gets a window of at least a second, whatever the state directory measured.
    pub fn settled_before(&self, t: std::time::SystemTime) -> bool {
        let t = t
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let mut window = racy_window();
        if self.ctime_ns % 1_000_000_000 == 0 && self.mtime_ns % 1_000_000_000 == 0 {
            window = window.max(RACY + std::time::Duration::from_secs(1));
        }
        u128::try_from(self.ctime_ns).is_ok_and(|c| c + window.as_nanos() < t)
    }
}

/// How far behind the clock file timestamps may be (they come from a coarse clock), on top of
/// the file system's own timestamp granularity.
pub const RACY: std::time::Duration = std::time::Duration::from_millis(50);

/// The granularity of the state directory's file system timestamps, in nanoseconds, as
/// measured (see [`crate::fs::timestamp_granularity`]); 0 until told.
static GRANULARITY_NS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Use the measured timestamp granularity `g` for the racy window from now on.
pub fn use_timestamp_granularity(g: std::time::Duration) {
    let ns = u64::try_from(g.as_nanos()).unwrap_or(u64::MAX);
    GRANULARITY_NS.store(ns, std::sync::atomic::Ordering::Relaxed);
}

/// How long after a change a file's timestamps may still not tell the next change from it:
/// [`RACY`] plus the file system's timestamp granularity.
pub fn racy_window() -> std::time::Duration {
    RACY + std::time::Duration::from_nanos(
        GRANULARITY_NS.load(std::sync::atomic::Ordering::Relaxed),
    )
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Stamp {
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    ino: u64,
    sha256: String,
}

impl Stamp {
    fn new(v: FileVersion, sha256: String) -> Stamp {
        Stamp {
            len: v.len,
            mtime_ns: v.mtime_ns,
            ctime_ns: v.ctime_ns,
            ino: v.ino,
            sha256,
        }
    }

    fn version(&self) -> FileVersion {
        FileVersion {
            len: self.len,
            mtime_ns: self.mtime_ns,
            ctime_ns: self.ctime_ns,
            ino: self.ino,
        }
    }
}

/// Memo of file hashes keyed by path and validated by (size, mtime, ctime, inode).
#[derive(Debug, Default)]
pub struct HashMemo {
    path: Option<PathBuf>,
    entries: Mutex<BTreeMap<PathBuf, Stamp>>,
    dirty: Mutex<bool>,
}

impl HashMemo {
    pub fn load(path: &Path) -> HashMemo {
        let entries = crate::bounded::read_io(path, crate::bounded::STATE_CAP)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        HashMemo {
            path: Some(path.to_path_buf()),
            entries: Mutex::new(entries),
            dirty: Mutex::new(false),
        }
    }

    /// sha256 of `path`, reusing the memo when the file's stat is unchanged. A version too
    /// recent to be told from the next change ([`FileVersion::settled_before`]) is hashed but
    /// not kept: within one timestamp, an edit of the same size leaves the stat unchanged.
    pub fn file(&self, path: &Path) -> Result<String> {
        let reading = std::time::SystemTime::now();
        let meta = std::fs::metadata(path)
            .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
        let version = FileVersion::of(&meta);
        if let Some(s) = self.entries.lock().expect("memo lock").get(path) {
            if s.version() == version {
                return Ok(s.sha256.clone());
            }
        }
        let f = File::open(path)
            .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
        let (sha, _) = sha256_reader(f)
            .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
        let mut entries = self.entries.lock().expect("memo lock");
        if version.settled_before(reading) {
            entries.insert(path.to_path_buf(), Stamp::new(version, sha.clone()));
        } else if entries.remove(path).is_none() {
            return Ok(sha);
        }
        *self.dirty.lock().expect("memo lock") = true;
        Ok(sha)
    }

    /// The version of `path` whose hash the memo holds.
    pub fn version(&self, path: &Path) -> Option<FileVersion> {
        self.entries
            .lock()
            .expect("memo lock")
            .get(path)
            .map(Stamp::version)
    }

    /// Record a hash computed elsewhere (a download hashed while streaming) for `path` as it is now.
    pub fn record(&self, path: &Path, sha256: &str) -> Result<()> {
        let meta = std::fs::metadata(path)
            .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
        let stamp = Stamp::new(FileVersion::of(&meta), sha256.to_string());
        self.entries
            .lock()
            .expect("memo lock")
            .insert(path.to_path_buf(), stamp);
        *self.dirty.lock().expect("memo lock") = true;
        Ok(())
    }

    pub fn save(&self) -> Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        if !*self.dirty.lock().expect("memo lock") {
            return Ok(());
        }
        let bytes =
            serde_json::to_vec(&*self.entries.lock().expect("memo lock")).expect("memo serializes");
        write_atomic(path, &bytes)
    }
}

/// A writer that hashes (sha256) and counts everything passing through it.
pub struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    written: u64,
}

impl<W: Write> HashingWriter<W> {
    pub fn new(inner: W) -> Self {
        HashingWriter {
            inner,
            hasher: Sha256::new(),
            written: 0,
        }
    }

    /// The inner writer, the hex sha256 and the byte count of what was written.
    pub fn finish(self) -> (W, String, u64) {
        (self.inner, hex(&self.hasher.finalize()), self.written)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digest() {
        assert_eq!(
            sha256_bytes(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn memo_rehashes_only_changed_files() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x");
        std::fs::write(&f, b"abc").unwrap();
        let memo = HashMemo::default();
        let first = memo.file(&f).unwrap();
        assert_eq!(memo.file(&f).unwrap(), first);
        std::fs::write(&f, b"abcd").unwrap();
        assert_ne!(memo.file(&f).unwrap(), first);
    }
}
