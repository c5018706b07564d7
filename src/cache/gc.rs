//! `kiln cache gc`'s walk, one for both caches: staging leftovers, entries their cache's own
//! check refuses, and entries older than the limit go; each with the reason.

use std::path::Path;

use crate::error::{Error, Result};

/// Remove from `root` the entries (directories named by an id) that `check` refuses (it says why) or what is older than
/// `max_age_secs` (`check` gives an entry's creation time), and staging directories no live
/// process holds ([`super::staging::sweep`]; one a store holds is left alone).
pub(crate) fn gc(
    root: &Path,
    max_age_secs: Option<u64>,
    check: impl Fn(&Path, &str) -> std::result::Result<u64, String>,
) -> Result<Vec<(String, String)>> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut removed: Vec<(String, String)> = super::staging::sweep(root)
        .into_iter()
        .map(|name| (name, "unfinished insert".to_string()))
        .collect();
    for e in std::fs::read_dir(root).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let path = e.path();
        if name.starts_with('.') {
            continue; // staging: swept above, or held by a live store
        }
        if !super::is_hex64(&name) {
            continue; // not an entry: nothing kiln laid out, never removed
        }
        let reason = match check(&path, &name) {
            Err(why) => Some(why),
            Ok(created) if max_age_secs.is_some_and(|max| now.saturating_sub(created) > max) => {
                Some("older than --older-than".into())
            }
            Ok(_) => None,
        };
        if let Some(reason) = reason {
            std::fs::remove_dir_all(&path)
                .map_err(|e| Error::io(format!("cannot remove {}", path.display()), e))?;
            removed.push((name, reason));
        }
    }
    Ok(removed)
}
