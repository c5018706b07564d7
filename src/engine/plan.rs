//! The plan: for every step, fresh / stale (and why) / skipped, computed without running anything.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::fingerprint::{self, explain_change, Fingerprint};
use super::state::{Indexed, StateDir};
use crate::diagnostic::did_you_mean;
use crate::error::{Error, Result};
use crate::hash::HashMemo;
use crate::host::Facts;
use crate::recipe::{graph, Check, Recipe, Step};

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
    /// For a stale step: the step-cache entry (its short id) a restore would serve it from,
    /// instead of running it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restore_entry: Option<String>,
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

/// Compute the plan of `recipe` against the receipts in `state`: reads receipts and inputs,
/// writes nothing (the caller records what the plan found: [`record`](super::fresh::record)).
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
            restore_entry: None,
        };
        if let Some(why) = skipped_by_when(recipe, step, facts) {
            planned.status = Status::Skipped(why);
            digests.insert(&step.id, "skipped".into());
            out.push(planned);
            continue;
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
    if out
        .iter()
        .any(|p| matches!(p.status, Status::Stale(_)) && !p.forced)
    {
        find_restores(recipe, state, &mut out, memo);
    }
    Ok(Plan {
        recipe: recipe.name.clone(),
        steps: out,
    })
}

/// Why `step` does not run on this host: its `when` is false (`var.X` read from the recipe's
/// vars, any other key a host fact). None: it has no `when`, or its `when` holds.
pub(crate) fn skipped_by_when(recipe: &Recipe, step: &Step, facts: &Facts) -> Option<String> {
    let w = step.when.as_ref()?;
    let lookup = |key: &str| -> Option<String> {
        match key.strip_prefix("var.") {
            Some(v) => recipe.vars.get(v).cloned(),
            None => facts.get(key),
        }
    };
    (!w.expr.eval(&lookup)).then(|| format!("`when = \"{}\"` is false on this host", w.text))
}

/// Mark each stale step (not forced) whose step-cache entry is here with that entry: the run
/// restores it instead of running it. The keys follow the run's: a fresh step's is its
/// receipt's, a stale step's is computed now, one unknown leaves its dependents uncached.
fn find_restores(recipe: &Recipe, state: &StateDir, steps: &mut [PlannedStep], memo: &HashMemo) {
    let mut keys: BTreeMap<String, Option<String>> = BTreeMap::new();
    for (step, planned) in recipe.steps.iter().zip(steps.iter_mut()) {
        let key = match &planned.status {
            Status::Skipped(_) => Some("skipped".to_string()),
            Status::Fresh | Status::NotSelected => {
                state.receipt(&step.id).and_then(|r| r.cache_key)
            }
            Status::Stale(_) => {
                let deps: Option<BTreeMap<String, String>> = step
                    .needs
                    .iter()
                    .map(|d| Some((d.clone(), keys.get(d).cloned().flatten()?)))
                    .collect();
                let id = super::restore::planned_key(step, recipe, deps, &state.paths, memo);
                if !planned.forced {
                    planned.restore_entry = id
                        .as_deref()
                        .filter(|id| super::restore::held(&state.paths, step, id))
                        .map(|id| crate::cache::steps::short(id).to_string());
                }
                id
            }
        };
        keys.insert(step.id.clone(), key);
    }
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    use super::*;

    /// Every file under `dir` with its length and mtime.
    fn tree(dir: &Path) -> BTreeMap<PathBuf, (u64, std::time::SystemTime)> {
        let mut out = BTreeMap::new();
        let Ok(entries) = std::fs::read_dir(dir) else {
            return out;
        };
        for e in entries.flatten() {
            let p = e.path();
            let m = e.metadata().unwrap();
            if m.is_dir() {
                out.extend(tree(&p));
            } else {
                out.insert(p, (m.len(), m.modified().unwrap()));
            }
        }
        out
    }

    #[test]
    fn planning_writes_nothing_and_record_writes_the_fresh_record_and_index() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("r.toml");
        std::fs::write(
            &file,
            "[recipe]\nname = \"pure\"\n\n[[step]]\nid = \"a\"\nkind = \"run\"\ncmd = [\"true\"]\nwhen = \"os == 'nowhere'\"\n",
        )
        .unwrap();
        let paths = crate::paths::StatePaths::new(dir.path().join("state"), None);
        let facts = Facts::new();
        let opts = crate::recipe::LoadOptions {
            overrides: &[],
            facts: &facts,
            paths: &paths,
        };
        let recipe = crate::recipe::load(Some(file.to_str().unwrap()), &opts).unwrap();
        let state = StateDir::new(&paths, &recipe.name);
        let memo = HashMemo::load(&state.memo_path());
        let sel = Selection::default();
        let before = tree(dir.path());
        let planned = plan(&recipe, &state, &facts, &sel, &memo).unwrap();
        assert!(matches!(planned.steps[0].status, Status::Skipped(_)));
        assert_eq!(tree(dir.path()), before, "plan wrote files");
        crate::engine::fresh::record(&recipe, &planned, &state, &facts, &sel, &memo);
        assert_ne!(
            tree(dir.path()),
            before,
            "record wrote the index and fresh record"
        );
    }
}
