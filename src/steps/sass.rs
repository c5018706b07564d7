//! The `sass = {…}` check: the built code must carry machine code (SASS) for an arch. kiln reads
//! the file's device code itself ([`crate::fatbin`]: a library's `.nv_fatbin`, a fatbin, a bare
//! cubin), so the check needs no CUDA tool and always runs.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fatbin::{self, Kind};
use crate::process;
use crate::recipe::Step;

/// What carries the code: an extension module (found through the venv's python) or a file.
pub(crate) enum Target<'a> {
    Module { python: &'a Path, module: &'a str },
    File(&'a Path),
}

pub(crate) fn check(step: &Step, target: &Target, arch: &str, log: &mut dyn Write) -> Result<()> {
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
    let failed = |reason: String, hint: Option<String>, tail: String| Error::StepFailed {
        step: step.id.clone(),
        reason,
        log: None,
        hint,
        tail,
    };
    let images = fatbin::read(&path).map_err(|e| {
        failed(
            format!("the sass check ({arch}) cannot read {name}: {e}"),
            Some(e.hint().to_string()),
            String::new(),
        )
    })?;
    let listing: Vec<String> = fatbin::archs(&images)
        .iter()
        .map(ToString::to_string)
        .collect();
    let listing = if listing.is_empty() {
        "no CUDA code".to_string()
    } else {
        listing.join(" ")
    };
    let _ = writeln!(log, "device code in {}: {listing}", path.display());
    if carries(&images, arch) {
        let _ = writeln!(log, "sass check: {name} carries {arch} code");
        return Ok(());
    }
    Err(failed(
        format!("{name} carries no {arch} code (it has: {listing})"),
        None,
        String::new(),
    ))
}

/// Whether `images` hold SASS for `arch` (`sm_120`): the same arch number, any suffix (the
/// arch-specific `sm_120a` and the family `sm_120f` run on SM 12.0 too; `sm_1200` is not it).
fn carries(images: &[fatbin::Image], arch: &str) -> bool {
    let number: Option<u32> = arch
        .strip_prefix("sm_")
        .map(|a| a.trim_end_matches(['a', 'f']))
        .and_then(|a| a.parse().ok());
    number.is_some_and(|n| images.iter().any(|i| i.kind == Kind::Sass && i.arch == n))
}

#[cfg(test)]
mod tests {
    use super::carries;
    use crate::fatbin::{Image, Kind};

    #[test]
    fn the_arch_is_matched_by_number_with_any_suffix() {
        let sass = |arch, suffix| Image {
            kind: Kind::Sass,
            arch,
            suffix,
        };
        let built = [sass(120, None)];
        assert!(carries(&built, "sm_120"));
        assert!(!carries(&built, "sm_12"));
        assert!(!carries(&built, "sm_90"));
        assert!(carries(&[sass(120, Some('a'))], "sm_120"));
        assert!(carries(&[sass(120, Some('f'))], "sm_120f"));
        assert!(!carries(&[sass(1200, None)], "sm_120"));
        let ptx = Image {
            kind: Kind::Ptx,
            arch: 120,
            suffix: None,
        };
        assert!(!carries(&[ptx], "sm_120"), "PTX is not SASS");
    }
}
