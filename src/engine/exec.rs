//! Running a plan: stale steps in dependency order, independent ones in parallel within `--jobs`
//! and the free-RAM budget; a receipt is written only after a step and its check succeeded.

use std::collections::BTreeMap;
use std::fs::File;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::fingerprint::{self, explain_change};
use super::plan::{Plan, Status};
use super::schedule::{Scheduler, State};
use super::state::{Receipt, StateDir};
use crate::error::{Error, Result};
use crate::fs::create_dir;
use crate::recipe::{Recipe, Step};
use crate::report::{Outcome, Reporter};
use crate::steps::StepContext;

#[derive(Debug, Clone)]
pub(crate) struct ExecOptions {
    pub jobs: usize,
    /// Bytes of RAM steps may claim through `mem_per_job` at once.
    pub mem_budget: u64,
}

#[derive(Debug, Default)]
pub(crate) struct RunSummary {
    pub outcomes: Vec<(String, Outcome)>,
    pub elapsed: Duration,
}

struct Finished {
    index: usize,
    result: Result<Outcome>,
    digest: Option<String>,
    /// Its step-cache key id, for its dependents' keys.
    key: Option<String>,
    elapsed: Duration,
}

/// Pending for stale steps; skipped steps recorded; fresh ones contribute their digest (by step
/// index). A step `--only` leaves out that has never completed is missing.
fn initial_states(
    plan: &Plan,
    state: &StateDir,
    digests: &mut [Option<String>],
    keys: &mut [Option<String>],
    summary: &mut RunSummary,
) -> Vec<State> {
    let mut states = vec![State::Done; plan.steps.len()];
    for (i, p) in plan.steps.iter().enumerate() {
        match &p.status {
            Status::Stale(_) => states[i] = State::Pending,
            Status::Skipped(why) => {
                digests[i] = Some("skipped".into());
                keys[i] = Some("skipped".into());
                summary
                    .outcomes
                    .push((p.id.clone(), Outcome::Skipped(why.clone())));
            }
            Status::Fresh | Status::NotSelected => {
                digests[i].clone_from(&p.digest);
                keys[i] = state.receipt(&p.id).and_then(|r| r.cache_key);
                if p.status == Status::NotSelected && !state.has_receipt(&p.id) {
                    // A dependency --only leaves out must have completed before.
                    states[i] = State::Missing;
                }
            }
        }
    }
    states
}

/// Report steps that will never run, each with the dependency that failed or never completed.
fn report_not_run(
    recipe: &Recipe,
    plan: &Plan,
    not_run: &[(usize, usize)],
    reporter: &dyn Reporter,
    summary: &mut RunSummary,
) {
    for &(i, dep) in not_run {
        let dep_id = &recipe.steps[dep].id;
        let why = if plan.steps[dep].status == Status::NotSelected {
            format!("dependency `{dep_id}` has never completed; run it first (drop --only)")
        } else {
            format!("dependency `{dep_id}` failed")
        };
        let id = &recipe.steps[i].id;
        reporter.step_finished(id, &Outcome::NotRun(why.clone()), Duration::ZERO);
        summary.outcomes.push((id.clone(), Outcome::NotRun(why)));
    }
}

/// The digests of step `i`'s dependencies, by id, as its fingerprint takes them.
fn dep_digests(
    recipe: &Recipe,
    queue: &Scheduler,
    digests: &[Option<String>],
    i: usize,
) -> BTreeMap<String, String> {
    queue
        .deps(i)
        .iter()
        .map(|&d| {
            let digest = digests[d].clone().unwrap_or_default();
            (recipe.steps[d].id.clone(), digest)
        })
        .collect()
}

/// The step-cache key ids of step `i`'s dependencies, by id; `None` when one is unknown (a
/// dependency not cached, or done by a kiln without the step cache): then `i` is not cached.
fn dep_keys(
    recipe: &Recipe,
    queue: &Scheduler,
    keys: &[Option<String>],
    i: usize,
) -> Option<BTreeMap<String, String>> {
    queue
        .deps(i)
        .iter()
        .map(|&d| Some((recipe.steps[d].id.clone(), keys[d].clone()?)))
        .collect()
}

/// What a step's dependencies hand it: their fingerprint digests and step-cache keys.
struct Deps {
    digests: BTreeMap<String, String>,
    keys: Option<BTreeMap<String, String>>,
}

/// Execute the stale steps of `plan`. Fails with the first step error after running steps end.
/// Ready steps come from a queue fed by in-degree counts ([`Scheduler`]): linear in the steps.
pub(crate) fn execute(
    recipe: &Recipe,
    plan: &Plan,
    state: &StateDir,
    ctx: &StepContext,
    reporter: &dyn Reporter,
    opts: &ExecOptions,
) -> Result<RunSummary> {
    let memo = ctx.memo;
    let started = Instant::now();
    // Downloads cut short by a killed run: nothing else cleans them.
    crate::steps::fetch::remove_stale_partials(&ctx.paths.downloads());
    let n = recipe.steps.len();
    let mut digests: Vec<Option<String>> = vec![None; n];
    let mut keys: Vec<Option<String>> = vec![None; n];
    let mut summary = RunSummary::default();
    let states = initial_states(plan, state, &mut digests, &mut keys, &mut summary);
    let to_run = states.iter().filter(|s| **s == State::Pending).count();
    reporter.run_started(&recipe.name, to_run, n);
    for (id, outcome) in &summary.outcomes {
        reporter.step_finished(id, outcome, Duration::ZERO);
    }
    let missing: Vec<usize> = (0..n).filter(|&i| states[i] == State::Missing).collect();
    let mut queue = Scheduler::new(&recipe.steps, states);
    let not_run = queue.fail(&missing);
    report_not_run(recipe, plan, &not_run, reporter, &mut summary);
    if to_run > 0 {
        // Receipts are about to change: the index no longer vouches for them.
        state.invalidate_index();
    }

    let mut first_error: Option<Error> = None;
    let (tx, rx) = mpsc::channel::<Finished>();
    std::thread::scope(|scope| {
        let mut running = 0usize;
        let mut mem_in_use = 0u64;
        loop {
            while first_error.is_none() && running < opts.jobs.max(1) {
                let fits = |i: usize| {
                    running == 0
                        || mem_in_use + recipe.steps[i].mem_per_job.unwrap_or(0) <= opts.mem_budget
                };
                let Some(i) = queue.next(fits) else { break };
                let step = &recipe.steps[i];
                running += 1;
                mem_in_use += step.mem_per_job.unwrap_or(0);
                let deps = Deps {
                    digests: dep_digests(recipe, &queue, &digests, i),
                    keys: dep_keys(recipe, &queue, &keys, i),
                };
                let tx = tx.clone();
                let forced = plan.steps[i].forced;
                scope.spawn(move || {
                    let t = Instant::now();
                    let (result, digest, key) =
                        run_one(step, recipe, deps, forced, state, ctx, reporter);
                    let _ = tx.send(Finished {
                        index: i,
                        result,
                        digest,
                        key,
                        elapsed: t.elapsed(),
                    });
                });
            }
            if running == 0 {
                break;
            }
            let done = rx.recv().expect("a running step always reports back");
            running -= 1;
            let step = &recipe.steps[done.index];
            mem_in_use -= step.mem_per_job.unwrap_or(0);
            match done.result {
                Ok(outcome) => {
                    queue.done(done.index);
                    if let Some(d) = done.digest {
                        digests[done.index] = Some(d);
                    }
                    keys[done.index] = done.key;
                    // A step that ran shows its receipt's duration (its command and check), the
                    // figure report.html shows; hashing and the step cache's copy count in the
                    // run's total.
                    let elapsed = match outcome {
                        Outcome::Ran => state
                            .receipt(&step.id)
                            .map_or(done.elapsed, |r| Duration::from_millis(r.duration_ms)),
                        _ => done.elapsed,
                    };
                    reporter.step_finished(&step.id, &outcome, elapsed);
                    summary.outcomes.push((step.id.clone(), outcome));
                }
                Err(e) => {
                    let outcome = Outcome::Failed(e.to_string());
                    reporter.step_finished(&step.id, &outcome, done.elapsed);
                    summary.outcomes.push((step.id.clone(), outcome));
                    first_error.get_or_insert(e);
                    let not_run = queue.fail(&[done.index]);
                    report_not_run(recipe, plan, &not_run, reporter, &mut summary);
                }
            }
        }
    });
    summary.elapsed = started.elapsed();
    let _ = memo.save();
    if to_run > 0 {
        if let Err(e) = state.sync_receipts() {
            first_error.get_or_insert(e);
        }
        state.save_index(recipe.steps.iter().map(|s| s.id.as_str()));
    }
    let failed = queue.any_failed();
    reporter.run_finished(!failed && first_error.is_none(), summary.elapsed);
    match first_error {
        Some(e) => Err(e),
        None if failed => Err(Error::other(
            "some steps could not run because a step they need has never completed",
            Some("run `kiln up` without --only first".to_string()),
        )),
        None => Ok(summary),
    }
}

/// What [`execute`] reports of a plan with nothing to run, without running anything: the run
/// started with no step to run, the steps `when` skipped, done.
pub(crate) fn report_fresh(plan: &Plan, reporter: &dyn Reporter) {
    let started = Instant::now();
    reporter.run_started(&plan.recipe, 0, plan.steps.len());
    for p in &plan.steps {
        if let Status::Skipped(why) = &p.status {
            reporter.step_finished(&p.id, &Outcome::Skipped(why.clone()), Duration::ZERO);
        }
    }
    reporter.run_finished(true, started.elapsed());
}

/// Fingerprint (now that dependencies are done), restore from the step cache or run with
/// retries, check, write the receipt, store the outputs in the step cache.
fn run_one(
    step: &Step,
    recipe: &Recipe,
    deps: Deps,
    forced: bool,
    state: &StateDir,
    ctx: &StepContext,
    reporter: &dyn Reporter,
) -> (Result<Outcome>, Option<String>, Option<String>) {
    let fp = match fingerprint::compute(step, deps.digests, ctx.memo) {
        Ok(fp) => fp,
        Err(e) => return (Err(e), None, None),
    };
    let digest = Some(fp.digest.clone());
    let cache_key = super::restore::key(step, recipe, deps.keys, ctx, reporter);
    let key_id = cache_key.as_ref().map(crate::cache::steps::StepKey::id);
    if !forced {
        if let Some(r) = state.receipt(&step.id) {
            if explain_change(&r.fingerprint, &fp).is_none()
                && crate::steps::check(step, &mut std::io::sink()).is_ok()
            {
                return (Ok(Outcome::UpToDate), digest, key_id.or(r.cache_key));
            }
        }
        if let Some(id) = key_id
            .as_deref()
            .filter(|_| super::restore::cacheable(step).is_ok())
            .filter(|id| super::restore::available(ctx, id))
        {
            if let Some(outcome) = super::restore::restore(step, id, &fp, state, ctx, reporter) {
                return (Ok(outcome), digest, key_id);
            }
        }
    }
    // The last run's duration, for the ETA of a long compile, before its receipt goes.
    let last_run = state
        .receipt(&step.id)
        .map(|r| Duration::from_millis(r.duration_ms));
    let log_path = state.log_path(&step.id);
    // Until this run's log exists, the one on disk is an earlier run's: not this failure's.
    let log_created = std::cell::Cell::new(false);
    let result = (|| {
        // The old receipt no longer describes what is on disk once the step starts again.
        state.remove_receipt(&step.id)?;
        create_dir(log_path.parent().expect("logs live in a directory"))?;
        let mut log = crate::redact::LineWriter::new(
            File::create(&log_path)
                .map_err(|e| Error::io(format!("cannot create {}", log_path.display()), e))?,
        );
        log_created.set(true);
        // What the outputs held before the step: the step cache stores only what it wrote.
        let before = match super::restore::cacheable(step) {
            Ok(()) => crate::cache::pack::Before::take(&step.outputs),
            Err(_) => crate::cache::pack::Before::default(),
        };
        let started = Instant::now();
        let mut attempt = 1;
        loop {
            reporter.step_started(&step.id, step.kind.name(), attempt);
            let mut progress = super::progress::CompileProgress::new(last_run);
            let bytes = |done, total| reporter.step_bytes(&step.id, done, total);
            let ctx = &StepContext {
                progress: &bytes,
                ..*ctx
            };
            let outcome = crate::steps::execute(step, ctx, &mut log, &mut |line| {
                reporter.step_output(&step.id, line);
                if let Some(p) = progress.line(line) {
                    reporter.step_progress(&step.id, &p);
                }
            })
            .and_then(|()| crate::steps::check(step, &mut log));
            match outcome {
                Ok(()) => break,
                Err(e) if attempt > step.retries => return Err(e),
                Err(e) => {
                    use std::io::Write;
                    let _ = writeln!(
                        log,
                        "--- attempt {attempt} failed: {}; retrying ---",
                        e.with_causes()
                    );
                    attempt += 1;
                }
            }
        }
        state.write_receipt(&Receipt {
            step: step.id.clone(),
            fingerprint: fp,
            finished_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            duration_ms: started.elapsed().as_millis() as u64,
            kiln_version: env!("CARGO_PKG_VERSION").to_string(),
            cache_key: key_id.clone(),
            restored_from: None,
        })?;
        let stored = match (&cache_key, super::restore::cacheable(step)) {
            (Some(key), Ok(())) => super::restore::store(step, recipe, key, &before, ctx, reporter),
            (_, Err(why)) => Err(why.to_string()),
            (None, Ok(())) => Err("it has no key (the run's notes say why)".into()),
        };
        {
            use std::io::Write;
            let _ = match stored {
                Ok(id) => writeln!(log, "--- outputs stored in the step cache (entry {id}) ---"),
                Err(why) => writeln!(log, "--- not stored in the step cache: {why} ---"),
            };
        }
        Ok(Outcome::Ran)
    })();
    if !log_created.get() {
        return (result, digest, key_id);
    }
    if let Err(e) = &result {
        // The step log tells the whole story, the failure included (and its OS cause).
        if let Ok(mut log) = std::fs::OpenOptions::new().append(true).open(&log_path) {
            use std::io::Write;
            let _ = writeln!(log, "error: {}", crate::redact::scrub(&e.with_causes()));
        }
    }
    let result = result.map_err(|e| with_log(e, &step.id, &log_path));
    (result, digest, key_id)
}

/// Attach the step id, log path and output tail to an error for the final report.
fn with_log(e: Error, id: &str, log: &std::path::Path) -> Error {
    match e {
        Error::StepFailed {
            step,
            reason,
            tail,
            hint,
            ..
        } => Error::StepFailed {
            step,
            reason,
            log: Some(log.to_path_buf()),
            tail,
            hint,
        },
        other => {
            let tail = std::fs::read_to_string(log)
                .map(|t| {
                    t.lines()
                        .rev()
                        .take(crate::process::TAIL_LINES)
                        .collect::<Vec<_>>()
                        .into_iter()
                        .rev()
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .unwrap_or_default();
            Error::StepFailed {
                step: id.to_string(),
                reason: other.with_causes(),
                log: Some(log.to_path_buf()),
                tail,
                hint: other.hint(),
            }
        }
    }
}
