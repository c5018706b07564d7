//! `kind = "fetch"`: download (http, https, file) into the content-addressed cache, verified by
//! sha256 before it is published there; a mismatch or a truncated body leaves nothing behind.

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::fs::create_dir;
use crate::hash::{hex, HashMemo};

pub(crate) fn fetch(
    url: &str,
    sha256: &str,
    path: &Path,
    log: &mut dyn Write,
    memo: &HashMemo,
) -> Result<()> {
    if path.is_file() && memo.file(path)? == sha256 {
        let _ = writeln!(log, "cached: {}", path.display());
        return Ok(());
    }
    let dir = path.parent().expect("cache paths have a parent");
    let downloads = dir.parent().expect("cache paths have a grandparent");
    create_dir(downloads)?;
    let tmp = tempfile_in(downloads);
    let _ = writeln!(log, "fetching {url}");
    let result = download(url, tmp.path()).and_then(|(actual, _)| {
        if actual != sha256 {
            return Err(Error::ChecksumMismatch {
                url: url.to_string(),
                expected: sha256.to_string(),
                actual,
            });
        }
        create_dir(dir)?;
        std::fs::rename(tmp.path(), path)
            .map_err(|e| Error::io(format!("cannot store {}", path.display()), e))
    });
    // On any failure the temp file is removed by its guard; nothing reaches `dir`.
    drop(tmp);
    result?;
    // The download was hashed while streaming: a later run needs no second pass over the file.
    memo.record(path, sha256)?;
    let _ = writeln!(log, "verified sha256 {sha256}\nstored {}", path.display());
    Ok(())
}

/// A temp file that is removed unless it was renamed away.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn tempfile_in(dir: &Path) -> TempFile {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    TempFile(dir.join(format!(".partial-{}-{nanos}", std::process::id())))
}

fn download(url: &str, to: &Path) -> Result<(String, u64)> {
    let fail = |reason: String| Error::Download {
        url: url.to_string(),
        reason,
    };
    let (reader, expected): (Box<dyn Read>, Option<u64>) =
        if let Some(p) = url.strip_prefix("file://") {
            let f = File::open(p).map_err(|e| fail(e.to_string()))?;
            let len = f.metadata().ok().map(|m| m.len());
            (Box::new(f), len)
        } else {
            let resp = ureq::get(url).call().map_err(|e| fail(e.to_string()))?;
            let len = resp.header("content-length").and_then(|v| v.parse().ok());
            (resp.into_reader(), len)
        };
    let mut out =
        File::create(to).map_err(|e| Error::io(format!("cannot write {}", to.display()), e))?;
    let (sha, got) =
        copy_hashing(reader, &mut out).map_err(|e| fail(format!("transfer interrupted: {e}")))?;
    out.sync_all()
        .map_err(|e| Error::io("cannot flush a download", e))?;
    if let Some(n) = expected {
        if got != n {
            return Err(Error::Truncated {
                url: url.to_string(),
                got,
                expected: n,
            });
        }
    }
    Ok((sha, got))
}

fn copy_hashing(mut r: impl Read, w: &mut impl Write) -> std::io::Result<(String, u64)> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0;
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            return Ok((hex(&h.finalize()), total));
        }
        h.update(&buf[..n]);
        w.write_all(&buf[..n])?;
        total += n as u64;
    }
}
