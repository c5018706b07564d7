//! What kiln remembers about applied patch sets, in `<state>/patches/`: one record per (set,
//! site-packages) with each file's original and patched sha256, content-addressed backups, and
//! the journal of an apply in progress (see [`super::journal`]).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fs::write_atomic;
use crate::hash::sha256_bytes;
use crate::paths::StatePaths;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub set: String,
    pub site_packages: PathBuf,
    pub package: String,
    pub version: String,
    pub files: Vec<FileRecord>,
    pub applied_unix: u64,
    pub kiln_version: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    /// Relative to site-packages.
    pub path: String,
    pub original_sha256: String,
    pub patched_sha256: String,
    pub patches: Vec<String>,
}

pub struct Store {
    root: PathBuf,
}

impl Store {
    pub fn new(paths: &StatePaths) -> Store {
        Store {
            root: paths.patches(),
        }
    }

    /// `SET-KEY.json`: KEY names the site-packages directory (its canonical path's sha256).
    fn file_name(set: &str, site: &Path) -> String {
        let site = site.canonicalize().unwrap_or_else(|_| site.to_path_buf());
        let key = &sha256_bytes(site.as_os_str().as_encoded_bytes())[..16];
        format!("{set}-{key}.json")
    }

    fn record_path(&self, set: &str, site: &Path) -> PathBuf {
        self.root.join("records").join(Self::file_name(set, site))
    }

    /// The journal of an apply of `set` on `site` in progress.
    pub(super) fn journal_path(&self, set: &str, site: &Path) -> PathBuf {
        self.root.join("journal").join(Self::file_name(set, site))
    }

    pub fn load(&self, set: &str, site: &Path) -> Result<Option<Record>> {
        let path = self.record_path(set, site);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                Error::other(
                    format!("patch record {} is damaged: {e}", path.display()),
                    Some(
                        "restore the files by reinstalling the package, then delete the record"
                            .into(),
                    ),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(format!("cannot read {}", path.display()), e)),
        }
    }

    pub fn save(&self, record: &Record) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(record).expect("a record serializes");
        write_atomic(
            &self.record_path(&record.set, &record.site_packages),
            &bytes,
        )?;
        super::kill_switch::write_point();
        Ok(())
    }

    pub fn remove(&self, set: &str, site: &Path) -> Result<()> {
        let path = self.record_path(set, site);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::io(format!("cannot remove {}", path.display()), e))
            }
            _ => Ok(()),
        }
    }

    /// Keep a copy of `bytes` under their sha256 (written once, atomically); returns the sha256.
    pub fn backup(&self, bytes: &[u8]) -> Result<String> {
        let sha = sha256_bytes(bytes);
        let path = self.root.join("backups").join(&sha);
        if !path.exists() {
            write_atomic(&path, bytes)?;
            super::kill_switch::write_point();
        }
        Ok(sha)
    }

    /// A backup's bytes, verified against their sha256.
    pub fn read_backup(&self, sha: &str) -> Result<Vec<u8>> {
        let path = self.root.join("backups").join(sha);
        let bytes = std::fs::read(&path)
            .map_err(|e| Error::io(format!("cannot read backup {}", path.display()), e))?;
        if sha256_bytes(&bytes) != sha {
            return Err(Error::other(
                format!("backup {} does not match its sha256", path.display()),
                Some("the state directory was damaged; reinstall the package to get the original files back".into()),
            ));
        }
        Ok(bytes)
    }
}

/// Replace a file's content atomically (a temp file created new, fsynced, renamed over it,
/// the directory fsynced), keeping its permissions.
pub fn write_preserving(path: &Path, bytes: &[u8]) -> Result<()> {
    let ctx = |e| Error::io(format!("cannot write {}", path.display()), e);
    let permissions = std::fs::metadata(path).map_err(ctx)?.permissions();
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.kiln-{}", std::process::id()));
    // A temp file of an earlier process with this pid (killed) is ours to replace; those of
    // other kiln processes that are gone (a revert killed mid-write) go too.
    let _ = std::fs::remove_file(&tmp);
    remove_dead_temps(path);
    let result = (|| {
        let mut f = crate::fs::create_new(&tmp)?;
        f.write_all(bytes)?;
        f.set_permissions(permissions)?;
        crate::fs::sync_file(&f)?;
        super::kill_switch::write_point();
        crate::fs::rename(&tmp, path)?;
        crate::fs::sync_dir(dir)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(ctx)?;
    super::kill_switch::write_point();
    Ok(())
}

/// Remove `.NAME.kiln-PID` beside `path` (`NAME`) where no process `PID` exists any more: the
/// temp file of a [`write_preserving`] that was killed before its rename. Only regular files of
/// exactly that name (kiln's own naming) are removed; a live process's temp file is left alone.
pub(super) fn remove_dead_temps(path: &Path) {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let prefix = format!(".{name}.kiln-");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(pid) = file
            .to_str()
            .and_then(|f| f.strip_prefix(&prefix))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let regular = entry.file_type().is_ok_and(|t| t.is_file());
        if regular && pid != std::process::id() && !crate::process::pid_exists(pid) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Remove compiled caches of `file` (`__pycache__/<stem>.*.pyc`); returns how many were removed.
pub fn remove_pycache(file: &Path) -> Result<usize> {
    let (Some(dir), Some(stem)) = (file.parent(), file.file_stem()) else {
        return Ok(0);
    };
    let cache = dir.join("__pycache__");
    let prefix = format!("{}.", stem.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(&cache) else {
        return Ok(0);
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(&prefix) && name.ends_with(".pyc") {
            std::fs::remove_file(entry.path())
                .map_err(|e| Error::io(format!("cannot remove {}", entry.path().display()), e))?;
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backups_are_verified_and_pycache_is_scoped() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(&StatePaths::new(dir.path().to_path_buf(), None));
        let sha = store.backup(b"x = 1\n").unwrap();
        assert_eq!(store.read_backup(&sha).unwrap(), b"x = 1\n");
        std::fs::write(dir.path().join("patches/backups").join(&sha), b"tampered").unwrap();
        assert!(store
            .read_backup(&sha)
            .unwrap_err()
            .to_string()
            .contains("does not match its sha256"));

        let cache = dir.path().join("pkg/__pycache__");
        std::fs::create_dir_all(&cache).unwrap();
        for f in [
            "mod.cpython-311.pyc",
            "mod.cpython-312.opt-1.pyc",
            "module.cpython-311.pyc",
        ] {
            std::fs::write(cache.join(f), b"").unwrap();
        }
        assert_eq!(remove_pycache(&dir.path().join("pkg/mod.py")).unwrap(), 2);
        assert!(cache.join("module.cpython-311.pyc").exists());
    }
}
