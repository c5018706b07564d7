//! Glue from command-line settings to the engine: one file per subcommand.

// Commands are where kiln prints: results on stdout, milestones on stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod bench;
mod cache;
mod doctor;
mod image;
mod man_sections;
mod patch;
mod plan;
mod preflight;
mod serve;
mod shell_help;
mod show;
mod tune;
mod up;
mod verify;

use std::path::PathBuf;

use crate::cli::{Cli, Command, RecipeArgs};
use crate::error::{Error, Result};
use crate::host::Facts;
use crate::paths::StatePaths;
use crate::pipeline::Session;
use crate::recipe::{self, Recipe};
use crate::report::Reporter;

/// Run a parsed command line; the returned code is the process's exit status.
pub fn run(cli: Cli) -> Result<u8> {
    crate::report::configure(output(&cli));
    let settings = Settings::resolve(&cli)?;
    if !matches!(
        cli.command,
        Command::Completions { .. } | Command::Man { .. }
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
        Command::Man { command } => shell_help::man(&command),
    }
}

/// How a command ended, said through the reporter (`error:` on stderr, or the `error` and
/// `outcome` events with `--json`); the process's exit status.
pub fn finish(result: Result<u8>) -> u8 {
    let reporter = crate::report::current();
    match result {
        Ok(0) => {
            reporter.finished(0, None);
            0
        }
        // Commands turn a non-zero status into an `Error::Finding` that says why; this is the
        // guarantee that no failure ends without an `error:` line.
        Ok(code) => {
            let e = Error::other(
                format!("kiln exited with status {code} without a reason (a kiln bug: please report it)"),
                None,
            );
            reporter.finished(code, Some(&e));
            code
        }
        Err(e) => {
            let code = e.exit_code();
            reporter.finished(code, Some(&e));
            code
        }
    }
}

/// The output choices of a parsed command line: the global flags and the command's `--json`.
pub(crate) fn output(cli: &Cli) -> crate::report::Output {
    use crate::cli::ColorWhen;
    // JSON lines (schema, typed events, `error` and `outcome`): `kiln up` and `kiln plan`. The
    // other `--json`s still print one JSON document of their own (not yet moved).
    let json = match &cli.command {
        Command::Up(a) => a.json,
        Command::Plan(a) => a.json,
        _ => false,
    };
    crate::report::Output {
        json,
        quiet: cli.quiet,
        no_progress: cli.no_progress,
        color: match cli.color {
            ColorWhen::Auto => crate::report::ColorWhen::Auto,
            ColorWhen::Always => crate::report::ColorWhen::Always,
            ColorWhen::Never => crate::report::ColorWhen::Never,
        },
    }
}

/// The hidden watchdog (`kiln __watchdog PARENT DIR`, see [`crate::process::watchdog`]): kiln
/// starts it itself, so it is dispatched before the command line is parsed and is no subcommand
/// a shell could complete. `None` when `args` are not a watchdog's.
pub fn watchdog(args: &[std::ffi::OsString]) -> Option<Result<u8>> {
    match args {
        [_, cmd, parent, dir] if cmd == "__watchdog" => {
            let parent = parent.to_str().and_then(|p| p.parse().ok());
            Some(match parent {
                Some(parent) => crate::process::watchdog::watch(parent, std::path::Path::new(dir)),
                None => Err(Error::usage("usage: kiln __watchdog PARENT_PID DIR", None)),
            })
        }
        [_, cmd, ..] if cmd == "__watchdog" => Some(Err(Error::usage(
            "usage: kiln __watchdog PARENT_PID DIR",
            None,
        ))),
        _ => None,
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
        let name = if let Some(r) = args.recipe.as_ref().or(args.recipe_flag.as_ref()) {
            r.clone()
        } else {
            let gpus: usize = self
                .facts
                .get("gpu.count")
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            let name = recipe::shipped::default_for(gpus);
            let r = crate::report::current();
            if gpus == 0 {
                r.note(&format!("no NVIDIA GPU found: using the CPU demo recipe `{name}` (name a recipe to choose another)"));
            } else {
                r.note(&format!(
                    "{} found: using the default recipe `{name}`",
                    crate::report::count(gpus, "NVIDIA GPU")
                ));
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

/// The reporter of this invocation ([`crate::report::current`]: its `--json` and global flags
/// chose the renderer); `_json` is the command's own flag, already folded into [`output`].
pub(crate) fn reporter(_json: bool) -> Box<dyn Reporter> {
    Box::new(crate::report::Current)
}
