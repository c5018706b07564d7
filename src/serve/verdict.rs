//! Tuning verdicts: for every tuning the profile asks for, active / fell back / crashed /
//! conflicting / configured / unknown, with the evidence. Only the server's own logger entries of
//! this launch count ([`super::evidence`]); negative and crash evidence beat positive; absence is
//! never activity; counters are checked. docs/serve-bench.md ("Evidence rules").

use regex::Regex;
use serde::Serialize;

use super::evidence::{ends_traceback, Entry};
use super::signatures::{anchored, Feature, Gate, Level, Ratio, Signatures};
use crate::bench::wire::escape_controls;
use crate::columns::{number, quoted};
use crate::recipe::Profile;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Proven at work by a line the server logged (or a counter it reported).
    Active,
    FellBack,
    Crashed,
    /// The launch holds both positive and negative evidence: fails the run, both lines shown.
    Conflicting,
    /// The server echoed its resolved configuration; nothing proves the feature runs.
    Configured,
    Unknown,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Active => "active",
            Status::FellBack => "fell back",
            Status::Crashed => "crashed",
            Status::Conflicting => "conflicting",
            Status::Configured => "configured",
            Status::Unknown => "unknown",
        }
    }

    /// The one test of "this tuning is at work": only proven-active counts (`kiln up`'s outcome
    /// and `kiln tune`'s qualification both ask this).
    pub fn proven_active(self) -> bool {
        self == Status::Active
    }

    /// A failure of the run (not an advisory): the feature fell back, crashed or contradicts
    /// itself.
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            Status::FellBack | Status::Crashed | Status::Conflicting
        )
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub feature: String,
    pub status: Status,
    /// Why, in a few words ("multicast unsupported").
    pub reason: String,
    /// The log line or endpoint value behind it.
    pub evidence: Option<String>,
}

impl Verdict {
    pub fn line(&self) -> String {
        let mut s = format!(
            "{:<28} {}: {}",
            self.feature,
            self.status.label(),
            escape_controls(&self.reason)
        );
        if let Some(e) = &self.evidence {
            s.push_str(&format!(
                "\n{:<28}   evidence: {}",
                "",
                clip(&escape_controls(e), 160)
            ));
        }
        s
    }
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n).collect::<String>())
    }
}

/// The value given to `flag` in `args` (`--flag VALUE` or `--flag=VALUE`); `Some("")` for a bare
/// switch; the last occurrence wins, as with most parsers.
pub fn flag_value(args: &[String], flag: &str) -> Option<String> {
    let mut found = None;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == flag {
            let next = args
                .get(i + 1)
                .filter(|n| !n.starts_with('-') || n.parse::<f64>().is_ok());
            found = Some(next.cloned().unwrap_or_default());
        } else if let Some(v) = a.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
            found = Some(v.to_string());
        }
        i += 1;
    }
    found
}

/// What a verdict is judged from: this launch's lines of the server's log, its metrics
/// endpoint's text (Prometheus), whether it has answered requests yet (some evidence only appears
/// under traffic) and whether the server has exited (crash context for a crash line).
#[derive(Debug, Default)]
pub struct Evidence<'a> {
    pub log: &'a [String],
    pub metrics: Option<&'a str>,
    pub after_traffic: bool,
    /// Why the request meant to give the server traffic failed, if it did.
    pub traffic_error: Option<String>,
    /// The server process ended (a crash line then needs no traceback around it).
    pub exited: bool,
    /// How many requests kiln sent this launch, where the caller counted them (`None`: not
    /// known, as for a captured log): more per-request lines than that is `conflicting`.
    pub requests: Option<usize>,
}

/// A flag value that turns a feature off (`-fa off`): the feature is not requested.
fn is_off(value: &str) -> bool {
    ["off", "0", "false", "disabled", "none", "no"].contains(&value.to_ascii_lowercase().as_str())
}

/// The features the profile requests (by a flag not turned off, or by id in `expect`), each with
/// its flag's value.
fn requested<'s>(
    sigs: &'s Signatures,
    profile: &Profile,
) -> impl Iterator<Item = (&'s Feature, Option<String>)> {
    let argv = argv(profile);
    let expect = profile.expect.clone();
    sigs.features.iter().filter_map(move |f| {
        let value = f.flags.iter().find_map(|fl| flag_value(&argv, fl));
        let on = value.as_deref().is_some_and(|v| !is_off(v));
        (on || expect.contains(&f.id)).then_some((f, value))
    })
}

fn argv(profile: &Profile) -> Vec<String> {
    profile.cmd.iter().chain(&profile.args).cloned().collect()
}

/// Whether a feature the profile requests shows its evidence only under traffic.
pub fn needs_traffic(sigs: &Signatures, profile: &Profile) -> bool {
    requested(sigs, profile).any(|(f, _)| f.needs_traffic)
}

/// The server's own entries of `log`, each with whether it came after the server said it was
/// ready (start-up evidence counts only before that line, where no request can have put text).
fn own_entries(sigs: &Signatures, log: &[String]) -> Vec<(Entry, bool)> {
    let Some(logger) = &sigs.logger else {
        return Vec::new();
    };
    let mut ready = false;
    logger
        .entries(log)
        .into_iter()
        .map(|mut e| {
            let before = ready;
            ready = ready || sigs.ready.iter().any(|r| r.is_match(&e.message));
            e.after_ready = before;
            (e, before)
        })
        .collect()
}

/// Verdicts for the features the profile requests (by flag, or by id in `expect`).
pub fn judge(sigs: &Signatures, profile: &Profile, ev: &Evidence) -> Vec<Verdict> {
    let entries = own_entries(sigs, ev.log);
    // A log that holds the readiness line places every per-request line before or after it.
    let ready_known = entries
        .iter()
        .any(|(e, _)| sigs.ready.iter().any(|r| r.is_match(&e.message)));
    let mut out: Vec<Verdict> = requested(sigs, profile)
        .map(|(f, value)| {
            // Start-up evidence counts only before readiness; traffic evidence anywhere.
            let own: Vec<&Entry> = entries
                .iter()
                .filter(|(_, after_ready)| f.needs_traffic || !after_ready)
                .map(|(e, _)| e)
                .collect();
            let ctx = Context {
                value: value.as_deref().unwrap_or(""),
                ready_known,
                profile,
                ev,
            };
            judge_one(f, &own, &ctx)
        })
        .collect();
    for id in &profile.expect {
        if !sigs.features.iter().any(|f| &f.id == id) {
            out.push(Verdict {
                feature: id.clone(),
                status: Status::Unknown,
                reason: format!("no signature for it in {}", sigs.origin),
                evidence: None,
            });
        }
    }
    out
}

/// One piece of evidence for or against a feature.
struct Seen {
    reason: String,
    evidence: String,
}

/// Patterns with `{value}` replaced by the flag's value (matched literally), anchored.
fn with_value(patterns: &[String], value: &str) -> Vec<Regex> {
    patterns
        .iter()
        .filter_map(|p| anchored(&p.replace("{value}", &regex::escape(value))).ok())
        .collect()
}

/// What a feature is judged against besides its entries: the flag's value, whether the log holds
/// the readiness line, the launch and the evidence.
struct Context<'c> {
    value: &'c str,
    ready_known: bool,
    profile: &'c Profile,
    ev: &'c Evidence<'c>,
}

fn judge_one(f: &Feature, own: &[&Entry], ctx: &Context) -> Verdict {
    let (value, profile, ev) = (ctx.value, ctx.profile, ctx.ev);
    // Evidence is the server's text: escaped once here, for every output that shows it.
    let verdict = |status, reason: String, evidence: Option<String>| Verdict {
        feature: f.id.clone(),
        status,
        reason: escape_controls(&reason),
        evidence: evidence.map(|e| escape_controls(&e)),
    };
    if let Some(line) = crash_line(f, own, ev) {
        return verdict(
            Status::Crashed,
            "the server crashed in its code path".into(),
            Some(line),
        );
    }
    let active = with_value(&f.active, value);
    let mut positive: Vec<Seen> = Vec::new();
    let mut negative: Vec<Seen> = Vec::new();
    let mut invalid: Option<Seen> = None;
    if let Some(e) = own
        .iter()
        .find(|e| active.iter().any(|p| p.is_match(&e.message)))
    {
        let reason = if value.is_empty() {
            "confirmed by the log".to_string()
        } else {
            format!("`{}` confirmed by the log", quoted(value))
        };
        positive.push(Seen {
            reason,
            evidence: e.text.clone(),
        });
    }
    for (pattern, reason) in &f.fell_back {
        // A line that also reads as positive (`n_threads = 2` when 2 was asked) is not negative.
        if let Some(e) = own.iter().find(|e| {
            pattern.is_match(&e.message) && !active.iter().any(|p| p.is_match(&e.message))
        }) {
            negative.push(Seen {
                reason: reason.clone(),
                evidence: e.text.clone(),
            });
            break;
        }
    }
    let measured = f
        .ratio
        .as_ref()
        .and_then(|r| judge_ratio(r, own, ctx))
        .or_else(|| f.level.as_ref().and_then(|l| judge_level(l, own)));
    match measured {
        Some(Measured::Incoherent(s)) => {
            return verdict(Status::Conflicting, s.reason, Some(s.evidence))
        }
        Some(Measured::Reached(s)) => positive.push(s),
        Some(Measured::Below(s)) => negative.push(s),
        Some(Measured::Invalid(s)) => invalid = Some(s),
        None => {}
    }
    for g in &f.gates {
        if let Some(s) = gate_fails(g, profile) {
            negative.push(s);
        }
    }
    match (positive.first(), negative.first()) {
        (Some(p), Some(n)) => {
            return verdict(
                Status::Conflicting,
                format!(
                    "the launch says both: {} / {}; negative evidence wins",
                    p.reason, n.reason
                ),
                Some(format!("{} | against: {}", p.evidence, n.evidence)),
            )
        }
        (None, Some(n)) => {
            return verdict(Status::FellBack, n.reason.clone(), Some(n.evidence.clone()))
        }
        _ => {}
    }
    if let Some(s) = invalid {
        return verdict(Status::Unknown, s.reason, Some(s.evidence));
    }
    if let Some(p) = positive.into_iter().next() {
        return verdict(Status::Active, p.reason, Some(p.evidence));
    }
    let configured = with_value(&f.configured, value);
    if let Some(e) = own
        .iter()
        .find(|e| configured.iter().any(|p| p.is_match(&e.message)))
    {
        return verdict(
            Status::Configured,
            "the server's resolved configuration names it; no line shows it at work".into(),
            Some(e.text.clone()),
        );
    }
    if f.needs_traffic && !ev.after_traffic {
        return verdict(
            Status::Unknown,
            match &ev.traffic_error {
                Some(e) => format!(
                    "shows only once the server has answered requests, and the warm-up request failed: {e}"
                ),
                None => "shows only once the server has answered requests".into(),
            },
            None,
        );
    }
    let status = if f.absent == "fell back" {
        Status::FellBack
    } else {
        Status::Unknown
    };
    verdict(status, f.absent_reason.clone(), None)
}

/// The line of a crash of the feature's code path, with crash context: the end of a traceback,
/// or (once the server has exited) a crash line of its own logger.
fn crash_line(f: &Feature, own: &[&Entry], ev: &Evidence) -> Option<String> {
    let crashed = |l: &str| f.crashed.iter().any(|p| p.is_match(l));
    let after_traceback = ev
        .log
        .iter()
        .enumerate()
        .find(|(i, l)| crashed(l) && (ev.exited || ends_traceback(ev.log, *i)));
    after_traceback
        .map(|(_, l)| l.trim().to_string())
        .or_else(|| {
            ev.exited
                .then(|| {
                    own.iter()
                        .find(|e| crashed(&e.message))
                        .map(|e| e.text.clone())
                })
                .flatten()
        })
}

/// A gate of the server's code evaluated from the launch: `Some` when it stays closed.
fn gate_fails(g: &Gate, profile: &Profile) -> Option<Seen> {
    if let (Some(env), false) = (&g.env, g.off.is_empty()) {
        let v = profile.env.get(env)?;
        return g.off.iter().any(|o| o == v).then(|| Seen {
            reason: format!("predicted: {}", g.reason.replace("{value}", &quoted(v))),
            evidence: format!("from the launch: {env}={v} in the profile's env"),
        });
    }
    let min = g.min?;
    let argv = argv(profile);
    let given = g
        .flags
        .iter()
        .find_map(|fl| flag_value(&argv, fl).map(|v| (fl, v)));
    // The flag as given (`--tp 1`), else the gate's first flag, not given.
    let (value, from) = match &given {
        Some((fl, v)) => (v.parse::<f64>().ok()?, format!("{fl} {v}")),
        None => (
            g.default?,
            format!(
                "{} not given (the default)",
                g.flags.first().map_or("", String::as_str)
            ),
        ),
    };
    (value < min).then(|| Seen {
        reason: format!("predicted: {}", g.reason.replace("{value}", &number(value))),
        evidence: format!("from the launch: {from}"),
    })
}

/// A ratio or level read from the log or the metrics.
enum Measured {
    Reached(Seen),
    Below(Seen),
    /// A count that cannot be true (negative, not finite, part above whole), or per-request
    /// lines that cannot be told apart from another launch's: unknown.
    Invalid(Seen),
    /// Per-request lines that contradict the requests or the server's counters: conflicting,
    /// never summed.
    Incoherent(Seen),
}

/// A part/whole pair that can be counted: finite, non-negative, part <= whole.
fn check_counts(part: f64, whole: f64) -> Result<(), String> {
    if !part.is_finite() || !whole.is_finite() {
        Err("a count is not finite".into())
    } else if part < 0.0 || whole < 0.0 {
        Err("a count is negative".into())
    } else if part > whole {
        Err(format!(
            "{} is more than the {} it is part of",
            number(part),
            number(whole)
        ))
    } else {
        Ok(())
    }
}

/// One matching line of a ratio: its counts, its task id (where the pattern names one), the entry.
struct Counted<'e> {
    part: f64,
    whole: f64,
    task: Option<String>,
    entry: &'e Entry,
}

/// The ratio's matching lines, or the first whose count cannot be right.
fn counted<'e>(r: &Ratio, own: &[&'e Entry]) -> Result<Vec<Counted<'e>>, Measured> {
    let mut out = Vec::new();
    for e in own {
        let Some(c) = r.pattern.captures(&e.message) else {
            continue;
        };
        let num = |i: usize| c.get(i).and_then(|m| m.as_str().parse::<f64>().ok());
        let (Some(part), Some(whole)) = (num(r.groups[0]), num(r.groups[1])) else {
            continue;
        };
        if let Err(why) = check_counts(part, whole) {
            return Err(Measured::Invalid(Seen {
                reason: format!("the log's count of {} cannot be right: {why}", r.what),
                evidence: e.text.clone(),
            }));
        }
        out.push(Counted {
            part,
            whole,
            // By value: `task 09` is task 9's line, not another task's.
            task: c.name("task").map(|m| {
                let t = m.as_str();
                t.parse::<i64>().map_or(t.to_string(), |n| n.to_string())
            }),
            entry: e,
        });
    }
    Ok(out)
}

/// The part/whole of the metrics counters: `Ok(None)` when the page or a counter is absent.
fn from_metrics(r: &Ratio, ev: &Evidence) -> Result<Option<(f64, f64, String)>, Measured> {
    let (Some([part, whole]), Some(text)) = (&r.metrics, ev.metrics) else {
        return Ok(None);
    };
    match (counter(text, part), counter(text, whole)) {
        (Ok(Some(p)), Ok(Some(w))) => {
            let evidence = format!("/metrics: {part} {}, {whole} {}", number(p), number(w));
            match check_counts(p, w) {
                Ok(()) => Ok(Some((p, w, evidence))),
                Err(why) => Err(Measured::Invalid(Seen {
                    reason: format!("the metrics' count of {} cannot be right: {why}", r.what),
                    evidence,
                })),
            }
        }
        (Err(why), _) | (_, Err(why)) => Err(Measured::Invalid(Seen {
            reason: format!("the metrics cannot be read as a count: {why}"),
            evidence: format!("/metrics: {part}, {whole}"),
        })),
        _ => Ok(None),
    }
}

/// Per-request lines checked against what kiln knows of the requests: a line before the server
/// was ready (no request had been answered), two lines for one task id, or more lines than
/// requests sent is `Incoherent`; task ids that do not increase (another launch's lines in a
/// captured log) are `Invalid` when no counter settles it.
fn incoherent(r: &Ratio, lines: &[Counted], ctx: &Context, counters: bool) -> Option<Measured> {
    let bad = |reason: String, e: &Entry| {
        Some(Measured::Incoherent(Seen {
            reason: format!("{reason}; per-request lines are never summed then"),
            evidence: e.text.clone(),
        }))
    };
    if ctx.ready_known {
        if let Some(c) = lines.iter().find(|c| !c.entry.after_ready) {
            return bad(
                format!(
                    "a `{}` line before the server said it was ready, outside the requests' time span",
                    r.what
                ),
                c.entry,
            );
        }
    }
    for (i, c) in lines.iter().enumerate() {
        let Some(task) = &c.task else { continue };
        if let Some(first) = lines[..i].iter().find(|d| d.task.as_ref() == Some(task)) {
            return bad(
                format!("two `{}` lines for task {}", r.what, quoted(task)),
                &Entry {
                    text: format!("{} | and: {}", first.entry.text, c.entry.text),
                    ..c.entry.clone()
                },
            );
        }
    }
    if let Some(sent) = ctx.ev.requests {
        if lines.len() > sent {
            return bad(
                format!(
                    "{} `{}` lines for the {sent} request(s) kiln sent",
                    lines.len(),
                    r.what
                ),
                lines[sent].entry,
            );
        }
    }
    let ids: Vec<i64> = lines
        .iter()
        .filter_map(|c| c.task.as_deref()?.parse().ok())
        .collect();
    let rising = ids.windows(2).all(|w| w[0] < w[1]);
    if !rising && !counters && ctx.ev.requests.is_none() {
        let at = lines.iter().find(|c| c.task.is_some())?;
        return Some(Measured::Invalid(Seen {
            reason: format!(
                "the task ids of the `{}` lines do not increase: the log may hold more than one launch, and no counter says which lines are this one's",
                r.what
            ),
            evidence: at.entry.text.clone(),
        }));
    }
    None
}

/// The share (part / whole): per-request lines from the server's counters when it reports them
/// (the lines only corroborate: they may not claim more than the counters), else their sum once
/// they are coherent; other ratios summed over every matching entry (or judged line by line),
/// else from the counters. None when nothing has a count (the caller falls through).
fn judge_ratio(r: &Ratio, own: &[&Entry], ctx: &Context) -> Option<Measured> {
    let lines = match counted(r, own) {
        Ok(l) => l,
        Err(m) => return Some(m),
    };
    let counters = match from_metrics(r, ctx.ev) {
        Ok(c) => c,
        Err(m) if r.per_request || lines.is_empty() => return Some(m),
        Err(_) => None,
    };
    let found = if r.per_request {
        if let Some(m) = incoherent(r, &lines, ctx, counters.is_some()) {
            return Some(m);
        }
        let (part, whole) = lines
            .iter()
            .fold((0.0, 0.0), |(p, w), c| (p + c.part, w + c.whole));
        if let Some((p, w, evidence)) = counters {
            if part > p || whole > w {
                return Some(Measured::Incoherent(Seen {
                    reason: format!(
                        "the log's `{}` lines add up to {}/{}, more than the server's counters ({}/{}); per-request lines are never summed then",
                        r.what,
                        number(part),
                        number(whole),
                        number(p),
                        number(w)
                    ),
                    evidence: format!("{evidence} | log: {}", lines.last()?.entry.text),
                }));
            }
            (p, w, evidence)
        } else {
            let last = lines.last()?.entry.text.clone();
            if whole > 0.0 && part / whole + 1e-9 >= r.min {
                return Some(Measured::Invalid(Seen {
                    reason: format!(
                        "the log's `{}` lines add up to {}/{} ({:.1} %), but per-request lines only corroborate: the server's counters decide (give the metrics page, `--metrics`)",
                        r.what,
                        number(part),
                        number(whole),
                        part / whole * 100.0
                    ),
                    evidence: last,
                }));
            }
            (part, whole, last)
        }
    } else if r.each {
        // Each line on its own: keep the worst share against what it had to reach.
        let worst = lines.iter().min_by(|a, b| {
            let share = |c: &Counted| c.part / c.whole.max(f64::MIN_POSITIVE) - needed(r, c, ctx);
            share(a).total_cmp(&share(b))
        });
        match worst {
            Some(c) => (c.part, c.whole, c.entry.text.clone()),
            None => counters?,
        }
    } else if lines.is_empty() {
        counters?
    } else {
        let (part, whole) = lines
            .iter()
            .fold((0.0, 0.0), |(p, w), c| (p + c.part, w + c.whole));
        (part, whole, lines.last()?.entry.text.clone())
    };
    let (part, whole, evidence) = found;
    if whole <= 0.0 {
        return None;
    }
    let share = part / whole;
    let asked = asked_part(r, ctx).filter(|&a| a < whole);
    let need = asked.map_or(r.min, |a| a / whole);
    let (part_shown, whole_shown) = (number(part), number(whole));
    let mut reason = format!(
        "{part_shown}/{whole_shown} {} ({:.1} %)",
        r.what,
        share * 100.0
    );
    if let Some(a) = asked {
        reason.push_str(&format!(", as asked ({} asked)", number(a)));
    }
    Some(if share + 1e-9 >= need {
        Measured::Reached(Seen { reason, evidence })
    } else {
        match asked {
            Some(a) => {
                reason = format!(
                    "{part_shown}/{whole_shown} {}, below the {} asked",
                    r.what,
                    number(a)
                );
            }
            None => reason.push_str(&format!(", below the {:.0} % it takes", r.min * 100.0)),
        }
        Measured::Below(Seen { reason, evidence })
    })
}

/// The part the launch asked for (`-ngl 12`: 12), where the ratio takes it from the flag and the
/// value is a whole number.
fn asked_part(r: &Ratio, ctx: &Context) -> Option<f64> {
    if !r.part_from_flag {
        return None;
    }
    ctx.value.parse::<u64>().ok().map(|n| n as f64)
}

/// The share line `c` has to reach: what the launch asked for where it asked for less than the
/// whole, else the ratio's `min`.
fn needed(r: &Ratio, c: &Counted, ctx: &Context) -> f64 {
    match asked_part(r, ctx) {
        Some(a) if a < c.whole && c.whole > 0.0 => a / c.whole,
        _ => r.min,
    }
}

/// The mean of a level over every matching entry (SGLang's accept length per decode batch).
fn judge_level(l: &Level, own: &[&Entry]) -> Option<Measured> {
    let mut values = Vec::new();
    let mut last = None;
    for e in own {
        let Some(c) = l.pattern.captures(&e.message) else {
            continue;
        };
        let Ok(v) = c[1].parse::<f64>() else {
            continue;
        };
        if !v.is_finite() || v < 0.0 {
            return Some(Measured::Invalid(Seen {
                reason: format!("the log's {} cannot be right: {}", l.what, number(v)),
                evidence: e.text.clone(),
            }));
        }
        values.push(v);
        last = Some(e.text.clone());
    }
    let evidence = last?;
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    // Two decimals, but not 300 digits before them: a huge mean in scientific notation.
    let shown = if mean < 1e15 {
        format!("{mean:.2}")
    } else {
        number(mean)
    };
    let reason = format!("{} {shown} (mean of {} lines)", l.what, values.len());
    Some(if mean > l.above + 1e-9 {
        Measured::Reached(Seen { reason, evidence })
    } else {
        Measured::Below(Seen {
            reason: format!("{reason}: no draft token accepted"),
            evidence,
        })
    })
}

/// The value of one Prometheus series: `name` or `name{labels}` exactly as written in the
/// signature set (a series with other labels is not summed in); `Ok(None)` when it is absent,
/// `Err` when its value is not a finite non-negative number or it appears twice.
pub fn counter(text: &str, series: &str) -> Result<Option<f64>, String> {
    let (name, labels) = split_series(series);
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (got, rest) = match rest.strip_prefix('{') {
            Some(r) => match r.split_once('}') {
                Some((l, v)) => (normalize_labels(l), v),
                None => continue,
            },
            None => (String::new(), rest),
        };
        if !rest.starts_with([' ', '\t']) || got != labels {
            continue;
        }
        let raw = rest.split_whitespace().next().unwrap_or("");
        let v = raw
            .parse::<f64>()
            .map_err(|_| format!("{series} is `{}`", quoted(raw)))?;
        if !v.is_finite() || v < 0.0 {
            return Err(format!("{series} is {}", quoted(raw)));
        }
        if found.replace(v).is_some() {
            return Err(format!("{series} appears twice"));
        }
    }
    Ok(found)
}

fn split_series(series: &str) -> (&str, String) {
    match series.split_once('{') {
        Some((n, l)) => (n, normalize_labels(l.trim_end_matches('}'))),
        None => (series, String::new()),
    }
}

/// Labels sorted, so `{b="1",a="2"}` and `{a="2",b="1"}` are the same set.
fn normalize_labels(l: &str) -> String {
    let mut parts: Vec<&str> = l
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    parts.sort_unstable();
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_values() {
        let args: Vec<String> = ["-t", "1", "--x=3", "--on", "-t", "2", "--neg", "-1"]
            .map(String::from)
            .to_vec();
        assert_eq!(flag_value(&args, "-t").as_deref(), Some("2"));
        assert_eq!(flag_value(&args, "--x").as_deref(), Some("3"));
        assert_eq!(flag_value(&args, "--on").as_deref(), Some(""));
        assert_eq!(flag_value(&args, "--neg").as_deref(), Some("-1"));
        assert_eq!(flag_value(&args, "--missing"), None);
    }

    fn sigs(features: &str) -> Signatures {
        Signatures::parse(
            &format!("name = \"t\"\nready = [\"ready now\"]\n[logger]\nprefix = 'L '\nuser_text = ['request: ']\n{features}"),
            "test",
        )
        .unwrap()
    }

    fn lines(s: &[&str]) -> Vec<String> {
        s.iter().map(|l| (*l).to_string()).collect()
    }

    fn profile(expect: &str) -> Profile {
        Profile {
            expect: vec![expect.into()],
            ..Profile::default()
        }
    }

    fn one(sigs: &Signatures, expect: &str, log: &[String], metrics: Option<&str>) -> Verdict {
        let ev = Evidence {
            log,
            metrics,
            after_traffic: true,
            ..Evidence::default()
        };
        judge(sigs, &profile(expect), &ev).remove(0)
    }

    const FA: &str = "[[feature]]\nid = \"fa\"\nactive = [\"fa = 1\"]\nfell_back = [{ match = \"fa = 0\", reason = \"off\" }]\nabsent = \"unknown\"\nabsent_reason = \"none\"\n";

    #[test]
    fn a_failed_warm_up_request_is_part_of_the_reason() {
        let sigs = sigs("[[feature]]\nid = \"graphs\"\nneeds_traffic = true\nactive = [\"captured\"]\nabsent = \"fell back\"\nabsent_reason = \"none\"\n");
        let ev = Evidence {
            traffic_error: Some("connection refused".into()),
            ..Evidence::default()
        };
        let v = &judge(&sigs, &profile("graphs"), &ev)[0];
        assert_eq!(v.status, Status::Unknown);
        assert!(
            v.reason
                .ends_with("the warm-up request failed: connection refused"),
            "{}",
            v.reason
        );
    }

    #[test]
    fn only_anchored_logger_entries_before_readiness_count_for_start_up() {
        let s = sigs(FA);
        let v = one(&s, "fa", &lines(&["L fa = 1"]), None);
        assert_eq!(v.status, Status::Active);
        for forged in ["fa = 1", "L request: fa = 1", "L x fa = 1", "L ready now"] {
            let log = lines(&[forged]);
            assert_eq!(
                one(&s, "fa", &log, None).status,
                Status::Unknown,
                "{forged}"
            );
        }
        let late = lines(&["L ready now", "L fa = 1"]);
        assert_eq!(one(&s, "fa", &late, None).status, Status::Unknown);
    }

    #[test]
    fn negative_evidence_wins_over_positive() {
        let s = sigs(FA);
        let v = one(&s, "fa", &lines(&["L fa = 1", "L fa = 0"]), None);
        assert_eq!(v.status, Status::Conflicting);
        assert_eq!(v.evidence.as_deref(), Some("L fa = 1 | against: L fa = 0"));
        assert!(v.status.is_failure() && !v.status.proven_active());
    }

    #[test]
    fn absent_active_is_refused() {
        let e = Signatures::parse(
            "name = \"t\"\n[logger]\nprefix = 'L '\n[[feature]]\nid = \"x\"\nabsent = \"active\"\nabsent_reason = \"r\"\n",
            "t",
        )
        .unwrap_err()
        .render();
        assert!(e.contains("absence is never activity"), "{e}");
        let e = Signatures::parse(
            "name = \"t\"\n[[feature]]\nid = \"x\"\nabsent = \"unknown\"\nabsent_reason = \"r\"\n",
            "t",
        )
        .unwrap_err()
        .render();
        assert!(e.contains("no [logger] table"), "{e}");
    }

    #[test]
    fn counts_that_cannot_be_true_are_unknown() {
        let s = sigs("[[feature]]\nid = \"spec\"\nratio = { match = \"acc (\\\\d+)/(\\\\d+)\", metrics = [\"a\", \"d\"], min = 0.3, what = \"accepted\" }\nabsent = \"fell back\"\nabsent_reason = \"none\"\n");
        let v = one(&s, "spec", &lines(&["L acc 500/100"]), None);
        assert_eq!(v.status, Status::Unknown, "{v:?}");
        for (metrics, why) in [
            ("a 500\nd 100\n", "more than"),
            ("a +Inf\nd 100\n", "+Inf"),
            ("a -1\nd 100\n", "-1"),
            ("a 1\na 2\nd 100\n", "twice"),
        ] {
            let v = one(&s, "spec", &[], Some(metrics));
            assert_eq!(v.status, Status::Unknown, "{metrics}");
            assert!(v.reason.contains(why), "{}", v.reason);
        }
        // A series with other labels is not summed in.
        let v = one(&s, "spec", &[], Some("a 10\na{x=\"1\"} 90\nd 100\n"));
        assert_eq!(v.status, Status::FellBack, "{v:?}");
        assert!(v.reason.starts_with("10/100 accepted"), "{}", v.reason);
    }

    #[test]
    fn a_level_at_its_floor_fell_back() {
        let s = sigs("[[feature]]\nid = \"spec\"\nlevel = { match = \"accept len: ([0-9.]+)\", above = 1.0, what = \"accept length\" }\nabsent = \"unknown\"\nabsent_reason = \"none\"\n");
        let v = one(
            &s,
            "spec",
            &lines(&["L accept len: 1.00", "L accept len: 1.00"]),
            None,
        );
        assert_eq!(v.status, Status::FellBack);
        assert!(v.reason.contains("no draft token accepted"), "{}", v.reason);
        let v = one(&s, "spec", &lines(&["L accept len: 2.17"]), None);
        assert_eq!(v.status, Status::Active);
    }

    /// A level that cannot be a measurement (negative, not finite) is refused; zero is a real
    /// measurement below the bar (kills cargo-mutants' `||`→`&&`, `<`→`==`/`<=` in judge_level).
    #[test]
    fn a_level_that_cannot_be_true_is_unknown_and_zero_is_below() {
        let s = sigs("[[feature]]\nid = \"spec\"\nlevel = { match = \"accept len: (\\\\S+)\", above = 1.0, what = \"accept length\" }\nabsent = \"unknown\"\nabsent_reason = \"none\"\n");
        for bad in ["-1", "inf", "NaN"] {
            let v = one(&s, "spec", &lines(&[&format!("L accept len: {bad}")]), None);
            assert_eq!(v.status, Status::Unknown, "{bad}: {}", v.reason);
            assert!(v.reason.contains("cannot be right"), "{bad}: {}", v.reason);
        }
        let v = one(&s, "spec", &lines(&["L accept len: 0"]), None);
        assert_eq!(v.status, Status::FellBack, "{}", v.reason);
    }

    /// A counter at zero is a reading, not an error (kills `<`→`<=` in counter).
    #[test]
    fn a_counter_at_zero_is_read() {
        assert_eq!(counter("reqs 0\n", "reqs"), Ok(Some(0.0)));
        assert!(counter("reqs -1\n", "reqs").is_err());
    }

    #[test]
    fn prometheus_counters() {
        let text = "# HELP x\nllamacpp:spec_decode_num_accepted_tokens_total 12\nllamacpp:spec_decode_num_accepted_tokens_totalx 5\nreqs{a=\"1\"} 2\nreqs{a=\"2\"} 3\n";
        assert_eq!(
            counter(text, "llamacpp:spec_decode_num_accepted_tokens_total"),
            Ok(Some(12.0))
        );
        assert_eq!(counter(text, "reqs"), Ok(None));
        assert_eq!(counter(text, "reqs{a=\"2\"}"), Ok(Some(3.0)));
        assert_eq!(counter(text, "missing"), Ok(None));
    }

    /// The shipped llama-server set, the launch `llama-server ARGS`, judged after traffic.
    fn llama(
        args: &[&str],
        log: &[&str],
        metrics: Option<&str>,
        requests: Option<usize>,
    ) -> Verdict {
        let sigs =
            Signatures::resolve("llama-server", std::path::Path::new("/nonexistent")).unwrap();
        let profile = Profile {
            cmd: vec!["llama-server".into()],
            args: args.iter().map(|a| (*a).to_string()).collect(),
            ..Profile::default()
        };
        let log = lines(log);
        let ev = Evidence {
            log: &log,
            metrics,
            after_traffic: true,
            requests,
            ..Evidence::default()
        };
        let feature = if args.contains(&"-md") {
            "speculative"
        } else {
            "offload"
        };
        judge(&sigs, &profile, &ev)
            .into_iter()
            .find(|v| v.feature == feature)
            .unwrap()
    }

    /// The speculative verdict of `llama-server -md d.gguf` on `log`.
    fn spec(log: &[&str], metrics: Option<&str>, requests: Option<usize>) -> Verdict {
        llama(&["-md", "d.gguf"], log, metrics, requests)
    }

    const READY: &str = "0.00.300.000 I srv  llama_server: listening on http://127.0.0.1:30090";
    const HONEST_9: &str = "0.01.093.910 I slot print_timing: id  0 | task 9 | draft acceptance = 0.10000 (   10 accepted /   100 generated), mean len =  1.10";
    /// The forgery of issue 30: the server's own prefix, the honest line's task id, 90/100.
    const FORGED_9: &str = "0.01.093.911 I slot print_timing: id 0 | task 9 | draft acceptance = 0.90000 (90 accepted / 100 generated), mean len =  1.90";
    const COUNTERS_10_OF_100: &str = "llamacpp:spec_decode_num_accepted_tokens_total 10\nllamacpp:spec_decode_num_draft_tokens_total 100\n";

    /// A number the server wrote 741 digits long (a task id, a count, a counter, a level) is
    /// quoted short in a verdict's reason (#47): no reason carries a run of more than 40 digits.
    #[test]
    fn numbers_from_the_server_are_quoted_short_in_a_reason() {
        let huge = "9".repeat(741);
        let e300 = format!("1{}", "0".repeat(300));
        let task = HONEST_9.replace("task 9 |", &format!("task {huge} |"));
        let part = HONEST_9.replace("(   10 accepted", &format!("({e300} accepted"));
        let counter = format!("llamacpp:spec_decode_num_accepted_tokens_total {huge}\nllamacpp:spec_decode_num_draft_tokens_total 100\n");
        let level = sigs("[[feature]]\nid = \"spec\"\nlevel = { match = \"accept len: (\\\\S+)\", above = 1.0, what = \"accept length\" }\nabsent = \"unknown\"\nabsent_reason = \"none\"\n");
        let verdicts = [
            spec(&[READY, &task, &task], None, None),
            spec(&[READY, &part], None, None),
            spec(&[READY, HONEST_9], Some(&counter), None),
            one(
                &level,
                "spec",
                &lines(&[&format!("L accept len: -{e300}")]),
                None,
            ),
            one(
                &level,
                "spec",
                &lines(&[&format!("L accept len: {e300}")]),
                None,
            ),
        ];
        for v in verdicts {
            let digits = v
                .reason
                .split(|c: char| !c.is_ascii_digit())
                .map(str::len)
                .max()
                .unwrap_or(0);
            assert!(digits <= 40, "{} digits in: {}", digits, v.reason);
            assert!(v.reason.chars().count() < 300, "{}", v.reason);
        }
    }

    /// A level's mean is shown with two decimals below 1e15 and as a number from there on (the
    /// boundary of issue 48's shard 3/4 mutants `<` → `==` and `<` → `<=`).
    #[test]
    fn a_levels_mean_shows_two_decimals_below_1e15_and_a_plain_number_from_it() {
        let level = sigs("[[feature]]\nid = \"spec\"\nlevel = { match = \"accept len: (\\\\S+)\", above = 1.0, what = \"accept length\" }\nabsent = \"unknown\"\nabsent_reason = \"none\"\n");
        let reason = |v: &str| {
            one(
                &level,
                "spec",
                &lines(&[&format!("L accept len: {v}")]),
                None,
            )
            .reason
        };
        assert_eq!(reason("2.5"), "accept length 2.50 (mean of 1 lines)");
        assert_eq!(
            reason("1000000000000000"),
            "accept length 1000000000000000 (mean of 1 lines)"
        );
    }

    #[test]
    fn two_acceptance_lines_for_one_task_are_conflicting_never_summed() {
        for metrics in [None, Some(COUNTERS_10_OF_100)] {
            let v = spec(&[READY, HONEST_9, FORGED_9], metrics, None);
            assert_eq!(v.status, Status::Conflicting, "{metrics:?}: {v:?}");
            assert!(
                v.reason
                    .starts_with("two `draft tokens accepted` lines for task 9"),
                "{}",
                v.reason
            );
            assert_eq!(
                v.evidence.as_deref(),
                Some(format!("{HONEST_9} | and: {FORGED_9}").as_str())
            );
        }
        // Alone, the honest line is what it says: fell back.
        let v = spec(&[READY, HONEST_9], None, None);
        assert_eq!(v.status, Status::FellBack, "{v:?}");
        assert!(
            v.reason.starts_with("10/100 draft tokens accepted"),
            "{}",
            v.reason
        );
    }

    #[test]
    fn acceptance_lines_that_claim_more_than_the_counters_are_conflicting() {
        let forged_10 = FORGED_9.replace("task 9", "task 10");
        let v = spec(
            &[READY, HONEST_9, &forged_10],
            Some(COUNTERS_10_OF_100),
            None,
        );
        assert_eq!(v.status, Status::Conflicting, "{v:?}");
        assert!(
            v.reason
                .contains("add up to 100/200, more than the server's counters (10/100)"),
            "{}",
            v.reason
        );
        // Lines within the counters corroborate: the counters decide.
        let v = spec(&[READY, HONEST_9], Some("llamacpp:spec_decode_num_accepted_tokens_total 95\nllamacpp:spec_decode_num_draft_tokens_total 100\n"), None);
        assert_eq!(v.status, Status::Active, "{v:?}");
        assert!(
            v.reason.starts_with("95/100 draft tokens accepted"),
            "{}",
            v.reason
        );
    }

    #[test]
    fn an_acceptance_line_before_readiness_or_beyond_the_requests_is_conflicting() {
        let v = spec(&[FORGED_9, READY], Some(COUNTERS_10_OF_100), None);
        assert_eq!(v.status, Status::Conflicting, "{v:?}");
        assert!(
            v.reason.contains("before the server said it was ready"),
            "{}",
            v.reason
        );
        let honest_10 = HONEST_9.replace("task 9", "task 10");
        let v = spec(&[READY, HONEST_9, &honest_10], None, Some(1));
        assert_eq!(v.status, Status::Conflicting, "{v:?}");
        assert!(
            v.reason
                .starts_with("2 `draft tokens accepted` lines for the 1 request(s) kiln sent"),
            "{}",
            v.reason
        );
        assert_eq!(v.evidence.as_deref(), Some(honest_10.as_str()));
        // As many lines as requests: coherent, judged.
        let v = spec(&[READY, HONEST_9, &honest_10], None, Some(2));
        assert_eq!(v.status, Status::FellBack, "{v:?}");
    }

    #[test]
    fn acceptance_from_lines_alone_is_unknown_and_a_captured_log_out_of_order_too() {
        let high = HONEST_9.replace("(   10 accepted", "(   95 accepted");
        let v = spec(&[READY, &high], None, None);
        assert_eq!(v.status, Status::Unknown, "{v:?}");
        assert!(
            v.reason.contains("the server's counters decide"),
            "{}",
            v.reason
        );
        let earlier = HONEST_9.replace("task 9", "task 3");
        let v = spec(&[READY, HONEST_9, &earlier], None, None);
        assert_eq!(v.status, Status::Unknown, "{v:?}");
        assert!(
            v.reason
                .contains("task ids of the `draft tokens accepted` lines do not increase"),
            "{}",
            v.reason
        );
    }

    /// The H200 log's offload line (`load_tensors: offloaded 17/17 layers to GPU`), as llama.cpp
    /// prints it for `n` of 17 layers.
    fn offloaded(n: u32) -> String {
        format!("0.00.407.497 I load_tensors: offloaded {n}/17 layers to GPU")
    }

    #[test]
    fn an_offload_is_judged_by_what_the_launch_asked_for() {
        let v = llama(&["-ngl", "12"], &[&offloaded(12), READY], None, None);
        assert_eq!(v.status, Status::Active, "{v:?}");
        assert_eq!(
            v.reason,
            "12/17 layers on the GPU (70.6 %), as asked (12 asked)"
        );
        let v = llama(&["-ngl", "12"], &[&offloaded(11), READY], None, None);
        assert_eq!(v.status, Status::FellBack, "{v:?}");
        assert_eq!(v.reason, "11/17 layers on the GPU, below the 12 asked");
        for ask in ["999", "17"] {
            let v = llama(&["-ngl", ask], &[&offloaded(12), READY], None, None);
            assert_eq!(v.status, Status::FellBack, "{ask}: {v:?}");
            assert!(
                v.reason.ends_with("below the 100 % it takes"),
                "{}",
                v.reason
            );
            let v = llama(&["-ngl", ask], &[&offloaded(17), READY], None, None);
            assert_eq!(v.status, Status::Active, "{ask}: {v:?}");
        }
        // Each model on its own: a draft of 5 layers whole, the target short of the 12 asked.
        let draft = "0.00.773.237 I load_tensors: offloaded 5/5 layers to GPU";
        let v = llama(&["-ngl", "12"], &[draft, &offloaded(10), READY], None, None);
        assert_eq!(v.status, Status::FellBack, "{v:?}");
    }

    #[test]
    fn configured_is_not_proven_active_nor_a_failure() {
        assert!(!Status::Configured.proven_active());
        assert!(!Status::Configured.is_failure());
        let proven: Vec<Status> = [
            Status::Active,
            Status::FellBack,
            Status::Crashed,
            Status::Conflicting,
            Status::Configured,
            Status::Unknown,
        ]
        .into_iter()
        .filter(|s| s.proven_active())
        .collect();
        assert_eq!(proven, [Status::Active]);
    }

    #[test]
    fn a_verdict_line_is_feature_status_reason_then_the_evidence_escaped_and_clipped() {
        let v = Verdict {
            feature: "fa".into(),
            status: Status::FellBack,
            reason: "off\u{1b}".into(),
            evidence: Some(format!("{}\u{7}", "e".repeat(170))),
        };
        assert_eq!(
            v.line(),
            format!(
                "{:<28} fell back: off\\u{{1b}}\n{:<28}   evidence: {}…",
                "fa",
                "",
                "e".repeat(160)
            )
        );
        // At the limit nothing is clipped; without evidence, one line.
        let at_limit = Verdict {
            evidence: Some("e".repeat(160)),
            ..v.clone()
        };
        assert!(
            at_limit
                .line()
                .ends_with(&format!("\n{:<28}   evidence: {}", "", "e".repeat(160))),
            "{}",
            at_limit.line()
        );
        let bare = Verdict {
            evidence: None,
            ..v
        };
        assert_eq!(bare.line(), format!("{:<28} fell back: off\\u{{1b}}", "fa"));
    }

    #[test]
    fn a_flag_turned_off_requests_nothing_and_one_turned_on_is_judged() {
        let s = sigs("[[feature]]\nid = \"fa\"\nflags = [\"-fa\"]\nactive = [\"fa = 1\"]\nabsent = \"unknown\"\nabsent_reason = \"none\"\n");
        let log = lines(&["L fa = 1"]);
        let ev = Evidence {
            log: &log,
            after_traffic: true,
            ..Evidence::default()
        };
        let judged = |args: &[&str]| -> Vec<String> {
            let p = Profile {
                args: args.iter().map(|a| (*a).to_string()).collect(),
                ..Profile::default()
            };
            judge(&s, &p, &ev).into_iter().map(|v| v.feature).collect()
        };
        for off in ["off", "OFF", "0", "false", "disabled", "none", "no"] {
            assert!(judged(&["-fa", off]).is_empty(), "-fa {off}");
        }
        assert_eq!(judged(&["-fa", "on"]), ["fa"]);
        assert_eq!(judged(&["-fa=1"]), ["fa"]);
        assert!(judged(&[]).is_empty());
    }

    #[test]
    fn only_a_requested_feature_that_shows_under_traffic_needs_a_request() {
        let s = sigs("[[feature]]\nid = \"graphs\"\nflags = [\"--graphs\"]\nneeds_traffic = true\nactive = [\"captured\"]\nabsent = \"fell back\"\nabsent_reason = \"none\"\n[[feature]]\nid = \"fa\"\nflags = [\"-fa\"]\nactive = [\"fa = 1\"]\nabsent = \"unknown\"\nabsent_reason = \"none\"\n");
        let launch = |args: &[&str]| Profile {
            args: args.iter().map(|a| (*a).to_string()).collect(),
            ..Profile::default()
        };
        assert!(needs_traffic(&s, &launch(&["--graphs"])));
        assert!(needs_traffic(&s, &profile("graphs")));
        assert!(!needs_traffic(&s, &launch(&["-fa", "on"])));
        assert!(!needs_traffic(&s, &launch(&["--graphs", "off"])));
    }

    #[test]
    fn an_expected_id_without_a_signature_is_unknown_and_one_with_is_judged_once() {
        let s = sigs(FA);
        let p = Profile {
            expect: vec!["fa".into(), "nope".into()],
            ..Profile::default()
        };
        let log = lines(&["L fa = 1"]);
        let ev = Evidence {
            log: &log,
            ..Evidence::default()
        };
        let got = judge(&s, &p, &ev);
        let seen: Vec<(&str, Status)> =
            got.iter().map(|v| (v.feature.as_str(), v.status)).collect();
        assert_eq!(seen, [("fa", Status::Active), ("nope", Status::Unknown)]);
        assert_eq!(got[1].reason, "no signature for it in test");
    }

    #[test]
    fn no_evidence_is_the_absent_status_and_waits_for_traffic_only_where_it_needs_it() {
        let s = sigs("[[feature]]\nid = \"boot\"\nactive = [\"boot = 1\"]\nabsent = \"fell back\"\nabsent_reason = \"never said\"\n[[feature]]\nid = \"hot\"\nneeds_traffic = true\nactive = [\"hot = 1\"]\nabsent = \"fell back\"\nabsent_reason = \"never said\"\n");
        for after_traffic in [false, true] {
            let ev = Evidence {
                after_traffic,
                ..Evidence::default()
            };
            let boot = judge(&s, &profile("boot"), &ev).remove(0);
            assert_eq!(
                (boot.status, boot.reason.as_str()),
                (Status::FellBack, "never said")
            );
            let hot = judge(&s, &profile("hot"), &ev).remove(0);
            let want = if after_traffic {
                (Status::FellBack, "never said")
            } else {
                (
                    Status::Unknown,
                    "shows only once the server has answered requests",
                )
            };
            assert_eq!((hot.status, hot.reason.as_str()), want);
        }
    }

    #[test]
    fn a_crash_line_is_crashed_after_a_traceback_or_once_the_server_exited() {
        let s = sigs("[[feature]]\nid = \"sym\"\nactive = [\"sym = 1\"]\ncrashed = [\"KeyError: \\\\d+\\\\s*$\"]\nabsent = \"unknown\"\nabsent_reason = \"none\"\n");
        let judged = |log: &[&str], exited: bool| {
            let log = lines(log);
            let ev = Evidence {
                log: &log,
                exited,
                ..Evidence::default()
            };
            let v = judge(&s, &profile("sym"), &ev).remove(0);
            (v.status, v.evidence)
        };
        let traceback = [
            "L loading",
            "Traceback (most recent call last):",
            "  File \"/x/sym.py\", line 83, in __init__",
            "KeyError: 12",
        ];
        let crashed = |e: &str| (Status::Crashed, Some(e.to_string()));
        assert_eq!(judged(&traceback, false), crashed("KeyError: 12"));
        // A lone exception line (typed into a prompt) is nothing while the server runs.
        assert_eq!(
            judged(&["L loading", "KeyError: 12"], false),
            (Status::Unknown, None)
        );
        // Once the server has exited: a raw crash line, or one of its own logger's.
        assert_eq!(
            judged(&["L loading", "KeyError: 12"], true),
            crashed("KeyError: 12")
        );
        assert_eq!(
            judged(&["L loading", "L KeyError: 7"], true),
            crashed("L KeyError: 7")
        );
        assert_eq!(
            judged(&["L loading", "L KeyError: 7"], false),
            (Status::Unknown, None)
        );
    }

    #[test]
    fn a_closed_gate_of_the_launch_is_a_predicted_fall_back() {
        let s = sigs("[[feature]]\nid = \"sym\"\nactive = [\"sym = 1\"]\ngate = [{ flags = [\"--tp-size\", \"--tp\"], min = 2, default = 1, reason = \"TP={value}: one rank\" }, { env = \"SYM_OFF\", off = [\"1\"], reason = \"SYM_OFF={value}\" }]\nabsent = \"unknown\"\nabsent_reason = \"none\"\n");
        let judged = |args: &[&str], env: &[(&str, &str)]| {
            let p = Profile {
                args: args.iter().map(|a| (*a).to_string()).collect(),
                env: env
                    .iter()
                    .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                    .collect(),
                expect: vec!["sym".into()],
                ..Profile::default()
            };
            let v = judge(&s, &p, &Evidence::default()).remove(0);
            (v.status, v.reason, v.evidence.unwrap_or_default())
        };
        let fell = |reason: &str, evidence: &str| {
            (Status::FellBack, reason.to_string(), evidence.to_string())
        };
        assert_eq!(
            judged(&["--tp", "1"], &[]),
            fell("predicted: TP=1: one rank", "from the launch: --tp 1")
        );
        assert_eq!(
            judged(&[], &[]),
            fell(
                "predicted: TP=1: one rank",
                "from the launch: --tp-size not given (the default)"
            )
        );
        assert_eq!(
            judged(&["--tp-size", "2"], &[("SYM_OFF", "1")]),
            fell(
                "predicted: SYM_OFF=1",
                "from the launch: SYM_OFF=1 in the profile's env"
            )
        );
        // Open gates: the verdict is the feature's own (no evidence: unknown).
        for env in [&[][..], &[("SYM_OFF", "0")][..]] {
            assert_eq!(
                judged(&["--tp-size", "2"], env).0,
                Status::Unknown,
                "{env:?}"
            );
        }
    }

    #[test]
    fn a_count_is_finite_non_negative_and_within_its_whole() {
        for (part, whole) in [(1.0, 2.0), (2.0, 2.0), (0.0, 0.0)] {
            assert_eq!(check_counts(part, whole), Ok(()), "{part}/{whole}");
        }
        for (part, whole) in [(f64::NAN, 2.0), (1.0, f64::INFINITY), (f64::INFINITY, 2.0)] {
            assert_eq!(
                check_counts(part, whole),
                Err("a count is not finite".into()),
                "{part}/{whole}"
            );
        }
        for (part, whole) in [(-1.0, 2.0), (1.0, -1.0)] {
            assert_eq!(
                check_counts(part, whole),
                Err("a count is negative".into()),
                "{part}/{whole}"
            );
        }
        assert_eq!(
            check_counts(3.0, 2.0),
            Err("3 is more than the 2 it is part of".into())
        );
    }

    #[test]
    fn task_ids_are_compared_by_value_and_rising_ones_are_summed() {
        let padded = FORGED_9.replace("task 9", "task 09");
        let v = spec(&[READY, HONEST_9, &padded], None, None);
        assert_eq!(v.status, Status::Conflicting, "{v:?}");
        assert!(
            v.reason
                .starts_with("two `draft tokens accepted` lines for task 9"),
            "{}",
            v.reason
        );
        // Rising ids in a captured log, no counters: the lines are summed (10 % fell back).
        let honest_10 = HONEST_9.replace("task 9", "task 10");
        let v = spec(&[READY, HONEST_9, &honest_10], None, None);
        assert_eq!(v.status, Status::FellBack, "{v:?}");
        assert!(
            v.reason.starts_with("20/200 draft tokens accepted"),
            "{}",
            v.reason
        );
    }

    #[test]
    fn a_summed_ratio_with_unreadable_counters_is_judged_by_its_lines() {
        let s = sigs("[[feature]]\nid = \"spec\"\nratio = { match = \"acc (\\\\d+)/(\\\\d+)\", metrics = [\"a\", \"d\"], min = 0.3, what = \"accepted\" }\nabsent = \"fell back\"\nabsent_reason = \"none\"\n");
        let v = one(&s, "spec", &lines(&["L acc 50/100"]), Some("a -1\nd 100\n"));
        assert_eq!(v.status, Status::Active, "{v:?}");
        assert!(v.reason.starts_with("50/100 accepted"), "{}", v.reason);
        // Without lines, the counters' fault is the verdict.
        let v = one(&s, "spec", &[], Some("a -1\nd 100\n"));
        assert_eq!(v.status, Status::Unknown, "{v:?}");
    }

    #[test]
    fn lines_above_either_counter_conflict_and_lines_equal_to_them_corroborate() {
        let counters = |a: u32, d: u32| {
            format!("llamacpp:spec_decode_num_accepted_tokens_total {a}\nllamacpp:spec_decode_num_draft_tokens_total {d}\n")
        };
        for (a, d) in [(5, 100), (10, 50)] {
            let v = spec(&[READY, HONEST_9], Some(&counters(a, d)), None);
            assert_eq!(v.status, Status::Conflicting, "{a}/{d}: {v:?}");
            assert!(
                v.reason.contains(&format!(
                    "add up to 10/100, more than the server's counters ({a}/{d})"
                )),
                "{}",
                v.reason
            );
        }
        let v = spec(&[READY, HONEST_9], Some(&counters(10, 100)), None);
        assert_eq!(v.status, Status::FellBack, "{v:?}");
        assert!(
            v.reason.starts_with("10/100 draft tokens accepted"),
            "{}",
            v.reason
        );
    }

    #[test]
    fn lines_whose_share_is_exactly_the_minimum_reach_it() {
        let at_min = HONEST_9.replace("(   10 accepted", "(   30 accepted");
        let v = spec(&[READY, &at_min], None, None);
        assert_eq!(v.status, Status::Unknown, "{v:?}");
        assert!(
            v.reason
                .contains("add up to 30/100 (30.0 %), but per-request lines only corroborate"),
            "{}",
            v.reason
        );
    }

    #[test]
    fn the_worst_line_is_the_one_furthest_below_what_it_had_to_reach() {
        // The target 6/120 is 0.05 short of the 10 % its `-ngl 12` asks; the draft 9/10 is 0.1
        // short of the whole it takes (12 is more than its 10 layers): the draft is the worst.
        let target = "0.00.407.497 I load_tensors: offloaded 6/120 layers to GPU";
        let draft = "0.00.773.237 I load_tensors: offloaded 9/10 layers to GPU";
        let v = llama(&["-ngl", "12"], &[target, draft, READY], None, None);
        assert_eq!(v.status, Status::FellBack, "{v:?}");
        assert_eq!(
            v.reason,
            "9/10 layers on the GPU (90.0 %), below the 100 % it takes"
        );
        assert_eq!(v.evidence.as_deref(), Some(draft));
    }

    #[test]
    fn a_ratio_that_is_not_per_request_sums_its_lines() {
        let s = sigs("[[feature]]\nid = \"spec\"\nratio = { match = \"acc (\\\\d+)/(\\\\d+)\", min = 0.3, what = \"accepted\" }\nabsent = \"fell back\"\nabsent_reason = \"none\"\n");
        let v = one(&s, "spec", &lines(&["L acc 10/100", "L acc 30/50"]), None);
        assert_eq!(v.status, Status::FellBack, "{v:?}");
        assert!(
            v.reason.starts_with("40/150 accepted (26.7 %)"),
            "{}",
            v.reason
        );
        assert_eq!(v.evidence.as_deref(), Some("L acc 30/50"));
    }

    #[test]
    fn the_six_statuses_read_as_the_docs_name_them() {
        let all = [
            Status::Active,
            Status::FellBack,
            Status::Crashed,
            Status::Conflicting,
            Status::Configured,
            Status::Unknown,
        ];
        assert_eq!(
            all.map(Status::label),
            [
                "active",
                "fell back",
                "crashed",
                "conflicting",
                "configured",
                "unknown"
            ]
        );
    }
}
