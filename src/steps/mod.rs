//! Step kinds: what running one step means. One file per kind.

pub mod extract;
pub mod fetch;
pub mod run;

use std::io::Write;

use crate::engine::hashing::HashMemo;
use crate::error::{Error, Result};
use crate::recipe::{Check, Step, StepKind};

/// Run one attempt of `step`, logging to `log`; `on_line` sees each output line.
pub fn execute(step: &Step, log: &mut dyn Write, on_line: &mut dyn FnMut(&str), memo: &HashMemo) -> Result<()> {
    crate::engine::state::create_dir(&step.cwd)?;
    match &step.kind {
        StepKind::Run { cmd } => run::run(step, cmd, log, on_line),
        StepKind::Fetch { url, sha256, path } => fetch::fetch(url, sha256, path, log, memo),
        StepKind::Extract { archive, dest, strip_components } => {
            extract::extract(archive, dest, *strip_components, log)
        }
    }
}

/// Prove the step's result exists: its `check` passes (no check: success is enough).
pub fn check(step: &Step, log: &mut dyn Write) -> Result<()> {
    match &step.check {
        None => Ok(()),
        Some(Check::Paths(paths)) => match paths.iter().find(|p| !p.exists()) {
            Some(p) => Err(Error::other(
                format!("check failed: {} does not exist", p.display()),
                Some("the step succeeded but did not produce what its `check` expects".into()),
            )),
            None => Ok(()),
        },
        Some(Check::Cmd(cmd)) => {
            let _ = writeln!(log, "--- check ---");
            let spec = run::spec(step, cmd);
            let done = crate::process::run_logged(&spec, log, step.timeout, &mut |_| {})?;
            if done.success() {
                Ok(())
            } else {
                Err(Error::other(
                    format!("check `{}` {}", spec.display(), done.describe()),
                    Some("the step succeeded but its `check` did not pass".into()),
                ))
            }
        }
    }
}
