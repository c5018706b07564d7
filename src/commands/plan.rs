//! `kiln plan`: every step's status, nothing run.

use std::fmt::Write;

use super::Settings;
use crate::cli::PlanArgs;
use crate::engine::{self, state::StateDir, Plan, Selection, Status};
use crate::error::Result;
use crate::hash::HashMemo;
use crate::recipe::Recipe;
use crate::report::Block;

pub(super) fn run(settings: &Settings, args: &PlanArgs) -> Result<u8> {
    let spec = settings.recipe_spec(&args.recipe)?;
    // Nothing changed since every step was fresh: the recorded plan, unless the table has host
    // tools to show (they are checked now, from the recipe; JSON does not show them).
    if let Some(fresh) = settings.fresh_plan(&spec, |s| args.json || !s.requires) {
        let origin = crate::recipe::shown_origin(&fresh.origin, &settings.paths.shipped());
        print_plan(&fresh.plan, &origin, "");
        return Ok(0);
    }
    let recipe = settings.load(&spec)?;
    let state = StateDir::of(&settings.paths, &recipe);
    let memo = HashMemo::load(&state.memo_path());
    let selection = Selection::default();
    let plan = engine::plan(&recipe, &state, &settings.facts, &selection, &memo)?;
    engine::fresh::record(&recipe, &plan, &state, &settings.facts, &selection, &memo);
    let _ = memo.save();
    let requires = if args.json {
        String::new()
    } else {
        render_requires(&recipe, &plan) + &crate::recipe::cuda_arch::render(&recipe)
    };
    let origin = crate::recipe::shown_origin(&recipe.origin, &settings.paths.shipped());
    print_plan(&plan, &origin, &requires);
    Ok(0)
}

/// The plan through the reporter: its table for a human, a `plan` event in JSON lines.
fn print_plan(plan: &Plan, origin: &str, requires: &str) {
    let text = format!("{}{requires}", render(plan, origin));
    crate::report::current().result(&Block::new("plan", text, plan));
}

/// `kiln up --dry-run`: the plan, the host tools, and how many steps would run.
pub(super) fn show(settings: &Settings, recipe: &Recipe, plan: &Plan, dry_run: bool) {
    let json = crate::report::output().json;
    let requires = if json {
        String::new()
    } else {
        render_requires(recipe, plan)
    };
    let origin = crate::recipe::shown_origin(&recipe.origin, &settings.paths.shipped());
    let mut text = format!("{}{requires}", render(plan, &origin));
    if dry_run {
        let restored = plan
            .steps
            .iter()
            .filter(|s| s.restore_entry.is_some())
            .count();
        let run = plan.count("stale") - restored;
        let _ = match restored {
            0 => writeln!(
                text,
                "dry run: {} would run",
                crate::report::count(run, "step")
            ),
            _ => writeln!(
                text,
                "dry run: {} would run, {} would be restored from the step cache",
                crate::report::count(run, "step"),
                restored
            ),
        };
    }
    crate::report::current().result(&Block::new("plan", text, plan));
}

/// The host tools the recipe and its steps (all but those `when` skips) require, each checked
/// now: `✓ c++  /usr/bin/c++ 12.2.0  (the recipe)`. Empty when nothing is required.
pub(super) fn render_requires(recipe: &Recipe, plan: &Plan) -> String {
    let (checked, hint) =
        super::preflight::check_needed(recipe, plan, |s| !matches!(s, Status::Skipped(_)));
    if checked.is_empty() {
        return String::new();
    }
    let mut out =
        String::from("requires (host tools, checked by `kiln up` before its first step):\n");
    let reqs: Vec<String> = checked.iter().map(|c| c.needed.req.to_string()).collect();
    let width = crate::columns::width(reqs.iter().map(String::as_str), 0);
    for (c, req) in checked.iter().zip(&reqs) {
        let _ = writeln!(
            out,
            "  {} {:<width$}  {}  ({})",
            if c.ok { "✓" } else { "✗" },
            crate::columns::cell(req, width),
            c.what,
            c.needed.by.join(", ")
        );
    }
    if let Some(hint) = hint {
        let _ = writeln!(out, "  hint: {hint}");
    }
    out
}

/// The human plan table.
pub(super) fn render(plan: &Plan, origin: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "recipe {} ({origin}): {}: {} stale, {} fresh, {} skipped",
        plan.recipe,
        crate::report::count(plan.steps.len(), "step"),
        plan.count("stale"),
        plan.count("fresh"),
        plan.count("skipped"),
    );
    let width = crate::columns::width(plan.steps.iter().map(|s| s.id.as_str()), 0);
    for s in &plan.steps {
        let why = match &s.status {
            Status::Stale(r) | Status::Skipped(r) => r.as_str(),
            Status::Fresh | Status::NotSelected => "",
        };
        let jobs = s
            .max_jobs
            .map_or(String::new(), |j| format!(" [MAX_JOBS={j}]"));
        let restore = s.restore_entry.as_ref().map_or(String::new(), |e| {
            format!("; restore from cache (entry {e})")
        });
        let line = format!(
            "  {:<8} {:<width$}  {:<8} {why}{restore}{jobs}",
            s.status.label(),
            crate::columns::cell(&s.id, width),
            s.kind
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}
