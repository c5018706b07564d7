//! The doctor preflight of `kiln up` for GPU stacks (recipes with a `cuda` step): host problems no
//! step can fix stop the run before hours of compiling; everything else the doctor finds is shown
//! and left to the steps (and to `serve`).

use super::Settings;
use crate::doctor::{self, Inputs, Status};
use crate::error::{Error, Result};
use crate::recipe::Recipe;
use crate::report::Reporter;

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
