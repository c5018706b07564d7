//! Step keys that several kinds read the same way: commands, downloads and their cache path,
//! python environments, sass targets, extract directories, and the error for a missing key.
//! A leaf of `validate`: the step builder, the kinds table and the cuda source all use it, and it
//! uses none of them.

use std::path::{Path, PathBuf};

use toml::Spanned;

use super::super::interp::Quoting;
use super::super::{wire, Cmd, PythonStep};
use super::vars::Resolver;
use crate::error::{Error, Result};

/// The error for a key a `s.kind` step must have.
pub(super) fn missing(r: &Resolver, file: usize, s: &wire::Step, key: &str, ex: &str) -> Error {
    let kind = s.kind.get_ref();
    let article = if kind.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    r.diag(
        file,
        s.kind.span(),
        format!("{article} `{kind}` step needs `{key}`"),
    )
    .with_hint(format!("add `{key} = {ex}`"))
    .into()
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
