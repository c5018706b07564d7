//! What a run of steps proved, for its last lines: each `sass` check of a done step (it passed
//! when the step ran: kiln read the built file's device code itself), and the recipe's evidence
//! directories (a directory named `evidence` holding a done step's outputs or check paths).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::Session;
use crate::engine::state::StateDir;
use crate::recipe::{Check, Step, StepKind};

/// `proved: sm_120 SASS in /w/out/axpy.cubin (step `nvcc-sm120`)` per passed sass check, then
/// `evidence: /w/out/evidence (2 files: a.txt, b.txt)` per evidence directory; none for a recipe
/// whose steps check no SASS and write no evidence.
pub fn lines(s: Session) -> Vec<String> {
    let state = StateDir::new(s.paths, &s.recipe.name);
    let done: Vec<&Step> = s
        .recipe
        .steps
        .iter()
        .filter(|step| {
            crate::engine::plan::skipped_by_when(s.recipe, step, s.facts).is_none()
                && state.receipt(&step.id).is_some()
        })
        .collect();
    let mut out: Vec<String> = done.iter().filter_map(|step| sass_line(step)).collect();
    let dirs: BTreeSet<PathBuf> = done
        .iter()
        .flat_map(|step| written(step))
        .filter_map(|p| evidence_dir(&p))
        .collect();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut names: Vec<String> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        out.push(format!(
            "evidence: {} ({} file(s): {})",
            dir.display(),
            names.len(),
            names.join(", ")
        ));
    }
    out
}

fn sass_line(step: &Step) -> Option<String> {
    let (what, arch) = match &step.kind {
        StepKind::Run {
            sass: Some((file, arch)),
            ..
        } => (file.display().to_string(), arch),
        StepKind::Python(p) => {
            let (module, arch) = p.sass.as_ref()?;
            (format!("module `{module}`"), arch)
        }
        _ => return None,
    };
    Some(format!(
        "proved: {arch} SASS in {what} (step `{}`: kiln read its device code)",
        step.id
    ))
}

/// The paths a step declares it writes: its outputs, its check paths, its sass file.
fn written(step: &Step) -> Vec<PathBuf> {
    let mut paths = step.outputs.clone();
    if let Some(Check::Paths(p)) = &step.check {
        paths.extend(p.iter().cloned());
    }
    if let StepKind::Run {
        sass: Some((file, _)),
        ..
    } = &step.kind
    {
        paths.push(file.clone());
    }
    paths
}

/// The nearest directory named `evidence` that holds `path` (or is it).
fn evidence_dir(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "evidence"))
        .map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::evidence_dir;
    use std::path::Path;

    #[test]
    fn the_evidence_dir_is_the_nearest_one_named_so() {
        assert_eq!(
            evidence_dir(Path::new("/w/out/evidence/family.txt")).as_deref(),
            Some(Path::new("/w/out/evidence"))
        );
        assert_eq!(
            evidence_dir(Path::new("/w/out/evidence")).as_deref(),
            Some(Path::new("/w/out/evidence"))
        );
        assert_eq!(evidence_dir(Path::new("/w/out/axpy.cubin")), None);
        assert_eq!(evidence_dir(Path::new("/w/evidence-not/x")), None);
    }
}
