//! The fresh record: a plan that found every step fresh (or skipped by `when`), kept beside the
//! recipe cache entry, so that the next `kiln up` or `kiln plan` with the same command line says
//! "nothing to do" without loading the recipe or computing a fingerprint. A no-op then costs what
//! `make`'s does: a stat per checked path and per input file.
//!
//! The record is trusted only while everything the plan depended on is unchanged:
//! - the recipe, its imports, the host facts they name and the patch sets ([`Inputs`], the
//!   recipe cache's own check);
//! - the host facts `when` conditions read;
//! - the receipts directory's mtime (the receipts index's rule: writing, replacing or removing a
//!   receipt changes it), and the record is not written while that mtime is recent;
//! - each step's input files (every pattern matches the same files, each with the size, mtime,
//!   ctime and inode the hash memo had when it hashed it) and `check` paths (they exist).
//!
//! Anything else is a miss: the plan is computed in full (and recorded again if still all
//! fresh). A torn or unreadable record is a miss too; `KILN_NO_RECIPE_CACHE=1` turns it off
//! with the recipe cache.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::fingerprint::expand_inputs;
use super::index::{dir_stamp, DirStamp};
use super::plan::{PlannedStep, Selection, Status};
use super::state::StateDir;
use super::Plan;
use crate::hash::{FileVersion, HashMemo};
use crate::host::Facts;
use crate::recipe::{Check, Inputs, LoadOptions, Recipe};

const FORMAT: &str = "kiln-fresh 1";

#[derive(Serialize, Deserialize)]
struct Record<'a> {
    #[serde(borrow)]
    format: Cow<'a, str>,
    inputs: Inputs,
    /// (fact, value) of every host fact a `when` condition reads.
    facts: Vec<(String, Option<String>)>,
    receipts: DirStamp,
    recipe: String,
    origin: String,
    /// The recipe has launch profiles: `kiln up` goes on to serve, which needs the recipe.
    profiles: bool,
    /// The recipe or a step requires host tools: `kiln plan` shows them, from the recipe.
    requires: bool,
    #[serde(borrow)]
    steps: Vec<StepRecord<'a>>,
}

#[derive(Serialize, Deserialize)]
struct StepRecord<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow)]
    kind: Cow<'a, str>,
    /// The fingerprint digest; `None` when `when` skipped the step.
    #[serde(borrow)]
    digest: Option<Cow<'a, str>>,
    /// Why `when` skipped it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    skipped: Option<String>,
    #[serde(borrow, default, skip_serializing_if = "Vec::is_empty")]
    needs: Vec<Cow<'a, str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mem_per_job: Option<u64>,
    #[serde(borrow, default, skip_serializing_if = "Vec::is_empty")]
    check: Vec<Cow<'a, str>>,
    /// Each input pattern with the files it matched, in order, and their versions.
    #[serde(borrow, default, skip_serializing_if = "Vec::is_empty")]
    inputs: Vec<(Cow<'a, str>, Matched<'a>)>,
}

/// The files an input pattern matched, with their versions.
type Matched<'a> = Vec<(Cow<'a, str>, FileVersion)>;

/// A plan read back from a fresh record.
pub(crate) struct FreshPlan {
    pub plan: Plan,
    pub origin: String,
}

/// What a command must know of the recipe before it may answer from its record.
pub(crate) struct Shape {
    /// It has launch profiles: `kiln up` goes on to serve, which needs the recipe.
    pub profiles: bool,
    /// It or a step requires host tools: `kiln plan` shows them, checked from the recipe.
    pub requires: bool,
}

fn path_of(slot: &Path) -> PathBuf {
    slot.with_extension("fresh")
}

/// The fresh plan for the recipe cache slot `slot` (see [`crate::recipe::slot_base`]), if the
/// caller `accept`s the recipe's [`Shape`] and nothing the plan depends on changed.
pub(crate) fn lookup(
    slot: &Path,
    opts: &LoadOptions,
    accept: impl FnOnce(&Shape) -> bool,
) -> Option<FreshPlan> {
    let bytes = crate::bounded::read_io(&path_of(slot), crate::bounded::STATE_CAP).ok()?;
    let record: Record = serde_json::from_slice(&bytes).ok()?;
    let shape = Shape {
        profiles: record.profiles,
        requires: record.requires,
    };
    if record.format != FORMAT
        || !accept(&shape)
        || !record.inputs.still_match(opts)
        || record.facts.iter().any(|(k, v)| opts.facts.get(k) != *v)
        || dir_stamp(
            &opts
                .paths
                .receipts(&opts.paths.run_key(&record.recipe, &record.origin)),
        ) != record.receipts
    {
        return None;
    }
    let mut steps = Vec::with_capacity(record.steps.len());
    let mut checked = crate::fs::ExistsInDirs::default();
    for s in record.steps {
        let unchanged = s
            .check
            .iter()
            .all(|p| checked.exists(Path::new(p.as_ref())))
            && s.inputs.iter().all(|(pattern, files)| {
                let now = expand_inputs(pattern);
                now.len() == files.len()
                    && now.iter().zip(files).all(|(path, (was, version))| {
                        path.as_os_str() == was.as_ref()
                            && FileVersion::read(path).as_ref() == Some(version)
                    })
            });
        if !unchanged {
            return None;
        }
        let kind = crate::recipe::StepKind::static_name(&s.kind)?;
        steps.push(PlannedStep {
            id: s.id.into_owned(),
            kind,
            status: s.skipped.map_or(Status::Fresh, Status::Skipped),
            needs: s.needs.into_iter().map(Cow::into_owned).collect(),
            forced: false,
            max_jobs: crate::steps::max_jobs_for(s.mem_per_job),
            digest: s.digest.map(Cow::into_owned),
            restore_entry: None,
        });
    }
    Some(FreshPlan {
        plan: Plan {
            recipe: record.recipe,
            steps,
        },
        origin: record.origin,
    })
}

/// What a plan leaves for the next one (the caller's part: [`super::plan::plan`] itself writes
/// nothing): the receipts index brought up to date with what the plan read, and, for a plan with
/// every step fresh or skipped and no selection, the fresh record that lets the next run skip
/// loading the recipe. Best effort, like both records.
pub(crate) fn record(
    recipe: &Recipe,
    plan: &Plan,
    state: &StateDir,
    facts: &Facts,
    sel: &Selection,
    memo: &HashMemo,
) {
    state.refresh_index(recipe.steps.iter().map(|s| s.id.as_str()));
    let all_fresh = plan
        .steps
        .iter()
        .all(|s| matches!(s.status, Status::Fresh | Status::Skipped(_)));
    if all_fresh && sel.only.is_empty() && sel.from.is_none() && sel.force.is_empty() {
        save(recipe, plan, state, facts, memo);
    }
}

/// Record `plan` of `recipe` (every step fresh or skipped, no selection) for the next lookup;
/// best effort. Not recorded when the recipe cache is off, when the receipts directory changed
/// while planning or changed too recently to be told from a change to come, or when an input
/// file is not the version whose hash the plan used or is that recent.
fn save(recipe: &Recipe, plan: &Plan, state: &StateDir, facts: &Facts, memo: &HashMemo) {
    let Some(provenance) = &recipe.provenance else {
        return;
    };
    let Some(receipts) = state.stamp_for_record() else {
        return;
    };
    let now = std::time::SystemTime::now();
    let mut steps = Vec::with_capacity(plan.steps.len());
    for (step, planned) in recipe.steps.iter().zip(&plan.steps) {
        let skipped = match &planned.status {
            Status::Fresh => None,
            Status::Skipped(why) => Some(why.clone()),
            Status::Stale(_) | Status::NotSelected => return,
        };
        let mut inputs = Vec::with_capacity(step.inputs.len());
        for pattern in &step.inputs {
            let mut files = Vec::new();
            for path in expand_inputs(pattern) {
                let version = FileVersion::read(&path);
                match version {
                    Some(v) if version == memo.version(&path) && v.settled_before(now) => {
                        files.push((Cow::Owned(path.to_string_lossy().into_owned()), v));
                    }
                    _ => return,
                }
            }
            inputs.push((Cow::Borrowed(pattern.as_str()), files));
        }
        steps.push(StepRecord {
            id: Cow::Borrowed(&step.id),
            kind: Cow::Borrowed(step.kind.name()),
            digest: planned.digest.as_deref().map(Cow::Borrowed),
            skipped,
            needs: step
                .needs
                .iter()
                .map(|n| Cow::Borrowed(n.as_str()))
                .collect(),
            mem_per_job: step.mem_per_job,
            check: match &step.check {
                Some(Check::Paths(paths)) => paths.iter().map(|p| p.to_string_lossy()).collect(),
                _ => Vec::new(),
            },
            inputs,
        });
    }
    let mut when_facts: Vec<(String, Option<String>)> = Vec::new();
    for ident in recipe
        .steps
        .iter()
        .filter_map(|s| s.when.as_ref())
        .flat_map(|w| w.expr.idents())
    {
        if !ident.name.starts_with("var.") && !when_facts.iter().any(|(k, _)| *k == ident.name) {
            when_facts.push((ident.name.clone(), facts.get(&ident.name)));
        }
    }
    let record = Record {
        format: Cow::Borrowed(FORMAT),
        inputs: provenance.inputs.settled(),
        facts: when_facts,
        receipts,
        recipe: recipe.name.clone(),
        origin: recipe.origin.clone(),
        profiles: !recipe.profiles.is_empty(),
        requires: !recipe.requires.is_empty()
            || recipe.steps.iter().any(|s| !s.requires.is_empty()),
        steps,
    };
    if let Ok(bytes) = serde_json::to_vec(&record) {
        let _ = crate::fs::replace_unsynced(&path_of(&provenance.slot), &bytes);
    }
}
