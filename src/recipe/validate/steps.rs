//! `[[step]]` tables → domain steps: per-kind keys, paths, commands, conditions, downloads.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toml::Spanned;

use super::super::interp::Quoting;
use super::super::{when, wire, Check, Cmd, PythonStep, Step, When};
use super::kinds::{self, missing, KindInput};
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

/// The directory an extract step fills.
pub(super) fn extract_path(
    r: &mut Resolver,
    file: usize,
    s: &wire::Step,
    work_dir: &Path,
) -> Result<Option<PathBuf>> {
    match &s.dest {
        Some(d) => {
            let cwd = step_cwd(r, file, s, work_dir)?;
            Ok(Some(r.path(file, d, &cwd)?))
        }
        None => Ok(None),
    }
}

/// Where a downloaded file lands: `<cache>/downloads/<sha256>/<filename>`.
pub(super) fn download_path(
    r: &mut Resolver,
    file: usize,
    s: &wire::Step,
) -> Result<Option<PathBuf>> {
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
    let filename = if let Some(f) = &s.filename {
        r.expand(file, f)?
    } else {
        let u = r.expand(file, url)?;
        u.rsplit('/')
            .next()
            .unwrap_or_default()
            .split(['?', '#'])
            .next()
            .unwrap_or_default()
            .to_string()
    };
    if filename.is_empty() || filename == ".." || filename.contains('/') {
        let span = s.filename.as_ref().map_or(url.span(), toml::Spanned::span);
        return Err(r
            .diag(
                file,
                span,
                format!("cannot use `{filename}` as a file name"),
            )
            .with_hint("set `filename = \"name.tar.gz\"` (no `/`)")
            .into());
    }
    let dir = r.opts.paths.download(&sha);
    Ok(Some(dir.join(filename)))
}

pub(super) fn step_cwd(
    r: &mut Resolver,
    file: usize,
    s: &wire::Step,
    work_dir: &Path,
) -> Result<PathBuf> {
    match &s.cwd {
        Some(c) => r.path(file, c, work_dir),
        None => Ok(work_dir.to_path_buf()),
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

/// The url, sha256 and cache path of a step that downloads (fetch, cuda).
pub(super) fn download(
    r: &mut Resolver,
    file: usize,
    s: &wire::Step,
) -> Result<(String, String, PathBuf)> {
    let url = s
        .url
        .as_ref()
        .ok_or_else(|| missing(r, file, s, "url", "\"https://...\""))?;
    s.sha256
        .as_ref()
        .ok_or_else(|| missing(r, file, s, "sha256", "\"<64 hex digits>\""))?;
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

pub(super) fn python_step(
    r: &mut Resolver,
    file: usize,
    s: &wire::Step,
    cwd: &Path,
) -> Result<PythonStep> {
    let venv = s
        .venv
        .as_ref()
        .ok_or_else(|| missing(r, file, s, "venv", "\"${prefix}/venv\""))?;
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
            Some(x) => Some(sass_target(r, file, x, "module")?),
            None => None,
        },
    })
}

/// `sass = { KEY = "...", arch = "sm_120" }` for a kind that takes `want` (`module` for python
/// steps, `file` for run steps): (that value, the arch).
pub(super) fn sass_target(
    r: &mut Resolver,
    file: usize,
    x: &Spanned<wire::Sass>,
    want: &str,
) -> Result<(String, String)> {
    let v = x.get_ref();
    let (given, other) = match want {
        "module" => (&v.module, &v.file),
        _ => (&v.file, &v.module),
    };
    let Some(given) = given else {
        let (ex, kind) = match want {
            "module" => ("module = \"flash_attn_2_cuda\"", "python"),
            _ => ("file = \"kernel.cubin\"", "run"),
        };
        let hint = match other {
            Some(_) => format!("a `{kind}` step's sass check takes `{want}`: `sass = {{ {ex}, arch = \"sm_120\" }}`"),
            None => format!("add `{ex}`"),
        };
        return Err(r
            .diag(file, x.span(), format!("`sass` needs `{want}`"))
            .with_hint(hint)
            .into());
    };
    if let Some(o) = other {
        return Err(r
            .diag(
                file,
                o.span(),
                format!("give `{want}` in this step's `sass`, not both"),
            )
            .with_hint("python steps check an extension `module`; run steps check a `file`")
            .into());
    }
    Ok((r.expand(file, given)?, r.expand(file, &v.arch)?))
}

pub(super) fn command(
    r: &mut Resolver,
    file: usize,
    c: &Spanned<wire::Command>,
    shell: bool,
) -> Result<Cmd> {
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
