//! `kiln tune`: flags to a search. The variants, the cost estimate, the greedy reference, then
//! `tune::search` with the real evaluator (`tune::evaluate`); the ranked table, tune JSON, SVG
//! and the winner's profile file.

use std::time::Instant;

use serde::Serialize;

use super::{show, Settings};
use crate::cli::TuneArgs;
use crate::error::{Error, Result};
use crate::pipeline;
use crate::report::Block;
use crate::tune::estimate::{Budget, Estimate, History};
use crate::tune::evaluate::{Evaluator, LaunchRecord};
use crate::tune::results::{Results, Search};
use crate::tune::{self, knobs, render, Method, Rung};

pub(super) fn run(settings: &Settings, args: &TuneArgs) -> Result<u8> {
    crate::process::catch_interrupts();
    let axes = tune::parse_axes(&args.vary)?;
    let budget = Budget::from_flag(args.budget.as_deref())?;
    let recipe = settings.load_recipe(&args.recipe)?;
    let chosen = pipeline::Variant::pick(&recipe, Some(&args.profile))?;
    let (name, profile) = (chosen.name.to_string(), chosen.profile);
    // Refused before any launch: the results and winner files are named after it.
    crate::tune::results::file_stem(&name)?;
    let api = crate::serve::profile_api(profile);
    let request = knobs::classify(&recipe, api, &axes)?;
    let method = Method::parse(&args.method);
    if args.launches > 1 && method != Method::Grid {
        return Err(Error::usage(
            format!("`--launches {}` relaunches the grid's variants, not the {method:?}'s", args.launches),
            Some("pass `--method grid` with it (the race launches each variant once by design; halving relaunches its survivors for each rung)".into()),
        ));
    }
    let stop = crate::process::interrupted;
    let (variants, keys) = tune::plan(&axes, budget.and_then(Budget::variants), &request, &stop)?;
    let full = Rung {
        warmup: args.warmup,
        runs: args.runs,
        max_tokens: args.max_tokens,
    };
    let dir = settings.paths.tune(&recipe.name);
    let history = History::read(
        &dir,
        &name,
        &settings.paths.reports(&recipe.name).join("report.json"),
    );
    for w in &history.warnings {
        show::say(&format!("warning: {w}"));
    }
    let estimate = Estimate::plan(method, variants.len(), keys, full, args.ab_tokens, &history)
        .relaunched(args.launches);
    let what = format!("`{name}` of {} ({method:?})", recipe.name);
    for line in estimate.announcement(&what, budget, api, &request) {
        show::say(&line);
    }
    if args.dry_run {
        let names = tune::shown_all(&variants, &stop)?;
        let text = format!("{}\n{}", names.join("\n"), estimate.line());
        let event = PlanEvent {
            recipe: &recipe.name,
            profile: &name,
            method,
            variants: &variants,
            launches: estimate.launches,
            estimate: estimate.line(),
            estimated_wall_s: estimate.wall().map(|d| d.as_secs_f64()),
        };
        crate::report::current().result(&Block::new("tune_plan", text, &event));
        return Ok(0);
    }
    // Before any launch (a dry run launches nothing).
    super::preflight::launch(settings, &args.recipe, &recipe, &[Some(&args.profile)])?;
    let against = args.against.clone().or_else(|| profile.baseline.clone());
    let reference = greedy_reference(settings, &recipe, against.as_deref(), &name, args.ab_tokens)?;
    // Variants re-load the recipe by name: pin the default one so it is not re-announced.
    let mut recipe_args = args.recipe.clone();
    recipe_args
        .recipe
        .get_or_insert_with(|| recipe.name.clone());
    let load = |sets: &[String]| {
        let mut a = recipe_args.clone();
        a.set.extend(sets.iter().cloned());
        settings.load_recipe(&a)
    };
    let started = Instant::now();
    let search = Search {
        recipe: &recipe.name,
        profile: &name,
        method,
        rungs: tune::rungs(method, variants.len(), full),
        launches_each: args.launches,
        estimated_wall_s: estimate.wall().map(|d| d.as_secs_f64()),
        per_request: &request,
        started,
    };
    let mut checkpoint = save_so_far(&search, &dir);
    let mut say = show::say;
    let mut eval = Evaluator::new(
        &load,
        &settings.paths,
        &settings.facts,
        &name,
        reference.as_deref(),
        args.ab_tokens,
        request.clone(),
        &mut say,
    );
    eval.allow_two = !args.one_server && recipe.vars.contains_key("port");
    eval.on_checkpoint = Some(&mut checkpoint);
    if let Some(Budget::Time(b)) = budget {
        // `--budget 18446744073709551615s` saturates: no deadline past what an Instant holds.
        eval.deadline = started.checked_add(b);
    }
    let ranked = tune::search_launching(method, variants, &request, full, args.launches, &mut eval);
    let launches = eval.launches();
    let records = std::mem::take(&mut eval.records);
    drop(eval);
    // A search cut short names no winner; the launches that ended are in the results file
    // (`"complete": false`).
    if crate::process::interrupted() {
        let so_far = dir.join(format!("{name}.json"));
        let kept = if so_far.exists() {
            format!("the launches that ended are in {}; ", so_far.display())
        } else {
            String::new()
        };
        return Err(Error::other(
            format!("`kiln tune` interrupted after {launches} launch(es)"),
            Some(format!("{kept}run it again to search from the start")),
        ));
    }
    let results = search.results(true, &records, &ranked);
    conclude(
        &results,
        &recipe,
        against.as_deref(),
        &load,
        &dir,
        &estimate,
    )
}

/// What writes the results so far as each launch ends: a later failure (a crash, a kill, a full
/// disk at the end) never loses the launches already paid for. A write that fails is said once.
fn save_so_far<'a>(
    search: &'a Search,
    dir: &'a std::path::Path,
) -> impl FnMut(&[tune::Entry], &[LaunchRecord]) + 'a {
    let title = format!(
        "kiln tune {} `{}`: tok/s per variant",
        search.recipe, search.profile
    );
    let mut warned = false;
    move |entries, records| {
        let ranked = tune::rank(entries.to_vec());
        let so_far = search.results(false, records, &ranked);
        if let Err(e) = so_far.write(dir, &render::svg(&title, &ranked)) {
            if !std::mem::replace(&mut warned, true) {
                show::say(&format!("warning: the results so far are not saved: {e}"));
            }
        }
    }
}

/// The ranked table, the results files and the winner's profile file.
fn conclude(
    results: &Results,
    recipe: &crate::recipe::Recipe,
    against: Option<&str>,
    load: &tune::evaluate::Loader,
    dir: &std::path::Path,
    estimate: &Estimate,
) -> Result<u8> {
    let (ranked, name, method) = (results.entries, results.profile, results.method);
    let text = format!(
        "{}{} launches in {:.1} s ({method:?}; estimated {})",
        render::table(ranked),
        results.launches,
        results.wall_s,
        estimate
            .wall()
            .map_or("-".into(), tune::estimate::human_range)
    );
    // Every variant with its figures, verdicts and why it is out, ranked (the winner first).
    crate::report::current().result(&Block::new("tune_ranked", text, results));
    let title = format!("kiln tune {} `{name}`: tok/s per variant", recipe.name);
    let (json_path, svg_path) = results.write(dir, &render::svg(&title, ranked))?;
    show::say(&format!(
        "results {} and {}",
        json_path.display(),
        svg_path.display()
    ));
    let Some(best) = ranked
        .first()
        .filter(|e| e.disqualified.is_none() && e.last().is_some())
    else {
        return Err(Error::other(
            format!("no variant of `{name}` qualified: each one fell back, crashed, was not proven active or gave wrong output"),
            Some(format!("the reasons are in the table above and in {}", json_path.display())),
        ));
    };
    for line in best
        .evidence
        .iter()
        .filter(|l| l.starts_with("overlap check"))
    {
        show::say(line);
    }
    let margin = tune::margin::margin(ranked);
    let winner = render::Winner {
        recipe,
        name,
        best,
        against,
        method,
        request: results.per_request,
        margin: margin.as_ref(),
    };
    let (path, m) = winner.write(load, dir)?;
    let mut text = format!(
        "winner: {} ({:.1} tok/s): {}",
        best.variant.shown(),
        m,
        path.display()
    );
    if let Some(margin) = &margin {
        text = format!("{text}\n{}", margin.line());
    }
    let event = WinnerEvent {
        profile: name,
        variant: &best.variant,
        tok_s: m,
        file: &path,
        margin: margin.as_ref(),
    };
    crate::report::current().result(&Block::new("tune_winner", text, &event));
    Ok(0)
}

/// The reference profile's greedy outputs, served once (none without a baseline).
fn greedy_reference(
    settings: &Settings,
    recipe: &crate::recipe::Recipe,
    against: Option<&str>,
    name: &str,
    ab_tokens: u32,
) -> Result<Option<Vec<crate::bench::ab::Output>>> {
    let Some(b) = against else {
        show::say(&format!(
            "profile `{name}` names no baseline: no greedy A/B (pass --against)"
        ));
        return Ok(None);
    };
    show::say(&format!("greedy reference from profile `{b}`"));
    let base = pipeline::Variant::pick(recipe, Some(b))?;
    let s = settings.session(recipe);
    pipeline::greedy_outputs(s, base, ab_tokens, &mut show::say).map(Some)
}

/// `kiln tune --dry-run`: what would run (a `tune_plan` event).
#[derive(Serialize)]
struct PlanEvent<'a> {
    recipe: &'a str,
    profile: &'a str,
    method: Method,
    variants: &'a [tune::Variant],
    launches: usize,
    estimate: String,
    estimated_wall_s: Option<f64>,
}

/// The winner and its profile file (a `tune_winner` event).
#[derive(Serialize)]
struct WinnerEvent<'a> {
    profile: &'a str,
    variant: &'a tune::Variant,
    tok_s: f64,
    file: &'a std::path::Path,
    /// The winner against the runner-up on the same requests (none in a race or halving: their
    /// losers were ruled out on shorter runs, each with its reason).
    margin: Option<&'a tune::margin::Margin>,
}
