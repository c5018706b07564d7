//! How a `kiln up` run ends. What the verdicts, the greedy A/B and the bench found is either a
//! failure (a tuning fell back or crashed, wrong greedy output) or an advisory (bench noise, a
//! late divergence, a tuning kiln could not prove either way). Advisories are warnings, kept in
//! the report, and fail the run only with `--strict`. docs/recipes.md ("How `kiln up` ends").

use serde::Serialize;

use crate::bench::wire::escape_controls;
use crate::bench::{self, ab::Comparison};
use crate::serve::verdict::Verdict;

/// One phrase per tuning that is not proven active: "profile `tuned`: flash-attn fell back
/// (reason)".
pub fn verdict_problems(profile: &str, verdicts: &[Verdict]) -> Vec<String> {
    verdicts
        .iter()
        .filter(|v| !v.status.proven_active())
        .map(|v| {
            escape_controls(&format!(
                "profile `{profile}`: {} {} ({})",
                v.feature,
                v.status.label(),
                v.reason
            ))
        })
        .collect()
}

/// What went wrong and what is only advisory.
#[derive(Debug, Default)]
pub struct Judgement {
    pub failures: Vec<String>,
    pub warnings: Vec<String>,
}

/// Judge a served profile from its verdicts, its A/B against `baseline` and its bench.
pub fn judge(
    profile: &str,
    verdicts: &[Verdict],
    ab: Option<(&Comparison, &str)>,
    bench: Option<&bench::Report>,
) -> Judgement {
    let mut j = Judgement::default();
    // Only proven-active is active; fell back, crashed and conflicting fail the run; unknown and
    // configured (nothing proves it either way) are advisories.
    let (failed, unknown): (Vec<Verdict>, Vec<Verdict>) = verdicts
        .iter()
        .filter(|v| !v.status.proven_active())
        .cloned()
        .partition(|v| v.status.is_failure());
    j.failures.extend(verdict_problems(profile, &failed));
    j.warnings.extend(verdict_problems(profile, &unknown));
    if let Some((c, base)) = ab {
        let what = format!(
            "greedy A/B `{profile}` against `{base}`: {} ({:.1}% agreement)",
            c.verdict,
            c.agreement * 100.0
        );
        match c.exit_code() {
            0 => {}
            1 => j.warnings.push(what),
            _ => j.failures.push(what),
        }
    }
    if let Some(b) = bench {
        j.warnings
            .extend(b.warnings.iter().map(|w| format!("bench: {w}")));
    }
    j
}

/// report.json's `outcome`: `{"ok", "error", "warnings"}`.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub ok: bool,
    /// The `error:` line `kiln up` ended with, if it failed.
    pub error: Option<String>,
    pub warnings: Vec<String>,
    /// The `hint:` under that line (not in report.json).
    #[serde(skip)]
    pub hint: Option<String>,
}

impl Outcome {
    /// The outcome of a judged run: failures fail it; warnings fail it only when `strict`.
    pub fn of(j: Judgement, strict: bool) -> Outcome {
        let (error, hint) = if !j.failures.is_empty() {
            (
                Some(j.failures.join("; ")),
                "the verdicts and the A/B above show the evidence; the report keeps it",
            )
        } else if strict && !j.warnings.is_empty() {
            (
                Some(format!(
                    "{} warning(s) with --strict: {}",
                    j.warnings.len(),
                    j.warnings.join("; ")
                )),
                "warnings fail `kiln up` only with --strict; the report keeps them",
            )
        } else {
            (None, "")
        };
        Outcome {
            ok: error.is_none(),
            hint: error.as_ref().map(|_| hint.to_string()),
            error,
            warnings: j.warnings,
        }
    }

    /// A run that failed with `error` (before it could be judged).
    pub fn failed(error: String) -> Outcome {
        Outcome {
            ok: false,
            error: Some(error),
            warnings: Vec::new(),
            hint: None,
        }
    }
}
