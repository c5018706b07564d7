//! `kind = "extract"`: unpack tar, tar.gz, tar.xz or tar.zst into a directory. Entries with `..`
//! or absolute paths are refused; the result appears at `dest` whole or not at all.

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};
use crate::fs::create_dir;

pub(crate) fn extract(archive: &Path, dest: &Path, strip: u32, log: &mut dyn Write) -> Result<()> {
    let parent = dest.parent().unwrap_or(Path::new("."));
    create_dir(parent)?;
    let staging = parent.join(format!(
        ".{}.partial-{}",
        dest.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&staging);
    let result = unpack(archive, &staging, strip, log).and_then(|count| {
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

fn open(archive: &Path) -> Result<Box<dyn Read>> {
    let ctx = |e| Error::io(format!("cannot read archive {}", archive.display()), e);
    let mut f = BufReader::new(File::open(archive).map_err(ctx)?);
    let mut magic = [0u8; 6];
    let n = f.read(&mut magic).map_err(ctx)?;
    let f = std::io::Cursor::new(magic[..n].to_vec()).chain(f);
    Ok(match &magic[..n] {
        [0x1f, 0x8b, ..] => Box::new(flate2::read::GzDecoder::new(f)),
        [0xfd, b'7', b'z', b'X', b'Z', 0x00] => Box::new(xz2::read::XzDecoder::new(f)),
        [0x28, 0xb5, 0x2f, 0xfd, ..] => Box::new(zstd::stream::read::Decoder::new(f).map_err(ctx)?),
        _ => Box::new(f),
    })
}

fn unpack(archive: &Path, into: &Path, strip: u32, log: &mut dyn Write) -> Result<usize> {
    create_dir(into)?;
    let mut tar = tar::Archive::new(open(archive)?);
    tar.set_preserve_permissions(true);
    let bad =
        |e: std::io::Error| Error::io(format!("cannot read archive {}", archive.display()), e);
    let root = std::fs::canonicalize(into).map_err(bad)?;
    let mut count = 0;
    for entry in tar.entries().map_err(bad)? {
        let mut entry = entry.map_err(bad)?;
        let raw = entry.path().map_err(bad)?.into_owned();
        let shown = raw.display().to_string();
        let unsafe_entry = |why| Error::UnsafeArchive {
            archive: archive.to_path_buf(),
            entry: shown.clone(),
            why,
        };
        let rel = safe_relative(&raw).map_err(unsafe_entry)?;
        if let Some(target) = entry.link_name().map_err(bad)? {
            if entry.header().entry_type().is_hard_link() {
                safe_relative(&target).map_err(unsafe_entry)?;
            }
        }
        let rel: PathBuf = rel.components().skip(strip as usize).collect();
        if rel.as_os_str().is_empty() {
            continue;
        }
        let out = into.join(&rel);
        if let Some(p) = out.parent() {
            create_dir(p)?;
            // A directory on the way may be a symlink an earlier entry planted: stay inside.
            let real = std::fs::canonicalize(p).map_err(bad)?;
            if !real.starts_with(&root) {
                return Err(unsafe_entry(
                    "it would be written through a link outside the destination",
                ));
            }
        }
        entry.unpack(&out).map_err(bad)?;
        count += 1;
    }
    let _ = writeln!(log, "unpacked {count} entries from {}", archive.display());
    Ok(count)
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
