//! The intent journal that makes `kiln patch apply` survive a kill at any point.
//!
//! Before the first file of a site-packages directory is touched, apply writes (and fsyncs)
//! `<state>/patches/journal/<set>-<site key>.json`: which files it is about to replace, the
//! sha256 of each one's current bytes and of its new bytes (the current bytes are already in
//! `backups/<sha256>`), and the set's record as it was before. Each file is then replaced by
//! an atomic rename; the record is written; the journal is removed last. So at every moment
//! either no journal exists and the files and the record agree, or the journal says exactly
//! how to put back the state before the apply: [`undo`] restores every file that is not at its
//! original bytes (it may be at its new bytes, or its temp file may be left beside it), then
//! the previous record, then removes the journal. `revert` and the next `apply` undo first;
//! `check` reports the interrupted apply and writes nothing.
//!
//! A test can stop an apply between any two writes: see `kill_switch`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::kill_switch;
use super::store::{self, Record, Store};
use crate::error::{Error, Result};
use crate::hash::sha256_bytes;

/// An apply in progress: enough to put every file back.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Journal {
    pub set: String,
    pub site_packages: PathBuf,
    /// The applying process (its temp files are `.NAME.kiln-PID`).
    pub pid: u32,
    pub files: Vec<Intent>,
    /// The set's record before this apply (`None`: there was none).
    pub previous: Option<Record>,
}

/// One file an apply is about to replace.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Intent {
    /// Relative to site-packages.
    pub path: String,
    /// Its bytes before the apply, kept in `backups/<original_sha256>`.
    pub original_sha256: String,
    pub patched_sha256: String,
}

/// The temp file [`store::write_preserving`] of process `pid` uses for `path`.
fn temp_of(path: &Path, pid: u32) -> PathBuf {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!(".{name}.kiln-{pid}"))
}

/// Write the journal durably (before any file is touched).
pub(super) fn begin(store: &Store, journal: &Journal) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(journal).expect("a journal serializes");
    crate::fs::write_atomic(
        &store.journal_path(&journal.set, &journal.site_packages),
        &bytes,
    )?;
    kill_switch::write_point();
    Ok(())
}

/// The apply is complete (files and record written): forget the journal, durably.
pub(super) fn finish(store: &Store, journal: &Journal) -> Result<()> {
    let path = store.journal_path(&journal.set, &journal.site_packages);
    remove_durably(&path)?;
    kill_switch::write_point();
    Ok(())
}

fn remove_durably(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(Error::io(format!("cannot remove {}", path.display()), e))
        }
        _ => {}
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    crate::fs::sync_dir(dir).map_err(|e| Error::io(format!("cannot sync {}", dir.display()), e))
}

/// The journal of an interrupted apply of `set` on `site`, if one is left.
pub(super) fn pending(store: &Store, set: &str, site: &Path) -> Result<Option<Journal>> {
    let path = store.journal_path(set, site);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            Error::other(
                format!("patch journal {} is damaged: {e}", path.display()),
                Some(
                    "reinstall the package to get its original files back, then delete the journal"
                        .into(),
                ),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(format!("cannot read {}", path.display()), e)),
    }
}

/// Put back the state before the interrupted apply `journal` describes: each file at its
/// original bytes, the previous record, no journal. Returns the files restored (relative to
/// site-packages). Safe to run again after a kill of its own.
pub(super) fn undo(store: &Store, journal: &Journal) -> Result<Vec<String>> {
    let site = &journal.site_packages;
    let mut restored = Vec::new();
    for f in &journal.files {
        let path = site.join(&f.path);
        let _ = std::fs::remove_file(temp_of(&path, journal.pid));
        let current = match std::fs::read(&path) {
            Ok(b) => Some(b),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io(format!("cannot read {}", path.display()), e)),
        };
        let sha = current.as_deref().map(sha256_bytes);
        if sha.as_deref() == Some(f.original_sha256.as_str()) {
            continue;
        }
        if sha.as_deref() != Some(f.patched_sha256.as_str()) {
            return Err(Error::other(
                format!(
                    "cannot finish the interrupted apply of patch set `{}`: {} is neither its original nor its patched content",
                    journal.set,
                    path.display()
                ),
                Some(format!(
                    "the file was changed by hand or by a reinstall since; reinstall the package, then delete {}",
                    store.journal_path(&journal.set, site).display()
                )),
            ));
        }
        let original = store.read_backup(&f.original_sha256)?;
        store::write_preserving(&path, &original)?;
        restored.push(f.path.clone());
    }
    match &journal.previous {
        Some(record) => store.save(record)?,
        None => store.remove(&journal.set, site)?,
    }
    remove_durably(&store.journal_path(&journal.set, site))?;
    Ok(restored)
}

/// What `check` says about an interrupted apply it does not repair.
pub(super) fn describe(journal: &Journal) -> String {
    format!(
        "an apply of this set by process {} was interrupted before it finished ({} files involved); `kiln patch revert {set}` restores the originals, `kiln patch apply {set}` applies it again (each with this command's --python or --site-packages)",
        journal.pid,
        journal.files.len(),
        set = crate::shell::quote(&journal.set)
    )
}

#[cfg(test)]
#[path = "journal_pins.rs"]
mod pins;
