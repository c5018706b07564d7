//! The plan: for every step, fresh / stale (and why) / skipped, computed without running anything.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::fingerprint::{self, explain_change, Fingerprint};
use super::state::{Indexed, StateDir};
use crate::diagnostic::did_you_mean;
use crate::error::{Error, Result};
use crate::hash::HashMemo;
use crate::host::Facts;
use crate::recipe::{graph, Check, Recipe};

/// Which steps a run covers (`--only`, `--from`, `--force`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Selection {
    pub only: Vec<String>,
    pub from: Option<String>,
    pub force: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", content = "reason", rename_all = "snake_case")]
pub(crate) enum Status {
    Fresh,
    Stale(String),
    Skipped(String),
    /// Left out by `--only`.
    NotSelected,
}

impl Status {
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Status::Fresh => "fresh",
            Status::Stale(_) => "stale",
            Status::Skipped(_) => "skipped",
            Status::NotSelected => "not selected",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct PlannedStep {
    pub id: String,
    pub kind: &'static str,
    #[serde(flatten)]
    pub status: Status,
    pub needs: Vec<String>,
    /// Whether the step must run even if its fingerprint matches (`--force`, `--from`).
    pub forced: bool,
    /// Compile parallelism this box gives the step now (`mem_per_job`): `MAX_JOBS`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_jobs: Option<usize>,
    /// The fingerprint digest (absent for skipped steps).
    pub digest: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Plan {
    pub recipe: String,
    pub steps: Vec<PlannedStep>,
}

impl Plan {
    pub(crate) fn count(&self, label: &str) -> usize {
        self.steps
            .iter()
            .filter(|s| s.status.label() == label)
            .count()
    }
}

/// Compute the plan of `recipe` against the receipts in `state`.
pub(crate) fn plan(
    recipe: &Recipe,
    state: &StateDir,
    facts: &Facts,
    sel: &Selection,
    memo: &HashMemo,
) -> Result<Plan> {
    let ids: Vec<&str> = recipe.steps.iter().map(|s| s.id.as_str()).collect();
    for name in sel.only.iter().chain(&sel.force).chain(&sel.from) {
        if !ids.contains(&name.as_str()) {
            let hint = did_you_mean(name, ids.iter().copied()).map_or(
                format!("steps of `{}`: {}", recipe.name, ids.join(", ")),
                |b| format!("did you mean `{b}`?"),
            );
            return Err(Error::usage(
                format!("no step `{name}` in recipe `{}`", recipe.name),
                Some(hint),
            ));
        }
    }
    let needs: BTreeMap<&str, Vec<&str>> = recipe
        .steps
        .iter()
        .map(|s| (s.id.as_str(), s.needs.iter().map(String::as_str).collect()))
        .collect();
    let from: BTreeSet<&str> = sel
        .from
        .as_deref()
        .map(|f| graph::downstream(f, &needs))
        .unwrap_or_default();
    let lookup = |key: &str| -> Option<String> {
        match key.strip_prefix("var.") {
            Some(v) => recipe.vars.get(v).cloned(),
            None => facts.get(key),
        }
    };

    let mut digests: BTreeMap<&str, String> = BTreeMap::new();
    let mut out = Vec::with_capacity(recipe.steps.len());
    for step in &recipe.steps {
        let deps: BTreeMap<String, String> = step
            .needs
            .iter()
            .map(|d| {
                (
                    d.clone(),
                    digests.get(d.as_str()).cloned().unwrap_or_default(),
                )
            })
            .collect();
        let forced = sel.force.contains(&step.id) || from.contains(step.id.as_str());
        let mut planned = PlannedStep {
            id: step.id.clone(),
            kind: step.kind.name(),
            status: Status::Fresh,
            needs: step.needs.clone(),
            forced,
            max_jobs: crate::steps::max_jobs(step),
            digest: None,
        };
        if let Some(w) = &step.when {
            if !w.expr.eval(&lookup) {
                planned.status =
                    Status::Skipped(format!("`when = \"{}\"` is false on this host", w.text));
                digests.insert(&step.id, "skipped".into());
                out.push(planned);
                continue;
            }
        }
        let fp = fingerprint::compute(step, deps, memo)?;
        digests.insert(&step.id, fp.digest.clone());
        planned.status = if !sel.only.is_empty() && !sel.only.contains(&step.id) {
            Status::NotSelected
        } else {
            staleness(state, &step.id, step.check.as_ref(), &fp, forced, sel)
        };
        planned.digest = Some(fp.digest);
        out.push(planned);
    }
    state.refresh_index(recipe.steps.iter().map(|s| s.id.as_str()));
    let plan = Plan {
        recipe: recipe.name.clone(),
        steps: out,
    };
    let all_fresh = plan
        .steps
        .iter()
        .all(|s| matches!(s.status, Status::Fresh | Status::Skipped(_)));
    if all_fresh && sel.only.is_empty() && sel.from.is_none() && sel.force.is_empty() {
        super::fresh::save(recipe, &plan, state, facts, memo);
    }
    Ok(plan)
}

fn staleness(
    state: &StateDir,
    id: &str,
    check: Option<&Check>,
    fp: &Fingerprint,
    forced: bool,
    sel: &Selection,
) -> Status {
    if forced {
        let why = if sel.force.iter().any(|f| f == id) {
            "--force"
        } else {
            "--from"
        };
        return Status::Stale(format!("forced by {why}"));
    }
    match state.indexed(id, &fp.digest) {
        Some(Indexed::Matches) => {}
        Some(Indexed::NoReceipt) => return Status::Stale("never completed".into()),
        None => {
            let Some(receipt) = state.receipt(id) else {
                return Status::Stale("never completed".into());
            };
            if let Some(why) = explain_change(&receipt.fingerprint, fp) {
                return Status::Stale(why);
            }
        }
    }
    if let Some(Check::Paths(paths)) = check {
        if let Some(p) = paths.iter().find(|p| !p.exists()) {
            return Status::Stale(format!("check path {} is missing", p.display()));
        }
    }
    Status::Fresh
}
