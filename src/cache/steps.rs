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
//! a symlink is kept only when it points (relatively) inside its own output, so a restore never
//! writes or links outside the declared outputs. Hard links are stored as copies.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::wheels::key_id;
use crate::error::{Error, Result};
use crate::fs::{create_dir, write_atomic};
use crate::hash::sha256_reader;

/// The largest archive one step may store (bytes): a bigger output is not cached.
pub(crate) const MAX_ENTRY_BYTES: u64 = 64 << 30;

const FORMAT: &str = "kiln-step-v1";
const ARCHIVE: &str = "outputs.tar";

/// Everything a step's outputs depend on, with the state and cache directories written as
/// `${state}` and `${cache}` so that another state directory asks for the same key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StepKey {
    pub(crate) format: String,
    /// sha256 of the step's definition (kind, command, cwd, check, outputs), paths made portable.
    pub(crate) definition: String,
    /// Env var name → sha256 of its portable value.
    pub(crate) env: BTreeMap<String, String>,
    /// Portable input path → sha256 of its content.
    pub(crate) inputs: BTreeMap<String, String>,
    /// Dependency id → its step-cache key id (`skipped` for a step `when` left out).
    pub(crate) deps: BTreeMap<String, String>,
    /// `requires` tool → the version found on PATH (`missing`, `unknown`).
    pub(crate) tools: BTreeMap<String, String>,
    /// Host facts every build sees: `os`, `arch`, `libc`.
    pub(crate) host: BTreeMap<String, String>,
}

impl StepKey {
    pub(crate) fn new() -> Self {
        StepKey {
            format: FORMAT.into(),
            definition: String::new(),
            env: BTreeMap::new(),
            inputs: BTreeMap::new(),
            deps: BTreeMap::new(),
            tools: BTreeMap::new(),
            host: BTreeMap::new(),
        }
    }

    /// The entry id: [`key_id`] of this key.
    pub(crate) fn id(&self) -> String {
        key_id(self)
    }
}

impl Default for StepKey {
    fn default() -> Self {
        StepKey::new()
    }
}

/// What one archive path is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Item {
    File {
        sha256: String,
        size: u64,
        mode: u32,
    },
    Dir {
        mode: u32,
    },
    Symlink {
        target: String,
    },
}

/// entry.json of one cached step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StepEntry {
    pub(crate) key: StepKey,
    pub(crate) recipe: String,
    pub(crate) step: String,
    /// The outputs, portable (`${state}/work/…`), in the order of the archive's indexes.
    pub(crate) outputs: Vec<String>,
    /// Archive path → what it is.
    pub(crate) manifest: BTreeMap<String, Item>,
    pub(crate) archive_sha256: String,
    pub(crate) size: u64,
    pub(crate) created_unix: u64,
}

/// Why a step's outputs were not stored (a warning, never a failed step).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NotStored(pub(crate) String);

/// The step cache under one directory (`StatePaths::steps`).
pub(crate) struct StepCache {
    pub(crate) root: PathBuf,
}

/// The short form of an entry id that receipts and reports print.
pub(crate) fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

impl StepCache {
    pub(crate) fn new(root: &Path) -> Self {
        StepCache {
            root: root.to_path_buf(),
        }
    }

    pub(crate) fn entry_dir(&self, id: &str) -> PathBuf {
        self.root.join(id)
    }

    /// A fresh directory an entry `id` is written into before it is renamed into place (`kiln
    /// cache gc` removes what an interrupted insert left).
    pub(crate) fn staging_dir(&self, id: &str) -> Result<PathBuf> {
        create_dir(&self.root)?;
        let staging = self
            .root
            .join(format!(".staging-{id}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&staging);
        create_dir(&staging)?;
        Ok(staging)
    }

    /// Whether a complete entry for `id` is here (its files are verified on restore).
    pub(crate) fn has(&self, id: &str) -> bool {
        read_entry(&self.entry_dir(id)).is_some()
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
    ) -> Result<std::result::Result<String, NotStored>> {
        let id = key.id();
        let dir = self.entry_dir(&id);
        if read_entry(&dir).is_some() {
            return Ok(Ok(id));
        }
        let staging = self.staging_dir(&id)?;
        let result = (|| {
            let tar_path = staging.join(ARCHIVE);
            let file = File::create(&tar_path)
                .map_err(|e| Error::io(format!("cannot create {}", tar_path.display()), e))?;
            let mut tar = tar::Builder::new(file);
            let mut manifest = BTreeMap::new();
            for (i, out) in outputs.iter().enumerate() {
                if let Err(why) = add_output(&mut tar, out, &i.to_string(), &mut manifest)? {
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
            };
            write_entry(&staging, &entry)?;
            match std::fs::rename(&staging, &dir) {
                Ok(()) => Ok(Ok(id.clone())),
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
        let entry = read_entry(&dir)
            .ok_or_else(|| corrupt("its entry.json is missing or unreadable".into()))?;
        if entry.key.id() != id {
            return Err(corrupt("its entry.json does not match its key".into()));
        }
        if entry.outputs.len() != outputs.len() {
            return Err(corrupt(format!(
                "it holds {} outputs, the step declares {}",
                entry.outputs.len(),
                outputs.len()
            )));
        }
        let archive = dir.join(ARCHIVE);
        let (sha, size) = File::open(&archive)
            .and_then(sha256_reader)
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
            unpack(&archive, &entry, &temps).map_err(corrupt)?;
            kill_point("unpacked");
            for (out, temp) in outputs.iter().zip(&temps) {
                replace(temp, out)?;
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
        let (sha, size) = File::open(staged.join(ARCHIVE))
            .and_then(sha256_reader)
            .map_err(|e| format!("step entry {name}: cannot read {ARCHIVE}: {e}"))?;
        if sha != entry.archive_sha256 || size != entry.size {
            return Err(format!(
                "step entry {name}: {ARCHIVE} has sha256 {sha} ({size} bytes), the entry says {} ({} bytes)",
                entry.archive_sha256, entry.size
            ));
        }
        Ok(name)
    }

    /// Move a verified imported entry directory in. `Ok(false)`: already here.
    pub(crate) fn insert_staged(&self, staged: &Path) -> std::result::Result<bool, String> {
        let name = Self::verify_staged(staged)?;
        if self.has(&name) {
            return Ok(false);
        }
        create_dir(&self.root).map_err(|e| e.with_causes())?;
        match std::fs::rename(staged, self.entry_dir(&name)) {
            Ok(()) => Ok(true),
            Err(_) if self.has(&name) => Ok(false),
            Err(e) => Err(format!("cannot store step entry {name}: {e}")),
        }
    }

    /// Remove staging leftovers, unreadable or corrupt entries, and entries older than
    /// `max_age_secs` ([`super::gc::gc`]). Returns the removed directories with the reason.
    pub(crate) fn gc(&self, max_age_secs: Option<u64>) -> Result<Vec<(String, String)>> {
        super::gc::gc(&self.root, max_age_secs, |path, name| {
            let entry = read_entry(path).ok_or("no readable entry.json")?;
            let sha = File::open(path.join(ARCHIVE))
                .and_then(sha256_reader)
                .ok()
                .map(|(s, _)| s);
            if sha.as_deref() != Some(entry.archive_sha256.as_str()) || entry.key.id() != name {
                return Err("archive missing or corrupt");
            }
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

pub(crate) fn read_entry(dir: &Path) -> Option<StepEntry> {
    let entry: StepEntry =
        serde_json::from_slice(&std::fs::read(dir.join("entry.json")).ok()?).ok()?;
    (entry.key.format == FORMAT).then_some(entry)
}

fn write_entry(dir: &Path, entry: &StepEntry) -> Result<()> {
    write_atomic(
        &dir.join("entry.json"),
        &serde_json::to_vec_pretty(entry).expect("entries serialize"),
    )
}

/// Append output `out` to the archive as `name` (and `name/…`), recording the manifest.
fn add_output<W: Write>(
    tar: &mut tar::Builder<W>,
    out: &Path,
    name: &str,
    manifest: &mut BTreeMap<String, Item>,
) -> Result<std::result::Result<(), NotStored>> {
    let Ok(meta) = std::fs::symlink_metadata(out) else {
        return Ok(Err(NotStored(format!(
            "output {} is not there",
            out.display()
        ))));
    };
    if meta.is_file() {
        return add_file(tar, out, name, &meta, manifest).map(Ok);
    }
    if !meta.is_dir() {
        return Ok(Err(NotStored(format!(
            "output {} is not a regular file or directory",
            out.display()
        ))));
    }
    let mut stack = vec![(out.to_path_buf(), name.to_string(), 0usize)];
    while let Some((path, rel, depth)) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path)
            .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
        let kind = meta.file_type();
        if kind.is_dir() {
            let mode = meta.permissions().mode() & 0o7777;
            append_header(tar, &rel, tar::EntryType::Directory, mode, 0, None)?;
            manifest.insert(rel.clone(), Item::Dir { mode });
            let mut children: Vec<_> = std::fs::read_dir(&path)
                .map_err(|e| Error::io(format!("cannot list {}", path.display()), e))?
                .flatten()
                .map(|e| e.file_name())
                .collect();
            children.sort();
            for c in children.into_iter().rev() {
                let Some(c_name) = c.to_str() else {
                    return Ok(Err(NotStored(format!(
                        "{} has a file name that is not UTF-8",
                        path.display()
                    ))));
                };
                stack.push((path.join(&c), format!("{rel}/{c_name}"), depth + 1));
            }
        } else if kind.is_file() {
            add_file(tar, &path, &rel, &meta, manifest)?;
        } else if kind.is_symlink() {
            let target = std::fs::read_link(&path)
                .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
            let target_text = target.to_string_lossy().into_owned();
            if !link_stays_inside(&rel, &target_text) {
                return Ok(Err(NotStored(format!(
                    "{} links to {target_text}, outside the output {}",
                    path.display(),
                    out.display()
                ))));
            }
            append_header(tar, &rel, tar::EntryType::Symlink, 0o777, 0, Some(&target))?;
            manifest.insert(
                rel,
                Item::Symlink {
                    target: target_text,
                },
            );
        } else {
            return Ok(Err(NotStored(format!(
                "{} is a special file (socket, FIFO or device)",
                path.display()
            ))));
        }
    }
    Ok(Ok(()))
}

fn add_file<W: Write>(
    tar: &mut tar::Builder<W>,
    path: &Path,
    rel: &str,
    meta: &std::fs::Metadata,
    manifest: &mut BTreeMap<String, Item>,
) -> Result<()> {
    let ctx = |e| Error::io(format!("cannot read {}", path.display()), e);
    let (sha256, size) = File::open(path).and_then(sha256_reader).map_err(ctx)?;
    let mode = meta.permissions().mode() & 0o777;
    let mut header = header(tar::EntryType::Regular, mode, size);
    let file = File::open(path).map_err(ctx)?;
    tar.append_data(&mut header, rel, file.take(size))
        .map_err(|e| Error::io("cannot write the step archive", e))?;
    manifest.insert(rel.to_string(), Item::File { sha256, size, mode });
    Ok(())
}

fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_mtime(0);
    h
}

fn append_header<W: Write>(
    tar: &mut tar::Builder<W>,
    rel: &str,
    kind: tar::EntryType,
    mode: u32,
    size: u64,
    link: Option<&Path>,
) -> Result<()> {
    let mut h = header(kind, mode, size);
    let written = match link {
        Some(target) => tar.append_link(&mut h, rel, target),
        None => tar.append_data(&mut h, rel, std::io::empty()),
    };
    written.map_err(|e| Error::io("cannot write the step archive", e))
}

/// Whether a symlink at archive path `rel` pointing at `target` stays inside its output (the
/// first component of `rel`): a relative target that never climbs above it.
pub(crate) fn link_stays_inside(rel: &str, target: &str) -> bool {
    if target.is_empty() || target.starts_with('/') {
        return false;
    }
    // The link's own directory, below the output root.
    let mut depth = rel.split('/').count().saturating_sub(2) as i64;
    if rel.split('/').count() < 2 {
        return false; // the output itself may not be a link
    }
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            _ => depth += 1,
        }
    }
    true
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

/// Unpack the archive onto `temps` (temp `i` for output `i`), each path checked against the
/// manifest; every file synced. The reason on refusal.
fn unpack(archive: &Path, entry: &StepEntry, temps: &[PathBuf]) -> std::result::Result<(), String> {
    let file = File::open(archive).map_err(|e| e.to_string())?;
    let mut tar = tar::Archive::new(file);
    let mut seen = std::collections::BTreeSet::new();
    let mut dirs = Vec::new();
    for item in tar.entries().map_err(|e| e.to_string())? {
        let mut item = item.map_err(|e| format!("the archive is truncated or damaged: {e}"))?;
        let path = item.path().map_err(|e| e.to_string())?.into_owned();
        let mut parts = path.components();
        let Some(Component::Normal(first)) = parts.next() else {
            return Err(format!(
                "archive path `{}` is not inside an output",
                path.display()
            ));
        };
        if !path.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(format!(
                "archive path `{}` is absolute or climbs with `..`",
                path.display()
            ));
        }
        let index: usize = first
            .to_str()
            .and_then(|s| s.parse().ok())
            .filter(|i| *i < temps.len())
            .ok_or_else(|| format!("archive path `{}` names no declared output", path.display()))?;
        let rel = path.to_string_lossy().into_owned();
        let Some(expected) = entry.manifest.get(&rel) else {
            return Err(format!("`{rel}` is in the archive but not in the manifest"));
        };
        if !seen.insert(rel.clone()) {
            return Err(format!("`{rel}` appears twice"));
        }
        let rest: PathBuf = parts.collect();
        let target = if rest.as_os_str().is_empty() {
            temps[index].clone()
        } else {
            temps[index].join(rest)
        };
        let kind = item.header().entry_type();
        match expected {
            Item::Dir { mode } if kind.is_dir() => {
                std::fs::create_dir(&target).map_err(|e| format!("cannot create `{rel}`: {e}"))?;
                dirs.push((target, *mode));
            }
            Item::File { sha256, size, mode } if kind.is_file() => {
                if item.header().size().ok() != Some(*size) {
                    return Err(format!("`{rel}` has another size than the manifest says"));
                }
                let mut out = crate::fs::create_new(&target)
                    .map_err(|e| format!("cannot create `{rel}`: {e}"))?;
                let (got, _) = sha256_reader(Tee {
                    inner: &mut item,
                    out: &mut out,
                })
                .map_err(|e| format!("the archive is truncated or damaged at `{rel}`: {e}"))?;
                if &got != sha256 {
                    return Err(format!(
                        "sha256 of `{rel}` is {got}, the manifest says {sha256}"
                    ));
                }
                out.set_permissions(std::fs::Permissions::from_mode(*mode & 0o777))
                    .and_then(|()| out.sync_all())
                    .map_err(|e| format!("cannot write `{rel}`: {e}"))?;
            }
            Item::Symlink { target: to } if kind == tar::EntryType::Symlink => {
                let link = item
                    .link_name()
                    .map_err(|e| e.to_string())?
                    .map(|l| l.to_string_lossy().into_owned());
                if link.as_deref() != Some(to.as_str()) || !link_stays_inside(&rel, to) {
                    return Err(format!("symlink `{rel}` points outside its output"));
                }
                std::os::unix::fs::symlink(to, &target)
                    .map_err(|e| format!("cannot create `{rel}`: {e}"))?;
            }
            _ => return Err(format!("`{rel}` is not what the manifest says it is")),
        }
    }
    if let Some(missing) = entry.manifest.keys().find(|k| !seen.contains(*k)) {
        return Err(format!(
            "`{missing}` is in the manifest but not in the archive"
        ));
    }
    for i in 0..temps.len() {
        if !seen.contains(&i.to_string()) {
            return Err(format!("output {i} is not in the archive"));
        }
    }
    // Modes of directories last: a read-only directory would refuse its own files.
    for (dir, mode) in dirs.iter().rev() {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(*mode & 0o7777))
            .map_err(|e| format!("cannot set the mode of {}: {e}", dir.display()))?;
        let _ = File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}

/// Reads `inner`, writing what it read to `out`.
struct Tee<'a, R: Read, W: Write> {
    inner: &'a mut R,
    out: &'a mut W,
}

impl<R: Read, W: Write> Read for Tee<'_, R, W> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.out.write_all(&buf[..n])?;
        Ok(n)
    }
}

/// Put the unpacked `temp` where `out` is: what was there goes (it is this step's own earlier
/// output), the rename is the switch, the parent directory is synced.
fn replace(temp: &Path, out: &Path) -> Result<()> {
    let is_dir = std::fs::symlink_metadata(out).is_ok_and(|m| m.is_dir());
    if is_dir {
        std::fs::remove_dir_all(out)
            .map_err(|e| Error::io(format!("cannot replace {}", out.display()), e))?;
    }
    std::fs::rename(temp, out)
        .map_err(|e| Error::io(format!("cannot restore {}", out.display()), e))?;
    if let Some(parent) = out.parent() {
        let _ = File::open(parent).and_then(|d| d.sync_all());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::link_stays_inside;

    #[test]
    fn a_link_may_point_only_inside_its_output() {
        assert!(link_stays_inside("0/bin/cc", "gcc"));
        assert!(link_stays_inside("0/bin/cc", "../lib/x"));
        assert!(!link_stays_inside("0/bin/cc", "../../x"));
        assert!(!link_stays_inside("0/cc", "../x"));
        assert!(!link_stays_inside("0/cc", "/usr/bin/gcc"));
        assert!(!link_stays_inside("0", "x"));
    }
}
