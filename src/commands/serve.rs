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
        state_dir: &settings.state_dir,
        detach,
        timeout,
    };
    serve::start(&launch, &mut |s: &str| eprintln!("kiln: {s}"))
}

pub fn run(settings: &Settings, args: &ServeArgs) -> Result<u8> {
    let recipe = settings.load_recipe(&args.recipe)?;
    if args.stop {
        return match serve::stop_recorded(&settings.state_dir, &recipe.name)? {
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
    let (name, profile) = pick_profile(&recipe, args.profile.as_deref())?;
    let sigs = signatures_for(profile)?;
    if let Some(log) = &args.log {
        return judge_captured(
            &sigs,
            &name,
            profile,
            log,
            args.metrics.as_deref(),
            args.json,
        );
    }
    crate::process::catch_interrupts();
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
        state_dir: &settings.state_dir,
        detach: args.detach,
        timeout,
    };
    let mut running = serve::start(&launch, &mut |s: &str| eprintln!("kiln: {s}"))?;
    let verdicts = judge(&sigs, profile, &running, false);
    print_verdicts(&name, &running, &verdicts, args.json);
    let code = verdict_code(&verdicts);
    let Some(url) = running.record.url.clone() else {
        return verdict_finding(code, &name, &verdicts);
    };
    if args.detach {
        eprintln!(
            "kiln: left running at {url} (process group {}); stop it with `kiln serve --stop`",
            running.record.pid
        );
        running.leave_running();
        return verdict_finding(code, &name, &verdicts);
    }
    eprintln!(
        "kiln: serving at {url} (process group {}); Ctrl-C stops it",
        running.record.pid
    );
    loop {
        if crate::process::interrupted() {
            running.stop(&settings.state_dir);
            eprintln!("kiln: stopped");
            return verdict_finding(code, &name, &verdicts);
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
            running.stop(&settings.state_dir);
            return Err(err);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Verdicts from a log captured earlier (and its metrics page): nothing is launched; the server is
/// taken to have answered requests.
fn judge_captured(
    sigs: &Signatures,
    name: &str,
    profile: &Profile,
    log: &std::path::Path,
    metrics: Option<&std::path::Path>,
    json: bool,
) -> Result<u8> {
    let read = |p: &std::path::Path| {
        std::fs::read(p)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .map_err(|e| Error::io(format!("cannot read {}", p.display()), e))
    };
    let text = read(log)?;
    let all: Vec<String> = text.lines().map(String::from).collect();
    let lines = match all.iter().rposition(|l| l.starts_with("=== kiln serve")) {
        Some(start) => all[start..].to_vec(),
        None => all,
    };
    let metrics = metrics.map(read).transpose()?;
    let ev = verdict::Evidence {
        log: &lines,
        metrics: metrics.as_deref(),
        after_traffic: true,
    };
    let verdicts = verdict::judge(sigs, profile, &ev);
    if json {
        let v = serde_json::json!({ "profile": name, "log": log, "verdicts": verdicts });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).expect("verdicts serialize")
        );
    } else {
        println!("profile `{name}` judged from {}", log.display());
        for v in &verdicts {
            println!("{}", v.line());
        }
    }
    Ok(verdict_code(&verdicts))
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

/// Verdicts from the log, the server's metrics and its own settings endpoint. A feature whose
/// evidence shows only under traffic gets one short greedy request first, unless `served` says
/// the server has answered requests already (after a benchmark).
pub(super) fn judge(
    sigs: &Signatures,
    profile: &Profile,
    running: &Running,
    served: bool,
) -> Vec<Verdict> {
    let url = running.record.url.as_deref();
    let mut after_traffic = served;
    if let (false, true, Some(url)) = (served, sigs.needs_traffic(), url) {
        let req = crate::bench::client::Request {
            prompt: crate::bench::ab::PROMPTS[0],
            max_tokens: 32,
            greedy: true,
            ignore_eos: true,
            timeout: Duration::from_secs(120),
        };
        after_traffic = crate::bench::client::generate(url, running.api, &req).is_ok();
    }
    let log = current_run(&running.record.log).unwrap_or_else(|| running.log.clone());
    let metrics = url
        .zip(sigs.metrics.as_deref())
        .and_then(|(u, path)| serve::fetch_text(&format!("{}{path}", u.trim_end_matches('/'))));
    let ev = verdict::Evidence {
        log: &log,
        metrics: metrics.as_deref(),
        after_traffic,
    };
    let mut verdicts = verdict::judge(sigs, profile, &ev);
    let info = url.and_then(|u| serve::server_info(sigs, u));
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

/// The lines of the server log written by the latest launch (the log is appended to, one
/// `=== kiln serve` header per launch).
fn current_run(path: &std::path::Path) -> Option<Vec<String>> {
    let lines = read_lines(path);
    let start = lines
        .iter()
        .rposition(|l| l.starts_with("=== kiln serve"))?;
    Some(lines[start..].to_vec())
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

/// The exit of `kiln serve`: 0, or an error that names the tunings not proven active.
fn verdict_finding(code: u8, profile: &str, verdicts: &[Verdict]) -> Result<u8> {
    Error::finding(code, || {
        (verdict_problems(profile, verdicts).join("; "), None)
    })
}

/// One phrase per tuning that is not active: "`tuned`: flash-attn fell back (reason)".
pub(super) fn verdict_problems(profile: &str, verdicts: &[Verdict]) -> Vec<String> {
    verdicts
        .iter()
        .filter(|v| v.status != Status::Active)
        .map(|v| {
            format!(
                "profile `{profile}`: {} {} ({})",
                v.feature,
                v.status.label(),
                v.reason
            )
        })
        .collect()
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
