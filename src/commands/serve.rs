//! `kiln serve`: start a profile, wait for readiness, print tuning verdicts; stay in the
//! foreground until Ctrl-C (or `--detach`); `--stop` ends a recorded server's process group.

use std::time::Duration;

use serde::Serialize;

use super::{show, Settings};
use crate::cli::ServeArgs;
use crate::error::{Error, Result};
use crate::pipeline::{self, Variant};
use crate::report::Block;
use crate::serve;
use crate::serve::verdict::Verdict;

pub(super) fn run(settings: &Settings, args: &ServeArgs) -> Result<u8> {
    crate::report::json_lines(args.json);
    if args.stop {
        return stop(settings, args);
    }
    let recipe = settings.load_recipe(&args.recipe)?;
    if args.log.is_none() {
        super::preflight::launch(settings, &args.recipe, &recipe, &[args.profile.as_deref()])?;
    }
    let s = settings.session(&recipe);
    let v = Variant::pick(&recipe, args.profile.as_deref())?;
    if let Some(log) = &args.log {
        let verdicts = pipeline::verdicts_from_capture(v, log, args.metrics.as_deref())?;
        show::captured_verdicts(v.name, log, &verdicts);
        return verdict_finding(v.name, &verdicts);
    }
    crate::process::catch_interrupts();
    let timeout = args.timeout.map(Duration::from_secs);
    let mut launched = pipeline::launch(s, v, args.detach, timeout, &mut show::say)?;
    let verdicts = pipeline::verdicts(&launched, false);
    show::verdicts(&launched, &verdicts);
    let Some(url) = launched.running.record.url.clone() else {
        return verdict_finding(v.name, &verdicts);
    };
    let pid = launched.running.record.pid;
    show::served(
        &show::recipe_named(&args.recipe, &recipe),
        v.name,
        &url,
        pid,
        args.detach,
    );
    if args.detach {
        launched.leave_running();
        return verdict_finding(v.name, &verdicts);
    }
    loop {
        if crate::process::interrupted() {
            launched.stop(s);
            show::say("stopped");
            return verdict_finding(v.name, &verdicts);
        }
        if !launched.running.alive() {
            let log = launched.running.record.log.clone();
            let log_lines = launched.log_lines();
            let err = serve::exited(
                &pipeline::launch_of(s, &launched, timeout),
                &log_lines,
                "exited while serving",
                launched.running.ready_after,
                &log,
            );
            launched.stop(s);
            return Err(err);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `kiln serve --stop`: end the recorded server of the recipe (a `stopped` event).
fn stop(settings: &Settings, args: &ServeArgs) -> Result<u8> {
    #[derive(Serialize)]
    struct StoppedEvent<'a> {
        recipe: &'a str,
        /// `ended`, `nothing` (no server recorded) or `stale` (the record was removed).
        stopped: &'a str,
        profile: Option<&'a str>,
        pid: Option<u32>,
        why: Option<&'a str>,
    }
    // Only the recipe's name: stopping must not ask for its required `--set` values.
    let spec = settings.recipe_spec(&args.recipe)?;
    let name = crate::recipe::name_of(Some(&spec.name), &settings.paths)?;
    let stopped = serve::stop_recorded(&settings.paths, &name)?;
    let (what, record, why, text) = match &stopped {
        serve::Stopped::Ended(r) => ("ended", Some(r), None, format!(
            "kiln: stopped profile `{}` of {name} (process group {})", r.profile, r.pid
        )),
        serve::Stopped::Nothing => ("nothing", None, None, format!(
            "kiln: no running server recorded for {name}"
        )),
        serve::Stopped::Stale(r, why) => ("stale", Some(r), Some(why.as_str()), format!(
            "kiln: the record of profile `{}` of {name} is stale: {why}; nothing was signalled and the record was removed",
            r.profile
        )),
    };
    let event = StoppedEvent {
        recipe: &name,
        stopped: what,
        profile: record.map(|r| r.profile.as_str()),
        pid: record.map(|r| r.pid),
        why,
    };
    crate::report::current().result(&Block::new("stopped", text, &event).milestone());
    Ok(0)
}

/// The exit of `kiln serve`: 0 when every tuning is active, else an error that names those that
/// are not (status 1 for fell back or unknown, 2 for crashed), and a hint that tells a tuning
/// that failed from one nothing proved either way.
fn verdict_finding(profile: &str, verdicts: &[Verdict]) -> Result<u8> {
    Error::finding(pipeline::verdict_code(verdicts), || {
        (
            pipeline::verdict_problems(profile, verdicts).join("; "),
            Some(verdict_hint(verdicts).into()),
        )
    })
}

/// What to do about the tunings that are not active: a failure's evidence is above; `configured`
/// and `unknown` are not proven either way, which `kiln up` only warns about.
fn verdict_hint(verdicts: &[Verdict]) -> &'static str {
    if verdicts.iter().any(|v| v.status.is_failure()) {
        "each verdict's evidence line above says why; `kiln doctor` checks the gates behind most fallbacks"
    } else {
        "not proven either way (configured: only the server's settings name it; unknown: no line \
         decided it): `kiln up` takes these as warnings, failing only with --strict"
    }
}
