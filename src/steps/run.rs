//! `kind = "run"`: a program with an argv (no shell), or a script with `shell = true`.

use std::io::Write;

use crate::error::{Error, Result};
use crate::process::{self, CommandSpec};
use crate::recipe::{Cmd, Step};

pub(crate) fn spec(step: &Step, cmd: &Cmd) -> CommandSpec {
    let (program, args) = match cmd {
        Cmd::Argv(argv) => (argv[0].clone(), argv[1..].to_vec()),
        Cmd::Shell(script) => ("sh".to_string(), vec!["-c".to_string(), script.clone()]),
    };
    CommandSpec {
        program,
        args,
        env: super::build_env(step),
        cwd: Some(step.cwd.clone()),
    }
}

pub(crate) fn run(
    step: &Step,
    cmd: &Cmd,
    log: &mut dyn Write,
    on_line: &mut dyn FnMut(&str),
) -> Result<()> {
    run_spec(&step.id, &spec(step, cmd), step.timeout, log, on_line)
}

/// Run one command of a step; a failure becomes `StepFailed` with the output tail.
pub(crate) fn run_spec(
    step: &str,
    spec: &CommandSpec,
    timeout: Option<std::time::Duration>,
    log: &mut dyn Write,
    on_line: &mut dyn FnMut(&str),
) -> Result<()> {
    let _ = writeln!(log, "$ {}", spec.display());
    let done = process::run_logged(spec, log, timeout, on_line)?;
    if done.success() {
        return Ok(());
    }
    Err(Error::StepFailed {
        step: step.to_string(),
        reason: format!("`{}` {}", spec.display(), done.describe()),
        log: None,
        hint: None,
        tail: done.tail,
    })
}
