//! Variables: `[vars]` definitions, `--set`, required variables, and resolving `${…}` with
//! located errors.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toml::Spanned;

use super::super::interp::{Quoting, Template, VarRef};
use super::super::loaded::LoadOptions;
use crate::diagnostic::{did_you_mean, Diagnostic};
use crate::error::{Error, Result};
use crate::host::FACT_KEYS;
use crate::source::{Loc, Sources};

pub(super) const BUILTINS: &[&str] = &[
    "kiln.state_dir",
    "kiln.cache_dir",
    "kiln.work_dir",
    "recipe.dir",
    "recipe.name",
];

/// A variable's definition: its template and where it was written (None: `--set`).
/// `template: None` is a required variable without a value; `help` says what to give it.
pub(super) struct VarDef {
    pub(super) template: Option<Template>,
    pub(super) loc: Option<Loc>,
    pub(super) help: Option<String>,
}

pub(super) struct Resolver<'a> {
    pub(super) sources: &'a Sources,
    pub(super) opts: &'a LoadOptions<'a>,
    pub(super) defs: BTreeMap<String, VarDef>,
    pub(super) builtins: BTreeMap<&'static str, String>,
    pub(super) resolved: BTreeMap<String, String>,
    pub(super) active: Vec<String>,
    /// `steps.ID.path` values.
    pub(super) step_paths: BTreeMap<String, String>,
}

/// A `[vars]` entry: a string template, a number or boolean, or `{ help = "...", default = "..." }`
/// (no `default`: required).
pub(super) fn var_def(
    sources: &Sources,
    loc: Loc,
    key: &str,
    value: &toml::Value,
) -> Result<VarDef> {
    let literal = |v: &toml::Value| Template {
        parts: vec![super::super::interp::Part::Lit(v.to_string())],
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

pub(super) fn parse_template(sources: &Sources, loc: Loc, text: &str) -> Result<Template> {
    Template::parse(text).map_err(|e| {
        sources
            .diag(sources.within(loc, e.offset, e.len), e.message)
            .with_hint(e.hint)
            .into()
    })
}

/// A value that expands past [`MAX_VALUE_BYTES`](super::super::interp::MAX_VALUE_BYTES).
fn too_long(sources: &Sources, at: Option<Loc>, what: &str) -> Error {
    let msg = format!(
        "{what} expands to more than {} MiB",
        super::super::interp::MAX_VALUE_BYTES >> 20
    );
    let hint = "variables that repeat other variables grow exponentially; use a literal value";
    match at {
        Some(loc) => sources.diag(loc, msg).with_hint(hint).into(),
        None => Error::usage(msg, Some(hint.into())),
    }
}

impl Resolver<'_> {
    pub(super) fn var(&mut self, name: &str) -> Result<String> {
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
        if self.active.len() >= super::super::interp::MAX_DEPTH {
            let msg = format!(
                "variable `{name}` is nested more than {} variables deep",
                super::super::interp::MAX_DEPTH
            );
            let hint =
                "a chain of variables that long is a mistake or an attack; use literal values";
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
        let sources = self.sources;
        let value = template.expand(
            Quoting::None,
            |v| self.lookup(v, loc),
            || too_long(sources, loc, &format!("variable `{name}`")),
        );
        self.active.pop();
        let value = value?;
        self.resolved.insert(name.to_string(), value.clone());
        Ok(value)
    }

    pub(super) fn lookup(&mut self, v: &VarRef, at: Option<Loc>) -> Result<String> {
        let fail = |sources: &Sources, msg: String, hint: String| -> Error {
            match at {
                Some(loc) => sources
                    .diag(sources.within(loc, v.offset, v.len), msg)
                    .with_hint(hint)
                    .into(),
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

    pub(super) fn expand(&mut self, file: usize, s: &Spanned<String>) -> Result<String> {
        self.expand_as(file, s, Quoting::None)
    }

    pub(super) fn expand_as(
        &mut self,
        file: usize,
        s: &Spanned<String>,
        quoting: Quoting,
    ) -> Result<String> {
        let loc = self.sources.loc(file, s.span());
        let template = parse_template(self.sources, loc, s.get_ref())?;
        let sources = self.sources;
        template.expand(
            quoting,
            |v| self.lookup(v, Some(loc)),
            || too_long(sources, Some(loc), "this value"),
        )
    }

    pub(super) fn path(
        &mut self,
        file: usize,
        s: &Spanned<String>,
        base: &Path,
    ) -> Result<PathBuf> {
        Ok(base.join(self.expand(file, s)?))
    }

    /// An `env` key, refused where no process could receive it: empty, or holding `=` (which
    /// would split into another name and value) or a NUL byte.
    pub(super) fn env_name(&self, file: usize, k: &Spanned<String>) -> Result<String> {
        let name = k.get_ref();
        let why = if name.is_empty() {
            "is empty"
        } else if name.contains('=') {
            "contains `=` (the environment would read it as another name and value)"
        } else if name.contains('\0') {
            "contains a NUL byte"
        } else {
            return Ok(name.clone());
        };
        Err(self
            .diag(
                file,
                k.span(),
                format!("environment variable name `{}` {why}", name.escape_debug()),
            )
            .with_hint("name it with letters, digits and `_`, e.g. `CUDA_HOME`; the value goes after `=` in TOML: `env = { NAME = \"value\" }`")
            .into())
    }

    pub(super) fn diag(
        &self,
        file: usize,
        span: std::ops::Range<usize>,
        msg: impl Into<String>,
    ) -> Diagnostic {
        self.sources.diag(self.sources.loc(file, span), msg)
    }
}
