//! One reproducible tar layer from a directory tree: entries sorted by name, one fixed mtime,
//! owner 0:0 and no user names, permission bits (exec bits included), symlinks and hard links
//! (tar's link entries) kept, names as bytes (not UTF-8 ones too). File contents stream through;
//! nothing is held in memory beyond one copy buffer. The tree is walked through directory
//! handles ([`Dir`]), never by re-resolving a whole path: a path longer than PATH_MAX packs
//! too (the tar crate writes its GNU long-name entry for it).

use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Component, Path, PathBuf};

use tar::{Builder, EntryType, Header};

use crate::error::{Error, Result};

/// What went into a layer.
#[derive(Debug, Default, Clone)]
pub(crate) struct LayerSummary {
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// Sockets, FIFOs and device nodes: they cannot travel in an image and are left out.
    pub skipped: Vec<PathBuf>,
    /// Sparse files (fewer bytes allocated than their size): packed in full, see archive.rs.
    pub sparse: Vec<(PathBuf, u64, u64)>,
    /// The first name in the layer of each file with more than one link, by (device, inode):
    /// its other names are tar hard-link entries to it.
    first_names: std::collections::HashMap<(u64, u64), PathBuf>,
}

/// Files a layer never holds, by (device, inode): the export's own temp file and output, when
/// `-o` is inside an exported prefix.
pub(crate) type Exclude = [(u64, u64)];

/// Write `prefix` (an absolute directory) as a tar stream into `out`, at its own absolute path
/// (`/opt/kiln/x` becomes the entries `opt/`, `opt/kiln/`, `opt/kiln/x/`, …). Returns `out`.
pub(crate) fn write_layer<W: Write>(
    prefix: &Path,
    out: W,
    mtime: u64,
    exclude: &Exclude,
) -> Result<(W, LayerSummary)> {
    let mut builder = Builder::new(out);
    let mut summary = LayerSummary::default();
    let relative = relative_in_image(prefix)?;
    // The ancestors of the prefix, so the layer extracts on its own (e.g. into an empty image).
    let mut ancestor = PathBuf::new();
    let ancestors: Vec<_> = relative.components().collect();
    for component in &ancestors[..ancestors.len().saturating_sub(1)] {
        ancestor.push(component);
        append_dir(&mut builder, &ancestor, 0o755, mtime)?;
    }
    let top = Dir::open(prefix, prefix, true)?;
    let mode = top
        .file
        .metadata()
        .map_err(|e| io_at("cannot read", prefix, e))?
        .mode();
    append_dir(&mut builder, &relative, mode, mtime)?;
    summary.dirs += 1;
    walk(&mut builder, &top, &relative, mtime, exclude, &mut summary)?;
    let out = builder
        .into_inner()
        .map_err(|e| Error::io("cannot finish the layer", e))?;
    Ok((out, summary))
}

/// A directory of the tree being packed, held open. Its entries are reached as
/// `/proc/self/fd/N/NAME`: a path of a few dozen bytes however deep the directory is, resolved
/// from the handle (the kernel's magic link), so a tree holding a path longer than PATH_MAX
/// (4096 bytes) exports whole. Where /proc is not mounted, through its path.
struct Dir {
    file: File,
    /// Where it is, for messages and the summary (may be longer than PATH_MAX).
    path: PathBuf,
}

impl Dir {
    /// Open the directory `at` names (`path` is what messages call it): following a symlink
    /// only when `follow` (the prefix itself), never blocking, never anything but a directory.
    fn open(at: &Path, path: &Path, follow: bool) -> Result<Dir> {
        let nofollow = if follow { 0 } else { libc::O_NOFOLLOW };
        let file = File::options()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC | nofollow)
            .open(at)
            .map_err(|e| io_at("cannot open", path, e))?;
        Ok(Dir {
            file,
            path: path.to_path_buf(),
        })
    }

    /// A short path to this directory itself.
    fn here(&self) -> PathBuf {
        if by_handle() {
            PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
        } else {
            self.path.clone()
        }
    }

    /// A short path to `name` inside it (the name not followed when it is a symlink).
    fn at(&self, name: &OsStr) -> PathBuf {
        self.here().join(name)
    }

    /// Its entries' names, sorted.
    fn names(&self) -> Result<Vec<OsString>> {
        let mut names = fs::read_dir(self.here())
            .and_then(|list| {
                list.map(|e| e.map(|e| e.file_name()))
                    .collect::<io::Result<Vec<_>>>()
            })
            .map_err(|e| io_at("cannot list", &self.path, e))?;
        names.sort();
        Ok(names)
    }
}

/// Whether directories are reached through their handles (`/proc/self/fd` is there).
fn by_handle() -> bool {
    static PROC: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PROC.get_or_init(|| Path::new("/proc/self/fd").is_dir())
}

/// `/opt/kiln/x` → `opt/kiln/x`; rejects relative paths and `..`.
pub(crate) fn relative_in_image(prefix: &Path) -> Result<PathBuf> {
    let mut rel = PathBuf::new();
    for component in prefix.components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(c) => rel.push(c),
            _ => {
                return Err(Error::usage(
                    format!("prefix {} is not a plain absolute path", prefix.display()),
                    Some("pass the directory as an absolute path without `..`".to_string()),
                ))
            }
        }
    }
    if !prefix.is_absolute() || rel.as_os_str().is_empty() {
        return Err(Error::usage(
            format!(
                "prefix {} must be an absolute directory below /",
                prefix.display()
            ),
            Some("the layer puts the directory at the same absolute path in the image".to_string()),
        ));
    }
    Ok(rel)
}

/// Open `at` (the entry `path` that the walk listed as `listed`) without following a link,
/// without waiting on a FIFO, and only when it is still that file or directory (same device
/// and inode, same kind): what was swapped for a link, a FIFO or another file since is refused.
fn open_listed(at: &Path, path: &Path, listed: &fs::Metadata, flags: i32) -> Result<File> {
    let file = File::options()
        .read(true)
        .custom_flags(flags | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(at)
        .map_err(|e| swapped(path, &e.to_string()))?;
    let now = file.metadata().map_err(|e| io_at("cannot read", path, e))?;
    let same = (now.dev(), now.ino()) == (listed.dev(), listed.ino())
        && now.file_type() == listed.file_type();
    if !same {
        return Err(swapped(path, "it is another file now"));
    }
    Ok(file)
}

fn swapped(path: &Path, why: &str) -> Error {
    Error::other(
        format!(
            "{} changed while the layer was written ({why}): nothing was packed from it",
            shown(path)
        ),
        Some(
            "export again while nothing writes into the prefix (a link, FIFO or file put in \
             place of what was listed is never followed or read)"
                .to_string(),
        ),
    )
}

fn walk<W: Write>(
    builder: &mut Builder<W>,
    dir: &Dir,
    rel: &Path,
    mtime: u64,
    exclude: &Exclude,
    summary: &mut LayerSummary,
) -> Result<()> {
    for name in dir.names()? {
        let path = dir.path.join(&name);
        let at = dir.at(&name);
        let entry_rel = rel.join(&name);
        let meta = fs::symlink_metadata(&at).map_err(|e| io_at("cannot read", &path, e))?;
        let kind = meta.file_type();
        if exclude.contains(&(meta.dev(), meta.ino())) {
            continue;
        }
        if kind.is_dir() {
            let sub = Dir {
                file: open_listed(&at, &path, &meta, libc::O_DIRECTORY)?,
                path: path.clone(),
            };
            append_dir(builder, &entry_rel, meta.mode(), mtime)?;
            summary.dirs += 1;
            walk(builder, &sub, &entry_rel, mtime, exclude, summary)?;
        } else if kind.is_symlink() {
            let target = fs::read_link(&at).map_err(|e| io_at("cannot read the link", &path, e))?;
            let mut header = header(EntryType::Symlink, 0o777, mtime);
            builder
                .append_link(&mut header, &entry_rel, &target)
                .map_err(|e| io_at("cannot pack the link", &path, e))?;
            summary.symlinks += 1;
        } else if let Some(first) = (kind.is_file() && meta.nlink() > 1)
            .then(|| summary.first_names.get(&(meta.dev(), meta.ino())))
            .flatten()
        {
            // Another name of a file already in the layer: tar's hard-link entry, as `tar` writes.
            let mut header = header(EntryType::Link, meta.mode(), mtime);
            builder
                .append_link(&mut header, &entry_rel, first)
                .map_err(|e| io_at("cannot pack the hard link", &path, e))?;
            summary.files += 1;
        } else if kind.is_file() {
            if meta.nlink() > 1 {
                summary
                    .first_names
                    .insert((meta.dev(), meta.ino()), entry_rel.clone());
            }
            let allocated = meta.blocks() * 512;
            if allocated + (1 << 20) < meta.len() {
                summary.sparse.push((path.clone(), allocated, meta.len()));
            }
            append_file(builder, &at, &path, &entry_rel, &meta, mtime)?;
            summary.files += 1;
        } else if kind.is_fifo()
            || kind.is_socket()
            || kind.is_block_device()
            || kind.is_char_device()
        {
            summary.skipped.push(path);
        }
    }
    Ok(())
}

fn header(kind: EntryType, mode: u32, mtime: u64) -> Header {
    let mut header = Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode & 0o7777);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(mtime);
    header.set_size(0);
    header
}

fn append_dir<W: Write>(builder: &mut Builder<W>, rel: &Path, mode: u32, mtime: u64) -> Result<()> {
    let mut header = header(EntryType::Directory, mode, mtime);
    builder
        .append_data(&mut header, rel, io::empty())
        .map_err(|e| io_at("cannot pack the directory", rel, e))
}

/// Pack the regular file listed as `listed` at `at` (shown as `path`), as `rel`: opened only
/// while it is still that file ([`open_listed`]); its size from the open file.
fn append_file<W: Write>(
    builder: &mut Builder<W>,
    at: &Path,
    path: &Path,
    rel: &Path,
    listed: &fs::Metadata,
    mtime: u64,
) -> Result<()> {
    let mut file = open_listed(at, path, listed, 0)?;
    let size = file
        .metadata()
        .map_err(|e| io_at("cannot read", path, e))?
        .len();
    let mut header = header(EntryType::Regular, listed.mode(), mtime);
    header.set_size(size);
    if header.set_path(rel).is_err() {
        // A name too long for the header: the tar crate writes its GNU long-name entry.
        let reader = Exact {
            inner: file.take(size),
            left: size,
        };
        return builder
            .append_data(&mut header, rel, reader)
            .map_err(|e| io_at("cannot pack", path, e));
    }
    // What `append_data` writes for a name that fits, with the data copied in 1 MiB reads
    // (`tar` copies through an 8 KiB buffer).
    header.set_cksum();
    let out = builder.get_mut();
    out.write_all(header.as_bytes())
        .and_then(|()| copy_exact(&mut file, out, size))
        .and_then(|()| {
            let rest = (512 - size % 512) % 512;
            out.write_all(&[0u8; 512][..rest as usize])
        })
        .map_err(|e| io_at("cannot pack", path, e))
}

/// Copy exactly `size` bytes of `file` to `out` in large reads; a file that shrinks while it is
/// packed fails (a header must not promise more bytes than follow it), one that grows is cut.
fn copy_exact(file: &mut File, out: &mut impl Write, size: u64) -> io::Result<()> {
    const CHUNK: usize = 1 << 20;
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    BUF.with(|buf| {
        let mut buf = buf.borrow_mut();
        if buf.len() < CHUNK {
            buf.resize(CHUNK, 0);
        }
        let mut left = size;
        while left > 0 {
            let want = usize::try_from(left).map_or(CHUNK, |l| l.min(CHUNK));
            let n = match file.read(&mut buf[..want]) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the file shrank while it was being packed",
                    ))
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            out.write_all(&buf[..n])?;
            left -= n as u64;
        }
        Ok(())
    })
}

/// Yields exactly `left` bytes, or fails: a file that shrinks while it is packed must not leave
/// a header that promises more bytes than follow it.
struct Exact<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Exact<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && self.left > 0 && !buf.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file shrank while it was being packed",
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

fn io_at(what: &str, path: &Path, e: io::Error) -> Error {
    Error::io(format!("{what} {}", shown(path)), e)
}

/// A path of the prefix as kiln prints it: whoever can write the prefix names its files, so
/// control characters (escape sequences) are written as `\u{..}` escapes.
pub(crate) fn shown(path: &Path) -> String {
    crate::cache::printable(&path.to_string_lossy())
}

#[cfg(test)]
mod swapped_tests {
    use super::*;

    /// The names of a layer's entries and the contents of its files.
    fn members(layer: &[u8]) -> Vec<(String, Vec<u8>)> {
        let mut tar = tar::Archive::new(layer);
        tar.entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let name = e.path().unwrap().to_string_lossy().into_owned();
                let mut data = Vec::new();
                e.read_to_end(&mut data).unwrap();
                (name, data)
            })
            .collect()
    }

    /// A file listed as a regular file, swapped for a link to a secret outside the prefix
    /// before it is opened: the layer held the secret (the link was followed on open).
    #[test]
    fn a_file_swapped_for_a_link_after_it_was_listed_never_packs_what_the_link_names() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, b"root's secret").unwrap();
        let prefix = dir.path().join("prefix");
        std::fs::create_dir(&prefix).unwrap();
        let file = prefix.join("f");
        std::fs::write(&file, b"ok").unwrap();
        let listed = fs::symlink_metadata(&file).unwrap();
        std::fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink(&secret, &file).unwrap();
        let mut builder = Builder::new(Vec::new());
        let packed = append_file(&mut builder, &file, &file, Path::new("f"), &listed, 0);
        let layer = builder.into_inner().unwrap();
        assert!(packed.is_err(), "packed through the link");
        assert!(
            members(&layer).iter().all(|(_, d)| d != b"root's secret"),
            "the secret is in the layer"
        );
    }

    /// A file swapped for a FIFO (a writer holding it open): packed as an empty regular file
    /// before; with no writer, the open waited forever.
    #[test]
    fn a_file_swapped_for_a_fifo_after_it_was_listed_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("f");
        std::fs::write(&fifo, b"ok").unwrap();
        let listed = fs::symlink_metadata(&fifo).unwrap();
        std::fs::remove_file(&fifo).unwrap();
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo on a valid C string path the test owns.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        // A writer (O_RDWR never blocks on Linux), so the pre-fix open returned.
        let _writer = std::fs::File::options()
            .read(true)
            .write(true)
            .open(&fifo)
            .unwrap();
        let mut builder = Builder::new(Vec::new());
        let packed = append_file(&mut builder, &fifo, &fifo, Path::new("f"), &listed, 0);
        assert!(packed.is_err(), "a FIFO packed as a file");
    }

    /// A directory listed as one, swapped for a link to a directory outside the prefix before
    /// it is walked: its files went into the layer.
    #[test]
    fn a_directory_swapped_for_a_link_after_it_was_listed_never_packs_what_the_link_names() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("etc");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("shadow"), b"root's secret").unwrap();
        let sub = dir.path().join("prefix").join("d");
        std::fs::create_dir_all(&sub).unwrap();
        let listed = fs::symlink_metadata(&sub).unwrap();
        std::fs::remove_dir(&sub).unwrap();
        std::os::unix::fs::symlink(&outside, &sub).unwrap();
        // What the walk does with a directory it listed, before it walks into it.
        let opened = open_listed(&sub, &sub, &listed, libc::O_DIRECTORY);
        assert!(opened.is_err(), "opened through the link");
    }
}
