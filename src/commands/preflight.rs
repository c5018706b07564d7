//! The preflights of `kiln up`, before its first step: the host tools the recipe and its steps
//! `require` (every recipe), and the doctor for GPU stacks (recipes with a `cuda` step): host
//! problems no step can fix stop the run before hours of compiling; everything else the doctor
//! finds is shown and left to the steps (and to `serve`). And the launch preflight of `kiln up`,
//! `kiln serve`, `kiln verify` and `kiln tune`: the profiles they launch against this host.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::Settings;
use crate::cli::{RecipeArgs, UpArgs};
use crate::doctor::{self, launch, Check, Inputs, Status};
use crate::engine::{Plan, Status as StepStatus};
use crate::error::{Error, Result};
use crate::pipeline::Variant;
use crate::recipe::{Recipe, StepKind};
use crate::report::Reporter;
use crate::requires::{Found, OsFamily, Requirement};

/// Checks whose failure stops `kiln up`: the driver, its floor, and free disk. (A GPU stack also
/// stops on a missing driver, which the doctor alone only warns about.)
const BLOCKING: &[&str] = &["nvidia.driver", "driver.floor", "disk.free"];

pub(super) fn run(settings: &Settings, recipe: &Recipe, reporter: &dyn Reporter) -> Result<()> {
    let mut inputs = Inputs {
        state_dir: settings.paths.root().to_path_buf(),
        python_facts: Some(settings.paths.python_facts()),
        pinned_cc: settings.facts.pinned("gpu.cc").map(str::to_string),
        ..Inputs::default()
    };
    super::doctor::apply_recipe(recipe, &mut inputs);
    let report = doctor::run(doctor::facts::collect(&inputs), &[]);
    let count = |s: Status| report.checks.iter().filter(|c| c.status == s).count();
    reporter.note(&format!(
        "doctor preflight: {} pass, {} warn, {} fail, {} skip",
        count(Status::Pass),
        count(Status::Warn),
        count(Status::Fail),
        count(Status::Skip)
    ));
    for c in report
        .checks
        .iter()
        .filter(|c| matches!(c.status, Status::Warn | Status::Fail))
    {
        let mark = if c.status == Status::Fail { "✗" } else { "!" };
        reporter.note(&format!("  {mark} {}: {}", c.id, c.summary));
    }
    // A pinned driver (`KILN_FACT_GPU_DRIVER`) stands for a driver this host does not show.
    let driver_pinned = settings.facts.pinned("gpu.driver").is_some();
    let blocking: Vec<_> = report
        .checks
        .iter()
        .filter(|c| BLOCKING.contains(&c.id))
        .filter(|c| !(driver_pinned && c.id == "nvidia.driver"))
        .filter(|c| {
            c.status == Status::Fail || (c.id == "nvidia.driver" && c.status == Status::Warn)
        })
        .collect();
    if let Some(first) = blocking.first() {
        let ids: Vec<&str> = blocking.iter().map(|c| c.id).collect();
        return Err(Error::other(
            format!(
                "doctor preflight failed: {}: {}",
                ids.join(", "),
                first.summary
            ),
            Some(
                first
                    .fix
                    .clone()
                    .unwrap_or_else(|| format!("see `kiln doctor {} -v`", first.id))
                    + "; or pass --no-doctor to run anyway",
            ),
        ));
    }
    Ok(())
}

/// One host tool and who needs it: `the recipe`, `step `build``.
pub(super) struct Needed {
    pub(super) req: Requirement,
    pub(super) by: Vec<String>,
}

/// The recipe's `requires` and those of the steps whose status `runs` accepts (the plan's steps
/// are the recipe's, in order), merged by tool (the highest minimum version wins).
fn needed(recipe: &Recipe, plan: &Plan, runs: impl Fn(&StepStatus) -> bool) -> Vec<Needed> {
    let mut out: Vec<Needed> = Vec::new();
    let sources = recipe
        .requires
        .iter()
        .map(|r| (r, "the recipe".to_string()))
        .chain(
            recipe
                .steps
                .iter()
                .zip(&plan.steps)
                .filter(|(_, p)| runs(&p.status))
                .flat_map(|(s, _)| {
                    s.requires
                        .iter()
                        .map(move |r| (r, format!("step `{}`", s.id)))
                }),
        );
    for (req, by) in sources {
        match out.iter_mut().find(|n| n.req.tool == req.tool) {
            Some(n) => {
                n.req.raise_min(req);
                // The same source twice comes in a row (one step listing a tool twice).
                if n.by.last() != Some(&by) {
                    n.by.push(by);
                }
            }
            None => out.push(Needed {
                req: req.clone(),
                by: vec![by],
            }),
        }
    }
    out
}

/// What `kiln plan` shows of one checked requirement: `✓ c++  /usr/bin/c++ 12.2.0`.
fn describe(found: &Found) -> (bool, String) {
    match found {
        Found::Ok { path, version } => (
            true,
            match version {
                Some(v) => format!("{} {v}", path.display()),
                None => path.display().to_string(),
            },
        ),
        Found::Missing => (false, "not found on PATH".into()),
        Found::TooOld { path, version } => (false, format!("{} is {version}", path.display())),
        Found::Broken { why, .. } => (false, why.clone()),
    }
}

/// One needed tool, checked now: found (and how it was found), or what is wrong.
pub(super) struct Checked {
    pub(super) needed: Needed,
    pub(super) ok: bool,
    pub(super) what: String,
}

/// [`needed`], each tool checked now, and the command that installs the missing ones.
pub(super) fn check_needed(
    recipe: &Recipe,
    plan: &Plan,
    runs: impl Fn(&StepStatus) -> bool,
) -> (Vec<Checked>, Option<String>) {
    let checked: Vec<Checked> = needed(recipe, plan, runs)
        .into_iter()
        .map(|needed| {
            let (ok, what) = describe(&needed.req.check());
            Checked { needed, ok, what }
        })
        .collect();
    let missing: Vec<_> = checked
        .iter()
        .filter(|c| !c.ok)
        .map(|c| c.needed.req.tool)
        .collect();
    let hint = (!missing.is_empty()).then(|| OsFamily::detect().install_hint(&missing));
    (checked, hint)
}

/// `kiln up`'s host-tool check, before the first step: the recipe's `requires` and those of the
/// steps about to run. Every problem is one line of the error; the hint installs them all.
pub(super) fn host_tools(recipe: &Recipe, plan: &Plan, reporter: &dyn Reporter) -> Result<()> {
    let (checked, hint) = check_needed(recipe, plan, |s| matches!(s, StepStatus::Stale(_)));
    let Some(hint) = hint else {
        if !checked.is_empty() {
            let tools: Vec<String> = checked.iter().map(|c| c.needed.req.to_string()).collect();
            reporter.note(&format!("host tools: {} found", tools.join(", ")));
        }
        return Ok(());
    };
    let problems = checked
        .iter()
        .filter(|c| !c.ok)
        .map(|c| {
            let n = &c.needed;
            format!("{}: {} (needed by {})", n.req, c.what, n.by.join(", "))
        })
        .collect();
    Err(Error::HostTools {
        recipe: recipe.name.clone(),
        problems,
        hint,
    })
}

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

/// The recipe with every profile resolved: profiles unavailable for a variable without a value
/// are resolved again with a placeholder standing for it (reloaded at most a few times).
fn all_profiles(
    settings: &Settings,
    args: &RecipeArgs,
    recipe: &Recipe,
) -> Result<(Option<Recipe>, Unset)> {
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
        let mut set = args.set.clone();
        set.extend(unset.iter().map(|(p, v)| format!("{v}={p}")));
        let spec = settings.recipe_spec(&RecipeArgs {
            recipe_flag: None,
            recipe: Some(args.recipe.clone().unwrap_or_else(|| recipe.name.clone())),
            set,
        })?;
        full = Some(settings.load(&spec)?);
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

/// Every launch check of the named profiles (None: the one `kiln up`/`kiln serve` picks; for
/// `up`, its baseline too), in order.
pub(super) fn launch_checks(
    settings: &Settings,
    args: &RecipeArgs,
    recipe: &Recipe,
    profiles: &[Option<&str>],
    up: bool,
) -> Result<Launched> {
    let (full, unset) = all_profiles(settings, args, recipe)?;
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
    let made_by: Vec<(PathBuf, String)> = full
        .steps
        .iter()
        .flat_map(|s| {
            let mut paths = match &s.check {
                Some(crate::recipe::Check::Paths(p)) => p.clone(),
                _ => Vec::new(),
            };
            if let StepKind::Python(py) = &s.kind {
                paths.push(py.venv.clone());
            }
            paths.into_iter().map(move |p| (p, s.id.clone()))
        })
        .collect();
    let pinned_sglang = full.steps.iter().find_map(|s| match &s.kind {
        StepKind::Python(py) => py
            .install
            .iter()
            .find_map(|i| i.strip_prefix("sglang==").map(str::to_string)),
        _ => None,
    });
    // Only a record whose process identity still checks out (start time, boot) is kiln's.
    let record = crate::serve::read_record(&settings.paths, &full.name)
        .filter(|r| r.identity.as_ref().is_some_and(|i| i.verify().is_ok()));
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let cvd = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let host = launch::Host {
        gpus: settings.facts.gpus(),
        cuda_visible: cvd.as_deref(),
        own_server: record.as_ref().map(|r| (r.profile.as_str(), r.pid)),
        home: home.as_deref(),
        ram_available: crate::host::available_memory_bytes(),
    };
    let run = |name: &str| {
        let p = &full.profiles[name];
        launch::check(
            &launch::Launch {
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
        gpus: host.gpus.len(),
    })
}

/// The launch preflight's findings over the profiles a command launches.
pub(super) struct Launched {
    pub(super) recipe: String,
    pub(super) profiles: Vec<String>,
    pub(super) checks: Vec<Check>,
    /// Other profiles of the recipe without a failure here.
    passing: Vec<String>,
    gpus: usize,
}

impl Launched {
    /// The lines shown before a launch: a count per profile, then each problem with its fix
    /// (a problem shared by several profiles once).
    fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut shown: Vec<(&str, &str)> = Vec::new();
        for p in &self.profiles {
            let mine: Vec<&Check> = self
                .checks
                .iter()
                .filter(|c| c.profile.as_deref() == Some(p.as_str()))
                .collect();
            let count = |s: Status| mine.iter().filter(|c| c.status == s).count();
            out.push(format!(
                "launch preflight of profile `{p}`: {} pass, {} warn, {} fail, {} skip",
                count(Status::Pass),
                count(Status::Warn),
                count(Status::Fail),
                count(Status::Skip)
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
        if let Some(c) = self
            .checks
            .iter()
            .find(|c| c.id == "launch.gpus" && c.status == Status::Fail)
            .and_then(|c| c.fix.as_ref())
            .filter(|f| f.contains("--set tp="))
        {
            alt.push(c.split(", or ").next().unwrap_or(c).to_string());
        }
        for p in &self.passing {
            alt.push(format!("`--profile {p}`"));
        }
        let host_shaped = self.checks.iter().any(|c| {
            c.status == Status::Fail && matches!(c.id, "launch.gpus" | "launch.quantization")
        });
        if host_shaped && self.gpus > 0 && self.recipe != "llama-cuda" {
            alt.push("`kiln up llama-cuda` (the whole loop on any NVIDIA GPU)".into());
        }
        if up {
            alt.push("`kiln up --no-serve` to provision only (no model needed)".into());
        }
        alt
    }
}

fn mark(s: Status) -> &'static str {
    if s == Status::Fail {
        "✗"
    } else {
        "!"
    }
}

/// The launch preflight of a command that launches `profiles` (None: the one it picks): every
/// line shown, and an error naming each failed check when one fails.
pub(super) fn launch(
    settings: &Settings,
    args: &RecipeArgs,
    recipe: &Recipe,
    profiles: &[Option<&str>],
) -> Result<()> {
    let reporter = super::reporter(false);
    launch_with(settings, args, recipe, profiles, false, reporter.as_ref())
}

/// `kiln up`'s launch preflight, before its first step: skipped (and said so) with `--no-serve`,
/// `--only` or `--no-doctor`.
pub(super) fn launch_up(
    settings: &Settings,
    args: &UpArgs,
    recipe: &Recipe,
    reporter: &dyn Reporter,
    stage: &mut &'static str,
) -> Result<()> {
    let skip = if args.no_serve {
        Some("--no-serve provisions only; `kiln serve` runs it before it launches")
    } else if !args.only.is_empty() {
        Some("--only runs steps and serves nothing")
    } else if args.no_doctor {
        Some("--no-doctor")
    } else if recipe.profiles.is_empty() && recipe.unavailable_profiles.is_empty() {
        None
    } else {
        *stage = "preflight";
        launch_with(
            settings,
            &args.recipe,
            recipe,
            &[args.profile.as_deref()],
            true,
            reporter,
        )?;
        *stage = "steps";
        return Ok(());
    };
    if let Some(why) = skip {
        reporter.note(&format!("launch preflight skipped: {why}"));
    }
    Ok(())
}

fn launch_with(
    settings: &Settings,
    args: &RecipeArgs,
    recipe: &Recipe,
    profiles: &[Option<&str>],
    up: bool,
    reporter: &dyn Reporter,
) -> Result<()> {
    let found = launch_checks(settings, args, recipe, profiles, up)?;
    for line in found.lines() {
        reporter.note(&line);
    }
    let failed: Vec<&str> = found
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
    let hint = found.alternatives(up);
    Err(Error::other(
        format!(
            "{} of {} cannot launch on this host: {}",
            found
                .profiles
                .iter()
                .map(|p| format!("profile `{p}`"))
                .collect::<Vec<_>>()
                .join(" and "),
            found.recipe,
            failed.join(", ")
        ),
        Some(if hint.is_empty() {
            "each line above says what to do".into()
        } else {
            format!("what would run: {}", hint.join("; "))
        }),
    ))
}
