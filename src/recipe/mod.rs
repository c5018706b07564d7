//! Recipes: the wire format (TOML), validation with located diagnostics, and the domain types the
//! engine runs.

pub mod api;
pub mod args;
mod cache;
pub mod cuda_arch;
pub mod graph;
pub mod interp;
mod load;
mod loaded;
pub mod shipped;
mod validate;
pub mod when;
mod wire;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub use api::Api;
pub(crate) use cache::{slot_base, Inputs};
pub use load::{load, name_of};
pub use loaded::LoadOptions;

/// How a file shipped inside kiln is named as a recipe's `origin` (`<kiln>/recipes/x.toml`).
pub const SHIPPED_ORIGIN: &str = "<kiln>/";

/// Whether a recipe of this `origin` is shipped inside kiln (not a file of the user's).
pub fn is_shipped(origin: &str) -> bool {
    origin.starts_with(SHIPPED_ORIGIN)
}

/// A recipe's `origin` as a person can open it: a file as the user named it; a shipped recipe
/// (`<kiln>/recipes/tiny-cpu.toml`, a name inside the binary) as the copy kiln keeps of it under
/// the state dir's `shipped/` (`shipped`).
pub fn shown_origin(origin: &str, shipped: &std::path::Path) -> String {
    match origin.strip_prefix(SHIPPED_ORIGIN) {
        Some(key) => format!("shipped with kiln; a copy: {}", shipped.join(key).display()),
        None => origin.to_string(),
    }
}

/// A validated recipe: variables resolved, steps in dependency order.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Recipe {
    pub name: String,
    pub description: String,
    pub version: String,
    /// Where it came from, as shown to the user.
    pub origin: String,
    pub vars: BTreeMap<String, String>,
    pub steps: Vec<Step>,
    pub profiles: BTreeMap<String, Profile>,
    /// Profiles that cannot be used yet, with the rendered reason (a required variable unset).
    pub unavailable_profiles: BTreeMap<String, String>,
    /// Host tools the recipe needs (`[recipe] requires`, imports included), checked by `kiln up`.
    pub(crate) requires: Vec<crate::requires::Requirement>,
    /// Where the recipe cache keeps it (`None`: the cache is off).
    #[serde(skip)]
    pub(crate) provenance: Option<cache::Provenance>,
}

impl Recipe {
    pub fn step(&self, id: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.id == id)
    }

    /// What each step makes, with its id: its `check` paths and a python step's venv.
    pub(crate) fn made_paths(&self) -> Vec<(PathBuf, String)> {
        self.steps
            .iter()
            .flat_map(|s| {
                let mut paths = match &s.check {
                    Some(Check::Paths(p)) => p.clone(),
                    _ => Vec::new(),
                };
                if let StepKind::Python(py) = &s.kind {
                    paths.push(py.venv.clone());
                }
                paths.into_iter().map(move |p| (p, s.id.clone()))
            })
            .collect()
    }
}

/// The step of `made` ([`Recipe::made_paths`]) that makes `path`: the path itself, a directory
/// holding it (a venv and its interpreter) or a path inside it.
pub(crate) fn maker<'a>(made: &'a [(PathBuf, String)], path: &std::path::Path) -> Option<&'a str> {
    made.iter()
        .find(|(p, _)| path.starts_with(p) || p.starts_with(path))
        .map(|(_, s)| s.as_str())
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cmd {
    Argv(Vec<String>),
    Shell(String),
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    Cmd(Cmd),
    Paths(Vec<PathBuf>),
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StepKind {
    Run {
        cmd: Cmd,
        /// (file, SASS arch) that `cuobjdump` must find once the command ran.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sass: Option<(PathBuf, String)>,
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
        /// Uncompressed bytes the archive may unpack to (`max_size`; default 64 GiB).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_size: Option<u64>,
        /// Keep setuid/setgid bits (`keep_setid = true`); dropped by default.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        keep_setid: bool,
    },
    Python(PythonStep),
    Cuda(CudaStep),
    /// Apply a patch set (`kiln patch apply`) to a venv's site-packages.
    Patch {
        set: String,
        /// sha256 of the patch set's text: editing the set re-runs the step.
        set_sha256: String,
        site_packages: SitePackages,
    },
}

/// Where a patch step finds the package: a venv (its python tells) or a site-packages directory.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SitePackages {
    Venv(PathBuf),
    Dir(PathBuf),
}

/// `kind = "python"`: a venv (made with uv, pip as fallback) and pinned requirements.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PythonStep {
    pub venv: PathBuf,
    /// The interpreter the venv is created from.
    pub python: String,
    pub install: Vec<String>,
    pub index_url: Option<String>,
    pub extra_index_urls: Vec<String>,
    /// Requirements built from source through the compiled-wheel cache: pinned `name==version`
    /// (the sdist comes from the index) or a local source directory (an absolute path).
    pub build: Vec<String>,
    pub build_isolation: bool,
    /// The venv sees the interpreter's packages (e.g. a preinstalled torch).
    pub system_site_packages: bool,
    /// Python source run in the venv after installing; `${…}` became string literals.
    pub verify: Option<String>,
    /// (extension module, SASS arch) that `cuobjdump` must find, when it is installed.
    pub sass: Option<(String, String)>,
}

/// `kind = "cuda"`: a CUDA toolkit installed side by side and the `link` switched to it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CudaStep {
    pub source: CudaSource,
    pub version: String,
    pub install_path: PathBuf,
    pub link: PathBuf,
    /// The oldest driver the toolkit runs on (optional for `pypi`: a compile-only box has none).
    pub driver_floor: Option<String>,
    /// Programs the recipe needs in the toolkit's `bin/` (`tools`; default `nvcc`).
    pub tools: Vec<String>,
}

/// Where a `cuda` step's toolkit comes from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CudaSource {
    /// NVIDIA's runfile, installed with `--toolkit --toolkitpath=`.
    Runfile {
        url: String,
        sha256: String,
        /// Where the verified runfile lands in the download cache.
        runfile: PathBuf,
    },
    /// PyPI's `nvidia-*` wheels, unpacked into one prefix.
    Pypi { wheels: Vec<Wheel> },
}

/// One pinned download (a wheel of a `pypi` CUDA source).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Wheel {
    pub url: String,
    pub sha256: String,
    /// Where the verified file lands in the download cache.
    pub path: PathBuf,
}

impl StepKind {
    /// The name [`StepKind::name`] gives, as a `'static` string (`None`: no such kind).
    pub fn static_name(name: &str) -> Option<&'static str> {
        validate::static_name(name)
    }

    pub fn name(&self) -> &'static str {
        match self {
            StepKind::Run { .. } => "run",
            StepKind::Fetch { .. } => "fetch",
            StepKind::Extract { .. } => "extract",
            StepKind::Python(_) => "python",
            StepKind::Cuda(_) => "cuda",
            StepKind::Patch { .. } => "patch",
        }
    }
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Step {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub kind: StepKind,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
    /// Input files (glob patterns resolved to absolute patterns).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<Check>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<When>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Duration>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retries: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_per_job: Option<u64>,
    /// Host tools this step needs (`requires`), checked by `kiln up` when the step will run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) requires: Vec<crate::requires::Requirement>,
    /// Paths the step cache archives after the step succeeds and restores instead of running it
    /// (`outputs`, else the `check.paths`); empty: the step is not cached.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<PathBuf>,
    /// `cache = false` in the recipe: the step always runs.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub cache: bool,
}

fn yes() -> bool {
    true
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_true(b: &bool) -> bool {
    *b
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct When {
    pub text: String,
    pub expr: when::Expr,
}

/// A server launch profile, resolved through `extends`.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Profile {
    pub description: Option<String>,
    pub cmd: Vec<String>,
    pub args: Vec<String>,
    /// Arguments only a judged launch adds to `args` (set-flag semantics, see
    /// [`args::with_evidence`]): evidence-only settings that cost throughput (`-lv 5`).
    #[serde(default)]
    pub evidence_args: Vec<String>,
    /// The decode ceiling the served figure is compared with (llama-bench's JSON).
    #[serde(default)]
    pub ceiling: Option<Ceiling>,
    pub env: BTreeMap<String, String>,
    pub expect: Vec<String>,
    pub url: Option<String>,
    pub port: Option<u16>,
    /// The API the server speaks (`APIS`); none given means `openai`.
    pub api: Option<Api>,
    /// Health endpoint path.
    pub ready: Option<String>,
    /// Signature set name or path (resolved against the recipe's directory).
    pub signatures: Option<String>,
    pub baseline: Option<String>,
    pub timeout: Option<Duration>,
    /// The recipe's directory (where relative signature paths are looked up).
    pub dir: PathBuf,
}

/// Where a profile's decode ceiling comes from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ceiling {
    /// llama.cpp's `llama-bench -o json` output (an absolute path).
    LlamaBench(PathBuf),
}

impl Profile {
    /// The arguments of a judged launch: `args` with `evidence_args` applied.
    pub fn judged_args(&self) -> Vec<String> {
        args::with_evidence(&self.args, &self.evidence_args)
    }
}
