//! The lines a human reads, shared by the terminal and the plain renderer.

use std::time::Duration;

use super::style::{paint, Stream, Tone};
use super::Outcome;

/// One step's end: `✓ ran    fetch (1.2s)`.
pub(super) fn outcome_line(id: &str, outcome: &Outcome, elapsed: Duration) -> String {
    let p = |tone, s: &str| paint(Stream::Stderr, tone, s);
    match outcome {
        Outcome::Ran => format!("  {} {id} ({})", p(Tone::Good, "✓ ran   "), secs(elapsed)),
        Outcome::Restored(entry) => format!(
            "  {} {id}: restored from cache (entry {entry}) ({})",
            p(Tone::Good, "✓ cached"),
            secs(elapsed)
        ),
        Outcome::UpToDate => format!("  {} {id}", p(Tone::Good, "✓ fresh ")),
        Outcome::Skipped(why) => format!("  {} {id}: {why}", p(Tone::Dim, "- skip  ")),
        Outcome::Failed(why) => format!("  {} {id}: {why}", p(Tone::Bad, "✗ failed")),
        Outcome::NotRun(why) => format!("  {} {id}: {why}", p(Tone::Dim, "- notrun")),
    }
}

/// The run's header: `kiln: demo: 3 of 6 steps to run`.
pub(super) fn run_header(recipe: &str, to_run: usize, total: usize) -> String {
    format!(
        "kiln: {recipe}: {to_run} of {} to run",
        super::count(total, "step")
    )
}

pub(super) fn run_end(ok: bool, elapsed: Duration) -> String {
    let word = if ok {
        paint(Stream::Stderr, Tone::Good, "done")
    } else {
        paint(Stream::Stderr, Tone::Bad, "failed")
    };
    format!("kiln: {word} in {}", secs(elapsed))
}

pub(super) fn attempt(attempt: u32) -> String {
    if attempt > 1 {
        format!(" (attempt {attempt})")
    } else {
        String::new()
    }
}

pub(super) fn warning(text: &str) -> String {
    super::style::labels(&format!("warning: {text}"))
}

/// `6.2s` under a minute, `28m 35s` from one, `2h 3m` from an hour: what the terminal, the
/// plain log and report.html all show for a duration.
pub(crate) fn secs(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{:.1}s", d.as_secs_f64()),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        _ => format!("{}h {}m", s / 3600, s % 3600 / 60),
    }
}

/// `ETA 4m 10s (last build 9m 3s)`: from the last build of the step, else from the rate so far;
/// an ETA that grew says from what and why.
pub(super) fn eta(p: &super::BuildProgress) -> String {
    let last = p
        .last_run
        .map(|l| format!(" (last build {})", secs(l)))
        .unwrap_or_default();
    let grew = p.grew_from.map_or(String::new(), |low| {
        format!(
            ", up from {}: the objects now compiling take longer than the earlier ones (bigger files, or a busier machine)",
            secs(low)
        )
    });
    match p.eta {
        Some(eta) => format!("ETA {}{last}{grew}", secs(eta)),
        None if p.last_run.is_some() => format!("past the last build's time{last}"),
        None => String::new(),
    }
}

/// `12.5 MiB` (binary units, one decimal from KiB on).
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// A transfer for a log line: `12.0 MiB of 24.0 MiB (50%)`.
pub(super) fn transfer(done: u64, total: Option<u64>) -> String {
    match total {
        Some(t) if t > 0 => format!(
            "{} of {} ({}%)",
            bytes(done),
            bytes(t),
            (done.min(t) * 100) / t
        ),
        _ => bytes(done),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_like_a_human_wrote_them() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(24 * 1024 * 1024), "24.0 MiB");
        assert_eq!(bytes(4_000_000_000), "3.7 GiB");
        assert_eq!(transfer(512, Some(1024)), "512 B of 1.0 KiB (50%)");
        assert_eq!(transfer(5, None), "5 B");
    }

    #[test]
    fn durations_read_in_minutes_and_seconds_from_a_minute() {
        assert_eq!(secs(Duration::from_millis(6_240)), "6.2s");
        assert_eq!(secs(Duration::from_millis(59_940)), "59.9s");
        assert_eq!(secs(Duration::from_secs(60)), "1m 0s");
        assert_eq!(secs(Duration::from_millis(1_715_600)), "28m 35s");
        assert_eq!(secs(Duration::from_secs(7_380)), "2h 3m");
    }

    #[test]
    fn an_eta_that_grew_says_from_what_and_why() {
        let p = |eta: u64, grew_from: Option<u64>, last_run: Option<u64>| {
            crate::report::BuildProgress {
                done: 50,
                total: 206,
                elapsed: Duration::from_secs(600),
                eta: Some(Duration::from_secs(eta)),
                last_run: last_run.map(Duration::from_secs),
                grew_from: grew_from.map(Duration::from_secs),
            }
        };
        assert_eq!(eta(&p(1_715, None, None)), "ETA 28m 35s");
        assert_eq!(
            eta(&p(1_813, Some(1_228), None)),
            "ETA 30m 13s, up from 20m 28s: the objects now compiling take longer than the earlier ones (bigger files, or a busier machine)"
        );
        assert_eq!(
            eta(&p(90, None, Some(700))),
            "ETA 1m 30s (last build 11m 40s)"
        );
    }

    #[test]
    fn the_header_counts_steps_in_good_grammar() {
        assert_eq!(run_header("demo", 1, 1), "kiln: demo: 1 of 1 step to run");
        assert_eq!(run_header("demo", 0, 6), "kiln: demo: 0 of 6 steps to run");
    }
}
