//! The `sass = {…}` check: the built code must carry machine code (SASS) for an arch, listed by
//! `cuobjdump --list-elf`. cuobjdump is looked up on the step's `PATH`, then in its
//! `CUDA_HOME/bin`, then on kiln's `PATH`. Without one the check cannot run: the step is
//! `unproven` (a warning kept with its receipt; an error with `--strict`), never a silent pass.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::StepContext;
use crate::error::{Error, Result};
use crate::process;
use crate::recipe::Step;

/// What carries the code: an extension module (found through the venv's python) or a file.
pub(crate) enum Target<'a> {
    Module { python: &'a Path, module: &'a str },
    File(&'a Path),
}

pub(crate) fn check(
    step: &Step,
    target: &Target,
    arch: &str,
    ctx: &StepContext,
    log: &mut dyn Write,
) -> Result<()> {
    let Some(cuobjdump) = find_cuobjdump(step) else {
        let what = format!(
            "the sass check ({arch}) did not run: cuobjdump is not on the step's PATH, in its CUDA_HOME/bin or on PATH"
        );
        let _ = writeln!(log, "unproven: {what}");
        if ctx.strict {
            return Err(Error::StepFailed {
                step: step.id.clone(),
                reason: format!("unproven with --strict: {what}"),
                log: None,
                hint: Some(unproven_hint()),
                tail: String::new(),
            });
        }
        ctx.unproven.add(&step.id, what);
        return Ok(());
    };
    let (path, name) = match target {
        Target::Module { python, module } => {
            let origin = process::capture(
                &python.display().to_string(),
                &[
                    "-c",
                    "import importlib.util, sys; print(importlib.util.find_spec(sys.argv[1]).origin)",
                    module,
                ],
            )?;
            (PathBuf::from(origin.trim()), (*module).to_string())
        }
        Target::File(f) => (f.to_path_buf(), f.display().to_string()),
    };
    let listing = process::capture(
        &cuobjdump.display().to_string(),
        &["--list-elf", &path.display().to_string()],
    )?;
    let _ = writeln!(
        log,
        "{} --list-elf {}:\n{listing}",
        cuobjdump.display(),
        path.display()
    );
    if carries(&listing, arch) {
        let _ = writeln!(log, "sass check: {name} carries {arch} code");
        return Ok(());
    }
    Err(Error::StepFailed {
        step: step.id.clone(),
        reason: format!("{name} carries no {arch} code (cuobjdump found none)"),
        log: None,
        hint: None,
        tail: listing.lines().take(20).collect::<Vec<_>>().join("\n"),
    })
}

fn unproven_hint() -> String {
    "install cuobjdump (the nvidia-cuda-cuobjdump wheel, or a full CUDA toolkit) where the step finds it, or run without --strict to keep the step as unproven".into()
}

/// Whether a `--list-elf` listing has an ELF for `arch` (`sm_120` matches `k.sm_120.cubin` and
/// the arch-specific `k.sm_120a.cubin`, which also runs on SM 12.0; not `sm_1200`).
fn carries(listing: &str, arch: &str) -> bool {
    listing.lines().any(|l| {
        l.match_indices(arch).any(|(i, _)| {
            let next = l[i + arch.len()..].chars().next();
            !next.is_some_and(|c| c.is_ascii_digit())
        })
    })
}

fn find_cuobjdump(step: &Step) -> Option<PathBuf> {
    let in_dir = |d: &Path| Some(d.join("cuobjdump")).filter(|p| p.is_file());
    if let Some(path) = step.env.get("PATH") {
        if let Some(p) = std::env::split_paths(path).find_map(|d| in_dir(&d)) {
            return Some(p);
        }
    }
    if let Some(home) = step.env.get("CUDA_HOME") {
        if let Some(p) = in_dir(&Path::new(home).join("bin")) {
            return Some(p);
        }
    }
    which::which("cuobjdump").ok()
}

#[cfg(test)]
mod tests {
    use super::carries;

    #[test]
    fn the_listing_names_the_arch_exactly() {
        // `cuobjdump --list-elf` of CUDA 13.2 on a cubin nvcc 13.0 built for sm_120.
        let listing = "ELF file    1: k120.sm_120.cubin\n";
        assert!(carries(listing, "sm_120"));
        assert!(!carries(listing, "sm_12"));
        assert!(!carries(listing, "sm_90"));
        assert!(carries("ELF file    1: k.sm_120a.cubin", "sm_120"));
        assert!(!carries("ELF file    1: k.sm_1200.cubin", "sm_120"));
    }
}
