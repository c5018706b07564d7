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
    key.host = host();
    Ok(key)
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
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
        return "unknown".into();
    };
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
    use super::replace_dir;

    #[test]
    fn only_whole_directory_prefixes_are_made_portable() {
        assert_eq!(
            replace_dir("[\"/s/a/work/x\",\"/s/ab\",\"/s/a\"]", "/s/a", "${state}"),
            "[\"${state}/work/x\",\"/s/ab\",\"${state}\"]"
        );
    }
}
