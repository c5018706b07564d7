//! The verdicts of a served profile, as `kiln up` and `kiln serve` show them: a line per tuning
//! (its status coloured on a terminal), one `verdicts` event in JSON lines.

use std::path::Path;

use serde::Serialize;

use crate::pipeline::Launched;
use crate::report::style::{paint, Stream, Tone};
use crate::report::Block;
use crate::serve::verdict::{Status, Verdict};

/// The `verdicts` event: the launched server and its tunings' verdicts.
#[derive(Serialize)]
struct VerdictsEvent<'a> {
    profile: &'a str,
    pid: u32,
    url: Option<&'a str>,
    log: &'a Path,
    ready_after_s: f64,
    verdicts: &'a [Verdict],
}

/// The `verdicts` event of a captured log (`kiln serve --log`).
#[derive(Serialize)]
struct CapturedEvent<'a> {
    profile: &'a str,
    log: &'a Path,
    verdicts: &'a [Verdict],
}

/// One verdict line, its status coloured on a terminal.
fn verdict_line(v: &Verdict) -> String {
    let tone = match v.status {
        Status::Active => Tone::Good,
        Status::FellBack | Status::Unknown | Status::Configured => Tone::Warn,
        Status::Crashed | Status::Conflicting => Tone::Bad,
    };
    let label = v.status.label();
    v.line().replacen(
        &format!(" {label}: "),
        &format!(" {}: ", paint(Stream::Stdout, tone, label)),
        1,
    )
}

fn verdict_lines(verdicts: &[Verdict]) -> String {
    verdicts.iter().map(|v| verdict_line(v) + "\n").collect()
}

/// The verdicts of a launched profile (a `verdicts` event).
pub(in crate::commands) fn verdicts(l: &Launched, verdicts: &[Verdict]) {
    let running = &l.running;
    let name = l.variant.name;
    let mut text = format!(
        "profile `{name}` ready after {:.1} s\n",
        running.ready_after.as_secs_f64()
    );
    if verdicts.is_empty() {
        text.push_str("no tunings to judge (no flag of the profile has a signature)\n");
    }
    text.push_str(&verdict_lines(verdicts));
    let event = VerdictsEvent {
        profile: name,
        pid: running.record.pid,
        url: running.record.url.as_deref(),
        log: &running.record.log,
        ready_after_s: running.ready_after.as_secs_f64(),
        verdicts,
    };
    crate::report::current().result(&Block::new("verdicts", text, &event));
}

/// Verdicts judged from a captured log (`kiln serve --log`: a `verdicts` event).
pub(in crate::commands) fn captured_verdicts(name: &str, log: &Path, verdicts: &[Verdict]) {
    let text = format!(
        "profile `{name}` judged from {}\n{}",
        log.display(),
        verdict_lines(verdicts)
    );
    let event = CapturedEvent {
        profile: name,
        log,
        verdicts,
    };
    crate::report::current().result(&Block::new("verdicts", text, &event));
}
