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

mod html;
mod judge;
mod report;
mod stages;

pub use html::{Header, StepLine};
pub use judge::{judge, verdict_problems, Judgement, Outcome};
pub use report::{verdict_code, Report, ReportFiles, Served};
pub use stages::{
    bench_fingerprint, greedy_ab, greedy_outputs, launch, launch_of, measure, verdicts,
    verdicts_from_capture, AbOptions, BenchOptions, Launched, Variant,
};

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
    pub line: &'n mut dyn FnMut(&str),
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

/// `kiln up` after its steps: serve the profile and leave it running, judge its tunings, compare
/// its greedy output with its baseline's (when it names one), smoke-bench it, and the report.
/// `show` receives each result block as it is known (the A/B table, the verdicts, the bench);
/// the report's `outcome` says whether the run failed (warnings are narrated as they are judged).
pub fn up(
    s: Session,
    opts: &UpOptions,
    narrate: &mut Narrator,
    show: &mut dyn FnMut(Shown),
) -> crate::error::Result<Report> {
    let v = Variant::pick(s.recipe, opts.profile)?;
    (narrate.say)(&format!(
        "serving profile `{}` of {}",
        v.name, s.recipe.name
    ));
    // The baseline's greedy outputs first (its server stopped again), then the candidate's
    // from the server that stays up: the profile is loaded once, not once for the A/B and
    // again to serve.
    let baseline = match &v.profile.baseline {
        Some(base) => {
            let base = Variant::pick(s.recipe, Some(base))?;
            let outputs = greedy_outputs(s, base, opts.ab.max_tokens, narrate.say)?;
            Some((base.name, outputs))
        }
        None => None,
    };
    let launched = launch(s, v, true, None, narrate.say)?;
    let verdicts = verdicts(&launched, false);
    show(Shown::Verdicts(&launched, &verdicts));
    let ab = match (baseline, launched.running.record.url.clone()) {
        (Some((base, outputs)), Some(url)) => {
            let got = crate::bench::ab::collect(&url, launched.running.api, opts.ab.max_tokens)?;
            let c = crate::bench::ab::compare(&outputs, &got, opts.ab.min_prefix);
            show(Shown::Ab(&c, base, v.name));
            Some((base.to_string(), c))
        }
        (Some(_), None) => {
            return Err(crate::error::Error::usage(
                format!("profile `{}` has no port or url to query", v.name),
                Some(
                    "give it a `port` or `url` to compare its greedy output with the baseline's"
                        .into(),
                ),
            ));
        }
        (None, _) => None,
    };
    let bench = match launched.running.record.url.clone() {
        Some(url) => {
            let api = launched.running.api;
            let (b, history) = measure(s.paths, s.facts, &url, api, &opts.bench, narrate)?;
            show(Shown::Bench(&b, &history));
            Some(b)
        }
        None => None,
    };
    // Judged again once the benchmark has driven the server: counters such as draft acceptance
    // cover every request by now.
    let verdicts = if bench.is_some() {
        let after = stages::verdicts(&launched, true);
        for (b, a) in verdicts.iter().zip(&after) {
            if (b.status, &b.reason) != (a.status, &a.reason) {
                (narrate.say)(&format!("after the benchmark: {}", a.line()));
            }
        }
        after
    } else {
        verdicts
    };
    let mut report = Report::new(s.recipe, &launched, verdicts, ab, bench, opts.strict);
    // Steps whose checks could not run (with --strict they failed before serving).
    let state = crate::engine::state::StateDir::new(s.paths, &s.recipe.name);
    report.outcome.warnings.extend(
        s.recipe
            .steps
            .iter()
            .filter_map(|st| state.receipt(&st.id))
            .flat_map(|r| {
                let step = r.step;
                r.unproven
                    .into_iter()
                    .map(move |w| format!("step `{step}` is unproven: {w}"))
            }),
    );
    for w in &report.outcome.warnings {
        (narrate.say)(&format!("warning: {w}"));
    }
    launched.leave_running();
    Ok(report)
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

/// A result block of [`up`], as soon as it is known.
pub enum Shown<'a> {
    /// The comparison, the baseline's name and the candidate's.
    Ab(&'a crate::bench::ab::Comparison, &'a str, &'a str),
    Verdicts(&'a Launched<'a>, &'a [crate::serve::verdict::Verdict]),
    /// The bench report and the history file it was appended to.
    Bench(&'a crate::bench::Report, &'a std::path::Path),
}
