//! A step's step-cache key: its fingerprint's inputs made portable across state directories,
//! plus what the host gives every build (the `requires` tools' versions, OS, CPU arch and
//! feature flags, libc).
//!
//! Portable: the state and cache directories are written `${state}` and `${cache}` wherever a
//! definition, env value or input path names them, so state B asks for the key state A stored.
//! The GPU arch and CUDA version reach the key where the step interpolates them (`${host.gpu.cc}`,
//! a toolkit's version): they are in its resolved command, hence in `definition`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Serialize;

use super::fingerprint::{expand_inputs, NO_MATCH};
use crate::cache::steps::StepKey;
use crate::error::Result;
use crate::hash::{sha256_bytes, HashMemo};
use crate::paths::StatePaths;
use crate::recipe::Step;
use crate::requires::{Found, Requirement};

/// Text with the cache and state directories written as `${cache}` and `${state}`.
pub(crate) struct Portable {
    cache: String,
    state: String,
}

impl Portable {
    pub(crate) fn new(paths: &StatePaths) -> Self {
        Portable {
            cache: paths.cache().display().to_string(),
            state: paths.root().display().to_string(),
        }
    }

    pub(crate) fn text(&self, text: &str) -> String {
        // The cache first: by default it sits inside the state directory.
        let mut out = text.to_string();
        for (dir, name) in [(&self.cache, "${cache}"), (&self.state, "${state}")] {
            if dir.is_empty() || dir == "/" {
                continue;
            }
            out = replace_dir(&out, dir, name);
        }
        out
    }

    pub(crate) fn path(&self, path: &Path) -> String {
        self.text(&path.display().to_string())
    }
}

/// Replace `dir` where it is a whole path prefix (followed by `/`, the end, a quote or a space).
fn replace_dir(text: &str, dir: &str, name: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(dir) {
        let after = &rest[at + dir.len()..];
        let whole = after.is_empty() || after.starts_with(['/', '"', '\'', ' ', '\n', '\\']);
        out.push_str(&rest[..at]);
        out.push_str(if whole { name } else { dir });
        rest = after;
    }
    out.push_str(rest);
    out
}

#[derive(Serialize)]
struct Definition<'a> {
    kind: &'a crate::recipe::StepKind,
    cwd: &'a Path,
    check: &'a Option<crate::recipe::Check>,
    outputs: &'a [PathBuf],
}

/// The key of `step`, given its dependencies' key ids and the recipe's own `requires`.
pub(crate) fn compute(
    step: &Step,
    deps: BTreeMap<String, String>,
    recipe_requires: &[Requirement],
    paths: &StatePaths,
    memo: &HashMemo,
) -> Result<StepKey> {
    let portable = Portable::new(paths);
    let definition = serde_json::to_string(&Definition {
        kind: &step.kind,
        cwd: &step.cwd,
        check: &step.check,
        outputs: &step.outputs,
    })
    .expect("definitions serialize");
    let mut key = StepKey::new();
    key.definition = sha256_bytes(portable.text(&definition).as_bytes());
    key.env = step
        .env
        .iter()
        .map(|(k, v)| (k.clone(), sha256_bytes(portable.text(v).as_bytes())))
        .collect();
    for pattern in &step.inputs {
        let files = expand_inputs(pattern);
        if files.is_empty() {
            key.inputs.insert(portable.text(pattern), NO_MATCH.into());
        }
        for f in files {
            key.inputs.insert(portable.path(&f), memo.file(&f)?);
        }
    }
    key.deps = deps;
    for r in recipe_requires.iter().chain(&step.requires) {
        key.tools
            .insert(r.tool.name.to_string(), tool_version(r.tool.name, r));
    }
    if builds_with_cuda(&definition, &step.env) {
        key.tools
            .insert("nvcc".into(), nvcc_version(step.env.get("CUDA_HOME")));
    }
    key.host = host();
    Ok(key)
}

/// Whether a step's definition or env names CUDA (nvcc, a toolkit, a GPU arch): then the nvcc
/// it finds is part of its key. Naming it where it does not build with it only costs a miss
/// when nvcc changes.
fn builds_with_cuda(definition: &str, env: &BTreeMap<String, String>) -> bool {
    let words = [
        "nvcc",
        "cuda",
        "sm_",
        "compute_",
        "gpu.cc",
        "torch_cuda_arch",
    ];
    std::iter::once(definition)
        .chain(env.iter().flat_map(|(k, v)| [k.as_str(), v.as_str()]))
        .any(|text| {
            let lower = text.to_ascii_lowercase();
            words.iter().any(|w| lower.contains(w))
        })
}

/// The version nvcc reports (`V13.0.88`), found through the step's `CUDA_HOME`, then kiln's,
/// then PATH (asked once per nvcc and process); `missing` where there is none, `unknown` where
/// it says no version.
fn nvcc_version(step_cuda_home: Option<&String>) -> String {
    static SEEN: Mutex<BTreeMap<PathBuf, String>> = Mutex::new(BTreeMap::new());
    let nvcc = step_cuda_home
        .cloned()
        .or_else(|| std::env::var("CUDA_HOME").ok())
        .map(|h| Path::new(&h).join("bin/nvcc"))
        .filter(|p| p.exists())
        .or_else(|| which::which("nvcc").ok());
    let Some(nvcc) = nvcc else {
        return "missing".into();
    };
    if let Some(v) = SEEN.lock().ok().and_then(|m| m.get(&nvcc).cloned()) {
        return v;
    }
    let v = crate::process::capture(&nvcc.display().to_string(), &["--version"])
        .ok()
        .and_then(|out| nvcc_release(&out))
        .unwrap_or_else(|| "unknown".into());
    if let Ok(mut m) = SEEN.lock() {
        m.insert(nvcc, v.clone());
    }
    v
}

/// `V13.0.88` from `nvcc --version`'s "Cuda compilation tools, release 13.0, V13.0.88".
fn nvcc_release(out: &str) -> Option<String> {
    out.split_whitespace()
        .find(|w| w.starts_with('V') && w[1..].starts_with(|c: char| c.is_ascii_digit()))
        .map(str::to_string)
}

/// The version a `requires` tool reports on PATH (asked once per tool and process).
fn tool_version(name: &str, r: &Requirement) -> String {
    static SEEN: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());
    if let Some(v) = SEEN.lock().ok().and_then(|m| m.get(name).cloned()) {
        return v;
    }
    let probe = Requirement {
        tool: r.tool,
        min: None,
    };
    let v = match probe.check() {
        Found::Ok {
            version: Some(v), ..
        }
        | Found::TooOld { version: v, .. } => v.to_string(),
        Found::Ok { version: None, .. } | Found::Broken { .. } => "unknown".into(),
        Found::Missing => "missing".into(),
    };
    if let Ok(mut m) = SEEN.lock() {
        m.insert(name.to_string(), v.clone());
    }
    v
}

/// The operating system, CPU architecture and C library every binary a step builds links to.
fn host() -> BTreeMap<String, String> {
    let mut h = BTreeMap::new();
    h.insert("os".into(), std::env::consts::OS.into());
    h.insert("arch".into(), std::env::consts::ARCH.into());
    h.insert("libc".into(), libc_version());
    // A `-march=native` build (llama.cpp's GGML_NATIVE) runs only where these CPU features are.
    h.insert("cpu_features".into(), cpu_features());
    h
}

/// sha256 of the first CPU's sorted feature flags (`/proc/cpuinfo` `flags`, arm64 `Features`);
/// "unknown" where there is none.
fn cpu_features() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .map_or_else(|_| "unknown".into(), |i| cpu_features_of(&i))
}

/// [`cpu_features`] of a `/proc/cpuinfo` text.
fn cpu_features_of(info: &str) -> String {
    let flags = info.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        matches!(name.trim(), "flags" | "Features").then_some(value)
    });
    flags.map_or_else(
        || "unknown".into(),
        |f| {
            let mut words: Vec<&str> = f.split_whitespace().collect();
            words.sort_unstable();
            sha256_bytes(words.join(" ").as_bytes())
        },
    )
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn libc_version() -> String {
    // SAFETY: gnu_get_libc_version returns a pointer to a static NUL-terminated string.
    let v = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
    format!("glibc {}", v.to_string_lossy())
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn libc_version() -> String {
    format!("{} default", std::env::consts::OS)
}

#[cfg(test)]
mod tests {
    use super::{cpu_features_of, host, nvcc_release, replace_dir};

    /// The CPU-features part of the key: the first CPU's flags, order aside; one flag more or
    /// less (a `-march=native` build would use it) is another key.
    #[test]
    fn the_cpu_features_part_of_the_key_is_the_first_cpus_flag_set() {
        let info = |flags: &str| {
            format!("processor\t: 0\nmodel name\t: X\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: fpu\n")
        };
        let avx512 = cpu_features_of(&info("fpu sse2 avx2 avx512f"));
        assert_eq!(avx512, cpu_features_of(&info("avx512f avx2 fpu sse2")));
        assert_ne!(avx512, cpu_features_of(&info("fpu sse2 avx2")));
        assert_eq!(
            avx512,
            crate::hash::sha256_bytes(b"avx2 avx512f fpu sse2"),
            "sha256 of the sorted flags"
        );
        let arm = cpu_features_of("processor\t: 0\nFeatures\t: fp asimd sve\n");
        assert_eq!(arm, crate::hash::sha256_bytes(b"asimd fp sve"));
        assert_eq!(cpu_features_of("processor\t: 0\n"), "unknown");
        let here = std::fs::read_to_string("/proc/cpuinfo").unwrap();
        assert_eq!(host()["cpu_features"], cpu_features_of(&here));
    }

    #[test]
    fn the_nvcc_version_is_read_from_a_real_nvcc_output() {
        // The H200's `nvcc --version` (/work/shared/fixtures/gpu/h200x2/nvcc-version.txt).
        let text =
            "nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2025 NVIDIA Corporation\n\
                    Built on Wed_Aug_20_01:58:59_PM_PDT_2025\n\
                    Cuda compilation tools, release 13.0, V13.0.88\n\
                    Build cuda_13.0.r13.0/compiler.36424714_0\n";
        assert_eq!(nvcc_release(text).as_deref(), Some("V13.0.88"));
    }

    #[test]
    fn only_whole_directory_prefixes_are_made_portable() {
        assert_eq!(
            replace_dir("[\"/s/a/work/x\",\"/s/ab\",\"/s/a\"]", "/s/a", "${state}"),
            "[\"${state}/work/x\",\"/s/ab\",\"${state}\"]"
        );
    }
}
