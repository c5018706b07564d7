//! The machine itself, from file reads and one syscall: OS, kernel, cores, RAM, free disk.

use std::path::Path;

use serde::Serialize;

#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct SystemFacts {
    /// PRETTY_NAME from /etc/os-release ("Ubuntu 24.04.3 LTS").
    pub os: Option<String>,
    pub kernel: Option<String>,
    pub arch: String,
    pub cores: usize,
    pub mem_total_bytes: Option<u64>,
    pub mem_available_bytes: Option<u64>,
}

pub(crate) fn collect() -> SystemFacts {
    SystemFacts {
        os: std::fs::read_to_string("/etc/os-release")
            .ok()
            .and_then(|t| os_release_name(&t)),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .ok()
            .map(|s| s.trim().to_string()),
        arch: std::env::consts::ARCH.to_string(),
        cores: std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        mem_total_bytes: super::meminfo_kib("MemTotal").map(|k| k * 1024),
        mem_available_bytes: super::meminfo_kib("MemAvailable").map(|k| k * 1024),
    }
}

fn os_release_name(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
}

/// Free bytes (for an unprivileged user) on the filesystem holding `path`, or its nearest
/// existing ancestor.
pub(crate) fn free_disk_bytes(path: &Path) -> Option<u64> {
    let existing = path.ancestors().find(|p| p.exists())?;
    let c_path = std::ffi::CString::new(existing.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs writes into the zeroed struct we own; the path is a valid C string.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), &raw mut stat) };
    (rc == 0).then(|| stat.f_bavail as u64 * stat.f_frsize as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_pretty_name() {
        let t = "PRETTY_NAME=\"Ubuntu 24.04.3 LTS\"\nNAME=\"Ubuntu\"\n";
        assert_eq!(os_release_name(t).as_deref(), Some("Ubuntu 24.04.3 LTS"));
    }

    #[test]
    fn free_disk_of_a_missing_path_uses_its_parent() {
        let dir = tempfile::tempdir().unwrap();
        assert!(free_disk_bytes(&dir.path().join("not/yet/there")).unwrap() > 0);
    }
}
