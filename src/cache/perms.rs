//! The caches' permissions at every level kiln creates or reads, not only their root: each
//! directory (`steps/`, `wheels/`, an entry, a staging directory, `cache-own/`) and each file
//! (`entry.json`, `outputs.tar`, a wheel, an own-store record, the signing key) must be owned by
//! this user or root and writable by no one else (the rule `paths::ensure_private` applies to
//! the root, ssh's for `~/.ssh`), or it is refused naming the path and the `chmod` that fixes it.
//! A level checked this way cannot be replaced by another user, so a chain checked from the root
//! down cannot be switched under kiln.
//!
//! What kiln creates is made so: directories [`DIR_MODE`] (0755: a shared cache is readable,
//! never writable, by others), files [`FILE_MODE`] (0644), less the umask; the records of a
//! state's own stores 0700/0600 (they live in the private state directory).

use std::fs::Metadata;
use std::path::Path;

use crate::error::{Error, Result};

/// The mode of every directory kiln creates in a cache (less the umask).
pub(crate) const DIR_MODE: u32 = 0o755;
/// The mode of every file kiln writes in a cache (less the umask).
pub(crate) const FILE_MODE: u32 = 0o644;

/// Why `path` (whose metadata, not followed, is `meta`) is not safe to read from a cache: a
/// symlink, owned by another user, or writable by its group or everyone; with what to do.
pub(crate) fn unsafe_because(path: &Path, meta: &Metadata) -> Option<String> {
    if meta.file_type().is_symlink() {
        return Some(format!(
            "{} is a symlink, and kiln reads its caches only through what it laid out \
             (hint: remove it, then run again)",
            path.display()
        ));
    }
    let why = crate::paths::not_private(meta)?;
    let why = why.strip_prefix("it ").unwrap_or(&why);
    Some(format!(
        "{} {why}: another user could have changed what kiln would read (hint: if its \
         content is yours, `chmod go-w {}` and `chown $(id -u) {}`; else remove it)",
        path.display(),
        path.display(),
        path.display()
    ))
}

/// [`unsafe_because`] for directory `dir`, looked up without following a link; also refused
/// when it is not a directory. A missing directory is `Ok` (there is nothing to read).
pub(crate) fn check_dir(dir: &Path) -> std::result::Result<(), String> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) => {
            if let Some(why) = unsafe_because(dir, &meta) {
                return Err(why);
            }
            if !meta.is_dir() {
                return Err(format!("{} is not a directory", dir.display()));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("cannot read {}: {e}", dir.display())),
    }
}

/// Every level of the cache directory `root` (one of `steps/`, `wheels/`): itself, each entry
/// or staging directory in it and each file or directory directly in those, refused at the
/// first that another user owns or could write. What `kiln cache ls|gc|export|push` check
/// before they read or remove anything. A symlink is no permission problem here (its own mode
/// means nothing; no read follows it, and gc drops an entry that holds one).
pub(crate) fn check_tree(root: &Path) -> Result<()> {
    let refuse = |why: String| {
        let (message, hint) = match why.split_once(" (hint: ") {
            Some((m, h)) => (m.to_string(), Some(h.trim_end_matches(')').to_string())),
            None => (why, None),
        };
        Error::other(format!("refusing the cache: {message}"), hint)
    };
    check_dir(root).map_err(refuse)?;
    let Ok(entries) = std::fs::read_dir(root) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            continue;
        }
        if let Some(why) = unsafe_because(&path, &meta) {
            return Err(refuse(why));
        }
        if !meta.is_dir() {
            continue;
        }
        for inner in std::fs::read_dir(&path).into_iter().flatten().flatten() {
            let p = inner.path();
            if let Some(why) = std::fs::symlink_metadata(&p)
                .ok()
                .filter(|m| !m.file_type().is_symlink())
                .and_then(|m| unsafe_because(&p, &m))
            {
                return Err(refuse(why));
            }
        }
    }
    Ok(())
}

/// Create directory `dir` and its missing parents with [`DIR_MODE`] (less the umask).
pub(crate) fn create_dir(dir: &Path) -> Result<()> {
    create_dir_with(dir, DIR_MODE)
}

/// [`create_dir`] with `mode`.
pub(crate) fn create_dir_with(dir: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)
        .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))
}

/// Write `bytes` to `path` atomically with `mode` (less the umask): a temp file with a random
/// name beside it (two containers of one pid writing one entry never share one), synced,
/// renamed over `path`, the directory synced.
pub(crate) fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut random = [0u8; 12];
    super::random_bytes(&mut random).map_err(|e| Error::io("cannot name a temp file", e))?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.tmp-{}", crate::hash::hex(&random)));
    let ctx = |e| Error::io(format!("cannot write {}", path.display()), e);
    let written = std::fs::File::options()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| crate::fs::sync_file(&f)))
        .and_then(|()| crate::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(ctx(e));
    }
    crate::fs::sync_dir(dir).map_err(ctx)
}

/// A new file `path` for writing with [`FILE_MODE`] (less the umask), never through a link or
/// onto a file that is there.
pub(crate) fn create_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::File::options()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}
