//! `--bundle FILE`: a redacted tar.gz for bug reports (nvidia-smi -q, topology, pip freeze, the
//! environment without secret-looking names, the doctor report), with GPU UUIDs and serials masked.

use std::path::Path;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::process::{self, CommandSpec};
use crate::redact::{is_secret_name, Redactor};

/// Replace `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (and `MIG-…`) UUIDs with a mask.
pub(crate) fn mask_uuids(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(['G', 'M']) {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let prefix = ["GPU-", "MIG-"].into_iter().find(|p| tail.starts_with(p));
        if let Some(p) = prefix.filter(|p| is_uuid(&tail[p.len()..])) {
            out.push_str(p);
            out.push_str("XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX");
            rest = &tail[p.len() + 36..];
        } else {
            out.push_str(&tail[..1]);
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// Replace board serial numbers (`Serial Number : 1653724025069` in `nvidia-smi -q`).
pub(crate) fn mask_serials(text: &str) -> String {
    let mut out: String = text
        .lines()
        .map(|line| match line.split_once(':') {
            Some((name, value)) if name.contains("Serial Number") && value.trim() != "N/A" => {
                format!("{name}: ***")
            }
            _ => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    if text.ends_with('\n') {
        out.push('\n');
    }
    out
}

fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 36
        && b[..36].iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// The environment with secret-looking names left out entirely.
pub(crate) fn safe_env() -> String {
    let mut vars: Vec<(String, String)> = std::env::vars_os()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .filter(|(k, _)| !is_secret_name(k))
        .collect();
    vars.sort();
    vars.into_iter().fold(String::new(), |mut out, (k, v)| {
        out.push_str(&k);
        out.push('=');
        out.push_str(&v);
        out.push('\n');
        out
    })
}

fn command_output(program: &str, args: &[&str]) -> String {
    let spec = CommandSpec::new(program, args.iter().copied());
    match process::capture_timeout(&spec, Duration::from_secs(30)) {
        Ok(c) => format!(
            "$ {}\n{}{}[exit {}]\n",
            spec.display(),
            c.stdout,
            c.stderr,
            c.code.map_or("-".into(), |c| c.to_string())
        ),
        Err(e) => format!("$ {}\n{e}\n", spec.display()),
    }
}

/// Write the bundle to `path`; `report_json` is the doctor report, `python` the inspected interpreter.
pub(crate) fn write(path: &Path, report_json: &str, python: Option<&str>) -> Result<()> {
    let mut files: Vec<(&str, String)> = vec![
        ("doctor.json", report_json.to_string()),
        ("env.txt", safe_env()),
    ];
    if which::which("nvidia-smi").is_ok() {
        files.push(("nvidia-smi.txt", command_output("nvidia-smi", &[])));
        files.push(("nvidia-smi-q.txt", command_output("nvidia-smi", &["-q"])));
        files.push((
            "nvidia-smi-topo.txt",
            command_output("nvidia-smi", &["topo", "-m"]),
        ));
        files.push((
            "nvidia-smi-topo-p2p.txt",
            command_output("nvidia-smi", &["topo", "-p2p", "rw"]),
        ));
    }
    if let Some(py) = python {
        files.push((
            "pip-freeze.txt",
            command_output(py, &["-m", "pip", "freeze"]),
        ));
    }
    let redactor = Redactor::from_env([]);
    let tmp = path.with_extension("tmp");
    // The bundle is the user's to share, not every local user's to read.
    let file = std::os::unix::fs::OpenOptionsExt::mode(
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true),
        0o600,
    )
    .open(&tmp)
    .map_err(|e| Error::io(format!("cannot create {}", tmp.display()), e))?;
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(
        file,
        flate2::Compression::default(),
    ));
    for (name, text) in files {
        let clean = mask_serials(&mask_uuids(&redactor.redact(&text)));
        let mut header = tar::Header::new_gnu();
        header.set_size(clean.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        tar.append_data(&mut header, format!("kiln-doctor/{name}"), clean.as_bytes())
            .map_err(|e| Error::io(format!("cannot write {}", tmp.display()), e))?;
    }
    let gz = tar
        .into_inner()
        .map_err(|e| Error::io(format!("cannot write {}", tmp.display()), e))?;
    gz.finish()
        .map_err(|e| Error::io(format!("cannot write {}", tmp.display()), e))?;
    std::fs::rename(&tmp, path)
        .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_serial_numbers() {
        let t = "    Serial Number                                      : 1653724025069\n        Chassis Serial Number                          : N/A\n";
        assert_eq!(
            mask_serials(t),
            "    Serial Number                                      : ***\n        Chassis Serial Number                          : N/A\n"
        );
    }

    #[test]
    fn masks_real_gpu_uuids_only() {
        let t =
            "GPU 0: NVIDIA H200 (UUID: GPU-0fa4f92d-5f0e-8d91-b18f-922b56a6e20b) GPU-notauuid MIG";
        assert_eq!(
            mask_uuids(t),
            "GPU 0: NVIDIA H200 (UUID: GPU-XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX) GPU-notauuid MIG"
        );
    }
}
