//! Plain lines on stderr, results on stdout: for logs and pipes (no terminal, `--no-progress`,
//! `--quiet`). Transfers show a line per quarter of their size, not a line per chunk; a long
//! compile a line per quarter of its objects.

// The reporter is how kiln talks to the user: it prints.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use super::{human, Block, Outcome, Reporter};

/// Without a total, a transfer line every this many bytes.
const UNSIZED_STEP: u64 = 256 << 20;

pub(super) struct PlainReporter {
    /// Only warnings, results and errors.
    pub(super) quiet: bool,
    /// The last mark (quarter, or multiple of [`UNSIZED_STEP`]) said per transfer.
    marks: Mutex<BTreeMap<String, u64>>,
}

impl PlainReporter {
    pub(super) fn new(quiet: bool) -> PlainReporter {
        PlainReporter {
            quiet,
            marks: Mutex::new(BTreeMap::new()),
        }
    }

    fn say(&self, line: &str) {
        if !self.quiet {
            eprintln!("{}", crate::redact::scrub(line));
        }
    }

    /// A line when the transfer `what` passed a new mark.
    fn progress(&self, what: &str, done: u64, total: Option<u64>) {
        let mark = match total {
            Some(t) if t > 0 => done.min(t) * 4 / t,
            _ => done / UNSIZED_STEP,
        };
        let mut marks = self.marks.lock().expect("reporter lock");
        let last = marks.entry(what.to_string()).or_insert(0);
        if mark > *last {
            *last = mark;
            drop(marks);
            self.say(&format!("    {what}: {}", human::transfer(done, total)));
        }
    }
}

impl Reporter for PlainReporter {
    fn run_started(&self, recipe: &str, to_run: usize, total: usize) {
        self.say(&human::run_header(recipe, to_run, total));
    }
    fn step_started(&self, id: &str, kind: &str, attempt: u32) {
        self.say(&format!(
            "  start  {id} [{kind}]{}",
            human::attempt(attempt)
        ));
    }
    fn step_output(&self, _id: &str, _line: &str) {}
    /// A long compile: a line at each quarter of its objects (a log's reader sees it move).
    fn step_progress(&self, id: &str, p: &super::BuildProgress) {
        let quarter = p.done.min(p.total) * 4 / p.total.max(1);
        let mut marks = self.marks.lock().expect("reporter lock");
        let last = marks.entry(format!("{id} objects")).or_insert(0);
        if quarter > *last {
            *last = quarter;
            drop(marks);
            let eta = human::eta(p);
            self.say(&format!(
                "    {id}: {} of {} objects, {}{}{eta}",
                p.done,
                p.total,
                human::secs(p.elapsed),
                if eta.is_empty() { "" } else { ", " }
            ));
        }
    }
    fn step_bytes(&self, id: &str, done: u64, total: Option<u64>) {
        self.progress(id, done, total);
    }
    fn step_finished(&self, id: &str, outcome: &Outcome, elapsed: Duration) {
        let mut marks = self.marks.lock().expect("reporter lock");
        marks.remove(id);
        marks.remove(&format!("{id} objects"));
        drop(marks);
        let line = human::outcome_line(id, outcome, elapsed);
        if matches!(outcome, Outcome::Failed(_)) {
            eprintln!("{}", crate::redact::scrub(&line));
        } else {
            self.say(&line);
        }
    }
    fn run_finished(&self, ok: bool, elapsed: Duration) {
        self.say(&human::run_end(ok, elapsed));
    }
    fn note(&self, text: &str) {
        self.say(&format!("kiln: {text}"));
    }
    fn warning(&self, text: &str) {
        eprintln!("{}", crate::redact::scrub(&human::warning(text)));
    }
    fn transfer(&self, what: &str, done: u64, total: Option<u64>) {
        self.progress(what, done, total);
    }
    fn transfer_finished(&self, what: &str) {
        self.marks.lock().expect("reporter lock").remove(what);
    }
    fn result(&self, block: &Block) {
        show(block, self.quiet);
    }
    fn finished(&self, _exit_code: u8, error: Option<&crate::error::Error>) {
        if let Some(e) = error {
            eprintln!("{}", super::style::labels(&e.render()));
        }
    }
}

/// A result block for a human: stdout, or stderr for a milestone (not with `--quiet`).
pub(super) fn show(block: &Block, quiet: bool) {
    if block.text.is_empty() {
        return;
    }
    let text = crate::redact::scrub(&block.text);
    let nl = if text.ends_with('\n') { "" } else { "\n" };
    if block.milestone {
        if !quiet {
            eprint!("{text}{nl}");
        }
    } else {
        print!("{text}{nl}");
    }
}
