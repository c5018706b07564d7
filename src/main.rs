use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = kiln::cli::Cli::parse();
    match kiln::commands::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("{}", e.render());
            ExitCode::from(e.exit_code())
        }
    }
}
