//! Bounded reads of files a user names or kiln finds on disk (`serve --log`, `--metrics`,
//! `bench --prompt-file`, `--baseline`, receipts, patched sources): regular files only, read up
//! to a cap. A FIFO, a socket or a device node (`/dev/zero`) is refused at once: it is opened
//! non-blocking and checked before a byte is read, so nothing blocks or grows without end.

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use crate::error::{Error, Result};

/// Caps for what kiln reads (a server log, a metrics page, a prompt, a baseline or history,
/// a patched source file, the receipts index).
pub(crate) const LOG_CAP: u64 = 512 << 20;
pub(crate) const METRICS_CAP: u64 = 64 << 20;
pub(crate) const PROMPT_CAP: u64 = 16 << 20;
pub(crate) const BASELINE_CAP: u64 = 256 << 20;
pub(crate) const SOURCE_CAP: u64 = 64 << 20;
pub(crate) const INDEX_CAP: u64 = 64 << 20;

/// Cap for state and cache files kiln wrote itself and reads back (records, memos, caches):
/// what was planted there in their place (a FIFO, `/dev/zero`) is refused, never waited on.
pub(crate) const STATE_CAP: u64 = 64 << 20;

/// The text of a state or cache file (see [`STATE_CAP`]), or why not: a missing file stays
/// `NotFound`; anything but a regular UTF-8 file within `cap` is an error.
pub(crate) fn read_state(path: &Path, cap: u64) -> std::io::Result<String> {
    String::from_utf8(read_io(path, cap)?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Open `path` for reading without blocking on a FIFO or becoming a controlling terminal.
pub(crate) fn open(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
}

/// What a path that is not a regular file is, for messages.
fn kind_name(kind: std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Read the regular file `path`, at most `cap` bytes; anything else is an `InvalidInput` error
/// saying what it is (a missing file stays `NotFound`).
pub(crate) fn read_io(path: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Error as IoError, ErrorKind};
    let mut file = open(path)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(IoError::new(
            ErrorKind::InvalidInput,
            format!("it is {}, not a regular file", kind_name(meta.file_type())),
        ));
    }
    let over = |size: u64| {
        IoError::new(
            ErrorKind::InvalidInput,
            format!(
                "it is {}, over kiln's {} limit for it",
                crate::units::human_bytes(size as f64),
                crate::units::human_bytes(cap as f64)
            ),
        )
    };
    if meta.len() > cap {
        return Err(over(meta.len()));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    (&mut file).take(cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(over(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Read the regular file `path` (the `what` of the error messages, e.g. "the server log"),
/// refusing anything else or anything over `cap` bytes, with a hint.
pub(crate) fn read(path: &Path, what: &str, cap: u64) -> Result<Vec<u8>> {
    read_io(path, cap).map_err(|e| {
        if e.kind() == std::io::ErrorKind::InvalidInput {
            Error::usage(
                format!("refusing to read {what} {}: {e}", path.display()),
                Some(format!(
                    "name a regular file that holds {what} (save a stream or a large file's last part to one first)"
                )),
            )
        } else {
            Error::io(format!("cannot read {what} {}", path.display()), e)
        }
    })
}

/// [`read`] as UTF-8 text (invalid sequences replaced).
pub(crate) fn read_text(path: &Path, what: &str, cap: u64) -> Result<String> {
    let bytes = read(path, what, cap)?;
    Ok(match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_zero_a_fifo_and_a_directory_are_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo on a valid C string path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for (path, kind) in [
            (Path::new("/dev/zero"), "a character device"),
            (fifo.as_path(), "a FIFO"),
            (dir.path(), "a directory"),
        ] {
            let e = read(path, "the server log", 1 << 20).unwrap_err().render();
            assert!(e.contains(kind) && e.contains("hint:"), "{e}");
        }
    }

    #[test]
    fn a_file_over_the_cap_is_refused_and_one_under_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("log");
        std::fs::write(&file, "0123456789").unwrap();
        assert_eq!(read(&file, "x", 10).unwrap(), b"0123456789");
        let e = read(&file, "the prompt file", 9).unwrap_err().render();
        assert!(
            e.contains("over kiln's 9 B limit") && e.contains("hint:"),
            "{e}"
        );
    }
}
