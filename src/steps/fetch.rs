//! `kind = "fetch"`: download (http, https, file) into the content-addressed cache, verified by
//! sha256 before it is published there; a mismatch or a truncated body leaves nothing behind.
//!
//! Every HTTP download has deadlines: [`CONNECT_TIMEOUT`] to connect, [`IDLE_TIMEOUT`] without a
//! byte, and the step's `timeout` (if any) for the whole download; a stall names the URL and the
//! bytes received.

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::fs::create_dir;
use crate::hash::{hex, HashMemo};

pub(crate) fn fetch(
    url: &str,
    sha256: &str,
    path: &Path,
    deadline: Option<Duration>,
    log: &mut dyn Write,
    memo: &HashMemo,
    progress: &dyn crate::report::Progress,
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
    let result = download(url, tmp.path(), deadline, progress).and_then(|(actual, _)| {
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

/// Remove `.partial-PID-*` downloads whose process is gone (SIGKILL, a crash). The cache may be
/// shared by runs with other state directories, so a live PID's file is left alone, and so is
/// one written in the last ten minutes (the cache may be shared across hosts or containers too,
/// where that PID means nothing here; a live download writes, a stalled one gives up sooner).
pub(crate) fn remove_stale_partials(downloads: &Path) {
    let idle = |e: &std::fs::DirEntry| {
        e.metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|d| d >= Duration::from_secs(600))
    };
    crate::fs::remove_left_behind(
        downloads,
        |name| {
            name.strip_prefix(".partial-")?
                .split('-')
                .next()?
                .parse()
                .ok()
        },
        |pid, e| !crate::process::pid_exists(pid) && idle(e),
    );
}

fn tempfile_in(dir: &Path) -> TempFile {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    TempFile(dir.join(format!(".partial-{}-{nanos}", std::process::id())))
}

/// Connecting to a download server.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Without one byte arriving, a download has stalled.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

fn download(
    url: &str,
    to: &Path,
    deadline: Option<Duration>,
    progress: &dyn crate::report::Progress,
) -> Result<(String, u64)> {
    let fail = |reason: String| Error::Download {
        url: url.to_string(),
        reason,
    };
    let started = Instant::now();
    let (reader, expected): (Box<dyn Read>, Option<u64>) =
        if let Some(p) = url.strip_prefix("file://") {
            let f = File::open(p).map_err(|e| fail(e.to_string()))?;
            let len = f.metadata().ok().map(|m| m.len());
            (Box::new(f), len)
        } else {
            let mut agent = ureq::AgentBuilder::new()
                .timeout_connect(CONNECT_TIMEOUT)
                .timeout_read(IDLE_TIMEOUT);
            if let Some(d) = deadline {
                agent = agent.timeout(d);
            }
            let resp = agent
                .build()
                .get(url)
                .call()
                .map_err(|e| fail(without_url(&e.to_string(), url)))?;
            let len = resp.header("content-length").and_then(|v| v.parse().ok());
            (resp.into_reader(), len)
        };
    let mut out =
        File::create(to).map_err(|e| Error::io(format!("cannot write {}", to.display()), e))?;
    let (sha, got) = match copy_hashing(reader, &mut out, &|done| progress.bytes(done, expected)) {
        Ok(done) => done,
        Err(Copy::Write(e)) => {
            return Err(Error::io(format!("cannot write the download of {url}"), e))
        }
        Err(Copy::Read(e, got)) if e.kind() == std::io::ErrorKind::TimedOut => {
            let elapsed = started.elapsed();
            let why = match deadline {
                Some(d) if elapsed + Duration::from_millis(500) >= d => format!(
                    "not finished within the step's timeout of {} s ({got} bytes received)",
                    d.as_secs()
                ),
                _ => format!(
                    "stalled: no data for {} s ({got} bytes received)",
                    IDLE_TIMEOUT.as_secs()
                ),
            };
            return Err(fail(why));
        }
        Err(Copy::Read(e, got)) => {
            return Err(fail(format!("transfer interrupted after {got} bytes: {e}")))
        }
    };
    crate::fs::sync_file(&out).map_err(|e| Error::io("cannot flush a download", e))?;
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

/// ureq's message without the URL it starts with (the error names it already).
fn without_url(message: &str, url: &str) -> String {
    message
        .strip_prefix(url)
        .and_then(|m| m.strip_prefix(": "))
        .unwrap_or(message)
        .to_string()
}

/// Why a copy stopped: the source failed after some bytes, or the destination refused them.
enum Copy {
    Read(std::io::Error, u64),
    Write(std::io::Error),
}

fn copy_hashing(
    mut r: impl Read,
    w: &mut impl Write,
    progress: &dyn Fn(u64),
) -> std::result::Result<(String, u64), Copy> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0;
    loop {
        let n = match r.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Copy::Read(e, total)),
        };
        if n == 0 {
            return Ok((hex(&h.finalize()), total));
        }
        h.update(&buf[..n]);
        w.write_all(&buf[..n]).map_err(Copy::Write)?;
        total += n as u64;
        progress(total);
    }
}
