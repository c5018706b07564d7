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
        Ok(0) => ExitCode::SUCCESS,
        // Commands turn a non-zero status into an `Error::Finding` that says why; this line is
        // the guarantee that no failure ends without an `error:` line.
        Ok(code) => {
            eprintln!("error: kiln exited with status {code} without a reason (a kiln bug: please report it)");
            ExitCode::from(code)
        }
        Err(e) => {
            eprintln!("{}", e.render());
            ExitCode::from(e.exit_code())
        }
    }
}
