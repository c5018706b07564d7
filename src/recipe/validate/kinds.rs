//! The step kinds, declared once: each kind's name, the keys only it takes, and its validator
//! (wire step → domain `StepKind`). The runner of each kind is `crate::steps`' match on
//! `StepKind`, which the compiler keeps exhaustive. Adding a kind: a row here and its runner.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toml::Spanned;

use super::fields::{
    command, download, download_path, extract_path, missing, python_step, sass_target,
};
use super::vars::Resolver;
use crate::diagnostic::did_you_mean;
use crate::error::{Error, Result};
use crate::recipe::{wire, CudaSource, CudaStep, SitePackages, StepKind};
use crate::source::Loc;

/// One step kind.
pub(super) struct Kind {
    pub name: &'static str,
    /// Keys this kind adds to the ones every step takes.
    pub keys: &'static [&'static str],
    pub validate: fn(&mut KindInput) -> Result<StepKind>,
    /// The path other steps read as `${steps.ID.path}`, for kinds that make one.
    pub output: Option<OutputPath>,
}

type OutputPath = fn(&mut Resolver, usize, &wire::Step, &Path) -> Result<Option<PathBuf>>;

/// What a kind's validator reads: the step, where it is, and the steps around it.
pub(super) struct KindInput<'a, 'r> {
    pub r: &'a mut Resolver<'r>,
    pub file: usize,
    pub s: &'a wire::Step,
    pub cwd: &'a Path,
    pub ids: &'a BTreeMap<&'a str, Loc>,
    /// The step's `needs`; a kind may add to it (`extract` needs the fetch it reads).
    pub needs: &'a mut Vec<String>,
}

impl KindInput<'_, '_> {
    /// "a `cuda` step needs `version`", at the step's `kind`, with an example.
    pub(super) fn missing(&self, key: &str, example: &str) -> Error {
        missing(self.r, self.file, self.s, key, example)
    }
}

pub(super) const KINDS: &[Kind] = &[
    Kind {
        name: "run",
        output: None,
        keys: &["cmd", "shell", "sass"],
        validate: run,
    },
    Kind {
        name: "fetch",
        output: Some(|r, file, s, _| download_path(r, file, s)),
        keys: &["url", "sha256", "filename"],
        validate: fetch,
    },
    Kind {
        name: "extract",
        output: Some(extract_path),
        keys: &[
            "from",
            "archive",
            "dest",
            "strip_components",
            "max_size",
            "keep_setid",
        ],
        validate: extract,
    },
    Kind {
        name: "python",
        output: None,
        keys: &[
            "venv",
            "python",
            "install",
            "index_url",
            "extra_index_urls",
            "build",
            "build_isolation",
            "system_site_packages",
            "verify",
            "sass",
        ],
        validate: python,
    },
    Kind {
        name: "patch",
        output: None,
        keys: &["set", "venv", "site_packages"],
        validate: patch,
    },
    Kind {
        name: "cuda",
        output: None,
        keys: &[
            "url",
            "sha256",
            "filename",
            "version",
            "install_path",
            "link",
            "driver_floor",
            "source",
            "wheels",
            "tools",
        ],
        validate: cuda,
    },
];

/// The kind named `name`.
pub(super) fn kind(name: &str) -> Option<&'static Kind> {
    KINDS.iter().find(|k| k.name == name)
}

/// The name of the kind named `name`, as a `'static` string (`None`: no such kind).
pub(in crate::recipe) fn static_name(name: &str) -> Option<&'static str> {
    kind(name).map(|k| k.name)
}

fn run(k: &mut KindInput) -> Result<StepKind> {
    let cmd =
        k.s.cmd
            .as_ref()
            .ok_or_else(|| k.missing("cmd", "[\"program\", \"arg\"]"))?;
    let shell = k.s.shell.as_ref().is_some_and(|b| *b.get_ref());
    let sass = match &k.s.sass {
        Some(x) => {
            let (f, arch) = sass_target(k.r, k.file, x, "file")?;
            Some((k.cwd.join(f), arch))
        }
        None => None,
    };
    Ok(StepKind::Run {
        cmd: command(k.r, k.file, cmd, shell)?,
        sass,
    })
}

fn fetch(k: &mut KindInput) -> Result<StepKind> {
    let (url, sha256, path) = download(k.r, k.file, k.s)?;
    Ok(StepKind::Fetch { url, sha256, path })
}

fn python(k: &mut KindInput) -> Result<StepKind> {
    Ok(StepKind::Python(python_step(k.r, k.file, k.s, k.cwd)?))
}

fn patch(k: &mut KindInput) -> Result<StepKind> {
    let file = k.file;
    let set =
        k.s.set
            .as_ref()
            .ok_or_else(|| k.missing("set", "\"sglang-0.5.9-sm120\""))?;
    let name = k.r.expand(file, set)?;
    let text = if Path::new(&name).is_file() {
        std::fs::read_to_string(&name).ok()
    } else {
        crate::embedded::named(crate::embedded::PATCH_SETS, &name).map(str::to_string)
    };
    let Some(text) = text else {
        let names = crate::embedded::names_in(crate::embedded::PATCH_SETS);
        let hint = did_you_mean(&name, names.iter().copied()).map_or(
            format!("shipped patch sets: {}; or give a path", names.join(", ")),
            |b| format!("did you mean `{b}`?"),
        );
        return Err(k
            .r
            .diag(file, set.span(), format!("no patch set `{name}`"))
            .with_hint(hint)
            .into());
    };
    let site_packages = match (&k.s.venv, &k.s.site_packages) {
        (Some(v), None) => SitePackages::Venv(k.r.path(file, v, k.cwd)?),
        (None, Some(d)) => SitePackages::Dir(k.r.path(file, d, k.cwd)?),
        (Some(v), Some(_)) => {
            return Err(k
                .r
                .diag(
                    file,
                    v.span(),
                    "give either `venv` or `site_packages`, not both",
                )
                .with_hint("`venv` finds site-packages through its python")
                .into())
        }
        (None, None) => return Err(k.missing("venv", "\"${venv}\" (or `site_packages = \"...\"`)")),
    };
    Ok(StepKind::Patch {
        set: name,
        set_sha256: crate::hash::sha256_bytes(text.as_bytes()),
        site_packages,
    })
}

fn cuda(k: &mut KindInput) -> Result<StepKind> {
    let s = k.s;
    let source = match &s.source {
        Some(src) => Some((k.r.expand(k.file, src)?, src.span())),
        None => None,
    };
    let source = match source.as_ref().map(|(v, span)| (v.as_str(), span)) {
        None | Some(("runfile", _)) => {
            let (url, sha256, runfile) = download(k.r, k.file, s)?;
            CudaSource::Runfile {
                url,
                sha256,
                runfile,
            }
        }
        Some(("pypi", _)) => CudaSource::Pypi {
            wheels: super::cuda::wheels(k.r, k.file, s)?,
        },
        Some((other, span)) => {
            return Err(k
                .r
                .diag(k.file, span.clone(), format!("unknown CUDA source `{other}`"))
                .with_hint("`source = \"runfile\"` (NVIDIA's installer, the default) or `source = \"pypi\"` (the nvidia-* wheels)")
                .into())
        }
    };
    let pypi = matches!(source, CudaSource::Pypi { .. });
    let required = |k: &mut KindInput, v: &Option<Spanned<String>>, key: &str, ex: &str| match v {
        Some(v) => k.r.expand(k.file, v),
        None => Err(k.missing(key, ex)),
    };
    let driver_floor = match (&s.driver_floor, pypi) {
        (None, true) => None,
        _ => Some(required(
            k,
            &s.driver_floor,
            "driver_floor",
            "\"580.82.07\"",
        )?),
    };
    let version = required(k, &s.version, "version", "\"13.0.1\"")?;
    let tools = super::cuda::tools(k.r, k.file, s, &source, &version)?;
    Ok(StepKind::Cuda(CudaStep {
        source,
        version,
        install_path: PathBuf::from(required(
            k,
            &s.install_path,
            "install_path",
            "\"/usr/local/cuda-13.0\"",
        )?),
        link: match &s.link {
            Some(l) => k.r.path(k.file, l, k.cwd)?,
            None => PathBuf::from("/usr/local/cuda"),
        },
        driver_floor,
        tools,
    }))
}

fn extract(k: &mut KindInput) -> Result<StepKind> {
    let (s, file) = (k.s, k.file);
    let dest = s
        .dest
        .as_ref()
        .ok_or_else(|| k.missing("dest", "\"dir\""))?;
    let archive = match (&s.from, &s.archive) {
        (Some(from), None) => extract_from(k, from)?,
        (None, Some(a)) => k.r.path(file, a, k.cwd)?,
        (Some(f), Some(_)) => {
            return Err(k
                .r
                .diag(file, f.span(), "give either `from` or `archive`, not both")
                .with_hint("`from` names a fetch step; `archive` is a path")
                .into())
        }
        (None, None) => {
            return Err(k.missing("from", "\"<fetch step id>\" (or `archive = \"path\"`)"))
        }
    };
    Ok(StepKind::Extract {
        archive,
        dest: k.r.path(file, dest, k.cwd)?,
        strip_components: s.strip_components.as_ref().map_or(0, |n| *n.get_ref()),
        max_size: match &s.max_size {
            None => None,
            Some(m) => Some(crate::units::parse_size(m.get_ref()).map_err(|e| {
                k.r.diag(file, m.span(), e)
                    .with_hint("e.g. `max_size = \"200GiB\"` (default 64GiB)")
            })?),
        },
        keep_setid: s.keep_setid.as_ref().is_some_and(|b| *b.get_ref()),
    })
}

/// The archive a fetch step named by `from` downloads (and that step becomes a dependency).
fn extract_from(k: &mut KindInput, from: &Spanned<String>) -> Result<PathBuf> {
    let id = from.get_ref();
    let Some(p) =
        k.r.step_paths
            .get(id)
            .filter(|_| k.ids.contains_key(id.as_str()))
    else {
        let hint = did_you_mean(id, k.ids.keys().copied())
            .map_or("`from` names a fetch step".to_string(), |b| {
                format!("did you mean `{b}`?")
            });
        return Err(k
            .r
            .diag(
                k.file,
                from.span(),
                format!("`from` names no fetch step `{id}`"),
            )
            .with_hint(hint)
            .into());
    };
    let p = PathBuf::from(p);
    if !k.needs.contains(id) {
        k.needs.push(id.clone());
    }
    Ok(p)
}
