//! `kiln doctor`: resolve inputs (flags, a recipe: the one named, else the one `kiln up` would
//! pick), collect facts, run the checks that recipe needs and the launch preflight of its
//! profiles, print, bundle.

use super::Settings;
use crate::cli::{DoctorArgs, RecipeArgs};
use crate::diagnostic::did_you_mean;
use crate::doctor::{self, Inputs};
use crate::error::{Error, Result};
use crate::report::{style, Block};

pub(super) fn run(settings: &Settings, args: &DoctorArgs) -> Result<u8> {
    crate::report::json_lines(args.json);
    let defs = doctor::all_checks();
    let mut known: Vec<&'static str> = defs.iter().map(|d| d.id).collect();
    known.extend(doctor::launch::IDS);
    for id in &args.checks {
        if !known.contains(&id.as_str()) {
            let hint = if let Some(s) = did_you_mean(id, known.iter().copied()) {
                format!("did you mean `{s}`?")
            } else {
                let mut lines: Vec<String> = defs
                    .iter()
                    .map(|d| format!("`{}`: {}", d.id, d.about))
                    .collect();
                lines.extend(doctor::launch::IDS.iter().map(|i| format!("`{i}`")));
                format!("known checks:\n  {}", lines.join("\n  "))
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
    let recipe_args = RecipeArgs {
        recipe_flag: None,
        recipe: args.recipe.clone(),
        set: args.set.clone(),
    };
    let recipe = match settings.load_recipe(&recipe_args) {
        Ok(r) => Some(r),
        // The recipe `kiln up` would pick is a default, not a demand: without it every check runs.
        Err(e) if args.recipe.is_none() && args.set.is_empty() && args.profile.is_none() => {
            let why = format!("doctor runs every check: the default recipe does not load: {e}");
            super::show::say(&why);
            None
        }
        Err(e) => return Err(e),
    };
    // A named recipe (or `--set`) supplies its venv, toolkit and flags; the default one only
    // says which checks matter (and whose launch preflight runs).
    match &recipe {
        Some(r) if args.recipe.is_some() || !args.set.is_empty() => {
            doctor::recipe::apply(r, &mut inputs);
        }
        Some(r) => inputs.needs = Some(doctor::recipe::needs_of(r)),
        None => {}
    }
    // The probes' process groups (a hung `import torch` and its children) end with a killed doctor.
    let _watchdog = crate::process::watchdog::start(
        &settings.paths.running(),
        crate::process::watchdog::Leftovers::LeaveAlone,
    )?;
    // What `kiln up` of this recipe would refuse to start without (probes the watchdog covers:
    // a tool that hangs, such as a python whose site hangs, ends with a killed doctor).
    // Checked beside the facts (a few short probes each: neither waits on the other).
    let facts = std::thread::scope(|s| {
        let tools = s.spawn(|| recipe.as_ref().map(doctor::preflight::recipe_tools));
        let mut facts = doctor::facts::collect(&inputs);
        facts.host_tools = tools.join().unwrap_or_default();
        facts
    });
    let mut report = doctor::run(facts, &args.checks);
    let wants_launch =
        args.checks.is_empty() || args.checks.iter().any(|c| c.starts_with("launch."));
    if let Some(recipe) = recipe.as_ref().filter(|_| wants_launch) {
        let has_profiles = !recipe.profiles.is_empty() || !recipe.unavailable_profiles.is_empty();
        if has_profiles || args.profile.is_some() {
            let found = super::preflight::launch_checks(
                settings,
                &recipe_args,
                recipe,
                &[args.profile.as_deref()],
                args.profile.is_none(),
            )?;
            report.checks.extend(
                found
                    .checks
                    .into_iter()
                    .filter(|c| args.checks.is_empty() || args.checks.iter().any(|s| s == c.id)),
            );
        }
    }
    let text = doctor::render::render(&report, args.verbose);
    let r = crate::report::current();
    r.result(&Block::new("doctor", style::marks(&text), &report));
    if let Some(path) = &args.bundle {
        // The bundle holds the report as one JSON document: a file, not the stream.
        let json = serde_json::to_string_pretty(&report)
            .map_err(|e| Error::other(format!("cannot encode the report: {e}"), None))?;
        let python = report.facts.python().map(|p| p.executable.as_str());
        doctor::bundle::write(path, &json, python)?;
        r.note(&format!(
            "wrote the support bundle {} (secrets and GPU UUIDs removed)",
            path.display()
        ));
    }
    Error::finding(report.exit_code(), || finding(&report, args))
}

/// Why doctor exits non-zero: the checks that failed, else those that warn.
fn finding(report: &doctor::Report, args: &DoctorArgs) -> (String, Option<String>) {
    // Each id once (a launch check runs per profile).
    let ids = |st: doctor::Status| -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for c in report.checks.iter().filter(|c| c.status == st) {
            if !out.contains(&c.id) {
                out.push(c.id);
            }
        }
        out
    };
    let (failed, warned) = (ids(doctor::Status::Fail), ids(doctor::Status::Warn));
    let (n, what, ids) = if failed.is_empty() {
        (warned.len(), "warn", warned)
    } else {
        (failed.len(), "failed", failed)
    };
    let hint = if args.json {
        "each check's `fix` in the `doctor` event says what to do".to_string()
    } else {
        format!(
            "each check above says what to do; `{}` shows the evidence",
            evidence_of(ids[0], args)
        )
    };
    let message = format!("doctor: {n} check(s) {what}: {}", ids.join(", "));
    (message, Some(hint))
}

/// `kiln doctor ID -v` with the environment this run judged (its recipe, profile, interpreter,
/// site-packages and settings), so that it shows the same check's evidence.
fn evidence_of(id: &str, args: &DoctorArgs) -> String {
    let mut words = vec!["kiln doctor".to_string(), id.to_string(), "-v".to_string()];
    let mut flag = |name: &str, value: &str| {
        words.push(name.to_string());
        words.push(crate::shell::quote(value));
    };
    if let Some(r) = &args.recipe {
        flag("--recipe", r);
    }
    if let Some(p) = &args.profile {
        flag("--profile", p);
    }
    if let Some(p) = &args.python {
        flag("--python", p);
    }
    if let Some(s) = &args.site_packages {
        flag("--site-packages", &s.display().to_string());
    }
    for s in &args.set {
        flag("--set", s);
    }
    if args.deep {
        words.push("--deep".to_string());
    }
    words.join(" ")
}
