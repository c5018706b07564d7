//! What several commands show alike, through the one reporter: milestones, verdicts, the greedy
//! A/B, bench results. Each result is a typed event (a `Block`): its text on stdout for a human,
//! one JSON line with `--json`. Shared by `kiln up`, `kiln serve`, `kiln verify` and `kiln bench`.

use std::path::Path;

use serde::Serialize;

use crate::pipeline::Launched;
use crate::report::style::{paint, Stream, Tone};
use crate::report::Block;
use crate::serve::verdict::{Status, Verdict};

/// A milestone (`kiln: ...` on stderr, a `note` event with `--json`); a stage's `warning: ...`
/// is a warning (`warning:` on stderr even with `--quiet`, a `warning` event).
pub(super) fn say(s: &str) {
    let s = crate::redact::scrub(s);
    match s.strip_prefix("warning: ") {
        Some(w) => crate::report::current().warning(w),
        None => crate::report::current().note(&s),
    }
}

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

#[derive(Serialize)]
struct AbEvent<'a> {
    baseline: &'a str,
    candidate: &'a str,
    comparison: &'a crate::bench::ab::Comparison,
}

#[derive(Serialize)]
struct BenchEvent<'a> {
    report: &'a crate::bench::Report,
    history: &'a Path,
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

/// A result block of `kiln up`, as it is known.
pub(super) fn shown(shown: &crate::pipeline::Shown) {
    use crate::pipeline::Shown;
    match shown {
        Shown::Ab(c, base, candidate) => ab(c, base, candidate),
        Shown::Verdicts(l, v) => verdicts(l, v, false),
        Shown::Bench(b, history) => bench(b, history, false),
    }
}

/// The greedy A/B of `candidate` against `baseline`.
pub(super) fn ab(c: &crate::bench::ab::Comparison, baseline: &str, candidate: &str) {
    let block = Block::new(
        "greedy_ab",
        c.render(baseline, candidate),
        &AbEvent {
            baseline,
            candidate,
            comparison: c,
        },
    );
    crate::report::current().result(&block);
}

/// A command that has not moved to JSON lines yet prints its `--json` result as one document.
fn document(value: &impl Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("results serialize")
    );
}

/// The verdicts of a launched profile; `json_doc`: as one JSON document (`kiln serve --json`).
pub(super) fn verdicts(l: &Launched, verdicts: &[Verdict], json_doc: bool) {
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
    if json_doc {
        return document(&event);
    }
    crate::report::current().result(&Block::new("verdicts", text, &event));
}

/// Verdicts judged from a captured log (`kiln serve --log`).
pub(super) fn captured_verdicts(name: &str, log: &Path, verdicts: &[Verdict], json_doc: bool) {
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
    if json_doc {
        return document(&event);
    }
    crate::report::current().result(&Block::new("verdicts", text, &event));
}

/// A bench report (its table) and where the history went; `json_doc`: the report as one JSON
/// document (`kiln bench --json`, usable as `--baseline`).
pub(super) fn bench(report: &crate::bench::Report, history: &Path, json_doc: bool) {
    let r = crate::report::current();
    if json_doc {
        document(report);
    } else {
        r.result(&Block::new(
            "bench",
            report.render(),
            &BenchEvent { report, history },
        ));
    }
    r.note(&format!("appended to {}", history.display()));
}

/// Where `kiln up` wrote its report (a `report` event).
pub(super) fn report_files(files: &crate::pipeline::ReportFiles) {
    #[derive(Serialize)]
    struct ReportEvent<'a> {
        json: &'a Path,
        markdown: &'a Path,
        html: &'a Path,
    }
    let text = format!(
        "kiln: report: {} (and {})",
        files.markdown.display(),
        files.html.display()
    );
    let event = ReportEvent {
        json: &files.json,
        markdown: &files.markdown,
        html: &files.html,
    };
    crate::report::current().result(&Block::new("report", text, &event).milestone());
}

/// The server `kiln up` left running (a `served` event).
pub(super) fn left_running(s: &crate::pipeline::Served) {
    #[derive(Serialize)]
    struct ServedEvent<'a> {
        profile: &'a str,
        url: &'a str,
        pid: u32,
    }
    let Some(url) = &s.url else { return };
    let text = format!(
        "kiln: left running at {url} (process group {}); stop it with `kiln serve --stop`",
        s.pid
    );
    let event = ServedEvent {
        profile: &s.profile,
        url,
        pid: s.pid,
    };
    crate::report::current().result(&Block::new("served", text, &event).milestone());
}

/// Where the pipeline's narration goes: milestones and progress as notes, each bench run as a
/// `bench_run` event (a line on stdout for a human).
pub(super) struct Narration {
    say: fn(&str),
    progress: fn(&str),
    line: fn(&str),
}

pub(super) fn narrator() -> Narration {
    Narration {
        say,
        progress: say,
        line: |s| {
            #[derive(Serialize)]
            struct BenchRun<'a> {
                line: &'a str,
            }
            let block = Block::new("bench_run", s, &BenchRun { line: s });
            crate::report::current().result(&block);
        },
    }
}

impl Narration {
    pub(super) fn narrator(&mut self) -> crate::pipeline::Narrator<'_> {
        crate::pipeline::Narrator {
            say: &mut self.say,
            progress: &mut self.progress,
            line: &mut self.line,
        }
    }
}
