//! Tuning verdicts: for every tuning the profile asks for, active / fell back / crashed / unknown,
//! with the evidence (a log line, the server's own settings endpoint, or the lack of a line).

use regex::Regex;
use serde::Serialize;

use super::signatures::{Feature, Ratio, Signatures};
use crate::recipe::Profile;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Active,
    FellBack,
    Crashed,
    Unknown,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Active => "active",
            Status::FellBack => "fell back",
            Status::Crashed => "crashed",
            Status::Unknown => "unknown",
        }
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
            self.reason
        );
        if let Some(e) = &self.evidence {
            s.push_str(&format!("\n{:<28}   evidence: {}", "", clip(e, 160)));
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

/// What a verdict is judged from: the server's log, its metrics endpoint's text (Prometheus), and
/// whether it has answered requests yet (some evidence only appears under traffic).
#[derive(Debug, Default)]
pub struct Evidence<'a> {
    pub log: &'a [String],
    pub metrics: Option<&'a str>,
    pub after_traffic: bool,
    /// Why the request meant to give the server traffic failed, if it did.
    pub traffic_error: Option<String>,
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
    let argv: Vec<String> = profile.cmd.iter().chain(&profile.args).cloned().collect();
    let expect = profile.expect.clone();
    sigs.features.iter().filter_map(move |f| {
        let value = f.flags.iter().find_map(|fl| flag_value(&argv, fl));
        let on = value.as_deref().is_some_and(|v| !is_off(v));
        (on || expect.contains(&f.id)).then_some((f, value))
    })
}

/// Whether a feature the profile requests shows its evidence only under traffic.
pub fn needs_traffic(sigs: &Signatures, profile: &Profile) -> bool {
    requested(sigs, profile).any(|(f, _)| f.needs_traffic)
}

/// Verdicts for the features the profile requests (by flag, or by id in `expect`).
pub fn judge(sigs: &Signatures, profile: &Profile, ev: &Evidence) -> Vec<Verdict> {
    let mut out: Vec<Verdict> = requested(sigs, profile)
        .map(|(f, value)| judge_one(f, value.as_deref().unwrap_or(""), ev))
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

fn judge_one(f: &Feature, value: &str, ev: &Evidence) -> Verdict {
    let verdict = |status, reason: String, line: &String| Verdict {
        feature: f.id.clone(),
        status,
        reason,
        evidence: Some(line.trim().to_string()),
    };
    let log = ev.log;
    if let Some(line) = log.iter().find(|l| f.crashed.iter().any(|p| p.is_match(l))) {
        return verdict(
            Status::Crashed,
            "the server crashed in its code path".into(),
            line,
        );
    }
    if let Some(v) = f.ratio.as_ref().and_then(|r| judge_ratio(f, r, ev)) {
        return v;
    }
    let active: Vec<Regex> = f
        .active
        .iter()
        .filter_map(|p| Regex::new(&p.replace("{value}", &regex::escape(value))).ok())
        .collect();
    if let Some(line) = log.iter().find(|l| active.iter().any(|p| p.is_match(l))) {
        let reason = if value.is_empty() {
            "confirmed by the log".to_string()
        } else {
            format!("`{value}` confirmed by the log")
        };
        return verdict(Status::Active, reason, line);
    }
    for (pattern, reason) in &f.fell_back {
        if let Some(line) = log.iter().find(|l| pattern.is_match(l)) {
            return verdict(Status::FellBack, reason.clone(), line);
        }
    }
    if f.needs_traffic && !ev.after_traffic {
        return Verdict {
            feature: f.id.clone(),
            status: Status::Unknown,
            reason: match &ev.traffic_error {
                Some(e) => format!(
                    "shows only once the server has answered requests, and the warm-up request failed: {e}"
                ),
                None => "shows only once the server has answered requests".into(),
            },
            evidence: None,
        };
    }
    let status = match f.absent.as_str() {
        "active" => Status::Active,
        "fell back" => Status::FellBack,
        _ => Status::Unknown,
    };
    Verdict {
        feature: f.id.clone(),
        status,
        reason: f.absent_reason.clone(),
        evidence: None,
    }
}

/// The share (part / whole) summed over every matching log line, else from the metrics counters;
/// None when neither has a count (the caller falls through to the other rules).
fn judge_ratio(f: &Feature, r: &Ratio, ev: &Evidence) -> Option<Verdict> {
    let mut found: Option<(f64, f64, String)> = None;
    for line in ev.log {
        if let Some(c) = r.pattern.captures(line) {
            let (Ok(part), Ok(whole)) = (c[1].parse::<f64>(), c[2].parse::<f64>()) else {
                continue;
            };
            let line = line.trim().to_string();
            found = Some(match found.take() {
                // Each line on its own: keep the worst share.
                Some((p, w, l)) if r.each => {
                    if whole > 0.0 && (w <= 0.0 || part / whole < p / w) {
                        (part, whole, line)
                    } else {
                        (p, w, l)
                    }
                }
                Some((p, w, _)) => (p + part, w + whole, line),
                None => (part, whole, line),
            });
        }
    }
    if let (None, Some([part, whole]), Some(text)) = (&found, &r.metrics, ev.metrics) {
        if let (Some(p), Some(w)) = (counter(text, part), counter(text, whole)) {
            found = Some((p, w, format!("/metrics: {part} {p}, {whole} {w}")));
        }
    }
    let (part, whole, evidence) = found?;
    if whole <= 0.0 {
        return None;
    }
    let share = part / whole;
    let status = if share + 1e-9 >= r.min {
        Status::Active
    } else {
        Status::FellBack
    };
    let mut reason = format!("{part}/{whole} {} ({:.1} %)", r.what, share * 100.0);
    if status == Status::FellBack {
        reason.push_str(&format!(", below the {:.0} % it takes", r.min * 100.0));
    }
    Some(Verdict {
        feature: f.id.clone(),
        status,
        reason,
        evidence: Some(evidence),
    })
}

/// The value of a Prometheus counter (`name value` or `name{labels} value`), summed over labels.
pub fn counter(text: &str, name: &str) -> Option<f64> {
    let mut total = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let rest = match rest.strip_prefix('{') {
            Some(r) => r.split_once('}').map_or("", |(_, v)| v),
            None => rest,
        };
        if !rest.starts_with([' ', '\t']) {
            continue;
        }
        if let Some(v) = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        {
            total = Some(total.unwrap_or(0.0) + v);
        }
    }
    total
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

    #[test]
    fn a_failed_warm_up_request_is_part_of_the_reason() {
        let sigs = Signatures::parse(
            "name = \"t\"\nready = []\n[[feature]]\nid = \"graphs\"\nneeds_traffic = true\nactive = [\"captured\"]\nabsent = \"fell back\"\nabsent_reason = \"none\"\n",
            "test",
        )
        .unwrap();
        let profile = Profile {
            expect: vec!["graphs".into()],
            ..Profile::default()
        };
        let ev = Evidence {
            traffic_error: Some("connection refused".into()),
            ..Evidence::default()
        };
        let v = &judge(&sigs, &profile, &ev)[0];
        assert_eq!(v.status, Status::Unknown);
        assert!(
            v.reason
                .ends_with("the warm-up request failed: connection refused"),
            "{}",
            v.reason
        );
    }

    #[test]
    fn prometheus_counters() {
        let text = "# HELP x\nllamacpp:spec_decode_num_accepted_tokens_total 12\nllamacpp:spec_decode_num_accepted_tokens_totalx 5\nreqs{a=\"1\"} 2\nreqs{a=\"2\"} 3\n";
        assert_eq!(
            counter(text, "llamacpp:spec_decode_num_accepted_tokens_total"),
            Some(12.0)
        );
        assert_eq!(counter(text, "reqs"), Some(5.0));
        assert_eq!(counter(text, "missing"), None);
    }
}
