//! `kiln serve`: start a profile, wait for readiness, print tuning verdicts; stay in the
//! foreground until Ctrl-C (or `--detach`); `--stop` ends a recorded server's process group.

use std::time::Duration;

use super::{show, Settings};
use crate::cli::ServeArgs;
use crate::error::{Error, Result};
use crate::pipeline::{self, Variant};
use crate::serve;
use crate::serve::verdict::Verdict;

pub(super) fn run(settings: &Settings, args: &ServeArgs) -> Result<u8> {
    if args.stop {
        // Only the recipe's name: stopping must not ask for its required `--set` values.
        let spec = settings.recipe_spec(&args.recipe)?;
        let name = crate::recipe::name_of(Some(&spec.name), &settings.paths)?;
        match serve::stop_recorded(&settings.paths, &name)? {
            serve::Stopped::Ended(r) => eprintln!(
                "kiln: stopped profile `{}` of {name} (process group {})",
                r.profile, r.pid
            ),
            serve::Stopped::Nothing => {
                eprintln!("kiln: no running server recorded for {name}");
            }
            serve::Stopped::Stale(r, why) => eprintln!(
                "kiln: the record of profile `{}` of {name} is stale: {why}; nothing was signalled and the record was removed",
                r.profile
            ),
        }
        return Ok(0);
    }
    let recipe = settings.load_recipe(&args.recipe)?;
    if args.log.is_none() {
        super::preflight::launch(settings, &args.recipe, &recipe, &[args.profile.as_deref()])?;
    }
    let s = settings.session(&recipe);
    let v = Variant::pick(&recipe, args.profile.as_deref())?;
    if let Some(log) = &args.log {
        let verdicts = pipeline::verdicts_from_capture(v, log, args.metrics.as_deref())?;
        show::captured_verdicts(v.name, log, &verdicts, args.json);
        return verdict_finding(v.name, &verdicts);
    }
    crate::process::catch_interrupts();
    let timeout = args.timeout.map(Duration::from_secs);
    let mut launched = pipeline::launch(s, v, args.detach, timeout, &mut show::say)?;
    let verdicts = pipeline::verdicts(&launched, false);
    show::verdicts(&launched, &verdicts, args.json);
    let Some(url) = launched.running.record.url.clone() else {
        return verdict_finding(v.name, &verdicts);
    };
    let pid = launched.running.record.pid;
    if args.detach {
        eprintln!(
            "kiln: left running at {url} (process group {pid}); stop it with `kiln serve --stop`"
        );
        launched.leave_running();
        return verdict_finding(v.name, &verdicts);
    }
    eprintln!("kiln: serving at {url} (process group {pid}); Ctrl-C stops it");
    loop {
        if crate::process::interrupted() {
            launched.stop(s);
            eprintln!("kiln: stopped");
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

/// The exit of `kiln serve`: 0 when every tuning is active, else an error that names those that
/// are not (status 1 for fell back or unknown, 2 for crashed).
fn verdict_finding(profile: &str, verdicts: &[Verdict]) -> Result<u8> {
    Error::finding(pipeline::verdict_code(verdicts), || {
        (
            pipeline::verdict_problems(profile, verdicts).join("; "),
            None,
        )
    })
}
