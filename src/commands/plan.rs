//! `kiln plan`: every step's status, nothing run.

use std::fmt::Write;

use super::Settings;
use crate::cli::PlanArgs;
use crate::engine::{self, state::StateDir, Plan, Selection, Status};
use crate::error::Result;
use crate::hash::HashMemo;

pub(super) fn run(settings: &Settings, args: &PlanArgs) -> Result<u8> {
    let recipe = settings.load_recipe(&args.recipe)?;
    let state = StateDir::new(&settings.paths, &recipe.name);
    let memo = HashMemo::load(&state.memo_path());
    let plan = engine::plan(
        &recipe,
        &state,
        &settings.facts,
        &Selection::default(),
        &memo,
    )?;
    let _ = memo.save();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&plan).expect("plans serialize")
        );
    } else {
        print!("{}", render(&plan, &recipe.origin));
    }
    Ok(0)
}

/// The human plan table.
pub(super) fn render(plan: &Plan, origin: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "recipe {} ({origin}): {} steps: {} stale, {} fresh, {} skipped",
        plan.recipe,
        plan.steps.len(),
        plan.count("stale"),
        plan.count("fresh"),
        plan.count("skipped"),
    );
    let width = plan.steps.iter().map(|s| s.id.len()).max().unwrap_or(0);
    for s in &plan.steps {
        let why = match &s.status {
            Status::Stale(r) | Status::Skipped(r) => r.as_str(),
            Status::Fresh | Status::NotSelected => "",
        };
        let jobs = s
            .max_jobs
            .map_or(String::new(), |j| format!(" [MAX_JOBS={j}]"));
        let line = format!(
            "  {:<8} {:<width$}  {:<8} {why}{jobs}",
            s.status.label(),
            s.id,
            s.kind
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}
