//! Running a plan: stale steps in dependency order, independent ones in parallel within `--jobs`
//! and the free-RAM budget; a receipt is written only after a step and its check succeeded.

use std::collections::BTreeMap;
use std::fs::File;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::fingerprint::{self, explain_change};
use super::plan::{Plan, Status};
use super::state::{create_dir, Receipt, StateDir};
use crate::error::{Error, Result};
use crate::recipe::{Recipe, Step};
use crate::report::{Outcome, Reporter};
use crate::steps::StepContext;

#[derive(Debug, Clone)]
pub struct ExecOptions {
    pub jobs: usize,
    /// Bytes of RAM steps may claim through `mem_per_job` at once.
    pub mem_budget: u64,
}

#[derive(Debug, Default)]
pub struct RunSummary {
    pub outcomes: Vec<(String, Outcome)>,
    pub elapsed: Duration,
}

impl RunSummary {
    pub fn ran(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|(_, o)| *o == Outcome::Ran)
            .count()
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Pending,
    Running,
    Done,
    Failed,
    /// Left out by `--only` and never completed: fatal only to selected steps that need it.
    Missing,
}

struct Finished {
    index: usize,
    result: Result<Outcome>,
    digest: Option<String>,
    elapsed: Duration,
}

/// Execute the stale steps of `plan`. Fails with the first step error after running steps end.
pub fn execute(
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
    crate::steps::fetch::remove_stale_partials(&ctx.cache_dir.join("downloads"));
    let n = recipe.steps.len();
    let mut states = vec![State::Done; n];
    let mut digests: BTreeMap<String, String> = BTreeMap::new();
    let mut summary = RunSummary::default();
    for (i, p) in plan.steps.iter().enumerate() {
        match &p.status {
            Status::Stale(_) => states[i] = State::Pending,
            Status::Skipped(why) => {
                digests.insert(p.id.clone(), "skipped".into());
                summary
                    .outcomes
                    .push((p.id.clone(), Outcome::Skipped(why.clone())));
            }
            Status::Fresh | Status::NotSelected => {
                if let Some(fp) = &p.fingerprint {
                    digests.insert(p.id.clone(), fp.digest.clone());
                }
                if p.status == Status::NotSelected && state.receipt(&p.id).is_none() {
                    // A dependency --only leaves out must have completed before.
                    states[i] = State::Missing;
                }
            }
        }
    }
    let to_run = states.iter().filter(|s| **s == State::Pending).count();
    reporter.run_started(&recipe.name, to_run, n);
    for (id, outcome) in &summary.outcomes {
        reporter.step_finished(id, outcome, Duration::ZERO);
    }

    let index: BTreeMap<&str, usize> = recipe
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    let mut first_error: Option<Error> = None;
    let (tx, rx) = mpsc::channel::<Finished>();
    std::thread::scope(|scope| {
        let mut running = 0usize;
        let mut mem_in_use = 0u64;
        loop {
            // Steps whose dependencies failed will never run.
            for i in 0..n {
                if states[i] != State::Pending {
                    continue;
                }
                if let Some(dep) = recipe.steps[i]
                    .needs
                    .iter()
                    .find(|d| matches!(states[index[d.as_str()]], State::Failed | State::Missing))
                {
                    states[i] = State::Failed;
                    let why = if plan.steps[index[dep.as_str()]].status == Status::NotSelected {
                        format!(
                            "dependency `{dep}` has never completed; run it first (drop --only)"
                        )
                    } else {
                        format!("dependency `{dep}` failed")
                    };
                    reporter.step_finished(
                        &recipe.steps[i].id,
                        &Outcome::NotRun(why.clone()),
                        Duration::ZERO,
                    );
                    summary
                        .outcomes
                        .push((recipe.steps[i].id.clone(), Outcome::NotRun(why)));
                }
            }
            if first_error.is_none() {
                for i in 0..n {
                    if running >= opts.jobs.max(1) {
                        break;
                    }
                    let step = &recipe.steps[i];
                    let ready = states[i] == State::Pending
                        && step
                            .needs
                            .iter()
                            .all(|d| states[index[d.as_str()]] == State::Done);
                    let mem = step.mem_per_job.unwrap_or(0);
                    if !ready || (running > 0 && mem_in_use + mem > opts.mem_budget) {
                        continue;
                    }
                    states[i] = State::Running;
                    running += 1;
                    mem_in_use += mem;
                    let deps: BTreeMap<String, String> = step
                        .needs
                        .iter()
                        .map(|d| (d.clone(), digests.get(d).cloned().unwrap_or_default()))
                        .collect();
                    let tx = tx.clone();
                    let forced = plan.steps[i].forced;
                    scope.spawn(move || {
                        let t = Instant::now();
                        let (result, digest) = run_one(step, deps, forced, state, ctx, reporter);
                        let _ = tx.send(Finished {
                            index: i,
                            result,
                            digest,
                            elapsed: t.elapsed(),
                        });
                    });
                }
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
                    states[done.index] = State::Done;
                    if let Some(d) = done.digest {
                        digests.insert(step.id.clone(), d);
                    }
                    reporter.step_finished(&step.id, &outcome, done.elapsed);
                    summary.outcomes.push((step.id.clone(), outcome));
                }
                Err(e) => {
                    states[done.index] = State::Failed;
                    let outcome = Outcome::Failed(e.to_string());
                    reporter.step_finished(&step.id, &outcome, done.elapsed);
                    summary.outcomes.push((step.id.clone(), outcome));
                    first_error.get_or_insert(e);
                }
            }
        }
    });
    summary.elapsed = started.elapsed();
    let _ = memo.save();
    let failed = states.contains(&State::Failed);
    reporter.run_finished(!failed, summary.elapsed);
    match first_error {
        Some(e) => Err(e),
        None if failed => Err(Error::other(
            "some steps could not run because a step they need has never completed",
            Some("run `kiln up` without --only first".to_string()),
        )),
        None => Ok(summary),
    }
}

/// Fingerprint (now that dependencies are done), run with retries, check, write the receipt.
fn run_one(
    step: &Step,
    deps: BTreeMap<String, String>,
    forced: bool,
    state: &StateDir,
    ctx: &StepContext,
    reporter: &dyn Reporter,
) -> (Result<Outcome>, Option<String>) {
    let fp = match fingerprint::compute(step, deps, ctx.memo) {
        Ok(fp) => fp,
        Err(e) => return (Err(e), None),
    };
    let digest = Some(fp.digest.clone());
    if !forced {
        if let Some(r) = state.receipt(&step.id) {
            if explain_change(&r.fingerprint, &fp).is_none()
                && crate::steps::check(step, &mut std::io::sink()).is_ok()
            {
                return (Ok(Outcome::UpToDate), digest);
            }
        }
    }
    let log_path = state.log_path(&step.id);
    let result = (|| {
        // The old receipt no longer describes what is on disk once the step starts again.
        state.remove_receipt(&step.id)?;
        create_dir(log_path.parent().expect("logs live in a directory"))?;
        let mut log = File::create(&log_path)
            .map_err(|e| Error::io(format!("cannot create {}", log_path.display()), e))?;
        let started = Instant::now();
        let mut attempt = 1;
        loop {
            reporter.step_started(&step.id, step.kind.name(), attempt);
            let outcome = crate::steps::execute(step, ctx, &mut log, &mut |line| {
                reporter.step_output(&step.id, line)
            })
            .and_then(|_| crate::steps::check(step, &mut log));
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
        })?;
        Ok(Outcome::Ran)
    })();
    if let Err(e) = &result {
        // The step log tells the whole story, the failure included (and its OS cause).
        if let Ok(mut log) = std::fs::OpenOptions::new().append(true).open(&log_path) {
            use std::io::Write;
            let _ = writeln!(log, "error: {}", e.with_causes());
        }
    }
    let result = result.map_err(|e| with_log(e, &step.id, &log_path));
    (result, digest)
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
