//! `kiln up`: plan, then run every stale step.

use super::{show, Settings};
use crate::cli::UpArgs;
use crate::engine::{self, state::StateDir, ExecOptions, Selection};
use crate::error::Result;
use crate::hash::HashMemo;
use crate::pipeline::{self, AbOptions, BenchOptions, Narrator, Shown, UpOptions};
use crate::recipe::Recipe;
use crate::steps::StepContext;

pub(super) fn run(settings: &Settings, args: &UpArgs) -> Result<u8> {
    let recipe = settings.load_recipe(&args.recipe)?;
    let state = StateDir::new(&settings.paths, &recipe.name);
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
            println!("dry run: {} step(s) would run", plan.count("stale"));
        }
        return Ok(0);
    }
    let lock = state.lock()?;
    let memo = HashMemo::load(&state.memo_path());
    let plan = engine::plan(&recipe, &state, &settings.facts, &selection, &memo)?;
    let reporter = super::reporter(args.json);
    let gpu_stack = recipe
        .steps
        .iter()
        .any(|s| matches!(s.kind, crate::recipe::StepKind::Cuda(_)));
    if gpu_stack && !args.no_doctor && plan.count("stale") > 0 {
        super::preflight::run(settings, &recipe, reporter.as_ref())?;
    }
    // Only runs that start processes need the watchdog (a no-op re-run stays a few stats).
    let _watchdog = match plan.count("stale") {
        0 => None,
        _ => Some(crate::process::watchdog::start(&settings.paths.running())?),
    };
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get));
    let mem_budget = crate::host::available_memory_bytes().unwrap_or(u64::MAX);
    let ctx = StepContext {
        memo: &memo,
        facts: &settings.facts,
        paths: &settings.paths,
    };
    engine::execute(
        &recipe,
        &plan,
        &state,
        &ctx,
        reporter.as_ref(),
        &ExecOptions { jobs, mem_budget },
    )?;
    if args.no_serve || recipe.profiles.is_empty() || !args.only.is_empty() {
        return Ok(0);
    }
    drop(lock);
    serve_and_prove(settings, &recipe, args.profile.as_deref())
}

/// The pipeline after the steps: A/B, serve (left running), verdicts, bench, report files.
fn serve_and_prove(settings: &Settings, recipe: &Recipe, profile: Option<&str>) -> Result<u8> {
    crate::process::catch_interrupts();
    let opts = UpOptions {
        profile,
        ab: AbOptions::default(),
        bench: BenchOptions::default(),
    };
    let mut narrate = Narrator {
        say: &mut show::say,
        progress: &mut |s: &str| eprintln!("{s}"),
        line: &mut |s: &str| println!("{s}"),
    };
    let report = pipeline::up(
        settings.session(recipe),
        &opts,
        &mut narrate,
        &mut |shown| match shown {
            Shown::Ab(c, base, candidate) => print!("{}", c.render(base, candidate)),
            Shown::Verdicts(l, v) => show::verdicts(l, v, false),
            Shown::Bench(b, history) => show::bench(b, history, false),
        },
    )?;
    let files = report.write(&settings.paths)?;
    eprintln!(
        "kiln: report: {} (and {})",
        files.markdown.display(),
        files.html.display()
    );
    if let Some(url) = &report.url {
        eprintln!(
            "kiln: left running at {url} (process group {}); stop it with `kiln serve --stop`",
            report.pid
        );
    }
    Ok(report.exit_code)
}
