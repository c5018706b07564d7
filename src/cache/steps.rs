//! The step cache: a step's outputs archived after it succeeded, restored instead of running it
//! when the same [`StepKey`] is asked for on any state directory.
//!
//! The layout follows the wheel cache's (this module owns it): `<cache>/steps/<id>/entry.json`
//! (a [`StepEntry`]: the key, the manifest) and `outputs.tar`, where `<id>` is
//! [`super::wheels::key_id`] of the key. An entry directory appears by rename from a `.staging-*`
//! directory, so it is whole or absent.
//!
//! In the archive, output `i` (the step's `outputs`, in order) is the path `i` (a file) or the
//! directory `i/`. Every file's sha256 and mode, every directory and symlink are in the manifest;
//! a symlink is kept only when it resolves inside its own output, and a restore lays the archive
//! out without following any link it made ([`super::layout`]), so it never writes or links
//! outside the declared outputs. Hard links are stored as copies. Only what the step wrote is
//! stored ([`super::pack`]); a restore merges it into an output that is there, deleting nothing.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::entry::FORMAT;
pub(crate) use super::entry::{NotStored, StepEntry, StepKey};
use crate::error::{Error, Result};
use crate::fs::create_dir;
use crate::hash::sha256_reader;

/// The largest archive one step may store (bytes): a bigger output is not cached.
pub(crate) const MAX_ENTRY_BYTES: u64 = 64 << 30;

const ARCHIVE: &str = "outputs.tar";

/// The step cache under one directory (`StatePaths::steps`).
pub(crate) struct StepCache {
    pub(crate) root: PathBuf,
    /// Whom it trusts ([`super::trust`]): checked on restore, import and pull, and signing
    /// on store, export and push. `None`: listing and gc, which trust nothing.
    trust: Option<super::trust::Trust>,
}

/// The short form of an entry id that receipts and reports print.
pub(crate) fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

impl StepCache {
    pub(crate) fn new(root: &Path) -> Self {
        StepCache {
            root: root.to_path_buf(),
            trust: None,
        }
    }

    /// The step cache under `root`, with `trust`.
    pub(crate) fn with_trust(root: &Path, trust: super::trust::Trust) -> Self {
        StepCache {
            root: root.to_path_buf(),
            trust: Some(trust),
        }
    }

    /// Whether entry `id` may be used here ([`super::trust::Trust::check`]); always without a
    /// trust.
    fn trusted(&self, id: &str, entry: &StepEntry) -> std::result::Result<(), String> {
        self.trust.as_ref().map_or(Ok(()), |t| t.check(id, entry))
    }

    /// Sign entry `id` with the signing key, if one is set and this kiln trusts the entry (one it
    /// does not trust is carried unsigned, never laundered by a signature).
    pub(crate) fn sign_trusted(&self, id: &str) -> Result<()> {
        match &self.trust {
            Some(trust) => trust.sign_stored(id, &self.entry_dir(id), read_entry, write_entry),
            None => Ok(()),
        }
    }

    pub(crate) fn entry_dir(&self, id: &str) -> PathBuf {
        self.root.join(id)
    }

    /// A fresh, locked directory an entry `id` is written into before it is renamed into place
    /// ([`super::staging`]: unique across hosts, swept once its writer is gone).
    pub(crate) fn staging_dir(&self, id: &str) -> Result<super::staging::Staging> {
        super::staging::create(&self.root, id)
    }

    /// Whether an entry for `id` is here: a directory of its name, readable or not (its files
    /// and permissions are checked on restore, which says why it refuses one).
    pub(crate) fn has(&self, id: &str) -> bool {
        std::fs::symlink_metadata(self.entry_dir(id)).is_ok()
    }

    /// Whether entry `id` is here and passes a restore's checks short of reading its archive:
    /// its entry.json reads and matches its key, and this cache trusts it (what `kiln plan`
    /// promises as a restore).
    pub(crate) fn holds_trusted(&self, id: &str) -> bool {
        read_entry_checked(&self.entry_dir(id))
            .is_ok_and(|e| e.key.id() == id && self.trusted(id, &e).is_ok())
    }

    /// Archive `outputs` under `key`. An entry already there is kept. Outputs that cannot be
    /// cached (missing, a symlink out of its output, a device, too big) are `NotStored`.
    pub(crate) fn store(
        &self,
        key: &StepKey,
        recipe: &str,
        step: &str,
        outputs: &[PathBuf],
        portable: &[String],
        before: &super::pack::Before,
    ) -> Result<std::result::Result<String, NotStored>> {
        let id = key.id();
        let dir = self.entry_dir(&id);
        if read_entry(&dir).is_some() {
            return Ok(Ok(id));
        }
        let staging = self.staging_dir(&id)?;
        let result = (|| {
            let tar_path = staging.join(ARCHIVE);
            let file = super::perms::create_file(&tar_path)
                .map_err(|e| Error::io(format!("cannot create {}", tar_path.display()), e))?;
            let mut tar = tar::Builder::new(file);
            let mut manifest = BTreeMap::new();
            for (i, out) in outputs.iter().enumerate() {
                if let Err(why) = super::pack::add_output(&mut tar, out, i, before, &mut manifest)?
                {
                    return Ok(Err(why));
                }
            }
            let file = tar
                .into_inner()
                .map_err(|e| Error::io("cannot write the step archive", e))?;
            file.sync_all()
                .map_err(|e| Error::io("cannot write the step archive", e))?;
            drop(file);
            let (archive_sha256, size) = sha256_reader(
                File::open(&tar_path).map_err(|e| Error::io("cannot read the step archive", e))?,
            )
            .map_err(|e| Error::io("cannot read the step archive", e))?;
            if size > MAX_ENTRY_BYTES {
                return Ok(Err(NotStored(format!(
                    "its outputs are {} (the step cache stores at most {})",
                    crate::units::format_size(size),
                    crate::units::format_size(MAX_ENTRY_BYTES)
                ))));
            }
            let entry = StepEntry {
                key: key.clone(),
                recipe: recipe.into(),
                step: step.into(),
                outputs: portable.to_vec(),
                manifest,
                archive_sha256,
                size,
                created_unix: now_unix(),
                signatures: Vec::new(),
            };
            let mut entry = entry;
            if let Some(trust) = &self.trust {
                trust.sign(&id, &mut entry);
            }
            write_entry(&staging, &entry)?;
            match std::fs::rename(&staging, &dir) {
                Ok(()) => {
                    if let Some(trust) = &self.trust {
                        trust.record_own(&id, &entry)?;
                    }
                    Ok(Ok(id.clone()))
                }
                // Another kiln stored the same entry meanwhile.
                Err(_) if read_entry(&dir).is_some() => Ok(Ok(id.clone())),
                Err(e) => Err(Error::io(format!("cannot store {}", dir.display()), e)),
            }
        })();
        let _ = std::fs::remove_dir_all(&staging);
        result
    }

    /// Restore entry `id` onto `outputs`: verified file by file against the manifest into a
    /// temporary sibling of each output, synced, then renamed into place. On any error nothing
    /// of the entry is left beside the outputs.
    pub(crate) fn restore(&self, id: &str, outputs: &[PathBuf]) -> Result<StepEntry> {
        let dir = self.entry_dir(id);
        let corrupt = |why: String| {
            Error::other(
                format!("step cache entry {} is refused: {why}", short(id)),
                Some(format!(
                    "nothing was restored; the step runs instead (`kiln cache gc` drops bad entries: {})",
                    dir.display()
                )),
            )
        };
        let entry = read_entry_checked(&dir).map_err(corrupt)?;
        if entry.key.id() != id {
            return Err(corrupt("its entry.json does not match its key".into()));
        }
        if let Err(why) = self.trusted(id, &entry) {
            // Said as a warning (the step runs instead): the way out goes in the message.
            return Err(Error::other(
                format!(
                    "step cache entry {} is refused: {why}; nothing was restored, the step runs \
                     instead (hint: {})",
                    short(id),
                    super::trust::hint()
                ),
                None,
            ));
        }
        if entry.outputs.len() != outputs.len() {
            return Err(corrupt(format!(
                "it holds {} outputs, the step declares {}",
                entry.outputs.len(),
                outputs.len()
            )));
        }
        let archive = dir.join(ARCHIVE);
        // A regular file, read no further than the size the entry states (a link to
        // /dev/zero or a FIFO is refused, never read without end).
        let (sha, size) = super::open_regular(&archive)
            .and_then(|(f, _)| {
                sha256_reader(std::io::BufReader::new(
                    f.take(entry.size.saturating_add(1)),
                ))
            })
            .map_err(|e| corrupt(format!("cannot read {ARCHIVE}: {e}")))?;
        if sha != entry.archive_sha256 || size != entry.size {
            return Err(corrupt(format!(
                "{ARCHIVE} has sha256 {sha} ({size} bytes), the entry says {} ({} bytes)",
                entry.archive_sha256, entry.size
            )));
        }
        let temps: Vec<PathBuf> = outputs.iter().map(|o| restore_temp(o)).collect();
        let result = (|| {
            for out in outputs {
                remove_left_restores(out);
                if let Some(parent) = out.parent() {
                    create_dir(parent)?;
                }
            }
            super::layout::unpack(&archive, &entry, &temps).map_err(corrupt)?;
            super::layout::sync(&temps)
                .map_err(|e| Error::io("cannot sync the restored outputs", e))?;
            kill_point("unpacked");
            for (i, out) in outputs.iter().enumerate() {
                if let Some((path, is, wants)) = super::layout::conflict(&entry.manifest, i, out) {
                    return Err(in_the_way(&path, is, wants));
                }
            }
            for (out, temp) in outputs.iter().zip(&temps) {
                super::layout::place(temp, out)?;
                kill_point("replaced");
            }
            Ok(())
        })();
        if result.is_err() {
            for t in &temps {
                remove_any(t);
            }
        }
        result.map(|()| entry)
    }

    /// The ids of the entries here whose entry.json reads (export takes these).
    pub(crate) fn list(&self) -> Vec<String> {
        let mut ids: Vec<String> = std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let entry = read_entry(&e.path())?;
                (entry.key.id() == name).then_some(name)
            })
            .collect();
        ids.sort();
        ids
    }

    /// The files of entry `id` an export carries, by name inside the entry.
    pub(crate) fn entry_files(&self, id: &str) -> [(&'static str, PathBuf); 2] {
        let dir = self.entry_dir(id);
        [
            ("entry.json", dir.join("entry.json")),
            (ARCHIVE, dir.join(ARCHIVE)),
        ]
    }

    /// Check an imported entry directory `staged` (named by its id): its entry.json matches
    /// its key, its archive its sha256 and size. Its id.
    pub(crate) fn verify_staged(staged: &Path) -> std::result::Result<String, String> {
        let name = staged
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let entry = read_entry(staged)
            .ok_or_else(|| format!("step entry {name}: no readable entry.json"))?;
        if entry.key.id() != name {
            return Err(format!("step entry {name} does not match its key"));
        }
        super::layout::verify(&staged.join(ARCHIVE), &entry)
            .map_err(|why| format!("step entry {name}: {why}"))?;
        Ok(name)
    }

    /// [`Self::verify_staged`], then whether this cache trusts the entry. Its id.
    pub(crate) fn check_staged(&self, staged: &Path) -> std::result::Result<String, String> {
        let name = Self::verify_staged(staged)?;
        let entry = read_entry(staged).ok_or("no readable entry.json")?;
        self.trusted(&name, &entry).map_err(|why| {
            format!(
                "step entry {} is refused: {why} (hint: {})",
                short(&name),
                super::trust::hint()
            )
        })?;
        Ok(name)
    }

    /// Move a verified imported entry directory in. `Ok(false)`: already here.
    pub(crate) fn insert_staged(&self, staged: &Path) -> std::result::Result<bool, String> {
        let name = self.check_staged(staged)?;
        if self.has(&name) {
            return Ok(false);
        }
        super::perms::create_dir(&self.root).map_err(|e| e.with_causes())?;
        match std::fs::rename(staged, self.entry_dir(&name)) {
            Ok(()) => Ok(true),
            Err(_) if self.has(&name) => Ok(false),
            Err(e) => Err(format!("cannot store step entry {name}: {e}")),
        }
    }

    /// Remove staging leftovers, unreadable or corrupt entries, and entries older than
    /// `max_age_secs` ([`super::gc::gc`]). Returns the removed directories with the reason.
    pub(crate) fn gc(&self, max_age_secs: Option<u64>) -> Result<Vec<(String, String)>> {
        super::perms::check_tree(&self.root)?;
        super::gc::gc(&self.root, max_age_secs, |path, name| {
            let entry = read_entry(path).ok_or("no readable entry.json")?;
            if entry.key.id() != name {
                return Err("its entry.json does not match its key".into());
            }
            super::layout::verify(&path.join(ARCHIVE), &entry)
                .map_err(|why| format!("archive missing or corrupt: {why}"))?;
            Ok(entry.created_unix)
        })
    }
}

/// The test kill switch: `KILN_TEST_RESTORE_KILL_AT=unpacked` (every output unpacked, none in
/// place) or `replaced` (the first output in place) makes a restore SIGKILL itself there, so a
/// test can stop it between two writes. Debug builds only (the ones `cargo test` drives).
#[cfg(debug_assertions)]
fn kill_point(name: &str) {
    if std::env::var("KILN_TEST_RESTORE_KILL_AT").is_ok_and(|at| at == name) {
        // SAFETY: a signal to this very process; SIGKILL cannot be caught, nothing runs after.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}

#[cfg(not(debug_assertions))]
fn kill_point(_: &str) {}

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The largest entry.json read (its manifest lists every output file).
pub(crate) const ENTRY_JSON_CAP: u64 = 64 << 20;

/// The entry.json of `dir` ([`read_entry_checked`]), `None` when it is refused.
pub(crate) fn read_entry(dir: &Path) -> Option<StepEntry> {
    read_entry_checked(dir).ok()
}

/// The entry.json of `dir`: a regular file of at most [`ENTRY_JSON_CAP`] bytes that parses, in
/// a directory that, as the one above it, no other user can change ([`super::perms`]). Why not.
pub(crate) fn read_entry_checked(dir: &Path) -> std::result::Result<StepEntry, String> {
    if let Some(above) = dir.parent() {
        super::perms::check_dir(above)?;
    }
    super::perms::check_dir(dir)?;
    let path = dir.join("entry.json");
    let bytes = super::read_regular(&path, ENTRY_JSON_CAP).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => "its entry.json is missing".to_string(),
        _ => format!("its entry.json is refused: {e}"),
    })?;
    let entry: StepEntry =
        serde_json::from_slice(&bytes).map_err(|e| format!("its entry.json does not read: {e}"))?;
    if entry.key.format != FORMAT {
        return Err(format!(
            "its format is `{}`, not {FORMAT}",
            super::printable(&entry.key.format)
        ));
    }
    Ok(entry)
}

fn write_entry(dir: &Path, entry: &StepEntry) -> Result<()> {
    super::perms::write_file(
        &dir.join("entry.json"),
        &serde_json::to_vec_pretty(entry).expect("entries serialize"),
        super::perms::FILE_MODE,
    )
}

/// The refusal of a restore onto an output where `path` is `is` and the entry has `wants`:
/// merging would delete what is there.
fn in_the_way(path: &Path, is: &str, wants: &str) -> Error {
    Error::other(
        format!(
            "not restored: {} is {is}, where the cached entry has {wants}; a restore never \
             deletes what it did not lay out: move {} away to let it restore (nothing was \
             changed; the step runs instead)",
            path.display(),
            path.display()
        ),
        None,
    )
}

/// Where output `out` is unpacked before it is renamed into place.
fn restore_temp(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    out.with_file_name(format!(".{name}.kiln-restore-{}", std::process::id()))
}

/// Remove what a killed restore left beside `out`.
fn remove_left_restores(out: &Path) {
    let (Some(parent), Some(name)) = (out.parent(), out.file_name()) else {
        return;
    };
    let prefix = format!(".{}.kiln-restore-", name.to_string_lossy());
    for e in std::fs::read_dir(parent).into_iter().flatten().flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            remove_any(&e.path());
        }
    }
}

fn remove_any(path: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            let _ = std::fs::remove_dir_all(path);
        }
        Ok(_) => {
            let _ = std::fs::remove_file(path);
        }
        Err(_) => {}
    }
}

#[cfg(test)]
#[path = "steps_pins.rs"]
mod pins;
