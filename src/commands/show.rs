//! What several commands show alike, through the one reporter: milestones, verdicts, the greedy
//! A/B, bench results. Each result is a typed event (a `Block`): its text on stdout for a human,
//! one JSON line with `--json`. Shared by `kiln up`, `kiln serve`, `kiln verify` and `kiln bench`.

use std::path::Path;

use serde::Serialize;

use crate::report::Block;

mod verdicts;
pub(super) use verdicts::{captured_verdicts, verdicts};

/// A milestone (`kiln: ...` on stderr, a `note` event with `--json`); a stage's `warning: ...`
/// is a warning (`warning:` on stderr even with `--quiet`, a `warning` event).
pub(super) fn say(s: &str) {
    let s = crate::redact::scrub(s);
    match s.strip_prefix("warning: ") {
        Some(w) => crate::report::current().warning(w),
        None => crate::report::current().note(&s),
    }
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

/// A result block of `kiln up`, as it is known.
pub(super) fn shown(shown: &crate::pipeline::Shown) {
    use crate::pipeline::Shown;
    match shown {
        Shown::Ab(c, base, candidate) => ab(c, base, candidate),
        Shown::Verdicts(l, v) => verdicts(l, v),
        Shown::Bench(b, history) => bench(b, history),
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

/// A bench report (its table; a `bench` event, which `kiln bench --baseline` reads back) and
/// where the history went.
pub(super) fn bench(report: &crate::bench::Report, history: &Path) {
    let r = crate::report::current();
    let event = BenchEvent { report, history };
    r.result(&Block::new("bench", report.table(), &event));
    for w in &report.warnings {
        r.warning(w);
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
pub(super) fn left_running(recipe: &str, s: &crate::pipeline::Served) {
    if let Some(url) = &s.url {
        served(recipe, &s.profile, url, s.pid, true);
    }
}

/// The recipe as the command line named it (else by its name), quoted for a command to copy.
pub(super) fn recipe_named(
    args: &crate::cli::RecipeArgs,
    recipe: &crate::recipe::Recipe,
) -> String {
    let named = args.recipe.as_deref().or(args.recipe_flag.as_deref());
    crate::shell::quote(named.unwrap_or(&recipe.name))
}

/// A server of `recipe` (as [`recipe_named`] names it) up at `url` (a `served` event):
/// `detached`, it outlives kiln; else kiln serves it in the foreground until Ctrl-C.
pub(super) fn served(recipe: &str, profile: &str, url: &str, pid: u32, detached: bool) {
    #[derive(Serialize)]
    struct ServedEvent<'a> {
        profile: &'a str,
        url: &'a str,
        pid: u32,
        detached: bool,
    }
    let text = if detached {
        format!(
            "kiln: left running at {url} (process group {pid}); stop it with `kiln serve {recipe} --stop`"
        )
    } else {
        format!("kiln: serving at {url} (process group {pid}); Ctrl-C stops it")
    };
    let event = ServedEvent {
        profile,
        url,
        pid,
        detached,
    };
    crate::report::current().result(&Block::new("served", text, &event).milestone());
}

/// Where the pipeline's narration goes: milestones and progress as notes, each bench run as a
/// `bench_run` event (a line on stdout for a human).
pub(super) struct Narration {
    say: fn(&str),
    progress: fn(&str),
    line: fn(&crate::bench::RunLine),
}

pub(super) fn narrator() -> Narration {
    Narration {
        say,
        progress: say,
        line: |run| {
            let text = run.measured.line(run.run, run.of);
            crate::report::current().result(&Block::new("bench_run", text, run));
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
