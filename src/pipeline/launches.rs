//! Which launch each figure of a `kiln up` came from. A profile with `evidence_args` is served
//! twice: a judged launch (args + evidence_args: readiness, verdicts, greedy A/B), stopped, then a
//! bench launch (args only: readiness, the verdicts its own log can still show, the benchmark),
//! left running. Without evidence_args one launch does everything. docs/serve-bench.md ("Judged
//! and bench launches").

use std::path::PathBuf;

use serde::Serialize;

use super::Launched;
use crate::bench::wire::escape_controls;
use crate::serve::verdict::{Status, Verdict};

/// What a launch was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// With the evidence-only args: verdicts and the greedy A/B.
    Judged,
    /// Without them: the benchmark; the server left running.
    Bench,
    /// The only launch (the profile has no evidence-only args): everything.
    Single,
}

impl Role {
    pub fn label(self) -> &'static str {
        match self {
            Role::Judged => "judged launch",
            Role::Bench => "bench launch",
            Role::Single => "the only launch",
        }
    }
}

/// One launch of the served profile, as report.json's `launches` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct LaunchSummary {
    pub launch: Role,
    pub pid: u32,
    /// The server log (appended launch after launch) and where this launch's lines start: the
    /// line `=== kiln serve … [launch ID]: COMMAND` at that offset.
    pub log: PathBuf,
    pub log_offset: u64,
    pub launch_id: String,
    pub ready_after_s: f64,
    /// What this launch's arguments add to (or change in) the profile's `args`: the applied
    /// `evidence_args` of a judged launch; empty for a bench launch.
    pub args_difference: Vec<String>,
    /// The report's figures that come from this launch (`verdicts`, `greedy_ab`, `bench`,
    /// `ceiling_ratio`).
    pub figures: Vec<&'static str>,
    /// The verdicts judged from this launch.
    pub verdicts: Vec<Verdict>,
}

impl LaunchSummary {
    pub fn of(
        l: &Launched,
        launch: Role,
        figures: Vec<&'static str>,
        verdicts: Vec<Verdict>,
    ) -> LaunchSummary {
        let r = &l.running.record;
        let p = l.variant.profile;
        LaunchSummary {
            launch,
            pid: r.pid,
            log: r.log.clone(),
            log_offset: r.log_offset,
            launch_id: r.launch_id.clone(),
            ready_after_s: l.running.ready_after.as_secs_f64(),
            args_difference: if l.evidence {
                crate::recipe::args::evidence_difference(&p.args, &p.evidence_args)
            } else {
                Vec::new()
            },
            figures,
            verdicts,
        }
    }

    /// `judged launch (pid 42, log PATH @ 1234, +-lv 5 (was -lv 4))`.
    pub fn line(&self) -> String {
        let diff = if self.args_difference.is_empty() {
            match self.launch {
                Role::Bench => ", the profile's args only".to_string(),
                _ => String::new(),
            }
        } else {
            format!(", with {}", self.args_difference.join(", "))
        };
        format!(
            "{} (pid {}, log {} from byte {}{diff})",
            self.launch.label(),
            self.pid,
            self.log.display(),
            self.log_offset
        )
    }
}

/// The bench launch's verdicts read against the judged launch's: a verdict the bench launch's
/// log cannot show (no line either way: its evidence needs the evidence-only args) becomes
/// `unknown`, saying so; a tuning active in the judged launch that the bench launch's own lines
/// show fell back or crashed is `conflicting`, and so is the run (the returned failures).
pub fn cross_check(
    profile: &str,
    judged: &[Verdict],
    bench: Vec<Verdict>,
) -> (Vec<Verdict>, Vec<String>) {
    let mut failures = Vec::new();
    let verdicts = bench
        .into_iter()
        .map(|mut b| {
            let before = judged.iter().find(|j| j.feature == b.feature);
            let was_active = before.is_some_and(|j| j.status.proven_active());
            if b.evidence.is_none() && !b.status.proven_active() {
                b.status = Status::Unknown;
                b.reason = format!(
                    "not shown by this launch's log (its evidence-only args are off): {}",
                    b.reason
                );
            } else if b.status.is_failure() && was_active {
                let j = before.expect("was_active implies a judged verdict");
                failures.push(escape_controls(&format!(
                    "profile `{profile}`: {} conflicting evidence: active in the judged launch, {} in the bench launch ({})",
                    b.feature,
                    b.status.label(),
                    b.reason
                )));
                b.reason = format!(
                    "active in the judged launch ({}), {} in this one: {}",
                    j.reason,
                    b.status.label(),
                    b.reason
                );
                b.evidence = Some(format!(
                    "judged: {} | bench: {}",
                    j.evidence.as_deref().unwrap_or("-"),
                    b.evidence.as_deref().unwrap_or("-")
                ));
                b.status = Status::Conflicting;
            } else if b.status.is_failure() && !before.is_some_and(|j| j.status.is_failure()) {
                failures.push(escape_controls(&format!(
                    "profile `{profile}` (bench launch): {} {} ({})",
                    b.feature,
                    b.status.label(),
                    b.reason
                )));
            }
            b
        })
        .collect();
    (verdicts, failures)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(feature: &str, status: Status, evidence: Option<&str>) -> Verdict {
        Verdict {
            feature: feature.into(),
            status,
            reason: "why".into(),
            evidence: evidence.map(String::from),
        }
    }

    #[test]
    fn the_bench_launch_conflicts_only_with_evidence_of_its_own() {
        let judged = [
            v("flash-attn", Status::Active, Some("flash_attn = 1")),
            v(
                "cuda-graphs",
                Status::Active,
                Some("CUDA graph warmup complete"),
            ),
            v("threads", Status::Active, Some("n_threads = 2")),
        ];
        let bench = vec![
            v("flash-attn", Status::FellBack, Some("flash_attn = 0")),
            // Absent at the bench launch's verbosity: the absent rule, not evidence.
            v("cuda-graphs", Status::FellBack, None),
            v("threads", Status::Active, Some("n_threads = 2")),
        ];
        let (out, failures) = cross_check("tuned", &judged, bench);
        assert_eq!(out[0].status, Status::Conflicting);
        assert_eq!(
            out[0].evidence.as_deref(),
            Some("judged: flash_attn = 1 | bench: flash_attn = 0")
        );
        assert_eq!(out[1].status, Status::Unknown);
        assert!(out[1].reason.starts_with("not shown by this launch's log"));
        assert_eq!(out[2].status, Status::Active);
        assert_eq!(
            failures,
            ["profile `tuned`: flash-attn conflicting evidence: active in the judged launch, fell back in the bench launch (why)"]
        );
        // A failure the judged launch already had is not counted twice.
        let judged = [v("flash-attn", Status::FellBack, Some("flash_attn = 0"))];
        let bench = vec![v("flash-attn", Status::FellBack, Some("flash_attn = 0"))];
        assert!(cross_check("tuned", &judged, bench).1.is_empty());
    }
}
