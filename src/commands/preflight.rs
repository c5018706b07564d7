//! Glue for the preflights (policy in [`crate::doctor::preflight`] and
//! [`crate::doctor::launch::preflight`]): `kiln up`'s doctor gate and host-tool check before its
//! first step, and the launch preflight of `kiln up`, `kiln serve`, `kiln verify` and `kiln tune`.

use super::Settings;
use crate::cli::{RecipeArgs, UpArgs};
use crate::doctor::launch::preflight::{self as launch_preflight, Here, Launched};
use crate::doctor::{self, preflight, Inputs};
use crate::engine::Plan;
use crate::error::Result;
use crate::recipe::Recipe;
use crate::report::Reporter;

pub(super) use crate::doctor::preflight::check_needed;

/// `kiln up`'s doctor gate (a GPU stack's): the doctor over this host and the recipe.
/// `needs_driver`: the run serves, or installs a toolkit that needs a driver.
pub(super) fn run(
    settings: &Settings,
    recipe: &Recipe,
    needs_driver: bool,
    reporter: &dyn Reporter,
) -> Result<()> {
    let mut inputs = Inputs {
        state_dir: settings.paths.root().to_path_buf(),
        python_facts: Some(settings.paths.python_facts()),
        pinned_cc: settings.facts.pinned("gpu.cc").map(str::to_string),
        ..Inputs::default()
    };
    doctor::recipe::apply(recipe, &mut inputs);
    let report = doctor::run(doctor::facts::collect(&inputs), &[]);
    let (lines, verdict) = preflight::gate(
        &report,
        settings.facts.pinned("gpu.driver").is_some() || !needs_driver,
        recipe.vars.contains_key("cuda_source"),
    );
    for line in lines {
        reporter.note(&line);
    }
    verdict
}

/// `kiln up`'s host-tool check: the recipe's `requires` and those of the steps about to run.
pub(super) fn host_tools(recipe: &Recipe, plan: &Plan, reporter: &dyn Reporter) -> Result<()> {
    if let Some(line) = preflight::host_tools(recipe, plan)? {
        reporter.note(&line);
    }
    Ok(())
}

/// Every launch check of the named profiles (None: the one `kiln up`/`kiln serve` picks; for
/// `up`, its baseline too), in order.
pub(super) fn launch_checks(
    settings: &Settings,
    args: &RecipeArgs,
    recipe: &Recipe,
    profiles: &[Option<&str>],
    up: bool,
) -> Result<Launched> {
    // A reload names the recipe as the command line did (or by its name) with its `--set`s first.
    let reload = |more: &[String]| {
        let mut set = args.set.clone();
        set.extend_from_slice(more);
        settings.load(&settings.recipe_spec(&RecipeArgs {
            recipe_flag: None,
            recipe: Some(args.recipe.clone().unwrap_or_else(|| recipe.name.clone())),
            set,
        })?)
    };
    let shipped = |name: &str, set: &[String]| {
        settings.load(&settings.recipe_spec(&RecipeArgs {
            recipe_flag: None,
            recipe: Some(name.to_string()),
            set: set.to_vec(),
        })?)
    };
    let here = Here {
        paths: &settings.paths,
        gpus: settings.facts.gpus(),
        shipped: &shipped,
    };
    launch_preflight::launch_checks(recipe, &reload, &here, profiles, up)
}

/// The launch preflight of a command that launches `profiles` (None: the one it picks): every
/// line shown, and an error naming each failed check when one fails.
pub(super) fn launch(
    settings: &Settings,
    args: &RecipeArgs,
    recipe: &Recipe,
    profiles: &[Option<&str>],
) -> Result<()> {
    let reporter = super::reporter(false);
    launch_with(settings, args, recipe, profiles, false, reporter.as_ref())
}

/// `kiln up`'s launch preflight, before its first step: skipped (and said so) with `--no-serve`,
/// `--only` or `--no-doctor`.
pub(super) fn launch_up(
    settings: &Settings,
    args: &UpArgs,
    recipe: &Recipe,
    reporter: &dyn Reporter,
    stage: &mut &'static str,
) -> Result<()> {
    let skip = if args.no_serve {
        Some("--no-serve provisions only; `kiln serve` runs it before it launches")
    } else if !args.only.is_empty() {
        Some("--only runs steps and serves nothing")
    } else if args.no_doctor {
        Some("--no-doctor")
    } else if recipe.profiles.is_empty() && recipe.unavailable_profiles.is_empty() {
        None
    } else {
        *stage = "preflight";
        let profiles = [args.profile.as_deref()];
        launch_with(settings, &args.recipe, recipe, &profiles, true, reporter)?;
        *stage = "steps";
        return Ok(());
    };
    if let Some(why) = skip {
        reporter.note(&format!("launch preflight skipped: {why}"));
    }
    Ok(())
}

fn launch_with(
    settings: &Settings,
    args: &RecipeArgs,
    recipe: &Recipe,
    profiles: &[Option<&str>],
    up: bool,
    reporter: &dyn Reporter,
) -> Result<()> {
    let found = launch_checks(settings, args, recipe, profiles, up)?;
    for line in found.lines() {
        reporter.note(&line);
    }
    found.verdict(up)
}
