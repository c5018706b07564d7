//! A Python environment's facts, from ONE run of a small embedded script (python_facts.py)
//! that prints JSON: interpreter, package versions (importlib.metadata), torch's CUDA build.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::process::{self, CommandSpec};

const SCRIPT: &str = include_str!("python_facts.py");
const TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TorchFacts {
    pub version: Option<String>,
    /// `torch.version.cuda` ("13.0"); None for CPU builds.
    pub cuda: Option<String>,
    #[serde(default)]
    pub arch_list: Vec<String>,
    pub device_count: Option<u32>,
    /// Why `import torch` failed.
    pub error: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PythonFacts {
    pub executable: String,
    pub version: String,
    pub purelib: Option<PathBuf>,
    #[serde(default)]
    pub packages: BTreeMap<String, String>,
    pub torch: Option<TorchFacts>,
}

/// Run the facts script with `python`; an error names what went wrong in one line.
pub fn collect(python: &str) -> Result<PythonFacts, String> {
    let mut spec = CommandSpec::new(python, ["-c", SCRIPT]);
    // Keep torch quiet and fast: no CUDA context just to count devices.
    spec.env
        .insert("PYTORCH_NVML_BASED_CUDA_CHECK".into(), "1".into());
    let out = process::capture_timeout(&spec, TIMEOUT).map_err(|e| e.to_string())?;
    if out.timed_out {
        return Err(format!(
            "`{python}` did not finish the facts script within {}s",
            TIMEOUT.as_secs()
        ));
    }
    let line = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("KILN_FACTS "));
    match line {
        Some(json) => {
            serde_json::from_str(json).map_err(|e| format!("unreadable facts from `{python}`: {e}"))
        }
        None => {
            let tail: Vec<&str> = out.stderr.lines().rev().take(3).collect();
            Err(format!(
                "`{python}` failed ({}): {}",
                out.code
                    .map(|c| format!("exit {c}"))
                    .unwrap_or_else(|| "killed".into()),
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            ))
        }
    }
}

/// Package versions from the `*.dist-info/METADATA` files of a site-packages directory (a file read).
pub fn dist_versions(site: &Path) -> BTreeMap<String, String> {
    let mut versions = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(site) else {
        return versions;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".dist-info") {
            continue;
        }
        let Ok(meta) = std::fs::read_to_string(entry.path().join("METADATA")) else {
            continue;
        };
        let field = |key: &str| {
            meta.lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|v| v.trim().to_string())
        };
        if let (Some(n), Some(v)) = (field("Name:"), field("Version:")) {
            versions.insert(normalize(&n), v);
        }
    }
    versions
}

/// PEP 503 name normalization ("Flash_Attn" → "flash-attn").
pub fn normalize(name: &str) -> String {
    name.to_ascii_lowercase().replace(['_', '.'], "-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_dist_info_versions() {
        let site = tempfile::tempdir().unwrap();
        let d = site.path().join("flashinfer_python-0.6.3.dist-info");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("METADATA"),
            "Metadata-Version: 2.1\nName: flashinfer-python\nVersion: 0.6.3\n",
        )
        .unwrap();
        assert_eq!(
            dist_versions(site.path())
                .get("flashinfer-python")
                .map(String::as_str),
            Some("0.6.3")
        );
    }

    #[test]
    fn the_script_runs_under_the_system_python() {
        let Ok(python) = which::which("python3") else {
            return;
        };
        let facts = collect(&python.display().to_string()).expect("facts script runs");
        assert!(facts.version.starts_with('3'), "{facts:?}");
    }
}
