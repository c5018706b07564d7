//! JSON lines on stdout (`--json`): one typed event per line, the first with `schema`; a failed
//! command ends with `error` then `outcome`, so that a CI job never parses stderr (the error
//! line is on stderr too, for a person reading the job's log).

// The reporter is how kiln talks to the user: it prints.
#![allow(clippy::print_stderr)]

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::events::{emit, emit_block, error_event, Event};
use super::{Block, Outcome, Reporter};

/// Byte progress of one step or transfer: at most one event this often.
const BYTES_EVERY: Duration = Duration::from_secs(1);

#[derive(Default)]
pub(super) struct JsonReporter {
    /// When each transfer's last progress event went out.
    last_bytes: Mutex<BTreeMap<String, Instant>>,
}

impl JsonReporter {
    /// Whether a progress event of `key` is due now (the first one is).
    fn due(&self, key: &str) -> bool {
        let mut last = self.last_bytes.lock().expect("reporter lock");
        let now = Instant::now();
        match last.get(key) {
            Some(t) if now.duration_since(*t) < BYTES_EVERY => false,
            _ => {
                last.insert(key.to_string(), now);
                true
            }
        }
    }
}

impl Reporter for JsonReporter {
    fn run_started(&self, recipe: &str, to_run: usize, total: usize) {
        emit(&Event::RunStarted {
            recipe,
            to_run,
            total,
        });
    }
    fn step_started(&self, id: &str, kind: &str, attempt: u32) {
        emit(&Event::StepStarted {
            step: id,
            kind,
            attempt,
        });
    }
    fn step_output(&self, _id: &str, _line: &str) {}
    fn step_progress(&self, id: &str, p: &super::BuildProgress) {
        emit(&Event::StepProgress {
            step: id,
            done: p.done,
            total: p.total,
            elapsed_ms: p.elapsed.as_millis(),
            eta_ms: p.eta.map(|d| d.as_millis()),
            last_run_ms: p.last_run.map(|d| d.as_millis()),
        });
    }
    fn step_bytes(&self, id: &str, done: u64, total: Option<u64>) {
        if self.due(id) {
            emit(&Event::StepBytes {
                step: id,
                done,
                total,
            });
        }
    }
    fn step_finished(&self, id: &str, outcome: &Outcome, elapsed: Duration) {
        self.last_bytes.lock().expect("reporter lock").remove(id);
        emit(&Event::StepFinished {
            step: id,
            outcome,
            elapsed_ms: elapsed.as_millis(),
        });
    }
    fn run_finished(&self, ok: bool, elapsed: Duration) {
        emit(&Event::RunFinished {
            ok,
            elapsed_ms: elapsed.as_millis(),
        });
    }
    fn note(&self, text: &str) {
        emit(&Event::Note { text });
    }
    fn warning(&self, text: &str) {
        emit(&Event::Warning { text });
    }
    fn transfer(&self, what: &str, done: u64, total: Option<u64>) {
        if self.due(what) {
            emit(&Event::Transfer { what, done, total });
        }
    }
    fn transfer_finished(&self, what: &str) {
        self.last_bytes.lock().expect("reporter lock").remove(what);
    }
    fn result(&self, block: &Block) {
        emit_block(block);
    }
    fn finished(&self, exit_code: u8, error: Option<&crate::error::Error>) {
        if let Some(e) = error {
            emit(&error_event(e, exit_code));
            // And for a person reading the job's log: stderr is not part of the stream.
            eprintln!("{}", super::style::labels(&e.render()));
        }
        emit(&Event::Outcome {
            ok: exit_code == 0,
            exit_code,
        });
    }
}
