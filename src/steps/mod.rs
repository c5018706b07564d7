//! Step kinds: what running one step means. One file per kind.

pub(crate) mod cuda;
pub(crate) mod extract;
pub(crate) mod fetch;
pub(crate) mod patch;
pub(crate) mod python;
pub(crate) mod run;
pub(crate) mod sass;

use std::io::Write;

use crate::error::{Error, Result};
use crate::hash::HashMemo;
use crate::host::Facts;
use crate::paths::StatePaths;
use crate::recipe::{Check, Step, StepKind};

/// What steps may use besides their own definition.
#[derive(Clone, Copy)]
pub(crate) struct StepContext<'a> {
    pub memo: &'a HashMemo,
    pub facts: &'a Facts,
    /// The state directory (patch backups) and its cache (downloads, compiled wheels, tools
    /// kiln installs for itself such as uv).
    pub paths: &'a StatePaths,
    /// Where a step that moves bytes (fetch, extract) says how far it got.
    pub progress: &'a (dyn crate::report::Progress + Sync),
}

/// Run one attempt of `step`, logging to `log`; `on_line` sees each output line.
pub(crate) fn execute(
    step: &Step,
    ctx: &StepContext,
    log: &mut dyn Write,
    on_line: &mut dyn FnMut(&str),
) -> Result<()> {
    crate::fs::create_dir(&step.cwd)?;
    match &step.kind {
        StepKind::Run { cmd, sass } => {
            run::run(step, cmd, log, on_line)?;
            match sass {
                Some((file, arch)) => sass::check(step, &sass::Target::File(file), arch, log),
                None => Ok(()),
            }
        }
        StepKind::Fetch { url, sha256, path } => {
            fetch::fetch(url, sha256, path, step.timeout, log, ctx.memo, ctx.progress)
        }
        StepKind::Extract {
            archive,
            dest,
            strip_components,
            max_size,
            keep_setid,
        } => {
            let opts = extract::Options {
                strip: *strip_components,
                max_size: max_size.unwrap_or(extract::DEFAULT_MAX_SIZE),
                max_entries: extract::MAX_ENTRIES,
                keep_setid: *keep_setid,
            };
            extract::extract(archive, dest, opts, log, ctx.progress)
        }
        StepKind::Python(p) => python::run(step, p, ctx, log, on_line),
        StepKind::Cuda(c) => cuda::run(step, c, ctx, log, on_line),
        StepKind::Patch {
            set, site_packages, ..
        } => patch::run(step, set, site_packages, ctx, log),
    }
}

/// Before a restore from the step cache replaces `step`'s outputs: what running it would
/// check first. A `cuda` step's driver floor, and its `install_path` kiln's to replace (nothing
/// there, or a prefix kiln laid out); an error keeps the outputs as they are and the step runs.
pub(crate) fn before_restore(step: &Step, ctx: &StepContext, log: &mut dyn Write) -> Result<()> {
    match &step.kind {
        StepKind::Cuda(c) => cuda::before_restore(step, c, ctx, log),
        _ => Ok(()),
    }
}

/// Whether what sits at `step`'s outputs now is kiln's to replace by a restore (the part of
/// [`before_restore`] that `kiln plan` can tell without the host's facts).
pub(crate) fn replaceable(step: &Step) -> Result<()> {
    match &step.kind {
        StepKind::Cuda(c) => cuda::replaceable(step, c),
        _ => Ok(()),
    }
}

/// After a restore: what the step does besides writing its outputs. A `cuda` step switches its
/// link to the restored toolkit (and back, if the toolkit's compiler disagrees).
pub(crate) fn after_restore(step: &Step, log: &mut dyn Write) -> Result<()> {
    match &step.kind {
        StepKind::Cuda(c) => cuda::after_restore(step, c, log),
        _ => Ok(()),
    }
}

/// Prove the step's result exists: its `check` passes (no check: success is enough).
pub(crate) fn check(step: &Step, log: &mut dyn Write) -> Result<()> {
    match &step.check {
        None => Ok(()),
        Some(Check::Paths(paths)) => match paths.iter().find(|p| !p.exists()) {
            Some(p) => Err(Error::other(
                format!("check failed: {} does not exist", p.display()),
                Some("the step succeeded but did not produce what its `check` expects".into()),
            )),
            None => Ok(()),
        },
        Some(Check::Cmd(cmd)) => {
            let _ = writeln!(log, "--- check ---");
            let spec = run::spec(step, cmd);
            let done = crate::process::run_logged(&spec, log, step.timeout, &mut |_| {})?;
            if done.success() {
                Ok(())
            } else {
                Err(Error::other(
                    format!("check `{}` {}", spec.display(), done.describe()),
                    Some("the step succeeded but its `check` did not pass".into()),
                ))
            }
        }
    }
}

/// The step's env, plus `MAX_JOBS` sized to free RAM when it declares `mem_per_job`.
pub(crate) fn build_env(step: &Step) -> std::collections::BTreeMap<String, String> {
    let mut env = step.env.clone();
    if let Some(jobs) = max_jobs(step) {
        env.entry("MAX_JOBS".into())
            .or_insert_with(|| jobs.to_string());
    }
    env
}

/// `min(cores, available RAM / mem_per_job)`, at least 1; `None` without `mem_per_job`.
pub(crate) fn max_jobs(step: &Step) -> Option<usize> {
    max_jobs_for(step.mem_per_job)
}

/// [`max_jobs`] of a step with this `mem_per_job`.
pub(crate) fn max_jobs_for(mem_per_job: Option<u64>) -> Option<usize> {
    let per_job = mem_per_job?.max(1);
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let free = crate::host::available_memory_bytes().unwrap_or(per_job);
    Some(((free / per_job) as usize).clamp(1, cores))
}
