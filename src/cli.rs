//! Command-line types (clap derive). No logic lives here.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// The heading of the options every command takes.
pub const GLOBAL: &str = "Global options";

const EXAMPLES: &str = "\
Examples:
  kiln up                       provision the default recipe for this host, serve it and prove it
  kiln up demo --no-serve       only provision the shipped `demo` recipe
  kiln plan demo                what is fresh and what would run, and why
  kiln up my.toml --json        JSON lines on stdout for CI (the last event is `outcome`)
  kiln doctor --recipe demo     check this host against a recipe
  kiln man up | man -l -        the manual of one command";

/// Provision a GPU LLM-serving stack from declarative recipes, start the tuned server, and prove
/// that every tuning is active.
#[derive(Debug, Parser)]
#[command(name = "kiln", version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("BUILT_FROM"), ")"), about, max_term_width = 100, after_help = EXAMPLES)]
pub struct Cli {
    /// State directory (receipts, logs, caches) [default: $XDG_STATE_HOME/kiln, else
    /// ~/.local/state/kiln]
    #[arg(long, global = true, value_name = "DIR", env = "KILN_HOME", help_heading = GLOBAL)]
    pub state_dir: Option<PathBuf>,

    /// Say only results, warnings and errors
    #[arg(long, short = 'q', global = true, help_heading = GLOBAL)]
    pub quiet: bool,

    /// Plain lines instead of progress bars, even on a terminal
    #[arg(long, global = true, env = "KILN_NO_PROGRESS", value_parser = clap::builder::FalseyValueParser::new(), help_heading = GLOBAL)]
    pub no_progress: bool,

    /// When to colour: `auto` (a terminal, unless NO_COLOR is set or CLICOLOR_FORCE forces it)
    #[arg(long, global = true, value_name = "WHEN", value_enum, default_value_t = ColorWhen::Auto, help_heading = GLOBAL)]
    pub color: ColorWhen,

    #[command(subcommand)]
    pub command: Command,
}

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorWhen {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Provision a recipe (every stale step, in dependency order), then serve it and prove its
    /// tunings: verdicts, greedy A/B, bench, report
    #[command(
        after_help = "Examples:\n  kiln up demo\n  kiln up sglang-cuda --profile tuned --strict\n  kiln up demo --dry-run\n  kiln up demo --from compile --json"
    )]
    Up(UpArgs),
    /// Show every step of a recipe as fresh, stale (and why) or skipped, without running anything
    Plan(PlanArgs),
    /// Check this host and its Python environment for known failure causes
    Doctor(DoctorArgs),
    /// Apply, check or revert structured source patches
    Patch(PatchArgs),
    /// Start a recipe's server profile and verify its tunings
    Serve(ServeArgs),
    /// Smoke-benchmark a running server
    Bench(BenchArgs),
    /// Greedy A/B: the same prompts at temperature 0 against two profiles; agreement and first divergence
    Verify(VerifyArgs),
    /// Sweep variants of a profile: each judged, compared with the baseline, benchmarked; ranked
    Tune(TuneArgs),
    /// Build CI images from a recipe
    Image(ImageArgs),
    /// Inspect and move kiln's caches
    Cache(CacheArgs),
    /// Print a shell completion script: `source <(kiln completions bash)`
    Completions {
        /// The shell to complete in
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print kiln's man page (roff): `kiln man | man -l -`; `kiln man patch apply` for one
    /// command; plain text where `man` is not on PATH (or with `--text`)
    Man {
        /// The command whose page to print, e.g. `up` or `patch apply` [default: the main page]
        command: Vec<String>,

        /// Print the page as plain text instead of roff
        #[arg(long)]
        text: bool,
    },
}

#[derive(Debug, Clone, Args)]
pub struct RecipeArgs {
    /// A recipe file, or the name of a shipped recipe [default: the host's default recipe]
    #[arg(value_name = "RECIPE", value_parser = RecipeName, hide_possible_values = true)]
    pub recipe: Option<String>,

    /// The recipe, named as a flag (as `kiln doctor --recipe` does); the same as RECIPE
    #[arg(long = "recipe", id = "recipe_flag", value_name = "RECIPE", value_parser = RecipeName, hide_possible_values = true, conflicts_with = "recipe")]
    pub recipe_flag: Option<String>,

    /// Override a recipe variable (repeatable)
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

#[derive(Debug, Args)]
pub struct UpArgs {
    #[command(flatten)]
    pub recipe: RecipeArgs,

    /// Show what would run and run the preflights (exit non-zero where the run would stop);
    /// run nothing
    #[arg(long)]
    pub dry_run: bool,

    /// Re-run this step and every step that depends on it
    #[arg(long, value_name = "STEP")]
    pub from: Option<String>,

    /// Run only these steps (their dependencies must have completed before)
    #[arg(long, value_name = "STEP")]
    pub only: Vec<String>,

    /// Re-run these steps even if they are fresh
    #[arg(long, value_name = "STEP")]
    pub force: Vec<String>,

    /// Steps to run at once, at least 1 [default: number of CPU cores]
    #[arg(long, short = 'j', value_name = "N", value_parser = at_least_one)]
    pub jobs: Option<usize>,

    /// JSON lines on stdout instead of progress (the first event has `schema`, the last is
    /// `outcome`; a failure is an `error` event)
    #[arg(long)]
    pub json: bool,

    /// Skip the doctor preflight (driver, driver floor, disk) before running steps, and the
    /// launch preflight of the profiles it will serve
    #[arg(long)]
    pub no_doctor: bool,

    /// Server profile to serve, verify and bench after the steps [default: `tuned`, else the only profile]
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,

    /// Only provision: do not serve, verify or bench
    #[arg(long)]
    pub no_serve: bool,

    /// Measured runs of the smoke bench [default: 5]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub bench_runs: Option<u32>,

    /// Tokens each smoke-bench run generates [default: 2048]; fewer end sooner on a busy box
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub bench_max_tokens: Option<u32>,

    /// Fail (exit 1) on warnings too: bench noise, a late greedy divergence, an unproven tuning
    #[arg(long)]
    pub strict: bool,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub recipe: RecipeArgs,

    /// Profile to start [default: `tuned`, else the recipe's only profile]
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,

    /// Leave the server running after it is ready and verdicts are printed (its pid is recorded)
    #[arg(long)]
    pub detach: bool,

    /// Stop the server kiln started for this recipe (the whole process group)
    #[arg(long, conflicts_with = "detach")]
    pub stop: bool,

    /// Seconds to wait for readiness [default: the profile's `timeout`, else 1800]
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,

    /// Launch nothing: judge the profile's tunings from a server log captured earlier (its last
    /// launch), e.g. a production server's
    #[arg(long, value_name = "FILE", conflicts_with_all = ["detach", "stop"])]
    pub log: Option<PathBuf>,

    /// With --log: the server's metrics page captured after its requests (Prometheus text)
    #[arg(long, value_name = "FILE", requires = "log")]
    pub metrics: Option<PathBuf>,

    /// JSON lines on stdout: the `verdicts` and `served` events (`stopped` with --stop); the
    /// first event has `schema`, the last is `outcome`, a failure is an `error` event
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Server base URL
    #[arg(long, default_value = "http://127.0.0.1:30000")]
    pub url: String,

    /// API: `sglang` (/generate) or `openai` (/v1/completions) [default: asked of the server:
    /// `/get_model_info`, the `Server` header, `/v1/models`]
    #[arg(long, value_parser = ["sglang", "openai"])]
    pub api: Option<String>,

    /// Tokens per run (requested with ignore_eos)
    #[arg(long, default_value_t = 2048)]
    pub max_tokens: u32,

    /// Measured runs
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,

    /// Unmeasured warm-up runs
    #[arg(long, default_value_t = 2)]
    pub warmup: u32,

    /// Read the prompt from this file
    #[arg(long, value_name = "FILE")]
    pub prompt_file: Option<PathBuf>,

    /// JSON lines on stdout: a `bench_run` event per run, then the `bench` result (save the
    /// stream to use it as --baseline); a failure is an `error` event, the last is `outcome`
    #[arg(long)]
    pub json: bool,

    /// Fail (exit 2) below 0.9x this result's median (same fingerprint required): a saved
    /// `kiln bench --json` stream, an older single-document result, or bench/history.jsonl
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,

    /// Write per-run tok/s against the baseline as an SVG
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,

    /// Give up on one request after this many seconds [default: 120 + 0.2 per max token]
    #[arg(long, value_name = "SECS")]
    pub request_timeout: Option<u64>,

    /// Fail (exit 1) on warnings too (noise, short runs); without it they are advisories: a
    /// warning and exit 0, as in `kiln up`
    #[arg(long)]
    pub strict: bool,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub recipe: RecipeArgs,

    /// Candidate profile [default: `tuned`, else the recipe's only profile]
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,

    /// Reference profile [default: the candidate's `baseline`]
    #[arg(long, value_name = "NAME")]
    pub against: Option<String>,

    /// Greedy tokens per prompt
    #[arg(long, default_value_t = 64)]
    pub max_tokens: u32,

    /// A divergence before this many tokens is "wrong output" (exit 2); later is a warning
    #[arg(long, default_value_t = 32)]
    pub min_prefix: usize,

    /// JSON lines on stdout: the comparison as a `greedy_ab` event; a failure is an `error`
    /// event, the last is `outcome`
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TuneArgs {
    #[command(flatten)]
    pub recipe: RecipeArgs,

    /// The profile whose variants are swept
    #[arg(long, value_name = "NAME")]
    pub profile: String,

    /// KEY=v1,v2,...: a recipe variable, or a server flag (`--vary=-ub=256,1024`); repeatable,
    /// the variants are every combination
    #[arg(long, value_name = "KEY=V1,V2", required = true)]
    pub vary: Vec<String>,

    /// N: at most this many variants, spread evenly over the combinations; a time (`30m`):
    /// launch nothing new once it has passed (the variants up are still finished)
    #[arg(long, value_name = "N|TIME")]
    pub budget: Option<String>,

    /// `race` (one launch per variant; short runs, stop a variant once it cannot win), `grid`
    /// (every variant gets the full benchmark) or `halving` (successive halving, relaunches)
    #[arg(long, default_value = "race", value_parser = ["race", "grid", "halving"])]
    pub method: String,

    /// Launch each variant N times, with `--method grid`: each launch judged and benchmarked on
    /// its own, round after round; a variant's figure is the median of its launches', and the
    /// winner's margin over the runner-up includes how far a relaunch moves a figure
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub launches: u32,

    /// Print the variants, launches and expected wall time, launch nothing
    #[arg(long)]
    pub dry_run: bool,

    /// JSON lines on stdout: `tune_plan` (dry run), `tune_ranked` (every variant's figures and
    /// verdicts), `tune_winner`; a failure is an `error` event, the last is `outcome`
    #[arg(long)]
    pub json: bool,

    /// Never hold two servers at once (the race keeps its leader up while it measures the next)
    #[arg(long)]
    pub one_server: bool,

    /// Greedy reference profile [default: the profile's `baseline`]
    #[arg(long, value_name = "NAME")]
    pub against: Option<String>,

    /// Measured runs of the final benchmark
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,

    /// Warm-up requests of the final benchmark
    #[arg(long, default_value_t = 2)]
    pub warmup: u32,

    /// Tokens per request of the final benchmark
    #[arg(long, default_value_t = 2048)]
    pub max_tokens: u32,

    /// Greedy tokens per A/B prompt (a divergence in the first half disqualifies)
    #[arg(long, default_value_t = 64)]
    pub ab_tokens: u32,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub recipe: RecipeArgs,

    /// JSON lines on stdout: the plan as a `plan` event; a failure is an `error` event, the last
    /// is `outcome`
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ImageArgs {
    #[command(subcommand)]
    pub command: ImageCommand,

    /// JSON lines on stdout: the `dockerfile` or `image_exported` event (typed fields), progress
    /// as `note`/`transfer`; the first event has `schema`, the last is `outcome`
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum ImageCommand {
    /// Print a multi-stage Dockerfile that provisions a recipe with `kiln up` inside the build
    Dockerfile(ImageDockerfileArgs),
    /// Write a reproducible OCI image archive with one layer per prefix directory
    Export(ImageExportArgs),
}

#[derive(Debug, Args)]
pub struct ImageDockerfileArgs {
    /// A recipe file, or the name of a shipped recipe [default: the host's default recipe]
    #[arg(value_name = "RECIPE", value_parser = RecipeName, hide_possible_values = true)]
    pub recipe: Option<String>,

    /// Base image of the provisioning stage
    #[arg(
        long,
        value_name = "IMAGE",
        default_value = "nvidia/cuda:13.0.1-devel-ubuntu24.04"
    )]
    pub base: String,

    /// Server profile the image's entrypoint serves [default: the recipe's only profile]
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,

    /// Override a recipe variable (repeatable): the build's `kiln up` and the image's command
    /// run with it (e.g. `--set cuda_source=pypi` to build without a GPU)
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,

    /// Write the Dockerfile here instead of stdout
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ImageExportArgs {
    /// A directory to pack as one layer, at the same absolute path in the image (repeatable)
    #[arg(long, value_name = "DIR", required = true)]
    pub prefix: Vec<PathBuf>,

    /// Take the image config (environment, labels) from this recipe
    #[arg(long, value_name = "RECIPE")]
    pub config_from: Option<String>,

    /// Override a variable of the `--config-from` recipe (repeatable), as the `kiln up` that
    /// provisioned the prefix did
    #[arg(long = "set", value_name = "KEY=VALUE", requires = "config_from")]
    pub set: Vec<String>,

    /// The archive to write (OCI image layout, also loadable by `docker load`)
    #[arg(long, short = 'o', value_name = "IMAGE.tar")]
    pub output: PathBuf,

    /// Image name and tag recorded in the archive, e.g. `kiln-demo:1`
    #[arg(long, value_name = "NAME[:TAG]")]
    pub tag: Option<String>,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Run only these checks (ids as `kiln doctor --json` lists them, e.g. `driver.floor`)
    #[arg(value_name = "CHECK_ID")]
    pub checks: Vec<String>,

    /// The Python interpreter of the serving environment [default: the recipe's venv, else python3]
    #[arg(long, value_name = "PATH")]
    pub python: Option<String>,

    /// Read SGLang and FlashInfer sources and versions from this site-packages directory
    #[arg(long, value_name = "DIR")]
    pub site_packages: Option<PathBuf>,

    /// A recipe whose venv, toolkit, prefix and server flags the checks use [default: the one `kiln up` picks]
    #[arg(long, value_name = "RECIPE", value_parser = RecipeName, hide_possible_values = true)]
    pub recipe: Option<String>,

    /// Also run the launch preflight of this profile [default: the profiles `kiln up` launches]
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,

    /// Override a recipe variable (repeatable), as `kiln up --set` does
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,

    /// Also run GPU work: a matmul on every GPU and the torch symmetric-memory probe
    #[arg(long)]
    pub deep: bool,

    /// JSON lines on stdout: a `doctor` event (`checks`, `facts`); a warning or failure is an
    /// `error` event, the last is `outcome`
    #[arg(long)]
    pub json: bool,

    /// Write a redacted support bundle (tar.gz) for bug reports
    #[arg(long, value_name = "FILE")]
    pub bundle: Option<PathBuf>,

    /// Show the evidence behind every verdict
    #[arg(short, long)]
    pub verbose: bool,
}

#[derive(Debug, Args)]
pub struct PatchArgs {
    #[command(subcommand)]
    pub action: PatchAction,
}

#[derive(Debug, Subcommand)]
pub enum PatchAction {
    /// Apply a patch set (all or nothing; applying twice changes nothing)
    Apply(PatchTarget),
    /// Report each patch as applied, not applied, obsolete or drifted (exit 0 only when in effect)
    Check(PatchTarget),
    /// Restore the original files recorded by apply
    Revert(PatchTarget),
}

#[derive(Debug, Args)]
pub struct PatchTarget {
    /// A patch-set file, or the name of a shipped set (e.g. sglang-0.5.9-sm120)
    pub patchset: String,

    /// The site-packages directory holding the package
    #[arg(long, value_name = "DIR", conflicts_with = "python")]
    pub site_packages: Option<PathBuf>,

    /// A Python interpreter whose site-packages holds the package (e.g. a venv's bin/python)
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,

    /// Show the change as a unified diff, write nothing
    #[arg(long)]
    pub dry_run: bool,

    /// JSON lines on stdout: the report as a `patch` event; a failure is an `error` event, the
    /// last is `outcome`
    #[arg(long)]
    pub json: bool,

    /// apply: even outside the set's version range; revert: even over files changed since apply
    #[arg(long)]
    pub force: bool,

    /// Leave out patches marked experimental
    #[arg(long)]
    pub skip_experimental: bool,
}

#[derive(Debug, Args)]
pub struct CacheArgs {
    #[command(subcommand)]
    pub command: CacheCommand,
    /// JSON lines on stdout: each subcommand's result as one typed event, then `outcome`
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum CacheCommand {
    /// List the compiled wheels and step entries in the cache with their keys
    Ls,
    /// Drop unfinished, corrupt and (with --older-than) old entries
    Gc {
        /// Also drop entries older than this (e.g. `30d`)
        #[arg(long, value_name = "AGE")]
        older_than: Option<String>,
    },
    /// Write every cached wheel and step entry into a tar archive with a sha256 manifest
    Export {
        /// The archive to write
        file: PathBuf,
    },
    /// Verify an archive made by `export` and add its wheels and step entries to the cache
    Import {
        /// The archive to read
        file: PathBuf,
    },
    /// Upload the cached wheels and step entries to an OCI registry (blobs by sha256, keys in
    /// annotations)
    Push {
        /// `REGISTRY/REPO[:TAG]`, e.g. `127.0.0.1:5000/kiln/wheels:cu130`
        reference: String,
    },
    /// Fetch the wheels and step entries an OCI registry holds into the cache, verifying every
    /// blob's sha256
    Pull {
        /// `REGISTRY/REPO[:TAG]`
        reference: String,
    },
    /// Signing keys of the step cache (KILN_CACHE_SIGNING_KEY, KILN_CACHE_TRUSTED_KEYS)
    Key {
        #[command(subcommand)]
        command: CacheKeyCommand,
    },
}

/// `kiln cache key …`.
#[derive(Debug, Subcommand)]
pub enum CacheKeyCommand {
    /// Make an ed25519 key: the secret into --out (mode 0600), the public key printed
    Generate {
        /// The key's name (signatures say it: `NAME:BASE64`)
        name: String,
        /// Where the secret key goes (a new file)
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
}

/// A recipe argument: any file path or shipped name; the shipped names are offered to shell
/// completion (a path is still accepted).
#[derive(Debug, Clone, Copy)]
pub struct RecipeName;

impl clap::builder::TypedValueParser for RecipeName {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        clap::builder::StringValueParser::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            crate::recipe::shipped::recipe_names()
                .into_iter()
                .map(clap::builder::PossibleValue::new),
        ))
    }
}

/// A count that must be at least 1 (`--jobs 0` would run nothing).
fn at_least_one(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_string()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}
