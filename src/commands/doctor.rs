//! `kiln doctor`: resolve inputs (flags, a recipe), collect facts, run checks, print, bundle.

use std::path::PathBuf;

use super::Settings;
use crate::cli::{DoctorArgs, RecipeArgs};
use crate::diagnostic::did_you_mean;
use crate::doctor::{self, Inputs};
use crate::error::{Error, Result};
use crate::recipe::{Recipe, StepKind};

pub(super) fn run(settings: &Settings, args: &DoctorArgs) -> Result<u8> {
    let known: Vec<&'static str> = doctor::all_checks().iter().map(|d| d.id).collect();
    for id in &args.checks {
        if !known.contains(&id.as_str()) {
            let hint = match did_you_mean(id, known.iter().copied()) {
                Some(s) => format!("did you mean `{s}`?"),
                None => format!("known checks: {}", known.join(", ")),
            };
            return Err(Error::usage(format!("unknown check `{id}`"), Some(hint)));
        }
    }
    if let Some(site) = args.site_packages.as_ref().filter(|d| !d.is_dir()) {
        return Err(Error::usage(
            format!("--site-packages {} is not a directory", site.display()),
            Some("pass the directory that holds sglang/ and flashinfer/ (python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')".to_string()),
        ));
    }
    let mut inputs = Inputs {
        python: args.python.clone(),
        site_packages: args.site_packages.clone(),
        deep: args.deep,
        state_dir: settings.paths.root().to_path_buf(),
        python_facts: Some(settings.paths.python_facts()),
        pinned_cc: settings.facts.pinned("gpu.cc").map(str::to_string),
        ..Inputs::default()
    };
    if let Some(name) = &args.recipe {
        let recipe = settings.load_recipe(&RecipeArgs {
            recipe_flag: None,
            recipe: Some(name.clone()),
            set: Vec::new(),
        })?;
        apply_recipe(&recipe, &mut inputs);
    }
    let facts = doctor::facts::collect(&inputs);
    let report = doctor::run(facts, &args.checks);
    let json = serde_json::to_string_pretty(&report)
        .map_err(|e| Error::other(format!("cannot encode the report: {e}"), None))?;
    if args.json {
        println!("{json}");
    } else {
        print!(
            "{}",
            crate::report::style::marks(&doctor::render::render(&report, args.verbose))
        );
    }
    if let Some(path) = &args.bundle {
        let python = report.facts.python().map(|p| p.executable.as_str());
        doctor::bundle::write(path, &json, python)?;
        eprintln!(
            "kiln: wrote the support bundle {} (secrets and GPU UUIDs removed)",
            path.display()
        );
    }
    Error::finding(report.exit_code(), || {
        let ids = |st: doctor::Status| -> Vec<&str> {
            report
                .checks
                .iter()
                .filter(|c| c.status == st)
                .map(|c| c.id)
                .collect()
        };
        let (failed, warned) = (ids(doctor::Status::Fail), ids(doctor::Status::Warn));
        let message = if failed.is_empty() {
            format!(
                "doctor: {} check(s) warn: {}",
                warned.len(),
                warned.join(", ")
            )
        } else {
            format!(
                "doctor: {} check(s) failed: {}",
                failed.len(),
                failed.join(", ")
            )
        };
        (
            message,
            Some(if args.json {
                "each check's `fix` in the JSON above says what to do".into()
            } else {
                "each check above says what to do; `kiln doctor ID -v` shows the evidence".into()
            }),
        )
    })
}

/// What a recipe tells the doctor: its venv's python, toolkit and driver floor, prefix, server flags.
pub(super) fn apply_recipe(recipe: &Recipe, inputs: &mut Inputs) {
    for step in &recipe.steps {
        match &step.kind {
            StepKind::Python(p) if inputs.python.is_none() => {
                let python = p.venv.join("bin/python");
                if python.exists() {
                    inputs.python = Some(python.display().to_string());
                }
            }
            StepKind::Cuda(c) => {
                inputs.toolkit_version = Some(c.version.clone());
                inputs.driver_floor = Some(c.driver_floor.clone());
            }
            _ => {}
        }
    }
    inputs.prefix = recipe.vars.get("prefix").map(PathBuf::from);
    inputs.server_flags = recipe
        .profiles
        .values()
        .flat_map(|p| p.args.iter().cloned())
        .collect();
}
