//! Installed Python distributions, read as files (never imported): PEP 503 project names and the
//! `Name`/`Version` headers of `<site>/<name>-<version>.dist-info/METADATA`. The one reader for
//! doctor's package facts and for patch sets' version checks.

use std::path::{Path, PathBuf};

/// PEP 503 normalisation: lower case, runs of `-`, `_`, `.` become `-` (`Flash_Attn` →
/// `flash-attn`).
pub(crate) fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// The METADATA files of every `*.dist-info` directory in `site`, with the normalised project
/// name their directory gives (`flashinfer_python-0.6.3.dist-info` → `flashinfer-python`).
pub(crate) fn dist_infos(site: &Path) -> std::io::Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(site)?.flatten() {
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let Some(stem) = file_name.strip_suffix(".dist-info") else {
            continue;
        };
        // `<name>-<version>`: names are escaped with `_`, so the last `-` splits them.
        let Some((name, _)) = stem.rsplit_once('-') else {
            continue;
        };
        out.push((normalize(name), entry.path().join("METADATA")));
    }
    out.sort();
    Ok(out)
}

/// The `Name` and `Version` headers of a METADATA text (headers end at the first blank line).
pub(crate) fn name_and_version(metadata: &str) -> (Option<String>, Option<String>) {
    let header = |key: &str| {
        metadata
            .lines()
            .take_while(|l| !l.is_empty())
            .find_map(|l| {
                l.strip_prefix(key)
                    .and_then(|r| r.strip_prefix(':'))
                    .map(|v| v.trim().to_string())
            })
    };
    (header("Name"), header("Version"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_normalise_and_headers_stop_at_the_body() {
        assert_eq!(normalize("Flash__Attn.x"), "flash-attn-x");
        let meta = "Metadata-Version: 2.1\nName: flashinfer_python\nVersion: 0.6.3\n\nName: not-a-header\n";
        assert_eq!(
            name_and_version(meta),
            (Some("flashinfer_python".into()), Some("0.6.3".into()))
        );
        assert_eq!(name_and_version("\nName: body-only\n"), (None, None));
    }
}
