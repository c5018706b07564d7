//! The tail of `kiln up`: greedy A/B against the profile's baseline, serve the profile (left
//! running), judge its tunings, smoke-bench it, and write report.json / report.md with the run's
//! outcome. Failures (a tuning fell back or crashed, wrong greedy output) fail the run; advisories
//! (bench noise, a late divergence, a tuning kiln could not prove either way) are warnings, kept
//! in the report, and fail the run only with `--strict`.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use super::serve::{judge, launch, pick_profile, print_verdicts, signatures_for, verdict_problems};
use super::Settings;
use crate::error::{Error, Result};
use crate::recipe::Recipe;
use crate::serve::verdict::{Status, Verdict};

/// What went wrong and what is only advisory, from the verdicts, the A/B and the bench.
#[derive(Debug, Default)]
pub struct Judgement {
    pub failures: Vec<String>,
    pub warnings: Vec<String>,
}

pub(super) fn judge_run(
    profile: &str,
    verdicts: &[Verdict],
    ab: Option<(&crate::bench::ab::Comparison, &str)>,
    bench: Option<&crate::bench::Report>,
) -> Judgement {
    let mut j = Judgement::default();
    let (unknown, failed): (Vec<&Verdict>, Vec<&Verdict>) = verdicts
        .iter()
        .filter(|v| v.status != Status::Active)
        .partition(|v| v.status == Status::Unknown);
    let owned = |v: Vec<&Verdict>| v.into_iter().cloned().collect::<Vec<_>>();
    j.failures.extend(verdict_problems(profile, &owned(failed)));
    j.warnings
        .extend(verdict_problems(profile, &owned(unknown)));
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

/// The outcome object of report.json.
fn outcome(error: Option<&str>, warnings: &[String]) -> Value {
    json!({ "ok": error.is_none(), "error": error, "warnings": warnings })
}

fn reports_dir(settings: &Settings, recipe: &str) -> PathBuf {
    settings.state_dir.join("reports").join(recipe)
}

fn write_report(settings: &Settings, recipe: &str, report: &Value, md: &str) -> Result<PathBuf> {
    let dir = reports_dir(settings, recipe);
    crate::engine::state::create_dir(&dir)?;
    crate::engine::state::write_atomic(
        &dir.join("report.json"),
        serde_json::to_string_pretty(report)
            .expect("reports serialize")
            .as_bytes(),
    )?;
    crate::engine::state::write_atomic(&dir.join("report.md"), md.as_bytes())?;
    Ok(dir.join("report.md"))
}

/// A run that failed before it could serve (preflight, a step, the launch): the report says so,
/// so that no report of an earlier run passes for this one.
pub(super) fn record_failure(settings: &Settings, recipe: &str, stage: &str, err: &Error) {
    let message = err.to_string();
    let report = json!({
        "recipe": recipe,
        "stage": stage,
        "outcome": outcome(Some(&message), &[]),
        "exit_code": err.exit_code(),
    });
    let md = format!("# kiln up: {recipe}\n\n## Outcome\n\nfailed ({stage}): {message}\n");
    let _ = write_report(settings, recipe, &report, &md);
}

pub(super) fn pipeline(
    settings: &Settings,
    recipe: &Recipe,
    profile: Option<&str>,
    strict: bool,
) -> Result<u8> {
    crate::process::catch_interrupts();
    let (name, p) = pick_profile(recipe, profile)?;
    eprintln!("kiln: serving profile `{name}` of {}", recipe.name);
    let ab = match &p.baseline {
        Some(base) => Some(super::verify::compare(
            settings, recipe, base, &name, 64, 32,
        )?),
        None => None,
    };
    if let (Some(c), Some(base)) = (&ab, &p.baseline) {
        print!("{}", c.render(base, &name));
    }
    let sigs = signatures_for(p)?;
    let timeout = p.timeout.unwrap_or(crate::serve::DEFAULT_TIMEOUT);
    let running = launch(settings, recipe, &name, p, &sigs, true, timeout)?;
    let verdicts = judge(&sigs, p, &running, false);
    print_verdicts(&name, &running, &verdicts, false);
    let bench = match running.record.url.clone() {
        Some(url) => {
            let opts = crate::bench::Options {
                url: &url,
                api: running.api,
                max_tokens: 2048,
                runs: 5,
                warmup: 2,
                prompt: crate::bench::DEFAULT_PROMPT,
                timeout: Duration::from_secs(1800),
            };
            Some(super::bench::measure(settings, &opts, false, None)?)
        }
        None => None,
    };
    // Judged again once the benchmark has driven the server: counters such as draft acceptance
    // cover every request by now.
    let verdicts = if bench.is_some() {
        let after = judge(&sigs, p, &running, true);
        for (b, a) in verdicts.iter().zip(&after) {
            if (b.status, &b.reason) != (a.status, &a.reason) {
                eprintln!("kiln: after the benchmark: {}", a.line());
            }
        }
        after
    } else {
        verdicts
    };
    let j = judge_run(
        &name,
        &verdicts,
        ab.as_ref().zip(p.baseline.as_deref()),
        bench.as_ref(),
    );
    for w in &j.warnings {
        eprintln!("kiln: warning: {w}");
    }
    let error = if !j.failures.is_empty() {
        Some(j.failures.join("; "))
    } else if strict && !j.warnings.is_empty() {
        Some(format!(
            "{} warning(s) with --strict: {}",
            j.warnings.len(),
            j.warnings.join("; ")
        ))
    } else {
        None
    };
    let code = u8::from(error.is_some());
    let report = json!({
        "recipe": recipe.name,
        "profile": name,
        "url": running.record.url,
        "pid": running.record.pid,
        "ready_after_s": running.ready_after.as_secs_f64(),
        "verdicts": verdicts,
        "ab": ab,
        "bench": bench,
        "strict": strict,
        "outcome": outcome(error.as_deref(), &j.warnings),
        "exit_code": code,
    });
    let mut md = format!(
        "# kiln up: {} (profile `{name}`)\n\nready after {:.1} s at {}\n\n## Outcome\n\n{}\n",
        recipe.name,
        running.ready_after.as_secs_f64(),
        running.record.url.as_deref().unwrap_or("-"),
        match &error {
            Some(e) => format!("failed: {e}"),
            None => "ok".to_string(),
        }
    );
    for w in &j.warnings {
        md.push_str(&format!("\n- warning: {w}"));
    }
    md.push_str(
        "\n\n## Tuning verdicts\n\n| feature | verdict | reason | evidence |\n|---|---|---|---|\n",
    );
    for v in &verdicts {
        md.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            v.feature,
            v.status.label(),
            v.reason,
            v.evidence.as_deref().unwrap_or("").replace('|', "\\|")
        ));
    }
    if let (Some(c), Some(base)) = (&ab, &p.baseline) {
        md.push_str(&format!(
            "\n## Greedy A/B\n\n```\n{}```\n",
            c.render(base, &name)
        ));
    }
    if let Some(b) = &bench {
        md.push_str(&format!("\n## Benchmark\n\n```\n{}```\n", b.render()));
    }
    let md_path = write_report(settings, &recipe.name, &report, &md)?;
    eprintln!("kiln: report: {}", md_path.display());
    if let Some(url) = &running.record.url {
        eprintln!(
            "kiln: left running at {url} (process group {}); stop it with `kiln serve --stop`",
            running.record.pid
        );
    }
    running.leave_running();
    Error::finding(code, || {
        let hint = if j.failures.is_empty() {
            "warnings fail `kiln up` only with --strict; the report keeps them".to_string()
        } else {
            "the verdicts and the A/B above show the evidence; the report keeps it".to_string()
        };
        (error.unwrap_or_default(), Some(hint))
    })
}
