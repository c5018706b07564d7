//! The settings every command shares (the state directory's layout and the host's facts), and
//! how a command line names a recipe: the name (or this host's default) and its `--set`s.

use crate::cli::{Cli, RecipeArgs};
use crate::error::{Error, Result};
use crate::host::Facts;
use crate::paths::StatePaths;
use crate::pipeline::Session;
use crate::recipe::{self, Recipe};

/// Settings every command shares, resolved once from flags and the environment.
pub struct Settings {
    /// The state directory's layout; its cache is `$KILN_CACHE_DIR`, else `<state_dir>/cache`.
    pub paths: StatePaths,
    pub facts: Facts,
}

impl Settings {
    pub(super) fn resolve(cli: &Cli) -> Result<Settings> {
        Ok(Settings {
            paths: StatePaths::from_env(cli.state_dir.as_deref())?,
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
    pub(super) name: String,
    overrides: Vec<(String, String)>,
}
