//! Filesystem helpers every layer shares: directories that say which path failed, and atomic
//! writes (readers see the old content or the new, never a mix).

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::{Error, Result};

/// Create `path` and its parents; the error names the path.
pub(crate) fn create_dir(path: &Path) -> Result<()> {
    std::fs::create_dir_all(path)
        .map_err(|e| Error::io(format!("cannot create {}", path.display()), e))
}

/// Run `op` again for as long as a signal interrupts it (`EINTR`): a sync, open or rename that
/// a signal cut short has not failed, and a run whose steps succeeded must not fail for it.
pub(crate) fn retry_interrupted<T>(
    mut op: impl FnMut() -> std::io::Result<T>,
) -> std::io::Result<T> {
    loop {
        match op() {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

/// `fsync` a file, retried on `EINTR`.
pub(crate) fn sync_file(file: &File) -> std::io::Result<()> {
    retry_interrupted(|| file.sync_all())
}

/// `fsync` a directory (its entries: renames and removals in it), retried on `EINTR`.
pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    let d = retry_interrupted(|| File::open(dir))?;
    sync_file(&d)
}

/// `rename`, retried on `EINTR`.
pub(crate) fn rename(from: &Path, to: &Path) -> std::io::Result<()> {
    retry_interrupted(|| std::fs::rename(from, to))
}

/// The temp name a write to `path` goes through: `.NAME.tmp-PID` beside it (see [`temp_owner`]).
fn temp_for(path: &Path) -> std::path::PathBuf {
    let dir = path.parent().unwrap_or(Path::new("."));
    dir.join(format!(
        ".{}.tmp-{}",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ))
}

/// Create `path` as a new file for writing (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0666 less the
/// umask): never through a symlink or onto a file someone placed there first.
pub(crate) fn create_new(path: &Path) -> std::io::Result<File> {
    create_new_with_mode(path, 0o666)
}

/// [`create_new`] with the permission bits `mode` (less the umask).
fn create_new_with_mode(path: &Path, mode: u32) -> std::io::Result<File> {
    File::options()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// A temp file at `tmp` for an atomic replace: created new ([`create_new`]); a leftover of an
/// earlier process that had this pid (or anything planted under the name, a symlink included)
/// is unlinked first, never written through.
fn create_temp(tmp: &Path) -> std::io::Result<File> {
    create_temp_with_mode(tmp, 0o666)
}

fn create_temp_with_mode(tmp: &Path, mode: u32) -> std::io::Result<File> {
    match create_new_with_mode(tmp, mode) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(tmp)?;
            create_new_with_mode(tmp, mode)
        }
        other => other,
    }
}

/// Write `bytes` to `path` so readers see the old content or the new, never a mix. The temp file
/// (`.NAME.tmp-PID`, see [`temp_owner`]) is removed when the write fails (a full disk).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_with_mode(path, bytes, 0o666)
}

/// [`write_atomic`] for a file only its owner may read (mode 0600 from its creation on): a
/// record that holds a command line, a log of a user's secrets.
pub(crate) fn write_atomic_private(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_with_mode(path, bytes, 0o600)
}

fn write_atomic_with_mode(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    // A bare file name's parent is "", which cannot be opened to sync: it is ".".
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    create_dir(dir)?;
    let tmp = temp_for(path);
    let ctx = |e| Error::io(format!("cannot write {}", path.display()), e);
    let written = create_temp_with_mode(&tmp, mode)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| sync_file(&f)))
        .and_then(|()| rename(&tmp, path));
    if let Err(e) = written {
        // A full disk must not also leave a temp file behind.
        let _ = std::fs::remove_file(&tmp);
        return Err(ctx(e));
    }
    sync_dir(dir).map_err(ctx)
}

/// Replace `path` by rename without fsync, for caches that a lost or torn write only makes
/// useless (a miss), never wrong. The temp file is removed when the write fails.
pub(crate) fn replace_unsynced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))?;
    let tmp = temp_for(path);
    let written = create_temp(&tmp)
        .and_then(|mut f| f.write_all(bytes))
        .and_then(|()| rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Append `line` and a newline to `path` as one whole record or not at all: under an exclusive
/// lock of the file, in one write, made durable; a failed write (ENOSPC) is cut back off. A
/// torn last line someone else left (a crash) is ended first, so the record is not glued to it.
pub(crate) fn append_line(path: &Path, line: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut f = File::options()
        .read(true)
        .append(true)
        .create(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    retry_interrupted(|| f.lock())?;
    let len = f.metadata()?.len();
    let mut record = Vec::with_capacity(line.len() + 2);
    if len > 0 {
        let mut last = [0u8; 1];
        f.read_exact_at(&mut last, len - 1)?;
        if last[0] != b'\n' {
            record.push(b'\n');
        }
    }
    record.extend_from_slice(line);
    record.push(b'\n');
    let written = f
        .write_all(&record)
        .and_then(|()| retry_interrupted(|| f.sync_data()));
    if written.is_err() {
        let _ = f.set_len(len);
    }
    written
}

/// The granularity of the timestamps the file system of `dir` keeps, measured once and cached
/// in `cache` (with the device it was measured on; another device is measured again). The
/// measure: set a probe file's mtime to a time just below a whole second (…001.999999999) and
/// read back what the file system kept; the loss, plus a nanosecond, is its granularity (1 ns
/// on ext4 with large inodes, xfs, tmpfs; 1 s on ext4 with 128-byte inodes; 2 s on FAT).
/// Unmeasurable (a read-only directory): 0, the racy window stays at its floor.
pub(crate) fn timestamp_granularity(dir: &Path, cache: &Path) -> std::time::Duration {
    use std::os::unix::fs::MetadataExt;
    use std::time::{Duration, UNIX_EPOCH};
    let Ok(dev) = std::fs::metadata(dir).map(|m| m.dev()) else {
        return Duration::ZERO;
    };
    let cached = crate::bounded::read_state(cache, 4096).ok().and_then(|t| {
        let (d, ns) = t.trim().split_once(' ')?;
        (d.parse::<u64>().ok()? == dev).then(|| ns.parse::<u64>().ok())?
    });
    if let Some(ns) = cached {
        return Duration::from_nanos(ns);
    }
    let probe = dir.join(format!(".clock-probe.tmp-{}", std::process::id()));
    let set = UNIX_EPOCH + Duration::new(1_000_000_001, 999_999_999);
    let kept = create_temp(&probe)
        .and_then(|f| {
            f.set_modified(set)?;
            f.metadata()
        })
        .map(|m| {
            let kept = Duration::new(
                u64::try_from(m.mtime()).unwrap_or(0),
                u32::try_from(m.mtime_nsec()).unwrap_or(0),
            );
            set.duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .saturating_sub(kept)
        });
    let _ = std::fs::remove_file(&probe);
    let Ok(loss) = kept else {
        return Duration::ZERO;
    };
    let granularity = (loss + Duration::from_nanos(1)).min(Duration::from_secs(2));
    let _ = write_atomic(
        cache,
        format!("{dev} {}\n", granularity.as_nanos()).as_bytes(),
    );
    granularity
}

/// The PID in a [`write_atomic`] temp name (`.NAME.tmp-PID`): whose leftover it is.
pub(crate) fn temp_owner(name: &str) -> Option<u32> {
    let (_, pid) = name.strip_prefix('.')?.rsplit_once(".tmp-")?;
    pid.parse().ok()
}

/// Remove what other processes left in `dir` (a kill, a crash): each entry whose name `owner`
/// reads a PID from, not this process's, and for which `gone` (that PID and the entry) says
/// its writer has ended. Files and directories alike; best effort.
pub(crate) fn remove_left_behind(
    dir: &Path,
    owner: impl Fn(&str) -> Option<u32>,
    gone: impl Fn(u32, &std::fs::DirEntry) -> bool,
) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = owner(&name) else { continue };
        if pid == std::process::id() || !gone(pid, &e) {
            continue;
        }
        let _ = match e.file_type() {
            Ok(t) if t.is_dir() => std::fs::remove_dir_all(e.path()),
            _ => std::fs::remove_file(e.path()),
        };
    }
}

/// `Path::exists` for many paths that share directories, the way `make` stats: each name looked
/// up from its directory (kept open while paths stay in it), not walked again from `/`.
#[derive(Default)]
pub(crate) struct ExistsInDirs {
    dir: Option<(std::path::PathBuf, File)>,
}

impl ExistsInDirs {
    pub(crate) fn exists(&mut self, path: &Path) -> bool {
        use std::os::fd::AsRawFd;
        use std::os::unix::ffi::OsStrExt;
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return path.exists();
        };
        if self.dir.as_ref().is_none_or(|(d, _)| d != parent) {
            let opened = File::options()
                .read(true)
                .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
                .open(if parent.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    parent
                });
            match opened {
                Ok(f) => self.dir = Some((parent.to_path_buf(), f)),
                Err(_) => return path.exists(),
            }
        }
        let (_, dir) = self.dir.as_ref().expect("opened above");
        let Ok(name) = std::ffi::CString::new(name.as_bytes()) else {
            return false;
        };
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: a valid directory fd, a NUL-terminated name, and a buffer the call fills.
        unsafe { libc::fstatat(dir.as_raw_fd(), name.as_ptr(), st.as_mut_ptr(), 0) == 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_give_their_owner() {
        assert_eq!(temp_owner(".build.json.tmp-4242"), Some(4242));
        assert_eq!(temp_owner(".hashmemo.json.tmp-7"), Some(7));
        assert_eq!(temp_owner("build.json"), None);
        assert_eq!(temp_owner(".x.tmp-notapid"), None);
    }

    #[test]
    fn a_sync_a_signal_interrupts_is_retried_and_other_errors_are_not() {
        let mut interrupted = 3;
        let synced = retry_interrupted(|| {
            if interrupted > 0 {
                interrupted -= 1;
                Err(std::io::Error::from(std::io::ErrorKind::Interrupted))
            } else {
                Ok("synced")
            }
        });
        assert_eq!(synced.unwrap(), "synced");
        assert_eq!(interrupted, 0);
        let mut calls = 0;
        let full = retry_interrupted(|| -> std::io::Result<()> {
            calls += 1;
            Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
        });
        assert_eq!(full.unwrap_err().raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(calls, 1);
    }
}
