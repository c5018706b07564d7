//! Laying a step entry's archive out on disk so that nothing of it can reach outside its outputs,
//! decided on the real file system, never by comparing path text:
//!
//! - every member is created relative to a handle on its parent directory, and that handle is
//!   reached from the output's own (fresh) root by `openat(O_NOFOLLOW | O_DIRECTORY)` one
//!   component at a time: a link the archive made (`0/x -> .`) is never walked through, so a
//!   member below it is refused;
//! - every symlink is resolved afterwards against the tree just laid out ([`resolves_inside`]),
//!   link by link as the kernel would, and refused unless it ends inside its own output;
//! - modes keep the permission bits only (`& 0o777`): no setuid, setgid or sticky bit;
//! - nothing is synced file by file: one `syncfs` per output once the whole tree is there.
//!
//! Putting the laid-out tree in place ([`place`]) never deletes what kiln did not lay out: an
//! output that is not there is renamed in whole; one that is there gets the entry's members
//! merged into it, its other files left alone (see docs/recipes.md, "The step cache").

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::entry::{Item, StepEntry};
use crate::error::{Error, Result};
use crate::hash::sha256_reader;

/// The permission bits a restore keeps: never setuid, setgid or sticky.
pub(crate) const MODE_BITS: u32 = 0o777;

/// How many links one resolution may follow (the kernel's `MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

/// Check every name of `entry`'s manifest: relative, `/`-separated normal components, the first
/// a declared output's index (below `outputs`). The reason on refusal.
pub(crate) fn check_names(entry: &StepEntry, outputs: usize) -> std::result::Result<(), String> {
    for name in entry.manifest.keys() {
        let mut parts = name.split('/');
        let first = parts.next().unwrap_or_default();
        if !first.parse::<usize>().is_ok_and(|i| i < outputs) || first.starts_with('+') {
            return Err(format!("manifest path `{name}` names no declared output"));
        }
        if name.starts_with('/') || name.split('/').any(|p| matches!(p, "" | "." | "..")) {
            return Err(format!(
                "manifest path `{name}` is absolute, empty or climbs with `..`"
            ));
        }
    }
    Ok(())
}

/// Unpack the archive onto `temps` (temp `i` for output `i`, none of them there yet), every
/// member checked against the manifest and created below a directory this unpack made itself.
/// The reason on refusal.
pub(crate) fn unpack(
    archive: &Path,
    entry: &StepEntry,
    temps: &[PathBuf],
) -> std::result::Result<(), String> {
    check_names(entry, temps.len())?;
    let file = open_archive(archive, entry)?;
    let mut tar = tar::Archive::new(std::io::BufReader::with_capacity(1 << 20, file));
    let mut seen = BTreeSet::new();
    let mut dirs: Vec<(usize, Vec<OsString>, u32)> = Vec::new();
    let mut links: Vec<(usize, Vec<OsString>, String)> = Vec::new();
    let mut walker = Walker::new(temps.len());
    for item in tar.entries().map_err(|e| e.to_string())? {
        let mut item = item.map_err(|e| format!("the archive is truncated or damaged: {e}"))?;
        // Every member must be a manifest name, and those are checked above.
        let path = item.path().map_err(|e| e.to_string())?.into_owned();
        let rel = path.to_string_lossy().into_owned();
        let Some(expected) = entry.manifest.get(&rel) else {
            return Err(format!("`{rel}` is in the archive but not in the manifest"));
        };
        if !seen.insert(rel.clone()) {
            return Err(format!("`{rel}` appears twice"));
        }
        let mut parts: Vec<OsString> = path.iter().map(OsStr::to_os_string).collect();
        let index: usize = parts
            .remove(0)
            .to_str()
            .and_then(|s| s.parse().ok())
            .filter(|i| *i < temps.len())
            .ok_or_else(|| format!("archive path `{rel}` names no declared output"))?;
        let kind = item.header().entry_type();
        let matches = match expected {
            Item::Dir { .. } => kind.is_dir(),
            Item::File { .. } => kind.is_file(),
            Item::Symlink { .. } => kind == tar::EntryType::Symlink,
        };
        if !matches {
            return Err(format!("`{rel}` is not what the manifest says it is"));
        }
        if let Item::File { size, .. } = expected {
            if item.header().size().ok() != Some(*size) {
                return Err(format!("`{rel}` has another size than the manifest says"));
            }
        }
        if parts.is_empty() {
            lay_out_root(&mut walker, index, &temps[index], expected, &mut item, &rel)?;
            if let Item::Dir { mode } = expected {
                dirs.push((index, parts, *mode));
            }
            continue;
        }
        let name = parts.last().expect("not empty").clone();
        let parent = walker.open(index, &parts[..parts.len() - 1]).map_err(|e| {
            format!("cannot lay out `{rel}`: its parent is not a directory this restore made ({e})")
        })?;
        match expected {
            Item::Dir { mode } => {
                at(parent, &name, |fd, n| unsafe {
                    libc::mkdirat(fd, n, 0o700)
                })
                .map_err(|e| format!("cannot create `{rel}`: {e}"))?;
                dirs.push((index, parts, *mode));
            }
            Item::File { sha256, mode, .. } => {
                let mut out =
                    create_at(parent, &name).map_err(|e| format!("cannot create `{rel}`: {e}"))?;
                write_checked(&mut item, &mut out, &rel, sha256, *mode)?;
            }
            Item::Symlink { target } => {
                let link = item
                    .link_name()
                    .map_err(|e| e.to_string())?
                    .map(|l| l.to_string_lossy().into_owned());
                if link.as_deref() != Some(target.as_str()) {
                    return Err(format!("symlink `{rel}` is not what the manifest says"));
                }
                let to = CString::new(target.as_bytes())
                    .map_err(|_| format!("symlink `{rel}` has a NUL in its target"))?;
                at(parent, &name, |fd, n| unsafe {
                    libc::symlinkat(to.as_ptr(), fd, n)
                })
                .map_err(|e| format!("cannot create `{rel}`: {e}"))?;
                links.push((index, parts, target.clone()));
            }
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
    for (index, parts, _) in &links {
        if !resolves_inside(&temps[*index], parts) {
            let rel = display_rel(*index, parts);
            return Err(format!(
                "symlink `{rel}` resolves outside its output on disk"
            ));
        }
    }
    // Modes of directories last (a read-only directory would refuse its own files), deepest
    // first, each reached again without following a link.
    for (index, parts, mode) in dirs.iter().rev() {
        let fd = walker
            .open(*index, parts)
            .map_err(|e| format!("cannot reopen `{}`: {e}", display_rel(*index, parts)))?;
        if unsafe { libc::fchmod(fd, (*mode & MODE_BITS) as libc::mode_t) } != 0 {
            return Err(format!(
                "cannot set the mode of `{}`: {}",
                display_rel(*index, parts),
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

fn display_rel(index: usize, parts: &[OsString]) -> String {
    let mut s = index.to_string();
    for p in parts {
        s.push('/');
        s.push_str(&p.to_string_lossy());
    }
    s
}

/// Output `index` itself: a directory or file created at its temp path (fresh, beside the
/// output); a link as an output is refused.
fn lay_out_root(
    walker: &mut Walker,
    index: usize,
    temp: &Path,
    expected: &Item,
    item: &mut impl Read,
    rel: &str,
) -> std::result::Result<(), String> {
    match expected {
        Item::Dir { .. } => {
            std::fs::create_dir(temp).map_err(|e| format!("cannot create `{rel}`: {e}"))?;
            let dir = open_dir_nofollow(temp).map_err(|e| format!("cannot open `{rel}`: {e}"))?;
            walker.roots[index] = Some(dir);
            Ok(())
        }
        Item::File { sha256, mode, .. } => {
            let mut out =
                crate::fs::create_new(temp).map_err(|e| format!("cannot create `{rel}`: {e}"))?;
            write_checked(item, &mut out, rel, sha256, *mode)
        }
        Item::Symlink { .. } => Err(format!("output `{rel}` is a symlink")),
    }
}

/// Copy `item` into `out` while hashing it; refused unless the sha256 is the manifest's. The
/// mode is set to its permission bits only.
fn write_checked(
    item: &mut impl Read,
    out: &mut File,
    rel: &str,
    sha256: &str,
    mode: u32,
) -> std::result::Result<(), String> {
    let (got, _) = sha256_reader(Tee {
        inner: item,
        out: &mut *out,
    })
    .map_err(|e| format!("the archive is truncated or damaged at `{rel}`: {e}"))?;
    if got != sha256 {
        return Err(format!(
            "sha256 of `{rel}` is {got}, the manifest says {sha256}"
        ));
    }
    out.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(
        mode & MODE_BITS,
    ))
    .map_err(|e| format!("cannot write `{rel}`: {e}"))
}

/// Handles on directories this unpack made: each output's root, and the last parent walked to
/// (archives list a directory's members together, so most walks are one lookup).
struct Walker {
    roots: Vec<Option<OwnedFd>>,
    last: Option<(usize, Vec<OsString>, OwnedFd)>,
}

impl Walker {
    fn new(outputs: usize) -> Self {
        Walker {
            roots: (0..outputs).map(|_| None).collect(),
            last: None,
        }
    }

    /// The directory `parts` below output `index`'s root, reached one component at a time
    /// with `O_NOFOLLOW`: a symlink anywhere on the way is an error (`ELOOP`/`ENOTDIR`).
    fn open(&mut self, index: usize, parts: &[OsString]) -> std::io::Result<libc::c_int> {
        if parts.is_empty() {
            return self.roots[index]
                .as_ref()
                .map(AsRawFd::as_raw_fd)
                .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        let hit = self
            .last
            .as_ref()
            .is_some_and(|(i, p, _)| *i == index && p.as_slice() == parts);
        if !hit {
            let root = self.roots[index]
                .as_ref()
                .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOTDIR))?;
            let mut cur: Option<OwnedFd> = None;
            for part in parts {
                let from = cur.as_ref().map_or(root.as_raw_fd(), AsRawFd::as_raw_fd);
                cur = Some(openat_dir(from, part)?);
            }
            self.last = Some((index, parts.to_vec(), cur.expect("parts not empty")));
        }
        Ok(self.last.as_ref().expect("just set").2.as_raw_fd())
    }
}

fn cstr(name: &OsStr) -> std::io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
}

/// Run `op(dirfd, name)`, an `*at` call returning 0 or -1.
fn at(
    dir: libc::c_int,
    name: &OsStr,
    op: impl Fn(libc::c_int, *const libc::c_char) -> libc::c_int,
) -> std::io::Result<()> {
    let n = cstr(name)?;
    if op(dir, n.as_ptr()) == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn openat_dir(dir: libc::c_int, name: &OsStr) -> std::io::Result<OwnedFd> {
    let n = cstr(name)?;
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: a valid NUL-terminated name and a directory handle this module holds open.
    let fd = unsafe { libc::openat(dir, n.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn open_dir_nofollow(path: &Path) -> std::io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = File::options()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(path)?;
    Ok(f.into())
}

/// A new file `name` in directory `dir`: `O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600 until the
/// manifest's is set.
fn create_at(dir: libc::c_int, name: &OsStr) -> std::io::Result<File> {
    let n = cstr(name)?;
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: as in `openat_dir`.
    let fd = unsafe { libc::openat(dir, n.as_ptr(), flags, 0o600 as libc::c_uint) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as in `openat_dir`.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Whether the symlink at `parts` below `root` (a real directory) resolves, on the file system
/// as it is now, to a path inside `root`: each component looked up with `lstat` below a prefix
/// already known to hold no link, each link's target spliced in (an absolute one, a climb above
/// `root` or more than [`MAX_LINKS`] links: outside). A component that is not there is taken as
/// it reads (the kernel would stop there).
pub(crate) fn resolves_inside(root: &Path, parts: &[OsString]) -> bool {
    let Some((link, parent)) = parts.split_last() else {
        return false;
    };
    let mut at: Vec<OsString> = parent.to_vec();
    let mut pending: VecDeque<OsString> = VecDeque::new();
    pending.push_back(link.clone());
    let mut followed = 0;
    while let Some(part) = pending.pop_front() {
        match part.as_bytes() {
            b"" | b"." => continue,
            b".." => {
                if at.pop().is_none() {
                    return false;
                }
                continue;
            }
            _ => {}
        }
        let mut path = root.to_path_buf();
        path.extend(&at);
        path.push(&part);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => {
                followed += 1;
                if followed > MAX_LINKS {
                    return false;
                }
                let Ok(target) = std::fs::read_link(&path) else {
                    return false;
                };
                if target.is_absolute() {
                    return false;
                }
                let mut spliced: VecDeque<OsString> = target
                    .as_os_str()
                    .as_bytes()
                    .split(|b| *b == b'/')
                    .map(|p| OsStr::from_bytes(p).to_os_string())
                    .collect();
                spliced.extend(pending.drain(..));
                pending = spliced;
            }
            _ => at.push(part),
        }
    }
    true
}

/// `syncfs` on the file system of each laid-out output: one call each in place of one `fsync`
/// per file.
pub(crate) fn sync(temps: &[PathBuf]) -> std::io::Result<()> {
    for t in temps {
        let f = File::open(t)?;
        // SAFETY: a file descriptor this function holds open.
        if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// What is in the way of putting laid-out `temp` at `out`: the first path of `out` whose kind
/// differs from the entry's (a directory where the entry has a file, a file or link where it has
/// a directory). Merging would have to delete it, so the restore is refused.
pub(crate) fn conflict(
    manifest: &BTreeMap<String, Item>,
    index: usize,
    out: &Path,
) -> Option<(PathBuf, &'static str, &'static str)> {
    let prefix = index.to_string();
    for (name, item) in manifest {
        let rest = if *name == prefix {
            ""
        } else if let Some(rest) = name.strip_prefix(&format!("{prefix}/")) {
            rest
        } else {
            continue;
        };
        let path = if rest.is_empty() {
            out.to_path_buf()
        } else {
            out.join(rest)
        };
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let on_disk_dir = meta.file_type().is_dir();
        match item {
            Item::Dir { .. } if !on_disk_dir => {
                return Some((path, "not a directory", "a directory"))
            }
            Item::File { .. } | Item::Symlink { .. } if on_disk_dir => {
                return Some((path, "a directory", "a file"))
            }
            _ => {}
        }
    }
    None
}

/// Put laid-out `temp` at `out`: renamed in whole where `out` is not there; else merged into it,
/// member by member, top down ([`conflict`] found nothing in the way): a directory that is
/// there is kept, one that is not is renamed in with all it holds, a file or link replaces the
/// same name. Files of `out` the entry does not name stay. `temp` is gone afterwards.
pub(crate) fn place(temp: &Path, out: &Path) -> Result<()> {
    let ctx = |e| Error::io(format!("cannot restore {}", out.display()), e);
    if std::fs::symlink_metadata(out).is_ok_and(|m| m.is_dir()) {
        merge(temp, out).map_err(ctx)?;
        let _ = std::fs::remove_dir_all(temp);
    } else {
        crate::fs::rename(temp, out).map_err(ctx)?;
    }
    if let Some(parent) = out.parent() {
        let _ = crate::fs::sync_dir(parent);
    }
    Ok(())
}

fn merge(from: &Path, to: &Path) -> std::io::Result<()> {
    let mut names: Vec<OsString> = std::fs::read_dir(from)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<std::io::Result<_>>()?;
    names.sort();
    for name in names {
        let (src, dst) = (from.join(&name), to.join(&name));
        let src_dir = std::fs::symlink_metadata(&src)?.is_dir();
        match std::fs::symlink_metadata(&dst) {
            Ok(m) if m.is_dir() && src_dir => merge(&src, &dst)?,
            Ok(m) if m.is_dir() || src_dir => {
                return Err(std::io::Error::other(format!(
                    "{} changed while it was restored into",
                    dst.display()
                )))
            }
            _ => crate::fs::rename(&src, &dst)?,
        }
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

/// `archive` opened for reading: a regular file of the size `entry` states, read no further.
fn open_archive(
    archive: &Path,
    entry: &StepEntry,
) -> std::result::Result<std::io::Take<File>, String> {
    let (file, len) =
        super::open_regular(archive).map_err(|e| format!("cannot read the archive: {e}"))?;
    if len != entry.size {
        return Err(format!(
            "the archive is {len} bytes, the entry says {}",
            entry.size
        ));
    }
    Ok(file.take(entry.size))
}

/// Check `archive` against `entry` in one read, writing nothing: its sha256 and size are the
/// entry's, and its members are exactly the manifest (names, kinds, sizes, files' sha256, links'
/// targets). What `kiln cache gc` and an import or pull check; the reason on refusal.
pub(crate) fn verify(archive: &Path, entry: &StepEntry) -> std::result::Result<(), String> {
    use sha2::Digest;
    struct Hashing<R> {
        inner: R,
        sha: sha2::Sha256,
        size: u64,
    }
    impl<R: Read> Read for Hashing<R> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.inner.read(buf)?;
            self.sha.update(&buf[..n]);
            self.size += n as u64;
            Ok(n)
        }
    }
    let file = open_archive(archive, entry)?;
    let reader = Hashing {
        inner: std::io::BufReader::with_capacity(1 << 20, file),
        sha: sha2::Sha256::new(),
        size: 0,
    };
    let mut tar = tar::Archive::new(reader);
    let members = members_match(&mut tar, entry);
    // The archive's own hash first: a damaged archive is said as such, whatever member broke.
    let mut reader = tar.into_inner();
    std::io::copy(&mut reader, &mut std::io::sink()).map_err(|e| e.to_string())?;
    let sha = crate::hash::hex(&reader.sha.finalize());
    if sha != entry.archive_sha256 || reader.size != entry.size {
        return Err(format!(
            "the archive has sha256 {sha} ({} bytes), the entry says {} ({} bytes)",
            reader.size, entry.archive_sha256, entry.size
        ));
    }
    members
}

/// Whether the members of `tar` are exactly `entry`'s manifest (see [`verify`]).
fn members_match<R: Read>(
    tar: &mut tar::Archive<R>,
    entry: &StepEntry,
) -> std::result::Result<(), String> {
    let mut seen = BTreeSet::new();
    for item in tar.entries().map_err(|e| e.to_string())? {
        let mut item = item.map_err(|e| format!("the archive is truncated or damaged: {e}"))?;
        let rel = item
            .path()
            .map_err(|e| e.to_string())?
            .to_string_lossy()
            .into_owned();
        let Some(expected) = entry.manifest.get(&rel) else {
            return Err(format!("`{rel}` is in the archive but not in the manifest"));
        };
        if !seen.insert(rel.clone()) {
            return Err(format!("`{rel}` appears twice"));
        }
        let kind = item.header().entry_type();
        let ok = match expected {
            Item::Dir { .. } => kind.is_dir(),
            Item::File { sha256, size, .. } => {
                kind.is_file()
                    && item.header().size().ok() == Some(*size)
                    && sha256_reader(&mut item).is_ok_and(|(got, _)| got == *sha256)
            }
            Item::Symlink { target } => {
                kind == tar::EntryType::Symlink
                    && item
                        .link_name()
                        .ok()
                        .flatten()
                        .is_some_and(|l| l.to_string_lossy() == target.as_str())
            }
        };
        if !ok {
            return Err(format!("`{rel}` is not what the manifest says"));
        }
    }
    if let Some(missing) = entry.manifest.keys().find(|k| !seen.contains(*k)) {
        return Err(format!(
            "`{missing}` is in the manifest but not in the archive"
        ));
    }
    Ok(())
}
