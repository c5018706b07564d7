//! The serve-and-prove pipeline after provisioning: serve a profile, judge its tunings (verdicts),
//! greedy A/B against a baseline, smoke-bench, and a typed [`Report`]. One function per stage,
//! each returning a typed result, so `kiln up`, `kiln serve`, `kiln verify` and (later) a tuner
//! compose the same stages; no command calls another.
//!
//! A stage never prints: milestones go to the caller's `say`, result lines (bench runs) to its
//! [`Narrator`]. What the commands print comes from the typed results.
//!
//! One profile variant, start to finish (what a tuner does per candidate):
//!
//! ```no_run
//! # fn tune(s: kiln::pipeline::Session) -> kiln::error::Result<()> {
//! use kiln::pipeline::{self, AbOptions, BenchOptions, Narrator, Variant};
//! let base = Variant::pick(s.recipe, Some("baseline"))?;
//! let mut profile = base.profile.clone();
//! profile.args.push("--flash-attn".into());
//! let candidate = Variant { name: "candidate-1", profile: &profile };
//! let say = &mut |m: &str| eprintln!("kiln: {m}");
//! let ab = pipeline::greedy_ab(s, base, candidate, &AbOptions::default(), say)?;
//! let launched = pipeline::launch(s, candidate, false, None, say)?;
//! let verdicts = pipeline::verdicts(&launched, false);
//! let url = launched.running.record.url.clone().expect("a server profile has a url");
//! let mut narrate = Narrator { say, progress: &mut |_| {}, line: &mut |_| {} };
//! let (bench, _history) = pipeline::measure(
//!     s.paths, s.facts, &url, launched.running.api, &BenchOptions::default(), &mut narrate,
//! )?;
//! launched.stop(s);
//! println!("{} {} {:?}", ab.verdict, verdicts.len(), bench.decode_tok_s);
//! # Ok(())
//! # }
//! ```

mod ceiling;
mod files;
mod header;
mod html;
mod judge;
mod launches;
mod proved;
mod report;
mod stages;
mod up;

pub use ceiling::{read_llama_bench, Ceiling, Figure};
pub use files::ReportFiles;
pub use header::{Header, StepLine};
pub use judge::{judge, verdict_problems, Judgement, Outcome};
pub use launches::{cross_check, LaunchSummary, Role};
pub use proved::lines as proved;
pub use report::{verdict_code, Findings, Report, Served};
pub use stages::{
    bench_fingerprint, greedy_ab, greedy_outputs, launch, launch_bench, launch_of, measure,
    verdicts, verdicts_from_capture, AbOptions, BenchOptions, Launched, Variant,
};
pub use up::up;

use crate::host::Facts;
use crate::paths::StatePaths;
use crate::recipe::Recipe;

/// One recipe's session: what every stage needs besides its own options.
#[derive(Clone, Copy)]
pub struct Session<'a> {
    pub recipe: &'a Recipe,
    pub paths: &'a StatePaths,
    pub facts: &'a Facts,
}

/// Where a stage's progress goes: `say` for milestones (`kiln: ...` on stderr), `progress` for
/// raw progress lines (stderr), `line` for result lines as they come (bench runs, on stdout
/// unless JSON was asked for).
pub struct Narrator<'n> {
    pub say: &'n mut dyn FnMut(&str),
    pub progress: &'n mut dyn FnMut(&str),
    pub line: &'n mut dyn FnMut(&crate::bench::RunLine),
}

/// Options of the `kiln up` pipeline.
pub struct UpOptions<'a> {
    /// The profile to serve (`None`: `tuned`, else the only one).
    pub profile: Option<&'a str>,
    pub ab: AbOptions,
    pub bench: BenchOptions,
    /// Advisories (warnings) fail the run too.
    pub strict: bool,
}

/// Write the report of a `kiln up` that failed at `stage` (`preflight`, `steps`, `serve`) before
/// it could serve, so that report.json always tells how the last run ended. Best effort: the
/// error itself is what the caller reports. Returns the last good report, kept beside the new one
/// (see [`ReportFiles::previous`]).
pub fn record_failure(
    s: Session,
    stage: &str,
    err: &crate::error::Error,
    strict: bool,
) -> Option<std::path::PathBuf> {
    let mut report = Report::failed(&s.recipe.name, stage, err, strict);
    report.header = Some(Header::of(s, None));
    report.write(s.paths).ok().and_then(|f| f.previous)
}

/// Write the report of a `kiln up` that ran its steps and served nothing, so that report.json
/// still tells how the last run ended. Best effort, as [`record_failure`].
pub fn record_steps_only(s: Session, strict: bool) {
    let mut report = Report::steps_only(&s.recipe.name, strict);
    report.header = Some(Header::of(s, None));
    let _ = report.write(s.paths);
}

/// A result block of [`up()`], as soon as it is known.
pub enum Shown<'a> {
    /// The comparison, the baseline's name and the candidate's.
    Ab(&'a crate::bench::ab::Comparison, &'a str, &'a str),
    Verdicts(&'a Launched<'a>, &'a [crate::serve::verdict::Verdict]),
    /// The bench report and the history file it was appended to.
    Bench(&'a crate::bench::Report, &'a std::path::Path),
}
