//! `kiln up`: plan, check the host tools the recipe needs, run every stale step, then the
//! pipeline (serve, prove, bench, report). Any failure after the recipe loaded is also written to
//! the report, so that report.json always tells how the last run ended.

use super::{show, Settings};
use crate::cli::UpArgs;
use crate::engine::{self, state::StateDir, ExecOptions, Selection};
use crate::error::{Error, Result};
use crate::hash::HashMemo;
use crate::pipeline::{self, AbOptions, BenchOptions, UpOptions};
use crate::recipe::Recipe;
use crate::steps::StepContext;

pub(super) fn run(settings: &Settings, args: &UpArgs) -> Result<u8> {
    let spec = settings.recipe_spec(&args.recipe)?;
    let plain =
        !args.dry_run && args.only.is_empty() && args.from.is_none() && args.force.is_empty();
    if plain {
        // Serving needs the recipe; a recipe with profiles goes on to serve unless --no-serve.
        if let Some(fresh) = settings.fresh_plan(&spec, |s| !s.profiles || args.no_serve) {
            return no_op(settings, &fresh.plan, args.json);
        }
    }
    let recipe = settings.load(&spec)?;
    let state = StateDir::of(&settings.paths, &recipe);
    let selection = Selection {
        only: args.only.clone(),
        from: args.from.clone(),
        force: args.force.clone(),
    };
    if args.dry_run {
        let memo = HashMemo::load(&state.memo_path());
        let plan = engine::plan(&recipe, &state, &settings.facts, &selection, &memo)?;
        engine::fresh::record(&recipe, &plan, &state, &settings.facts, &selection, &memo);
        super::plan::show(settings, &recipe, &plan, true);
        // The same answer the run would give: its preflights run (nothing else does), and where
        // they refuse, the dry run exits non-zero with their error.
        let reporter = super::reporter(args.json);
        let mut stage = "preflight";
        preflights(
            settings,
            args,
            &recipe,
            &plan,
            reporter.as_ref(),
            &mut stage,
        )?;
        return Ok(0);
    }
    let mut stage = "steps";
    let result = match provision(settings, args, &recipe, &state, &selection, &mut stage) {
        Ok(true) => {
            stage = "serve";
            serve_and_prove(settings, &recipe, args)
        }
        Ok(false) => {
            // A run of steps only ends with what it proved and where its evidence is.
            for line in pipeline::proved(settings.session(&recipe)) {
                crate::report::current().note(&line);
            }
            pipeline::record_steps_only(settings.session(&recipe), args.strict);
            Ok(0)
        }
        Err(e) => Err(e),
    };
    if let Err(e) = &result {
        // Another run holds the state (its report is its own); a finding wrote its report.
        if !matches!(e, Error::Locked { .. } | Error::Finding { .. }) {
            let kept = pipeline::record_failure(settings.session(&recipe), stage, e, args.strict);
            say_kept(kept.as_ref());
        }
    }
    // With --json, commands::finish ends the stream with `error` (when it failed, at any stage)
    // and `outcome`: a run that fails after its steps never ends on their `run_finished`.
    result
}

/// Say where the last good report is, after a failed run wrote its own.
fn say_kept(kept: Option<&std::path::PathBuf>) {
    if let Some(prev) = kept {
        crate::report::current().note(&format!(
            "the last good report is kept as {}",
            prev.display()
        ));
    }
}

/// A re-run with nothing to do, known from the fresh record without loading the recipe: the
/// lines a full plan and run print, under the run lock (a run in progress still says so).
fn no_op(settings: &Settings, plan: &engine::Plan, json: bool) -> Result<u8> {
    let state = StateDir::new(&settings.paths, &plan.recipe);
    let _lock = state.hold_lock()?;
    engine::report_fresh(plan, super::reporter(json).as_ref());
    Ok(0)
}

/// The preflights and the steps; `Ok(true)` when the run goes on to serve.
fn provision(
    settings: &Settings,
    args: &UpArgs,
    recipe: &Recipe,
    state: &StateDir,
    selection: &Selection,
    stage: &mut &'static str,
) -> Result<bool> {
    let lock = state.lock()?;
    let memo = HashMemo::load(&state.memo_path());
    let plan = engine::plan(recipe, state, &settings.facts, selection, &memo)?;
    engine::fresh::record(recipe, &plan, state, &settings.facts, selection, &memo);
    let reporter = super::reporter(args.json);
    for w in crate::recipe::cuda_arch::family_conflicts(recipe) {
        reporter.warning(&w);
    }
    preflights(settings, args, recipe, &plan, reporter.as_ref(), stage)?;
    // Only runs that start processes need the watchdog (a no-op re-run stays a few stats).
    let watchdog = match plan.count("stale") {
        0 => None,
        _ => Some(crate::process::watchdog::start(
            &settings.paths.running(),
            crate::process::watchdog::Leftovers::End,
        )?),
    };
    for stale in watchdog.iter().flat_map(|w| &w.stale) {
        reporter.note(&format!("stale process record removed: {stale}"));
    }
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get));
    let mem_budget = crate::host::available_memory_bytes().unwrap_or(u64::MAX);
    let ctx = StepContext {
        memo: &memo,
        facts: &settings.facts,
        paths: &settings.paths,
        progress: &(),
    };
    engine::execute(
        recipe,
        &plan,
        state,
        &ctx,
        reporter.as_ref(),
        &ExecOptions { jobs, mem_budget },
    )?;
    drop(lock);
    Ok(serves(args, recipe))
}

/// Whether this `kiln up` serves after its steps (not `--no-serve`, `--only`, or a recipe
/// without profiles).
fn serves(args: &UpArgs, recipe: &Recipe) -> bool {
    !(args.no_serve || recipe.profiles.is_empty() || !args.only.is_empty())
}

/// The pipeline after the steps: A/B, serve (left running), verdicts, bench, report files; a
/// failure or (with `--strict`) a warning ends as an error that says why.
fn serve_and_prove(settings: &Settings, recipe: &Recipe, args: &UpArgs) -> Result<u8> {
    crate::process::catch_interrupts();
    let opts = UpOptions {
        profile: args.profile.as_deref(),
        ab: AbOptions::default(),
        bench: BenchOptions::sized(args.bench_runs, args.bench_max_tokens),
        strict: args.strict,
    };
    // Everything goes through the reporter: with --json, stdout is one typed event per line.
    let mut narrate = show::narrator();
    let mut report = pipeline::up(
        settings.session(recipe),
        &opts,
        &mut narrate.narrator(),
        &mut |shown| show::shown(&shown),
    )?;
    let profile = report.served.as_ref().map(|s| s.profile.clone());
    report.header = Some(pipeline::Header::of(
        settings.session(recipe),
        profile.as_deref(),
    ));
    let files = report.write(&settings.paths)?;
    if !report.outcome.ok {
        say_kept(files.previous.as_ref());
    }
    show::report_files(&files);
    if let Some(s) = &report.served {
        show::left_running(&show::recipe_named(&args.recipe, recipe), s);
    }
    Error::finding(report.exit_code, || {
        (
            report.outcome.error.clone().unwrap_or_default(),
            report.outcome.hint.clone(),
        )
    })
}

/// The checks before the first step, the same for a run and a dry run: the host tools and the
/// doctor gate (when steps will run), then the launch preflight.
fn preflights(
    settings: &Settings,
    args: &UpArgs,
    recipe: &Recipe,
    plan: &engine::Plan,
    reporter: &dyn crate::report::Reporter,
    stage: &mut &'static str,
) -> Result<()> {
    if plan.count("stale") > 0 {
        *stage = "preflight";
        super::preflight::host_tools(recipe, plan, reporter)?;
        let gpu_stack = recipe
            .steps
            .iter()
            // A toolkit without a driver floor is installed to compile only (no GPU needed).
            .any(
                |s| matches!(&s.kind, crate::recipe::StepKind::Cuda(c) if c.driver_floor.is_some()),
            );
        if gpu_stack && !args.no_doctor {
            // Provisioning only (an image build on a machine without a GPU), a missing driver
            // stops nothing a toolkit from PyPI installs; a runfile toolkit needs one.
            let runfile = recipe.steps.iter().any(|s| {
                matches!(&s.kind, crate::recipe::StepKind::Cuda(c)
                    if c.driver_floor.is_some()
                        && matches!(c.source, crate::recipe::CudaSource::Runfile { .. }))
            });
            super::preflight::run(settings, recipe, serves(args, recipe) || runfile, reporter)?;
        }
        *stage = "steps";
    }
    super::preflight::launch_up(settings, args, recipe, reporter, stage)
}
