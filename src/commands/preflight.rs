//! The preflights of `kiln up`, before its first step: the host tools the recipe and its steps
//! `require` (every recipe), and the doctor for GPU stacks (recipes with a `cuda` step): host
//! problems no step can fix stop the run before hours of compiling; everything else the doctor
//! finds is shown and left to the steps (and to `serve`).

use super::Settings;
use crate::doctor::{self, Inputs, Status};
use crate::engine::{Plan, Status as StepStatus};
use crate::error::{Error, Result};
use crate::recipe::Recipe;
use crate::report::Reporter;
use crate::requires::{Found, OsFamily, Requirement};

/// Checks whose failure stops `kiln up`: the driver, its floor, and free disk. (A GPU stack also
/// stops on a missing driver, which the doctor alone only warns about.)
const BLOCKING: &[&str] = &["nvidia.driver", "driver.floor", "disk.free"];

pub(super) fn run(settings: &Settings, recipe: &Recipe, reporter: &dyn Reporter) -> Result<()> {
    let mut inputs = Inputs {
        state_dir: settings.paths.root().to_path_buf(),
        python_facts: Some(settings.paths.python_facts()),
        pinned_cc: settings.facts.pinned("gpu.cc").map(str::to_string),
        ..Inputs::default()
    };
    super::doctor::apply_recipe(recipe, &mut inputs);
    let report = doctor::run(doctor::facts::collect(&inputs), &[]);
    let count = |s: Status| report.checks.iter().filter(|c| c.status == s).count();
    reporter.note(&format!(
        "doctor preflight: {} pass, {} warn, {} fail, {} skip",
        count(Status::Pass),
        count(Status::Warn),
        count(Status::Fail),
        count(Status::Skip)
    ));
    for c in report
        .checks
        .iter()
        .filter(|c| matches!(c.status, Status::Warn | Status::Fail))
    {
        let mark = if c.status == Status::Fail { "✗" } else { "!" };
        reporter.note(&format!("  {mark} {}: {}", c.id, c.summary));
    }
    // A pinned driver (`KILN_FACT_GPU_DRIVER`) stands for a driver this host does not show.
    let driver_pinned = settings.facts.pinned("gpu.driver").is_some();
    let blocking: Vec<_> = report
        .checks
        .iter()
        .filter(|c| BLOCKING.contains(&c.id))
        .filter(|c| !(driver_pinned && c.id == "nvidia.driver"))
        .filter(|c| {
            c.status == Status::Fail || (c.id == "nvidia.driver" && c.status == Status::Warn)
        })
        .collect();
    if let Some(first) = blocking.first() {
        let ids: Vec<&str> = blocking.iter().map(|c| c.id).collect();
        return Err(Error::other(
            format!(
                "doctor preflight failed: {}: {}",
                ids.join(", "),
                first.summary
            ),
            Some(
                first
                    .fix
                    .clone()
                    .unwrap_or_else(|| format!("see `kiln doctor {} -v`", first.id))
                    + "; or pass --no-doctor to run anyway",
            ),
        ));
    }
    Ok(())
}

/// One host tool and who needs it: `the recipe`, `step `build``.
pub(super) struct Needed {
    pub(super) req: Requirement,
    pub(super) by: Vec<String>,
}

/// The recipe's `requires` and those of the steps whose status `runs` accepts (the plan's steps
/// are the recipe's, in order), merged by tool (the highest minimum version wins).
fn needed(recipe: &Recipe, plan: &Plan, runs: impl Fn(&StepStatus) -> bool) -> Vec<Needed> {
    let mut out: Vec<Needed> = Vec::new();
    let sources = recipe
        .requires
        .iter()
        .map(|r| (r, "the recipe".to_string()))
        .chain(
            recipe
                .steps
                .iter()
                .zip(&plan.steps)
                .filter(|(_, p)| runs(&p.status))
                .flat_map(|(s, _)| {
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
pub(super) struct Checked {
    pub(super) needed: Needed,
    pub(super) ok: bool,
    pub(super) what: String,
}

/// [`needed`], each tool checked now, and the command that installs the missing ones.
pub(super) fn check_needed(
    recipe: &Recipe,
    plan: &Plan,
    runs: impl Fn(&StepStatus) -> bool,
) -> (Vec<Checked>, Option<String>) {
    let checked: Vec<Checked> = needed(recipe, plan, runs)
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
    let hint = (!missing.is_empty()).then(|| OsFamily::detect().install_hint(&missing));
    (checked, hint)
}

/// `kiln up`'s host-tool check, before the first step: the recipe's `requires` and those of the
/// steps about to run. Every problem is one line of the error; the hint installs them all.
pub(super) fn host_tools(recipe: &Recipe, plan: &Plan, reporter: &dyn Reporter) -> Result<()> {
    let (checked, hint) = check_needed(recipe, plan, |s| matches!(s, StepStatus::Stale(_)));
    let Some(hint) = hint else {
        if !checked.is_empty() {
            let tools: Vec<String> = checked.iter().map(|c| c.needed.req.to_string()).collect();
            reporter.note(&format!("host tools: {} found", tools.join(", ")));
        }
        return Ok(());
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
