//! `kind = "cuda"`: install a CUDA toolkit side by side (the old one stays), switch the
//! `/usr/local/cuda` link atomically, and switch it back if `nvcc --version` disagrees.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::{run::run_spec, StepContext};
use crate::error::{Error, Result};
use crate::process::{self, CommandSpec};
use crate::recipe::{when::compare, CudaStep, Step};

pub(crate) fn run(
    step: &Step,
    c: &CudaStep,
    ctx: &StepContext,
    log: &mut dyn Write,
    on_line: &mut dyn FnMut(&str),
) -> Result<()> {
    check_driver(c, ctx)?;
    let _ = writeln!(log, "driver floor {} satisfied", c.driver_floor);
    if installed_version(&c.install_path).as_deref() == Some(c.version.as_str()) {
        let _ = writeln!(
            log,
            "CUDA {} is already installed at {}: installer skipped",
            c.version,
            c.install_path.display()
        );
    } else {
        super::fetch::fetch(
            &c.url,
            &c.sha256,
            &c.runfile,
            step.timeout,
            log,
            ctx.memo,
            ctx.progress,
        )?;
        let mut spec = CommandSpec::new("sh", [c.runfile.display().to_string()]);
        spec.args.extend(
            ["--silent", "--toolkit", "--no-man-page", "--override"]
                .map(String::from)
                .into_iter()
                .chain([format!("--toolkitpath={}", c.install_path.display())]),
        );
        spec.env = step.env.clone();
        let before = std::fs::read_link(&c.link).ok();
        let result = run_spec(&step.id, &spec, step.timeout, log, on_line);
        if result.is_err() {
            // The installer may have moved the link before failing: put it back.
            restore_link(&c.link, before.as_deref())?;
            return result;
        }
    }
    switch_link(step, c, log)
}

fn check_driver(c: &CudaStep, ctx: &StepContext) -> Result<()> {
    match ctx.facts.get("gpu.driver") {
        None => Err(Error::other(
            format!("no NVIDIA driver found; CUDA {} needs driver ≥ {}", c.version, c.driver_floor),
            Some("install the NVIDIA driver first (nvidia-smi must work), then run `kiln up` again".into()),
        )),
        Some(d) if compare(&d, &c.driver_floor).is_lt() => Err(Error::other(
            format!("driver {d} is older than {}, the floor of CUDA {}", c.driver_floor, c.version),
            Some(format!("upgrade the driver to ≥ {} (or import an older toolchain, e.g. toolchains/cuda-12.8.toml)", c.driver_floor)),
        )),
        Some(_) => Ok(()),
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

/// `13.0` from `nvcc --version` ("Cuda compilation tools, release 13.0, V13.0.88").
fn nvcc_release(nvcc: &Path) -> Option<String> {
    let out = process::capture(&nvcc.display().to_string(), &["--version"]).ok()?;
    let rest = out.split("release ").nth(1)?;
    Some(rest.split(',').next()?.trim().to_string())
}

/// Point `link` at the new toolkit atomically; verify through the link; roll back on mismatch.
fn switch_link(step: &Step, c: &CudaStep, log: &mut dyn Write) -> Result<()> {
    let before = std::fs::read_link(&c.link).ok();
    if let Some(old) = &before {
        let _ = writeln!(log, "{} → {} (before)", c.link.display(), old.display());
    }
    replace_link(&c.link, &c.install_path)?;
    let want: String = c.version.split('.').take(2).collect::<Vec<_>>().join(".");
    let got = nvcc_release(&c.link.join("bin/nvcc"));
    if got.as_deref() == Some(want.as_str()) {
        let _ = writeln!(
            log,
            "{} → {}; nvcc reports release {want}",
            c.link.display(),
            c.install_path.display()
        );
        return Ok(());
    }
    restore_link(&c.link, before.as_deref())?;
    Err(Error::StepFailed {
        step: step.id.clone(),
        reason: format!(
            "after switching {} to {}, nvcc reports {} instead of release {want}; the link was switched back",
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
