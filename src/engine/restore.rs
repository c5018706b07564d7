//! The engine's side of the step cache: the key a step asks for, a restore instead of a run
//! (then the step's own check), and the store after a run. Steps never know of it.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use super::cache_key::{self, Portable};
use super::fingerprint::Fingerprint;
use super::state::{Receipt, StateDir};
use crate::cache::steps::{short, NotStored, StepCache, StepKey};
use crate::hash::HashMemo;
use crate::paths::StatePaths;
use crate::recipe::{Recipe, Step};
use crate::report::{Outcome, Reporter};
use crate::steps::StepContext;

/// The key of `step`, every step's (a step that is not cached still hands its key to its
/// dependents' keys); `None` when a dependency's key is unknown (done by a kiln without the
/// step cache) or an input cannot be read, said as a note.
pub(super) fn key(
    step: &Step,
    recipe: &Recipe,
    dep_keys: Option<BTreeMap<String, String>>,
    ctx: &StepContext,
    reporter: &dyn Reporter,
) -> Option<StepKey> {
    let Some(dep_keys) = dep_keys else {
        reporter.note(&format!(
            "step `{}` is not cached: a dependency has no step-cache key (done by an older kiln); \
             it gets one when it runs again",
            step.id
        ));
        return None;
    };
    match cache_key::compute(step, dep_keys, &recipe.requires, ctx.paths, ctx.memo) {
        Ok(k) => Some(k),
        Err(e) => {
            reporter.warning(&format!(
                "step `{}` is not cached: {}",
                step.id,
                e.with_causes()
            ));
            None
        }
    }
}

/// Whether `step`'s outputs go to the step cache: `cache` on and outputs declared (`outputs`,
/// else `check.paths`). Why not, when not.
pub(super) fn cacheable(step: &Step) -> std::result::Result<(), &'static str> {
    if !step.cache {
        Err("`cache = false`")
    } else if step.outputs.is_empty() {
        Err("it declares no `outputs` and no `check.paths`")
    } else {
        Ok(())
    }
}

/// The key id `kiln plan` expects `step` to ask for (the run computes the same one), quietly:
/// `None` where the run would not cache it or say why.
pub(super) fn planned_key(
    step: &Step,
    recipe: &Recipe,
    dep_keys: Option<BTreeMap<String, String>>,
    paths: &StatePaths,
    memo: &HashMemo,
) -> Option<String> {
    cache_key::compute(step, dep_keys?, &recipe.requires, paths, memo)
        .ok()
        .map(|k| k.id())
}

/// Whether a run would restore `step` from entry `id`: it is cacheable, what sits at its outputs
/// is kiln's to replace, and the entry is here, reads, and is trusted (one the run would refuse
/// is no restore).
pub(super) fn held(paths: &StatePaths, step: &Step, id: &str) -> bool {
    cacheable(step).is_ok()
        && crate::steps::replaceable(step).is_ok()
        && StepCache::new(&paths.steps()).has(id)
        && crate::cache::trust::Trust::from_env(&paths.cache_own())
            .is_ok_and(|t| StepCache::with_trust(&paths.steps(), t).holds_trusted(id))
}

/// Whether the step cache holds `id`, or may fetch it from the remote cache
/// (`KILN_REMOTE_CACHE`) on this miss ([`restore`] asks it).
pub(super) fn available(ctx: &StepContext, id: &str) -> bool {
    StepCache::new(&ctx.paths.steps()).has(id) || crate::cache::remote::configured().is_some()
}

/// A miss: fetch entry `id` from the remote cache, verified. Whether it is here now; a remote
/// without it, or unreachable, is said and the step runs.
fn fetch_remote(step: &Step, cache: &StepCache, id: &str, reporter: &dyn Reporter) -> bool {
    use std::sync::atomic::{AtomicBool, Ordering};
    /// Set by the first failure to reach the remote cache: not asked again in this run (a
    /// silent registry would otherwise cost its deadline once per step).
    static REMOTE_DOWN: AtomicBool = AtomicBool::new(false);
    let Some(remote) = crate::cache::remote::configured() else {
        return false;
    };
    if REMOTE_DOWN.load(Ordering::SeqCst) {
        return false;
    }
    match cache.pull_remote(&remote, id) {
        Ok(true) => {
            reporter.note(&format!(
                "step `{}`: entry {} pulled from the remote cache {remote}",
                step.id,
                short(id)
            ));
            true
        }
        Ok(false) => {
            reporter.note(&format!(
                "step `{}`: the remote cache {remote} has no entry {}; running it",
                step.id,
                short(id)
            ));
            false
        }
        Err(e) => {
            if !REMOTE_DOWN.swap(true, Ordering::SeqCst) {
                reporter.warning(&format!(
                    "step `{}`: the remote cache is unavailable ({}); running it, and not asking \
                     the remote cache again in this run",
                    step.id,
                    e.with_causes().replace('\n', " ")
                ));
            }
            false
        }
    }
}

/// Restore `step` from entry `id`, then run its check and write its receipt. `None` (with a
/// warning) when the entry is refused or its outputs fail the check: the step runs then.
pub(super) fn restore(
    step: &Step,
    id: &str,
    fp: &Fingerprint,
    state: &StateDir,
    ctx: &StepContext,
    reporter: &dyn Reporter,
) -> Option<Outcome> {
    let cache = match crate::cache::trust::Trust::from_env(&ctx.paths.cache_own()) {
        Ok(trust) => StepCache::with_trust(&ctx.paths.steps(), trust),
        Err(e) => {
            reporter.warning(&format!(
                "step `{}`: not restored from cache: {}",
                step.id,
                e.with_causes()
            ));
            return None;
        }
    };
    let started = std::time::Instant::now();
    let mut log = Vec::new();
    if let Err(e) = crate::steps::before_restore(step, ctx, &mut log) {
        reporter.note(&format!(
            "step `{}`: not restored from cache ({}); running it",
            step.id,
            e.with_causes().replace('\n', " ")
        ));
        return None;
    }
    if !cache.has(id) && !fetch_remote(step, &cache, id, reporter) {
        return None;
    }
    // The old receipt no longer describes what is on disk once outputs are replaced.
    if state.remove_receipt(&step.id).is_err() {
        return None;
    }
    if let Err(e) = cache.restore(id, &step.outputs) {
        reporter.warning(&format!("step `{}`: {}", step.id, e.with_causes()));
        return None;
    }
    let _ = writeln!(
        log,
        "--- outputs restored from the step cache (entry {}) ---",
        short(id)
    );
    let activated = crate::steps::after_restore(step, &mut log);
    write_log(state, step, &log);
    if let Err(e) = activated {
        reporter.warning(&format!(
            "step `{}`: after the restore from cache (entry {}): {}; running it",
            step.id,
            short(id),
            e.with_causes()
        ));
        return None;
    }
    if let Err(e) = crate::steps::check(step, &mut std::io::sink()) {
        reporter.warning(&format!(
            "step `{}`: the outputs restored from cache (entry {}) fail its check ({}); running it",
            step.id,
            short(id),
            e.with_causes()
        ));
        return None;
    }
    let written = state.write_receipt(&Receipt {
        step: step.id.clone(),
        fingerprint: fp.clone(),
        finished_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        duration_ms: started.elapsed().as_millis() as u64,
        kiln_version: env!("CARGO_PKG_VERSION").to_string(),
        cache_key: Some(id.to_string()),
        restored_from: Some(format!("restored from cache (entry {})", short(id))),
    });
    match written {
        Ok(()) => Some(Outcome::Restored(short(id).to_string())),
        Err(e) => {
            reporter.warning(&format!("step `{}`: {}", step.id, e.with_causes()));
            None
        }
    }
}

/// The step log of a restore (what [`crate::steps::after_restore`] did), redacted as a run's is;
/// best effort: the restore stands without it.
fn write_log(state: &StateDir, step: &Step, text: &[u8]) {
    let path = state.log_path(&step.id);
    let write = || -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut w = crate::redact::LineWriter::new(std::fs::File::create(&path)?);
        w.write_all(text)?;
        w.flush()
    };
    let _ = write();
}

/// Archive a step's outputs after it ran: the entry's short id, or why they are not stored
/// (also a warning; never a failed step).
pub(super) fn store(
    step: &Step,
    recipe: &Recipe,
    key: &StepKey,
    before: &crate::cache::pack::Before,
    ctx: &StepContext,
    reporter: &dyn Reporter,
) -> std::result::Result<String, String> {
    let portable = Portable::new(ctx.paths);
    let outputs: Vec<String> = step.outputs.iter().map(|o| portable.path(o)).collect();
    let trust = match crate::cache::trust::Trust::from_env(&ctx.paths.cache_own()) {
        Ok(t) => t,
        Err(e) => {
            let why = e.with_causes();
            reporter.warning(&format!("step `{}` is not cached: {why}", step.id));
            return Err(why);
        }
    };
    let cache = StepCache::with_trust(&ctx.paths.steps(), trust);
    let why = match cache.store(key, &recipe.name, &step.id, &step.outputs, &outputs, before) {
        Ok(Ok(id)) => return Ok(short(&id).to_string()),
        Ok(Err(NotStored(why))) => why,
        Err(e) => e.with_causes(),
    };
    reporter.warning(&format!("step `{}` is not cached: {why}", step.id));
    Err(why)
}

#[cfg(test)]
mod tests {
    use super::cacheable;

    /// The seed recipe stores the FlashInfer warm-up's JIT kernels (its workspace under kiln's
    /// cache directory) and the CUDA toolkit it lays out in the step cache.
    #[test]
    fn the_seed_recipe_caches_the_flashinfer_warm_up_kernels_and_the_toolkit() {
        let dir = tempfile::tempdir().unwrap();
        let paths = crate::paths::StatePaths::new(dir.path().join("state"), None);
        let facts = crate::host::Facts::new();
        let opts = crate::recipe::LoadOptions {
            overrides: &[],
            facts: &facts,
            paths: &paths,
        };
        let recipe = crate::recipe::load(Some("glm5-nvfp4-sm120"), &opts).unwrap();
        let warmup = recipe
            .steps
            .iter()
            .find(|s| s.id == "flashinfer-warmup")
            .unwrap();
        assert_eq!(warmup.outputs, [paths.cache().join("flashinfer")]);
        assert_eq!(
            warmup
                .env
                .get("FLASHINFER_WORKSPACE_BASE")
                .map(std::path::PathBuf::from),
            Some(paths.cache().join("flashinfer")),
            "the output is where FlashInfer writes its kernels"
        );
        assert_eq!(cacheable(warmup), Ok(()));
        let cuda = recipe.steps.iter().find(|s| s.id == "cuda").unwrap();
        let crate::recipe::StepKind::Cuda(c) = &cuda.kind else {
            panic!("the seed's cuda step is a cuda step");
        };
        assert_eq!(
            cuda.outputs,
            std::slice::from_ref(&c.install_path),
            "the toolkit is cached"
        );
        assert_eq!(cacheable(cuda), Ok(()));
    }
}
