//! GPUs as `nvidia-smi --query-gpu` reports them.

use crate::process;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Gpu {
    pub index: u32,
    pub name: String,
    pub compute_cap: String,
    pub driver: String,
    pub memory_mib: u64,
}

/// Query the GPUs; `None` when `nvidia-smi` is absent or fails.
pub fn query_gpus() -> Option<Vec<Gpu>> {
    which::which("nvidia-smi").ok()?;
    let out = process::capture(
        "nvidia-smi",
        &[
            "--query-gpu=index,name,driver_version,compute_cap,memory.total",
            "--format=csv,noheader,nounits",
        ],
    )
    .ok()?;
    Some(parse_query(&out))
}

pub fn parse_query(csv: &str) -> Vec<Gpu> {
    csv.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(',').map(str::trim).collect();
            if f.len() < 5 {
                return None;
            }
            Some(Gpu {
                index: f[0].parse().ok()?,
                name: f[1].to_string(),
                driver: f[2].to_string(),
                compute_cap: f[3].to_string(),
                memory_mib: f[4].parse().unwrap_or(0),
            })
        })
        .collect()
}
