//! `kiln doctor`: checks over collected facts. Each check is a small function from [`DoctorFacts`]
//! to a [`Check`] verdict (stable id, pass/warn/fail/skip, evidence, a fix the user can run).

pub(crate) mod bundle;
mod checks;
pub(crate) mod code;
pub(crate) mod deep;
pub(crate) mod facts;
pub(crate) mod launch;
pub(crate) mod preflight;
pub(crate) mod recipe;
pub(crate) mod render;
pub(crate) mod sglang;

use serde::Serialize;

use crate::host::gpu::SmiState;

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
    /// The profile a launch check is about (`launch.*` checks only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

impl Check {
    fn new(id: &'static str, status: Status, summary: impl Into<String>) -> Check {
        Check {
            id,
            status,
            summary: summary.into(),
            evidence: Vec::new(),
            fix: None,
            profile: None,
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
    /// What the check is about: the list `kiln doctor NO-SUCH-CHECK` prints.
    pub about: &'static str,
    pub run: fn(&DoctorFacts) -> Check,
}

/// Every check, in the order they are shown.
pub(crate) fn all_checks() -> Vec<CheckDef> {
    let mut defs = checks::definitions();
    defs.extend(code::definitions());
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

/// What a recipe needs of the host, so that doctor runs the checks it needs and skips the
/// others (the CPU demo gets no driver or torch warnings).
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Needs {
    /// The recipe's name, for the skip lines.
    pub recipe: String,
    /// The recipe as a command names it: a shipped one by name, a file by its path (quoted).
    pub named: String,
    /// The recipe has an `arch` variable (`--set arch=X.Y` rebuilds its kernels for a GPU).
    pub arch_var: bool,
    /// An NVIDIA GPU: a `cuda` step, a GPU server (SGLang, llama-server with `-ngl`), torch.
    pub gpu: bool,
    /// torch (and a CUDA toolkit matching it): a python step installs torch or SGLang.
    pub torch: bool,
    /// SGLang and FlashInfer: a profile runs SGLang or a python step installs it.
    pub sglang: bool,
    /// A toolchain build (CUDA, torch, flash-attn): tens of GiB of disk.
    pub toolchain: bool,
}

/// What each check is about, for [`Needs`]: (id prefix or id, the need).
const NEED_OF: &[(&str, Need)] = &[
    ("nvidia.driver", Need::Gpu),
    ("gpu.", Need::Gpu),
    ("driver.floor", Need::Gpu),
    ("topology.p2p", Need::Gpu),
    ("topology.", Need::Sglang),
    ("python.torch", Need::Torch),
    ("torch.", Need::Torch),
    ("cuda.nvcc-torch", Need::Torch),
    ("build.max-jobs", Need::Torch),
    ("deep.", Need::Torch),
    ("sass.", Need::Gpu),
    ("flashinfer.", Need::Sglang),
    ("sglang.", Need::Sglang),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    Gpu,
    Torch,
    Sglang,
}

/// Why the recipe skips check `id`, if it does.
fn not_needed(needs: &Needs, id: &str) -> Option<String> {
    let need = NEED_OF
        .iter()
        .find(|(p, _)| id == *p || (p.ends_with('.') && id.starts_with(p)))?
        .1;
    let (met, what) = match need {
        Need::Gpu => (needs.gpu, "NVIDIA GPU"),
        Need::Torch => (needs.torch, "torch"),
        Need::Sglang => (needs.sglang, "SGLang"),
    };
    (!met).then(|| format!("recipe `{}` needs no {what}", needs.recipe))
}

/// Run the selected checks (all when `selected` is empty) over `facts`; with a recipe's
/// [`Needs`] in the facts, the checks it does not need are skipped (unless named).
pub(crate) fn run(facts: DoctorFacts, selected: &[String]) -> Report {
    let checks = all_checks()
        .into_iter()
        .filter(|d| selected.is_empty() || selected.iter().any(|s| s == d.id))
        .map(|d| {
            // A driver that is there but broken is always said, whatever the recipe; so is an
            // interpreter that does not answer (`--python X` is never silently dropped).
            let broken = (d.id == "nvidia.driver"
                && matches!(
                    facts.nvidia_smi,
                    SmiState::Mismatch { .. } | SmiState::Failed { .. }
                ))
                || (d.id == "python.torch"
                    && matches!(facts.python, facts::PythonState::Error { .. }));
            let skip = facts
                .needs
                .as_ref()
                .filter(|_| selected.is_empty() && !broken)
                .and_then(|n| not_needed(n, d.id));
            let mut check = match skip {
                Some(why) => Check::skip(d.id, why),
                None => (d.run)(&facts),
            };
            check.id = d.id;
            check
        })
        .collect();
    Report { checks, facts }
}
