//! `kiln tune`: sweep variants of a profile; each launch is judged (tunings active?), compared
//! with the baseline's greedy output, and benchmarked. Ranked table, winner profile file, SVG.

use std::time::{Duration, Instant};

use super::{show, Settings};
use crate::bench::{self, ab};
use crate::cli::{RecipeArgs, TuneArgs};
use crate::error::{Error, Result};
use crate::fs::write_atomic;
use crate::pipeline::{self, Launched};
use crate::recipe::{Profile, Recipe};
use crate::tune::{self, render, Axis, Entry, Evaluate, Measurement, Method, Rung, Variant};

pub(super) fn run(settings: &Settings, args: &TuneArgs) -> Result<u8> {
    crate::process::catch_interrupts();
    let axes = args
        .vary
        .iter()
        .map(|s| Axis::parse(s))
        .collect::<Result<Vec<_>>>()?;
    let recipe = settings.load_recipe(&args.recipe)?;
    super::preflight::launch(settings, &args.recipe, &recipe, &[Some(&args.profile)])?;
    let chosen = pipeline::Variant::pick(&recipe, Some(&args.profile))?;
    let (name, profile) = (chosen.name.to_string(), chosen.profile);
    check_axes(&recipe, &axes)?;
    let method = if args.method == "grid" {
        Method::Grid
    } else {
        Method::Halving
    };
    let variants = tune::sample(tune::grid(&axes), args.budget);
    let full = Rung {
        warmup: args.warmup,
        runs: args.runs,
        max_tokens: args.max_tokens,
    };
    let rungs = tune::rungs(method, variants.len(), full);
    eprintln!(
        "kiln: tune `{name}` of {}: {} variants, {method:?}, rungs {}",
        recipe.name,
        variants.len(),
        rungs
            .iter()
            .map(|r| format!("{}x{} tok", r.runs, r.max_tokens))
            .collect::<Vec<_>>()
            .join(" -> ")
    );
    let against = args.against.clone().or_else(|| profile.baseline.clone());
    let reference = if let Some(b) = &against {
        eprintln!("kiln: greedy reference from profile `{b}`");
        let base = pipeline::Variant::pick(&recipe, Some(b))?;
        let s = settings.session(&recipe);
        let got = pipeline::greedy_outputs(s, base, args.ab_tokens, &mut show::say)?;
        Some((b.clone(), got))
    } else {
        eprintln!("kiln: profile `{name}` names no baseline: no greedy A/B (pass --against)");
        None
    };
    // Variants re-load the recipe by name: pin the default one so it is not re-announced.
    let mut recipe_args = args.recipe.clone();
    recipe_args
        .recipe
        .get_or_insert_with(|| recipe.name.clone());
    let started = Instant::now();
    let mut eval = Evaluator {
        settings,
        recipe_args: &recipe_args,
        profile: &name,
        reference: reference.as_ref().map(|(_, o)| o.as_slice()),
        ab_tokens: args.ab_tokens,
        launches: 0,
    };
    let ranked = tune::search(method, variants, full, &mut eval);
    if crate::process::interrupted() {
        // Launches cut short are not results: nothing is written, no winner is named.
        return Err(Error::other(
            format!("`kiln tune` interrupted after {} launch(es)", eval.launches),
            Some("run it again to search from the start".to_string()),
        ));
    }
    let wall = started.elapsed();
    print!("{}", render::table(&ranked, rungs.len()));
    println!(
        "{} launches in {:.1} s ({method:?})",
        eval.launches,
        wall.as_secs_f64()
    );
    let dir = settings.paths.tune(&recipe.name);
    let json = serde_json::json!({
        "recipe": recipe.name, "profile": name, "method": method, "rungs": rungs,
        "launches": eval.launches, "wall_s": wall.as_secs_f64(), "entries": ranked,
    });
    let json_path = dir.join(format!("{name}.json"));
    write_atomic(
        &json_path,
        serde_json::to_string_pretty(&json)
            .expect("tune results serialize")
            .as_bytes(),
    )?;
    let svg_path = dir.join(format!("{name}.svg"));
    let title = format!("kiln tune {} `{name}`: tok/s per variant", recipe.name);
    write_atomic(&svg_path, render::svg(&title, &ranked).as_bytes())?;
    eprintln!(
        "kiln: results {} and {}",
        json_path.display(),
        svg_path.display()
    );
    let Some(best) = ranked.first().filter(|e| e.disqualified.is_none()) else {
        return Err(Error::other(
            format!("no variant of `{name}` qualified: every one fell back, crashed or gave wrong output"),
            Some(format!("the reasons are in the table above and in {}", json_path.display())),
        ));
    };
    write_winner(
        &eval,
        &recipe,
        &name,
        best,
        against.as_deref(),
        method,
        &dir,
    )?;
    Ok(0)
}

/// Variable axes must name a variable of the recipe (a typo would silently change nothing).
fn check_axes(recipe: &Recipe, axes: &[Axis]) -> Result<()> {
    for a in axes.iter().filter(|a| !a.is_flag()) {
        if !recipe.vars.contains_key(&a.key) {
            let hint =
                crate::diagnostic::did_you_mean(&a.key, recipe.vars.keys().map(String::as_str))
                    .map_or(
                        "name a variable of the recipe, or a server flag (`--vary=-ub=256,1024`)"
                            .into(),
                        |b| format!("did you mean `{b}`?"),
                    );
            return Err(Error::usage(
                format!(
                    "`--vary {}`: recipe `{}` has no variable `{}`",
                    a.key, recipe.name, a.key
                ),
                Some(hint),
            ));
        }
    }
    Ok(())
}

/// Give `flag` the value `value`: replace the value of its last occurrence (`-b 1024` or
/// `-b=1024`); a bare switch (the next word is another flag, as `verdict::flag_value` reads
/// it) gets the value after it; else append both.
fn set_flag(args: &mut Vec<String>, flag: &str, value: &str) {
    let prefix = format!("{flag}=");
    let takes_value = |next: &String| !next.starts_with('-') || next.parse::<f64>().is_ok();
    match args
        .iter()
        .rposition(|a| a == flag || a.starts_with(&prefix))
    {
        Some(i) if args[i] != flag => args[i] = format!("{flag}={value}"),
        Some(i) if args.get(i + 1).is_some_and(takes_value) => args[i + 1] = value.to_string(),
        Some(i) => args.insert(i + 1, value.to_string()),
        None => {
            args.push(flag.to_string());
            args.push(value.to_string());
        }
    }
}

struct Evaluator<'a> {
    settings: &'a Settings,
    recipe_args: &'a RecipeArgs,
    profile: &'a str,
    reference: Option<&'a [crate::bench::ab::Output]>,
    ab_tokens: u32,
    launches: usize,
}

impl Evaluator<'_> {
    /// The recipe with the variant's variables set, and the profile with its flags added.
    fn resolve(&self, v: &Variant) -> Result<(Recipe, Profile)> {
        let mut args = self.recipe_args.clone();
        for (k, val) in v.settings.iter().filter(|(k, _)| !k.starts_with('-')) {
            args.set.push(format!("{k}={val}"));
        }
        let recipe = self.settings.load_recipe(&args)?;
        let mut p = pipeline::Variant::pick(&recipe, Some(self.profile))?
            .profile
            .clone();
        for (k, val) in v.settings.iter().filter(|(k, _)| k.starts_with('-')) {
            set_flag(&mut p.args, k, val);
        }
        Ok((recipe, p))
    }

    fn launch_and_measure(
        &mut self,
        v: &Variant,
        rung: Rung,
        qualify: bool,
        e: &mut Entry,
    ) -> Result<()> {
        let (recipe, p) = self.resolve(v)?;
        let s = self.settings.session(&recipe);
        let variant = pipeline::Variant {
            name: self.profile,
            profile: &p,
        };
        self.launches += 1;
        eprintln!(
            "kiln: tune: `{}` ({} tokens x {})",
            v.name(),
            rung.max_tokens,
            rung.runs
        );
        let launched = pipeline::launch(s, variant, false, None, &mut show::say)?;
        let result = (|| {
            let url = launched.running.record.url.clone().ok_or_else(|| {
                Error::usage(
                    format!("profile `{}` has no port or url to query", self.profile),
                    None,
                )
            })?;
            if qualify {
                self.qualify(&launched, &url, e, false)?;
                if e.disqualified.is_some() {
                    return Ok(());
                }
            }
            let run = bench::Options {
                url: &url,
                api: launched.running.api,
                max_tokens: rung.max_tokens,
                runs: rung.runs,
                warmup: rung.warmup,
                prompt: bench::DEFAULT_PROMPT,
                timeout: bench::client::default_deadline(rung.max_tokens),
            };
            // Measured, not recorded: variants do not belong in the bench history.
            let fp = pipeline::bench_fingerprint(s.facts, &url, launched.running.api);
            let report = bench::run(&run, fp, &mut |_| {}, &mut |_| {})?;
            let (_, headline) = report.headline();
            e.measurements.push(Measurement {
                rung,
                tok_s: headline.median,
                cv: headline.cv,
                ttft_ms: report.ttft_ms.median,
            });
            eprintln!(
                "kiln: tune: `{}`: {:.1} tok/s (CV {:.1}%)",
                v.name(),
                headline.median,
                headline.cv * 100.0
            );
            if qualify {
                // Counters such as draft acceptance cover the benchmark's requests by now.
                self.qualify(&launched, &url, e, true)?;
            }
            Ok(())
        })();
        launched.stop(s);
        std::thread::sleep(Duration::from_millis(200));
        result
    }

    /// Verdicts (every judged tuning must be active) and, before traffic, the greedy A/B.
    fn qualify(&self, launched: &Launched, url: &str, e: &mut Entry, served: bool) -> Result<()> {
        let verdicts = pipeline::verdicts(launched, served);
        if served {
            e.evidence.retain(|l| !l.starts_with("verdict "));
        }
        for v in &verdicts {
            e.evidence.push(format!(
                "verdict {}: {}: {}",
                v.feature,
                v.status.label(),
                v.reason
            ));
        }
        if let Some(bad) = verdicts.iter().find(|v| !v.status.proven_active()) {
            e.disqualified = Some(format!(
                "{} {}: {}",
                bad.feature,
                bad.status.label(),
                bad.reason
            ));
            return Ok(());
        }
        if let (false, Some(reference)) = (served, self.reference) {
            let got = ab::collect(url, launched.running.api, self.ab_tokens)?;
            let cmp = ab::compare(reference, &got, (self.ab_tokens / 2) as usize);
            e.evidence.push(format!(
                "greedy A/B: {} ({:.1}% tokens agree)",
                cmp.verdict,
                cmp.agreement * 100.0
            ));
            if cmp.verdict == "wrong output" {
                e.disqualified = Some(format!(
                    "wrong greedy output ({:.1}% tokens agree with the baseline)",
                    cmp.agreement * 100.0
                ));
            }
        }
        Ok(())
    }
}

impl Evaluate for Evaluator<'_> {
    fn evaluate(&mut self, v: &Variant, rung: Rung, qualify: bool, e: &mut Entry) {
        if let Err(err) = self.launch_and_measure(v, rung, qualify, e) {
            let msg = err.to_string();
            eprintln!("kiln: tune: `{}` failed: {msg}", v.name());
            e.disqualified = Some(format!("failed: {}", msg.lines().next().unwrap_or("")));
        }
    }

    fn stopped(&self) -> bool {
        crate::process::interrupted()
    }
}

fn write_winner(
    eval: &Evaluator,
    recipe: &Recipe,
    name: &str,
    best: &Entry,
    against: Option<&str>,
    method: Method,
    dir: &std::path::Path,
) -> Result<()> {
    let (_, winner) = eval.resolve(&best.variant)?;
    let base = against
        .map(|b| {
            pipeline::Variant::pick(recipe, Some(b))
                .map(|v| (v.name.to_string(), v.profile.clone()))
        })
        .transpose()?;
    let best_name = format!("{name}-best");
    let m = best.last().expect("a ranked winner was measured");
    let file = render::WinnerFile {
        recipe: &recipe.name,
        name: &best_name,
        profile: &winner,
        baseline: base.as_ref().map(|(n, p)| (n.as_str(), p)),
        summary: format!("{} at {:.1} tok/s", best.variant.name(), m.tok_s),
        method,
    };
    let path = dir.join(format!("{best_name}.toml"));
    write_atomic(&path, file.render().as_bytes())?;
    println!(
        "winner: {} ({:.1} tok/s): {}",
        best.variant.name(),
        m.tok_s,
        path.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::set_flag;

    #[test]
    fn flags_are_replaced_not_repeated() {
        let mut a: Vec<String> = ["-b", "1024", "-ub=512", "-t", "2"]
            .map(String::from)
            .to_vec();
        set_flag(&mut a, "-b", "256");
        set_flag(&mut a, "-ub", "64");
        set_flag(&mut a, "-fa", "on");
        assert_eq!(a, ["-b", "256", "-ub=64", "-t", "2", "-fa", "on"]);
        // A bare switch followed by another flag gets its value; the next flag keeps its own.
        let mut b: Vec<String> = ["--flash-attn", "-t", "2", "--neg", "-1"]
            .map(String::from)
            .to_vec();
        set_flag(&mut b, "--flash-attn", "on");
        set_flag(&mut b, "--neg", "-2");
        assert_eq!(b, ["--flash-attn", "on", "-t", "2", "--neg", "-2"]);
    }
}
