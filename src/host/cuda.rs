//! CUDA toolkits on this host: /usr/local/cuda-* (version.json), the default one, and `nvcc --version`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::process::{self, CommandSpec};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Toolkit {
    pub path: PathBuf,
    /// Full version from version.json ("13.0.2"), else from the directory name ("13.0").
    pub version: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct CudaFacts {
    pub toolkits: Vec<Toolkit>,
    /// Where /usr/local/cuda (or $CUDA_HOME) points.
    pub default: Option<Toolkit>,
    /// The `nvcc` that builds would use: $CUDA_HOME/bin/nvcc, else the one on PATH.
    pub nvcc_path: Option<PathBuf>,
    /// "13.0" from "Cuda compilation tools, release 13.0, V13.0.88".
    pub nvcc_release: Option<String>,
    /// "13.0.88".
    pub nvcc_build: Option<String>,
}

/// Collect toolkit facts under `root` (normally /usr/local) and from the environment.
pub(crate) fn collect(root: &Path) -> CudaFacts {
    let mut facts = CudaFacts::default();
    if let Ok(entries) = std::fs::read_dir(root) {
        let mut dirs: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                name.strip_prefix("cuda-").is_some_and(|v| v.contains('.')) && !p.is_symlink()
            })
            .collect();
        dirs.sort();
        facts.toolkits = dirs.iter().filter_map(|d| toolkit_at(d)).collect();
    }
    let cuda_home = std::env::var_os("CUDA_HOME").map(PathBuf::from);
    let default_dir = cuda_home.clone().unwrap_or_else(|| root.join("cuda"));
    facts.default = std::fs::canonicalize(&default_dir)
        .ok()
        .and_then(|d| toolkit_at(&d));
    let home_nvcc = cuda_home
        .map(|h| h.join("bin/nvcc"))
        .filter(|p| p.is_file());
    facts.nvcc_path = home_nvcc.or_else(|| which::which("nvcc").ok());
    if let Some(nvcc) = &facts.nvcc_path {
        let spec = CommandSpec::new(nvcc.display().to_string(), ["--version"]);
        if let Ok(out) = process::capture_timeout(&spec, Duration::from_secs(10)) {
            if let Some((release, build)) = parse_nvcc_version(&out.stdout) {
                facts.nvcc_release = Some(release);
                facts.nvcc_build = Some(build);
            }
        }
    }
    facts
}

fn toolkit_at(dir: &Path) -> Option<Toolkit> {
    let from_json = std::fs::read_to_string(dir.join("version.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| {
            v.pointer("/cuda/version")
                .and_then(|s| s.as_str())
                .map(str::to_string)
        });
    let from_name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("cuda-"))
        .filter(|v| v.contains('.'))
        .map(str::to_string);
    let version = from_json.or(from_name)?;
    Some(Toolkit {
        path: dir.to_path_buf(),
        version,
    })
}

/// ("13.0", "13.0.88") from `nvcc --version`.
pub(crate) fn parse_nvcc_version(text: &str) -> Option<(String, String)> {
    let line = text
        .lines()
        .find(|l| l.contains("Cuda compilation tools, release"))?;
    let release = line
        .split("release ")
        .nth(1)?
        .split(',')
        .next()?
        .trim()
        .to_string();
    let build = line
        .rsplit(", V")
        .next()
        .map(|b| b.trim().to_string())
        .filter(|b| !b.contains(' '))?;
    Some((release, build))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_real_nvcc_banner() {
        let t = "nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2025 NVIDIA Corporation\nBuilt on Wed_Aug_20_01:58:59_PM_PDT_2025\nCuda compilation tools, release 13.0, V13.0.88\nBuild cuda_13.0.r13.0/compiler.36424714_0\n";
        assert_eq!(
            parse_nvcc_version(t),
            Some(("13.0".into(), "13.0.88".into()))
        );
    }

    #[test]
    fn finds_toolkits_by_directory_and_version_json() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("cuda-13.0")).unwrap();
        std::fs::write(
            root.path().join("cuda-13.0/version.json"),
            r#"{"cuda":{"name":"CUDA SDK","version":"13.0.2"}}"#,
        )
        .unwrap();
        std::fs::create_dir_all(root.path().join("cuda-12.8")).unwrap();
        let facts = collect(root.path());
        let versions: Vec<&str> = facts.toolkits.iter().map(|t| t.version.as_str()).collect();
        assert_eq!(versions, ["12.8", "13.0.2"]);
    }
}
