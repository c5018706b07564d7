//! A CUDA toolkit from PyPI's `nvidia-*` wheels, laid out as a normal prefix: each wheel's
//! `nvidia/<root>/{bin,include,lib,nvvm}` merged into `install_path/{bin,include,lib64,nvvm}`
//! (`lib` a link to `lib64`, as the runfile has it). Built in a staging directory beside the
//! prefix and renamed into place, so a killed run never leaves a half toolkit under its name;
//! a marker records the wheels, so the same set is not unpacked twice.

use std::io::Write;
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};
use crate::recipe::{CudaStep, Step, Wheel};
use crate::steps::StepContext;

/// The file in the prefix that says which wheels made it.
const MARKER: &str = ".kiln-cuda.json";

pub(super) fn install(
    step: &Step,
    c: &CudaStep,
    wheels: &[Wheel],
    ctx: &StepContext,
    log: &mut dyn Write,
) -> Result<()> {
    let marker = marker_text(c, wheels);
    let dest = &c.install_path;
    let found = crate::bounded::read_io(&dest.join(MARKER), MARKER_CAP).ok();
    if found.as_deref() == Some(marker.as_bytes()) {
        let _ = writeln!(
            log,
            "CUDA {} from PyPI is already laid out at {}: unpacking skipped",
            c.version,
            dest.display()
        );
        return check_tools(step, c, dest, log);
    }
    if found.is_none() {
        refuse_what_kiln_did_not_make(step, dest)?;
    }
    for w in wheels {
        super::super::fetch::fetch(
            &w.url,
            &w.sha256,
            &w.path,
            step.timeout,
            log,
            ctx.memo,
            ctx.progress,
        )?;
    }
    let parent = dest.parent().unwrap_or(Path::new("/"));
    crate::fs::create_dir(parent)?;
    let name = dest.file_name().unwrap_or_default().to_string_lossy();
    // What a killed run left beside the prefix (its staging or the old prefix moved aside).
    for kind in ["staging", "old"] {
        let prefix = format!(".{name}.kiln-{kind}-");
        crate::fs::remove_left_behind(
            parent,
            |n| n.strip_prefix(prefix.as_str())?.parse().ok(),
            |pid, _| !crate::process::pid_exists(pid),
        );
    }
    let staging = parent.join(format!(".{name}.kiln-staging-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    let result = (|| {
        for w in wheels {
            let files = unpack(&w.path, &staging)?;
            let _ = writeln!(
                log,
                "unpacked {} ({files} files)",
                w.path.file_name().unwrap_or_default().to_string_lossy()
            );
        }
        finish_layout(&staging)?;
        check_tools(step, c, &staging, log)?;
        crate::fs::write_atomic(&staging.join(MARKER), marker.as_bytes())?;
        put_in_place(&staging, dest)
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    result?;
    let _ = writeln!(
        log,
        "CUDA {} from {} wheels laid out at {}",
        c.version,
        wheels.len(),
        dest.display()
    );
    Ok(())
}

fn marker_text(c: &CudaStep, wheels: &[Wheel]) -> String {
    let list: Vec<serde_json::Value> = wheels
        .iter()
        .map(|w| serde_json::json!({"url": w.url, "sha256": w.sha256}))
        .collect();
    serde_json::json!({"cuda": {"version": c.version}, "source": "pypi", "wheels": list})
        .to_string()
}

/// Every tool the recipe asked for is an executable in `root/bin`; the log says what is there.
fn check_tools(step: &Step, c: &CudaStep, root: &Path, log: &mut dyn Write) -> Result<()> {
    let offered = programs(&root.join("bin"));
    let _ = writeln!(
        log,
        "CUDA {} from PyPI offers: {}",
        c.version,
        if offered.is_empty() {
            "no programs".to_string()
        } else {
            offered.join(", ")
        }
    );
    let missing: Vec<&String> = c.tools.iter().filter(|t| !offered.contains(t)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::StepFailed {
        step: step.id.clone(),
        reason: format!(
            "CUDA {} from these wheels has no {} (it offers {})",
            c.version,
            missing
                .iter()
                .map(|t| format!("bin/{t}"))
                .collect::<Vec<_>>()
                .join(", "),
            offered.join(", ")
        ),
        log: None,
        hint: Some(
            "a step that compiles .cu files needs nvcc: the 13.x wheels bring it (toolchains/cuda-13.0.1.toml), the 12.x wheels only ptxas; or list only what you use in `tools`".into(),
        ),
        tail: String::new(),
    })
}

/// The executable files in `bin`, sorted.
fn programs(bin: &Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut out: Vec<String> = std::fs::read_dir(bin)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

/// Where a wheel member goes in the prefix: `nvidia/<root>/REST` → `REST` (`lib/` → `lib64/`);
/// `None` for the Python packaging around it (dist-info, `__init__.py`, NVIDIA's `.metadata`).
fn prefix_path(member: &str) -> Option<PathBuf> {
    let mut parts = member.split('/');
    if parts.next()? != "nvidia" {
        return None;
    }
    parts.next()?; // cu13, cuda_nvcc, cuda_runtime, …
    let rest: Vec<&str> = parts.collect();
    let first = *rest.first()?;
    let last = *rest.last()?;
    if first == ".metadata"
        || last == "__init__.py"
        || last.is_empty()
        || rest.contains(&"__pycache__")
    {
        return None;
    }
    let mut p = PathBuf::from(if first == "lib" { "lib64" } else { first });
    for r in &rest[1..] {
        p.push(r);
    }
    Some(p)
}

/// Unpack the prefix part of one wheel into `root`; the number of files written. Member names
/// that would leave `root` (`..`, absolute) are refused.
fn unpack(wheel: &Path, root: &Path) -> Result<usize> {
    let bad = |what: String| {
        Error::other(
            format!("{}: {what}", wheel.display()),
            Some(
                "the wheel's sha256 matched its pin, so the pin is wrong: check the toolchain file"
                    .into(),
            ),
        )
    };
    let file = std::fs::File::open(wheel)
        .map_err(|e| Error::io(format!("cannot open {}", wheel.display()), e))?;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| bad(format!("not a wheel ({e})")))?;
    let mut files = 0;
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).map_err(|e| bad(e.to_string()))?;
        if entry.is_dir() {
            continue;
        }
        let name = entry.name().map_err(|e| bad(e.to_string()))?.to_string();
        let Some(rel) = prefix_path(&name) else {
            continue;
        };
        if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
            return Err(bad(format!("member `{name}` leaves the prefix")));
        }
        let path = root.join(&rel);
        crate::fs::create_dir(path.parent().expect("a member has a parent"))?;
        let exec = entry.unix_mode().is_some_and(|m| m & 0o111 != 0);
        let mut out = create_file(&path, exec)?;
        std::io::copy(&mut entry, &mut out)
            .map_err(|e| bad(format!("cannot unpack `{name}`: {e}")))?;
        files += 1;
    }
    Ok(files)
}

fn create_file(path: &Path, exec: bool) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if exec { 0o755 } else { 0o644 })
        .open(path)
        .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))
}

/// What a prefix has that the wheels leave out: `lib` → `lib64`, and the unversioned
/// `libcudart.so` that `-lcudart` links against.
fn finish_layout(root: &Path) -> Result<()> {
    let link = |target: &str, at: &Path| {
        if at.symlink_metadata().is_err() {
            std::os::unix::fs::symlink(target, at)
                .map_err(|e| Error::io(format!("cannot create {}", at.display()), e))?;
        }
        Ok::<(), Error>(())
    };
    let lib64 = root.join("lib64");
    if lib64.is_dir() {
        link("lib64", &root.join("lib"))?;
        let versioned = std::fs::read_dir(&lib64)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|n| n.starts_with("libcudart.so."));
        if let Some(v) = versioned {
            link(&v, &lib64.join("libcudart.so"))?;
        }
    }
    Ok(())
}

/// A marker is a few hundred bytes of JSON; more is not one kiln wrote.
const MARKER_CAP: u64 = 1 << 20;

/// Whether `dest` is kiln's to replace: nothing there, an empty directory, or a prefix with
/// kiln's marker (a restore from the step cache asks before it replaces the prefix).
pub(super) fn replaceable(step: &Step, dest: &Path) -> Result<()> {
    if crate::bounded::read_io(&dest.join(MARKER), MARKER_CAP).is_ok() {
        return Ok(());
    }
    refuse_what_kiln_did_not_make(step, dest)
}

/// kiln replaces only what it laid out (a prefix with its marker) or an empty directory: a
/// toolkit the runfile installed, or any directory of the user's, at `install_path` is refused,
/// never moved aside and deleted.
fn refuse_what_kiln_did_not_make(step: &Step, dest: &Path) -> Result<()> {
    let Ok(meta) = dest.symlink_metadata() else {
        return Ok(());
    };
    let empty_dir =
        meta.is_dir() && std::fs::read_dir(dest).is_ok_and(|mut entries| entries.next().is_none());
    if empty_dir {
        return Ok(());
    }
    let what = if meta.file_type().is_symlink() {
        "a symlink"
    } else if meta.is_dir() {
        "a directory"
    } else {
        "a file"
    };
    Err(Error::other(
        format!(
            "step `{}`: refusing to replace {}: it is {what} kiln did not lay out (it has no {MARKER}), \
             and kiln never deletes what it did not create",
            step.id,
            dest.display()
        ),
        Some(format!(
            "point the step's install_path at a directory that does not exist yet, or keep the \
             toolkit already there (source = \"runfile\"); if {} is yours to discard, remove \
             it yourself first",
            dest.display()
        )),
    ))
}

/// Rename `staging` to `dest`; whatever was at `dest` goes aside first and is removed after.
fn put_in_place(staging: &Path, dest: &Path) -> Result<()> {
    let aside = dest.with_file_name(format!(
        ".{}.kiln-old-{}",
        dest.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let had = dest.symlink_metadata().is_ok();
    if had {
        std::fs::rename(dest, &aside)
            .map_err(|e| Error::io(format!("cannot move {} aside", dest.display()), e))?;
    }
    if let Err(e) = std::fs::rename(staging, dest) {
        if had {
            let _ = std::fs::rename(&aside, dest);
        }
        return Err(Error::io(
            format!("cannot put {} in place", dest.display()),
            e,
        ));
    }
    if had {
        let _ = std::fs::remove_dir_all(&aside);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::prefix_path;

    #[test]
    fn wheel_members_map_to_a_prefix() {
        let p = |m: &str| prefix_path(m).map(|p| p.display().to_string());
        assert_eq!(p("nvidia/cu13/bin/nvcc").as_deref(), Some("bin/nvcc"));
        assert_eq!(
            p("nvidia/cu13/lib/libcudart.so.13").as_deref(),
            Some("lib64/libcudart.so.13")
        );
        assert_eq!(
            p("nvidia/cuda_nvcc/nvvm/libdevice/libdevice.10.bc").as_deref(),
            Some("nvvm/libdevice/libdevice.10.bc")
        );
        assert_eq!(p("nvidia/cuda_nvcc/include/__init__.py"), None);
        assert_eq!(p("nvidia/__init__.py"), None);
        assert_eq!(p("nvidia/cu13/.metadata/provenance.txt"), None);
        assert_eq!(p("nvidia_cuda_nvcc-13.0.88.dist-info/RECORD"), None);
    }
}
