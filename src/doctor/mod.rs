//! `kiln doctor`: checks over collected facts. Each check is a small function from [`DoctorFacts`]
//! to a [`Check`] verdict (stable id, pass/warn/fail/skip, evidence, a fix the user can run).

pub(crate) mod bundle;
mod checks;
pub(crate) mod deep;
pub(crate) mod facts;
pub(crate) mod render;
pub(crate) mod sglang;

use serde::Serialize;

pub(crate) use facts::{DoctorFacts, Inputs};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Status {
    Pass,
    Skip,
    Warn,
    Fail,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Check {
    pub id: &'static str,
    pub status: Status,
    pub summary: String,
    pub evidence: Vec<String>,
    pub fix: Option<String>,
}

impl Check {
    fn new(id: &'static str, status: Status, summary: impl Into<String>) -> Check {
        Check {
            id,
            status,
            summary: summary.into(),
            evidence: Vec::new(),
            fix: None,
        }
    }
    pub(crate) fn pass(id: &'static str, summary: impl Into<String>) -> Check {
        Check::new(id, Status::Pass, summary)
    }
    pub(crate) fn warn(id: &'static str, summary: impl Into<String>) -> Check {
        Check::new(id, Status::Warn, summary)
    }
    pub(crate) fn fail(id: &'static str, summary: impl Into<String>) -> Check {
        Check::new(id, Status::Fail, summary)
    }
    pub(crate) fn skip(id: &'static str, summary: impl Into<String>) -> Check {
        Check::new(id, Status::Skip, summary)
    }
    pub(crate) fn fix(mut self, fix: impl Into<String>) -> Check {
        self.fix = Some(fix.into());
        self
    }
    pub(crate) fn evidence(mut self, line: impl Into<String>) -> Check {
        self.evidence.push(line.into());
        self
    }
}

/// A check: its stable id, what it is about, and the function computing its verdict.
pub(crate) struct CheckDef {
    pub id: &'static str,
    /// What the check is about: read where checks are declared and in docs/doctor.md.
    #[allow(dead_code)]
    pub about: &'static str,
    pub run: fn(&DoctorFacts) -> Check,
}

/// Every check, in the order they are shown.
pub(crate) fn all_checks() -> Vec<CheckDef> {
    let mut defs = checks::definitions();
    defs.extend(sglang::definitions());
    defs.extend(deep::definitions());
    defs
}

#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub checks: Vec<Check>,
    pub facts: DoctorFacts,
}

impl Report {
    /// Worst status: 0 when everything passed (or was skipped), 1 with warnings, 2 with failures.
    pub(crate) fn exit_code(&self) -> u8 {
        match self.checks.iter().map(|c| c.status).max() {
            Some(Status::Fail) => 2,
            Some(Status::Warn) => 1,
            _ => 0,
        }
    }
}

/// Run the selected checks (all when `selected` is empty) over `facts`.
pub(crate) fn run(facts: DoctorFacts, selected: &[String]) -> Report {
    let checks = all_checks()
        .into_iter()
        .filter(|d| selected.is_empty() || selected.iter().any(|s| s == d.id))
        .map(|d| {
            let mut check = (d.run)(&facts);
            check.id = d.id;
            check
        })
        .collect();
    Report { checks, facts }
}
