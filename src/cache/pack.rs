//! Archiving a step's outputs for the step cache: only what the step wrote.
//!
//! An output directory may exist before its step runs (outputs default to `check.paths`, which
//! often name a directory the user owns). [`Before::take`] records, before the step runs, every
//! path below each existing output directory with its kind, size, inode, mtime and ctime; the
//! store then leaves out every file or link whose record is unchanged, and every directory that
//! existed before and holds nothing stored. So an entry holds what the step created or changed,
//! never a user's files that happened to sit in the output directory (and a restore merges it
//! into what is there, see [`super::layout::place`]). A file the step rewrote in place within
//! one timestamp tick at the same size and inode would be missed; a step that deletes files is
//! not replayed by a restore (a restore never deletes).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::entry::{Item, NotStored};
use crate::error::{Error, Result};
use crate::hash::sha256_reader;

/// What a path was before the step ran.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    kind: u32,
    size: u64,
    ino: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Self {
        Stamp {
            kind: meta.mode() & libc::S_IFMT,
            size: meta.size(),
            ino: meta.ino(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// The outputs' contents before the step ran: output index → path below it → stamp (only for
/// outputs that were directories then).
#[derive(Debug, Default)]
pub(crate) struct Before(BTreeMap<usize, BTreeMap<PathBuf, Stamp>>);

impl Before {
    /// Record every path below each output that is a directory now.
    pub(crate) fn take(outputs: &[PathBuf]) -> Self {
        let mut all = BTreeMap::new();
        for (i, out) in outputs.iter().enumerate() {
            if !std::fs::symlink_metadata(out).is_ok_and(|m| m.is_dir()) {
                continue;
            }
            let mut seen = BTreeMap::new();
            let mut stack = vec![PathBuf::new()];
            while let Some(rel) = stack.pop() {
                let Ok(list) = std::fs::read_dir(out.join(&rel)) else {
                    continue;
                };
                for e in list.flatten() {
                    let child = rel.join(e.file_name());
                    let Ok(meta) = std::fs::symlink_metadata(out.join(&child)) else {
                        continue;
                    };
                    if meta.is_dir() {
                        stack.push(child.clone());
                    }
                    seen.insert(child, Stamp::of(&meta));
                }
            }
            all.insert(i, seen);
        }
        Before(all)
    }

    /// Whether `rel` below output `index` is as it was before the step.
    fn unchanged(&self, index: usize, rel: &Path, meta: &std::fs::Metadata) -> bool {
        self.0
            .get(&index)
            .and_then(|m| m.get(rel))
            .is_some_and(|s| *s == Stamp::of(meta))
    }

    /// Whether directory `rel` below output `index` existed before the step.
    fn existed(&self, index: usize, rel: &Path) -> bool {
        rel.as_os_str().is_empty() && self.0.contains_key(&index)
            || self.0.get(&index).is_some_and(|m| m.contains_key(rel))
    }
}

/// One path of an output to archive.
struct Member {
    path: PathBuf,
    rel: String,
    below: PathBuf,
    meta: std::fs::Metadata,
}

/// Append output `out` (index `index`) to the archive as `index` (and `index/…`), recording the
/// manifest; what `before` shows the step did not write is left out.
pub(crate) fn add_output<W: Write>(
    tar: &mut tar::Builder<W>,
    out: &Path,
    index: usize,
    before: &Before,
    manifest: &mut BTreeMap<String, Item>,
) -> Result<std::result::Result<(), NotStored>> {
    let name = index.to_string();
    let Ok(meta) = std::fs::symlink_metadata(out) else {
        return Ok(Err(NotStored(format!(
            "output {} is not there",
            out.display()
        ))));
    };
    if meta.is_file() {
        return add_file(tar, out, &name, &meta, manifest).map(Ok);
    }
    if !meta.is_dir() {
        return Ok(Err(NotStored(format!(
            "output {} is not a regular file or directory",
            out.display()
        ))));
    }
    let members = match walk(out, &name)? {
        Ok(m) => m,
        Err(why) => return Ok(Err(why)),
    };
    // Keep what the step wrote, and the directories on the way to it.
    let mut keep = BTreeSet::new();
    for m in &members {
        let is_dir = m.meta.is_dir();
        let wrote = if is_dir {
            !before.existed(index, &m.below)
        } else {
            !before.unchanged(index, &m.below, &m.meta)
        };
        if wrote || m.below.as_os_str().is_empty() {
            let mut at = m.rel.as_str();
            keep.insert(at.to_string());
            while let Some((parent, _)) = at.rsplit_once('/') {
                keep.insert(parent.to_string());
                at = parent;
            }
        }
    }
    for m in members.iter().filter(|m| keep.contains(&m.rel)) {
        let kind = m.meta.file_type();
        if kind.is_dir() {
            let mode = m.meta.permissions().mode() & super::layout::MODE_BITS;
            append_header(tar, &m.rel, tar::EntryType::Directory, mode, None)?;
            manifest.insert(m.rel.clone(), Item::Dir { mode });
        } else if kind.is_file() {
            add_file(tar, &m.path, &m.rel, &m.meta, manifest)?;
        } else if kind.is_symlink() {
            let target = std::fs::read_link(&m.path)
                .map_err(|e| Error::io(format!("cannot read {}", m.path.display()), e))?;
            let parts: Vec<_> = m.below.iter().map(std::ffi::OsStr::to_os_string).collect();
            if !super::layout::resolves_inside(out, &parts) {
                return Ok(Err(NotStored(format!(
                    "{} links to {}, which resolves outside the output {}",
                    m.path.display(),
                    target.display(),
                    out.display()
                ))));
            }
            append_header(tar, &m.rel, tar::EntryType::Symlink, 0o777, Some(&target))?;
            manifest.insert(
                m.rel.clone(),
                Item::Symlink {
                    target: target.to_string_lossy().into_owned(),
                },
            );
        } else {
            return Ok(Err(NotStored(format!(
                "{} is a special file (socket, FIFO or device)",
                m.path.display()
            ))));
        }
    }
    Ok(Ok(()))
}

/// Every path of directory `out`, depth first, parents before children, names sorted.
fn walk(out: &Path, name: &str) -> Result<std::result::Result<Vec<Member>, NotStored>> {
    let mut members = Vec::new();
    let mut stack = vec![(out.to_path_buf(), name.to_string(), PathBuf::new())];
    while let Some((path, rel, below)) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path)
            .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
        if meta.is_dir() {
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
                stack.push((path.join(&c), format!("{rel}/{c_name}"), below.join(&c)));
            }
        }
        members.push(Member {
            path,
            rel,
            below,
            meta,
        });
    }
    Ok(Ok(members))
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
    let mode = meta.permissions().mode() & super::layout::MODE_BITS;
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
    link: Option<&Path>,
) -> Result<()> {
    let mut h = header(kind, mode, 0);
    let written = match link {
        Some(target) => tar.append_link(&mut h, rel, target),
        None => tar.append_data(&mut h, rel, std::io::empty()),
    };
    written.map_err(|e| Error::io("cannot write the step archive", e))
}
