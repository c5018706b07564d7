//! `kiln serve`: start a profile, wait for readiness, print tuning verdicts; stay in the
//! foreground until Ctrl-C (or `--detach`); `--stop` ends a recorded server's process group.

use std::time::Duration;

use super::Settings;
use crate::cli::ServeArgs;
use crate::error::{Error, Result};
use crate::recipe::{Profile, Recipe};
use crate::serve::signatures::Signatures;
use crate::serve::verdict::{self, Status, Verdict};
use crate::serve::{self, Launch, Running};

/// Start `profile` of `recipe`, narrating its milestones on stderr.
pub(super) fn launch(
    settings: &Settings,
    recipe: &Recipe,
    name: &str,
    profile: &Profile,
    sigs: &Signatures,
    detach: bool,
    timeout: Duration,
) -> Result<Running> {
    let launch = Launch {
        recipe: &recipe.name,
        profile_name: name,
        profile,
        sigs,
        paths: &settings.paths,
        detach,
        timeout,
    };
    serve::start(&launch, &mut |s: &str| eprintln!("kiln: {s}"))
}

pub fn run(settings: &Settings, args: &ServeArgs) -> Result<u8> {
    let recipe = settings.load_recipe(&args.recipe)?;
    if args.stop {
        return match serve::stop_recorded(&settings.paths, &recipe.name)? {
            Some(r) => {
                eprintln!(
                    "kiln: stopped profile `{}` of {} (process group {})",
                    r.profile, recipe.name, r.pid
                );
                Ok(0)
            }
            None => {
                eprintln!("kiln: no running server recorded for {}", recipe.name);
                Ok(0)
            }
        };
    }
    crate::process::catch_interrupts();
    let (name, profile) = pick_profile(&recipe, args.profile.as_deref())?;
    let sigs = signatures_for(profile)?;
    let timeout = args
        .timeout
        .map(Duration::from_secs)
        .or(profile.timeout)
        .unwrap_or(serve::DEFAULT_TIMEOUT);
    let launch = Launch {
        recipe: &recipe.name,
        profile_name: &name,
        profile,
        sigs: &sigs,
        paths: &settings.paths,
        detach: args.detach,
        timeout,
    };
    let mut running = serve::start(&launch, &mut |s: &str| eprintln!("kiln: {s}"))?;
    let verdicts = judge(&sigs, profile, &running);
    print_verdicts(&name, &running, &verdicts, args.json);
    let code = verdict_code(&verdicts);
    let Some(url) = running.record.url.clone() else {
        return Ok(code);
    };
    if args.detach {
        eprintln!(
            "kiln: left running at {url} (process group {}); stop it with `kiln serve --stop`",
            running.record.pid
        );
        running.leave_running();
        return Ok(code);
    }
    eprintln!(
        "kiln: serving at {url} (process group {}); Ctrl-C stops it",
        running.record.pid
    );
    loop {
        if crate::process::interrupted() {
            running.stop(&settings.paths);
            eprintln!("kiln: stopped");
            return Ok(code);
        }
        if !running.alive() {
            let log_lines = read_lines(&running.record.log);
            let err = serve::exited(
                &launch,
                &log_lines,
                "exited while serving",
                running.ready_after,
                &running.record.log,
            );
            running.stop(&settings.paths);
            return Err(err);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn read_lines(p: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// The profile to use: the named one, else `tuned`, else the only one.
pub(super) fn pick_profile<'r>(
    recipe: &'r Recipe,
    name: Option<&str>,
) -> Result<(String, &'r Profile)> {
    let names: Vec<&str> = recipe.profiles.keys().map(String::as_str).collect();
    let chosen = match name {
        Some(n) => n.to_string(),
        None if recipe.profiles.contains_key("tuned") => "tuned".into(),
        None if names.len() == 1 => names[0].to_string(),
        None if names.is_empty() => {
            return Err(Error::usage(
                format!("recipe `{}` has no server profile", recipe.name),
                Some("add a [profile.NAME] table with `cmd`, `args` and `port`".into()),
            ))
        }
        None => {
            return Err(Error::usage(
                format!("recipe `{}` has several profiles; pick one", recipe.name),
                Some(format!("pass --profile NAME: {}", names.join(", "))),
            ))
        }
    };
    match recipe.profiles.get(&chosen) {
        Some(p) => Ok((chosen, p)),
        None => {
            let hint = crate::diagnostic::did_you_mean(&chosen, names.iter().copied()).map_or(
                format!("profiles of `{}`: {}", recipe.name, names.join(", ")),
                |b| format!("did you mean `{b}`?"),
            );
            Err(Error::usage(
                format!("recipe `{}` has no profile `{chosen}`", recipe.name),
                Some(hint),
            ))
        }
    }
}

pub(super) fn signatures_for(p: &Profile) -> Result<Signatures> {
    match &p.signatures {
        Some(s) => Signatures::resolve(s, &p.dir),
        None => Ok(Signatures::empty()),
    }
}

/// Verdicts from the log, with the server's own settings endpoint as extra evidence.
pub(super) fn judge(sigs: &Signatures, profile: &Profile, running: &Running) -> Vec<Verdict> {
    let mut verdicts = verdict::judge(sigs, profile, &running.log);
    let info = running
        .record
        .url
        .as_deref()
        .and_then(|u| serve::server_info(sigs, u));
    if let Some(info) = info {
        for v in &mut verdicts {
            let key = v.feature.replace('-', "_");
            let value = info.get(format!("enable_{key}")).or_else(|| info.get(&key));
            if let Some(value) = value {
                let from = sigs.info.as_deref().unwrap_or("info");
                let note = format!(
                    "{from}: {}={value}",
                    if info.get(&key).is_some() {
                        key.clone()
                    } else {
                        format!("enable_{key}")
                    }
                );
                v.evidence = Some(match v.evidence.take() {
                    Some(e) => format!("{e}; {note}"),
                    None => note,
                });
            }
        }
    }
    verdicts
}

pub(super) fn print_verdicts(name: &str, running: &Running, verdicts: &[Verdict], json: bool) {
    if json {
        let v = serde_json::json!({
            "profile": name,
            "pid": running.record.pid,
            "url": running.record.url,
            "log": running.record.log,
            "ready_after_s": running.ready_after.as_secs_f64(),
            "verdicts": verdicts,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).expect("verdicts serialize")
        );
        return;
    }
    println!(
        "profile `{name}` ready after {:.1} s",
        running.ready_after.as_secs_f64()
    );
    if verdicts.is_empty() {
        println!("no tunings to judge (no flag of the profile has a signature)");
    }
    for v in verdicts {
        println!("{}", v.line());
    }
}

/// 0 when every tuning is active, 1 when one fell back or is unknown, 2 when one crashed.
pub(super) fn verdict_code(verdicts: &[Verdict]) -> u8 {
    verdicts
        .iter()
        .map(|v| match v.status {
            Status::Active => 0,
            Status::FellBack | Status::Unknown => 1,
            Status::Crashed => 2,
        })
        .max()
        .unwrap_or(0)
}

/// The tail of `kiln up`: greedy A/B against the profile's baseline (when it names one), serve
/// the profile (left running), judge its tunings, smoke-bench it, and write report.json and
/// report.md next to the recipe's state.
pub(super) fn up_pipeline(
    settings: &Settings,
    recipe: &Recipe,
    profile: Option<&str>,
) -> Result<u8> {
    crate::process::catch_interrupts();
    let (name, p) = pick_profile(recipe, profile)?;
    eprintln!("kiln: serving profile `{name}` of {}", recipe.name);
    let ab = match &p.baseline {
        Some(base) => Some(super::verify::compare(
            settings, recipe, base, &name, 64, 32,
        )?),
        None => None,
    };
    if let (Some(c), Some(base)) = (&ab, &p.baseline) {
        print!("{}", c.render(base, &name));
    }
    let sigs = signatures_for(p)?;
    let timeout = p.timeout.unwrap_or(serve::DEFAULT_TIMEOUT);
    let running = launch(settings, recipe, &name, p, &sigs, true, timeout)?;
    let verdicts = judge(&sigs, p, &running);
    print_verdicts(&name, &running, &verdicts, false);
    let bench = match running.record.url.clone() {
        Some(url) => {
            let opts = crate::bench::Options {
                url: &url,
                api: running.api,
                max_tokens: 2048,
                runs: 5,
                warmup: 2,
                prompt: crate::bench::DEFAULT_PROMPT,
                timeout: Duration::from_secs(1800),
            };
            Some(super::bench::measure(settings, &opts, false, None)?)
        }
        None => None,
    };
    let code = [
        verdict_code(&verdicts),
        ab.as_ref().map_or(0, |c| c.exit_code()),
        bench.as_ref().map_or(0, |b| b.exit_code()),
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    let report = serde_json::json!({
        "recipe": recipe.name,
        "profile": name,
        "url": running.record.url,
        "pid": running.record.pid,
        "ready_after_s": running.ready_after.as_secs_f64(),
        "verdicts": verdicts,
        "ab": ab,
        "bench": bench,
        "exit_code": code,
    });
    let dir = settings.paths.reports(&recipe.name);
    crate::fs::create_dir(&dir)?;
    crate::fs::write_atomic(
        &dir.join("report.json"),
        serde_json::to_string_pretty(&report)
            .expect("reports serialize")
            .as_bytes(),
    )?;
    let mut md = format!("# kiln up: {} (profile `{name}`)\n\nready after {:.1} s at {}\n\n## Tuning verdicts\n\n| feature | verdict | reason | evidence |\n|---|---|---|---|\n", recipe.name, running.ready_after.as_secs_f64(), running.record.url.as_deref().unwrap_or("-"));
    for v in &verdicts {
        md.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            v.feature,
            v.status.label(),
            v.reason,
            v.evidence.as_deref().unwrap_or("").replace('|', "\\|")
        ));
    }
    if let (Some(c), Some(base)) = (&ab, &p.baseline) {
        md.push_str(&format!(
            "\n## Greedy A/B\n\n```\n{}```\n",
            c.render(base, &name)
        ));
    }
    if let Some(b) = &bench {
        md.push_str(&format!("\n## Benchmark\n\n```\n{}```\n", b.render()));
    }
    crate::fs::write_atomic(&dir.join("report.md"), md.as_bytes())?;
    eprintln!("kiln: report: {}", dir.join("report.md").display());
    if let Some(url) = &running.record.url {
        eprintln!(
            "kiln: left running at {url} (process group {}); stop it with `kiln serve --stop`",
            running.record.pid
        );
    }
    running.leave_running();
    Ok(code)
}
