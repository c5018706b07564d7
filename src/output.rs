//! Output paths kiln writes (`bench --plot`, `cache export FILE`, `image export -o`): written,
//! never replaced. A missing or regular file is written through a temp file beside it and
//! renamed; `/dev/stdout`, `/dev/stderr`, `/dev/null` and `/dev/fd/N` are written through where
//! the command can stream; anything else that exists (a device node, a FIFO, a socket, a
//! directory, a symlink) is refused, and so is a parent directory that does not exist (kiln
//! does not create directories for an output).

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// How an output path is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    /// A regular file, or none yet: temp file beside it, then rename.
    File,
    /// A stream the user named (`/dev/stdout`, …): opened and written in place.
    Stream,
}

/// Paths that name a stream the user asked to write to.
fn is_stream_name(path: &Path) -> bool {
    let text = path.to_string_lossy();
    matches!(text.as_ref(), "/dev/stdout" | "/dev/stderr" | "/dev/null")
        || ["/dev/fd/", "/proc/self/fd/"].iter().any(|p| {
            text.strip_prefix(p)
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
}

/// Check `path` as the output `what` (e.g. "the plot"); `can_stream` says whether the command
/// can write a stream (an image export seeks, so it cannot).
pub(crate) fn check(path: &Path, what: &str, can_stream: bool) -> Result<Output> {
    if can_stream && is_stream_name(path) {
        return Ok(Output::Stream);
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        return Err(Error::usage(
            format!(
                "cannot write {what} to {}: the directory {} does not exist",
                path.display(),
                parent.display()
            ),
            Some(
                "create the directory first (kiln does not create directories for an output)"
                    .to_string(),
            ),
        ));
    }
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Output::File),
        Err(e) => return Err(Error::io(format!("cannot inspect {}", path.display()), e)),
    };
    let kind = meta.file_type();
    if kind.is_file() {
        return Ok(Output::File);
    }
    let name = if kind.is_symlink() {
        "symlink"
    } else if kind.is_dir() {
        "directory"
    } else if kind.is_char_device() {
        "character device"
    } else if kind.is_block_device() {
        "block device"
    } else if kind.is_fifo() {
        "FIFO"
    } else if kind.is_socket() {
        "socket"
    } else {
        "special file"
    };
    let stream_hint = if can_stream {
        " (to stream it, name /dev/stdout)"
    } else {
        ""
    };
    Err(Error::usage(
        format!(
            "refusing to write {what} to {}: it exists and is a {name}, and kiln replaces only regular files",
            path.display()
        ),
        Some(format!(
            "choose a new file name, or remove {} first{stream_hint}",
            path.display()
        )),
    ))
}

/// The temp file an output goes through: `.NAME.kiln-tmp` beside it.
pub(crate) fn temp_beside(path: &Path) -> PathBuf {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!(".{name}.kiln-tmp"))
}

/// Write `bytes` to the output `path` (checked as above), atomically when it is a file.
pub(crate) fn write(path: &Path, what: &str, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let ctx = |e| Error::io(format!("cannot write {}", path.display()), e);
    match check(path, what, true)? {
        Output::Stream => std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|mut f| f.write_all(bytes))
            .map_err(ctx),
        Output::File => {
            let temp = temp_beside(path);
            let written = std::fs::write(&temp, bytes)
                .and_then(|()| crate::fs::sync_file(&std::fs::File::open(&temp)?))
                .and_then(|()| crate::fs::rename(&temp, path));
            if written.is_err() {
                let _ = std::fs::remove_file(&temp);
            }
            written.map_err(ctx)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_named_not_guessed() {
        assert!(is_stream_name(Path::new("/dev/stdout")));
        assert!(is_stream_name(Path::new("/dev/fd/3")));
        assert!(!is_stream_name(Path::new("/dev/full")));
        assert!(!is_stream_name(Path::new("/dev/fd/")));
        assert!(!is_stream_name(Path::new("out/dev/stdout")));
    }

    #[test]
    fn device_nodes_symlinks_and_missing_parents_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = |p: &Path| check(p, "the plot", true).unwrap_err().render();
        assert!(err(Path::new("/dev/full")).contains("is a character device"));
        let link = dir.path().join("link.svg");
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), &link).unwrap();
        assert!(err(&link).contains("is a symlink"));
        assert!(err(&dir.path().join("no/such/dir/x.svg")).contains("does not exist"));
        assert!(err(dir.path()).contains("is a directory"));
        let file = dir.path().join("old.svg");
        std::fs::write(&file, "old").unwrap();
        assert_eq!(check(&file, "the plot", true).unwrap(), Output::File);
        write(&file, "the plot", b"new").unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"new");
    }

    #[test]
    fn a_command_that_cannot_stream_refuses_dev_stdout_wherever_it_points() {
        // `/dev/stdout` is a symlink whatever standard output is (a terminal, a pipe, or a
        // regular file under `cargo test >log`): a seeking writer refuses it in every case.
        let refused = check(Path::new("/dev/stdout"), "the image", false)
            .unwrap_err()
            .render();
        assert!(refused.contains("is a symlink"), "{refused}");
        assert_eq!(
            check(Path::new("/dev/stdout"), "x", true).unwrap(),
            Output::Stream
        );
    }
}
