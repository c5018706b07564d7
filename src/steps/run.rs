//! `kind = "run"`: a program with an argv (no shell), or a script with `shell = true`.

use std::io::Write;

use crate::error::{Error, Result};
use crate::process::{self, CommandSpec};
use crate::recipe::{Cmd, Step};

pub fn spec(step: &Step, cmd: &Cmd) -> CommandSpec {
    let (program, args) = match cmd {
        Cmd::Argv(argv) => (argv[0].clone(), argv[1..].to_vec()),
        Cmd::Shell(script) => ("sh".to_string(), vec!["-c".to_string(), script.clone()]),
    };
    CommandSpec {
        program,
        args,
        env: step.env.clone(),
        cwd: Some(step.cwd.clone()),
    }
}

pub fn run(step: &Step, cmd: &Cmd, log: &mut dyn Write, on_line: &mut dyn FnMut(&str)) -> Result<()> {
    let spec = spec(step, cmd);
    let _ = writeln!(log, "$ {}", spec.display());
    let done = process::run_logged(&spec, log, step.timeout, on_line)?;
    if done.success() {
        return Ok(());
    }
    Err(Error::StepFailed {
        step: step.id.clone(),
        reason: format!("`{}` {}", spec.display(), done.describe()),
        log: None,
        tail: done.tail,
    })
}
