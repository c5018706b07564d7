//! Glue from command-line settings to the engine: one file per subcommand.

// Commands are where kiln prints: results on stdout, milestones on stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod bench;
mod cache;
mod doctor;
mod image;
mod patch;
mod plan;
mod preflight;
mod serve;
mod shell_help;
mod show;
mod tune;
mod up;
mod verify;

use std::io::IsTerminal;
use std::path::PathBuf;

use crate::cli::{Cli, Command, RecipeArgs};
use crate::error::{Error, Result};
use crate::host::Facts;
use crate::paths::StatePaths;
use crate::pipeline::Session;
use crate::recipe::{self, Recipe};
use crate::report::{JsonReporter, PlainReporter, ProgressReporter, Reporter};

/// Run a parsed command line; the returned code is the process's exit status.
pub fn run(cli: Cli) -> Result<u8> {
    let settings = Settings::resolve(&cli)?;
    if !matches!(
        cli.command,
        Command::Completions { .. } | Command::Man { .. } | Command::Watchdog { .. }
    ) {
        settings.paths.ensure_private()?;
        crate::hash::use_timestamp_granularity(crate::fs::timestamp_granularity(
            settings.paths.root(),
            &settings.paths.clock_granularity(),
        ));
    }
    match cli.command {
        Command::Up(args) => up::run(&settings, &args),
        Command::Plan(args) => plan::run(&settings, &args),
        Command::Doctor(args) => doctor::run(&settings, &args),
        Command::Patch(args) => patch::run(&settings, &args),
        Command::Serve(args) => serve::run(&settings, &args),
        Command::Bench(args) => bench::run(&settings, &args),
        Command::Verify(args) => verify::run(&settings, &args),
        Command::Tune(args) => tune::run(&settings, &args),
        Command::Image(args) => image::run(&settings, &args),
        Command::Cache(args) => cache::run(&settings, &args),
        Command::Completions { shell } => shell_help::completions(shell),
        Command::Man { command } => shell_help::man(command.as_deref()),
        Command::Watchdog { parent, dir } => crate::process::watchdog::watch(parent, &dir),
    }
}

/// Settings every command shares, resolved once from flags and the environment.
pub struct Settings {
    /// The state directory's layout; its cache is `$KILN_CACHE_DIR`, else `<state_dir>/cache`.
    pub paths: StatePaths,
    pub facts: Facts,
}

impl Settings {
    fn resolve(cli: &Cli) -> Result<Settings> {
        let state_dir = match &cli.state_dir {
            Some(d) => d.clone(),
            None => default_state_dir()?,
        };
        let state_dir = if state_dir.is_absolute() {
            state_dir
        } else {
            std::env::current_dir()
                .map_err(|e| Error::io("cannot read the current directory", e))?
                .join(state_dir)
        };
        let cache_dir = std::env::var_os("KILN_CACHE_DIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        Ok(Settings {
            paths: StatePaths::new(state_dir, cache_dir),
            facts: Facts::from_env(),
        })
    }

    /// The pipeline's view of `recipe` with these settings.
    pub fn session<'a>(&'a self, recipe: &'a Recipe) -> Session<'a> {
        Session {
            recipe,
            paths: &self.paths,
            facts: &self.facts,
        }
    }

    /// The recipe named on the command line, or the default for this host (said on stderr).
    pub fn load_recipe(&self, args: &RecipeArgs) -> Result<Recipe> {
        self.load(&self.recipe_spec(args)?)
    }

    pub(crate) fn load(&self, spec: &RecipeSpec) -> Result<Recipe> {
        recipe::load(Some(&spec.name), &self.load_options(spec))
    }

    /// The plan recorded when everything was last found fresh, if the command `accept`s the
    /// recipe's shape and nothing the plan depends on changed since (see
    /// [`crate::engine::fresh`]): a no-op without loading the recipe.
    pub(crate) fn fresh_plan(
        &self,
        spec: &RecipeSpec,
        accept: impl FnOnce(&crate::engine::fresh::Shape) -> bool,
    ) -> Option<crate::engine::fresh::FreshPlan> {
        let opts = self.load_options(spec);
        recipe::slot_base(Some(&spec.name), &opts)
            .and_then(|slot| crate::engine::fresh::lookup(&slot, &opts, accept))
    }

    fn load_options<'a>(&'a self, spec: &'a RecipeSpec) -> recipe::LoadOptions<'a> {
        recipe::LoadOptions {
            overrides: &spec.overrides,
            facts: &self.facts,
            paths: &self.paths,
        }
    }

    /// The recipe argument (the host's default when none is given, said on stderr) and the
    /// `--set` overrides.
    pub(crate) fn recipe_spec(&self, args: &RecipeArgs) -> Result<RecipeSpec> {
        let name = if let Some(r) = &args.recipe {
            r.clone()
        } else {
            let gpus: usize = self
                .facts
                .get("gpu.count")
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            let name = recipe::shipped::default_for(gpus);
            if gpus == 0 {
                eprintln!("kiln: no NVIDIA GPU found: using the CPU demo recipe `{name}` (name a recipe to choose another)");
            } else {
                eprintln!("kiln: {gpus} NVIDIA GPU(s) found: using the default recipe `{name}`");
            }
            name.to_string()
        };
        let overrides = args
            .set
            .iter()
            .map(|kv| match kv.split_once('=') {
                Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
                _ => Err(Error::usage(
                    format!("`--set {kv}` is not KEY=VALUE"),
                    Some("write e.g. `--set arch=12.0`".to_string()),
                )),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RecipeSpec { name, overrides })
    }
}

/// Which recipe a command line names, and its `--set` overrides.
pub(crate) struct RecipeSpec {
    name: String,
    overrides: Vec<(String, String)>,
}

fn default_state_dir() -> Result<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(home) = var("KILN_HOME") {
        return Ok(home);
    }
    if let Some(xdg) = var("XDG_STATE_HOME") {
        return Ok(xdg.join("kiln"));
    }
    match var("HOME") {
        Some(home) => Ok(home.join(".local/state/kiln")),
        None => Err(Error::usage(
            "cannot pick a state directory: neither KILN_HOME, XDG_STATE_HOME nor HOME is set",
            Some("pass --state-dir DIR".to_string()),
        )),
    }
}

/// The reporter for this invocation: JSON, progress bars on a terminal, or plain lines.
pub fn reporter(json: bool) -> Box<dyn Reporter> {
    if json {
        Box::new(JsonReporter::default())
    } else if std::io::stderr().is_terminal() && std::env::var_os("KILN_NO_PROGRESS").is_none() {
        Box::new(ProgressReporter::default())
    } else {
        Box::new(PlainReporter)
    }
}
