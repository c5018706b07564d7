//! Glue from command-line settings to the engine: one file per subcommand.

// Commands are where kiln prints: results on stdout, milestones on stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod bench;
mod cache;
mod doctor;
mod image;
mod man_sections;
mod man_text;
mod patch;
mod plan;
mod preflight;
mod serve;
mod settings;
mod shell_help;
mod show;
mod tune;
mod up;
mod verify;

use crate::cli::{Cli, Command, PatchAction};
use crate::error::{Error, Result};
use crate::report::Reporter;

pub use settings::Settings;

/// Run a parsed command line; the returned code is the process's exit status.
pub fn run(cli: Cli) -> Result<u8> {
    crate::report::configure(output(&cli));
    let settings = Settings::resolve(&cli)?;
    if !matches!(
        cli.command,
        Command::Completions { .. } | Command::Man { .. }
    ) {
        settings.paths.ensure_private()?;
        crate::hash::use_timestamp_granularity(crate::fs::timestamp_granularity(
            settings.paths.root(),
            &settings.paths.clock_granularity(),
        ));
    }
    match cli.command {
        Command::Up(args) => up::run(&settings, &args),
        Command::Plan(args) => plan::run(&settings, &args),
        Command::Doctor(args) => doctor::run(&settings, &args),
        Command::Patch(args) => patch::run(&settings, &args),
        Command::Serve(args) => serve::run(&settings, &args),
        Command::Bench(args) => bench::run(&settings, &args),
        Command::Verify(args) => verify::run(&settings, &args),
        Command::Tune(args) => tune::run(&settings, &args),
        Command::Image(args) => image::run(&settings, &args),
        Command::Cache(args) => cache::run(&settings, &args),
        Command::Completions { shell } => shell_help::completions(shell),
        Command::Man { command, text } => shell_help::man(&command, text),
    }
}

/// How a command ended, said through the reporter (`error:` on stderr, or the `error` and
/// `outcome` events with `--json`); the process's exit status.
pub fn finish(result: Result<u8>) -> u8 {
    let reporter = crate::report::current();
    match result {
        Ok(0) => {
            reporter.finished(0, None);
            0
        }
        // Commands turn a non-zero status into an `Error::Finding` that says why; this is the
        // guarantee that no failure ends without an `error:` line.
        Ok(code) => {
            let e = Error::other(
                format!("kiln exited with status {code} without a reason (a kiln bug: please report it)"),
                None,
            );
            reporter.finished(code, Some(&e));
            code
        }
        Err(e) => {
            let code = e.exit_code();
            reporter.finished(code, Some(&e));
            code
        }
    }
}

/// The output choices of a parsed command line: the global flags and the command's `--json`.
pub(crate) fn output(cli: &Cli) -> crate::report::Output {
    use crate::cli::ColorWhen;
    // Every `--json` means JSON lines (schema, typed events, `error` and `outcome`), from the
    // first line: a failure before the command starts (the state directory) is an event too.
    let json = match &cli.command {
        Command::Up(a) => a.json,
        Command::Plan(a) => a.json,
        Command::Doctor(a) => a.json,
        Command::Serve(a) => a.json,
        Command::Bench(a) => a.json,
        Command::Verify(a) => a.json,
        Command::Tune(a) => a.json,
        Command::Patch(a) => match &a.action {
            PatchAction::Apply(t) | PatchAction::Check(t) | PatchAction::Revert(t) => t.json,
        },
        Command::Cache(a) => a.json,
        Command::Image(a) => a.json,
        _ => false,
    };
    crate::report::Output {
        json,
        quiet: cli.quiet,
        no_progress: cli.no_progress,
        color: match cli.color {
            ColorWhen::Auto => crate::report::ColorWhen::Auto,
            ColorWhen::Always => crate::report::ColorWhen::Always,
            ColorWhen::Never => crate::report::ColorWhen::Never,
        },
    }
}

/// The hidden watchdog (`kiln __watchdog PARENT REGISTRY`, see [`crate::process::watchdog`]): kiln
/// starts it itself, so it is dispatched before the command line is parsed and is no subcommand
/// a shell could complete. `None` when `args` are not a watchdog's.
pub fn watchdog(args: &[std::ffi::OsString]) -> Option<Result<u8>> {
    match args {
        [_, cmd, parent, registry] if cmd == "__watchdog" => {
            let parent = parent.to_str().and_then(|p| p.parse().ok());
            Some(match parent {
                Some(parent) => {
                    crate::process::watchdog::watch(parent, std::path::Path::new(registry))
                }
                None => Err(Error::usage(
                    "usage: kiln __watchdog PARENT_PID REGISTRY",
                    None,
                )),
            })
        }
        [_, cmd, ..] if cmd == "__watchdog" => Some(Err(Error::usage(
            "usage: kiln __watchdog PARENT_PID REGISTRY",
            None,
        ))),
        _ => None,
    }
}

/// The reporter of this invocation ([`crate::report::current`]: its `--json` and global flags
/// chose the renderer); `_json` is the command's own flag, already folded into [`output`].
pub(crate) fn reporter(_json: bool) -> Box<dyn Reporter> {
    Box::new(crate::report::Current)
}
