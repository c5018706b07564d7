//! Filesystem helpers every layer shares: directories that say which path failed, and atomic
//! writes (readers see the old content or the new, never a mix).

use std::fs::File;
use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};

/// Create `path` and its parents; the error names the path.
pub(crate) fn create_dir(path: &Path) -> Result<()> {
    std::fs::create_dir_all(path)
        .map_err(|e| Error::io(format!("cannot create {}", path.display()), e))
}

/// Write `bytes` to `path` so readers see the old content or the new, never a mix.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    create_dir(dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let ctx = |e| Error::io(format!("cannot write {}", path.display()), e);
    let mut f = File::create(&tmp).map_err(ctx)?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(ctx)?;
    std::fs::rename(&tmp, path).map_err(ctx)?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(ctx)
}
