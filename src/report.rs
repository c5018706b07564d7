//! How the engine talks to the user: the `Reporter` trait and its terminal, plain and JSON forms.
//! The engine only ever sees `&dyn Reporter`; indicatif lives in the terminal form alone.

// The reporter is how the engine talks to the user: it prints.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

/// How one step ended in a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", content = "detail", rename_all = "snake_case")]
pub enum Outcome {
    Ran,
    /// Its fingerprint matched once its dependencies were done.
    UpToDate,
    Skipped(String),
    Failed(String),
    /// Not started because a dependency failed.
    NotRun(String),
}

/// How far a long compile is (ninja's `[done/total]`), with an ETA when one can be given.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    pub done: u64,
    pub total: u64,
    pub elapsed: Duration,
    /// From the last run of the same step (`last_run`), else from the rate so far.
    pub eta: Option<Duration>,
    /// How long the same step took the last time it completed.
    pub last_run: Option<Duration>,
}

pub trait Reporter: Send + Sync {
    fn run_started(&self, recipe: &str, to_run: usize, total: usize);
    fn step_started(&self, id: &str, kind: &str, attempt: u32);
    fn step_output(&self, id: &str, line: &str);
    fn step_finished(&self, id: &str, outcome: &Outcome, elapsed: Duration);
    fn run_finished(&self, ok: bool, elapsed: Duration);
    fn note(&self, text: &str);
    /// A long compile moved (objects done of total); plain lines show nothing of it.
    fn step_progress(&self, _id: &str, _p: &Progress) {}
}

/// Plain lines on stderr (not a terminal, or `--no-progress`).
pub(crate) struct PlainReporter;

impl Reporter for PlainReporter {
    fn run_started(&self, recipe: &str, to_run: usize, total: usize) {
        eprintln!("kiln: {recipe}: {to_run} of {total} steps to run");
    }
    fn step_started(&self, id: &str, kind: &str, attempt: u32) {
        let again = if attempt > 1 {
            format!(" (attempt {attempt})")
        } else {
            String::new()
        };
        eprintln!("  start  {id} [{kind}]{again}");
    }
    fn step_output(&self, _id: &str, _line: &str) {}
    fn step_finished(&self, id: &str, outcome: &Outcome, elapsed: Duration) {
        eprintln!("{}", outcome_line(id, outcome, elapsed));
    }
    fn run_finished(&self, ok: bool, elapsed: Duration) {
        eprintln!(
            "kiln: {} in {}",
            if ok { "done" } else { "failed" },
            secs(elapsed)
        );
    }
    fn note(&self, text: &str) {
        eprintln!("kiln: {}", crate::redact::scrub(text));
    }
}

fn outcome_line(id: &str, outcome: &Outcome, elapsed: Duration) -> String {
    crate::redact::scrub(&match outcome {
        Outcome::Ran => format!("  ✓ ran    {id} ({})", secs(elapsed)),
        Outcome::UpToDate => format!("  ✓ fresh  {id}"),
        Outcome::Skipped(why) => format!("  - skip   {id}: {why}"),
        Outcome::Failed(why) => format!("  ✗ failed {id}: {why}"),
        Outcome::NotRun(why) => format!("  - notrun {id}: {why}"),
    })
}

fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// Spinners per running step and an overall bar, on a terminal.
pub(crate) struct ProgressReporter {
    multi: MultiProgress,
    overall: Mutex<Option<ProgressBar>>,
    spinners: Mutex<BTreeMap<String, ProgressBar>>,
}

impl Default for ProgressReporter {
    fn default() -> Self {
        ProgressReporter {
            multi: MultiProgress::with_draw_target(ProgressDrawTarget::stderr()),
            overall: Mutex::new(None),
            spinners: Mutex::new(BTreeMap::new()),
        }
    }
}

impl Reporter for ProgressReporter {
    fn run_started(&self, recipe: &str, to_run: usize, total: usize) {
        let bar = self.multi.add(ProgressBar::new(to_run as u64));
        bar.set_style(
            ProgressStyle::with_template("{prefix:.bold} [{bar:30}] {pos}/{len} steps, {elapsed}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        bar.set_prefix(format!("{recipe} ({total} steps)"));
        *self.overall.lock().expect("reporter lock") = Some(bar);
    }
    fn step_started(&self, id: &str, kind: &str, attempt: u32) {
        let sp = self.multi.add(ProgressBar::new_spinner());
        sp.set_style(
            ProgressStyle::with_template("  {spinner} {prefix} {elapsed} {wide_msg:.dim}")
                .expect("valid template"),
        );
        let again = if attempt > 1 {
            format!(" attempt {attempt}")
        } else {
            String::new()
        };
        sp.set_prefix(format!("{id} [{kind}]{again}"));
        sp.enable_steady_tick(Duration::from_millis(120));
        self.spinners
            .lock()
            .expect("reporter lock")
            .insert(id.to_string(), sp);
    }
    fn step_output(&self, id: &str, line: &str) {
        if let Some(sp) = self.spinners.lock().expect("reporter lock").get(id) {
            if sp.length().is_none() {
                sp.set_message(line.chars().take(100).collect::<String>());
            }
        }
    }
    fn step_progress(&self, id: &str, p: &Progress) {
        let Some(sp) = self
            .spinners
            .lock()
            .expect("reporter lock")
            .get(id)
            .cloned()
        else {
            return;
        };
        if sp.length().is_none() {
            // The spinner becomes a bar at the first `[k/N]`.
            sp.set_style(
                ProgressStyle::with_template(
                    "  {prefix} [{bar:24}] {pos}/{len} objects, {elapsed} {msg:.dim}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
        }
        sp.set_length(p.total);
        sp.set_position(p.done);
        sp.set_message(eta_text(p));
    }
    fn step_finished(&self, id: &str, outcome: &Outcome, elapsed: Duration) {
        if let Some(sp) = self.spinners.lock().expect("reporter lock").remove(id) {
            sp.finish_and_clear();
            self.multi.remove(&sp);
        }
        let _ = self.multi.println(outcome_line(id, outcome, elapsed));
        if matches!(
            outcome,
            Outcome::Ran | Outcome::UpToDate | Outcome::Failed(_)
        ) {
            if let Some(bar) = &*self.overall.lock().expect("reporter lock") {
                bar.inc(1);
            }
        }
    }
    fn run_finished(&self, ok: bool, elapsed: Duration) {
        if let Some(bar) = self.overall.lock().expect("reporter lock").take() {
            bar.finish_and_clear();
        }
        let _ = self.multi.println(format!(
            "kiln: {} in {}",
            if ok { "done" } else { "failed" },
            secs(elapsed)
        ));
    }
    fn note(&self, text: &str) {
        let _ = self
            .multi
            .println(format!("kiln: {}", crate::redact::scrub(text)));
    }
}

/// `ETA 8m50s (last build 15m30s)`, or the rate's ETA, or nothing to say.
fn eta_text(p: &Progress) -> String {
    let last = p
        .last_run
        .map(|l| format!(" (last build {})", secs(l)))
        .unwrap_or_default();
    match p.eta {
        Some(eta) => format!("ETA {}{last}", secs(eta)),
        None if p.last_run.is_some() => format!("past the last build's time{last}"),
        None => String::new(),
    }
}

/// One JSON object per line on stdout (`--json`).
#[derive(Default)]
pub(crate) struct JsonReporter {
    out: Mutex<()>,
}

#[derive(Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
enum Event<'a> {
    RunStarted {
        recipe: &'a str,
        to_run: usize,
        total: usize,
    },
    StepStarted {
        step: &'a str,
        kind: &'a str,
        attempt: u32,
    },
    StepFinished {
        step: &'a str,
        #[serde(flatten)]
        outcome: &'a Outcome,
        elapsed_ms: u128,
    },
    RunFinished {
        ok: bool,
        elapsed_ms: u128,
    },
    Note {
        text: &'a str,
    },
    /// A long compile: objects done of total, elapsed and ETA (ms).
    StepProgress {
        step: &'a str,
        done: u64,
        total: u64,
        elapsed_ms: u128,
        #[serde(skip_serializing_if = "Option::is_none")]
        eta_ms: Option<u128>,
        #[serde(skip_serializing_if = "Option::is_none")]
        last_run_ms: Option<u128>,
    },
}

impl JsonReporter {
    fn emit(&self, e: &Event) {
        let _guard = self.out.lock().expect("reporter lock");
        let mut stdout = std::io::stdout().lock();
        let line = serde_json::to_string(e).expect("events serialize");
        let _ = writeln!(stdout, "{}", crate::redact::scrub(&line));
    }
}

impl Reporter for JsonReporter {
    fn run_started(&self, recipe: &str, to_run: usize, total: usize) {
        self.emit(&Event::RunStarted {
            recipe,
            to_run,
            total,
        });
    }
    fn step_started(&self, id: &str, kind: &str, attempt: u32) {
        self.emit(&Event::StepStarted {
            step: id,
            kind,
            attempt,
        });
    }
    fn step_output(&self, _id: &str, _line: &str) {}
    fn step_finished(&self, id: &str, outcome: &Outcome, elapsed: Duration) {
        self.emit(&Event::StepFinished {
            step: id,
            outcome,
            elapsed_ms: elapsed.as_millis(),
        });
    }
    fn run_finished(&self, ok: bool, elapsed: Duration) {
        self.emit(&Event::RunFinished {
            ok,
            elapsed_ms: elapsed.as_millis(),
        });
    }
    fn note(&self, text: &str) {
        self.emit(&Event::Note { text });
    }
    fn step_progress(&self, id: &str, p: &Progress) {
        self.emit(&Event::StepProgress {
            step: id,
            done: p.done,
            total: p.total,
            elapsed_ms: p.elapsed.as_millis(),
            eta_ms: p.eta.map(|d| d.as_millis()),
            last_run_ms: p.last_run.map(|d| d.as_millis()),
        });
    }
}
