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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::ab::{compare, Output};
    use crate::serve::verdict::Status;

    fn verdict(feature: &str, status: Status) -> Verdict {
        Verdict {
            feature: feature.into(),
            status,
            reason: format!("why {feature}"),
            evidence: None,
        }
    }

    fn every_status() -> Vec<Verdict> {
        vec![
            verdict("graphs", Status::Active),
            verdict("flash-attn", Status::FellBack),
            verdict("spec", Status::Crashed),
            verdict("hicache", Status::Conflicting),
            verdict("torch-compile", Status::Configured),
            verdict("fp8-kv", Status::Unknown),
        ]
    }

    #[test]
    fn every_tuning_not_proven_active_is_a_problem_named_with_its_profile() {
        assert_eq!(
            verdict_problems("tuned", &every_status()),
            [
                "profile `tuned`: flash-attn fell back (why flash-attn)",
                "profile `tuned`: spec crashed (why spec)",
                "profile `tuned`: hicache conflicting (why hicache)",
                "profile `tuned`: torch-compile configured (why torch-compile)",
                "profile `tuned`: fp8-kv unknown (why fp8-kv)",
            ]
        );
        assert!(verdict_problems("tuned", &[verdict("graphs", Status::Active)]).is_empty());
        // A reason from the server's log reaches the terminal escaped.
        let mut v = verdict("x", Status::Unknown);
        v.reason = "a\u{1b}[2Jb".into();
        assert_eq!(
            verdict_problems("p", &[v]),
            ["profile `p`: x unknown (a\\u{1b}[2Jb)"]
        );
    }

    #[test]
    fn fell_back_crashed_and_conflicting_fail_the_run_configured_and_unknown_warn() {
        let j = judge("tuned", &every_status(), None, None);
        assert_eq!(
            j.failures,
            [
                "profile `tuned`: flash-attn fell back (why flash-attn)",
                "profile `tuned`: spec crashed (why spec)",
                "profile `tuned`: hicache conflicting (why hicache)",
            ]
        );
        // `configured` is never counted as active: it is an advisory, like unknown.
        assert_eq!(
            j.warnings,
            [
                "profile `tuned`: torch-compile configured (why torch-compile)",
                "profile `tuned`: fp8-kv unknown (why fp8-kv)",
            ]
        );
        let o = Outcome::of(j, false);
        assert!(!o.ok);
        assert_eq!(
            o.error.as_deref(),
            Some(
                "profile `tuned`: flash-attn fell back (why flash-attn); profile `tuned`: spec \
                 crashed (why spec); profile `tuned`: hicache conflicting (why hicache)"
            )
        );
        assert_eq!(
            o.hint.as_deref(),
            Some("the verdicts and the A/B above show the evidence; the report keeps it")
        );
        let configured = judge("p", &[verdict("x", Status::Configured)], None, None);
        assert_eq!(
            (configured.failures.len(), configured.warnings.len()),
            (0, 1)
        );
        let active = judge("p", &[verdict("x", Status::Active)], None, None);
        assert!(active.failures.is_empty() && active.warnings.is_empty());
        assert!(Outcome::of(active, true).ok);
    }

    #[test]
    fn warnings_fail_the_run_only_with_strict() {
        let j = || judge("p", &[verdict("x", Status::Configured)], None, None);
        let lax = Outcome::of(j(), false);
        assert!(lax.ok && lax.error.is_none() && lax.hint.is_none());
        assert_eq!(lax.warnings, ["profile `p`: x configured (why x)"]);
        let strict = Outcome::of(j(), true);
        assert!(!strict.ok);
        assert_eq!(
            strict.error.as_deref(),
            Some("1 warning(s) with --strict: profile `p`: x configured (why x)")
        );
        assert_eq!(
            strict.hint.as_deref(),
            Some("warnings fail `kiln up` only with --strict; the report keeps them")
        );
        let failed = Outcome::failed("boom".into());
        assert!(!failed.ok && failed.warnings.is_empty() && failed.hint.is_none());
        assert_eq!(failed.error.as_deref(), Some("boom"));
    }

    #[test]
    fn wrong_greedy_output_fails_a_late_divergence_warns() {
        let ids = |s: &str| vec![Output::of_ids(&s.split(' ').collect::<Vec<_>>())];
        let base = ids("a b c d e f");
        let ab = |cand: &str| {
            let c = compare(&base, &ids(cand), 3);
            judge("tuned", &[], Some((&c, "baseline")), None)
        };
        let same = ab("a b c d e f");
        assert!(same.failures.is_empty() && same.warnings.is_empty());
        let late = ab("a b c d x y");
        assert!(late.failures.is_empty());
        assert_eq!(
            late.warnings,
            ["greedy A/B `tuned` against `baseline`: diverged late (66.7% agreement)"]
        );
        let wrong = ab("a x c d e f");
        assert!(wrong.warnings.is_empty());
        assert_eq!(
            wrong.failures,
            ["greedy A/B `tuned` against `baseline`: wrong output (16.7% agreement)"]
        );
    }

    #[test]
    fn bench_warnings_are_advisories() {
        let summary =
            serde_json::json!({"median": 1.0, "mean": 1.0, "min": 1.0, "max": 1.0, "cv": 0.0});
        let report: bench::Report = serde_json::from_value(serde_json::json!({
            "url": "http://127.0.0.1:1", "api": "openai", "max_tokens": 8, "unix_time": 0,
            "fingerprint": {"gpu": "g", "driver": "d", "server": "s", "model": "m", "server_args": "a"},
            "fingerprint_id": "f", "runs": [], "e2e_tok_s": summary, "decode_tok_s": null,
            "ttft_ms": summary, "accept_length": null, "warnings": ["cv 12% is noisy"], "gate": null,
        }))
        .unwrap();
        let j = judge("p", &[], None, Some(&report));
        assert!(j.failures.is_empty());
        assert_eq!(j.warnings, ["bench: cv 12% is noisy"]);
    }
}
