//! `--deep`: a bf16 matmul on every GPU and the torch symmetric-memory probe (torchrun over the
//! GPUs), always with NVLink multicast disabled in the probe's environment.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{Check, CheckDef, DoctorFacts};
use crate::process::{self, CommandSpec};

const MATMUL: &str = include_str!("deep_matmul.py");
const PROBE: &str = include_str!("symm_mem_probe.py");

/// Always in the probe's environment: never create NVLink multicast objects.
pub(crate) const NO_MULTICAST_ENV: &[(&str, &str)] = &[
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
    ("NCCL_NVLS_ENABLE", "0"),
    ("NVSHMEM_DISABLE_NVLS", "1"),
];

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct MatmulGpu {
    pub index: u32,
    #[serde(default)]
    pub ok: bool,
    pub cap: Option<Vec<u32>>,
    pub tflops: Option<f64>,
    pub max_rel_err: Option<f64>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Matmul {
    #[serde(default)]
    pub gpus: Vec<MatmulGpu>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct ProbeRank {
    pub rank: u32,
    pub world: u32,
    pub cap: Option<Vec<u32>>,
    pub multicast_ptr: Option<u64>,
    pub rendezvous: Option<String>,
    #[serde(rename = "nccl_allreduce_64KiB_us")]
    pub nccl_allreduce_us: Option<f64>,
    #[serde(rename = "symm_two_shot_64KiB_us")]
    pub symm_two_shot_us: Option<f64>,
    /// Why the two-shot all-reduce failed.
    pub symm_two_shot: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct SymmProbe {
    pub ranks: Vec<ProbeRank>,
    pub error: Option<String>,
    pub env: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct DeepFacts {
    pub matmul: Matmul,
    /// None with fewer than two GPUs.
    pub symm_mem: Option<SymmProbe>,
    pub seconds: f64,
}

pub(crate) fn collect(python: &str, gpu_count: usize) -> DeepFacts {
    let started = Instant::now();
    let matmul = run_matmul(python);
    let symm_mem = (gpu_count >= 2).then(|| run_probe(python, gpu_count));
    DeepFacts {
        matmul,
        symm_mem,
        seconds: (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
    }
}

fn run_matmul(python: &str) -> Matmul {
    let spec = CommandSpec::new(python, ["-c", MATMUL]);
    match process::capture_timeout(&spec, Duration::from_secs(120)) {
        Ok(out) => match out
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("KILN_DEEP "))
        {
            Some(json) => serde_json::from_str(json).unwrap_or_else(|e| Matmul {
                error: Some(e.to_string()),
                ..Matmul::default()
            }),
            None => Matmul {
                error: Some(tail(&out.stderr, out.timed_out)),
                ..Matmul::default()
            },
        },
        Err(e) => Matmul {
            error: Some(e.to_string()),
            ..Matmul::default()
        },
    }
}

fn run_probe(python: &str, gpu_count: usize) -> SymmProbe {
    let env: Vec<String> = NO_MULTICAST_ENV
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let dir = std::env::temp_dir().join(format!("kiln-doctor-{}", std::process::id()));
    let script: PathBuf = dir.join("symm_mem_probe.py");
    if let Err(e) = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&script, PROBE)) {
        return SymmProbe {
            error: Some(format!("cannot write {}: {e}", script.display())),
            env,
            ..SymmProbe::default()
        };
    }
    let mut spec = CommandSpec::new(
        python,
        [
            "-m".to_string(),
            "torch.distributed.run".into(),
            "--standalone".into(),
            format!("--nproc-per-node={gpu_count}"),
            script.display().to_string(),
        ],
    );
    for (k, v) in NO_MULTICAST_ENV {
        spec.env.insert(k.to_string(), v.to_string());
    }
    spec.env.insert("OMP_NUM_THREADS".into(), "1".into());
    let result = process::capture_timeout(&spec, Duration::from_secs(180));
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(out) => {
            let mut ranks: Vec<ProbeRank> = out
                .stdout
                .lines()
                .filter_map(|l| {
                    l.split_once("RESULT ")
                        .and_then(|(_, j)| serde_json::from_str(j).ok())
                })
                .collect();
            ranks.sort_by_key(|r| r.rank);
            let error = (ranks.len() < gpu_count)
                .then(|| tail(&format!("{}\n{}", out.stdout, out.stderr), out.timed_out));
            SymmProbe { ranks, error, env }
        }
        Err(e) => SymmProbe {
            error: Some(e.to_string()),
            env,
            ..SymmProbe::default()
        },
    }
}

fn tail(text: &str, timed_out: bool) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let last = lines[lines.len().saturating_sub(3)..].join(" | ");
    if timed_out {
        format!("timed out; last output: {last}")
    } else {
        last
    }
}

pub(crate) fn definitions() -> Vec<CheckDef> {
    vec![
        CheckDef {
            id: "deep.matmul",
            about: "A bf16 matmul runs on every GPU and matches fp32 (catches \"no kernel image\")",
            run: matmul_check,
        },
        CheckDef {
            id: "deep.symm-mem",
            about: "torch symmetric memory: rendezvous, multicast_ptr, NCCL vs two-shot all-reduce",
            run: symm_check,
        },
    ]
}

fn matmul_check(f: &DoctorFacts) -> Check {
    let id = "deep.matmul";
    let Some(deep) = &f.deep else {
        return Check::skip(id, "not run (pass --deep on a GPU host with torch)");
    };
    let m = &deep.matmul;
    if let Some(e) = &m.error {
        return Check::fail(id, format!("the kernel smoke did not run: {e}"))
            .fix("check torch with `python -c 'import torch; torch.zeros(1).cuda()'`");
    }
    let bad: Vec<&MatmulGpu> = m.gpus.iter().filter(|g| !g.ok).collect();
    let mut check = if m.gpus.is_empty() {
        Check::fail(id, "torch sees no GPU")
            .fix("check CUDA_VISIBLE_DEVICES and that torch is a CUDA build")
    } else if bad.is_empty() {
        let tflops: Vec<String> = m
            .gpus
            .iter()
            .filter_map(|g| g.tflops.map(|t| format!("{t}")))
            .collect();
        Check::pass(
            id,
            format!(
                "bf16 4096² matmul ok on {} GPU(s) ({} TFLOP/s)",
                m.gpus.len(),
                tflops.join(", ")
            ),
        )
    } else {
        let first = bad[0]
            .error
            .clone()
            .unwrap_or_else(|| format!("max relative error {:?}", bad[0].max_rel_err));
        Check::fail(id, format!("matmul failed on GPU {}: {first}", bad.iter().map(|g| g.index.to_string()).collect::<Vec<_>>().join(", ")))
            .fix("a `no kernel image` error means torch lacks this GPU's sm_XY: reinstall torch from the matching CUDA index")
    };
    for g in &m.gpus {
        check = check.evidence(format!(
            "GPU {}: ok={} tflops={:?} max_rel_err={:?}",
            g.index, g.ok, g.tflops, g.max_rel_err
        ));
    }
    check
}

fn symm_check(f: &DoctorFacts) -> Check {
    let id = "deep.symm-mem";
    let Some(deep) = &f.deep else {
        return Check::skip(id, "not run (pass --deep on a host with two or more GPUs)");
    };
    let Some(p) = &deep.symm_mem else {
        return Check::skip(id, "one GPU: no all-reduce to probe");
    };
    let mut check = match (&p.error, p.ranks.first()) {
        (Some(e), _) => Check::fail(id, format!("the symmetric-memory probe failed: {e}"))
            .fix("symm-mem needs working P2P: check `nvidia-smi topo -p2p rw`; drop --enable-torch-symm-mem"),
        (None, None) => Check::fail(id, "the probe printed no result"),
        (None, Some(r)) if r.rendezvous.as_deref() != Some("ok") => Check::fail(
            id,
            format!("rendezvous failed: {}", r.rendezvous.as_deref().unwrap_or("?")),
        )
        .fix("drop --enable-torch-symm-mem; SGLang would fail to set up its communicator"),
        (None, Some(r)) => match (r.nccl_allreduce_us, r.symm_two_shot_us, &r.symm_two_shot) {
            (Some(n), Some(s), _) => Check::pass(
                id,
                format!("rendezvous ok; 64 KiB all-reduce: NCCL {n:.1} µs, symm-mem two-shot {s:.1} µs (multicast off for the probe)"),
            ),
            (_, _, error) => Check::fail(
                id,
                format!("rendezvous ok but the two-shot all-reduce failed: {}", error.as_deref().unwrap_or("no timing")),
            )
            .fix("drop --enable-torch-symm-mem"),
        },
    };
    check = check.evidence(format!("probe env: {}", p.env.join(" ")));
    for r in &p.ranks {
        check = check.evidence(format!(
            "rank {}/{}: cap {:?}, rendezvous {}, multicast_ptr {}, nccl {:?} µs, two-shot {:?} µs{}",
            r.rank,
            r.world,
            r.cap.clone().unwrap_or_default(),
            r.rendezvous.as_deref().unwrap_or("?"),
            r.multicast_ptr.unwrap_or(0),
            r.nccl_allreduce_us,
            r.symm_two_shot_us,
            r.symm_two_shot.as_ref().map(|e| format!(", two-shot error {e}")).unwrap_or_default()
        ));
    }
    check
}
