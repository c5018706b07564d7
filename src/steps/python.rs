//! `kind = "python"`: a venv made with uv (installed from PyPI when missing; pip as fallback),
//! pinned requirements with index / extra-index URLs, source builds through the compiled-wheel
//! cache, and post-install verification.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::{run::run_spec, StepContext};
use crate::cache::wheels::{WheelCache, WheelKey, PARALLELISM_VARS};
use crate::engine::hashing::sha256_reader;
use crate::error::{Error, Result};
use crate::process::{self, CommandSpec};
use crate::recipe::{PythonStep, Step};

/// How packages get installed.
enum Installer {
    Uv(PathBuf),
    Pip,
}

pub fn run(
    step: &Step,
    p: &PythonStep,
    ctx: &StepContext,
    log: &mut dyn Write,
    on_line: &mut dyn FnMut(&str),
) -> Result<()> {
    let env = super::build_env(step);
    let mut sh = |spec: CommandSpec, log: &mut dyn Write| {
        run_spec(&step.id, &spec, step.timeout, log, on_line)
    };
    let installer = find_uv(ctx, log, &mut sh);
    let vpy = p.venv.join("bin").join("python");
    if !vpy.exists() {
        let spec = match &installer {
            Installer::Uv(uv) => {
                CommandSpec::new(uv.display().to_string(), ["venv", "--seed", "--python"])
                    .arg(&p.python)
            }
            Installer::Pip => CommandSpec::new(&p.python, ["-m", "venv"]),
        };
        let spec = if p.system_site_packages {
            spec.arg("--system-site-packages")
        } else {
            spec
        };
        let spec = spec.arg(p.venv.display().to_string());
        sh(spec.with_env(&env), log)?;
    } else {
        let _ = writeln!(log, "venv exists: {}", p.venv.display());
    }
    let index_args = index_args(p);
    let plain: Vec<&String> = p.install.iter().filter(|r| !p.build.contains(r)).collect();
    if !plain.is_empty() {
        sh(
            install_spec(
                &installer,
                &vpy,
                &index_args,
                plain.iter().map(|s| s.as_str()),
            )
            .with_env(&env),
            log,
        )?;
    }
    let cache = WheelCache::new(&ctx.cache_dir);
    for req in &p.build {
        let wheel = build_or_reuse(req, p, &vpy, &env, &index_args, &cache, log, &mut sh)?;
        let mut spec = install_spec(
            &installer,
            &vpy,
            &[],
            [wheel.display().to_string().as_str()],
        );
        spec.args.insert(spec.args.len() - 1, "--no-deps".into());
        sh(spec.with_env(&env), log)?;
    }
    if let Some(code) = &p.verify {
        let _ = writeln!(log, "--- verify ---");
        sh(
            CommandSpec::new(vpy.display().to_string(), ["-c"])
                .arg(code)
                .with_env(&env),
            log,
        )
        .map_err(|e| match e {
            Error::StepFailed {
                step,
                reason,
                log,
                tail,
                hint,
            } => Error::StepFailed {
                step,
                reason: format!("post-install verification failed: {reason}"),
                log,
                tail,
                hint,
            },
            other => other,
        })?;
    }
    if let Some((module, arch)) = &p.sass {
        check_sass(&step.id, &vpy, module, arch, log)?;
    }
    Ok(())
}

impl CommandSpec {
    fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }
    fn with_env(mut self, env: &BTreeMap<String, String>) -> Self {
        self.env
            .extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
        self
    }
}

/// uv on PATH, or kiln's own copy, or installed from PyPI into the cache; else pip.
fn find_uv(
    ctx: &StepContext,
    log: &mut dyn Write,
    sh: &mut dyn FnMut(CommandSpec, &mut dyn Write) -> Result<()>,
) -> Installer {
    if std::env::var_os("KILN_NO_UV").is_some() {
        let _ = writeln!(log, "KILN_NO_UV is set: using python -m venv and pip");
        return Installer::Pip;
    }
    if let Ok(uv) = which::which("uv") {
        return Installer::Uv(uv);
    }
    let target = ctx.cache_dir.join("tools").join("uv");
    let uv = target.join("bin").join("uv");
    if uv.exists() {
        return Installer::Uv(uv);
    }
    let _ = writeln!(
        log,
        "uv not found: installing it from PyPI into {}",
        target.display()
    );
    let spec = CommandSpec::new(
        "python3",
        [
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--target",
        ],
    )
    .arg(target.display().to_string())
    .arg("uv");
    match sh(spec, log) {
        Ok(()) if uv.exists() => Installer::Uv(uv),
        _ => {
            let _ = writeln!(
                log,
                "could not install uv; falling back to python -m venv and pip"
            );
            Installer::Pip
        }
    }
}

fn index_args(p: &PythonStep) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(u) = &p.index_url {
        args.extend(["--index-url".to_string(), u.clone()]);
    }
    for u in &p.extra_index_urls {
        args.extend(["--extra-index-url".to_string(), u.clone()]);
    }
    args
}

fn install_spec<'a>(
    installer: &Installer,
    vpy: &Path,
    index_args: &[String],
    reqs: impl IntoIterator<Item = &'a str>,
) -> CommandSpec {
    let mut spec = match installer {
        Installer::Uv(uv) => {
            CommandSpec::new(uv.display().to_string(), ["pip", "install", "--python"])
                .arg(vpy.display().to_string())
        }
        Installer::Pip => CommandSpec::new(
            vpy.display().to_string(),
            ["-m", "pip", "install", "--disable-pip-version-check"],
        ),
    };
    spec.args.extend(index_args.iter().cloned());
    spec.args.extend(reqs.into_iter().map(str::to_string));
    spec
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

#[allow(clippy::too_many_arguments)]
fn build_or_reuse(
    req: &str,
    p: &PythonStep,
    vpy: &Path,
    env: &BTreeMap<String, String>,
    index_args: &[String],
    cache: &WheelCache,
    log: &mut dyn Write,
    sh: &mut dyn FnMut(CommandSpec, &mut dyn Write) -> Result<()>,
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
    let work = cache
        .root
        .parent()
        .unwrap_or(Path::new("."))
        .join("build")
        .join(format!("{package}-{version}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    crate::engine::state::create_dir(&work)?;
    let index = local.is_none().then(|| index_identity(index_args, env));
    let result = (|| {
        let mut key = WheelKey {
            package: package.clone(),
            version: version.clone(),
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
        };
        // A pinned build whose wheel is cached needs no download: the index is not contacted.
        if let Some(index) = &index {
            if let Some((entry, wheel)) = cache.lookup_pinned(&key, index)? {
                let _ = writeln!(
                    log,
                    "wheel cache hit: {package} {version} (key {}), no compile, no download (sdist sha256 {} recorded at its build, from {index}): {}",
                    &entry.key.id()[..12],
                    &entry.key.source_sha256[..12.min(entry.key.source_sha256.len())],
                    wheel.display()
                );
                return Ok(wheel);
            }
        }
        let (sdist, source_sha256) = match &local {
            Some(dir) => (dir.clone(), tree_sha256(dir)?),
            None => download_sdist(req, vpy, env, index_args, &work, log, sh)?,
        };
        if let Some(index) = &index {
            match cache.recorded_source(&package, &version, index) {
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
        if let Some((_, wheel)) = cache.lookup(&key)? {
            if let Some(index) = &index {
                cache.record_index(&key, index)?;
            }
            let _ = writeln!(
                log,
                "wheel cache hit: {package} {version} (key {}), no compile: {}",
                &id[..12],
                wheel.display()
            );
            return Ok(wheel);
        }
        if let Some(remote) = std::env::var("KILN_REMOTE_CACHE")
            .ok()
            .filter(|r| !r.is_empty())
        {
            let _ = writeln!(log, "wheel cache miss: asking the remote cache {remote}");
            let reference = crate::oci::reference::Reference::parse(&remote)?;
            match crate::oci::pull_wheels(&reference, &cache.root, &|m| {
                let _ = m;
            }) {
                Ok(s) => {
                    let _ = writeln!(
                        log,
                        "remote cache: {} wheel(s) pulled, {} already here",
                        s.fetched, s.already_cached
                    );
                }
                Err(e) => {
                    let _ = writeln!(
                        log,
                        "remote cache unavailable ({}); building instead",
                        e.render().replace('\n', " ")
                    );
                }
            }
            if let Some((_, wheel)) = cache.lookup(&key)? {
                let _ = writeln!(log, "wheel cache hit from the remote cache: {package} {version} (key {}), no compile", &id[..12]);
                return Ok(wheel);
            }
        }
        let _ = writeln!(
            log,
            "wheel cache miss: building {package} {version} from source (key {})",
            &id[..12]
        );
        let started = Instant::now();
        let mut build = CommandSpec::new(
            vpy.display().to_string(),
            [
                "-m",
                "pip",
                "wheel",
                "--disable-pip-version-check",
                "--no-deps",
                "-w",
            ],
        )
        .arg(work.join("wheel").display().to_string());
        if !p.build_isolation {
            build = build.arg("--no-build-isolation");
        }
        sh(build.arg(sdist.display().to_string()).with_env(env), log)?;
        let built = std::fs::read_dir(work.join("wheel"))
            .map_err(|e| Error::io("cannot list the built wheel", e))?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "whl"))
            .ok_or_else(|| Error::other(format!("building `{req}` produced no wheel"), None))?;
        let cached = cache.insert_from(&key, &built, index.as_deref())?;
        let _ = writeln!(
            log,
            "built {package} {version} in {:.1}s; cached as {}",
            started.elapsed().as_secs_f64(),
            cached.display()
        );
        Ok(cached)
    })();
    let _ = std::fs::remove_dir_all(&work);
    result
}

fn download_sdist(
    req: &str,
    vpy: &Path,
    env: &BTreeMap<String, String>,
    index_args: &[String],
    work: &Path,
    log: &mut dyn Write,
    sh: &mut dyn FnMut(CommandSpec, &mut dyn Write) -> Result<()>,
) -> Result<(PathBuf, String)> {
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
    Ok(crate::engine::hashing::sha256_bytes(listing.as_bytes()))
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

/// The extension module must carry SASS for `arch` (checked with cuobjdump when it is installed).
fn check_sass(step: &str, vpy: &Path, module: &str, arch: &str, log: &mut dyn Write) -> Result<()> {
    let Ok(cuobjdump) = which::which("cuobjdump") else {
        let _ = writeln!(log, "sass check skipped: cuobjdump is not installed");
        return Ok(());
    };
    let origin = process::capture(
        &vpy.display().to_string(),
        &[
            "-c",
            "import importlib.util, sys; print(importlib.util.find_spec(sys.argv[1]).origin)",
            module,
        ],
    )?;
    let listing = process::capture(
        &cuobjdump.display().to_string(),
        &["--list-elf", origin.trim()],
    )?;
    let _ = writeln!(log, "cuobjdump --list-elf {}:\n{listing}", origin.trim());
    if listing.contains(arch) {
        return Ok(());
    }
    Err(Error::StepFailed {
        step: step.to_string(),
        reason: format!("{module} carries no {arch} code (cuobjdump found none)"),
        log: None,
        hint: None,
        tail: listing.lines().take(20).collect::<Vec<_>>().join("\n"),
    })
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
