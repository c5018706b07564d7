//! Wire → domain: variables resolved, per-kind keys checked, needs and cycles checked, all with
//! locations and hints.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toml::Spanned;

use super::interp::{Quoting, Template, VarRef};
use super::load::{LoadOptions, Loaded};
use super::source::{Loc, Sources};
use super::{
    graph, units, when, wire, Check, Cmd, CudaStep, Profile, PythonStep, Recipe, SitePackages,
    Step, StepKind, When,
};
use crate::diagnostic::{did_you_mean, Diagnostic};
use crate::error::{Error, Result};
use crate::host::FACT_KEYS;

const BUILTINS: &[&str] = &[
    "kiln.state_dir",
    "kiln.cache_dir",
    "kiln.work_dir",
    "recipe.dir",
    "recipe.name",
];

/// A variable's definition: its template and where it was written (None: `--set`).
/// `template: None` is a required variable without a value; `help` says what to give it.
struct VarDef {
    template: Option<Template>,
    loc: Option<Loc>,
    help: Option<String>,
}

struct Resolver<'a> {
    sources: &'a Sources,
    opts: &'a LoadOptions<'a>,
    defs: BTreeMap<String, VarDef>,
    builtins: BTreeMap<&'static str, String>,
    resolved: BTreeMap<String, String>,
    active: Vec<String>,
    /// `steps.ID.path` values.
    step_paths: BTreeMap<String, String>,
}

pub(super) fn build(loaded: Loaded, opts: &LoadOptions) -> Result<Recipe> {
    let sources = &loaded.sources;
    let (root_id, root) = loaded.files.last().expect("the root file is always loaded");
    let meta = root.recipe.as_ref();
    let name = meta
        .and_then(|m| m.name.as_ref().map(|n| n.get_ref().clone()))
        .unwrap_or_else(|| {
            sources.files[*root_id]
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
            .map(|n| sources.loc(*root_id, n.span()));
        let msg = format!("invalid recipe name `{name}`");
        let hint = "names use letters, digits, `-`, `_` and `.` (they name a state directory)";
        return Err(match loc {
            Some(loc) => sources.diag(loc, msg).with_hint(hint).into(),
            None => Error::usage(msg, Some(hint.into())),
        });
    }
    let recipe_dir = sources.files[*root_id]
        .dir
        .clone()
        .map(|d| {
            if d.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                d
            }
        })
        .unwrap_or_else(|| std::env::current_dir().unwrap_or_default());
    let recipe_dir = std::fs::canonicalize(&recipe_dir).unwrap_or(recipe_dir);
    let work_dir = opts.state_dir.join("work").join(&name);

    let mut r = Resolver {
        sources,
        opts,
        defs: BTreeMap::new(),
        builtins: BTreeMap::from([
            ("kiln.state_dir", opts.state_dir.display().to_string()),
            ("kiln.cache_dir", opts.cache_dir.display().to_string()),
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
    for (key, value) in opts.overrides {
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
        let template = Template::parse(value).map_err(|e| {
            Error::usage(
                format!("`--set {key}=...`: {}", e.message),
                Some(e.hint.to_string()),
            )
        })?;
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
            recipe_env.insert(k.get_ref().clone(), r.expand(*file, v)?);
        }
    }

    let all_steps: Vec<(usize, &wire::Step)> = loaded
        .files
        .iter()
        .flat_map(|(file, f)| f.steps.iter().map(move |s| (*file, s)))
        .collect();
    let mut first_at: BTreeMap<&str, Loc> = BTreeMap::new();
    for (file, s) in &all_steps {
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
    let steps = order(sources, &all_steps, steps)?;

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
        match profile(&mut r, &profiles, pname, &mut Vec::new()) {
            Ok(p) => {
                resolved_profiles.insert(pname.clone(), p);
            }
            Err(e) if is_missing_required(&e) => {
                unavailable_profiles.insert(pname.clone(), e.render());
            }
            Err(e) => return Err(e),
        }
    }

    Ok(Recipe {
        name,
        description: meta.and_then(|m| m.description.clone()).unwrap_or_default(),
        version: meta.and_then(|m| m.version.clone()).unwrap_or_default(),
        origin: sources.files[*root_id].path.display().to_string(),
        vars: r.resolved.clone(),
        steps,
        profiles: resolved_profiles,
        unavailable_profiles,
    })
}

fn is_missing_required(e: &Error) -> bool {
    let text = match e {
        Error::Source(d) => d.message.as_str(),
        Error::Usage { message, .. } => message.as_str(),
        _ => return false,
    };
    text.contains("is required and has no value")
}

/// A `[vars]` entry: a string template, a number or boolean, or `{ help = "...", default = "..." }`
/// (no `default`: required).
fn var_def(sources: &Sources, loc: Loc, key: &str, value: &toml::Value) -> Result<VarDef> {
    let literal = |v: &toml::Value| Template {
        parts: vec![super::interp::Part::Lit(v.to_string())],
    };
    let template = match value {
        toml::Value::String(s) => Some(parse_template(sources, loc, s)?),
        toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_) => {
            Some(literal(value))
        }
        toml::Value::Table(t) => {
            if let Some(bad) = t
                .keys()
                .find(|k| !["help", "default"].contains(&k.as_str()))
            {
                let hint = did_you_mean(bad, ["help", "default"])
                    .map_or("keys: help, default".to_string(), |b| {
                        format!("did you mean `{b}`?")
                    });
                return Err(sources
                    .diag(loc, format!("unknown key `{bad}` in variable `{key}`"))
                    .with_hint(hint)
                    .into());
            }
            let help = match t.get("help") {
                Some(toml::Value::String(h)) => Some(h.clone()),
                None => None,
                Some(_) => {
                    return Err(sources
                        .diag(loc, format!("`help` of variable `{key}` must be a string"))
                        .with_hint("e.g. `{ help = \"path to the model\" }`")
                        .into())
                }
            };
            let template = match t.get("default") {
                Some(toml::Value::String(s)) => Some(parse_template(sources, loc, s)?),
                Some(
                    v @ (toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_)),
                ) => Some(literal(v)),
                None => None,
                Some(_) => {
                    return Err(sources
                        .diag(
                            loc,
                            format!(
                                "`default` of variable `{key}` must be a string, number or boolean"
                            ),
                        )
                        .with_hint("use a string")
                        .into())
                }
            };
            return Ok(VarDef {
                template,
                loc: Some(loc),
                help,
            });
        }
        _ => return Err(sources
            .diag(
                loc,
                format!("variable `{key}` must be a string, number or boolean"),
            )
            .with_hint(
                "lists are not variables; use a string, or `{ help = \"...\" }` for a required one",
            )
            .into()),
    };
    Ok(VarDef {
        template,
        loc: Some(loc),
        help: None,
    })
}

fn parse_template(sources: &Sources, loc: Loc, text: &str) -> Result<Template> {
    Template::parse(text).map_err(|e| {
        let start = sources.string_offset(loc, e.offset);
        let end = sources.string_offset(loc, e.offset + e.len);
        sources
            .diag(
                Loc {
                    file: loc.file,
                    start,
                    end,
                },
                e.message,
            )
            .with_hint(e.hint)
            .into()
    })
}

impl Resolver<'_> {
    fn var(&mut self, name: &str) -> Result<String> {
        if let Some(v) = self.resolved.get(name) {
            return Ok(v.clone());
        }
        if self.active.iter().any(|a| a == name) {
            let mut cycle = self.active.clone();
            cycle.push(name.to_string());
            let msg = format!("variable cycle: {}", cycle.join(" → "));
            let hint = "a variable cannot depend on itself; break the chain with a literal value";
            return Err(match self.defs[name].loc {
                Some(loc) => self.sources.diag(loc, msg).with_hint(hint).into(),
                None => Error::usage(msg, Some(hint.into())),
            });
        }
        self.active.push(name.to_string());
        let def = &self.defs[name];
        let (Some(template), loc) = (def.template.clone(), def.loc) else {
            self.active.pop();
            let help = def.help.clone().unwrap_or_default();
            return Err(Error::usage(
                format!("variable `{name}` is required and has no value ({help})"),
                Some(format!("pass `--set {name}=...`")),
            ));
        };
        let value = template.expand(Quoting::None, |v| self.lookup(v, loc));
        self.active.pop();
        let value = value?;
        self.resolved.insert(name.to_string(), value.clone());
        Ok(value)
    }

    fn lookup(&mut self, v: &VarRef, at: Option<Loc>) -> Result<String> {
        let fail = |sources: &Sources, msg: String, hint: String| -> Error {
            match at {
                Some(loc) => {
                    let start = sources.string_offset(loc, v.offset);
                    let end = sources.string_offset(loc, v.offset + v.len);
                    sources
                        .diag(
                            Loc {
                                file: loc.file,
                                start,
                                end,
                            },
                            msg,
                        )
                        .with_hint(hint)
                        .into()
                }
                None => Error::usage(msg, Some(hint)),
            }
        };
        if let Some(fact) = v.name.strip_prefix("host.") {
            if !FACT_KEYS.contains(&fact) {
                let hint = did_you_mean(fact, FACT_KEYS.iter().copied())
                    .map_or(format!("host facts: {}", FACT_KEYS.join(", ")), |b| {
                        format!("did you mean `host.{b}`?")
                    });
                return Err(fail(
                    self.sources,
                    format!("unknown host fact `{fact}`"),
                    hint,
                ));
            }
            return match self.opts.facts.get(fact).or_else(|| v.default.clone()) {
                Some(value) => Ok(value),
                None => Err(fail(
                    self.sources,
                    format!("host fact `{fact}` is not known on this machine"),
                    format!(
                        "give a fallback (`${{host.{fact}:-VALUE}}`), a value with `--set`, or pin it: KILN_FACT_{}=VALUE",
                        fact.replace('.', "_").to_uppercase()
                    ),
                )),
            };
        }
        if let Some(b) = self.builtins.get(v.name.as_str()) {
            return Ok(b.clone());
        }
        if let Some(rest) = v.name.strip_prefix("steps.") {
            if let Some(p) = rest
                .strip_suffix(".path")
                .and_then(|id| self.step_paths.get(id))
            {
                return Ok(p.clone());
            }
            return Err(fail(
                self.sources,
                format!("`{}` is not a step output", v.name),
                "`${steps.ID.path}` names the file of a fetch step or the directory of an extract step".into(),
            ));
        }
        if let Some(def) = self.defs.get(&v.name) {
            if def.template.is_none() {
                let help = def.help.clone().unwrap_or_default();
                return Err(fail(
                    self.sources,
                    format!("variable `{}` is required and has no value: {help}", v.name),
                    format!("pass `--set {}=...`", v.name),
                ));
            }
            return self.var(&v.name);
        }
        if let Some(d) = &v.default {
            return Ok(d.clone());
        }
        let names: Vec<&str> = self
            .defs
            .keys()
            .map(String::as_str)
            .chain(BUILTINS.iter().copied())
            .collect();
        let hint = match did_you_mean(&v.name, names.iter().copied()) {
            Some(best) => format!("did you mean `${{{best}}}`?"),
            None => "define it under [vars], or write `$$` for a literal `$`".into(),
        };
        Err(fail(
            self.sources,
            format!("unknown variable `{}`", v.name),
            hint,
        ))
    }

    fn expand(&mut self, file: usize, s: &Spanned<String>) -> Result<String> {
        self.expand_as(file, s, Quoting::None)
    }

    fn expand_as(&mut self, file: usize, s: &Spanned<String>, quoting: Quoting) -> Result<String> {
        let loc = self.sources.loc(file, s.span());
        let template = parse_template(self.sources, loc, s.get_ref())?;
        template.expand(quoting, |v| self.lookup(v, Some(loc)))
    }

    fn path(&mut self, file: usize, s: &Spanned<String>, base: &Path) -> Result<PathBuf> {
        Ok(base.join(self.expand(file, s)?))
    }

    fn diag(
        &self,
        file: usize,
        span: std::ops::Range<usize>,
        msg: impl Into<String>,
    ) -> Diagnostic {
        self.sources.diag(self.sources.loc(file, span), msg)
    }
}

fn output_path(
    r: &mut Resolver,
    file: usize,
    s: &wire::Step,
    work_dir: &Path,
) -> Result<Option<PathBuf>> {
    match s.kind.get_ref().as_str() {
        "fetch" => download_path(r, file, s),
        "extract" => match &s.dest {
            Some(d) => {
                let cwd = step_cwd(r, file, s, work_dir)?;
                Ok(Some(r.path(file, d, &cwd)?))
            }
            None => Ok(None),
        },
        _ => Ok(None),
    }
}

/// Where a downloaded file lands: `<cache>/downloads/<sha256>/<filename>`.
fn download_path(r: &mut Resolver, file: usize, s: &wire::Step) -> Result<Option<PathBuf>> {
    let (Some(url), Some(sha)) = (&s.url, &s.sha256) else {
        return Ok(None);
    };
    let sha = r.expand(file, sha)?;
    if sha.len() != 64 || !sha.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(r
            .diag(
                file,
                s.sha256.as_ref().expect("checked").span(),
                "`sha256` must be 64 hex digits",
            )
            .with_hint("compute it with `sha256sum FILE`")
            .into());
    }
    let filename = match &s.filename {
        Some(f) => r.expand(file, f)?,
        None => {
            let u = r.expand(file, url)?;
            u.rsplit('/')
                .next()
                .unwrap_or_default()
                .split(['?', '#'])
                .next()
                .unwrap_or_default()
                .to_string()
        }
    };
    if filename.is_empty() || filename == ".." || filename.contains('/') {
        let span = s.filename.as_ref().map_or(url.span(), |f| f.span());
        return Err(r
            .diag(
                file,
                span,
                format!("cannot use `{filename}` as a file name"),
            )
            .with_hint("set `filename = \"name.tar.gz\"` (no `/`)")
            .into());
    }
    let dir = r.opts.cache_dir.join("downloads").join(sha.to_lowercase());
    Ok(Some(dir.join(filename)))
}

fn step_cwd(r: &mut Resolver, file: usize, s: &wire::Step, work_dir: &Path) -> Result<PathBuf> {
    match &s.cwd {
        Some(c) => r.path(file, c, work_dir),
        None => Ok(work_dir.to_path_buf()),
    }
}

fn step(
    r: &mut Resolver,
    file: usize,
    s: &wire::Step,
    recipe_env: &BTreeMap<String, String>,
    work_dir: &Path,
    recipe_dir: &Path,
    ids: &BTreeMap<&str, Loc>,
) -> Result<Step> {
    let kind_name = s.kind.get_ref().as_str();
    let Some((_, extra_keys)) = wire::STEP_KINDS.iter().find(|(k, _)| *k == kind_name) else {
        let kinds: Vec<&str> = wire::STEP_KINDS.iter().map(|(k, _)| *k).collect();
        let hint = did_you_mean(kind_name, kinds.iter().copied())
            .map_or(format!("step kinds: {}", kinds.join(", ")), |b| {
                format!("did you mean `{b}`?")
            });
        return Err(r
            .diag(
                file,
                s.kind.span(),
                format!("unknown step kind `{kind_name}`"),
            )
            .with_hint(hint)
            .into());
    };
    for (key, span) in kind_specific_keys(s) {
        if !extra_keys.contains(&key) {
            let owner = wire::STEP_KINDS
                .iter()
                .find(|(_, ks)| ks.contains(&key))
                .map_or("another", |(k, _)| *k);
            return Err(r
                .diag(
                    file,
                    span,
                    format!("`{key}` does not apply to a `{kind_name}` step"),
                )
                .with_hint(format!(
                    "`{key}` belongs to `{owner}` steps; keys for `{kind_name}`: {}",
                    extra_keys.join(", ")
                ))
                .into());
        }
    }
    let missing = |r: &Resolver, key: &str, example: &str| -> Error {
        let _ = &r;
        let article = if kind_name.starts_with(['a', 'e', 'i', 'o', 'u']) {
            "an"
        } else {
            "a"
        };
        r.diag(
            file,
            s.kind.span(),
            format!("{article} `{kind_name}` step needs `{key}`"),
        )
        .with_hint(format!("add `{key} = {example}`"))
        .into()
    };
    let cwd = step_cwd(r, file, s, work_dir)?;
    let shell = s.shell.as_ref().is_some_and(|b| *b.get_ref());
    let mut needs: Vec<String> = Vec::new();
    for n in &s.needs {
        if !ids.contains_key(n.get_ref().as_str()) {
            let hint = did_you_mean(n.get_ref(), ids.keys().copied()).map_or_else(
                || {
                    format!(
                        "`needs` names other steps: {}",
                        ids.keys().copied().collect::<Vec<_>>().join(", ")
                    )
                },
                |b| format!("did you mean `{b}`?"),
            );
            return Err(r
                .diag(
                    file,
                    n.span(),
                    format!("unknown step `{}` in `needs`", n.get_ref()),
                )
                .with_hint(hint)
                .into());
        }
        if n.get_ref() == s.id.get_ref() {
            return Err(r
                .diag(file, n.span(), "a step cannot need itself")
                .with_hint("remove it from `needs`")
                .into());
        }
        needs.push(n.get_ref().clone());
    }

    let kind = match kind_name {
        "run" => {
            let cmd = s
                .cmd
                .as_ref()
                .ok_or_else(|| missing(r, "cmd", "[\"program\", \"arg\"]"))?;
            StepKind::Run {
                cmd: command(r, file, cmd, shell)?,
            }
        }
        "fetch" => {
            let (url, sha256, path) = download(r, file, s, &missing)?;
            StepKind::Fetch { url, sha256, path }
        }
        "python" => StepKind::Python(python_step(r, file, s, &cwd, &missing)?),
        "patch" => {
            let set = s
                .set
                .as_ref()
                .ok_or_else(|| missing(r, "set", "\"sglang-0.5.9-sm120\""))?;
            let name = r.expand(file, set)?;
            let text = if Path::new(&name).is_file() {
                std::fs::read_to_string(&name).ok()
            } else {
                crate::patch::shipped::get(&name).map(str::to_string)
            };
            let Some(text) = text else {
                let names = crate::patch::shipped::names();
                let hint = did_you_mean(&name, names.iter().copied()).map_or(
                    format!("shipped patch sets: {}; or give a path", names.join(", ")),
                    |b| format!("did you mean `{b}`?"),
                );
                return Err(r
                    .diag(file, set.span(), format!("no patch set `{name}`"))
                    .with_hint(hint)
                    .into());
            };
            let site_packages = match (&s.venv, &s.site_packages) {
                (Some(v), None) => SitePackages::Venv(r.path(file, v, &cwd)?),
                (None, Some(d)) => SitePackages::Dir(r.path(file, d, &cwd)?),
                (Some(v), Some(_)) => {
                    return Err(r
                        .diag(
                            file,
                            v.span(),
                            "give either `venv` or `site_packages`, not both",
                        )
                        .with_hint("`venv` finds site-packages through its python")
                        .into())
                }
                (None, None) => {
                    return Err(missing(
                        r,
                        "venv",
                        "\"${venv}\" (or `site_packages = \"...\"`)",
                    ))
                }
            };
            StepKind::Patch {
                set: name,
                set_sha256: crate::engine::hashing::sha256_bytes(text.as_bytes()),
                site_packages,
            }
        }
        "cuda" => {
            let (url, sha256, runfile) = download(r, file, s, &missing)?;
            let required =
                |r: &mut Resolver, v: &Option<Spanned<String>>, key: &str, ex: &str| match v {
                    Some(v) => r.expand(file, v),
                    None => Err(missing(r, key, ex)),
                };
            StepKind::Cuda(CudaStep {
                url,
                sha256,
                runfile,
                version: required(r, &s.version, "version", "\"13.0.1\"")?,
                install_path: PathBuf::from(required(
                    r,
                    &s.install_path,
                    "install_path",
                    "\"/usr/local/cuda-13.0\"",
                )?),
                link: match &s.link {
                    Some(l) => r.path(file, l, &cwd)?,
                    None => PathBuf::from("/usr/local/cuda"),
                },
                driver_floor: required(r, &s.driver_floor, "driver_floor", "\"580.82.07\"")?,
            })
        }
        _ => {
            let dest = s
                .dest
                .as_ref()
                .ok_or_else(|| missing(r, "dest", "\"dir\""))?;
            let archive = match (&s.from, &s.archive) {
                (Some(from), None) => {
                    let id = from.get_ref();
                    let Some(p) = r
                        .step_paths
                        .get(id)
                        .filter(|_| ids.contains_key(id.as_str()))
                    else {
                        let hint = did_you_mean(id, ids.keys().copied())
                            .map_or("`from` names a fetch step".to_string(), |b| {
                                format!("did you mean `{b}`?")
                            });
                        return Err(r
                            .diag(
                                file,
                                from.span(),
                                format!("`from` names no fetch step `{id}`"),
                            )
                            .with_hint(hint)
                            .into());
                    };
                    let p = PathBuf::from(p);
                    if !needs.contains(id) {
                        needs.push(id.clone());
                    }
                    p
                }
                (None, Some(a)) => r.path(file, a, &cwd)?,
                (Some(f), Some(_)) => {
                    return Err(r
                        .diag(file, f.span(), "give either `from` or `archive`, not both")
                        .with_hint("`from` names a fetch step; `archive` is a path")
                        .into())
                }
                (None, None) => {
                    return Err(missing(
                        r,
                        "from",
                        "\"<fetch step id>\" (or `archive = \"path\"`)",
                    ))
                }
            };
            StepKind::Extract {
                archive,
                dest: r.path(file, dest, &cwd)?,
                strip_components: s.strip_components.as_ref().map_or(0, |n| *n.get_ref()),
            }
        }
    };

    let mut env = recipe_env.clone();
    for (k, v) in &s.env {
        env.insert(k.get_ref().clone(), r.expand(file, v)?);
    }
    let mut inputs = Vec::new();
    for i in &s.inputs {
        inputs.push(r.path(file, i, recipe_dir)?.display().to_string());
    }
    let check = match &s.check {
        None => None,
        Some(c) => Some(match c.get_ref() {
            wire::Check::Paths(p) => Check::Paths(
                p.iter()
                    .map(|x| r.path(file, x, &cwd))
                    .collect::<Result<_>>()?,
            ),
            wire::Check::Command(cmd) => Check::Cmd(command(
                r,
                file,
                &Spanned::new(c.span(), cmd.clone()),
                shell,
            )?),
        }),
    };
    let when = match &s.when {
        None => None,
        Some(w) => Some(condition(r, file, w)?),
    };
    let timeout = match &s.timeout {
        None => None,
        Some(t) => Some(units::parse_duration(t.get_ref()).map_err(|m| {
            r.diag(file, t.span(), m)
                .with_hint("e.g. `timeout = \"30m\"`")
        })?),
    };
    let mem_per_job = match &s.mem_per_job {
        None => None,
        Some(m) => Some(units::parse_size(m.get_ref()).map_err(|e| {
            r.diag(file, m.span(), e)
                .with_hint("e.g. `mem_per_job = \"9GiB\"`")
        })?),
    };
    Ok(Step {
        id: s.id.get_ref().clone(),
        description: s.description.clone(),
        kind,
        needs,
        env,
        cwd,
        inputs,
        check,
        when,
        timeout,
        retries: s.retries.as_ref().map_or(0, |n| *n.get_ref()),
        mem_per_job,
    })
}

/// The url, sha256 and cache path of a step that downloads (fetch, cuda).
fn download(
    r: &mut Resolver,
    file: usize,
    s: &wire::Step,
    missing: &dyn Fn(&Resolver, &str, &str) -> Error,
) -> Result<(String, String, PathBuf)> {
    let url = s
        .url
        .as_ref()
        .ok_or_else(|| missing(r, "url", "\"https://...\""))?;
    s.sha256
        .as_ref()
        .ok_or_else(|| missing(r, "sha256", "\"<64 hex digits>\""))?;
    let url_text = r.expand(file, url)?;
    if !["http://", "https://", "file://"]
        .iter()
        .any(|p| url_text.starts_with(p))
    {
        return Err(r
            .diag(file, url.span(), format!("unsupported URL `{url_text}`"))
            .with_hint("use an http://, https:// or file:// URL")
            .into());
    }
    let path = download_path(r, file, s)?.expect("url and sha256 are present");
    let sha = path
        .parent()
        .and_then(|p| p.file_name())
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok((url_text, sha, path))
}

fn python_step(
    r: &mut Resolver,
    file: usize,
    s: &wire::Step,
    cwd: &Path,
    missing: &dyn Fn(&Resolver, &str, &str) -> Error,
) -> Result<PythonStep> {
    let venv = s
        .venv
        .as_ref()
        .ok_or_else(|| missing(r, "venv", "\"${prefix}/venv\""))?;
    let list =
        |r: &mut Resolver, v: &Option<Spanned<Vec<Spanned<String>>>>| -> Result<Vec<String>> {
            v.as_ref().map_or(Ok(Vec::new()), |l| {
                l.get_ref().iter().map(|x| r.expand(file, x)).collect()
            })
        };
    let install = list(r, &s.install)?;
    let build = list(r, &s.build)?;
    if let Some(b) = &s.build {
        for (item, spanned) in build.iter().zip(b.get_ref()) {
            if !install.contains(item) {
                return Err(r
                    .diag(file, spanned.span(), format!("`{item}` is in `build` but not in `install`"))
                    .with_hint("`build` names requirements from `install` that are compiled from source and cached")
                    .into());
            }
        }
    }
    Ok(PythonStep {
        venv: r.path(file, venv, cwd)?,
        python: match &s.python {
            Some(p) => r.expand(file, p)?,
            None => "python3".into(),
        },
        install,
        index_url: s
            .index_url
            .as_ref()
            .map(|u| r.expand(file, u))
            .transpose()?,
        extra_index_urls: list(r, &s.extra_index_urls)?,
        build,
        build_isolation: s.build_isolation.as_ref().is_none_or(|b| *b.get_ref()),
        system_site_packages: s
            .system_site_packages
            .as_ref()
            .is_some_and(|b| *b.get_ref()),
        verify: s
            .verify
            .as_ref()
            .map(|v| r.expand_as(file, v, Quoting::Python))
            .transpose()?,
        sass: match &s.sass {
            Some(x) => {
                let x = x.get_ref();
                Some((r.expand(file, &x.module)?, r.expand(file, &x.arch)?))
            }
            None => None,
        },
    })
}

fn command(r: &mut Resolver, file: usize, c: &Spanned<wire::Command>, shell: bool) -> Result<Cmd> {
    match (c.get_ref(), shell) {
        (wire::Command::Argv(argv), false) => {
            if argv.is_empty() {
                return Err(r.diag(file, c.span(), "empty command").with_hint("name a program: `[\"make\", \"-j4\"]`").into());
            }
            Ok(Cmd::Argv(argv.iter().map(|a| r.expand(file, a)).collect::<Result<_>>()?))
        }
        (wire::Command::Script(s), true) => Ok(Cmd::Shell(r.expand_as(file, &Spanned::new(c.span(), s.clone()), Quoting::Shell)?)),
        (wire::Command::Script(_), false) => Err(r
            .diag(file, c.span(), "a command string needs `shell = true`")
            .with_hint("write an argv list `[\"program\", \"arg\"]`, or add `shell = true` to run it with `sh -c`")
            .into()),
        (wire::Command::Argv(_), true) => Err(r
            .diag(file, c.span(), "with `shell = true` the command is one script string")
            .with_hint("write `cmd = \"make -j4 && make install\"`, or drop `shell = true`")
            .into()),
    }
}

fn condition(r: &mut Resolver, file: usize, w: &Spanned<String>) -> Result<When> {
    let loc = r.sources.loc(file, w.span());
    let at = |offset: usize, len: usize| Loc {
        file,
        start: r.sources.string_offset(loc, offset),
        end: r.sources.string_offset(loc, offset + len.max(1)),
    };
    let expr = when::parse(w.get_ref()).map_err(|e| {
        r.sources
            .diag(
                at(e.offset, 1),
                format!("invalid `when` condition: {}", e.message),
            )
            .with_hint("e.g. `when = \"gpu.cc >= 12.0 and os == 'linux'\"`")
    })?;
    for ident in expr.idents() {
        let ok = match ident.name.strip_prefix("var.") {
            Some(v) => r.defs.contains_key(v),
            None => FACT_KEYS.contains(&ident.name.as_str()),
        };
        if !ok {
            let mut names: Vec<String> = FACT_KEYS.iter().map(|s| s.to_string()).collect();
            names.extend(r.defs.keys().map(|k| format!("var.{k}")));
            let hint = did_you_mean(&ident.name, names.iter().map(String::as_str)).map_or(
                format!(
                    "conditions use host facts ({}) or `var.NAME`",
                    FACT_KEYS.join(", ")
                ),
                |b| format!("did you mean `{b}`?"),
            );
            return Err(r
                .sources
                .diag(
                    at(ident.offset, ident.name.len()),
                    format!("unknown fact `{}` in `when`", ident.name),
                )
                .with_hint(hint)
                .into());
        }
    }
    Ok(When {
        text: w.get_ref().clone(),
        expr,
    })
}

fn kind_specific_keys(s: &wire::Step) -> Vec<(&'static str, std::ops::Range<usize>)> {
    let mut v = Vec::new();
    if let Some(x) = &s.cmd {
        v.push(("cmd", x.span()))
    }
    if let Some(x) = &s.shell {
        v.push(("shell", x.span()))
    }
    if let Some(x) = &s.url {
        v.push(("url", x.span()))
    }
    if let Some(x) = &s.sha256 {
        v.push(("sha256", x.span()))
    }
    if let Some(x) = &s.filename {
        v.push(("filename", x.span()))
    }
    if let Some(x) = &s.from {
        v.push(("from", x.span()))
    }
    if let Some(x) = &s.archive {
        v.push(("archive", x.span()))
    }
    if let Some(x) = &s.dest {
        v.push(("dest", x.span()))
    }
    if let Some(x) = &s.strip_components {
        v.push(("strip_components", x.span()))
    }
    if let Some(x) = &s.venv {
        v.push(("venv", x.span()))
    }
    if let Some(x) = &s.python {
        v.push(("python", x.span()))
    }
    if let Some(x) = &s.install {
        v.push(("install", x.span()))
    }
    if let Some(x) = &s.index_url {
        v.push(("index_url", x.span()))
    }
    if let Some(x) = &s.extra_index_urls {
        v.push(("extra_index_urls", x.span()))
    }
    if let Some(x) = &s.build {
        v.push(("build", x.span()))
    }
    if let Some(x) = &s.build_isolation {
        v.push(("build_isolation", x.span()))
    }
    if let Some(x) = &s.system_site_packages {
        v.push(("system_site_packages", x.span()))
    }
    if let Some(x) = &s.verify {
        v.push(("verify", x.span()))
    }
    if let Some(x) = &s.sass {
        v.push(("sass", x.span()))
    }
    if let Some(x) = &s.version {
        v.push(("version", x.span()))
    }
    if let Some(x) = &s.set {
        v.push(("set", x.span()))
    }
    if let Some(x) = &s.site_packages {
        v.push(("site_packages", x.span()))
    }
    if let Some(x) = &s.install_path {
        v.push(("install_path", x.span()))
    }
    if let Some(x) = &s.link {
        v.push(("link", x.span()))
    }
    if let Some(x) = &s.driver_floor {
        v.push(("driver_floor", x.span()))
    }
    v
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
                .map_or(ws.id.span(), |n| n.span());
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

fn profile(
    r: &mut Resolver,
    all: &BTreeMap<String, (usize, &wire::Profile)>,
    name: &str,
    stack: &mut Vec<String>,
) -> Result<Profile> {
    let (file, p) = all[name];
    let mut out = match &p.extends {
        None => Profile::default(),
        Some(base) => {
            if !all.contains_key(base.get_ref()) {
                let hint = did_you_mean(base.get_ref(), all.keys().map(String::as_str))
                    .map_or("`extends` names another [profile.NAME]".into(), |b| {
                        format!("did you mean `{b}`?")
                    });
                return Err(r
                    .diag(
                        file,
                        base.span(),
                        format!("unknown profile `{}`", base.get_ref()),
                    )
                    .with_hint(hint)
                    .into());
            }
            if stack.iter().any(|s| s == base.get_ref()) || base.get_ref() == name {
                return Err(r
                    .diag(file, base.span(), "profile `extends` cycle")
                    .with_hint("a profile cannot extend itself")
                    .into());
            }
            stack.push(name.to_string());
            let b = profile(r, all, base.get_ref(), stack)?;
            stack.pop();
            b
        }
    };
    out.description = p.description.clone().or(out.description);
    if let Some(cmd) = &p.cmd {
        out.cmd = cmd
            .iter()
            .map(|a| r.expand(file, a))
            .collect::<Result<_>>()?;
    }
    for a in &p.args {
        out.args.push(r.expand(file, a)?);
    }
    for (k, v) in &p.env {
        out.env.insert(k.get_ref().clone(), r.expand(file, v)?);
    }
    for e in &p.expect {
        out.expect.push(e.get_ref().clone());
    }
    if let Some(u) = &p.url {
        out.url = Some(r.expand(file, u)?);
    }
    if let Some(port) = &p.port {
        let text = r.expand(file, port)?;
        out.port = Some(text.trim().parse::<u16>().map_err(|_| {
            r.diag(
                file,
                port.span(),
                format!("`port` must be a TCP port number, got `{text}`"),
            )
            .with_hint("write e.g. `port = \"30000\"` or `port = \"${port}\"`")
        })?);
    }
    if let Some(api) = &p.api {
        let text = r.expand(file, api)?;
        if !["sglang", "openai"].contains(&text.as_str()) {
            let hint = did_you_mean(&text, ["sglang", "openai"]).map_or(
                "`api` is `sglang` (/generate) or `openai` (/v1/completions)".into(),
                |b| format!("did you mean `{b}`?"),
            );
            return Err(r
                .diag(file, api.span(), format!("unknown api `{text}`"))
                .with_hint(hint)
                .into());
        }
        out.api = Some(text);
    }
    if let Some(ready) = &p.ready {
        let text = r.expand(file, ready)?;
        if !text.starts_with('/') {
            return Err(r
                .diag(
                    file,
                    ready.span(),
                    format!("`ready` must be a path on the server, got `{text}`"),
                )
                .with_hint("write e.g. `ready = \"/health_generate\"`")
                .into());
        }
        out.ready = Some(text);
    }
    if let Some(sig) = &p.signatures {
        out.signatures = Some(r.expand(file, sig)?);
    }
    if let Some(base) = &p.baseline {
        if !all.contains_key(base.get_ref()) {
            let hint = did_you_mean(base.get_ref(), all.keys().map(String::as_str))
                .map_or("`baseline` names another [profile.NAME]".into(), |b| {
                    format!("did you mean `{b}`?")
                });
            return Err(r
                .diag(
                    file,
                    base.span(),
                    format!("unknown profile `{}`", base.get_ref()),
                )
                .with_hint(hint)
                .into());
        }
        out.baseline = Some(base.get_ref().clone());
    }
    if let Some(t) = &p.timeout {
        let text = r.expand(file, t)?;
        out.timeout = Some(units::parse_duration(&text).map_err(|e| {
            r.diag(file, t.span(), format!("bad `timeout`: {e}"))
                .with_hint("write e.g. `timeout = \"30m\"`")
        })?);
    }
    out.dir = PathBuf::from(&r.builtins["recipe.dir"]);
    Ok(out)
}
