//! Staging directories of both caches, safe on a cache many hosts and containers share: a name
//! with 128 random bits, created exclusively (`mkdir` fails on a name that is there), and an
//! exclusive `flock` on the directory held for as long as its writer lives. A staging directory
//! whose lock can be taken has lost its writer (killed, crashed): the next insert into the same
//! cache, and `kiln cache gc`, remove it; one whose lock is held is never touched.
//!
//! To leave no moment where a new staging directory exists unlocked under a name the sweep
//! looks at, it is made as `.claim-RANDOM`, locked, then renamed to `.staging-…` (a rename keeps
//! the inode, and so the lock). A `.claim-*` left by a kill between two syscalls is swept once
//! it is a minute old.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The prefix of every staging directory's name.
pub(crate) const PREFIX: &str = ".staging-";
const CLAIM: &str = ".claim-";

/// A staging directory this process holds (its lock goes with the value).
#[derive(Debug)]
pub(crate) struct Staging {
    path: PathBuf,
    _lock: File,
}

impl std::ops::Deref for Staging {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for Staging {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

/// 16 random bytes as hex.
fn random_hex() -> Result<String> {
    let mut b = [0u8; 16];
    super::random_bytes(&mut b)
        .map_err(|e| Error::io("cannot name a staging directory (getrandom)", e))?;
    Ok(crate::hash::hex(&b))
}

/// Take `dir`'s exclusive lock without waiting: `Ok(Some(file))` holding it, `Ok(None)` when
/// another process holds it.
fn try_lock(dir: &Path) -> std::io::Result<Option<File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = File::options()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)?;
    // SAFETY: a descriptor `f` holds open.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(Some(f));
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(None)
    } else {
        Err(e)
    }
}

/// Whether a live process holds staging directory `dir`.
pub(crate) fn is_held(dir: &Path) -> bool {
    matches!(try_lock(dir), Ok(None))
}

/// A new staging directory `<root>/.staging-<what>-<random>`, locked; what killed writers left
/// in `root` is swept first.
pub(crate) fn create(root: &Path, what: &str) -> Result<Staging> {
    super::perms::create_dir(root)?;
    sweep(root);
    let ctx = |p: &Path, e| Error::io(format!("cannot create {}", p.display()), e);
    let random = random_hex()?;
    let claim = root.join(format!("{CLAIM}{random}"));
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(super::perms::DIR_MODE)
            .create(&claim)
            .map_err(|e| ctx(&claim, e))?;
    }
    let lock = match try_lock(&claim) {
        Ok(Some(f)) => f,
        Ok(None) => {
            return Err(ctx(
                &claim,
                std::io::Error::other("locked by another process"),
            ))
        }
        Err(e) => return Err(ctx(&claim, e)),
    };
    let path = root.join(format!("{PREFIX}{what}-{random}"));
    if let Err(e) = crate::fs::rename(&claim, &path) {
        let _ = std::fs::remove_dir(&claim);
        return Err(ctx(&path, e));
    }
    Ok(Staging { path, _lock: lock })
}

/// Remove the staging directories in `root` no live process holds (and `.claim-*` a minute
/// old); what was removed.
pub(crate) fn sweep(root: &Path) -> Vec<String> {
    let mut removed = Vec::new();
    for e in std::fs::read_dir(root).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let path = e.path();
        let stale = if name.starts_with(PREFIX) {
            !is_held(&path)
        } else if name.starts_with(CLAIM) {
            std::fs::symlink_metadata(&path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age.as_secs() > 60)
                && !is_held(&path)
        } else {
            false
        };
        if stale && std::fs::remove_dir_all(&path).is_ok() {
            removed.push(name);
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_stagings_of_one_entry_in_one_process_never_share_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let a = create(dir.path(), "id").unwrap();
        std::fs::write(a.join("outputs.tar"), b"a").unwrap();
        let b = create(dir.path(), "id").unwrap();
        assert_ne!(*a, *b);
        assert_eq!(std::fs::read(a.join("outputs.tar")).unwrap(), b"a");
        assert!(is_held(&a) && is_held(&b));
    }

    /// The step cache's own staging (pid-named before: a second store of one entry in the same
    /// process, or in another container with the same pid, took over the first's directory).
    #[test]
    fn two_stores_of_one_step_entry_never_share_a_staging_dir() {
        let dir = tempfile::tempdir().unwrap();
        let cache = crate::cache::steps::StepCache::new(dir.path());
        let a = cache.staging_dir("id").unwrap();
        let a: &Path = a.as_ref();
        std::fs::write(a.join("outputs.tar"), b"a").unwrap();
        let b = cache.staging_dir("id").unwrap();
        assert_ne!(a, AsRef::<Path>::as_ref(&b));
        assert_eq!(std::fs::read(a.join("outputs.tar")).unwrap(), b"a");
    }

    #[test]
    fn a_sweep_removes_only_what_no_live_process_holds() {
        let dir = tempfile::tempdir().unwrap();
        let live = create(dir.path(), "id").unwrap();
        let dead = dir.path().join(format!("{PREFIX}id-killed"));
        std::fs::create_dir(&dead).unwrap();
        std::fs::write(dead.join("outputs.tar"), b"x").unwrap();
        assert_eq!(sweep(dir.path()), [format!("{PREFIX}id-killed")]);
        assert!(live.is_dir() && !dead.exists());
    }
}
