//! The human form of a doctor report, in the style of `flutter doctor`: one line per check that
//! applies to this host and recipe, `fix:` under problems; the checks that do not apply are one
//! count (`-v` lists them, with the evidence behind every verdict).

use std::fmt::Write;

use super::{Report, Status};

fn mark(status: Status) -> &'static str {
    match status {
        Status::Pass => "[✓]",
        Status::Warn => "[!]",
        Status::Fail => "[✗]",
        Status::Skip => "[-]",
    }
}

/// One line saying what was examined.
pub(crate) fn headline(report: &Report) -> String {
    let f = &report.facts;
    let gpus = match f.gpus.first() {
        Some(g) => format!(
            "{}× {} (cc {}), driver {}",
            f.gpus.len(),
            g.name,
            g.compute_cap,
            g.driver
        ),
        None => "no NVIDIA GPU".to_string(),
    };
    let python = match (&f.python, f.python()) {
        (_, Some(p)) => format!("Python {} at {}", p.version, p.executable),
        (super::facts::PythonState::Error { .. }, None) => {
            "a Python environment that cannot be inspected (python.torch)".to_string()
        }
        (_, None) => "no Python environment".to_string(),
    };
    match &f.needs {
        Some(n) => format!("kiln doctor: {gpus}; {python}; recipe `{}`", n.recipe),
        None => format!("kiln doctor: {gpus}; {python}"),
    }
}

/// What plain doctor leaves to `--deep`: everything that needs torch running (plain doctor reads
/// torch's files and never imports it).
pub(crate) const LEFT_TO_DEEP: &str = "Left to --deep (they run torch on the GPUs): how many GPUs torch sees, a matmul on each (deep.matmul), symmetric memory (deep.symm-mem).";

pub(crate) fn render(report: &Report, verbose: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}\n", headline(report));
    // Without -v, the checks that do not apply here are a count, not 30 lines of `[-]`.
    let shown: Vec<_> = report
        .checks
        .iter()
        .filter(|c| verbose || c.status != Status::Skip)
        .collect();
    let width = crate::columns::width(shown.iter().map(|c| c.id), 0);
    for c in shown {
        match &c.profile {
            Some(p) => {
                let _ = writeln!(
                    out,
                    "{} {:width$}  `{p}`: {}",
                    mark(c.status),
                    c.id,
                    c.summary
                );
            }
            None => {
                let _ = writeln!(out, "{} {:width$}  {}", mark(c.status), c.id, c.summary);
            }
        }
        if let Some(fix) = c
            .fix
            .as_ref()
            .filter(|_| matches!(c.status, Status::Warn | Status::Fail) || verbose)
        {
            let _ = writeln!(out, "    fix: {fix}");
        }
        if verbose {
            for e in &c.evidence {
                let _ = writeln!(out, "    • {e}");
            }
        }
    }
    let count = |s: Status| report.checks.iter().filter(|c| c.status == s).count();
    let (fail, warn) = (count(Status::Fail), count(Status::Warn));
    let _ = writeln!(out);
    let skipped = count(Status::Skip);
    // Only where the deep checks were left to `--deep`, not where the recipe needs no torch.
    let left_to_deep = report
        .checks
        .iter()
        .any(|c| c.id.starts_with("deep.") && c.summary.starts_with("not run"));
    if report.facts.deep.is_none() && left_to_deep {
        let _ = writeln!(out, "{LEFT_TO_DEEP}");
    }
    if fail + warn == 0 {
        let _ = writeln!(
            out,
            "No issues found ({} passed, {skipped} not applicable to this host and recipe).{}",
            count(Status::Pass),
            if verbose || skipped == 0 {
                ""
            } else {
                " `kiln doctor -v` lists them."
            }
        );
    } else {
        let _ = writeln!(
            out,
            "{fail} failure(s), {warn} warning(s), {} passed, {skipped} not applicable.{}",
            count(Status::Pass),
            if verbose {
                ""
            } else if skipped > 0 {
                " Run with -v for evidence and the checks that do not apply."
            } else {
                " Run with -v for evidence."
            }
        );
    }
    out
}
