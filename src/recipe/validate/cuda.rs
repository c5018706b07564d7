//! The `cuda` step's PyPI source: the pinned wheels (`URL#sha256=HEX`) and what the toolkit they
//! make can do, so that a recipe asking for a program the wheels do not bring (nvcc from the 12.x
//! wheels) is refused where it asks, before anything is downloaded.

use std::ops::Range;

use toml::Spanned;

use super::vars::Resolver;
use crate::error::Result;
use crate::recipe::{wire, CudaSource, Wheel};

/// The wheels of a `source = "pypi"` step: each entry (after `${…}`) holds one or more
/// `URL#sha256=HEX`, separated by whitespace.
pub(super) fn wheels(r: &mut Resolver, file: usize, s: &wire::Step) -> Result<Vec<Wheel>> {
    let Some(list) = &s.wheels else {
        return Err(super::fields::missing(
            r,
            file,
            s,
            "wheels",
            "[\"${cuda_wheels}\"] (from toolchains/cuda-13.0.1.toml)",
        ));
    };
    let mut out = Vec::new();
    for entry in list.get_ref() {
        let text = r.expand(file, entry)?;
        for item in text.split_whitespace() {
            out.push(wheel(r, file, entry.span(), item)?);
        }
    }
    if out.is_empty() {
        return Err(r
            .diag(file, list.span(), "`wheels` is empty")
            .with_hint("list the pinned wheels, `URL#sha256=HEX` each")
            .into());
    }
    Ok(out)
}

fn wheel(r: &Resolver, file: usize, span: Range<usize>, item: &str) -> Result<Wheel> {
    let bad = |msg: String| {
        r.diag(file, span.clone(), msg)
            .with_hint("each wheel is `https://…/name-version-…whl#sha256=<64 hex digits>`")
    };
    let Some((url, sha)) = item.split_once("#sha256=") else {
        return Err(bad(format!("wheel `{item}` has no `#sha256=`")).into());
    };
    if sha.len() != 64 || !sha.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(bad(format!("the sha256 of `{url}` is not 64 hex digits")).into());
    }
    if !url.starts_with("https://") && !url.starts_with("file://") {
        return Err(bad(format!("unsupported URL `{url}`")).into());
    }
    let name = url.rsplit('/').next().unwrap_or_default();
    if !name.ends_with(".whl") || name.contains("..") {
        return Err(bad(format!("`{name}` is not a wheel file name")).into());
    }
    let sha = sha.to_ascii_lowercase();
    Ok(Wheel {
        url: url.to_string(),
        path: r.opts.paths.download(&sha).join(name),
        sha256: sha,
    })
}

/// What one known wheel brings to the prefix: (programs in `bin/`, what else, in words).
fn brings(dist: &str, version: &str) -> Option<(&'static [&'static str], &'static str)> {
    let major: u32 = version.split('.').next()?.parse().ok()?;
    Some(match dist {
        // 12.x: ptxas and nvvm's libraries only; the nvcc driver starts with the 13.x wheels.
        "nvidia_cuda_nvcc_cu12" => (&["ptxas"], "nvvm libraries"),
        "nvidia_cuda_nvcc" if major >= 13 => (
            &["nvcc", "ptxas", "nvlink", "fatbinary", "cudafe++", "bin2c"],
            "the compiler driver",
        ),
        "nvidia_cuda_cuobjdump" | "nvidia_cuda_cuobjdump_cu12" => (&["cuobjdump"], ""),
        "nvidia_nvvm" => (&[], "nvvm (cicc, libdevice)"),
        "nvidia_cuda_runtime" | "nvidia_cuda_runtime_cu12" => (&[], "the runtime (cudart)"),
        "nvidia_cuda_crt" => (&[], "crt headers"),
        "nvidia_cuda_cccl" | "nvidia_cuda_cccl_cu12" => (&[], "CCCL headers"),
        _ => return None,
    })
}

/// (distribution, version) from a wheel file name: `nvidia_cuda_nvcc-13.0.88-py3-…whl`.
fn dist_of(wheel: &Wheel) -> (String, String) {
    let name = wheel.path.file_name().unwrap_or_default().to_string_lossy();
    let mut parts = name.split('-');
    let dist = parts.next().unwrap_or_default().to_ascii_lowercase();
    (dist, parts.next().unwrap_or_default().to_string())
}

/// What a PyPI toolkit of these wheels offers: its programs (`None`: a wheel kiln does not know,
/// so only the installed prefix can tell) and a description.
fn offers(wheels: &[Wheel]) -> (Option<Vec<&'static str>>, String) {
    let mut programs = Vec::new();
    let mut words = Vec::new();
    let mut known = true;
    for w in wheels {
        let (dist, version) = dist_of(w);
        match brings(&dist, &version) {
            Some((p, what)) => {
                programs.extend_from_slice(p);
                if !what.is_empty() {
                    words.push(what);
                }
            }
            None => known = false,
        }
    }
    let mut all: Vec<String> = programs.iter().map(|p| (*p).to_string()).collect();
    all.extend(words.iter().map(|w| (*w).to_string()));
    (known.then_some(programs), all.join(", "))
}

/// The step's `tools` (default `nvcc`), refused here when the wheels are known not to bring one.
pub(super) fn tools(
    r: &mut Resolver,
    file: usize,
    s: &wire::Step,
    source: &CudaSource,
    version: &str,
) -> Result<Vec<String>> {
    let mut tools: Vec<(String, Range<usize>)> = Vec::new();
    if let Some(list) = &s.tools {
        for t in list.get_ref() {
            tools.push((r.expand(file, t)?, t.span()));
        }
    } else {
        let span = s
            .wheels
            .as_ref()
            .map_or_else(|| s.kind.span(), Spanned::span);
        tools.push(("nvcc".to_string(), span));
    }
    if let CudaSource::Pypi { wheels } = source {
        if let (Some(programs), what) = offers(wheels) {
            for (tool, span) in &tools {
                if programs.contains(&tool.as_str()) {
                    continue;
                }
                let asked = if s.tools.is_some() {
                    "`tools` asks for"
                } else {
                    "a `cuda` step needs (by default)"
                };
                let assemble = if programs.contains(&"ptxas") {
                    "; to assemble PTX only, say `tools = [\"ptxas\"]`"
                } else {
                    ""
                };
                return Err(r
                    .diag(
                        file,
                        span.clone(),
                        format!(
                            "{asked} `{tool}`, but CUDA {version} from these wheels has none: they bring {what}"
                        ),
                    )
                    .with_hint(format!(
                        "a step that compiles .cu files needs nvcc: take the 13.x wheels (toolchains/cuda-13.0.1.toml's `cuda_wheels`) or `source = \"runfile\"`{assemble}"
                    ))
                    .into());
            }
        }
    }
    Ok(tools.into_iter().map(|(t, _)| t).collect())
}

/// A step that needs nvcc from a toolkit whose `tools` leave it out: a `python` step that builds
/// from source with `CUDA_HOME` at that toolkit, or a `run` step whose command names its
/// `bin/nvcc`. Refused at the step's `build` or `cmd`, with what the toolkit can do.
pub(super) fn nvcc_users(
    r: &Resolver,
    all: &[(usize, &wire::Step)],
    steps: &[crate::recipe::Step],
) -> Result<()> {
    use crate::recipe::StepKind;
    let without_nvcc: Vec<(&crate::recipe::Step, &crate::recipe::CudaStep)> = steps
        .iter()
        .filter_map(|s| match &s.kind {
            StepKind::Cuda(c) if !c.tools.iter().any(|t| t == "nvcc") => Some((s, c)),
            _ => None,
        })
        .collect();
    if without_nvcc.is_empty() {
        return Ok(());
    }
    for ((file, w), step) in all.iter().zip(steps) {
        for (cuda, c) in &without_nvcc {
            let roots = [&c.install_path, &c.link].map(|p| p.display().to_string());
            let (span, how) = match &step.kind {
                StepKind::Python(p) if !p.build.is_empty() => {
                    let home = step.env.get("CUDA_HOME").map(String::as_str);
                    if !home.is_some_and(|h| roots.iter().any(|r| r == h.trim_end_matches('/'))) {
                        continue;
                    }
                    (
                        w.build
                            .as_ref()
                            .map_or_else(|| w.kind.span(), Spanned::span),
                        "builds from source with CUDA_HOME",
                    )
                }
                StepKind::Run { cmd, .. } => {
                    let text = match cmd {
                        crate::recipe::Cmd::Argv(a) => a.join(" "),
                        crate::recipe::Cmd::Shell(s) => s.clone(),
                    };
                    if !roots
                        .iter()
                        .any(|r| text.contains(&format!("{r}/bin/nvcc")))
                    {
                        continue;
                    }
                    (
                        w.cmd.as_ref().map_or_else(|| w.kind.span(), Spanned::span),
                        "runs nvcc from",
                    )
                }
                _ => continue,
            };
            return Err(r
                .diag(
                    *file,
                    span,
                    format!(
                        "step `{}` {how} {}, but step `{}` provides CUDA {} with {} only: no nvcc",
                        step.id,
                        c.install_path.display(),
                        cuda.id,
                        c.version,
                        c.tools.join(", ")
                    ),
                )
                .with_hint(format!(
                    "compile .cu files with a toolkit that has nvcc (the 13.x wheels or the runfile); CUDA {} here assembles PTX with ptxas",
                    c.version
                ))
                .into());
        }
    }
    Ok(())
}
