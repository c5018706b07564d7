//! `kind = "extract"`: unpack tar, tar.gz, tar.xz or tar.zst into a directory; the result appears
//! at `dest` whole or not at all.
//!
//! Hostile archives are refused, never half-applied: entries with `..` or absolute paths, writes
//! through a symlink that leads out, hard links whose target is not a file extracted earlier into
//! the same destination, device nodes and FIFOs, and archives past `max_size` bytes (uncompressed)
//! or [`MAX_ENTRIES`] entries. Setuid and setgid bits are dropped unless the step says
//! `keep_setid = true`.

use std::cell::Cell;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

use crate::error::{Error, Result};
use crate::fs::create_dir;

/// Default `max_size`: the uncompressed bytes an archive may unpack to (64 GiB).
pub(crate) const DEFAULT_MAX_SIZE: u64 = 64 << 30;
/// Entries one archive may hold.
pub(crate) const MAX_ENTRIES: u64 = 1_000_000;

/// How one extract step unpacks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Options {
    pub strip: u32,
    /// Uncompressed bytes allowed (file data and tar headers together).
    pub max_size: u64,
    pub max_entries: u64,
    pub keep_setid: bool,
}

pub(crate) fn extract(
    archive: &Path,
    dest: &Path,
    opts: Options,
    log: &mut dyn Write,
    progress: &dyn crate::report::Progress,
) -> Result<()> {
    let parent = dest.parent().unwrap_or(Path::new("."));
    create_dir(parent)?;
    let prefix = format!(
        ".{}.partial-",
        dest.file_name().unwrap_or_default().to_string_lossy()
    );
    remove_stale_staging(parent, &prefix);
    let staging = parent.join(format!("{prefix}{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    let result = unpack(archive, &staging, opts, log, progress).and_then(|count| {
        if dest.exists() {
            std::fs::remove_dir_all(dest)
                .map_err(|e| Error::io(format!("cannot replace {}", dest.display()), e))?;
        }
        std::fs::rename(&staging, dest)
            .map_err(|e| Error::io(format!("cannot move into {}", dest.display()), e))?;
        let _ = writeln!(log, "extracted {count} entries into {}", dest.display());
        Ok(())
    });
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    result
}

/// Staging directories (`PREFIX<pid>`) of extracts whose process is gone.
fn remove_stale_staging(parent: &Path, prefix: &str) {
    crate::fs::remove_left_behind(
        parent,
        |name| name.strip_prefix(prefix)?.parse().ok(),
        |pid, _| !crate::process::pid_exists(pid),
    );
}

/// The archive's decompressed stream, the count of its bytes read so far, and its size.
type Opened = (Box<dyn Read>, Rc<Cell<u64>>, Option<u64>);

fn open(archive: &Path) -> Result<Opened> {
    let ctx = |e| Error::io(format!("cannot read archive {}", archive.display()), e);
    let file = File::open(archive).map_err(ctx)?;
    let size = file.metadata().ok().map(|m| m.len());
    let read = Rc::new(Cell::new(0));
    let mut f = BufReader::new(Counting {
        inner: file,
        read: read.clone(),
    });
    let mut magic = [0u8; 6];
    let n = f.read(&mut magic).map_err(ctx)?;
    let f = std::io::Cursor::new(magic[..n].to_vec()).chain(f);
    let stream: Box<dyn Read> = match &magic[..n] {
        [0x1f, 0x8b, ..] => Box::new(flate2::read::GzDecoder::new(f)),
        [0xfd, b'7', b'z', b'X', b'Z', 0x00] => Box::new(xz2::read::XzDecoder::new(f)),
        [0x28, 0xb5, 0x2f, 0xfd, ..] => Box::new(zstd::stream::read::Decoder::new(f).map_err(ctx)?),
        _ => Box::new(f),
    };
    Ok((stream, read, size))
}

/// A reader that counts the bytes it read (the archive's, for progress).
struct Counting {
    inner: File,
    read: Rc<Cell<u64>>,
}

impl Read for Counting {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.set(self.read.get() + n as u64);
        Ok(n)
    }
}

/// The decompressed stream, failing once more than `max` bytes came out of it; says how much
/// of the archive was read.
struct Capped<'p> {
    inner: Box<dyn Read>,
    left: u64,
    hit: Rc<Cell<bool>>,
    read: Rc<Cell<u64>>,
    size: Option<u64>,
    progress: &'p dyn crate::report::Progress,
}

impl Read for Capped<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.progress.bytes(self.read.get(), self.size);
        if let Some(left) = self.left.checked_sub(n as u64) {
            self.left = left;
            Ok(n)
        } else {
            self.hit.set(true);
            Err(std::io::Error::other(
                "the archive unpacks past its size limit",
            ))
        }
    }
}

fn too_large(archive: &Path, limit: u64) -> Error {
    Error::ArchiveRefused {
        archive: archive.to_path_buf(),
        why: format!("it unpacks to more than max_size = {limit} bytes"),
        hint: "if the archive is trusted and really that large, raise `max_size` on the step (e.g. `max_size = \"200GiB\"`); nothing was extracted".into(),
    }
}

fn unpack(
    archive: &Path,
    into: &Path,
    opts: Options,
    log: &mut dyn Write,
    progress: &dyn crate::report::Progress,
) -> Result<usize> {
    create_dir(into)?;
    let hit = Rc::new(Cell::new(false));
    let (inner, read, size) = open(archive)?;
    let capped = Capped {
        inner,
        left: opts.max_size.saturating_add(64 << 10),
        hit: hit.clone(),
        read,
        size,
        progress,
    };
    let mut tar = tar::Archive::new(capped);
    let read_error = |e: std::io::Error| {
        if hit.get() {
            too_large(archive, opts.max_size)
        } else {
            Error::io(format!("cannot read archive {}", archive.display()), e)
        }
    };
    let root = std::fs::canonicalize(into).map_err(read_error)?;
    let mut unpacker = Unpacker {
        archive,
        into,
        root,
        opts,
        declared: 0,
        dirs: Vec::new(),
    };
    let (mut count, mut read) = (0, 0u64);
    for entry in tar.entries().map_err(read_error)? {
        let mut entry = entry.map_err(read_error)?;
        // Every header counts, unpacked or not (entries `strip_components` drops still cost).
        read += 1;
        if read > opts.max_entries {
            return Err(Error::ArchiveRefused {
                archive: archive.to_path_buf(),
                why: format!("it holds more than {} entries", opts.max_entries),
                hint: "this is the limit for one archive; nothing was extracted".into(),
            });
        }
        if unpacker.entry(&mut entry).map_err(|e| match e {
            Error::Io { source, .. } if hit.get() => read_error(source),
            e => e,
        })? {
            count += 1;
        }
    }
    unpacker.finish_dirs()?;
    let _ = writeln!(log, "unpacked {count} entries from {}", archive.display());
    Ok(count)
}

/// Unpacks entries one at a time into `into` (the staging directory).
struct Unpacker<'a> {
    archive: &'a Path,
    into: &'a Path,
    /// `into`, canonical: every write must land under it.
    root: PathBuf,
    opts: Options,
    /// Sum of the sizes entries declare: a bomb fails before its data is written.
    declared: u64,
    /// Directories and their modes, applied at the end (a read-only directory would otherwise
    /// block the entries after it).
    dirs: Vec<(PathBuf, u32)>,
}

impl Unpacker<'_> {
    fn read_error(&self, e: std::io::Error) -> Error {
        Error::io(format!("cannot read archive {}", self.archive.display()), e)
    }

    fn write_error(&self, out: &Path, e: std::io::Error) -> Error {
        Error::io(
            format!(
                "cannot extract archive {} into {}",
                self.archive.display(),
                out.display()
            ),
            e,
        )
    }

    /// Unpack one entry; `false` when it lies entirely inside the stripped prefix.
    fn entry<R: Read>(&mut self, entry: &mut tar::Entry<R>) -> Result<bool> {
        let raw = entry.path().map_err(|e| self.read_error(e))?.into_owned();
        let shown = raw.display().to_string();
        let unsafe_entry = |why| Error::UnsafeArchive {
            archive: self.archive.to_path_buf(),
            entry: shown.clone(),
            why,
        };
        let kind = entry.header().entry_type();
        if kind.is_character_special() || kind.is_block_special() || kind.is_fifo() {
            let what = if kind.is_fifo() {
                "a FIFO"
            } else {
                "a device node"
            };
            return Err(Error::ArchiveRefused {
                archive: self.archive.to_path_buf(),
                why: format!("entry `{shown}` is {what}"),
                hint: "kiln extracts files, directories and links only; repack the archive without it; nothing was extracted".into(),
            });
        }
        let rel = self.strip(&safe_relative(&raw).map_err(unsafe_entry)?);
        self.declared = self.declared.saturating_add(entry.size());
        if self.declared > self.opts.max_size {
            return Err(too_large(self.archive, self.opts.max_size));
        }
        let link_target = match entry.link_name().map_err(|e| self.read_error(e))? {
            Some(t) if kind.is_hard_link() => Some(safe_relative(&t).map_err(unsafe_entry)?),
            _ => None,
        };
        if rel.as_os_str().is_empty() {
            return Ok(false);
        }
        let out = self.into.join(&rel);
        if let Some(p) = out.parent() {
            create_dir(p)?;
            // A directory on the way may be a symlink an earlier entry planted: stay inside.
            if !self.inside(p)? {
                return Err(unsafe_entry(
                    "it would be written through a link outside the destination",
                ));
            }
        }
        if kind.is_dir() {
            return self.dir(entry, &out).map(|()| true);
        }
        // Never write through whatever an earlier entry left at this path.
        if let Ok(m) = std::fs::symlink_metadata(&out) {
            if !m.is_dir() {
                std::fs::remove_file(&out).map_err(|e| self.write_error(&out, e))?;
            }
        }
        if let Some(target) = link_target {
            let src = self.link_source(&target).ok_or_else(|| {
                unsafe_entry("it is a hard link to a path that is not a file extracted earlier into the destination")
            })?;
            std::fs::hard_link(&src, &out).map_err(|e| self.write_error(&out, e))?;
            return Ok(true);
        }
        entry.set_preserve_permissions(true);
        entry.set_mask(if self.opts.keep_setid { 0 } else { 0o6000 });
        entry.unpack(&out).map_err(|e| self.write_error(&out, e))?;
        Ok(true)
    }

    fn strip(&self, rel: &Path) -> PathBuf {
        rel.components().skip(self.opts.strip as usize).collect()
    }

    fn inside(&self, dir: &Path) -> Result<bool> {
        let real = std::fs::canonicalize(dir).map_err(|e| self.write_error(dir, e))?;
        Ok(real.starts_with(&self.root))
    }

    fn dir<R: Read>(&mut self, entry: &tar::Entry<R>, out: &Path) -> Result<()> {
        if std::fs::symlink_metadata(out).is_ok_and(|m| !m.is_dir()) {
            std::fs::remove_file(out).map_err(|e| self.write_error(out, e))?;
        }
        create_dir(out)?;
        let mode = entry.header().mode().unwrap_or(0o755);
        let drop = if self.opts.keep_setid { 0 } else { 0o6000 };
        self.dirs.push((out.to_path_buf(), mode & 0o7777 & !drop));
        Ok(())
    }

    /// Where a hard link's (relative) target is: a regular file an earlier entry put inside this
    /// destination, or `None`.
    fn link_source(&self, target: &Path) -> Option<PathBuf> {
        let target = self.strip(target);
        if target.as_os_str().is_empty() {
            return None;
        }
        let src = self.into.join(target);
        let is_file = std::fs::symlink_metadata(&src).is_ok_and(|m| m.is_file());
        let inside = std::fs::canonicalize(&src).is_ok_and(|r| r.starts_with(&self.root));
        (is_file && inside).then_some(src)
    }

    fn finish_dirs(&mut self) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        // Deepest first, so a read-only parent does not block its children.
        self.dirs
            .sort_by_key(|(p, _)| std::cmp::Reverse(p.components().count()));
        for (dir, mode) in &self.dirs {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(*mode))
                .map_err(|e| self.write_error(dir, e))?;
        }
        Ok(())
    }
}

/// A relative path with no `..`, no root and no prefix.
fn safe_relative(p: &Path) -> std::result::Result<PathBuf, &'static str> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(s) => out.push(s),
            Component::CurDir => {}
            Component::ParentDir => return Err("it contains `..`"),
            Component::RootDir | Component::Prefix(_) => return Err("it is an absolute path"),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries that `strip_components` drops (top-level directories) count towards the cap too.
    #[test]
    fn the_entry_cap_counts_entries_that_strip_components_drops() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = tar::Builder::new(Vec::new());
        for i in 0..5 {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Directory);
            h.set_size(0);
            h.set_mode(0o755);
            b.append_data(&mut h, format!("d{i}/"), std::io::empty())
                .unwrap();
        }
        let archive = dir.path().join("a.tar");
        std::fs::write(&archive, b.into_inner().unwrap()).unwrap();
        let opts = Options {
            strip: 1,
            max_size: 1 << 20,
            max_entries: 3,
            keep_setid: false,
        };
        let err = unpack(
            &archive,
            &dir.path().join("into"),
            opts,
            &mut std::io::sink(),
            &(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("more than 3 entries"), "{err}");
    }
}
