//! The launch preflight of `kiln up`, `kiln serve`, `kiln verify`, `kiln tune` and `kiln doctor
//! --profile`: the profiles a command launches, resolved (a variable without a value stands as a
//! placeholder) and checked against this host ([`super::check`]), what is shown before a launch,
//! and the error that stops it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::super::{Check, Status};
use crate::error::{Error, Result};
use crate::host::Gpu;
use crate::paths::StatePaths;
use crate::pipeline::Variant;
use crate::recipe::{Recipe, StepKind};

/// Marks a variable without a value inside a profile resolved for the launch preflight.
fn placeholder(var: &str) -> String {
    format!("<unset:{var}>")
}

/// Variable names in "variable `NAME` is required and has no value" messages.
fn required_vars(messages: &BTreeMap<String, String>) -> Vec<String> {
    let mut vars: Vec<String> = Vec::new();
    for m in messages.values() {
        for part in m.split("variable `").skip(1) {
            if let Some((name, rest)) = part.split_once('`') {
                if rest.trim_start().starts_with("is required") && !vars.iter().any(|v| v == name) {
                    vars.push(name.to_string());
                }
            }
        }
    }
    vars
}

/// (placeholder, variable) for each variable without a value.
type Unset = Vec<(String, String)>;

/// Loads the recipe again with more `--set VAR=VALUE` overrides (after the command line's).
pub(crate) type Reload<'a> = dyn Fn(&[String]) -> Result<Recipe> + 'a;

/// The recipe with every profile resolved: profiles unavailable for a variable without a value
/// are resolved again with a placeholder standing for it (reloaded at most a few times).
fn all_profiles(recipe: &Recipe, reload: &Reload) -> Result<(Option<Recipe>, Unset)> {
    let mut unset: Vec<(String, String)> = Vec::new();
    let mut full: Option<Recipe> = None;
    for _ in 0..4 {
        let missing = required_vars(&full.as_ref().unwrap_or(recipe).unavailable_profiles);
        let new: Vec<String> = missing
            .into_iter()
            .filter(|v| !unset.iter().any(|(_, u)| u == v))
            .collect();
        if new.is_empty() {
            break;
        }
        unset.extend(new.into_iter().map(|v| (placeholder(&v), v)));
        let set: Vec<String> = unset.iter().map(|(p, v)| format!("{v}={p}")).collect();
        full = Some(reload(&set)?);
    }
    Ok((full, unset))
}

/// The profiles `kiln up` launches: the one it serves and that one's `baseline`.
fn up_profiles<'r>(recipe: &'r Recipe, profile: Option<&str>) -> Result<Vec<&'r str>> {
    let v = Variant::pick(recipe, profile)?;
    let mut out = Vec::new();
    if let Some(b) = &v.profile.baseline {
        out.push(Variant::pick(recipe, Some(b))?.name);
    }
    out.push(v.name);
    Ok(out)
}

/// What the launch preflight reads of this host besides the environment.
pub(crate) struct Here<'a> {
    pub paths: &'a StatePaths,
    pub gpus: &'a [Gpu],
    /// Loads the shipped recipe NAME with `--set VAR=VALUE`s (to find the ones that fit here).
    pub shipped: &'a dyn Fn(&str, &[String]) -> Result<Recipe>,
}

/// The shipped recipes other than `except` whose `kiln up` launch preflight, run as shipped
/// against this host (pure: nothing launches), fails nothing but what only the user supplies
/// (a model path from a variable without a value).
fn shipped_that_fit(here: &Here, except: &str) -> Vec<String> {
    crate::recipe::shipped::recipe_names()
        .into_iter()
        .filter(|n| n != except)
        .filter(|n| {
            let reload = |set: &[String]| (here.shipped)(n, set);
            let Ok(recipe) = reload(&[]) else {
                return false;
            };
            if recipe.profiles.is_empty() && recipe.unavailable_profiles.is_empty() {
                return false;
            }
            evaluate(&recipe, &reload, here, &[None], true).is_ok_and(|l| {
                l.checks
                    .iter()
                    .all(|c| c.status != Status::Fail || c.summary.ends_with(super::NO_VALUE))
            })
        })
        .collect()
}

/// `kiln up NAME` for each shipped recipe that fits, joined.
fn up_each(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`kiln up {n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Launch checks that a setting cannot change: what the user must still supply (a model path).
/// A `--set` is offered when, applied, no check fails but those, as before.
const HOST_SHAPED: &[&str] = &[
    "launch.gpus",
    "launch.gpu-group",
    "launch.quantization",
    "launch.weights",
];

/// Every launch check of the named profiles (None: the one `kiln up`/`kiln serve` picks; for
/// `up`, its baseline too), in order. A `--set` a failed check suggests (`tp=1` on one GPU) is
/// tried: the checks run again with it applied, and it stays in the hint only if they pass.
pub(crate) fn launch_checks(
    recipe: &Recipe,
    reload: &Reload,
    here: &Here,
    profiles: &[Option<&str>],
    up: bool,
) -> Result<Launched> {
    let mut found = evaluate(recipe, reload, here, profiles, up)?;
    let host_shaped = found
        .checks
        .iter()
        .any(|c| c.status == Status::Fail && matches!(c.id, "launch.gpus" | "launch.quantization"));
    if host_shaped {
        found.fits = shipped_that_fit(here, &found.recipe);
    }
    let Some(set) = found.checks.iter().find_map(suggested_set) else {
        return Ok(found);
    };
    let with = |more: &[String]| {
        let mut all = vec![set.clone()];
        all.extend_from_slice(more);
        reload(&all)
    };
    // A suggestion the recipe cannot take (`--set port=…` where the port is no variable of it)
    // is not tried: the checks stand as they are.
    let Ok(applied) = with(&[]) else {
        return Ok(found);
    };
    let again = evaluate(&applied, &with, here, profiles, up)?;
    let still: Vec<String> = again
        .checks
        .iter()
        .filter(|c| c.status == Status::Fail)
        .filter(|c| {
            HOST_SHAPED.contains(&c.id)
                || !found
                    .checks
                    .iter()
                    .any(|o| o.id == c.id && o.summary == c.summary && o.status == Status::Fail)
        })
        .map(|c| c.id.to_string())
        .fold(Vec::new(), |mut v, id| {
            if !v.contains(&id) {
                v.push(id);
            }
            v
        });
    if !still.is_empty() {
        let instead = if found.fits.is_empty() {
            String::new()
        } else {
            format!("; shipped recipes that fit it: {}", up_each(&found.fits))
        };
        for c in found
            .checks
            .iter_mut()
            .filter(|c| suggested_set(c).as_ref() == Some(&set))
        {
            c.fix = Some(format!(
                "with `--set {set}` {} still fails: no setting of this recipe fits this host{instead}; or run it on a host with enough GPUs",
                still.join(", ")
            ));
        }
    }
    found.tried = Some((set, still));
    Ok(found)
}

/// The `--set VAR=VALUE` a failed check's fix suggests with a value (`tp=1`; not a placeholder
/// such as `model=PATH`, which only the user can fill), if any.
fn suggested_set(c: &Check) -> Option<String> {
    if c.status != Status::Fail {
        return None;
    }
    let fix = c.fix.as_deref()?;
    let rest = &fix[fix.find("`--set ")? + "`--set ".len()..];
    let set = &rest[..rest.find('`')?];
    let (_, value) = set.split_once('=')?;
    let placeholder = value.chars().all(|c| c.is_ascii_uppercase() || c == '_');
    (!placeholder).then(|| set.to_string())
}

fn evaluate(
    recipe: &Recipe,
    reload: &Reload,
    here: &Here,
    profiles: &[Option<&str>],
    up: bool,
) -> Result<Launched> {
    let (full, unset) = all_profiles(recipe, reload)?;
    let full = full.as_ref().unwrap_or(recipe);
    let mut names: Vec<&str> = Vec::new();
    for p in profiles {
        let picked = if up {
            up_profiles(full, *p)?
        } else {
            vec![Variant::pick(full, *p)?.name]
        };
        for n in picked {
            if !names.contains(&n) {
                names.push(n);
            }
        }
    }
    let made_by = full.made_paths();
    let pinned_sglang = full.steps.iter().find_map(|s| match &s.kind {
        StepKind::Python(py) => py
            .install
            .iter()
            .find_map(|i| i.strip_prefix("sglang==").map(str::to_string)),
        _ => None,
    });
    // Only a record whose process identity still checks out (start time, boot) is kiln's.
    let record = crate::serve::read_record(here.paths, &full.name)
        .filter(|r| r.identity.as_ref().is_some_and(|i| i.verify().is_ok()));
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let cvd = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let host = super::Host {
        gpus: here.gpus,
        cuda_visible: cvd.as_deref(),
        own_server: record.as_ref().map(|r| (r.profile.as_str(), r.pid)),
        home: home.as_deref(),
        ram_available: crate::host::available_memory_bytes(),
    };
    let run = |name: &str| {
        let p = &full.profiles[name];
        super::check(
            &super::Launch {
                recipe: &full.name,
                profile: name,
                cmd: &p.cmd,
                args: &p.args,
                env: &p.env,
                port: p.port,
                unset: &unset,
                made_by: &made_by,
                pinned_sglang: pinned_sglang.as_deref(),
                tp_var: full.vars.contains_key("tp"),
                port_var: full.vars.contains_key("port"),
            },
            &host,
        )
    };
    let checks: Vec<Check> = names.iter().flat_map(|n| run(n)).collect();
    // What would run instead: the other profiles that pass here.
    let failed = checks.iter().any(|c| c.status == Status::Fail);
    let passing: Vec<String> = if failed {
        full.profiles
            .keys()
            .filter(|n| !names.contains(&n.as_str()))
            .filter(|n| run(n).iter().all(|c| c.status != Status::Fail))
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    Ok(Launched {
        recipe: full.name.clone(),
        profiles: names.iter().map(|n| (*n).to_string()).collect(),
        checks,
        passing,
        fits: Vec::new(),
        tried: None,
    })
}

/// The launch preflight's findings over the profiles a command launches.
pub(crate) struct Launched {
    pub(crate) recipe: String,
    pub(crate) profiles: Vec<String>,
    pub(crate) checks: Vec<Check>,
    /// Other profiles of the recipe without a failure here.
    passing: Vec<String>,
    /// Shipped recipes whose launch preflight passes here (looked for when the host, not a
    /// setting, stops this one: too few GPUs, a quantization the GPU lacks).
    fits: Vec<String>,
    /// The `--set` a failed check suggested, and the checks that still fail with it applied.
    tried: Option<(String, Vec<String>)>,
}

impl Launched {
    /// The lines shown before a launch: a count per profile, then each problem with its fix
    /// (a problem shared by several profiles once).
    pub(crate) fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut shown: Vec<(&str, &str)> = Vec::new();
        for p in &self.profiles {
            let mine: Vec<&Check> = self
                .checks
                .iter()
                .filter(|c| c.profile.as_deref() == Some(p.as_str()))
                .collect();
            out.push(format!(
                "launch preflight of profile `{p}`: {}",
                crate::doctor::preflight::tally(mine.iter().copied())
            ));
            for c in mine
                .iter()
                .filter(|c| matches!(c.status, Status::Warn | Status::Fail))
            {
                if shown.contains(&(c.id, c.summary.as_str())) {
                    out.push(format!("  {} {}: as above", mark(c.status), c.id));
                    continue;
                }
                shown.push((c.id, c.summary.as_str()));
                out.push(format!("  {} {}: {}", mark(c.status), c.id, c.summary));
                if let Some(fix) = &c.fix {
                    out.push(format!("    hint: {fix}"));
                }
            }
        }
        out
    }

    /// What would run instead, for the error's hint.
    fn alternatives(&self, up: bool) -> Vec<String> {
        let mut alt = Vec::new();
        match &self.tried {
            Some((set, still)) if still.is_empty() => {
                let fix = self
                    .checks
                    .iter()
                    .filter_map(|c| c.fix.as_deref())
                    .find(|f| f.contains(&format!("`--set {set}`")));
                if let Some(f) = fix {
                    alt.push(f.split(", or ").next().unwrap_or(f).to_string());
                }
            }
            Some((set, still)) => alt.push(format!(
                "no setting of this recipe fits this host (with `--set {set}` {} still fails)",
                still.join(", ")
            )),
            None => {}
        }
        for p in &self.passing {
            alt.push(format!("`--profile {p}`"));
        }
        if !self.fits.is_empty() {
            alt.push(format!(
                "{} (shipped recipes that fit this host)",
                up_each(&self.fits)
            ));
        }
        if up {
            alt.push(
                "the same `kiln up` with `--no-serve` to provision only (no model needed)".into(),
            );
        }
        alt
    }

    /// Whether the launch may go on: an error naming each failed check (once), whose hint says
    /// what would run instead (`up`: the same `kiln up` with `--no-serve` too).
    pub(crate) fn verdict(&self, up: bool) -> Result<()> {
        let failed: Vec<&str> = self
            .checks
            .iter()
            .filter(|c| c.status == Status::Fail)
            .map(|c| c.id)
            .fold(Vec::new(), |mut v, id| {
                if !v.contains(&id) {
                    v.push(id);
                }
                v
            });
        if failed.is_empty() {
            return Ok(());
        }
        let hint = self.alternatives(up);
        Err(Error::other(
            format!(
                "{} of {} cannot launch on this host: {}",
                self.profiles
                    .iter()
                    .map(|p| format!("profile `{p}`"))
                    .collect::<Vec<_>>()
                    .join(" and "),
                self.recipe,
                failed.join(", ")
            ),
            Some(if hint.is_empty() {
                "each line above says what to do".into()
            } else {
                format!("what would run: {}", hint.join("; "))
            }),
        ))
    }
}

fn mark(s: Status) -> &'static str {
    if s == Status::Fail {
        "✗"
    } else {
        "!"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_variables_are_read_from_unavailable_profile_messages() {
        let messages: BTreeMap<String, String> = [
            ("a".to_string(), "variable `model` is required and has no value".to_string()),
            (
                "b".to_string(),
                "in `args`: variable `model` is required; variable `draft` is required and has no value"
                    .to_string(),
            ),
            ("c".to_string(), "variable `port` is not a number".to_string()),
        ]
        .into();
        assert_eq!(required_vars(&messages), ["model", "draft"]);
        assert_eq!(placeholder("model"), "<unset:model>");
    }

    /// `super::IDS` spells the launch checks' ids a second time (for `kiln doctor ID`): every id
    /// the launch checks' code names is in it, and every id in it is named by that code.
    #[test]
    fn the_launch_id_table_matches_the_ids_the_checks_emit() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/doctor/launch");
        let mut named = std::collections::BTreeSet::new();
        for file in ["mod.rs", "flags.rs", "table.rs", "weights.rs"] {
            let text = std::fs::read_to_string(dir.join(file)).unwrap();
            // The table itself aside: from `pub(crate) const IDS` to its closing `];`.
            let text = match text.split_once("pub(crate) const IDS") {
                Some((head, tail)) => head.to_string() + tail.split_once("];").unwrap().1,
                None => text,
            };
            for part in text.split("\"launch.").skip(1) {
                let id: String = part
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '-')
                    .collect();
                if part[id.len()..].starts_with('"') {
                    named.insert(format!("launch.{id}"));
                }
            }
        }
        let table: std::collections::BTreeSet<String> =
            super::super::IDS.iter().map(|s| (*s).to_string()).collect();
        assert_eq!(named, table);
    }
}
