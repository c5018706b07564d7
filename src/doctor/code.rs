//! `sass.packages`: does each compiled package (flash-attn, FlashInfer, sgl-kernel, a built
//! llama-server) carry machine code for this GPU? Read from the files' device code
//! ([`crate::fatbin`]), nothing imported or run.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{Check, CheckDef, DoctorFacts};
use crate::fatbin::{self, Image, Kind};

/// Files read per package at most (FlashInfer's cubin package holds thousands of small ones).
const MAX_FILES: usize = 4096;

/// What one package's files carry.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PackageCode {
    pub package: String,
    pub files: usize,
    /// Each distinct image (`sm_90`, `compute_120`), SASS first.
    pub images: Vec<String>,
    #[serde(skip)]
    pub parsed: Vec<Image>,
    /// The first file that could not be read, and why.
    pub error: Option<String>,
}

/// The compiled packages under `site` (site-packages) and the binaries given (a recipe's
/// llama-server), those that exist.
pub(crate) fn collect(site: Option<&Path>, binaries: &[PathBuf]) -> Vec<PackageCode> {
    let mut out = Vec::new();
    if let Some(site) = site {
        let sets: [(&str, Vec<PathBuf>); 3] = [
            (
                "flash-attn",
                top_level(site, |n| {
                    n.starts_with("flash_attn") && n.contains("cuda") && n.ends_with(".so")
                }),
            ),
            (
                "FlashInfer",
                ["flashinfer", "flashinfer_jit_cache", "flashinfer_cubin"]
                    .iter()
                    .flat_map(|d| files_under(&site.join(d), 6))
                    .collect(),
            ),
            ("sgl-kernel", files_under(&site.join("sgl_kernel"), 4)),
        ];
        for (package, files) in sets {
            if !files.is_empty() {
                out.push(read_all(package, &files));
            }
        }
    }
    for b in binaries.iter().filter(|b| b.is_file()) {
        out.push(read_all(&b.display().to_string(), std::slice::from_ref(b)));
    }
    out
}

fn read_all(package: &str, files: &[PathBuf]) -> PackageCode {
    let mut images = Vec::new();
    let mut error = None;
    for f in files.iter().take(MAX_FILES) {
        match fatbin::read(f) {
            Ok(found) => images.extend(found),
            Err(e) if error.is_none() => error = Some(e.to_string()),
            Err(_) => {}
        }
    }
    let parsed = fatbin::archs(&images);
    PackageCode {
        package: package.to_string(),
        files: files.len().min(MAX_FILES),
        images: parsed.iter().map(ToString::to_string).collect(),
        parsed,
        error,
    }
}

fn top_level(site: &Path, keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(site) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(&keep))
        .collect();
    v.sort();
    v
}

/// `.so` and `.cubin` files under `dir`, `depth` levels down, sorted, at most [`MAX_FILES`].
fn files_under(dir: &Path, depth: u32) -> Vec<PathBuf> {
    let mut out = Vec::new();
    walk(dir, depth, &mut out);
    out.sort();
    out
}

fn walk(dir: &Path, depth: u32, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if out.len() >= MAX_FILES {
            return;
        }
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() && depth > 0 => walk(&p, depth - 1, out),
            Ok(t) if t.is_file() => {
                let name = e.file_name();
                let name = name.to_string_lossy();
                if name.ends_with(".cubin") || name.ends_with(".so") || name.contains(".so.") {
                    out.push(p);
                }
            }
            _ => {}
        }
    }
}

pub(super) fn definitions() -> Vec<CheckDef> {
    vec![CheckDef {
        id: "sass.packages",
        about: "Compiled packages (flash-attn, FlashInfer, sgl-kernel, llama-server) carry SASS for this GPU",
        run: packages,
    }]
}

fn packages(f: &DoctorFacts) -> Check {
    let id = "sass.packages";
    if f.compiled.is_empty() {
        return Check::skip(
            id,
            "no compiled CUDA package found (flash-attn, FlashInfer, sgl-kernel, llama-server)",
        );
    }
    let Some(cc) = f.target_cc() else {
        return Check::skip(id, "no GPU to check against");
    };
    let want = format!("sm_{}{}", cc.0, cc.1);
    let (mut missing, mut ptx_only, mut ok) = (Vec::new(), Vec::new(), Vec::new());
    let mut evidence = Vec::new();
    for p in &f.compiled {
        evidence.push(format!(
            "{}: {} file(s): {}{}",
            p.package,
            p.files,
            if p.images.is_empty() {
                "no CUDA code".to_string()
            } else {
                p.images.join(" ")
            },
            p.error
                .as_ref()
                .map(|e| format!(" (unreadable: {e})"))
                .unwrap_or_default()
        ));
        let sass = p
            .parsed
            .iter()
            .any(|i| i.kind == Kind::Sass && i.runs_on(cc));
        let ptx = p
            .parsed
            .iter()
            .any(|i| i.kind == Kind::Ptx && i.runs_on(cc));
        if sass {
            ok.push(p.package.as_str());
        } else if ptx {
            ptx_only.push(p.package.as_str());
        } else if !p.images.is_empty() || p.error.is_some() {
            missing.push(p.package.as_str());
        } else {
            // Python only (FlashInfer JIT-compiles at first use): nothing to judge.
            ok.push(p.package.as_str());
        }
    }
    let mut c = if !missing.is_empty() {
        Check::fail(
            id,
            format!(
                "no {want} code in {}: its kernels fail with \"no kernel image is available\"",
                missing.join(", ")
            ),
        )
        .fix(match &f.needs {
            Some(n) if n.arch_var => format!(
                "rebuild them for this GPU: `kiln up {} --set arch={}.{}`",
                n.named, cc.0, cc.1
            ),
            _ => format!("rebuild them with code for {want} (their build's arch list names it)"),
        })
    } else if !ptx_only.is_empty() {
        Check::warn(id, format!("only PTX for {want} in {}: the driver JIT-compiles it at first launch (slow start)", ptx_only.join(", ")))
            .fix(format!("rebuild them with SASS for {want}"))
    } else {
        Check::pass(id, format!("code for {want} in {}", ok.join(", ")))
    };
    for e in evidence {
        c = c.evidence(e);
    }
    c
}
