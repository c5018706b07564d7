//! Host and toolchain checks: driver, toolkit floors, torch build, topology, build RAM, disk.

use super::{Check, CheckDef, DoctorFacts};
use crate::host::gpu::SmiState;
use crate::version::numbers;

const GIB: u64 = 1 << 30;
/// flash-attn's nvcc jobs peak around 9 GiB each at NVCC_THREADS=4.
const FLASH_ATTN_JOB_BYTES: u64 = 9 * GIB;

/// (CUDA toolkit release, driver it ships with). Below this, minor-version compatibility applies.
const DRIVER_FLOORS: &[(&str, &str)] = &[
    ("12.8.0", "570.26"),
    ("12.8.1", "570.124.06"),
    ("12.9.0", "575.51.03"),
    ("12.9.1", "575.57.08"),
    ("13.0.0", "580.65.06"),
    ("13.0.1", "580.82.07"),
    ("13.0.2", "580.95.05"),
];

pub(super) fn definitions() -> Vec<CheckDef> {
    vec![
        CheckDef {
            id: "nvidia.driver",
            about: "nvidia-smi answers; kernel module and library agree",
            run: driver,
        },
        CheckDef {
            id: "gpu.uniform",
            about: "All GPUs are the same model (tensor parallel runs at the slowest)",
            run: uniform,
        },
        CheckDef {
            id: "driver.floor",
            about: "Driver is new enough for the CUDA toolkit (13.0.1 needs 580.82.07)",
            run: driver_floor,
        },
        CheckDef {
            id: "python.torch",
            about: "torch is installed and a CUDA build (its files; --deep: it sees the GPUs)",
            run: torch,
        },
        CheckDef {
            id: "torch.arch",
            about: "torch ships kernels for this GPU's sm_XY (else \"no kernel image\")",
            run: torch_arch,
        },
        CheckDef {
            id: "cuda.nvcc-torch",
            about: "nvcc's CUDA major equals torch's (JIT and extension builds)",
            run: nvcc_torch,
        },
        CheckDef {
            id: "toolchain.arch",
            about: "The recipe's arch lists are ones its CUDA toolkits can build (what `kiln plan` warns)",
            run: toolchain_arch,
        },
        CheckDef {
            id: "topology.p2p",
            about: "GPUs can read/write each other's memory (custom all-reduce, symm-mem)",
            run: p2p,
        },
        CheckDef {
            id: "topology.multicast",
            about: "NVLink multicast for --enable-torch-symm-mem (else it falls back)",
            run: multicast,
        },
        CheckDef {
            id: "topology.custom-allreduce",
            about: "SGLang custom all-reduce stays on (off with > 2 PCIe-only GPUs)",
            run: custom_allreduce,
        },
        CheckDef {
            id: "gpu.persistence",
            about: "Persistence mode keeps the driver loaded between runs",
            run: persistence,
        },
        CheckDef {
            id: "gpu.ecc",
            about: "ECC mode is the same on every GPU",
            run: ecc,
        },
        CheckDef {
            id: "build.max-jobs",
            about: "RAM per compile job: the MAX_JOBS a flash-attn build can take",
            run: max_jobs,
        },
        CheckDef {
            id: "host.tools",
            about: "The host tools the recipe `requires` (what `kiln up` checks before its first step)",
            run: host_tools,
        },
        CheckDef {
            id: "disk.free",
            about: "Free space for toolchains, wheels and builds",
            run: disk,
        },
        CheckDef {
            id: "flashinfer.jit-cache",
            about: "FlashInfer kernels are precompiled (else the first launch JIT-compiles)",
            run: flashinfer_cache,
        },
    ]
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / GIB as f64)
}

fn no_gpu(f: &DoctorFacts, id: &'static str) -> Option<Check> {
    f.gpus.is_empty().then(|| Check::skip(id, "no GPU"))
}

fn driver(f: &DoctorFacts) -> Check {
    let id = "nvidia.driver";
    match &f.nvidia_smi {
        SmiState::Missing => Check::warn(id, "no NVIDIA driver: nvidia-smi is not on PATH; GPU checks are skipped")
            .fix("install the NVIDIA driver (R580 or newer for CUDA 13), or run kiln doctor on the GPU host"),
        SmiState::Mismatch { message } => Check::fail(
            id,
            "NVML: Driver/library version mismatch: the driver libraries were upgraded but the old kernel module is still loaded",
        )
        .evidence(message.clone())
        .evidence(format!("kernel module: {}", f.kernel_module.as_deref().unwrap_or("unknown")))
        .fix("reboot (or unload and reload the nvidia modules), then hold the driver packages: sudo apt-mark hold 'nvidia-*' 'libnvidia-*'"),
        SmiState::Failed { message } => {
            Check::fail(id, format!("nvidia-smi failed: {}", message.lines().next().unwrap_or(""))).evidence(message.clone())
        }
        SmiState::Ok if f.gpus.is_empty() => Check::fail(id, "nvidia-smi lists no GPU").fix("check `nvidia-smi -L` and the container's device mapping"),
        SmiState::Ok => {
            let g = &f.gpus[0];
            let driver = &g.driver;
            if let Some(module) = f.kernel_module.as_ref().filter(|m| *m != driver) {
                return Check::fail(id, format!("kernel module {module} differs from the driver library {driver}"))
                    .fix("reboot so the new kernel module loads, then sudo apt-mark hold the driver packages");
            }
            let mut c = Check::pass(
                id,
                format!("driver {driver}, {}× {} (cc {}, {} MiB)", f.gpus.len(), g.name, g.compute_cap, g.memory_mib),
            );
            if !f.compute_cap_field {
                c = c.evidence("this driver has no compute_cap query field; capability derived from the GPU name");
            }
            for g in &f.gpus {
                c = c.evidence(format!("GPU {}: {} cc {} {} MiB bus {}", g.index, g.name, g.compute_cap, g.memory_mib, g.bus_id.as_deref().unwrap_or("?")));
            }
            c
        }
    }
}

fn uniform(f: &DoctorFacts) -> Check {
    let id = "gpu.uniform";
    if f.gpus.len() < 2 {
        return Check::skip(id, "fewer than two GPUs");
    }
    let mut kinds: Vec<String> = f
        .gpus
        .iter()
        .map(|g| format!("{} (cc {}, {} MiB)", g.name, g.compute_cap, g.memory_mib))
        .collect();
    kinds.sort();
    kinds.dedup();
    if kinds.len() == 1 {
        Check::pass(id, format!("{} identical GPUs", f.gpus.len()))
    } else {
        Check::warn(id, format!("mixed GPUs: {}", kinds.join("; ")))
            .fix("serve on identical GPUs: select them with CUDA_VISIBLE_DEVICES")
    }
}

/// The toolkit version the stack uses, and where that was learned.
fn toolkit(f: &DoctorFacts) -> Option<(String, &'static str)> {
    if let Some(v) = &f.toolkit_version {
        return Some((v.clone(), "recipe"));
    }
    if let Some(t) = &f.cuda.default {
        return Some((t.version.clone(), "default toolkit"));
    }
    if let Some(r) = &f.cuda.nvcc_release {
        return Some((r.clone(), "nvcc"));
    }
    f.python()?
        .torch
        .as_ref()?
        .cuda
        .clone()
        .map(|c| (c, "torch.version.cuda"))
}

fn driver_floor(f: &DoctorFacts) -> Check {
    let id = "driver.floor";
    let Some(driver) = f.gpus.first().map(|g| g.driver.clone()) else {
        return Check::skip(id, "no driver to check");
    };
    let Some((cuda, source)) = toolkit(f) else {
        return Check::skip(
            id,
            format!("driver {driver}; no CUDA toolkit or torch found to compare with"),
        );
    };
    let key = numbers(&cuda);
    let full = match key.len() {
        0 | 1 => cuda.clone(),
        2 => format!("{}.{}.0", key[0], key[1]),
        _ => format!("{}.{}.{}", key[0], key[1], key[2]),
    };
    let exact = f.driver_floor.clone().or_else(|| {
        DRIVER_FLOORS
            .iter()
            .find(|(v, _)| *v == full)
            .map(|(_, d)| d.to_string())
    });
    let compat = match key.first() {
        Some(13) => Some("580"),
        Some(12) => Some("525.60.13"),
        _ => None,
    };
    let have = numbers(&driver);
    let evidence = format!(
        "CUDA {cuda} (from {source}); floor {}; minor-version compatibility floor {}",
        exact.as_deref().unwrap_or("unknown"),
        compat.unwrap_or("unknown")
    );
    if let Some(c) = compat.filter(|c| have < numbers(c)) {
        return Check::fail(id, format!("driver {driver} is too old for CUDA {cuda} (needs ≥ {c}): CUDA init fails with \"driver version is insufficient\""))
            .fix(format!("install driver {} or newer (e.g. the R{} branch)", exact.as_deref().unwrap_or(c), c.split('.').next().unwrap_or(c)))
            .evidence(evidence);
    }
    match exact {
        Some(floor) if have < numbers(&floor) => Check::warn(
            id,
            format!("driver {driver} is below CUDA {cuda}'s {floor}: runs under minor-version compatibility (no PTX JIT of newer PTX)"),
        )
        .fix(format!("install driver {floor} or newer")),
        Some(floor) => Check::pass(id, format!("driver {driver} ≥ {floor} for CUDA {cuda}")),
        None => Check::pass(id, format!("driver {driver} meets CUDA {cuda}'s compatibility floor")),
    }
    .evidence(evidence)
}

fn torch(f: &DoctorFacts) -> Check {
    let id = "python.torch";
    let p = match &f.python {
        super::facts::PythonState::ToCome { python, step } => {
            return Check::skip(
                id,
                format!(
                    "the recipe's interpreter {} is not installed yet (step `{step}` installs it; torch is checked there)",
                    python.display()
                ),
            )
        }
        super::facts::PythonState::NotFound => {
            return Check::skip(id, "no python3 on PATH")
                .fix("pass --python PATH (or --recipe R to use its venv)")
        }
        super::facts::PythonState::Error { python, message } => {
            let python = crate::shell::quote(python);
            return Check::fail(
                id,
                format!("cannot inspect the Python environment: {message}"),
            )
            .fix(format!(
                "see where it stops: `{python} -X importtime -c pass` (a sitecustomize.py or .pth file that hangs or fails), and look for a FIFO or an unreadable *.dist-info/METADATA in its site-packages; or pass --python for another interpreter"
            ));
        }
        super::facts::PythonState::Found(p) => p,
    };
    let Some(t) = &p.torch else {
        return Check::warn(
            id,
            format!(
                "torch is not installed in {} (Python {})",
                p.executable, p.version
            ),
        )
        .fix(match &f.needs {
            Some(n) => format!(
                "kiln up {} (installs its torch), or pass --python for the serving venv",
                n.named
            ),
            None => {
                "kiln up RECIPE (installs its torch), or pass --python for the serving venv".into()
            }
        });
    };
    let version = t.version.clone().unwrap_or_else(|| "?".into());
    if let Some(e) = &t.error {
        return Check::fail(id, format!("torch's files cannot be read: {e}"))
            .fix("reinstall torch in this environment")
            .evidence(p.executable.clone());
    }
    let Some(cuda) = &t.cuda else {
        return Check::fail(id, format!("torch {version} is a CPU-only build"))
            .fix("install a CUDA build, e.g. pip install torch --index-url https://download.pytorch.org/whl/cu130");
    };
    // How many GPUs torch sees needs torch running: `--deep` (its matmul runs on each).
    let seen = f.deep.as_ref().map(|d| d.matmul.gpus.len());
    let c = match seen {
        Some(seen) if !f.gpus.is_empty() && seen != f.gpus.len() => Check::warn(
            id,
            format!(
                "torch {version} (CUDA {cuda}) sees {seen} GPU(s), nvidia-smi lists {}",
                f.gpus.len()
            ),
        )
        .fix("check CUDA_VISIBLE_DEVICES and the driver"),
        Some(seen) => Check::pass(id, format!("torch {version} (CUDA {cuda}), sees {seen} GPU(s)")),
        None => Check::pass(
            id,
            format!("torch {version} (CUDA {cuda}), read from its files (`--deep` checks that it sees the GPUs)"),
        ),
    };
    c.evidence(format!(
        "{} (Python {}){}",
        p.executable,
        p.version,
        if p.cached {
            "; facts cached until its site-packages change"
        } else {
            ""
        }
    ))
}

/// (major, minor) from "sm_120", "sm_90a", "compute_120".
fn arch_cc(arch: &str) -> Option<(bool, u32, u32)> {
    let (ptx, rest) = match arch.strip_prefix("sm_") {
        Some(r) => (false, r),
        None => (true, arch.strip_prefix("compute_")?),
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let n: u32 = digits.parse().ok()?;
    Some((ptx, n / 10, n % 10))
}

fn torch_arch(f: &DoctorFacts) -> Check {
    let id = "torch.arch";
    let Some(t) = f
        .python()
        .and_then(|p| p.torch.as_ref())
        .filter(|t| !t.arch_list.is_empty())
    else {
        return Check::skip(id, "no torch arch list (torch missing or a CPU build)");
    };
    let Some((major, minor)) = f.target_cc() else {
        return Check::skip(id, "no GPU to check against");
    };
    let want = format!("sm_{major}{minor}");
    let arches: Vec<(bool, u32, u32)> = t.arch_list.iter().filter_map(|a| arch_cc(a)).collect();
    let evidence = format!(
        "device code in {}: {}",
        t.arch_source.as_deref().unwrap_or("torch's CUDA libraries"),
        t.arch_list.join(" ")
    );
    let sass = arches
        .iter()
        .any(|&(ptx, ma, mi)| !ptx && ma == major && mi <= minor);
    let ptx = arches
        .iter()
        .any(|&(ptx, ma, mi)| ptx && (ma, mi) <= (major, minor));
    if sass {
        Check::pass(id, format!("torch has kernels for {want}")).evidence(evidence)
    } else if ptx {
        Check::warn(id, format!("torch has no {want} kernels, only PTX: the driver JIT-compiles them at first use (slow start)"))
            .fix("install a torch build with native kernels for this GPU (cu128 or cu130 wheels include sm_120)")
            .evidence(evidence)
    } else {
        Check::fail(id, format!("torch lacks {want}: CUDA calls fail with \"no kernel image is available for execution on the device\""))
            .fix("reinstall torch from a CUDA index whose wheels include it: pip install torch --index-url https://download.pytorch.org/whl/cu130")
            .evidence(evidence)
    }
}

fn nvcc_torch(f: &DoctorFacts) -> Check {
    let id = "cuda.nvcc-torch";
    let torch_cuda = f
        .python()
        .and_then(|p| p.torch.as_ref())
        .and_then(|t| t.cuda.clone());
    let (Some(nvcc), Some(tc)) = (f.cuda.nvcc_release.clone(), torch_cuda) else {
        return Check::skip(id, "needs both nvcc and a CUDA build of torch");
    };
    let path = f
        .cuda
        .nvcc_path
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let major = |v: &str| v.split('.').next().unwrap_or("").to_string();
    if major(&nvcc) == major(&tc) {
        return Check::pass(
            id,
            format!("nvcc {nvcc} and torch CUDA {tc} share major {}", major(&tc)),
        )
        .evidence(path);
    }
    let matching = f
        .cuda
        .toolkits
        .iter()
        .find(|t| major(&t.version) == major(&tc));
    let fix = match matching {
        Some(t) => format!(
            "export CUDA_HOME={} PATH={}/bin:$PATH",
            t.path.display(),
            t.path.display()
        ),
        None => format!(
            "install CUDA {tc} ({} installs the recipe's toolkit) and point CUDA_HOME at it",
            f.needs
                .as_ref()
                .map_or("kiln up RECIPE".into(), |n| format!("kiln up {}", n.named))
        ),
    };
    Check::fail(id, format!("nvcc {nvcc} ({path}) but torch is built for CUDA {tc}: flash-attn builds and FlashInfer JIT fail"))
        .fix(fix)
}

fn toolchain_arch(f: &DoctorFacts) -> Check {
    let id = "toolchain.arch";
    let Some(warnings) = &f.toolchain_warnings else {
        return Check::skip(id, "no recipe named (`--recipe R` checks its arch lists)");
    };
    let Some(first) = warnings.first() else {
        return Check::pass(id, "the recipe's arch lists suit its CUDA toolkits");
    };
    let mut c = Check::warn(id, first.clone())
        .fix("`kiln plan RECIPE` shows the recipe's toolkits; set the arch list the warning names");
    for w in warnings {
        c = c.evidence(w.clone());
    }
    c
}

fn p2p(f: &DoctorFacts) -> Check {
    let id = "topology.p2p";
    if f.gpus.len() < 2 {
        return Check::skip(id, "fewer than two GPUs");
    }
    let Some(m) = &f.p2p else {
        return Check::skip(id, "`nvidia-smi topo -p2p rw` gave no matrix");
    };
    let bad: Vec<String> = m
        .pairs()
        .filter(|(_, _, c)| *c != "OK")
        .map(|(i, j, c)| format!("{}-{}: {c}", m.gpus[i], m.gpus[j]))
        .collect();
    if bad.is_empty() {
        Check::pass(
            id,
            format!("peer read/write OK between all {} GPUs", m.gpus.len()),
        )
    } else {
        Check::warn(id, format!("no peer access for {} GPU pair(s) ({}): custom all-reduce and symm-mem are off, NCCL goes through host memory", bad.len(), bad[0]))
            .fix("GNS on GeForce cards means the stock driver disables P2P; on servers check ACS/IOMMU settings in the BIOS")
            .evidence(bad.join(", "))
    }
}

fn multicast(f: &DoctorFacts) -> Check {
    let id = "topology.multicast";
    if f.gpus.len() < 2 {
        return Check::skip(id, "fewer than two GPUs");
    }
    let Some(m) = &f.topology else {
        return Check::skip(id, "`nvidia-smi topo -m` gave no matrix");
    };
    let links = format!("links: {}", m.kinds().join(", "));
    if !f.server_flags.is_empty() && !f.flag_requested("--enable-torch-symm-mem") {
        return Check::pass(id, "no profile passes --enable-torch-symm-mem").evidence(links);
    }
    let drop = "drop --enable-torch-symm-mem: all-reduce falls back to NCCL (and custom all-reduce where allowed)";
    if m.pcie_only() {
        Check::warn(id, "PCIe-only topology (no NV# links): no multicast, so SGLang's symm-mem communicator logs \"multicast operations are not supported\" and disables itself")
            .fix(drop)
            .evidence(links)
    } else if f.env_is("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1") {
        Check::warn(id, "TORCH_SYMM_MEM_DISABLE_MULTICAST=1 is set: multicast_ptr is 0 and SGLang's symm-mem communicator disables itself")
            .fix(drop)
            .evidence(links)
    } else {
        Check::pass(id, "NVLink between the GPUs; multicast also needs NVSwitch (not probed: kiln never creates multicast objects)").evidence(links)
    }
}

fn custom_allreduce(f: &DoctorFacts) -> Check {
    let id = "topology.custom-allreduce";
    if f.gpus.len() < 2 {
        return Check::skip(id, "fewer than two GPUs");
    }
    let Some(m) = &f.topology else {
        return Check::skip(id, "`nvidia-smi topo -m` gave no matrix");
    };
    if f.gpus.len() > 2 && m.pcie_only() {
        Check::warn(id, format!("{} PCIe-only GPUs: SGLang turns custom all-reduce off (\"not supported on more than two PCIe-only GPUs\"); NCCL carries all-reduce", f.gpus.len()))
            .fix("expected on PCIe; pass --disable-custom-all-reduce to make it explicit and silence the warning")
            .evidence(format!("links: {}", m.kinds().join(", ")))
    } else {
        Check::pass(
            id,
            format!(
                "custom all-reduce can run ({} GPUs, links {})",
                f.gpus.len(),
                m.kinds().join(", ")
            ),
        )
    }
}

/// Warn when a GPU reports persistence mode `Disabled`; any other answer passes, a GPU that
/// does not report it (`[N/A]`, empty, or no such column: some vGPU and WSL drivers) included,
/// and the summary names those.
fn persistence(f: &DoctorFacts) -> Check {
    let id = "gpu.persistence";
    if let Some(c) = no_gpu(f, id) {
        return c;
    }
    let gpus_where = |want: fn(Option<&str>) -> bool| -> Vec<String> {
        f.gpus
            .iter()
            .filter(|g| want(g.persistence_mode.as_deref()))
            .map(|g| g.index.to_string())
            .collect()
    };
    let off = gpus_where(|m| m == Some("Disabled"));
    let unreported = gpus_where(|m| m.is_none());
    if !off.is_empty() {
        return Check::warn(id, format!("persistence mode off on GPU {}: each start re-initialises the driver (seconds, and clocks reset)", off.join(", ")))
            .fix("sudo nvidia-smi -pm 1   (or enable the nvidia-persistenced service)");
    }
    if unreported.is_empty() {
        return Check::pass(id, "persistence mode on");
    }
    let on = if unreported.len() == f.gpus.len() {
        ""
    } else {
        "persistence mode on elsewhere, "
    };
    Check::pass(
        id,
        format!(
            "{on}persistence mode not reported by GPU {} (the driver answers [N/A] or has no such field): not a warning",
            unreported.join(", ")
        ),
    )
}

fn ecc(f: &DoctorFacts) -> Check {
    let id = "gpu.ecc";
    if let Some(c) = no_gpu(f, id) {
        return c;
    }
    let mut modes: Vec<&str> = f
        .gpus
        .iter()
        .filter_map(|g| g.ecc_mode.as_deref())
        .collect();
    if modes.is_empty() {
        return Check::skip(id, "ECC not reported (not supported by these GPUs)");
    }
    modes.sort_unstable();
    modes.dedup();
    if modes.len() == 1 {
        Check::pass(id, format!("ECC {} on all GPUs", modes[0].to_lowercase()))
    } else {
        Check::warn(id, format!("ECC differs between GPUs ({}): usable memory differs, tensor parallel sizes to the smallest", modes.join(" / ")))
            .fix("sudo nvidia-smi -e 1 (or -e 0) on the odd GPUs, then reboot")
    }
}

fn max_jobs(f: &DoctorFacts) -> Check {
    let id = "build.max-jobs";
    let Some(avail) = f.system.mem_available_bytes else {
        return Check::skip(id, "MemAvailable not readable");
    };
    let jobs = ((avail / FLASH_ATTN_JOB_BYTES) as usize).min(f.system.cores);
    let evidence = format!(
        "{} available of {}, {} cores, 9 GiB per flash-attn job at NVCC_THREADS=4",
        gib(avail),
        f.system.mem_total_bytes.map(gib).unwrap_or_default(),
        f.system.cores
    );
    if jobs == 0 {
        return Check::fail(
            id,
            format!(
                "only {} RAM available: a flash-attn build (≈ 9 GiB per job) will be OOM-killed",
                gib(avail)
            ),
        )
        .fix("free memory or build on a bigger machine; at least MAX_JOBS=1 NVCC_THREADS=2")
        .evidence(evidence);
    }
    let set = f.env.get("MAX_JOBS").and_then(|v| v.parse::<usize>().ok());
    match set {
        Some(n) if n > jobs => Check::warn(
            id,
            format!("MAX_JOBS={n} is set but RAM allows {jobs}: the build may be OOM-killed"),
        )
        .fix(format!("export MAX_JOBS={jobs}")),
        _ => Check::pass(
            id,
            format!(
                "MAX_JOBS={jobs} for flash-attn ({} available ÷ 9 GiB per job)",
                gib(avail)
            ),
        ),
    }
    .evidence(evidence)
}

fn host_tools(f: &DoctorFacts) -> Check {
    let id = "host.tools";
    let Some(tools) = &f.host_tools else {
        return Check::skip(
            id,
            "no recipe (`--recipe R` checks the host tools it requires)",
        );
    };
    let Some(first) = tools.problems.first() else {
        if tools.found.is_empty() {
            return Check::skip(id, "the recipe requires no host tools");
        }
        let names: Vec<&str> = tools
            .found
            .iter()
            .filter_map(|l| l.split(": ").next())
            .collect();
        let mut c = Check::pass(id, format!("{} found", names.join(", ")));
        for line in &tools.found {
            c = c.evidence(line.clone());
        }
        return c;
    };
    // The first problem in full, the others by name: the line says how many there are.
    let others: Vec<&str> = tools.problems[1..]
        .iter()
        .filter_map(|l| l.split(": ").next())
        .collect();
    let summary = if others.is_empty() {
        first.clone()
    } else {
        format!("{first}; also {}", others.join(", "))
    };
    let mut c = Check::fail(id, summary);
    for line in tools.problems.iter().chain(&tools.found) {
        c = c.evidence(line.clone());
    }
    match &tools.fix {
        Some(fix) => c.fix(fix.clone()),
        None => c,
    }
}

fn disk(f: &DoctorFacts) -> Check {
    let id = "disk.free";
    let mut worst = Check::skip(id, "no directory to check");
    // A recipe without a toolchain build (the CPU demo: 0.6 GiB of venv, sources and build)
    // needs far less than one that installs CUDA and torch.
    let light = f.needs.as_ref().is_some_and(|n| !n.toolchain);
    let (fail_below, warn_below) = if light {
        (GIB, 3 * GIB)
    } else {
        (10 * GIB, 50 * GIB)
    };
    for d in &f.disks {
        let Some(free) = d.free_bytes else { continue };
        let line = format!("{} free at {} ({})", gib(free), d.label, d.path.display());
        let c = if free < fail_below {
            Check::fail(
                id,
                if light {
                    format!("only {line}: the recipe's venv, sources and build take about 1 GiB")
                } else {
                    format!("only {line}: toolchains and builds need tens of GiB")
                },
            )
            .fix("free space or pass --state-dir on a bigger disk")
        } else if free < warn_below {
            Check::warn(
                id,
                if light {
                    format!("{line}; the recipe's venv, sources and build take about 1 GiB")
                } else {
                    format!("{line}; a CUDA toolkit, torch and a flash-attn build take ≈ 30 GiB")
                },
            )
            .fix("free space or move the state dir")
        } else {
            Check::pass(id, line.clone())
        };
        if c.status >= worst.status || worst.status == super::Status::Skip {
            worst = Check {
                evidence: worst.evidence,
                ..c
            };
        }
        worst.evidence.push(line);
    }
    worst
}

fn flashinfer_cache(f: &DoctorFacts) -> Check {
    let id = "flashinfer.jit-cache";
    let Some(fi) = f.packages.get("flashinfer-python") else {
        return Check::skip(id, "flashinfer-python is not installed");
    };
    if let Some(jit) = f.packages.get("flashinfer-jit-cache") {
        let base = |v: &str| v.split('+').next().unwrap_or(v).to_string();
        return if base(jit) == base(fi) {
            Check::pass(
                id,
                format!("flashinfer-jit-cache {jit} matches flashinfer-python {fi}"),
            )
        } else {
            Check::warn(id, format!("flashinfer-jit-cache {jit} does not match flashinfer-python {fi}: kernels are JIT-compiled anyway"))
                .fix(format!("pip install flashinfer-jit-cache=={fi} --index-url https://flashinfer.ai/whl/cu130"))
        };
    }
    match &f.flashinfer_cache {
        Some(c) if c.files > 0 => Check::pass(
            id,
            format!(
                "{} compiled FlashInfer modules in {}",
                c.files,
                c.dir.display()
            ),
        ),
        cache => {
            let cu = f
                .python()
                .and_then(|p| p.torch.as_ref())
                .and_then(|t| t.cuda.as_deref())
                .map_or_else(|| "cu130".into(), |c| format!("cu{}", c.replace('.', "")));
            let mut c = Check::warn(id, "no FlashInfer JIT cache: the first server start compiles kernels (minutes; one report: +678 s)")
                .fix(format!("pip install flashinfer-jit-cache=={fi} --index-url https://flashinfer.ai/whl/{cu}"));
            if let Some(cache) = cache {
                c = c.evidence(format!("{} holds no compiled modules", cache.dir.display()));
            }
            c
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_order_numerically() {
        assert!(numbers("580.159.04") > numbers("580.95.05"));
        assert!(numbers("570.172.08") < numbers("580"));
    }

    #[test]
    fn arch_names_give_capabilities() {
        assert_eq!(arch_cc("sm_120"), Some((false, 12, 0)));
        assert_eq!(arch_cc("sm_90a"), Some((false, 9, 0)));
        assert_eq!(arch_cc("compute_120"), Some((true, 12, 0)));
        assert_eq!(arch_cc("sm_86"), Some((false, 8, 6)));
    }
}
