//! Tuning verdicts: for every tuning the profile asks for, active / fell back / crashed / unknown,
//! with the evidence (a log line, the server's own settings endpoint, or the lack of a line).

use regex::Regex;
use serde::Serialize;

use super::signatures::{Feature, Signatures};
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

/// Verdicts for the features the profile requests (by flag, or by id in `expect`).
pub fn judge(sigs: &Signatures, profile: &Profile, log: &[String]) -> Vec<Verdict> {
    let mut out = Vec::new();
    let argv: Vec<String> = profile.cmd.iter().chain(&profile.args).cloned().collect();
    for f in &sigs.features {
        let value = f.flags.iter().find_map(|fl| flag_value(&argv, fl));
        if value.is_none() && !profile.expect.contains(&f.id) {
            continue;
        }
        out.push(judge_one(f, value.as_deref().unwrap_or(""), log));
    }
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

fn judge_one(f: &Feature, value: &str, log: &[String]) -> Verdict {
    let verdict = |status, reason: String, line: &String| Verdict {
        feature: f.id.clone(),
        status,
        reason,
        evidence: Some(line.trim().to_string()),
    };
    if let Some(line) = log.iter().find(|l| f.crashed.iter().any(|p| p.is_match(l))) {
        return verdict(
            Status::Crashed,
            "the server crashed in its code path".into(),
            line,
        );
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
}
