//! The JSON-lines wire format: one typed event per line, `schema` on the first line of a
//! process. Result blocks carry the typed value a command serialized (`Block`).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use serde::Serialize;

use super::Outcome;

/// The version of the event format; it changes when an event loses or renames a field.
pub(crate) const SCHEMA: u32 = 1;

/// A result a command shows: `text` on stdout for a human, `data` (a serialized typed value)
/// as the event `event` in JSON lines.
#[derive(Debug, Clone)]
pub(crate) struct Block {
    /// The JSON event's name (`verdicts`, `greedy_ab`, `bench`, `plan`, `served`, ...).
    pub(crate) event: &'static str,
    /// What a human reads; empty for nothing.
    pub(crate) text: String,
    /// The event's fields.
    pub(crate) data: serde_json::Map<String, serde_json::Value>,
    /// A human reads `text` on stderr, as a milestone (where a server was left, a report path).
    pub(crate) milestone: bool,
}

impl Block {
    /// A result block of `value`'s fields (a value that is not a map becomes `{"value": ...}`).
    pub(crate) fn new(
        event: &'static str,
        text: impl Into<String>,
        value: &impl Serialize,
    ) -> Block {
        let data = match serde_json::to_value(value).expect("results serialize") {
            serde_json::Value::Object(m) => m,
            other => std::iter::once(("value".to_string(), other)).collect(),
        };
        Block {
            event,
            text: text.into(),
            data,
            milestone: false,
        }
    }

    /// The same block, said on stderr as a milestone for a human.
    pub(crate) fn milestone(mut self) -> Block {
        self.milestone = true;
        self
    }
}

/// The events of the stream (result blocks are [`Block`]s).
#[derive(Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(super) enum Event<'a> {
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
    /// A step's transfer so far (at most one a second per step).
    StepBytes {
        step: &'a str,
        done: u64,
        total: Option<u64>,
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
    Warning {
        text: &'a str,
    },
    Transfer {
        what: &'a str,
        done: u64,
        total: Option<u64>,
    },
    /// Why the command failed: the message, its causes and hint, and the exit status.
    Error {
        message: String,
        causes: Vec<String>,
        hint: Option<String>,
        exit_code: u8,
    },
    /// The last event of every command.
    Outcome {
        ok: bool,
        exit_code: u8,
    },
}

/// A result block on the wire: its name, then its fields.
#[derive(Serialize)]
struct BlockEvent<'a> {
    event: &'a str,
    #[serde(flatten)]
    data: &'a serde_json::Map<String, serde_json::Value>,
}

#[derive(Serialize)]
struct Envelope<'a, T: Serialize> {
    #[serde(skip_serializing_if = "Option::is_none")]
    schema: Option<u32>,
    #[serde(flatten)]
    event: &'a T,
}

static SCHEMA_SAID: AtomicBool = AtomicBool::new(false);
static STDOUT: Mutex<()> = Mutex::new(());

/// Write one event as a line on stdout; the first of the process carries `schema`.
pub(super) fn emit(event: &Event) {
    write_line(event);
}

/// Write a result block as one event line.
pub(super) fn emit_block(block: &Block) {
    write_line(&BlockEvent {
        event: block.event,
        data: &block.data,
    });
}

fn write_line(event: &impl Serialize) {
    let _guard = STDOUT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let first = !SCHEMA_SAID.swap(true, Ordering::SeqCst);
    let line = Envelope {
        schema: first.then_some(SCHEMA),
        event,
    };
    let text = serde_json::to_string(&line).expect("events serialize");
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{}", crate::redact::scrub(&text));
    let _ = stdout.flush();
}

/// The `error` event of `e`.
pub(super) fn error_event(e: &crate::error::Error, exit_code: u8) -> Event<'static> {
    let mut causes = Vec::new();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        causes.push(cause.to_string());
        source = cause.source();
    }
    Event::Error {
        message: e.to_string(),
        causes,
        hint: e.hint(),
        exit_code,
    }
}
