//! Wire → domain: variables resolved, per-kind keys checked, needs and cycles checked, all with
//! locations and hints.

mod cuda;
mod fields;
mod kinds;

pub(super) use kinds::static_name;
mod profile;
mod requires;
mod steps;
mod vars;

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::interp::Template;
use super::loaded::{LoadOptions, Loaded};
use super::{graph, wire, Recipe, Step};
use crate::diagnostic::did_you_mean;
use crate::error::{Error, Result};
use crate::source::{Loc, Sources};
use profile::profile;
use steps::{output_path, step};
use vars::{var_def, Resolver, VarDef};

pub(super) fn build(loaded: &Loaded, opts: &LoadOptions) -> Result<Recipe> {
    let sources = &loaded.sources;
    let (root_id, root) = loaded.files.last().expect("the root file is always loaded");
    let meta = root.recipe.as_ref();
    let name = recipe_name(sources, *root_id, meta)?;
    let recipe_dir = sources.files[*root_id].dir.clone().map_or_else(
        || std::env::current_dir().unwrap_or_default(),
        |d| {
            if d.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                d
            }
        },
    );
    let recipe_dir = std::fs::canonicalize(&recipe_dir).unwrap_or(recipe_dir);
    if recipe_dir.to_str().is_none() {
        // `${recipe.dir}`, the inputs and a profile's directory are text: a lossy copy would
        // name another directory (and a step would create it).
        return Err(Error::usage(
            format!(
                "the directory of recipe {}, {}, is not valid UTF-8: `${{recipe.dir}}`, the \
                 step inputs and the server's directory are resolved from it as text",
                sources.files[*root_id].path.display(),
                recipe_dir.display()
            ),
            Some("move the recipe (or run kiln from) a directory whose path is UTF-8".into()),
        ));
    }
    let work_dir = opts.paths.work(&name);

    let mut r = Resolver {
        sources,
        opts,
        defs: BTreeMap::new(),
        builtins: BTreeMap::from([
            ("kiln.state_dir", opts.paths.root().display().to_string()),
            ("kiln.cache_dir", opts.paths.cache().display().to_string()),
            ("kiln.work_dir", work_dir.display().to_string()),
            ("recipe.dir", recipe_dir.display().to_string()),
            ("recipe.name", name.clone()),
        ]),
        resolved: BTreeMap::new(),
        active: Vec::new(),
        step_paths: BTreeMap::new(),
    };
    for (file, f) in &loaded.files {
        for (key, value) in &f.vars {
            let loc = sources.loc(*file, value.span());
            let def = var_def(sources, loc, key.get_ref(), value.get_ref())?;
            r.defs.insert(key.get_ref().clone(), def);
        }
    }
    apply_overrides(&mut r, opts.overrides)?;
    // Required variables without a value fail only where something uses them.
    let var_names: Vec<String> = r
        .defs
        .iter()
        .filter(|(_, d)| d.template.is_some())
        .map(|(k, _)| k.clone())
        .collect();
    for key in &var_names {
        r.var(key)?;
    }

    let mut recipe_env = BTreeMap::new();
    for (file, f) in &loaded.files {
        for (k, v) in &f.env {
            recipe_env.insert(r.env_name(*file, k)?, r.expand(*file, v)?);
        }
    }

    let all_steps: Vec<(usize, &wire::Step)> = loaded
        .files
        .iter()
        .flat_map(|(file, f)| f.steps.iter().map(move |s| (*file, s)))
        .collect();
    let first_at = step_ids(sources, &all_steps)?;
    // Output paths first: other steps may interpolate `${steps.ID.path}`.
    for (file, s) in &all_steps {
        if let Some(path) = output_path(&mut r, *file, s, &work_dir)? {
            r.step_paths
                .insert(s.id.get_ref().clone(), path.display().to_string());
        }
    }

    let mut steps = Vec::with_capacity(all_steps.len());
    for (file, s) in &all_steps {
        steps.push(step(
            &mut r,
            *file,
            s,
            &recipe_env,
            &work_dir,
            &recipe_dir,
            &first_at,
        )?);
    }
    cuda::nvcc_users(&r, &all_steps, &steps)?;
    let steps = order(sources, &all_steps, steps)?;

    let (resolved_profiles, unavailable_profiles) = profiles(&mut r, loaded)?;

    Ok(Recipe {
        name,
        description: meta.and_then(|m| m.description.clone()).unwrap_or_default(),
        version: meta.and_then(|m| m.version.clone()).unwrap_or_default(),
        origin: sources.files[*root_id].path.display().to_string(),
        vars: r.resolved.clone(),
        steps,
        profiles: resolved_profiles,
        unavailable_profiles,
        requires: requires::of_recipe(sources, &loaded.files)?,
        provenance: None,
    })
}

/// The recipe's name (its `[recipe] name`, else its file's stem), checked to be usable as a
/// directory name.
pub(super) fn recipe_name(
    sources: &Sources,
    root_id: usize,
    meta: Option<&wire::Meta>,
) -> Result<String> {
    let name = meta
        .and_then(|m| m.name.as_ref().map(|n| n.get_ref().clone()))
        .unwrap_or_else(|| {
            sources.files[root_id]
                .path
                .file_stem()
                .map_or("recipe".into(), |s| s.to_string_lossy().into_owned())
        });
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        let loc = meta
            .and_then(|m| m.name.as_ref())
            .map(|n| sources.loc(root_id, n.span()));
        let msg = format!("invalid recipe name `{name}`");
        let hint = "names use letters, digits, `-`, `_` and `.` (they name a state directory)";
        return Err(match loc {
            Some(loc) => sources.diag(loc, msg).with_hint(hint).into(),
            None => Error::usage(msg, Some(hint.into())),
        });
    }
    Ok(name)
}

/// `--set KEY=VALUE`: each replaces a variable the recipe defines.
fn apply_overrides(r: &mut Resolver, overrides: &[(String, String)]) -> Result<()> {
    for (key, value) in overrides {
        if !r.defs.contains_key(key) {
            let hint = match did_you_mean(key, r.defs.keys().map(String::as_str)) {
                Some(best) => format!("did you mean `--set {best}=...`?"),
                None => format!(
                    "variables of this recipe: {}",
                    r.defs.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            };
            return Err(Error::usage(
                format!("`--set {key}=...`: the recipe has no variable `{key}`"),
                Some(hint),
            ));
        }
        // Taken literally: a value given on the command line is data (a password with `$$` or
        // `${` in it is not a template to expand).
        let template = Template::literal(value);
        let help = r.defs.get(key).and_then(|d| d.help.clone());
        r.defs.insert(
            key.clone(),
            VarDef {
                template: Some(template),
                loc: None,
                help,
            },
        );
    }
    Ok(())
}

/// Every step id, where it is defined; invalid and duplicate ids are errors.
fn step_ids<'s>(
    sources: &Sources,
    all_steps: &[(usize, &'s wire::Step)],
) -> Result<BTreeMap<&'s str, Loc>> {
    let mut first_at: BTreeMap<&str, Loc> = BTreeMap::new();
    for (file, s) in all_steps {
        let loc = sources.loc(*file, s.id.span());
        let id = s.id.get_ref().as_str();
        if id.is_empty()
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(sources
                .diag(loc, format!("invalid step id `{id}`"))
                .with_hint("step ids use letters, digits, `-`, `_` and `.`")
                .into());
        }
        if let Some(first) = first_at.get(id) {
            let d = sources.diag(*first, "");
            return Err(sources
                .diag(loc, format!("duplicate step id `{id}`"))
                .with_hint(format!(
                    "it is first defined at {}:{}:{}; step ids must be unique",
                    d.file.display(),
                    d.line,
                    d.col
                ))
                .into());
        }
        first_at.insert(id, loc);
    }
    Ok(first_at)
}

type Profiles = (BTreeMap<String, super::Profile>, BTreeMap<String, String>);

/// The profiles that resolve, and those unavailable for a required variable without a value.
fn profiles(r: &mut Resolver, loaded: &Loaded) -> Result<Profiles> {
    let mut profiles = BTreeMap::new();
    for (file, f) in &loaded.files {
        for (pname, p) in &f.profiles {
            profiles.insert(pname.get_ref().clone(), (*file, p));
        }
    }
    let mut resolved_profiles = BTreeMap::new();
    let mut unavailable_profiles = BTreeMap::new();
    for pname in profiles.keys() {
        // A profile that needs a required variable without a value is unavailable, not an error:
        // provisioning does not need the model path; serving that profile does.
        match profile(r, &profiles, pname, &mut Vec::new()) {
            Ok(p) => {
                resolved_profiles.insert(pname.clone(), p);
            }
            Err(e) if is_missing_required(&e) => {
                unavailable_profiles.insert(pname.clone(), e.render());
            }
            Err(e) => return Err(e),
        }
    }
    Ok((resolved_profiles, unavailable_profiles))
}

fn is_missing_required(e: &Error) -> bool {
    let text = match e {
        Error::Source(d) => d.message.as_str(),
        Error::Usage { message, .. } => message.as_str(),
        _ => return false,
    };
    text.contains("is required and has no value")
}

/// Dependency order; a cycle is reported at a `needs` entry on it.
fn order(
    sources: &Sources,
    wire_steps: &[(usize, &wire::Step)],
    steps: Vec<Step>,
) -> Result<Vec<Step>> {
    let ids: Vec<&str> = steps.iter().map(|s| s.id.as_str()).collect();
    let needs = steps
        .iter()
        .map(|s| (s.id.as_str(), s.needs.iter().map(String::as_str).collect()))
        .collect();
    match graph::topo_order(&ids, &needs) {
        Ok(order) => {
            let mut slots: Vec<Option<Step>> = steps.into_iter().map(Some).collect();
            Ok(order
                .into_iter()
                .map(|i| slots[i].take().expect("each index once"))
                .collect())
        }
        Err(cycle) => {
            let (file, ws) = wire_steps
                .iter()
                .find(|(_, w)| *w.id.get_ref() == cycle[0])
                .expect("cycle ids exist");
            let span = ws
                .needs
                .iter()
                .find(|n| *n.get_ref() == cycle[1])
                .map_or(ws.id.span(), toml::Spanned::span);
            Err(sources
                .diag(
                    sources.loc(*file, span),
                    format!("dependency cycle: {}", cycle.join(" → ")),
                )
                .with_hint("remove one of these `needs` so the steps can run in some order")
                .into())
        }
    }
}
