//! `kiln up`'s preflights before its first step: the host tools the recipe and its steps
//! `require` (every recipe), and the doctor gate for GPU stacks (recipes with a `cuda` step):
//! host problems no step can fix stop the run before hours of compiling; everything else the
//! doctor finds is shown and left to the steps (and to `serve`).

use super::{Report, Status};
use crate::engine::{Plan, Status as StepStatus};
use crate::error::{Error, Result};
use crate::recipe::Recipe;
use crate::requires::{Found, OsFamily, Requirement};

/// Checks whose failure stops `kiln up`: the driver, its floor, and free disk. (A GPU stack also
/// stops on a missing driver, which the doctor alone only warns about.)
const BLOCKING: &[&str] = &["nvidia.driver", "driver.floor", "disk.free"];

/// The doctor gate of `kiln up` over `report`: the lines to show (a count, then each warning and
/// failure), and an error naming the blocking checks when one failed. `driver_pinned`: a pinned
/// driver (`KILN_FACT_GPU_DRIVER`) stands for a driver this host does not show, or the run needs
/// none (it provisions only, and no toolkit it installs needs one).
pub(crate) fn gate(
    report: &Report,
    driver_pinned: bool,
    cuda_source_var: bool,
) -> (Vec<String>, Result<()>) {
    // What the gate refuses counts as a failure, in the count too (a missing driver is only a
    // warning to `kiln doctor`, but `kiln up` of a GPU stack stops on it).
    let refuses = |c: &super::Check| {
        BLOCKING.contains(&c.id)
            && !(driver_pinned && c.id == "nvidia.driver")
            && (c.status == Status::Fail || (c.id == "nvidia.driver" && c.status == Status::Warn))
    };
    let judged: Vec<super::Check> = report
        .checks
        .iter()
        .map(|c| {
            let mut c = c.clone();
            if refuses(&c) {
                c.status = Status::Fail;
            }
            c
        })
        .collect();
    let mut lines = vec![format!("doctor preflight: {}", tally(&judged))];
    for c in judged
        .iter()
        .filter(|c| matches!(c.status, Status::Warn | Status::Fail))
    {
        let mark = if c.status == Status::Fail { "✗" } else { "!" };
        lines.push(format!("  {mark} {}: {}", c.id, c.summary));
    }
    let blocking: Vec<&super::Check> = report.checks.iter().filter(|c| refuses(c)).collect();
    let Some(first) = blocking.first() else {
        return (lines, Ok(()));
    };
    let ids: Vec<&str> = blocking.iter().map(|c| c.id).collect();
    let mut hint = first
        .fix
        .clone()
        .unwrap_or_else(|| format!("see `kiln doctor {} -v`", first.id));
    if first.id == "nvidia.driver" && cuda_source_var {
        hint.push_str("; to provision without a GPU (an image build), `--no-serve --set cuda_source=pypi` (the toolkit from PyPI needs no driver)");
    }
    hint.push_str("; or pass --no-doctor to skip this check (it skips the launch preflight too)");
    let error = Error::other(
        format!(
            "doctor preflight failed: {}: {}",
            ids.join(", "),
            first.summary
        ),
        Some(hint),
    );
    (lines, Err(error))
}

/// One host tool and who needs it: `the recipe`, `step `build``.
pub(crate) struct Needed {
    pub(crate) req: Requirement,
    pub(crate) by: Vec<String>,
}

/// The recipe's `requires` and those of the steps whose status `runs` accepts (the plan's steps
/// are the recipe's, in order), merged by tool (the highest minimum version wins).
fn needed(recipe: &Recipe, plan: &Plan, runs: impl Fn(&StepStatus) -> bool) -> Vec<Needed> {
    needed_by(recipe, |i| {
        plan.steps.get(i).is_some_and(|p| runs(&p.status))
    })
}

/// The recipe's `requires` and those of the steps (by index) that `keep` accepts, merged by tool.
fn needed_by(recipe: &Recipe, keep: impl Fn(usize) -> bool) -> Vec<Needed> {
    let mut out: Vec<Needed> = Vec::new();
    let sources = recipe
        .requires
        .iter()
        .map(|r| (r, "the recipe".to_string()))
        .chain(
            recipe
                .steps
                .iter()
                .enumerate()
                .filter(|(i, _)| keep(*i))
                .flat_map(|(_, s)| {
                    s.requires
                        .iter()
                        .map(move |r| (r, format!("step `{}`", s.id)))
                }),
        );
    for (req, by) in sources {
        match out.iter_mut().find(|n| n.req.tool == req.tool) {
            Some(n) => {
                n.req.raise_min(req);
                // The same source twice comes in a row (one step listing a tool twice).
                if n.by.last() != Some(&by) {
                    n.by.push(by);
                }
            }
            None => out.push(Needed {
                req: req.clone(),
                by: vec![by],
            }),
        }
    }
    out
}

/// What `kiln plan` shows of one checked requirement: `✓ c++  /usr/bin/c++ 12.2.0`.
fn describe(found: &Found) -> (bool, String) {
    match found {
        Found::Ok { path, version } => (
            true,
            match version {
                Some(v) => format!("{} {v}", path.display()),
                None => path.display().to_string(),
            },
        ),
        Found::Missing => (false, "not found on PATH".into()),
        Found::TooOld { path, version } => (false, format!("{} is {version}", path.display())),
        Found::Broken { why, .. } => (false, why.clone()),
    }
}

/// One needed tool, checked now: found (and how it was found), or what is wrong.
pub(crate) struct Checked {
    pub(crate) needed: Needed,
    pub(crate) ok: bool,
    pub(crate) what: String,
}

/// [`needed`], each tool checked now, and the command that installs the missing ones.
pub(crate) fn check_needed(
    recipe: &Recipe,
    plan: &Plan,
    runs: impl Fn(&StepStatus) -> bool,
) -> (Vec<Checked>, Option<String>) {
    checked(needed(recipe, plan, runs))
}

/// What `kiln doctor` says of a recipe's host tools: those of the recipe and of every step (a
/// doctor does not plan: a step that is fresh now may run after a change).
pub(crate) fn recipe_tools(recipe: &Recipe) -> super::facts::HostTools {
    let (checked, fix) = checked(needed_by(recipe, |_| true));
    let (ok, problems): (Vec<&Checked>, Vec<&Checked>) = checked.iter().partition(|c| c.ok);
    super::facts::HostTools {
        found: ok
            .iter()
            .map(|c| format!("{}: {}", c.needed.req, c.what))
            .collect(),
        problems: problems
            .iter()
            .map(|c| {
                let n = &c.needed;
                format!("{}: {} (needed by {})", n.req, c.what, n.by.join(", "))
            })
            .collect(),
        fix,
    }
}

fn checked(needed: Vec<Needed>) -> (Vec<Checked>, Option<String>) {
    let checked: Vec<Checked> = needed
        .into_iter()
        .map(|needed| {
            let (ok, what) = describe(&needed.req.check());
            Checked { needed, ok, what }
        })
        .collect();
    let missing: Vec<_> = checked
        .iter()
        .filter(|c| !c.ok)
        .map(|c| c.needed.req.tool)
        .collect();
    let hint = (!missing.is_empty())
        .then(|| OsFamily::detect().install_hint(&missing, crate::host::running_as_root()));
    (checked, hint)
}

/// `kiln up`'s host-tool check, before the first step: the recipe's `requires` and those of the
/// steps about to run. Ok: the line to show (none when nothing is needed); every problem is one
/// line of the error, whose hint installs them all.
pub(crate) fn host_tools(recipe: &Recipe, plan: &Plan) -> Result<Option<String>> {
    let (checked, hint) = check_needed(recipe, plan, |s| matches!(s, StepStatus::Stale(_)));
    let Some(hint) = hint else {
        if checked.is_empty() {
            return Ok(None);
        }
        let tools: Vec<String> = checked.iter().map(|c| c.needed.req.to_string()).collect();
        return Ok(Some(format!("host tools: {} found", tools.join(", "))));
    };
    let problems = checked
        .iter()
        .filter(|c| !c.ok)
        .map(|c| {
            let n = &c.needed;
            format!("{}: {} (needed by {})", n.req, c.what, n.by.join(", "))
        })
        .collect();
    Err(Error::HostTools {
        recipe: recipe.name.clone(),
        problems,
        hint,
    })
}

/// `N pass, N warn, N fail, N skip` of `checks`.
pub(crate) fn tally<'a>(checks: impl IntoIterator<Item = &'a super::Check>) -> String {
    let mut n = [0usize; 4];
    for c in checks {
        n[match c.status {
            Status::Pass => 0,
            Status::Warn => 1,
            Status::Fail => 2,
            Status::Skip => 3,
        }] += 1;
    }
    format!("{} pass, {} warn, {} fail, {} skip", n[0], n[1], n[2], n[3])
}

#[cfg(test)]
mod tests {
    /// `BLOCKING` spells check ids a second time: each must be a doctor check's.
    #[test]
    fn every_blocking_id_is_a_doctor_check() {
        let ids: Vec<&str> = super::super::all_checks().iter().map(|c| c.id).collect();
        for id in super::BLOCKING {
            assert!(ids.contains(id), "`{id}` is no doctor check: {ids:?}");
        }
    }
}
