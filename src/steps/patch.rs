//! `kind = "patch"`: apply a patch set to a venv's site-packages as part of `kiln up`; the step
//! succeeds only when the set is fully effective afterwards.

use std::io::Write;

use super::StepContext;
use crate::error::{Error, Result};
use crate::recipe::{SitePackages, Step};

pub(crate) fn run(
    step: &Step,
    set: &str,
    site: &SitePackages,
    ctx: &StepContext,
    log: &mut dyn Write,
) -> Result<()> {
    let site_packages = match site {
        SitePackages::Dir(d) => d.clone(),
        SitePackages::Venv(v) => crate::patch::site_packages_of(&v.join("bin").join("python"))?,
    };
    let _ = writeln!(
        log,
        "applying patch set {set} to {}",
        site_packages.display()
    );
    let report = crate::patch::apply_named(set, &site_packages, ctx.paths, false)?;
    let _ = writeln!(log, "{}", crate::patch::render(&report));
    let check = crate::patch::check_named(set, &site_packages)?;
    let _ = writeln!(log, "{}", crate::patch::render(&check));
    if check.effective {
        return Ok(());
    }
    Err(Error::StepFailed {
        step: step.id.clone(),
        reason: format!("patch set {set} is not fully effective after apply"),
        log: None,
        hint: None,
        tail: crate::patch::render(&check),
    })
}
