//! `kiln up` after its steps: serve the profile and leave it running, judge its tunings, compare
//! its greedy output with its baseline's (when it names one), smoke-bench it, and the report.
//! A profile with `evidence_args` is served twice ([`super::launches`]): a judged launch with
//! them (verdicts, A/B), stopped, then a bench launch without them (the benchmark, the verdicts
//! its own log still shows), which is the one left running.

use super::ceiling::Ceiling;
use super::launches::{cross_check, LaunchSummary, Role};
use super::report::Findings;
use super::stages::{self, greedy_outputs, launch, launch_bench, measure, verdicts};
use super::{Launched, Narrator, Report, Session, Shown, UpOptions, Variant};
use crate::bench::{self, ab::Comparison};
use crate::error::{Error, Result};
use crate::serve::verdict::Verdict;

/// `show` receives each result block as it is known (the A/B table, the verdicts, the bench);
/// the report's `outcome` says whether the run failed (warnings are narrated as they are judged).
pub fn up(
    s: Session,
    opts: &UpOptions,
    narrate: &mut Narrator,
    show: &mut dyn FnMut(Shown),
) -> Result<Report> {
    let v = Variant::pick(s.recipe, opts.profile)?;
    (narrate.say)(&format!(
        "serving profile `{}` of {}",
        v.name, s.recipe.name
    ));
    // A malformed ceiling file fails before anything is launched.
    let mut ceiling = v
        .profile
        .ceiling
        .as_ref()
        .map(|c| Ceiling::read(c, opts.bench.max_tokens))
        .transpose()?;
    if let Some(c) = &mut ceiling {
        c.note_a_skipped_writer(s);
    }
    let split = !v.profile.evidence_args.is_empty() && crate::serve::base_url(v.profile).is_some();
    // The baseline's greedy outputs first (its server stopped again), then the candidate's
    // from the judged launch: the profile is loaded once for the A/B and the verdicts.
    let baseline = match &v.profile.baseline {
        Some(base) => {
            let base = Variant::pick(s.recipe, Some(base))?;
            let outputs = greedy_outputs(s, base, opts.ab.max_tokens, narrate.say)?;
            Some((base.name, outputs))
        }
        None => None,
    };
    if split {
        (narrate.say)(&format!(
            "profile `{}` has evidence-only args ({}): a judged launch with them proves it, then a bench launch without them measures it",
            v.name,
            v.profile.evidence_args.join(" ")
        ));
    }
    let judged = launch(s, v, !split, None, narrate.say)?;
    let verdicts = verdicts(&judged, false);
    show(Shown::Verdicts(&judged, &verdicts));
    let ab = greedy_ab(&judged, baseline, opts, show)?;
    let mut judged_figures: Vec<&'static str> = vec!["verdicts"];
    if ab.is_some() {
        judged_figures.push("greedy_ab");
    }
    let mut launches = Vec::new();
    let served = if split {
        launches.push(LaunchSummary::of(
            &judged,
            Role::Judged,
            judged_figures.clone(),
            verdicts.clone(),
        ));
        let port = v.profile.port;
        judged.stop(s);
        stages::wait_port_free(port);
        (narrate.say)(&format!(
            "judged launch stopped; bench launch: profile `{}` without its evidence-only args",
            v.name
        ));
        launch_bench(s, v, true, None, narrate.say)?
    } else {
        judged
    };
    let bench = bench_of(s, &served, opts, narrate, show)?;
    let mut figures = Vec::new();
    if bench.is_some() {
        figures.push("bench");
    }
    if let Some(c) = &mut ceiling {
        c.compare(
            bench
                .as_ref()
                .and_then(|b| b.decode_tok_s.as_ref())
                .map(|d| d.median),
        );
        figures.push("ceiling_ratio");
    }
    let (verdicts, conflicts) = if split {
        let (checked, conflicts) = cross_check(v.name, &verdicts, stages::verdicts(&served, true));
        (narrate.say)(&format!(
            "bench launch (pid {}): the verdicts its own log can show",
            served.running.record.pid
        ));
        show(Shown::Verdicts(&served, &checked));
        figures.insert(0, "bench_launch_verdicts");
        launches.push(LaunchSummary::of(&served, Role::Bench, figures, checked));
        (verdicts, conflicts)
    } else {
        let verdicts = judged_again(&served, verdicts, bench.is_some(), narrate);
        judged_figures.extend(figures);
        launches.push(LaunchSummary::of(
            &served,
            Role::Single,
            judged_figures,
            verdicts.clone(),
        ));
        (verdicts, Vec::new())
    };
    if let Some(c) = ceiling.as_ref().filter(|c| c.worth_saying()) {
        let from = launches
            .last()
            .filter(|_| bench.is_some())
            .map_or("served".to_string(), |l| {
                format!("{}, pid {}", l.launch.label(), l.pid)
            });
        (narrate.say)(&c.line(&from));
    }
    let found = Findings {
        verdicts,
        ab,
        bench,
        launches,
        conflicts,
        ceiling,
    };
    let report = Report::new(s.recipe, &served, found, opts.strict);
    say_warnings(&report, narrate);
    served.leave_running();
    Ok(report)
}

/// The outcome's warnings, each said once: the bench's own were shown with it (`Shown::Bench`).
fn say_warnings(report: &Report, narrate: &mut Narrator) {
    let shown_with_bench = |w: &str| {
        w.strip_prefix("bench: ").is_some_and(|w| {
            report
                .served
                .as_ref()
                .and_then(|s| s.bench.as_ref())
                .is_some_and(|b| b.warnings.iter().any(|b| b == w))
        })
    };
    for w in report
        .outcome
        .warnings
        .iter()
        .filter(|w| !shown_with_bench(w))
    {
        (narrate.say)(&format!("warning: {w}"));
    }
}

/// The greedy A/B of the judged launch against the baseline's outputs, when there are any.
fn greedy_ab(
    judged: &Launched,
    baseline: Option<(&str, Vec<bench::ab::Output>)>,
    opts: &UpOptions,
    show: &mut dyn FnMut(Shown),
) -> Result<Option<(String, Comparison)>> {
    let name = judged.variant.name;
    match (baseline, judged.running.record.url.clone()) {
        (Some((base, outputs)), Some(url)) => {
            let got = bench::ab::collect(&url, judged.running.api, opts.ab.max_tokens)?;
            let c = bench::ab::compare(&outputs, &got, opts.ab.min_prefix);
            show(Shown::Ab(&c, base, name));
            Ok(Some((base.to_string(), c)))
        }
        (Some(_), None) => Err(Error::usage(
            format!("profile `{name}` has no port or url to query"),
            Some(
                "give it a `port` or `url` to compare its greedy output with the baseline's".into(),
            ),
        )),
        (None, _) => Ok(None),
    }
}

/// The smoke bench of the served launch (none for a batch job without a URL).
fn bench_of(
    s: Session,
    served: &Launched,
    opts: &UpOptions,
    narrate: &mut Narrator,
    show: &mut dyn FnMut(Shown),
) -> Result<Option<bench::Report>> {
    let Some(url) = served.running.record.url.clone() else {
        return Ok(None);
    };
    let api = served.running.api;
    let (b, history) = measure(s.paths, s.facts, &url, api, &opts.bench, narrate)?;
    show(Shown::Bench(&b, &history));
    Ok(Some(b))
}

/// The only launch judged again once the benchmark has driven it: counters such as draft
/// acceptance cover every request by now. Changes are narrated.
fn judged_again(
    l: &Launched,
    before: Vec<Verdict>,
    benched: bool,
    narrate: &mut Narrator,
) -> Vec<Verdict> {
    if !benched {
        return before;
    }
    let after = verdicts(l, true);
    for (b, a) in before.iter().zip(&after) {
        if (b.status, &b.reason) != (a.status, &a.reason) {
            (narrate.say)(&format!("after the benchmark: {}", a.line()));
        }
    }
    after
}
