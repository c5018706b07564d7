//! `kiln patch apply|check|revert`: resolve the site-packages directory, run, print the report.

use std::path::PathBuf;

use super::Settings;
use crate::cli::{PatchAction, PatchArgs, PatchTarget};
use crate::error::{Error, Result};
use crate::patch::{self, Options};
use crate::report::Block;

pub(super) fn run(settings: &Settings, args: &PatchArgs) -> Result<u8> {
    let (action, target) = match &args.action {
        PatchAction::Apply(t) => ("apply", t),
        PatchAction::Check(t) => ("check", t),
        PatchAction::Revert(t) => ("revert", t),
    };
    crate::report::json_lines(target.json);
    let set = patch::load(&target.patchset)?;
    let site = site_packages(target)?;
    let opts = Options {
        dry_run: target.dry_run,
        force: target.force,
        skip_experimental: target.skip_experimental,
    };
    if action == "check" && (target.dry_run || target.force) {
        return Err(Error::usage(
            "`kiln patch check` writes nothing: --dry-run and --force do not apply to it",
            Some("drop the flag".to_string()),
        ));
    }
    let report = match action {
        "apply" => patch::apply(&set, &site, &settings.paths, &opts)?,
        "check" => patch::check(&set, &site, &settings.paths, &opts)?,
        _ => patch::revert(&set, &site, &settings.paths, &opts)?,
    };
    crate::report::current().result(&Block::new("patch", patch::render(&report), &report));
    Error::finding(u8::from(!report.effective), || {
        (
            format!(
                "patch set `{}` is not in effect on {} {}",
                report.set, report.package, report.version
            ),
            Some(if target.json {
                "the `patch` event says which patches are not applied and why".into()
            } else {
                "the table above says which patches are not applied and why".into()
            }),
        )
    })
}

fn site_packages(target: &PatchTarget) -> Result<PathBuf> {
    match (&target.site_packages, &target.python) {
        (Some(dir), _) if dir.is_dir() => dir
            .canonicalize()
            .map_err(|e| Error::io(format!("cannot resolve {}", dir.display()), e)),
        (Some(dir), _) => Err(Error::usage(
            format!("--site-packages {} is not a directory", dir.display()),
            Some(
                "pass the site-packages directory that holds the package's `*.dist-info`"
                    .to_string(),
            ),
        )),
        (None, Some(python)) => patch::site_packages_of(python),
        (None, None) => Err(Error::usage(
            "no environment given: kiln does not guess which Python to patch",
            Some(
                "pass --site-packages DIR or --python PATH (e.g. --python /opt/venv/bin/python)"
                    .to_string(),
            ),
        )),
    }
}
