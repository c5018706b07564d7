//! torch's facts from its installed files, never `import torch` (seconds of CUDA start-up): the
//! version and CUDA build from `torch/version.py`, the architectures it carries kernels for
//! from the device code of its CUDA libraries (`torch/lib/lib*cuda*.so`, [`crate::fatbin`]).

use std::path::{Path, PathBuf};

use crate::fatbin;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct TorchFacts {
    pub version: Option<String>,
    /// `torch.version.cuda` ("13.0"); None for CPU builds.
    pub cuda: Option<String>,
    /// The architectures its CUDA libraries carry code for (`sm_90`, `compute_120`).
    #[serde(default)]
    pub arch_list: Vec<String>,
    /// The libraries `arch_list` was read from.
    pub arch_source: Option<String>,
    /// Why torch's files could not be read.
    pub error: Option<String>,
}

/// torch's facts from the package directory `dir` (`…/site-packages/torch`).
pub(crate) fn from_files(dir: &Path) -> TorchFacts {
    let version_py = dir.join("version.py");
    // A file kiln did not write: never waited on (a FIFO), never read past 1 MiB.
    let text = match crate::bounded::read_state(&version_py, 1 << 20) {
        Ok(t) => t,
        Err(e) => {
            return TorchFacts {
                error: Some(format!("cannot read {}: {e}", version_py.display())),
                ..TorchFacts::default()
            }
        }
    };
    let mut facts = TorchFacts {
        version: assigned(&text, "__version__"),
        cuda: assigned(&text, "cuda"),
        ..TorchFacts::default()
    };
    if facts.cuda.is_none() {
        return facts; // a CPU build: no CUDA libraries to read
    }
    let libs = cuda_libraries(&dir.join("lib"));
    let mut images = Vec::new();
    for lib in &libs {
        match fatbin::read(lib) {
            Ok(found) => images.extend(found),
            Err(e) => {
                facts.error = Some(e.to_string());
                return facts;
            }
        }
    }
    let archs = fatbin::archs(&images);
    facts.arch_list = archs.iter().map(ToString::to_string).collect();
    facts.arch_source = libs
        .iter()
        .map(|l| l.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
        .into();
    facts
}

/// The value of a `NAME = '…'` (or `NAME: Optional[str] = '…'`) line of version.py; None for
/// `None` or no such line.
fn assigned(text: &str, name: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        if !(rest.starts_with(' ') || rest.starts_with(':') || rest.starts_with('=')) {
            return None;
        }
        let value = rest.rsplit_once('=')?.1.trim();
        let quoted = value
            .strip_prefix('\'')
            .and_then(|v| v.strip_suffix('\''))
            .or_else(|| value.strip_prefix('"').and_then(|v| v.strip_suffix('"')))?;
        Some(quoted.to_string())
    })
}

/// The libraries torch's kernels are read from: `libtorch_cuda.so` (what torch was built for:
/// `torch.cuda.get_arch_list()`'s sm list), else every `lib*cuda*.so*` in `lib`, sorted. (Its
/// `libtorch_cuda_linalg.so` adds MAGMA's own sm_50 and sm_60, which torch's kernels lack.)
fn cuda_libraries(lib: &Path) -> Vec<PathBuf> {
    let main = lib.join("libtorch_cuda.so");
    if main.is_file() {
        return vec![main];
    }
    let Ok(entries) = std::fs::read_dir(lib) else {
        return Vec::new();
    };
    let mut libs: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("lib") && n.contains("cuda") && n.contains(".so"))
                && p.is_file()
        })
        .collect();
    libs.sort();
    libs
}

#[cfg(test)]
mod tests {
    use super::*;

    const VERSION_PY: &str = "from typing import Optional\n\n__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'xpu']\n__version__ = '2.9.1+cu130'\ndebug = False\ncuda: Optional[str] = '13.0'\ngit_version = 'd38164a545b4a4e4e0cf73ce67173f70574890b6'\nhip: Optional[str] = None\nxpu: Optional[str] = None\n";

    #[test]
    fn version_py_gives_the_version_and_cuda_build() {
        assert_eq!(
            assigned(VERSION_PY, "__version__").as_deref(),
            Some("2.9.1+cu130")
        );
        assert_eq!(assigned(VERSION_PY, "cuda").as_deref(), Some("13.0"));
        assert_eq!(assigned(VERSION_PY, "hip"), None);
        assert_eq!(assigned(VERSION_PY, "__all__"), None);
        let cpu = VERSION_PY.replace("'13.0'", "None");
        assert_eq!(assigned(&cpu, "cuda"), None);
    }

    #[test]
    fn a_torch_without_its_version_py_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let t = from_files(dir.path());
        assert!(
            t.error.as_deref().is_some_and(|e| e.contains("version.py")),
            "{t:?}"
        );
    }

    /// A fatbin holding one cubin for `arch`.
    fn one_cubin(arch: u32) -> Vec<u8> {
        let mut entry = vec![0u8; 64];
        entry[0] = 2; // ELF
        entry[4] = 64; // header size
        entry[28..32].copy_from_slice(&arch.to_le_bytes());
        let mut out = 0xBA55_ED50u32.to_le_bytes().to_vec();
        out.extend(1u16.to_le_bytes());
        out.extend(16u16.to_le_bytes());
        out.extend(64u64.to_le_bytes());
        out.extend(entry);
        out
    }

    #[test]
    fn the_arch_list_is_libtorch_cudas_when_it_is_there() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("version.py"), VERSION_PY).unwrap();
        let lib = dir.path().join("lib");
        std::fs::create_dir(&lib).unwrap();
        std::fs::write(lib.join("libtorch_cuda_linalg.so"), one_cubin(50)).unwrap();
        std::fs::write(lib.join("libc10_cuda.so"), one_cubin(60)).unwrap();
        assert_eq!(from_files(dir.path()).arch_list, ["sm_50", "sm_60"]);
        std::fs::write(lib.join("libtorch_cuda.so"), one_cubin(90)).unwrap();
        let t = from_files(dir.path());
        assert_eq!(t.arch_list, ["sm_90"], "{t:?}");
    }

    #[test]
    fn a_hostile_cuda_library_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("version.py"), VERSION_PY).unwrap();
        std::fs::create_dir(dir.path().join("lib")).unwrap();
        std::fs::write(dir.path().join("lib/libtorch_cuda.so"), b"\x7fELF cut").unwrap();
        let t = from_files(dir.path());
        assert_eq!(t.version.as_deref(), Some("2.9.1+cu130"));
        assert!(
            t.error
                .as_deref()
                .is_some_and(|e| e.contains("libtorch_cuda.so")),
            "{t:?}"
        );
    }
}
