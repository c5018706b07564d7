//! A Python environment's facts, from ONE run of a small embedded script (python_facts.py)
//! that prints JSON: interpreter, package versions (importlib.metadata), where torch is; torch's
//! own facts are then read from its files ([`super::torch`]), never by importing it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub(crate) use super::torch::TorchFacts;
use crate::dist;
use crate::process::{self, CommandSpec};

const SCRIPT: &str = include_str!("python_facts.py");
/// How long the facts script may take, and the most of its output kiln keeps. It imports
/// nothing heavy (torch's facts are read from its files), so an interpreter still silent after
/// this hangs (a `sitecustomize.py` that sleeps, a FIFO where a package's METADATA should be):
/// its process group is ended (SIGTERM, at most [`process::KILL_GRACE`] before SIGKILL), and
/// the check that says so comes within 10 s.
const TIMEOUT: Duration = Duration::from_secs(6);
const _: () = assert!(TIMEOUT.as_secs() + process::KILL_GRACE.as_secs() <= 9);
const FACTS_CAP: usize = 8 << 20;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct PythonFacts {
    pub executable: String,
    pub version: String,
    pub purelib: Option<PathBuf>,
    #[serde(default)]
    pub packages: BTreeMap<String, String>,
    /// torch's package directory (found without importing it).
    #[serde(default)]
    pub torch_dir: Option<PathBuf>,
    #[serde(default)]
    pub torch: Option<TorchFacts>,
    /// True when these facts came from the cache (see [`collect_cached`]).
    #[serde(default)]
    pub cached: bool,
}

/// What must be unchanged for cached facts to stand: the interpreter, its site-packages
/// directory (installs and removals change its mtime), the script, and visible devices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct CacheKey {
    python: String,
    python_mtime_ns: u128,
    purelib_mtime_ns: u128,
    script: String,
    visible_devices: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct CacheEntry {
    key: CacheKey,
    facts: PythonFacts,
}

fn mtime_ns(path: &Path) -> u128 {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos())
}

fn cache_key(python: &str, purelib: Option<&Path>) -> CacheKey {
    let exe = which::which(python).unwrap_or_else(|_| PathBuf::from(python));
    CacheKey {
        python: python.to_string(),
        python_mtime_ns: mtime_ns(&exe),
        purelib_mtime_ns: purelib.map_or(0, mtime_ns),
        script: crate::hash::sha256_bytes(SCRIPT.as_bytes()),
        visible_devices: std::env::var("CUDA_VISIBLE_DEVICES").ok(),
    }
}

/// Like [`collect`], but reuses the facts stored in `dir` (`StatePaths::python_facts`) while the
/// interpreter and its site-packages are unchanged (importing torch takes seconds; the check
/// takes microseconds).
pub(crate) fn collect_cached(python: &str, dir: &Path) -> Result<PythonFacts, String> {
    let name = crate::hash::sha256_bytes(python.as_bytes());
    let path = dir.join(format!("{}.json", &name[..16]));
    if let Some(entry) = crate::bounded::read_io(&path, crate::bounded::STATE_CAP)
        .ok()
        .and_then(|b| serde_json::from_slice::<CacheEntry>(&b).ok())
    {
        if entry.key == cache_key(python, entry.facts.purelib.as_deref()) && plausible(&entry.facts)
        {
            return Ok(PythonFacts {
                cached: true,
                ..entry.facts
            });
        }
    }
    let facts = collect(python)?;
    let entry = CacheEntry {
        key: cache_key(python, facts.purelib.as_deref()),
        facts,
    };
    if let Ok(bytes) = serde_json::to_vec(&entry) {
        // A cache that cannot be written only costs time on the next run.
        let _ = crate::fs::write_atomic(&path, &bytes);
    }
    Ok(entry.facts)
}

/// Whether cached `facts` can be an interpreter's at all (a cache is a file anyone with the
/// state directory can edit): their interpreter exists, their version is a Python 3
/// `X.Y[.Z]`, and a `pythonX.Y` the interpreter resolves to, or a directory of that name in
/// their site-packages path, agrees with it. Anything else is probed again.
fn plausible(facts: &PythonFacts) -> bool {
    // `python` may be a launcher (a pyenv shim runs another file): the recorded interpreter
    // must exist, and a `pythonX.Y` it resolves to must agree with the version below.
    let Ok(exe) = std::fs::canonicalize(&facts.executable) else {
        return false;
    };
    let exe_name = exe.file_name().unwrap_or_default().to_string_lossy();
    let mut numbers = facts.version.split('.');
    let (Some(Ok(major)), Some(Ok(minor))) = (
        numbers.next().map(str::parse::<u32>),
        numbers.next().map(str::parse::<u32>),
    ) else {
        return false;
    };
    if major != 3 || !numbers.all(|n| n.chars().all(|c| c.is_ascii_alphanumeric())) {
        return false;
    }
    let want = format!("python{major}.{minor}");
    let agrees = |c: &str| {
        let versioned = c.strip_prefix("python").is_some_and(|rest| {
            rest.starts_with(|ch: char| ch.is_ascii_digit()) && rest.contains('.')
        });
        !versioned
            || c.strip_prefix(&want)
                .is_some_and(|t| !t.starts_with(|ch: char| ch.is_ascii_digit()))
    };
    if !agrees(&exe_name) {
        return false;
    }
    facts.purelib.as_deref().is_none_or(|purelib| {
        purelib.components().all(|c| {
            let c = c.as_os_str().to_string_lossy();
            let versioned = c
                .strip_prefix("python")
                .is_some_and(|rest| rest.starts_with(|ch: char| ch.is_ascii_digit()));
            !versioned
                || c == want
                || c.strip_prefix(&want)
                    .is_some_and(|t| !t.starts_with(|ch: char| ch.is_ascii_digit()))
        })
    })
}

/// The facts script's deadline: `KILN_PYTHON_PROBE_TIMEOUT` seconds, else [`TIMEOUT`].
fn probe_timeout() -> Duration {
    std::env::var("KILN_PYTHON_PROBE_TIMEOUT")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map_or(TIMEOUT, Duration::from_secs)
}

/// Run the facts script with `python`; an error names what went wrong in one line.
pub(crate) fn collect(python: &str) -> Result<PythonFacts, String> {
    let timeout = probe_timeout();
    let spec = CommandSpec::new(python, ["-c", SCRIPT]);
    // Output streams line by line (nothing but the facts line is kept, and that one capped: a
    // longer line comes in pieces); the deadline covers the script and any child that holds its
    // output open.
    let mut facts: Option<String> = None;
    let limits = process::Limits {
        piece: FACTS_CAP,
        run_cap: FACTS_CAP,
        // The facts line, plus room for warnings; a writer of /dev/zero is ended there.
        total_cap: 4 * FACTS_CAP as u64,
    };
    let sink = &mut std::io::sink();
    let out = process::run_logged_with(&spec, sink, Some(timeout), limits, &mut |line| {
        if let Some(json) = line.strip_prefix("KILN_FACTS ") {
            facts = Some(json.to_string());
        }
    })
    .map_err(|e| e.to_string())?;
    if out.over_cap {
        return Err(format!(
            "`{python}` wrote more than {} MiB while printing its facts: it was ended there",
            (4 * FACTS_CAP) >> 20
        ));
    }
    if out.timed_out {
        return Err(format!(
            "`{python}` did not answer within {}s (its processes were ended)",
            timeout.as_secs()
        ));
    }
    if let Some(json) = facts {
        let mut facts: PythonFacts = serde_json::from_str(&json).map_err(|e| {
            if out.pieces_cut > 0 {
                format!("`{python}` printed facts over {} MiB", FACTS_CAP >> 20)
            } else {
                format!("unreadable facts from `{python}`: {e}")
            }
        })?;
        if facts.packages.contains_key("torch") {
            facts.torch = Some(match &facts.torch_dir {
                Some(dir) => super::torch::from_files(dir),
                None => TorchFacts {
                    error: Some("torch is installed but importlib finds no torch package".into()),
                    ..TorchFacts::default()
                },
            });
        }
        Ok(facts)
    } else {
        let tail: Vec<&str> = out.tail.lines().rev().take(3).collect();
        Err(format!(
            "`{python}` failed ({}): {}",
            out.code
                .map_or_else(|| "killed".into(), |c| format!("exit {c}")),
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        ))
    }
}

/// Package versions from the `*.dist-info/METADATA` files of a site-packages directory (a file
/// read), by normalised name.
pub(crate) fn dist_versions(site: &Path) -> BTreeMap<String, String> {
    let mut versions = BTreeMap::new();
    for (_, metadata) in dist::dist_infos(site).unwrap_or_default() {
        let Ok(text) = crate::bounded::read_state(&metadata, crate::bounded::SOURCE_CAP) else {
            continue;
        };
        if let (Some(n), Some(v)) = dist::name_and_version(&text) {
            versions.insert(dist::normalize(&n), v);
        }
    }
    versions
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
    fn cached_facts_are_reused_until_site_packages_change() {
        let python = which::which("python3").expect("python3 is installed (the tests need it)");
        let python = python.display().to_string();
        let cache = tempfile::tempdir().unwrap();
        let dir = cache.path().join("python-facts");
        let first = collect_cached(&python, &dir).unwrap();
        assert!(!first.cached);
        let second = collect_cached(&python, &dir).unwrap();
        assert!(second.cached);
        assert_eq!(second.version, first.version);
        // An install touches site-packages; simulate by bumping the recorded mtime.
        let entry_path = std::fs::read_dir(&dir)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let mut entry: CacheEntry =
            serde_json::from_slice(&std::fs::read(&entry_path).unwrap()).unwrap();
        entry.key.purelib_mtime_ns += 1;
        std::fs::write(&entry_path, serde_json::to_vec(&entry).unwrap()).unwrap();
        assert!(!collect_cached(&python, &dir).unwrap().cached);
    }

    #[test]
    fn a_tampered_facts_cache_is_not_believed() {
        let python = which::which("python3").expect("python3 is installed (the tests need it)");
        let python = python.display().to_string();
        let cache = tempfile::tempdir().unwrap();
        let dir = cache.path().join("python-facts");
        let real = collect_cached(&python, &dir).unwrap();
        let entry_path = std::fs::read_dir(&dir)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let pristine = std::fs::read(&entry_path).unwrap();
        let tamper = |edit: &dyn Fn(&mut PythonFacts)| {
            let mut entry: CacheEntry = serde_json::from_slice(&pristine).unwrap();
            edit(&mut entry.facts);
            std::fs::write(&entry_path, serde_json::to_vec(&entry).unwrap()).unwrap();
            collect_cached(&python, &dir).unwrap()
        };
        // The case: python 2.7 reported for a 3.x interpreter.
        let got = tamper(&|f| f.version = "2.7.18".into());
        assert_eq!(
            (got.version.as_str(), got.cached),
            (real.version.as_str(), false)
        );
        let got = tamper(&|f| f.executable = "/usr/bin/python2.7".into());
        assert_eq!(
            (got.executable.as_str(), got.cached),
            (real.executable.as_str(), false)
        );
        let got = tamper(&|f| f.version = "not a version".into());
        assert!(!got.cached, "{got:?}");
        // Untouched, it is still reused.
        std::fs::write(&entry_path, &pristine).unwrap();
        assert!(collect_cached(&python, &dir).unwrap().cached);
    }

    /// An executable in `dir` standing in for python: it prints `output` (written to a file).
    fn python_printing(dir: &std::path::Path, output: &str) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(dir.join("facts"), output).unwrap();
        let python = dir.join("python");
        let script = format!("#!/bin/sh\ncat '{}'\n", dir.join("facts").display());
        std::fs::write(&python, script).unwrap();
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        python
    }

    #[test]
    fn a_facts_line_longer_than_a_log_piece_is_read_whole() {
        // 5,000 packages with spaces in their versions: ~150 KB on one line, cut in pieces by a
        // step log's limits, read whole here.
        let dir = tempfile::tempdir().unwrap();
        let packages: Vec<String> = (0..5000)
            .map(|i| format!("\"p{i}\": \"1.{i} local build\""))
            .collect();
        let json = format!(
            "{{\"executable\": \"/x/python\", \"version\": \"3.11.2\", \"packages\": {{{}}}}}",
            packages.join(", ")
        );
        assert!(json.len() > 2 * crate::process::Limits::LOG.piece);
        let python = python_printing(dir.path(), &format!("KILN_FACTS {json}\n"));
        let facts = collect(&python.display().to_string()).expect("facts read whole");
        assert_eq!(facts.packages.len(), 5000);
        assert_eq!(facts.packages["p4999"], "1.4999 local build");
    }

    #[test]
    fn a_facts_line_over_its_cap_is_refused_saying_so() {
        let dir = tempfile::tempdir().unwrap();
        let words = "\"a b\", ".repeat(FACTS_CAP / 7 + 1);
        let line = format!("KILN_FACTS {{\"executable\": \"/x\", \"version\": [{words}0]}}\n");
        let python = python_printing(dir.path(), &line);
        let err = collect(&python.display().to_string()).unwrap_err();
        assert!(err.ends_with("printed facts over 8 MiB"), "{err}");
    }

    #[test]
    fn the_script_runs_under_the_system_python() {
        let python = which::which("python3").expect("python3 is installed (the tests need it)");
        let facts = collect(&python.display().to_string()).expect("facts script runs");
        assert!(facts.version.starts_with('3'), "{facts:?}");
    }
}
