//! GPUs as `nvidia-smi --query-gpu` reports them, with the fallbacks old or broken drivers need.

use std::time::Duration;

use serde::Serialize;

use crate::process::{self, CommandSpec};

/// The fields kiln asks `nvidia-smi --query-gpu` for (with a header, parsed by column name).
pub(crate) const QUERY_FIELDS: &str = "index,name,uuid,driver_version,compute_cap,memory.total,memory.used,\
pci.bus_id,persistence_mode,ecc.mode.current,power.limit,clocks.max.sm,pcie.link.gen.max,pcie.link.width.max";

const SMI_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gpu {
    pub index: u32,
    pub name: String,
    /// "12.0"; on drivers without the `compute_cap` field, derived from the name (or empty).
    pub compute_cap: String,
    pub driver: String,
    pub memory_mib: u64,
    /// `memory.used` when the driver reports it: free memory is `memory_mib - used`.
    pub memory_used_mib: Option<u64>,
    pub uuid: Option<String>,
    pub bus_id: Option<String>,
    pub persistence_mode: Option<String>,
    pub ecc_mode: Option<String>,
}

impl Gpu {
    /// The compute capability as (major, minor).
    pub fn cc(&self) -> Option<(u32, u32)> {
        parse_cc(&self.compute_cap)
    }
}

pub(crate) fn parse_cc(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.trim().split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// How `nvidia-smi` answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub(crate) enum SmiState {
    Ok,
    /// Not on PATH: no NVIDIA driver (or not in this container).
    Missing,
    /// Kernel module and user-space library differ (after an upgrade without reboot).
    Mismatch {
        message: String,
    },
    Failed {
        message: String,
    },
}

/// The result of querying the GPUs.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct GpuQuery {
    pub smi: SmiState,
    pub gpus: Vec<Gpu>,
    /// False when the driver does not know the `compute_cap` field (capability derived from names).
    pub compute_cap_field: bool,
}

/// Query the GPUs; `None` when `nvidia-smi` is absent or fails.
pub(crate) fn query_gpus() -> Option<Vec<Gpu>> {
    let q = query();
    (q.smi == SmiState::Ok).then_some(q.gpus)
}

/// Query the GPUs, falling back to a query without `compute_cap` on drivers that lack it.
pub(crate) fn query() -> GpuQuery {
    let mut result = GpuQuery {
        smi: SmiState::Missing,
        gpus: Vec::new(),
        compute_cap_field: true,
    };
    if which::which("nvidia-smi").is_err() {
        return result;
    }
    match smi(&[&format!("--query-gpu={QUERY_FIELDS}"), "--format=csv"]) {
        Ok(text) => {
            result.smi = SmiState::Ok;
            result.gpus = parse_csv(&text);
        }
        Err(message) if message.contains("compute_cap") => {
            let fields = QUERY_FIELDS.replace("compute_cap,", "");
            match smi(&[&format!("--query-gpu={fields}"), "--format=csv"]) {
                Ok(text) => {
                    result.smi = SmiState::Ok;
                    result.compute_cap_field = false;
                    result.gpus = parse_csv(&text);
                    for g in &mut result.gpus {
                        g.compute_cap = cc_from_name(&g.name).unwrap_or_default().to_string();
                    }
                }
                Err(message) => result.smi = failure(message),
            }
        }
        Err(message) => result.smi = failure(message),
    }
    result
}

fn failure(message: String) -> SmiState {
    if message.contains("Driver/library version mismatch") {
        SmiState::Mismatch { message }
    } else {
        SmiState::Failed { message }
    }
}

/// Run `nvidia-smi ARGS`: stdout on success, else the (trimmed) output as the message.
pub(crate) fn smi(args: &[&str]) -> Result<String, String> {
    let spec = CommandSpec::new("nvidia-smi", args.iter().copied());
    match process::capture_timeout(&spec, SMI_TIMEOUT) {
        Ok(c) if c.success() => Ok(c.stdout),
        Ok(c) if c.timed_out => Err(format!(
            "`{}` did not answer within {}s",
            spec.display(),
            SMI_TIMEOUT.as_secs()
        )),
        Ok(c) => {
            let text = format!("{}\n{}", c.stdout.trim(), c.stderr.trim());
            // Its lines stay lines; anything else that steers a terminal is escaped.
            let lines: Vec<String> = text
                .trim()
                .lines()
                .map(crate::columns::escape_controls)
                .collect();
            Err(lines.join("\n"))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Parse `--format=csv` output (with a header; units in header and values are dropped).
pub(crate) fn parse_csv(text: &str) -> Vec<Gpu> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let columns: Vec<String> = header
        .split(',')
        .map(|c| c.split(" [").next().unwrap_or("").trim().to_string())
        .collect();
    lines
        .filter_map(|line| {
            // nvidia-smi's text is the driver's: a GPU name with an escape sequence in it must
            // not reach the terminal (doctor, plan, report) as one.
            let values: Vec<String> = line
                .split(',')
                .map(|v| crate::columns::escape_controls(v.trim()))
                .collect();
            let get = |name: &str| {
                let i = columns.iter().position(|c| c == name)?;
                let v = values.get(i)?.trim();
                let v = v.split(' ').next().unwrap_or(v);
                (!v.is_empty() && v != "[N/A]" && v != "N/A").then(|| v.to_string())
            };
            let name_at = columns.iter().position(|c| c == "name")?;
            Some(Gpu {
                index: get("index")?.parse().ok()?,
                name: values.get(name_at)?.clone(),
                compute_cap: get("compute_cap").unwrap_or_default(),
                driver: get("driver_version").unwrap_or_default(),
                memory_mib: get("memory.total")
                    .and_then(|m| m.parse().ok())
                    .unwrap_or(0),
                memory_used_mib: get("memory.used").and_then(|m| m.parse().ok()),
                uuid: get("uuid"),
                bus_id: get("pci.bus_id"),
                persistence_mode: get("persistence_mode"),
                ecc_mode: get("ecc.mode.current"),
            })
        })
        .collect()
}

/// Compute capability of well-known GPUs, for drivers too old to report `compute_cap`.
pub(crate) fn cc_from_name(name: &str) -> Option<&'static str> {
    const TABLE: &[(&str, &str)] = &[
        ("RTX PRO 6000", "12.0"),
        ("RTX 6000D", "12.0"),
        ("RTX 50", "12.0"),
        ("GB200", "10.0"),
        ("B200", "10.0"),
        ("B300", "10.3"),
        ("H100", "9.0"),
        ("H200", "9.0"),
        ("H800", "9.0"),
        ("H20", "9.0"),
        ("GH200", "9.0"),
        ("L40", "8.9"),
        ("RTX 40", "8.9"),
        ("RTX 6000 Ada", "8.9"),
        ("A100", "8.0"),
        ("A800", "8.0"),
        ("A10", "8.6"),
        ("RTX A6000", "8.6"),
        ("RTX 30", "8.6"),
        ("V100", "7.0"),
        ("T4", "7.5"),
    ];
    TABLE
        .iter()
        .find(|(needle, _)| name.contains(needle))
        .map(|(_, cc)| *cc)
}

/// The kernel module's version from `/proc/driver/nvidia/version` (a file read, no NVML).
pub(crate) fn kernel_module_version() -> Option<String> {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    parse_module_version(&text)
}

fn parse_module_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    line.split_whitespace()
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H200: &str = "index, name, uuid, driver_version, compute_cap, memory.total [MiB], memory.used [MiB], pci.bus_id, persistence_mode, ecc.mode.current, power.limit [W], clocks.max.sm [MHz], pcie.link.gen.max, pcie.link.width.max
0, NVIDIA H200, GPU-0fa4f92d-5f0e-8d91-b18f-922b56a6e20b, 580.159.04, 9.0, 143771 MiB, 0 MiB, 00000000:00:06.0, Enabled, Enabled, 700.00 W, 1980 MHz, 5, 16
";

    #[test]
    fn parses_the_real_h200_query() {
        let gpus = parse_csv(H200);
        assert_eq!(gpus.len(), 1);
        let g = &gpus[0];
        assert_eq!(
            (g.index, g.name.as_str(), g.compute_cap.as_str()),
            (0, "NVIDIA H200", "9.0")
        );
        assert_eq!((g.driver.as_str(), g.memory_mib), ("580.159.04", 143_771));
        assert_eq!(g.bus_id.as_deref(), Some("00000000:00:06.0"));
        assert_eq!(g.persistence_mode.as_deref(), Some("Enabled"));
        assert_eq!(g.cc(), Some((9, 0)));
    }

    #[test]
    fn reads_the_module_version() {
        let t = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U22)  Thu\nGCC version:  gcc version 12\n";
        assert_eq!(parse_module_version(t).as_deref(), Some("580.159.04"));
    }

    #[test]
    fn names_give_a_capability_when_the_driver_does_not() {
        assert_eq!(
            cc_from_name("NVIDIA RTX PRO 6000 Blackwell Server Edition"),
            Some("12.0")
        );
        assert_eq!(cc_from_name("NVIDIA H200"), Some("9.0"));
        assert_eq!(cc_from_name("Matrox"), None);
    }
}
