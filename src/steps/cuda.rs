//! `kind = "cuda"`: install a CUDA toolkit side by side (the old one stays), switch the
//! `/usr/local/cuda` link atomically, and switch it back if the toolkit's compiler disagrees.
//! Two sources: NVIDIA's runfile (here) and PyPI's `nvidia-*` wheels ([`pypi`]).

mod pypi;

use std::io::Write;
use std::path::{Path, PathBuf};

use super::{run::run_spec, StepContext};
use crate::error::{Error, Result};
use crate::process::{self, CommandSpec};
use crate::recipe::{when::compare, CudaSource, CudaStep, Step};

pub(crate) fn run(
    step: &Step,
    c: &CudaStep,
    ctx: &StepContext,
    log: &mut dyn Write,
    on_line: &mut dyn FnMut(&str),
) -> Result<()> {
    check_driver(c, ctx, log)?;
    match &c.source {
        CudaSource::Runfile {
            url,
            sha256,
            runfile,
        } => install_runfile(step, c, (url, sha256, runfile), ctx, log, on_line)?,
        CudaSource::Pypi { wheels } => pypi::install(step, c, wheels, ctx, log)?,
    }
    switch_link(step, c, log)
}

/// Before a restore from the step cache replaces `install_path`: the driver floor, and what is
/// there now is kiln's to replace, as [`pypi::install`] would have it (a runfile's toolkit or a
/// user's directory is never replaced).
pub(crate) fn before_restore(
    step: &Step,
    c: &CudaStep,
    ctx: &StepContext,
    log: &mut dyn Write,
) -> Result<()> {
    check_driver(c, ctx, log)?;
    replaceable(step, c)
}

/// Whether `install_path` is kiln's to replace: nothing there, or a prefix kiln laid out.
pub(crate) fn replaceable(step: &Step, c: &CudaStep) -> Result<()> {
    pypi::replaceable(step, &c.install_path)
}

/// After a restore: the link switched to the restored toolkit, verified, rolled back on mismatch.
pub(crate) fn after_restore(step: &Step, c: &CudaStep, log: &mut dyn Write) -> Result<()> {
    switch_link(step, c, log)
}

/// The runfile's documented toolkit-only, unattended install into `--toolkitpath`.
fn install_runfile(
    step: &Step,
    c: &CudaStep,
    (url, sha256, runfile): (&str, &str, &Path),
    ctx: &StepContext,
    log: &mut dyn Write,
    on_line: &mut dyn FnMut(&str),
) -> Result<()> {
    if installed_version(&c.install_path).as_deref() == Some(c.version.as_str()) {
        let _ = writeln!(
            log,
            "CUDA {} is already installed at {}: installer skipped",
            c.version,
            c.install_path.display()
        );
        return Ok(());
    }
    super::fetch::fetch(
        url,
        sha256,
        runfile,
        step.timeout,
        log,
        ctx.memo,
        ctx.progress,
    )?;
    let spec = CommandSpec::new("sh", [runfile.display().to_string()])
        .args_from(runfile_args(&c.install_path))
        .envs_from(&step.env);
    let before = std::fs::read_link(&c.link).ok();
    let result = run_spec(&step.id, &spec, step.timeout, log, on_line);
    if result.is_err() {
        // The installer may have moved the link before failing: put it back.
        restore_link(&c.link, before.as_deref())?;
    }
    result
}

/// The runfile's options for a toolkit-only install without questions (NVIDIA's CUDA
/// Installation Guide for Linux, "Runfile Installer → Advanced Options"; docs/recipes.md): no
/// driver, no man pages, none of the installer's own compiler and existing-toolkit checks.
fn runfile_args(install_path: &Path) -> Vec<String> {
    ["--silent", "--toolkit", "--no-man-page", "--override"]
        .map(String::from)
        .into_iter()
        .chain([format!("--toolkitpath={}", install_path.display())])
        .collect()
}

impl CommandSpec {
    fn args_from(mut self, args: Vec<String>) -> Self {
        self.args.extend(args);
        self
    }
    fn envs_from(mut self, env: &std::collections::BTreeMap<String, String>) -> Self {
        self.env = env.clone();
        self
    }
}

fn check_driver(c: &CudaStep, ctx: &StepContext, log: &mut dyn Write) -> Result<()> {
    let Some(floor) = &c.driver_floor else {
        let _ = writeln!(
            log,
            "no driver floor: the toolkit is installed to compile, not to run"
        );
        return Ok(());
    };
    let pypi = matches!(c.source, CudaSource::Pypi { .. });
    match ctx.facts.get("gpu.driver") {
        None if pypi => {
            let _ = writeln!(
                log,
                "no NVIDIA driver found: CUDA {} is installed to compile only (running needs driver ≥ {floor})",
                c.version
            );
            Ok(())
        }
        None => Err(Error::other(
            format!("no NVIDIA driver found; CUDA {} needs driver ≥ {floor}", c.version),
            Some("install the NVIDIA driver first (nvidia-smi must work), then run the same `kiln up` command again; to compile without a GPU, take the toolkit from PyPI (`--set cuda_source=pypi` in the shipped recipes, else `source = \"pypi\"`)".into()),
        )),
        Some(d) if compare(&d, floor).is_lt() => Err(Error::other(
            format!("driver {d} is older than {floor}, the floor of CUDA {}", c.version),
            Some(format!("upgrade the driver to ≥ {floor} (or import an older toolchain, e.g. toolchains/cuda-12.8.toml)")),
        )),
        Some(_) => {
            let _ = writeln!(log, "driver floor {floor} satisfied");
            Ok(())
        }
    }
}

/// The toolkit version at `path`: version.json's `cuda.version`, else nvcc's `release X.Y`.
pub(crate) fn installed_version(path: &Path) -> Option<String> {
    if let Ok(text) = std::fs::read_to_string(path.join("version.json")) {
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        return v["cuda"]["version"].as_str().map(str::to_string);
    }
    nvcc_release(&path.join("bin/nvcc"))
}

/// `13.0` from `nvcc --version` ("Cuda compilation tools, release 13.0, V13.0.88"); `ptxas`
/// prints the same line.
fn nvcc_release(nvcc: &Path) -> Option<String> {
    let out = process::capture(&nvcc.display().to_string(), &["--version"]).ok()?;
    let rest = out.split("release ").nth(1)?;
    Some(rest.split(',').next()?.trim().to_string())
}

/// The compiler that answers for a toolkit at `root`: nvcc, else ptxas (a PTX-only toolkit).
fn compiler(root: &Path) -> PathBuf {
    let nvcc = root.join("bin/nvcc");
    if nvcc.exists() {
        return nvcc;
    }
    let ptxas = root.join("bin/ptxas");
    if ptxas.exists() {
        ptxas
    } else {
        nvcc
    }
}

/// Point `link` at the new toolkit atomically; verify through the link; roll back on mismatch.
fn switch_link(step: &Step, c: &CudaStep, log: &mut dyn Write) -> Result<()> {
    let before = std::fs::read_link(&c.link).ok();
    if let Some(old) = &before {
        let _ = writeln!(log, "{} → {} (before)", c.link.display(), old.display());
    }
    replace_link(&c.link, &c.install_path)?;
    let want: String = c.version.split('.').take(2).collect::<Vec<_>>().join(".");
    let tool = compiler(&c.link);
    let name = tool
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let got = nvcc_release(&tool);
    if got.as_deref() == Some(want.as_str()) {
        let _ = writeln!(
            log,
            "{} → {}; {name} reports release {want}",
            c.link.display(),
            c.install_path.display()
        );
        return Ok(());
    }
    restore_link(&c.link, before.as_deref())?;
    Err(Error::StepFailed {
        step: step.id.clone(),
        reason: format!(
            "after switching {} to {}, {name} reports {} instead of release {want}; the link was switched back",
            c.link.display(),
            c.install_path.display(),
            got.map_or("nothing".into(), |g| format!("release {g}"))
        ),
        log: None,
        hint: None,
        tail: String::new(),
    })
}

fn restore_link(link: &Path, before: Option<&Path>) -> Result<()> {
    match before {
        Some(old) => replace_link(link, old),
        None => match std::fs::remove_file(link) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::io(format!("cannot remove {}", link.display()), e))
            }
            _ => Ok(()),
        },
    }
}

/// Create `link` → `target` by renaming a fresh symlink over it: readers never see it missing.
fn replace_link(link: &Path, target: &Path) -> Result<()> {
    let tmp: PathBuf = link.with_file_name(format!(
        ".{}.kiln-{}",
        link.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)
        .map_err(|e| Error::io(format!("cannot create {}", tmp.display()), e))?;
    std::fs::rename(&tmp, link)
        .map_err(|e| Error::io(format!("cannot switch {}", link.display()), e))
}
