// main prints the error that ended the run.
#![allow(clippy::print_stderr)]

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // `kiln plan | head` should end quietly when the reader goes away, like other CLI tools.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = kiln::cli::Cli::parse();
    match kiln::commands::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("{}", e.render());
            ExitCode::from(e.exit_code())
        }
    }
}
