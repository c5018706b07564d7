//! The serde mirror of a recipe file: every table rejects unknown keys, checked values keep spans.

use std::collections::BTreeMap;

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;

/// One TOML file: a recipe, or a fragment it imports (toolchain, profiles, shared steps).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct File {
    pub recipe: Option<Meta>,
    #[serde(default)]
    pub vars: BTreeMap<Spanned<String>, Spanned<toml::Value>>,
    #[serde(default)]
    pub env: BTreeMap<Spanned<String>, Spanned<String>>,
    #[serde(default, rename = "step")]
    pub steps: Vec<Step>,
    #[serde(default, rename = "profile")]
    pub profiles: BTreeMap<Spanned<String>, Profile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Meta {
    pub name: Option<Spanned<String>>,
    pub description: Option<String>,
    pub version: Option<String>,
    #[serde(default)]
    pub import: Vec<Spanned<String>>,
    /// Host tools the recipe needs: `["c++", "python3>=3.10"]` (see `crate::requires`).
    #[serde(default)]
    pub requires: Vec<Spanned<String>>,
}

/// A command: an argv list, or (with `shell = true`) one shell script string. The script's
/// location is the span of the value that holds it.
#[derive(Debug, Clone)]
pub(super) enum Command {
    Argv(Vec<Spanned<String>>),
    Script(String),
}

/// `check = ["cmd", "arg"]`, `check = "script"` (with `shell`) or `check = { paths = [...] }`.
#[derive(Debug, Clone)]
pub(super) enum Check {
    Paths(Vec<Spanned<String>>),
    Command(Command),
}

// Hand-written because serde's untagged enums cannot carry toml spans.
struct CommandVisitor;

impl<'de> Visitor<'de> for CommandVisitor {
    type Value = Command;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an argv list of strings, or one script string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Command, E> {
        Ok(Command::Script(v.to_string()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Command, A::Error> {
        let mut argv = Vec::new();
        while let Some(arg) = seq.next_element::<Spanned<String>>()? {
            argv.push(arg);
        }
        Ok(Command::Argv(argv))
    }
}

impl<'de> Deserialize<'de> for Command {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CommandVisitor)
    }
}

struct CheckVisitor;

impl<'de> Visitor<'de> for CheckVisitor {
    type Value = Check;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an argv list, a script string, or a table `{ paths = [...] }`")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Check, E> {
        CommandVisitor.visit_str(v).map(Check::Command)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Check, A::Error> {
        CommandVisitor.visit_seq(seq).map(Check::Command)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Check, A::Error> {
        let mut paths = None;
        while let Some(key) = map.next_key::<String>()? {
            if key != "paths" {
                return Err(de::Error::unknown_field(&key, &["paths"]));
            }
            paths = Some(map.next_value::<Vec<Spanned<String>>>()?);
        }
        paths
            .map(Check::Paths)
            .ok_or_else(|| de::Error::missing_field("paths"))
    }
}

impl<'de> Deserialize<'de> for Check {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CheckVisitor)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Step {
    pub id: Spanned<String>,
    pub kind: Spanned<String>,
    pub description: Option<String>,
    #[serde(default)]
    pub needs: Vec<Spanned<String>>,
    #[serde(default)]
    pub env: BTreeMap<Spanned<String>, Spanned<String>>,
    pub cwd: Option<Spanned<String>>,
    #[serde(default)]
    pub inputs: Vec<Spanned<String>>,
    pub check: Option<Spanned<Check>>,
    pub when: Option<Spanned<String>>,
    pub timeout: Option<Spanned<String>>,
    pub retries: Option<Spanned<u32>>,
    pub mem_per_job: Option<Spanned<String>>,
    /// Host tools this step needs, checked only when it is going to run.
    #[serde(default)]
    pub requires: Vec<Spanned<String>>,
    /// What the step produces, archived in the step cache (default: `check.paths`).
    #[serde(default)]
    pub outputs: Vec<Spanned<String>>,
    /// `cache = false`: never archive or restore this step's outputs.
    pub cache: Option<Spanned<bool>>,

    // kind = "run"
    pub cmd: Option<Spanned<Command>>,
    pub shell: Option<Spanned<bool>>,

    // kind = "fetch"
    pub url: Option<Spanned<String>>,
    pub sha256: Option<Spanned<String>>,
    pub filename: Option<Spanned<String>>,

    // kind = "extract"
    pub from: Option<Spanned<String>>,
    pub archive: Option<Spanned<String>>,
    pub dest: Option<Spanned<String>>,
    pub strip_components: Option<Spanned<u32>>,
    pub max_size: Option<Spanned<String>>,
    pub keep_setid: Option<Spanned<bool>>,

    // kind = "python"
    pub venv: Option<Spanned<String>>,
    pub python: Option<Spanned<String>>,
    pub install: Option<Spanned<Vec<Spanned<String>>>>,
    pub index_url: Option<Spanned<String>>,
    pub extra_index_urls: Option<Spanned<Vec<Spanned<String>>>>,
    pub build: Option<Spanned<Vec<Spanned<String>>>>,
    pub build_isolation: Option<Spanned<bool>>,
    pub system_site_packages: Option<Spanned<bool>>,
    pub verify: Option<Spanned<String>>,
    pub sass: Option<Spanned<Sass>>,

    // kind = "patch" (also `venv`)
    pub set: Option<Spanned<String>>,
    pub site_packages: Option<Spanned<String>>,

    // kind = "cuda" (also `url`, `sha256`, `filename`)
    pub version: Option<Spanned<String>>,
    pub install_path: Option<Spanned<String>>,
    pub link: Option<Spanned<String>>,
    pub driver_floor: Option<Spanned<String>>,
    /// `runfile` (default: `url` + `sha256`) or `pypi` (`wheels`).
    pub source: Option<Spanned<String>>,
    /// `source = "pypi"`: pinned wheels, each `URL#sha256=HEX` (an entry may hold several,
    /// separated by whitespace, so that one toolchain variable can carry the whole set).
    pub wheels: Option<Spanned<Vec<Spanned<String>>>>,
    /// Programs the recipe needs from this toolkit's `bin/` (default: `["nvcc"]`).
    pub tools: Option<Spanned<Vec<Spanned<String>>>>,
}

/// `sass = { module = "flash_attn_2_cuda", arch = "sm_120" }` (python steps) or
/// `sass = { file = "k.cubin", arch = "sm_120" }` (run steps): that code must carry that SASS.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Sass {
    pub module: Option<Spanned<String>>,
    pub file: Option<Spanned<String>>,
    pub arch: Spanned<String>,
}

/// `ceiling = { llama_bench = "PATH" }`: llama-bench's `-o json` output for this build.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Ceiling {
    pub llama_bench: Spanned<String>,
}

/// A server launch profile (used by `serve`; parsed strictly here so typos fail early).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Profile {
    pub description: Option<String>,
    pub extends: Option<Spanned<String>>,
    pub cmd: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    pub args: Vec<Spanned<String>>,
    /// Arguments only the judged launch gets (`-lv 5`): evidence that costs throughput.
    #[serde(default)]
    pub evidence_args: Vec<Spanned<String>>,
    /// Where the decode ceiling of this build comes from (`{ llama_bench = "PATH" }`).
    pub ceiling: Option<Spanned<Ceiling>>,
    #[serde(default)]
    pub env: BTreeMap<Spanned<String>, Spanned<String>>,
    #[serde(default)]
    pub expect: Vec<Spanned<String>>,
    pub url: Option<Spanned<String>>,
    /// Port the server listens on (a string so that `${port}` works).
    pub port: Option<Spanned<String>>,
    /// `sglang` (/generate, /server_info) or `openai` (/v1/completions).
    pub api: Option<Spanned<String>>,
    /// Health endpoint polled for readiness, e.g. `/health_generate`.
    pub ready: Option<Spanned<String>>,
    /// Log signatures: a shipped set (`sglang-0.5.9`, `llama-server`) or a path to a TOML file.
    pub signatures: Option<Spanned<String>>,
    /// The profile `kiln verify` compares against by default.
    pub baseline: Option<Spanned<String>>,
    /// How long to wait for readiness, e.g. `30m` (default 1800 s).
    pub timeout: Option<Spanned<String>>,
}
