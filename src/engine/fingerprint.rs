//! A step's fingerprint: sha256 over its resolved definition, env, input file hashes and its
//! dependencies' fingerprints — kept component by component so `plan` can say what changed.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::hash::{hex, sha256_bytes, HashMemo};
use crate::recipe::Step;

/// What an input pattern stands for when it matches nothing (yet).
pub(crate) const NO_MATCH: &str = "no-match";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Fingerprint {
    pub digest: String,
    /// sha256 of the canonical definition (kind, command, paths, check, cwd).
    pub definition: String,
    /// Env var name → sha256 of its value (values never stored: they may be secrets).
    pub env: BTreeMap<String, String>,
    /// Input file → sha256 (a pattern that matched nothing → `no-match`).
    pub inputs: BTreeMap<String, String>,
    /// Dependency id → its fingerprint digest (or `skipped`).
    pub deps: BTreeMap<String, String>,
}

#[derive(Serialize)]
struct Definition<'a> {
    kind: &'a crate::recipe::StepKind,
    cwd: &'a std::path::Path,
    check: &'a Option<crate::recipe::Check>,
}

/// Compute a step's fingerprint given its dependencies' digests.
pub(crate) fn compute(
    step: &Step,
    deps: BTreeMap<String, String>,
    memo: &HashMemo,
) -> Result<Fingerprint> {
    let definition = sha256_bytes(&definition_json(step)?);
    let env = step
        .env
        .iter()
        .map(|(k, v)| (k.clone(), sha256_bytes(v.as_bytes())))
        .collect();
    let mut inputs = BTreeMap::new();
    for pattern in &step.inputs {
        let files = expand_inputs(pattern);
        if files.is_empty() {
            inputs.insert(pattern.clone(), NO_MATCH.to_string());
        }
        for f in files {
            inputs.insert(f.display().to_string(), memo.file(&f)?);
        }
    }
    let mut h = Sha256::new();
    h.update(b"kiln-fingerprint-v1\0");
    h.update(definition.as_bytes());
    for map in [&env, &inputs, &deps] {
        h.update(b"\0");
        for (k, v) in map {
            h.update(k.as_bytes());
            h.update(b"=");
            h.update(v.as_bytes());
            h.update(b"\n");
        }
    }
    Ok(Fingerprint {
        digest: hex(&h.finalize()),
        definition,
        env,
        inputs,
        deps,
    })
}

/// The canonical definition of `step`, as JSON. A path that is not UTF-8 cannot be written as
/// JSON text: an error naming the step, not a panic (the loader refuses such recipe
/// directories and the state directory refuses them too, so this is the last guard).
fn definition_json(step: &Step) -> Result<Vec<u8>> {
    serde_json::to_vec(&Definition {
        kind: &step.kind,
        cwd: &step.cwd,
        check: &step.check,
    })
    .map_err(|e| {
        Error::other(
            format!(
                "step `{}`: cannot write its definition down for its fingerprint: {e} \
                 (working directory {})",
                step.id,
                step.cwd.display()
            ),
            Some("give the step paths that are UTF-8 (its `cwd`, outputs, check paths)".into()),
        )
    })
}

/// Files a pattern names: glob matches, with directories walked recursively, sorted.
pub(super) fn expand_inputs(pattern: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let matches: Vec<PathBuf> = match glob::glob(pattern) {
        Ok(paths) => paths.filter_map(std::result::Result::ok).collect(),
        Err(_) => vec![PathBuf::from(pattern)]
            .into_iter()
            .filter(|p| p.exists())
            .collect(),
    };
    for m in matches {
        walk(&m, &mut out);
    }
    out.sort();
    out.dedup();
    out
}

fn walk(path: &std::path::Path, out: &mut Vec<PathBuf>) {
    let Ok(meta) = std::fs::metadata(path) else {
        return;
    };
    if meta.is_dir() {
        if let Ok(rd) = std::fs::read_dir(path) {
            for e in rd.flatten() {
                walk(&e.path(), out);
            }
        }
    } else if meta.is_file() {
        out.push(path.to_path_buf());
    }
}

/// Why `now` differs from `then`, in words, or `None` if they match.
pub(crate) fn explain_change(then: &Fingerprint, now: &Fingerprint) -> Option<String> {
    if then.digest == now.digest {
        return None;
    }
    if then.definition != now.definition {
        return Some("its definition changed".into());
    }
    if let Some(reason) = diff_maps(&then.inputs, &now.inputs, "input") {
        return Some(reason);
    }
    if let Some(reason) = diff_maps(&then.env, &now.env, "env var") {
        return Some(reason);
    }
    if let Some(reason) = diff_maps(&then.deps, &now.deps, "dependency") {
        return Some(reason);
    }
    Some("its fingerprint changed".into())
}

fn diff_maps(
    then: &BTreeMap<String, String>,
    now: &BTreeMap<String, String>,
    what: &str,
) -> Option<String> {
    for (k, v) in now {
        match then.get(k) {
            None => return Some(format!("{what} {k} was added")),
            Some(old) if old != v => return Some(format!("{what} {k} changed")),
            _ => {}
        }
    }
    then.keys()
        .find(|k| !now.contains_key(*k))
        .map(|k| format!("{what} {k} was removed"))
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    use super::*;

    fn step_in(cwd: &Path) -> Step {
        let mut step: Step = serde_json::from_value(serde_json::json!({
            "id": "build",
            "kind": {"kind": "run", "cmd": {"argv": ["true"]}},
            "cwd": "/",
        }))
        .unwrap();
        step.cwd = cwd.to_path_buf();
        step
    }

    #[test]
    fn a_step_whose_directory_is_not_utf8_is_an_error_not_a_panic() {
        let memo = HashMemo::default();
        let odd = Path::new(OsStr::from_bytes(b"/tmp/kiln-\xff-dir"));
        let err = compute(&step_in(odd), BTreeMap::new(), &memo).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("step `build`") && text.contains("kiln-\u{fffd}-dir"),
            "{text}"
        );
        assert!(err.hint().is_some_and(|h| h.contains("UTF-8")), "{err:?}");
        // A UTF-8 directory still gives a fingerprint.
        let fp = compute(&step_in(Path::new("/tmp")), BTreeMap::new(), &memo).unwrap();
        assert_eq!(fp.digest.len(), 64);
    }
}
