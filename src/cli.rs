//! Command-line types (clap derive). No logic lives here.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Provision a GPU LLM-serving stack from declarative recipes, start the tuned server, and prove
/// that every tuning is active.
#[derive(Debug, Parser)]
#[command(name = "kiln", version, about, max_term_width = 100)]
pub struct Cli {
    /// State directory (receipts, logs, caches) [default: $KILN_HOME, else $XDG_STATE_HOME/kiln]
    #[arg(long, global = true, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Provision everything a recipe describes: run every stale step, in dependency order
    Up(UpArgs),
    /// Show every step of a recipe as fresh, stale (and why) or skipped, without running anything
    Plan(PlanArgs),
    /// Check this host and its Python environment for known failure causes
    Doctor(Pending),
    /// Apply, check or revert structured source patches
    Patch(Pending),
    /// Start a recipe's server profile and verify its tunings
    Serve(Pending),
    /// Smoke-benchmark a running server
    Bench(Pending),
    /// Build CI images from a recipe
    Image(Pending),
    /// Inspect and move kiln's caches
    Cache(Pending),
}

#[derive(Debug, Args)]
pub struct RecipeArgs {
    /// A recipe file, or the name of a shipped recipe [default: the embedded default]
    pub recipe: Option<String>,

    /// Override a recipe variable (repeatable)
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

#[derive(Debug, Args)]
pub struct UpArgs {
    #[command(flatten)]
    pub recipe: RecipeArgs,

    /// Show what would run, run nothing
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

    /// Steps to run at once [default: number of CPU cores]
    #[arg(long, short = 'j', value_name = "N")]
    pub jobs: Option<usize>,

    /// Print a JSON event stream on stdout instead of progress
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub recipe: RecipeArgs,

    /// Print the plan as JSON
    #[arg(long)]
    pub json: bool,
}

/// Arguments of a command this build does not provide yet.
#[derive(Debug, Args)]
pub struct Pending {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    pub args: Vec<String>,
}
