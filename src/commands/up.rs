//! `kiln up`: plan, check the host tools the recipe needs, run every stale step, then serve,
//! prove and bench (see `up_serve`). Any failure after the recipe loaded is also written to the
//! report, so that report.json always tells how the last run ended.

use super::Settings;
use crate::cli::UpArgs;
use crate::engine::{self, hashing::HashMemo, state::StateDir, ExecOptions, Selection};
use crate::error::{Error, Result};
use crate::recipe::Recipe;
use crate::steps::StepContext;

pub fn run(settings: &Settings, args: &UpArgs) -> Result<u8> {
    let recipe = settings.load_recipe(&args.recipe)?;
    let state = StateDir::new(&settings.state_dir, &recipe.name);
    let selection = Selection {
        only: args.only.clone(),
        from: args.from.clone(),
        force: args.force.clone(),
    };
    if args.dry_run {
        let memo = HashMemo::load(&state.memo_path());
        let plan = engine::plan(&recipe, &state, &settings.facts, &selection, &memo)?;
        if args.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&plan).expect("plans serialize")
            );
        } else {
            print!("{}", super::plan::render(&plan, &recipe.origin));
            print!("{}", super::plan::render_requires(&recipe, &plan));
            println!("dry run: {} step(s) would run", plan.count("stale"));
        }
        return Ok(0);
    }
    let mut stage = "steps";
    let result = provision(settings, args, &recipe, &state, &selection, &mut stage);
    let result = match result {
        Ok(true) => {
            stage = "serve";
            super::up_serve::pipeline(settings, &recipe, args.profile.as_deref(), args.strict)
        }
        Ok(false) => Ok(0),
        Err(e) => Err(e),
    };
    if let Err(e) = &result {
        // Another run holds the state (its report is its own); a finding wrote its report.
        if !matches!(e, Error::Locked { .. } | Error::Finding { .. }) {
            super::up_serve::record_failure(settings, &recipe.name, stage, e);
        }
    }
    result
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
    let reporter = super::reporter(args.json);
    if plan.count("stale") > 0 {
        *stage = "preflight";
        super::preflight::host_tools(recipe, &plan, reporter.as_ref())?;
        let gpu_stack = recipe
            .steps
            .iter()
            .any(|s| matches!(s.kind, crate::recipe::StepKind::Cuda(_)));
        if gpu_stack && !args.no_doctor {
            super::preflight::run(settings, recipe, reporter.as_ref())?;
        }
        *stage = "steps";
    }
    // Only runs that start processes need the watchdog (a no-op re-run stays a few stats).
    let _watchdog = match plan.count("stale") {
        0 => None,
        _ => Some(crate::process::watchdog::start(
            &settings.state_dir.join("running"),
        )?),
    };
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mem_budget = crate::host::available_memory_bytes().unwrap_or(u64::MAX);
    let ctx = StepContext {
        memo: &memo,
        facts: &settings.facts,
        cache_dir: settings.cache_dir.clone(),
        state_dir: settings.state_dir.clone(),
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
    Ok(!(args.no_serve || recipe.profiles.is_empty() || !args.only.is_empty()))
}
