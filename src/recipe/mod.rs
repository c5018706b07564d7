//! Recipes: the wire format (TOML), validation with located diagnostics, and the domain types the
//! engine runs.

pub mod graph;
pub mod interp;
mod load;
pub mod shipped;
pub mod source;
pub mod units;
mod validate;
pub mod when;
mod wire;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub use load::{load, LoadOptions};

/// A validated recipe: variables resolved, steps in dependency order.
#[derive(Debug)]
pub struct Recipe {
    pub name: String,
    pub description: String,
    pub version: String,
    /// Where it came from, as shown to the user.
    pub origin: String,
    pub vars: BTreeMap<String, String>,
    pub steps: Vec<Step>,
    pub profiles: BTreeMap<String, Profile>,
}

impl Recipe {
    pub fn step(&self, id: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.id == id)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cmd {
    Argv(Vec<String>),
    Shell(String),
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    Cmd(Cmd),
    Paths(Vec<PathBuf>),
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StepKind {
    Run {
        cmd: Cmd,
    },
    Fetch {
        url: String,
        sha256: String,
        /// The verified file in the content-addressed cache.
        path: PathBuf,
    },
    Extract {
        archive: PathBuf,
        dest: PathBuf,
        strip_components: u32,
    },
}

impl StepKind {
    pub fn name(&self) -> &'static str {
        match self {
            StepKind::Run { .. } => "run",
            StepKind::Fetch { .. } => "fetch",
            StepKind::Extract { .. } => "extract",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Step {
    pub id: String,
    pub description: Option<String>,
    pub kind: StepKind,
    pub needs: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
    /// Input files (glob patterns resolved to absolute patterns).
    pub inputs: Vec<String>,
    pub check: Option<Check>,
    pub when: Option<When>,
    pub timeout: Option<Duration>,
    pub retries: u32,
    pub mem_per_job: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct When {
    pub text: String,
    pub expr: when::Expr,
}

/// A server launch profile, resolved through `extends`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Profile {
    pub description: Option<String>,
    pub cmd: Vec<String>,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub expect: Vec<String>,
    pub url: Option<String>,
}
