//! `kiln cache export|import`: the wheel cache and the step cache as one tar archive with a
//! sha256 manifest, verified file by file on import before anything enters either cache.
//! Wheels live under `wheels/<id>/`, step entries under `steps/<id>/` (a kiln without the step
//! cache imports the wheels and leaves the rest).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Component, Path};

use serde::{Deserialize, Serialize};

use super::steps::StepCache;
use super::wheels::{Entry, WheelCache};
use crate::error::{Error, Result};
use crate::hash::sha256_reader;

#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    format: String,
    /// Archive path → sha256 of its content.
    files: BTreeMap<String, String>,
}

const FORMAT: &str = "kiln-wheel-cache-v1";

/// How many entries an export or import carried.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    pub wheels: usize,
    pub steps: usize,
}

/// Write every entry of `cache` and `steps` into a tar archive at `out` (a new or regular file,
/// replaced atomically, or a stream such as `/dev/stdout`; see src/output.rs).
pub(crate) fn export(cache: &WheelCache, steps: &StepCache, out: &Path) -> Result<Counts> {
    let target = crate::output::check(out, "the cache archive", true)?;
    super::perms::check_tree(&cache.root)?;
    super::perms::check_tree(&steps.root)?;
    for (id, _) in cache.list() {
        cache.sign_trusted(&id)?;
    }
    let entries = cache.list();
    let mut all: Vec<(String, std::path::PathBuf)> = Vec::new();
    for (id, entry) in &entries {
        all.extend(entry_files(cache, id, entry));
    }
    let step_ids = steps.list();
    for id in &step_ids {
        steps.sign_trusted(id)?;
    }
    for id in &step_ids {
        for (name, path) in steps.entry_files(id) {
            all.push((format!("steps/{id}/{name}"), path));
        }
    }
    let counts = Counts {
        wheels: entries.len(),
        steps: step_ids.len(),
    };
    let mut files = BTreeMap::new();
    for (name, path) in &all {
        let (f, _) = super::open_regular(path)
            .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
        files.insert(
            name.clone(),
            sha256_reader(f)
                .map_err(|e| Error::io("cannot hash a cache file", e))?
                .0,
        );
    }
    let manifest = serde_json::to_vec_pretty(&Manifest {
        format: FORMAT.into(),
        files,
    })
    .expect("manifests serialize");
    let ctx = |e| Error::io(format!("cannot write {}", out.display()), e);
    if target == crate::output::Output::Stream {
        let stream = std::fs::OpenOptions::new()
            .write(true)
            .open(out)
            .map_err(ctx)?;
        write_tar(&all, &manifest, stream).map_err(ctx)?;
        return Ok(counts);
    }
    let tmp = crate::output::temp_beside(out);
    let written = File::create(&tmp)
        .and_then(|f| write_tar(&all, &manifest, f))
        .and_then(|f| crate::fs::sync_file(&f))
        .and_then(|()| crate::fs::rename(&tmp, out));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(ctx(e));
    }
    Ok(counts)
}

/// The archive: manifest.json first, then each entry's files.
fn write_tar<W: std::io::Write>(
    files: &[(String, std::path::PathBuf)],
    manifest: &[u8],
    out: W,
) -> std::io::Result<W> {
    let mut tar = tar::Builder::new(out);
    let mut header = tar::Header::new_gnu();
    header.set_size(manifest.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    tar.append_data(&mut header, "manifest.json", manifest)?;
    for (name, path) in files {
        tar.append_path_with_name(path, name)?;
    }
    tar.into_inner()
}

fn entry_files(cache: &WheelCache, id: &str, entry: &Entry) -> Vec<(String, std::path::PathBuf)> {
    let dir = cache.root.join(id);
    vec![
        (format!("wheels/{id}/entry.json"), dir.join("entry.json")),
        (
            format!("wheels/{id}/{}", entry.wheel),
            cache.wheel_path(id, entry),
        ),
    ]
}

/// Verify and import an archive made by `export`. Returns the number of entries imported.
pub(crate) fn import(cache: &WheelCache, steps: &StepCache, archive: &Path) -> Result<Counts> {
    let bad = |why: String| {
        Error::other(
            format!("cannot import {}: {why}", archive.display()),
            Some(
                "nothing was imported; re-create the archive with `kiln cache export`".to_string(),
            ),
        )
    };
    let staging = tempdir_near(&cache.root)?;
    let result = (|| {
        let f = File::open(archive)
            .map_err(|e| Error::io(format!("cannot read {}", archive.display()), e))?;
        let mut tar = tar::Archive::new(f);
        let mut manifest: Option<Manifest> = None;
        let mut seen = BTreeSet::new();
        for entry in tar.entries().map_err(|e| bad(e.to_string()))? {
            let mut entry = entry.map_err(|e| bad(e.to_string()))?;
            let path = entry.path().map_err(|e| bad(e.to_string()))?.into_owned();
            if path
                .components()
                .any(|c| !matches!(c, Component::Normal(_)))
            {
                return Err(Error::UnsafeArchive {
                    archive: archive.to_path_buf(),
                    entry: path.display().to_string(),
                    why: "it is absolute or contains `..`",
                });
            }
            let name = path.to_string_lossy().into_owned();
            // Only file contents travel: a symlink or hard link would make the import read
            // (and copy into the cache) a file from outside the archive.
            let kind = entry.header().entry_type();
            if kind.is_dir() {
                continue;
            }
            if !(kind.is_file() || kind == tar::EntryType::Continuous) {
                return Err(bad(format!(
                    "`{name}` is a {}, and a cache archive holds only regular files",
                    match kind {
                        tar::EntryType::Symlink => "symlink",
                        tar::EntryType::Link => "hard link",
                        _ => "special entry",
                    }
                )));
            }
            let cap = super::steps::ENTRY_JSON_CAP;
            let json = name == "manifest.json" || name.ends_with("/entry.json");
            if json && entry.header().size().unwrap_or(u64::MAX) > cap {
                return Err(bad(format!("`{name}` is over {cap} bytes")));
            }
            if name == "manifest.json" {
                manifest = Some(
                    serde_json::from_reader(&mut entry)
                        .map_err(|e| bad(format!("bad manifest: {e}")))?,
                );
                continue;
            }
            let Some(m) = &manifest else {
                return Err(bad("manifest.json must come first".into()));
            };
            let Some(expected) = m.files.get(&name) else {
                return Err(bad(format!("`{name}` is not in the manifest")));
            };
            let target = staging.join(&path);
            super::perms::create_dir(target.parent().expect("archive paths have a parent"))?;
            if std::fs::symlink_metadata(&target).is_ok() {
                return Err(bad(format!("`{name}` appears twice")));
            }
            let mut file = super::perms::create_file(&target).map_err(|e| bad(e.to_string()))?;
            std::io::copy(&mut entry, &mut file).map_err(|e| bad(e.to_string()))?;
            drop(file);
            let (sha, _) = sha256_reader(File::open(&target).map_err(|e| bad(e.to_string()))?)
                .map_err(|e| bad(e.to_string()))?;
            if &sha != expected {
                return Err(bad(format!(
                    "sha256 of `{name}` is {sha}, the manifest says {expected}"
                )));
            }
            seen.insert(name);
        }
        let m = manifest.ok_or_else(|| bad("no manifest.json".into()))?;
        if m.format != FORMAT {
            return Err(bad(format!("unknown format `{}`", m.format)));
        }
        if let Some(missing) = m.files.keys().find(|k| !seen.contains(*k)) {
            return Err(bad(format!(
                "`{missing}` is listed in the manifest but missing"
            )));
        }
        // Every wheel and step entry is checked (its key, whom it is signed by) before the
        // first moves in.
        let mut wheels = Vec::new();
        for dir in std::fs::read_dir(staging.join("wheels"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let entry: Entry = serde_json::from_slice(
                &std::fs::read(dir.path().join("entry.json")).map_err(|e| bad(e.to_string()))?,
            )
            .map_err(|e| bad(format!("bad entry.json: {e}")))?;
            let id = entry.key.id();
            if id != dir.file_name().to_string_lossy() {
                return Err(bad(format!(
                    "entry {} does not match its key",
                    dir.file_name().to_string_lossy()
                )));
            }
            cache.trusted(&id, &entry).map_err(&bad)?;
            wheels.push((entry, dir.path()));
        }
        check_steps(steps, &staging.join("steps")).map_err(&bad)?;
        for (entry, dir) in &wheels {
            cache.insert_entry(entry, &dir.join(&entry.wheel))?;
        }
        let count = wheels.len();
        let step_count = import_steps(steps, &staging.join("steps")).map_err(&bad)?;
        Ok(Counts {
            wheels: count,
            steps: step_count,
        })
    })();
    let _ = std::fs::remove_dir_all(&staging);
    result
}

fn staged_dirs(staged: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(staged)
        .into_iter()
        .flatten()
        .flatten()
        .map(|d| d.path())
        .collect()
}

/// Check every step entry staged under `staged` ([`StepCache::check_staged`]).
fn check_steps(steps: &StepCache, staged: &Path) -> std::result::Result<(), String> {
    for dir in staged_dirs(staged) {
        steps.check_staged(&dir)?;
    }
    Ok(())
}

/// Move the step entries staged under `staged` in, every one checked before the first moves.
fn import_steps(steps: &StepCache, staged: &Path) -> std::result::Result<usize, String> {
    let dirs = staged_dirs(staged);
    check_steps(steps, staged)?;
    let mut count = 0;
    for dir in &dirs {
        if steps.insert_staged(dir)? {
            count += 1;
        }
    }
    Ok(count)
}

fn tempdir_near(root: &Path) -> Result<super::staging::Staging> {
    super::staging::create(root, "import")
}
