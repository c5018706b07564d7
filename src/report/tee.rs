//! `--json` with stdout taken (a file, a pipe) and a person at the terminal on stderr: the JSON
//! lines go to stdout as ever, and the terminal shows the run's progress (bars, step ends,
//! notes, warnings, milestones) instead of staying silent for the whole run. Results stay JSON
//! only; the error is said once (the JSON renderer writes it to stderr too).

use std::time::Duration;

use super::{json::JsonReporter, tty::TtyReporter, Block, BuildProgress, Outcome, Reporter};

pub(super) struct JsonAndProgress {
    pub(super) json: JsonReporter,
    pub(super) tty: TtyReporter,
}

impl Reporter for JsonAndProgress {
    fn run_started(&self, recipe: &str, to_run: usize, total: usize) {
        self.json.run_started(recipe, to_run, total);
        self.tty.run_started(recipe, to_run, total);
    }
    fn step_started(&self, id: &str, kind: &str, attempt: u32) {
        self.json.step_started(id, kind, attempt);
        self.tty.step_started(id, kind, attempt);
    }
    fn step_output(&self, id: &str, line: &str) {
        self.tty.step_output(id, line);
    }
    fn step_bytes(&self, id: &str, done: u64, total: Option<u64>) {
        self.json.step_bytes(id, done, total);
        self.tty.step_bytes(id, done, total);
    }
    fn step_progress(&self, id: &str, p: &BuildProgress) {
        self.json.step_progress(id, p);
        self.tty.step_progress(id, p);
    }
    fn step_finished(&self, id: &str, outcome: &Outcome, elapsed: Duration) {
        self.json.step_finished(id, outcome, elapsed);
        self.tty.step_finished(id, outcome, elapsed);
    }
    fn run_finished(&self, ok: bool, elapsed: Duration) {
        self.json.run_finished(ok, elapsed);
        self.tty.run_finished(ok, elapsed);
    }
    fn note(&self, text: &str) {
        self.json.note(text);
        self.tty.note(text);
    }
    fn warning(&self, text: &str) {
        self.json.warning(text);
        self.tty.warning(text);
    }
    fn transfer(&self, what: &str, done: u64, total: Option<u64>) {
        self.json.transfer(what, done, total);
        self.tty.transfer(what, done, total);
    }
    fn transfer_finished(&self, what: &str) {
        self.json.transfer_finished(what);
        self.tty.transfer_finished(what);
    }
    fn live(&self, what: &str, text: Option<&str>) {
        self.tty.live(what, text);
    }
    fn result(&self, block: &Block) {
        self.json.result(block);
        // A milestone is a line for the person (stderr); a result is the JSON alone.
        if block.milestone {
            self.tty.result(block);
        }
    }
    fn finished(&self, exit_code: u8, error: Option<&crate::error::Error>) {
        // The bars go; the error line comes from the JSON renderer (on stderr too).
        self.tty.finished(exit_code, None);
        self.json.finished(exit_code, error);
    }
}
