//! `[[step]]` tables → domain steps: per-kind keys, paths, commands, conditions, downloads.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toml::Spanned;

use super::super::{when, wire, Check, Step, When};
use super::fields::{command, step_cwd};
use super::kinds::{self, KindInput};
use super::vars::Resolver;
use crate::diagnostic::did_you_mean;
use crate::error::Result;
use crate::host::FACT_KEYS;
use crate::source::Loc;
use crate::units;

/// The `steps.ID.path` a step makes (the download of a fetch, the directory of an extract).
pub(super) fn output_path(
    r: &mut Resolver,
    file: usize,
    s: &wire::Step,
    work_dir: &Path,
) -> Result<Option<PathBuf>> {
    match kinds::kind(s.kind.get_ref()).and_then(|k| k.output) {
        Some(output) => output(r, file, s, work_dir),
        None => Ok(None),
    }
}

pub(super) fn step(
    r: &mut Resolver,
    file: usize,
    s: &wire::Step,
    recipe_env: &BTreeMap<String, String>,
    work_dir: &Path,
    recipe_dir: &Path,
    ids: &BTreeMap<&str, Loc>,
) -> Result<Step> {
    let kind_name = s.kind.get_ref().as_str();
    let Some(spec) = kinds::kind(kind_name) else {
        let names: Vec<&str> = kinds::KINDS.iter().map(|k| k.name).collect();
        let hint = did_you_mean(kind_name, names.iter().copied())
            .map_or(format!("step kinds: {}", names.join(", ")), |b| {
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
        if !spec.keys.contains(&key) {
            let owner = kinds::KINDS
                .iter()
                .find(|k| k.keys.contains(&key))
                .map_or("another", |k| k.name);
            return Err(r
                .diag(
                    file,
                    span,
                    format!("`{key}` does not apply to a `{kind_name}` step"),
                )
                .with_hint(format!(
                    "`{key}` belongs to `{owner}` steps; keys for `{kind_name}`: {}",
                    spec.keys.join(", ")
                ))
                .into());
        }
    }
    let cwd = step_cwd(r, file, s, work_dir)?;
    let shell = s.shell.as_ref().is_some_and(|b| *b.get_ref());
    let mut needs = needs_of(r, file, s, ids)?;
    let kind = (spec.validate)(&mut KindInput {
        r,
        file,
        s,
        cwd: &cwd,
        ids,
        needs: &mut needs,
    })?;

    let mut env = recipe_env.clone();
    for (k, v) in &s.env {
        env.insert(r.env_name(file, k)?, r.expand(file, v)?);
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
    let mut outputs = Vec::new();
    for o in &s.outputs {
        outputs.push(r.path(file, o, &cwd)?);
    }
    if outputs.is_empty() {
        if let Some(Check::Paths(p)) = &check {
            outputs.clone_from(p);
        }
    }
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
        requires: super::requires::entries(r.sources, file, &s.requires)?,
        outputs,
        cache: s.cache.as_ref().is_none_or(|c| *c.get_ref()),
    })
}

/// The steps `s` names in `needs`, each checked to exist and not to be `s` itself.
fn needs_of(
    r: &Resolver,
    file: usize,
    s: &wire::Step,
    ids: &BTreeMap<&str, Loc>,
) -> Result<Vec<String>> {
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
    Ok(needs)
}

pub(super) fn condition(r: &mut Resolver, file: usize, w: &Spanned<String>) -> Result<When> {
    let loc = r.sources.loc(file, w.span());
    let at = |offset: usize, len: usize| r.sources.within(loc, offset, len.max(1));
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
            let mut names: Vec<String> = FACT_KEYS
                .iter()
                .map(std::string::ToString::to_string)
                .collect();
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

/// Where a key some kind adds sits in a step, if it is set.
type KeySpan = fn(&wire::Step) -> Option<std::ops::Range<usize>>;

/// `(name, where it is)` of each wire field a step kind adds.
macro_rules! kind_keys {
    ($($field:ident),* $(,)?) => {
        &[$((stringify!($field), |s: &wire::Step| s.$field.as_ref().map(|x| x.span()))),*]
    };
}

/// Every key a kind adds: the union of [`super::kinds::KINDS`]' `keys`, which a test checks.
const KIND_KEYS: &[(&str, KeySpan)] = kind_keys!(
    cmd,
    shell,
    url,
    sha256,
    filename,
    from,
    archive,
    dest,
    strip_components,
    max_size,
    keep_setid,
    venv,
    python,
    install,
    index_url,
    extra_index_urls,
    build,
    build_isolation,
    system_site_packages,
    verify,
    sass,
    version,
    set,
    site_packages,
    install_path,
    link,
    driver_floor,
    source,
    wheels,
    tools,
);

pub(super) fn kind_specific_keys(s: &wire::Step) -> Vec<(&'static str, std::ops::Range<usize>)> {
    KIND_KEYS
        .iter()
        .filter_map(|(name, span)| span(s).map(|r| (*name, r)))
        .collect()
}

#[cfg(test)]
mod kind_keys_tests {
    use std::collections::BTreeSet;

    #[test]
    fn the_kind_specific_keys_are_exactly_the_keys_the_kinds_table_adds() {
        let here: BTreeSet<&str> = super::KIND_KEYS.iter().map(|(k, _)| *k).collect();
        let kinds: BTreeSet<&str> = super::super::kinds::KINDS
            .iter()
            .flat_map(|k| k.keys.iter().copied())
            .collect();
        assert_eq!(here, kinds);
        assert_eq!(here.len(), super::KIND_KEYS.len(), "a key listed twice");
    }
}
