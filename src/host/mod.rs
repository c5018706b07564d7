//! Host facts: what this machine is (OS, CPU, RAM, GPUs, CUDA toolkits, Python envs). Recipes' `when`,
//! `${host.*}` and `kiln doctor` read them.

pub(crate) mod cuda;
pub(crate) mod gpu;
pub(crate) mod python;
pub(crate) mod system;
pub(crate) mod topology;
pub(crate) mod torch;

use std::collections::BTreeMap;
use std::sync::OnceLock;

pub(crate) use gpu::{query_gpus, Gpu};

/// Fact names a recipe may use in `when` (and as `${host.NAME}`).
pub const FACT_KEYS: &[&str] = &[
    "os",
    "arch",
    "kernel",
    "cores",
    "mem.total_gib",
    "mem.available_gib",
    "gpu.count",
    "gpu.cc",
    "gpu.name",
    "gpu.driver",
];

/// Facts about the host, with GPU facts collected lazily (they need `nvidia-smi`).
#[derive(Debug, Default)]
pub struct Facts {
    gpus: OnceLock<Vec<Gpu>>,
    overrides: BTreeMap<String, String>,
}

impl Facts {
    pub fn new() -> Self {
        Facts::default()
    }

    /// Pin a fact (tests, and `KILN_FACT_<NAME>` for cross-targeting from another machine).
    #[must_use]
    pub fn with_override(mut self, key: &str, value: &str) -> Self {
        self.overrides.insert(key.to_string(), value.to_string());
        self
    }

    /// Facts pinned through the environment: `KILN_FACT_GPU_CC=12.0` pins `gpu.cc`.
    pub fn from_env() -> Self {
        let mut facts = Facts::new();
        for key in FACT_KEYS {
            let var = format!("KILN_FACT_{}", key.replace('.', "_").to_uppercase());
            if let Ok(v) = std::env::var(&var) {
                facts = facts.with_override(key, &v);
            }
        }
        facts
    }

    /// A fact pinned by an override (`KILN_FACT_*`), without collecting anything.
    pub fn pinned(&self, key: &str) -> Option<&str> {
        self.overrides.get(key).map(String::as_str)
    }

    pub fn gpus(&self) -> &[Gpu] {
        self.gpus.get_or_init(|| query_gpus().unwrap_or_default())
    }

    pub fn get(&self, key: &str) -> Option<String> {
        if let Some(v) = self.overrides.get(key) {
            return Some(v.clone());
        }
        match key {
            "os" => Some(std::env::consts::OS.to_string()),
            "arch" => Some(std::env::consts::ARCH.to_string()),
            "kernel" => read_trim("/proc/sys/kernel/osrelease"),
            "cores" => std::thread::available_parallelism()
                .ok()
                .map(|n| n.to_string()),
            "mem.total_gib" => meminfo_kib("MemTotal").map(gib),
            "mem.available_gib" => meminfo_kib("MemAvailable").map(gib),
            "gpu.count" => Some(self.gpus().len().to_string()),
            "gpu.cc" => self.gpus().first().map(|g| g.compute_cap.clone()),
            "gpu.name" => self.gpus().first().map(|g| g.name.clone()),
            "gpu.driver" => self.gpus().first().map(|g| g.driver.clone()),
            _ => None,
        }
    }
}

fn gib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / (1024.0 * 1024.0))
}

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// A field of /proc/meminfo in KiB.
pub(crate) fn meminfo_kib(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_meminfo(&text, field)
}

fn parse_meminfo(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(field)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// Whether kiln runs as root (a container, CI): install hints then leave `sudo` out.
pub(crate) fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
/// Bytes of RAM available for new work right now.
pub(crate) fn available_memory_bytes() -> Option<u64> {
    meminfo_kib("MemAvailable").map(|k| k * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_meminfo_fields() {
        let t = "MemTotal:       24576000 kB\nMemAvailable:   1000 kB\n";
        assert_eq!(parse_meminfo(t, "MemAvailable"), Some(1000));
        assert_eq!(parse_meminfo(t, "Mem"), None);
    }

    #[test]
    fn overrides_win() {
        let f = Facts::new().with_override("gpu.cc", "12.0");
        assert_eq!(f.get("gpu.cc").as_deref(), Some("12.0"));
        assert!(f.get("os").is_some());
    }
}
