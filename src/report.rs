//! How kiln talks to the user: the one `Reporter` trait and its three renderers — a terminal
//! with progress bars and colour (`tty`), plain lines (`plain`: no terminal, `--no-progress`,
//! `--quiet`) and JSON lines (`json`: `--json`, a `schema` version on the first event, typed
//! events). The engine only ever sees `&dyn Reporter`; indicatif lives in the terminal form alone.
//!
//! The process-wide choices (`--quiet`, `--no-progress`, `--color`, `--json`) are set once by
//! [`configure`]; [`current`] is the reporter every command, and `main`'s error line, speak through.

mod events;
pub(crate) mod human;
mod json;
mod plain;
pub(crate) mod style;
mod tee;
mod tty;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use serde::Serialize;

pub(crate) use events::Block;
pub(crate) use style::ColorWhen;

/// How one step ended in a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", content = "detail", rename_all = "snake_case")]
pub(crate) enum Outcome {
    Ran,
    /// Its outputs came from the step cache: the entry's short id.
    Restored(String),
    /// Its fingerprint matched once its dependencies were done.
    UpToDate,
    Skipped(String),
    Failed(String),
    /// Not started because a dependency failed.
    NotRun(String),
}

/// How far a long compile is (ninja's `[done/total]`), with an ETA when one can be given.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct BuildProgress {
    pub(crate) done: u64,
    pub(crate) total: u64,
    pub(crate) elapsed: Duration,
    /// From the last run of the same step (`last_run`), else from the rate so far.
    pub(crate) eta: Option<Duration>,
    /// How long the same step took the last time it completed.
    pub(crate) last_run: Option<Duration>,
    /// The lowest rate-based ETA given so far, when this one is well above it (it grew).
    pub(crate) grew_from: Option<Duration>,
}

/// Every user-facing line of a kiln run. Methods with a default do nothing in a renderer that
/// has nothing to show for them (a plain log has no live lines).
pub(crate) trait Reporter: Send + Sync {
    fn run_started(&self, recipe: &str, to_run: usize, total: usize);
    fn step_started(&self, id: &str, kind: &str, attempt: u32);
    fn step_output(&self, id: &str, line: &str);
    /// How far a step's transfer got (a download, an archive read): `done` of `total` bytes.
    fn step_bytes(&self, _id: &str, _done: u64, _total: Option<u64>) {}
    /// A long compile moved (objects done of total); plain lines show each quarter of it.
    fn step_progress(&self, _id: &str, _p: &BuildProgress) {}
    fn step_finished(&self, id: &str, outcome: &Outcome, elapsed: Duration);
    fn run_finished(&self, ok: bool, elapsed: Duration);
    /// A milestone (`kiln: ...`): said unless `--quiet`.
    fn note(&self, text: &str);
    /// Something the user should look at (`warning: ...`): said even with `--quiet`.
    fn warning(&self, text: &str);
    /// How far a transfer outside the steps got (`kiln cache push`, `kiln image export`).
    fn transfer(&self, _what: &str, _done: u64, _total: Option<u64>) {}
    /// The transfer `what` ended (its bar goes away).
    fn transfer_finished(&self, _what: &str) {}
    /// A line that replaces itself while work goes on (a bench run's tokens so far): on a
    /// terminal only; `None` clears it.
    fn live(&self, _what: &str, _text: Option<&str>) {}
    /// A result block: its text on stdout, or one JSON event.
    fn result(&self, block: &Block);
    /// How the command ended: `error` (with its rendered text) when it failed.
    fn finished(&self, exit_code: u8, error: Option<&crate::error::Error>);
}

/// A copy loop's view of the reporter: bytes done so far of a total, when known.
pub(crate) trait Progress {
    fn bytes(&self, done: u64, total: Option<u64>);
}

/// No progress to show (tests, and callers outside a run).
impl Progress for () {
    fn bytes(&self, _done: u64, _total: Option<u64>) {}
}

impl<F: Fn(u64, Option<u64>)> Progress for F {
    fn bytes(&self, done: u64, total: Option<u64>) {
        self(done, total);
    }
}

/// A reader that tells [`current`] how far the transfer `what` got (`kiln cache push/pull`): a
/// bar with bytes, rate and ETA on a terminal; the bar goes when the reader is dropped.
pub(crate) struct Counted<R> {
    inner: R,
    what: String,
    done: u64,
    total: Option<u64>,
}

impl<R> Counted<R> {
    pub(crate) fn new(what: &str, total: Option<u64>, inner: R) -> Counted<R> {
        Counted {
            inner,
            what: what.to_string(),
            done: 0,
            total,
        }
    }
}

impl<R: std::io::Read> std::io::Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.done += n as u64;
        current().transfer(&self.what, self.done, self.total);
        Ok(n)
    }
}

impl<R> Drop for Counted<R> {
    fn drop(&mut self) {
        current().transfer_finished(&self.what);
    }
}

/// The process-wide output choices, from the global flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Output {
    /// JSON lines on stdout (`--json`).
    pub(crate) json: bool,
    /// Only results, warnings and errors (`--quiet`).
    pub(crate) quiet: bool,
    /// No bars or spinners, even on a terminal (`--no-progress`, `KILN_NO_PROGRESS`).
    pub(crate) no_progress: bool,
    pub(crate) color: ColorWhen,
}

static OUTPUT: OnceLock<Output> = OnceLock::new();
/// A command's own `--json` ([`json_lines`]), on top of [`configure`]'s choice.
static JSON_LINES: AtomicBool = AtomicBool::new(false);
static CURRENT: OnceLock<Box<dyn Reporter>> = OnceLock::new();
static CURRENT_JSON: OnceLock<Box<dyn Reporter>> = OnceLock::new();

/// Set the output choices for this process (first call wins; `main` makes it once).
pub(crate) fn configure(output: Output) {
    let _ = OUTPUT.set(output);
    style::apply(output.color);
}

/// A command's `--json` flag: with `on`, everything from here on (results, milestones, the
/// `error` and `outcome` that end the command) is JSON lines on stdout.
pub(crate) fn json_lines(on: bool) {
    if on {
        JSON_LINES.store(true, Ordering::SeqCst);
    }
}

/// The choices [`configure`] set (defaults before it), with a command's [`json_lines`].
pub(crate) fn output() -> Output {
    let mut output = OUTPUT.get().copied().unwrap_or_default();
    output.json |= JSON_LINES.load(Ordering::SeqCst);
    output
}

/// The reporter of this process, built from [`output`] on first use (JSON lines once a
/// command asked for them, even if something was said before).
pub(crate) fn current() -> &'static dyn Reporter {
    let output = output();
    let cell = if output.json { &CURRENT_JSON } else { &CURRENT };
    cell.get_or_init(|| build(output)).as_ref()
}

/// A reporter for `output`: JSON lines (and bars on stderr when a person is at the terminal
/// and stdout goes elsewhere), bars on a terminal, or plain lines.
pub(crate) fn build(output: Output) -> Box<dyn Reporter> {
    use std::io::IsTerminal;
    let person_at_stderr = !output.quiet && !output.no_progress && std::io::stderr().is_terminal();
    if output.json && person_at_stderr && !std::io::stdout().is_terminal() {
        // `--json > file` at a terminal: the JSON to the file, the progress to the person.
        Box::new(tee::JsonAndProgress {
            json: json::JsonReporter::default(),
            tty: tty::TtyReporter::default(),
        })
    } else if output.json {
        Box::new(json::JsonReporter::default())
    } else if !output.quiet && !output.no_progress && std::io::stderr().is_terminal() {
        Box::new(tty::TtyReporter::default())
    } else {
        Box::new(plain::PlainReporter::new(output.quiet))
    }
}

/// A handle on [`current`] for callers that own a `Box<dyn Reporter>`.
pub(crate) struct Current;

impl Reporter for Current {
    fn run_started(&self, recipe: &str, to_run: usize, total: usize) {
        current().run_started(recipe, to_run, total);
    }
    fn step_started(&self, id: &str, kind: &str, attempt: u32) {
        current().step_started(id, kind, attempt);
    }
    fn step_output(&self, id: &str, line: &str) {
        current().step_output(id, line);
    }
    fn step_bytes(&self, id: &str, done: u64, total: Option<u64>) {
        current().step_bytes(id, done, total);
    }
    fn step_progress(&self, id: &str, p: &BuildProgress) {
        current().step_progress(id, p);
    }
    fn step_finished(&self, id: &str, outcome: &Outcome, elapsed: Duration) {
        current().step_finished(id, outcome, elapsed);
    }
    fn run_finished(&self, ok: bool, elapsed: Duration) {
        current().run_finished(ok, elapsed);
    }
    fn note(&self, text: &str) {
        current().note(text);
    }
    fn warning(&self, text: &str) {
        current().warning(text);
    }
    fn transfer(&self, what: &str, done: u64, total: Option<u64>) {
        current().transfer(what, done, total);
    }
    fn transfer_finished(&self, what: &str) {
        current().transfer_finished(what);
    }
    fn live(&self, what: &str, text: Option<&str>) {
        current().live(what, text);
    }
    fn result(&self, block: &Block) {
        current().result(block);
    }
    fn finished(&self, exit_code: u8, error: Option<&crate::error::Error>) {
        current().finished(exit_code, error);
    }
}

/// `n thing` or `n things`.
pub(crate) fn count(n: usize, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_say_one_step_and_two_steps() {
        assert_eq!(count(1, "step"), "1 step");
        assert_eq!(count(0, "step"), "0 steps");
        assert_eq!(count(2, "step"), "2 steps");
    }
}
