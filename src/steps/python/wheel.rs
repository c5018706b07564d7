//! Source builds of a python step's `build` requirements through the compiled-wheel cache: the
//! cache key, a hit without contacting the index (pinned requirements), the remote cache, the
//! sdist download and the `pip wheel` build.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::cache::staging::Staging;
use crate::cache::wheels::{WheelCache, WheelKey, PARALLELISM_VARS};
use crate::error::{Error, Result};
use crate::hash::sha256_reader;
use crate::process::{self, CommandSpec};
use crate::recipe::PythonStep;

/// Runs one command of the step (its log, timeout and line callback).
pub(super) type Sh<'s> = dyn FnMut(CommandSpec, &mut dyn Write) -> Result<()> + 's;

/// What building a step's requirements shares: the step, its venv's python, its environment and
/// index arguments, and the wheel cache.
pub(super) struct WheelBuild<'a> {
    pub(super) p: &'a PythonStep,
    pub(super) vpy: &'a Path,
    pub(super) env: &'a BTreeMap<String, String>,
    pub(super) index_args: &'a [String],
    pub(super) cache: &'a WheelCache,
}

/// One requirement being built: its name, version, where its source comes from, its scratch
/// directory.
struct Build<'r> {
    req: &'r str,
    package: String,
    version: String,
    /// A local source tree (an absolute path requirement); else a pinned `name==version`.
    local: Option<PathBuf>,
    /// Where the sdist of a pinned requirement comes from (see [`index_identity`]).
    index: Option<String>,
    work: PathBuf,
}

impl WheelBuild<'_> {
    /// The wheel for `req` (a pinned `name==version` or an absolute source path): from the cache
    /// when its key is there, else built from source and cached.
    pub(super) fn build_or_reuse(
        &self,
        req: &str,
        log: &mut dyn Write,
        sh: &mut Sh,
    ) -> Result<PathBuf> {
        let local = Path::new(req).is_absolute().then(|| PathBuf::from(req));
        let (package, version) = match &local {
            Some(dir) => (
                dir.file_name()
                    .map_or("local".into(), |n| n.to_string_lossy().into_owned()),
                "local".to_string(),
            ),
            None => pinned(req)?,
        };
        let staging = work_dir(self.cache, &package, &version)?;
        let work = staging.to_path_buf();
        let b = Build {
            req,
            index: local
                .is_none()
                .then(|| index_identity(self.index_args, self.env)),
            package,
            version,
            local,
            work,
        };
        let result = self.reuse_or_build(&b, log, sh);
        let _ = std::fs::remove_dir_all(&b.work);
        result
    }

    fn reuse_or_build(&self, b: &Build, log: &mut dyn Write, sh: &mut Sh) -> Result<PathBuf> {
        let (package, version) = (&b.package, &b.version);
        let mut key = self.key(b);
        // A pinned build whose wheel is cached needs no download: the index is not contacted.
        if let Some(index) = &b.index {
            if let Some((entry, wheel)) = self.cache.lookup_pinned(&key, index, log)? {
                let sha = &entry.key.source_sha256;
                let _ = writeln!(
                    log,
                    "wheel cache hit: {package} {version} (key {}), no compile, no download (sdist sha256 {} recorded at its build, from {index}): {}",
                    &entry.key.id()[..12],
                    &sha[..12.min(sha.len())],
                    wheel.display()
                );
                return Ok(wheel);
            }
        }
        let (sdist, source_sha256) = match &b.local {
            Some(dir) => (dir.clone(), tree_sha256(dir)?),
            None => self.download_sdist(b.req, &b.work, log, sh)?,
        };
        if let Some(index) = &b.index {
            match self.cache.recorded_source(package, version, index) {
                Some(recorded) if recorded != source_sha256 => {
                    let _ = writeln!(
                        log,
                        "warning: {index} now serves a different sdist for {package}=={version} (sha256 {source_sha256}; {recorded} when it was first built): building from the new one"
                    );
                }
                _ => {}
            }
        }
        key.source_sha256 = source_sha256;
        let id = key.id();
        if let Some((_, wheel)) = self.cache.lookup(&key, log)? {
            if let Some(index) = &b.index {
                self.cache.record_index(&key, index)?;
            }
            let _ = writeln!(
                log,
                "wheel cache hit: {package} {version} (key {}), no compile: {}",
                &id[..12],
                wheel.display()
            );
            return Ok(wheel);
        }
        if let Some(wheel) = self.pull_from_remote(b, &key, log)? {
            return Ok(wheel);
        }
        let _ = writeln!(
            log,
            "wheel cache miss: building {package} {version} from source (key {})",
            &id[..12]
        );
        let started = Instant::now();
        let built = self.build_wheel(b, &sdist, log, sh)?;
        let cached = self.cache.insert(&key, &built, b.index.as_deref())?;
        let _ = writeln!(
            log,
            "built {package} {version} in {:.1}s; cached as {}",
            started.elapsed().as_secs_f64(),
            cached.display()
        );
        Ok(cached)
    }

    /// The cache key of `b` from the local facts, its `source_sha256` still empty.
    fn key(&self, b: &Build) -> WheelKey {
        let (vpy, env) = (self.vpy, self.env);
        WheelKey {
            package: b.package.clone(),
            version: b.version.clone(),
            source_sha256: String::new(),
            python_tag: python_output(vpy, "import sys; print('cp%d%d' % sys.version_info[:2])")
                .unwrap_or_default(),
            torch: python_output(
                vpy,
                "import importlib.metadata as m; print(m.version('torch'))",
            ),
            cuda: nvcc_version(env),
            arch_list: [
                "TORCH_CUDA_ARCH_LIST",
                "FLASH_ATTN_CUDA_ARCHS",
                "FLASHINFER_CUDA_ARCH_LIST",
            ]
            .iter()
            .filter_map(|k| env.get(*k).map(|v| format!("{k}={v}")))
            .reduce(|a, b| format!("{a} {b}")),
            env: env
                .iter()
                .filter(|(k, _)| {
                    !PARALLELISM_VARS.contains(&k.as_str()) && !crate::redact::is_secret_name(k)
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }

    /// On a miss, the cache asks the remote cache (`KILN_REMOTE_CACHE`, an OCI reference) and
    /// looks the key up again; an unreachable remote is logged and the wheel built instead.
    fn pull_from_remote(
        &self,
        b: &Build,
        key: &WheelKey,
        log: &mut dyn Write,
    ) -> Result<Option<PathBuf>> {
        let Some(remote) = crate::cache::remote::configured() else {
            return Ok(None);
        };
        let found = self.cache.lookup_remote(&remote, key, log)?;
        if found.is_some() {
            let _ = writeln!(
                log,
                "wheel cache hit from the remote cache: {} {} (key {}), no compile",
                b.package,
                b.version,
                &key.id()[..12]
            );
        }
        Ok(found.map(|(_, wheel)| wheel))
    }

    /// `pip wheel` of `sdist` into the build's scratch directory; the `.whl` it made.
    ///
    /// Always through PEP 517 (`--use-pep517`), so that an sdist with only a `setup.py` builds on
    /// a stock interpreter too: Debian 12's venv has pip 23.0.1 and setuptools 66 but no `wheel`,
    /// and that pip would otherwise build it the legacy way (`setup.py bdist_wheel`: "invalid
    /// command 'bdist_wheel'"). With build isolation (the default) pip puts the build's own
    /// requirements (`setuptools`, `wheel` for a bare `setup.py`) in a throwaway environment from
    /// the step's index; with `build_isolation = false` the build runs in the venv itself, so
    /// `setuptools` and `wheel` are installed into it first.
    fn build_wheel(
        &self,
        b: &Build,
        sdist: &Path,
        log: &mut dyn Write,
        sh: &mut Sh,
    ) -> Result<PathBuf> {
        if !self.p.build_isolation {
            let _ = writeln!(
                log,
                "build_isolation = false: the build runs in the venv; installing setuptools and wheel into it"
            );
            let mut tools = CommandSpec::new(
                self.vpy.display().to_string(),
                ["-m", "pip", "install", "--disable-pip-version-check"],
            );
            tools.args.extend(self.index_args.iter().cloned());
            sh(tools.arg("setuptools").arg("wheel").with_env(self.env), log)?;
        }
        let mut build = CommandSpec::new(
            self.vpy.display().to_string(),
            [
                "-m",
                "pip",
                "wheel",
                // The build's own output (ninja's `[k/N]`: kiln's compile progress) in the log.
                "-v",
                "--disable-pip-version-check",
                "--no-deps",
                "--use-pep517",
            ],
        );
        build.args.extend(self.index_args.iter().cloned());
        build = build
            .arg("-w")
            .arg(b.work.join("wheel").display().to_string());
        if !self.p.build_isolation {
            build = build.arg("--no-build-isolation");
        }
        sh(
            build.arg(sdist.display().to_string()).with_env(self.env),
            log,
        )?;
        std::fs::read_dir(b.work.join("wheel"))
            .map_err(|e| Error::io("cannot list the built wheel", e))?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "whl"))
            .ok_or_else(|| Error::other(format!("building `{}` produced no wheel", b.req), None))
    }

    /// `pip download` of `req`'s sdist (no binaries) into `work`; its path and sha256.
    fn download_sdist(
        &self,
        req: &str,
        work: &Path,
        log: &mut dyn Write,
        sh: &mut Sh,
    ) -> Result<(PathBuf, String)> {
        let (vpy, env, index_args) = (self.vpy, self.env, self.index_args);
        let sdists = work.join("sdist");
        let mut dl = CommandSpec::new(
            vpy.display().to_string(),
            [
                "-m",
                "pip",
                "download",
                "--disable-pip-version-check",
                "--no-deps",
                "--no-binary",
                ":all:",
                "-d",
            ],
        )
        .arg(sdists.display().to_string());
        dl.args.extend(index_args.iter().cloned());
        sh(dl.arg(req).with_env(env), log)?;
        let sdist = std::fs::read_dir(&sdists)
            .map_err(|e| Error::io("cannot list the downloaded source", e))?
            .flatten()
            .map(|e| e.path())
            .next()
            .ok_or_else(|| {
                Error::other(
                    format!("pip downloaded no source distribution for `{req}`"),
                    None,
                )
            })?;
        let f = std::fs::File::open(&sdist).map_err(|e| Error::io("cannot read the sdist", e))?;
        let sha = sha256_reader(f)
            .map_err(|e| Error::io("cannot read the sdist", e))?
            .0;
        Ok((sdist, sha))
    }
}

/// Where pip takes sdists from: the step's index arguments, else the index pip's environment
/// names, else `default` (pypi.org). Part of what identifies a pinned build's source; it is
/// logged and stored in the cache entry, so credentials in URLs (`https://user:token@host`) are
/// left out.
fn index_identity(index_args: &[String], env: &BTreeMap<String, String>) -> String {
    let userinfo = regex::Regex::new(r"://[^/@\s]+@").expect("valid regex");
    let scrub = |s: String| userinfo.replace_all(&s, "://").into_owned();
    if !index_args.is_empty() {
        return scrub(index_args.join(" "));
    }
    let from_env: Vec<String> = ["PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"]
        .iter()
        .filter_map(|k| {
            let v = env.get(*k).cloned().or_else(|| std::env::var(k).ok())?;
            (!v.is_empty()).then(|| format!("{k}={v}"))
        })
        .collect();
    if from_env.is_empty() {
        "default".into()
    } else {
        scrub(from_env.join(" "))
    }
}

/// `name==version` of a build requirement.
fn pinned(req: &str) -> Result<(String, String)> {
    match req.split_once("==") {
        Some((n, v)) if !n.trim().is_empty() && !v.trim().is_empty() => Ok((n.trim().to_string(), v.trim().to_string())),
        _ => Err(Error::other(
            format!("build requirement `{req}` is not pinned"),
            Some("pin what kiln compiles (`flash-attn==2.8.3`): the version is part of the wheel cache key".into()),
        )),
    }
}

/// sha256 over a source tree: every file's relative path and content, in sorted order.
fn tree_sha256(dir: &Path) -> Result<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            let name = e.file_name();
            if name == "build"
                || name == "__pycache__"
                || name.to_string_lossy().ends_with(".egg-info")
            {
                continue;
            }
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(dir, &mut files);
    files.sort();
    let mut listing = String::new();
    for f in &files {
        let h = sha256_reader(
            std::fs::File::open(f)
                .map_err(|e| Error::io(format!("cannot read {}", f.display()), e))?,
        )
        .map_err(|e| Error::io(format!("cannot read {}", f.display()), e))?
        .0;
        listing.push_str(&format!(
            "{h}  {}\n",
            f.strip_prefix(dir).unwrap_or(f).display()
        ));
    }
    Ok(crate::hash::sha256_bytes(listing.as_bytes()))
}

fn python_output(vpy: &Path, code: &str) -> Option<String> {
    process::capture(&vpy.display().to_string(), &["-c", code])
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// `V13.0.88` from `nvcc --version`, if nvcc is found (CUDA_HOME first, then PATH).
fn nvcc_version(env: &BTreeMap<String, String>) -> Option<String> {
    let home = env
        .get("CUDA_HOME")
        .cloned()
        .or_else(|| std::env::var("CUDA_HOME").ok());
    let nvcc = home
        .map(|h| Path::new(&h).join("bin/nvcc"))
        .filter(|p| p.exists())
        .or_else(|| which::which("nvcc").ok())?;
    let out = process::capture(&nvcc.display().to_string(), &["--version"]).ok()?;
    out.split_whitespace()
        .find(|w| w.starts_with('V') && w[1..].starts_with(|c: char| c.is_ascii_digit()))
        .map(str::to_string)
}

#[cfg(test)]
mod index_tests {
    use super::*;

    #[test]
    fn the_index_identity_leaves_out_credentials() {
        let args = vec![
            "--index-url".to_string(),
            "https://kiln:s3cret@pypi.example/simple".to_string(),
        ];
        assert_eq!(
            index_identity(&args, &BTreeMap::new()),
            "--index-url https://pypi.example/simple"
        );
        let env = BTreeMap::from([(
            "PIP_INDEX_URL".to_string(),
            "http://127.0.0.1:1/simple".to_string(),
        )]);
        assert_eq!(
            index_identity(&[], &env),
            "PIP_INDEX_URL=http://127.0.0.1:1/simple"
        );
    }
}

/// The scratch directory of one build (its sdist, its `pip wheel` output), under the cache's
/// `build/`: a locked directory with a random name ([`crate::cache::staging`]), never one a
/// build in another container (with the same pid) holds; what killed builds left is swept.
fn work_dir(cache: &WheelCache, package: &str, version: &str) -> Result<Staging> {
    let build = cache.root.parent().unwrap_or(Path::new(".")).join("build");
    crate::cache::staging::create(&build, &format!("{package}-{version}"))
}

#[cfg(test)]
mod work_dir_tests {
    use super::*;

    /// Two containers sharing `KILN_CACHE_DIR` have the same pids: a build's scratch directory
    /// named by the pid was another container's live build, removed under it.
    #[test]
    fn a_build_never_removes_or_shares_the_scratch_directory_of_another_containers_build() {
        let dir = tempfile::tempdir().unwrap();
        let cache = WheelCache::new(&dir.path().join("wheels"));
        let theirs = dir
            .path()
            .join("build")
            .join(format!("demo-1.0-{}", std::process::id()));
        std::fs::create_dir_all(&theirs).unwrap();
        std::fs::write(theirs.join("demo-1.0.tar.gz"), b"their sdist").unwrap();
        let ours = work_dir(&cache, "demo", "1.0").unwrap();
        let ours: &Path = ours.as_ref();
        assert_ne!(ours, theirs.as_path());
        assert_eq!(
            std::fs::read(theirs.join("demo-1.0.tar.gz")).unwrap(),
            b"their sdist"
        );
        let again = work_dir(&cache, "demo", "1.0").unwrap();
        assert_ne!(AsRef::<Path>::as_ref(&again), ours);
    }
}
