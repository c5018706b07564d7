//! `kiln tune`: flags to a search. The variants, the cost estimate, the greedy reference, then
//! `tune::search` with the real evaluator (`tune::evaluate`); the ranked table, tune JSON, SVG
//! and the winner's profile file.

use std::collections::BTreeSet;
use std::time::Instant;

use super::{show, Settings};
use crate::cli::TuneArgs;
use crate::error::{Error, Result};
use crate::fs::write_atomic;
use crate::pipeline;
use crate::recipe::{Api, Recipe};
use crate::tune::estimate::{Budget, Estimate, History};
use crate::tune::evaluate::Evaluator;
use crate::tune::{self, knobs, race, render, Axis, Entry, Method, Rung};

pub(super) fn run(settings: &Settings, args: &TuneArgs) -> Result<u8> {
    crate::process::catch_interrupts();
    let axes = args
        .vary
        .iter()
        .map(|s| Axis::parse(s))
        .collect::<Result<Vec<_>>>()?;
    let budget = args
        .budget
        .as_deref()
        .map(|b| {
            Budget::parse(b).map_err(|e| {
                Error::usage(
                    format!("`--budget {b}`: {e}"),
                    Some("write a count (`--budget 4`) or a time (`--budget 30m`)".into()),
                )
            })
        })
        .transpose()?;
    let recipe = settings.load_recipe(&args.recipe)?;
    let chosen = pipeline::Variant::pick(&recipe, Some(&args.profile))?;
    let (name, profile) = (chosen.name.to_string(), chosen.profile);
    let api = crate::serve::profile_api(profile);
    let request = check_axes(&recipe, api, &axes)?;
    let method = Method::parse(&args.method);
    let variants = tune::sample(
        tune::grid(&axes),
        match budget {
            Some(Budget::Variants(n)) => Some(n),
            _ => None,
        },
    );
    let full = Rung {
        warmup: args.warmup,
        runs: args.runs,
        max_tokens: args.max_tokens,
    };
    let keys = race::groups(
        &variants.iter().cloned().map(Entry::new).collect::<Vec<_>>(),
        &(0..variants.len()).collect::<Vec<_>>(),
        &request,
    )
    .len();
    let dir = settings.paths.tune(&recipe.name);
    let history = History::read(
        &dir,
        &settings.paths.reports(&recipe.name).join("report.json"),
    );
    let estimate = Estimate::plan(method, variants.len(), keys, full, args.ab_tokens, &history);
    show::say(&format!(
        "tune `{name}` of {} ({method:?}): {}",
        recipe.name,
        estimate.line()
    ));
    if let (Some(Budget::Time(b)), Some(w)) = (budget, estimate.wall()) {
        if w > b {
            show::say(&format!(
                "the estimate is over --budget {}: no launch starts after it",
                tune::estimate::human_duration(b)
            ));
        }
    }
    if !request.is_empty() {
        let keys: Vec<String> = request
            .iter()
            .filter_map(|k| knobs::find(api, k))
            .map(|k| format!("{} ({})", k.key, k.what))
            .collect();
        show::say(&format!(
            "per request, inside one launch: {}",
            keys.join(", ")
        ));
    }
    if args.dry_run {
        for v in &variants {
            println!("{}", v.name());
        }
        println!("{}", estimate.line());
        return Ok(0);
    }
    let against = args.against.clone().or_else(|| profile.baseline.clone());
    let reference = match &against {
        Some(b) => {
            show::say(&format!("greedy reference from profile `{b}`"));
            let base = pipeline::Variant::pick(&recipe, Some(b))?;
            let s = settings.session(&recipe);
            Some(pipeline::greedy_outputs(
                s,
                base,
                args.ab_tokens,
                &mut show::say,
            )?)
        }
        None => {
            show::say(&format!(
                "profile `{name}` names no baseline: no greedy A/B (pass --against)"
            ));
            None
        }
    };
    // Variants re-load the recipe by name: pin the default one so it is not re-announced.
    let mut recipe_args = args.recipe.clone();
    recipe_args
        .recipe
        .get_or_insert_with(|| recipe.name.clone());
    let load = |sets: &[String]| {
        let mut a = recipe_args.clone();
        a.set.extend(sets.iter().cloned());
        settings.load_recipe(&a)
    };
    let started = Instant::now();
    let mut say = show::say;
    let mut eval = Evaluator::new(
        &load,
        &settings.paths,
        &settings.facts,
        &name,
        reference.as_deref(),
        args.ab_tokens,
        request.clone(),
        &mut say,
    );
    eval.allow_two = !args.one_server && recipe.vars.contains_key("port");
    if let Some(Budget::Time(b)) = budget {
        eval.deadline = Some(started + b);
    }
    let ranked = tune::search(method, variants, &request, full, &mut eval);
    let launches = eval.launches();
    let records = std::mem::take(&mut eval.records);
    drop(eval);
    if crate::process::interrupted() {
        // Launches cut short are not results: nothing is written, no winner is named.
        return Err(Error::other(
            format!("`kiln tune` interrupted after {launches} launch(es)"),
            Some("run it again to search from the start".to_string()),
        ));
    }
    let wall = started.elapsed();
    print!("{}", render::table(&ranked));
    println!(
        "{launches} launches in {:.1} s ({method:?}; estimated {})",
        wall.as_secs_f64(),
        estimate
            .wall()
            .map_or("-".into(), tune::estimate::human_duration)
    );
    let json = serde_json::json!({
        "recipe": recipe.name, "profile": name, "method": method,
        "rungs": tune::rungs(method, ranked.len(), full), "launches": launches,
        "launch_records": records, "wall_s": wall.as_secs_f64(),
        "estimated_wall_s": estimate.wall().map(|d| d.as_secs_f64()),
        "per_request": request, "entries": ranked,
    });
    let json_path = dir.join(format!("{name}.json"));
    let text = serde_json::to_string_pretty(&json).expect("tune results serialize");
    write_atomic(&json_path, text.as_bytes())?;
    let svg_path = dir.join(format!("{name}.svg"));
    let title = format!("kiln tune {} `{name}`: tok/s per variant", recipe.name);
    write_atomic(&svg_path, render::svg(&title, &ranked).as_bytes())?;
    show::say(&format!(
        "results {} and {}",
        json_path.display(),
        svg_path.display()
    ));
    let Some(best) = ranked
        .first()
        .filter(|e| e.disqualified.is_none() && e.last().is_some())
    else {
        return Err(Error::other(
            format!("no variant of `{name}` qualified: every one fell back, crashed or gave wrong output"),
            Some(format!("the reasons are in the table above and in {}", json_path.display())),
        ));
    };
    let winner = Winner {
        recipe: &recipe,
        name: &name,
        best,
        against: against.as_deref(),
        method,
        request: &request,
    };
    winner.write(&load, &dir)?;
    Ok(0)
}

/// Each axis is a server flag, a recipe variable, or a per-request knob of the profile's API
/// (a typo would silently change nothing). The per-request keys come back.
fn check_axes(recipe: &Recipe, api: Api, axes: &[Axis]) -> Result<BTreeSet<String>> {
    let mut request = BTreeSet::new();
    for a in axes.iter().filter(|a| !a.is_flag()) {
        if recipe.vars.contains_key(&a.key) {
            continue;
        }
        if knobs::find(api, &a.key).is_some() {
            request.insert(a.key.clone());
            continue;
        }
        let names = recipe
            .vars
            .keys()
            .map(String::as_str)
            .chain(knobs::names(api));
        let hint = crate::diagnostic::did_you_mean(&a.key, names).map_or(
            format!(
                "name a variable of the recipe, a server flag (`--vary=-ub=256,1024`) or a per-request field ({})",
                knobs::names(api).join(", ")
            ),
            |b| format!("did you mean `{b}`?"),
        );
        return Err(Error::usage(
            format!(
                "`--vary {}`: recipe `{}` has no variable `{}`, and it is no per-request field of the {} API",
                a.key,
                recipe.name,
                a.key,
                api.name()
            ),
            Some(hint),
        ));
    }
    Ok(request)
}

struct Winner<'a> {
    recipe: &'a Recipe,
    name: &'a str,
    best: &'a Entry,
    against: Option<&'a str>,
    method: Method,
    request: &'a BTreeSet<String>,
}

impl Winner<'_> {
    /// The winner as a servable profile file; per-request settings are named in its summary.
    fn write(
        &self,
        load: &dyn Fn(&[String]) -> Result<Recipe>,
        dir: &std::path::Path,
    ) -> Result<()> {
        let (_, winner) =
            tune::evaluate::resolve(load, self.name, self.request, &self.best.variant, None)?;
        let base = self
            .against
            .map(|b| {
                pipeline::Variant::pick(self.recipe, Some(b))
                    .map(|v| (v.name.to_string(), v.profile.clone()))
            })
            .transpose()?;
        let best_name = format!("{}-best", self.name);
        let m = self.best.last().expect("a ranked winner was measured");
        let per_request = self.best.variant.request(self.request);
        let mut summary = format!("{} at {:.1} tok/s", self.best.variant.name(), m.tok_s);
        if !per_request.is_empty() {
            let fields: Vec<String> = per_request
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            summary.push_str(&format!("; send {} with each request", fields.join(", ")));
        }
        let file = render::WinnerFile {
            recipe: &self.recipe.name,
            name: &best_name,
            profile: &winner,
            baseline: base.as_ref().map(|(n, p)| (n.as_str(), p)),
            summary,
            method: self.method,
        };
        let path = dir.join(format!("{best_name}.toml"));
        write_atomic(&path, file.render().as_bytes())?;
        println!(
            "winner: {} ({:.1} tok/s): {}",
            self.best.variant.name(),
            m.tok_s,
            path.display()
        );
        Ok(())
    }
}
