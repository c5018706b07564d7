//! The plain-text form of a patch report, as a person reads it on stdout.

use super::{Action, Report, Status};

pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let range = if report.in_range {
        String::new()
    } else {
        format!(" (outside {})", report.versions)
    };
    out.push_str(&format!(
        "patch set {} on {} {}{range} in {}\n",
        report.set,
        report.package,
        report.version,
        report.site_packages.display()
    ));
    let id_width = crate::columns::width(report.patches.iter().map(|p| p.id.as_str()), 0);
    for p in &report.patches {
        let label = match (report.action, p.status) {
            (Action::Apply, Status::NotApplied) if report.diff.is_some() => "would patch",
            (Action::Apply, Status::NotApplied) => "patched",
            (Action::Apply, Status::Applied) => "already applied",
            (_, status) => status.label(),
        };
        let experimental = if p.experimental {
            "  [experimental]"
        } else {
            ""
        };
        out.push_str(&format!(
            "  {:id_width$}  {label:<15}  {}{experimental}\n",
            crate::columns::cell(&p.id, id_width),
            p.file
        ));
        if let Some(detail) = &p.detail {
            out.push_str(&format!("  {:id_width$}  {:<15}  {detail}\n", "", ""));
        }
    }
    if let Some(diff) = &report.diff {
        out.push_str(diff);
    }
    if let Some(why) = &report.interrupted {
        out.push_str(&format!("interrupted: {why}\n"));
    }
    if !report.undone.is_empty() {
        out.push_str(&format!(
            "an interrupted apply was undone first: restored {}\n",
            report.undone.join(", ")
        ));
    }
    let files = |n: usize| {
        if n == 1 {
            "1 file".to_string()
        } else {
            format!("{n} files")
        }
    };
    let pycache = match report.pycache_removed {
        0 => String::new(),
        n => format!("; removed {n} stale __pycache__ entries"),
    };
    let summary = match report.action {
        Action::Check if report.interrupted.is_some() => {
            "not effective: an apply was interrupted".to_string()
        }
        Action::Check if report.effective => {
            "effective: every patch is applied or obsolete".to_string()
        }
        Action::Check => {
            let count = |s: Status| report.patches.iter().filter(|p| p.status == s).count();
            let blocked = report
                .patches
                .iter()
                .filter(|p| p.detail.as_deref().is_some_and(|d| d.contains("requires ")))
                .count();
            let mut parts = Vec::new();
            for (n, what) in [
                (count(Status::NotApplied), "not applied"),
                (count(Status::Drifted), "drifted"),
                (blocked, "with unmet requirements"),
            ] {
                if n > 0 {
                    parts.push(format!("{n} {what}"));
                }
            }
            format!("not effective: {}", parts.join(", "))
        }
        Action::Apply if report.diff.is_some() => format!(
            "dry run: would change {}; nothing was written",
            files(report.changed_files.len())
        ),
        Action::Apply if report.changed_files.is_empty() => {
            "nothing to do: the set is already in effect".to_string()
        }
        Action::Apply => format!("patched {}{pycache}", files(report.changed_files.len())),
        Action::Revert if report.diff.is_some() => format!(
            "dry run: would restore {}; nothing was written",
            files(report.changed_files.len())
        ),
        Action::Revert if report.changed_files.is_empty() => "nothing to revert".to_string(),
        Action::Revert => format!(
            "restored {} to their originals{pycache}",
            files(report.changed_files.len())
        ),
    };
    out.push_str(&summary);
    out.push('\n');
    out
}
