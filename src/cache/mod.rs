//! kiln's caches: the compiled-wheel cache and the step cache (each the one owner of its entry
//! format), their portable archives, and its copy in an OCI registry (through oci's transport).

pub(crate) mod archive;
pub(crate) mod entry;
pub(crate) mod gc;
pub(crate) mod layout;
pub(crate) mod pack;
pub(crate) mod perms;
pub(crate) mod remote;
pub(crate) mod remote_steps;
pub(crate) mod staging;
pub(crate) mod steps;
pub(crate) mod trust;
pub(crate) mod wheels;

pub use remote::{PullSummary, PushSummary};
pub use wheels::{Entry, StoredWheel, WheelCache, WheelKey};

/// The OCI annotations both kinds of remote entry carry: a file name, the entry's cache id.
pub(crate) const ANNOTATION_TITLE: &str = "org.opencontainers.image.title";
pub(crate) const ANNOTATION_ID: &str = "dev.kiln.cache.id";

/// Whether `text` is an entry id (64 lowercase hex digits): the only names in `steps/` and
/// `wheels/` that are entries.
pub(crate) fn is_hex64(text: &str) -> bool {
    text.len() == 64
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `text` (a name an entry carries, from anywhere) safe to print on a terminal: control
/// characters (escape sequences, newlines) and bidi controls written as `\u{..}` escapes, as
/// every other untrusted text kiln prints ([`crate::columns::escape_controls`]).
pub(crate) fn printable(text: &str) -> String {
    crate::columns::escape_controls(text)
}

/// Open `path` for reading only when it is a regular file: never through a symlink
/// (`O_NOFOLLOW`), never blocking on a FIFO (`O_NONBLOCK`, then refused), never a device such as
/// `/dev/zero`; and only when neither it nor its directory could be changed by another user
/// ([`perms`]). The file and its size.
pub(crate) fn open_regular(path: &std::path::Path) -> std::io::Result<(std::fs::File, u64)> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        perms::check_dir(dir).map_err(std::io::Error::other)?;
    }
    let f = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    if let Some(why) = perms::unsafe_because(path, &meta) {
        return Err(std::io::Error::other(why));
    }
    Ok((f, meta.len()))
}

/// The whole of regular file `path` ([`open_regular`]), refused when it is over `cap` bytes.
pub(crate) fn read_regular(path: &std::path::Path, cap: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let (f, len) = open_regular(path)?;
    if len > cap {
        return Err(std::io::Error::other(format!(
            "{} is {len} bytes, over the {cap} a cache file may be",
            path.display()
        )));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    f.take(cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(std::io::Error::other(format!(
            "{} grew over {cap} bytes while read",
            path.display()
        )));
    }
    Ok(bytes)
}

/// Fill `buf` from the kernel's random source with the raw `getrandom` system call (Linux 3.17+),
/// not glibc's `getrandom(3)` wrapper, which glibc 2.25 added: the wheel's binary links against
/// glibc 2.17.
pub(crate) fn random_bytes(buf: &mut [u8]) -> std::io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let rest = &mut buf[filled..];
        // SAFETY: `rest` is a valid, writable buffer of the length given.
        let n = unsafe { libc::syscall(libc::SYS_getrandom, rest.as_mut_ptr(), rest.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        filled += usize::try_from(n).unwrap_or(0);
    }
    Ok(())
}
