//! kiln's entry point: the hidden watchdog before anything else, then the command line, the
//! command, and how it ended (an `error:` on stderr, or `error`/`outcome` events with `--json`).

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

fn main() -> ExitCode {
    // `kiln plan | head` should end quietly when the reader goes away, like other CLI tools.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let result = match kiln::commands::watchdog(&args) {
        Some(result) => result,
        None => kiln::commands::run(parse(args)),
    };
    ExitCode::from(kiln::commands::finish(result))
}

/// The command line; clap's own errors and `--help` follow `--color` too.
fn parse(args: Vec<std::ffi::OsString>) -> kiln::cli::Cli {
    let color = match color_flag(&args) {
        Some("always") => clap::ColorChoice::Always,
        Some("never") => clap::ColorChoice::Never,
        _ => clap::ColorChoice::Auto,
    };
    let matches = kiln::cli::Cli::command()
        .color(color)
        .get_matches_from(args);
    kiln::cli::Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// The value of `--color WHEN` / `--color=WHEN`, before clap parses (the last one wins).
fn color_flag(args: &[std::ffi::OsString]) -> Option<&str> {
    let mut found = None;
    let mut it = args.iter().filter_map(|a| a.to_str());
    while let Some(a) = it.next() {
        if a == "--" {
            break;
        } else if a == "--color" {
            found = it.next();
        } else if let Some(v) = a.strip_prefix("--color=") {
            found = Some(v);
        }
    }
    found
}
