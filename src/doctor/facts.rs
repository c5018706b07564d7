//! Everything the checks judge, collected once (in parallel where it waits on other programs).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::deep::DeepFacts;
use super::sglang::StackSources;
use crate::host::cuda::{self, CudaFacts};
use crate::host::gpu::{self, Gpu, SmiState};
use crate::host::python::{self, PythonFacts};
use crate::host::system::{self, SystemFacts};
use crate::host::topology::{self, Matrix};

/// Environment variables worth recording (never secrets: only these names are read).
pub(crate) const ENV_KEYS: &[&str] = &[
    "CUDA_HOME",
    "CUDA_VISIBLE_DEVICES",
    "TORCH_CUDA_ARCH_LIST",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NCCL_NVLS_ENABLE",
    "NVSHMEM_DISABLE_NVLS",
    "MAX_JOBS",
    "NVCC_THREADS",
    "FLASHINFER_WORKSPACE_BASE",
];

/// What the command line (and a recipe) tell the collector.
#[derive(Debug, Clone, Default)]
pub(crate) struct Inputs {
    /// The interpreter to inspect; None means `python3` on PATH (if any), unless
    /// `python_to_come` says the recipe installs its own.
    pub python: Option<String>,
    /// The recipe's interpreter that is not there yet, and the step that installs it: the
    /// Python checks wait for it (the system python is not what the recipe runs).
    pub python_to_come: Option<(PathBuf, String)>,
    /// Read SGLang/FlashInfer sources and versions here instead of the interpreter's site-packages.
    pub site_packages: Option<PathBuf>,
    pub deep: bool,
    pub state_dir: PathBuf,
    /// Where interpreter facts are cached (`StatePaths::python_facts`); None collects them
    /// afresh every time.
    pub python_facts: Option<PathBuf>,
    /// Install prefix (from a recipe) whose free space matters too.
    pub prefix: Option<PathBuf>,
    /// A pinned compute capability (`KILN_FACT_GPU_CC`) used when no GPU can be queried.
    pub pinned_cc: Option<String>,
    /// CUDA toolkit version the stack targets ("13.0.1"), from a recipe.
    pub toolkit_version: Option<String>,
    /// Driver floor the recipe states for that toolkit.
    pub driver_floor: Option<String>,
    /// Server flags a recipe's profiles pass (e.g. `--enable-torch-symm-mem`).
    pub server_flags: Vec<String>,
    /// What the recipe doctor follows needs of the host (None: no recipe, every check runs).
    pub needs: Option<super::Needs>,
    /// Built binaries whose device code `sass.packages` reads (a recipe's llama-server).
    pub binaries: Vec<PathBuf>,
    /// What `kiln plan` warns about the recipe's toolchain (arch lists its nvcc cannot build).
    pub toolchain_warnings: Option<Vec<String>>,
}

/// The host tools a recipe `requires`, as `kiln up` checks them before its first step.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct HostTools {
    /// `c++: /usr/bin/c++ 12.2.0`, one per tool found.
    pub found: Vec<String>,
    /// `c++: not found on PATH (needed by the recipe)`, one per tool missing, too old or broken.
    pub problems: Vec<String>,
    /// The command that installs what is missing.
    pub fix: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub(crate) enum PythonState {
    /// No interpreter given and none on PATH.
    NotFound,
    /// The recipe's own interpreter, which a step installs, is not there yet.
    ToCome {
        python: PathBuf,
        step: String,
    },
    /// The interpreter did not give its facts (it failed, hung, or wrote too much).
    Error {
        python: String,
        message: String,
    },
    Found(Box<PythonFacts>),
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Disk {
    pub label: String,
    pub path: PathBuf,
    pub free_bytes: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct FlashinferCache {
    pub dir: PathBuf,
    pub files: usize,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct DoctorFacts {
    pub system: SystemFacts,
    pub disks: Vec<Disk>,
    pub nvidia_smi: SmiState,
    pub gpus: Vec<Gpu>,
    pub compute_cap_field: bool,
    pub kernel_module: Option<String>,
    pub topology: Option<Matrix>,
    pub p2p: Option<Matrix>,
    pub cuda: CudaFacts,
    pub python: PythonState,
    /// Where SGLang/FlashInfer were read from.
    pub site_packages: Option<PathBuf>,
    /// Versions of the stack's packages (PEP 503 names).
    pub packages: BTreeMap<String, String>,
    pub sources: StackSources,
    pub flashinfer_cache: Option<FlashinferCache>,
    pub env: BTreeMap<String, String>,
    pub pinned_cc: Option<String>,
    pub toolkit_version: Option<String>,
    pub driver_floor: Option<String>,
    pub server_flags: Vec<String>,
    pub needs: Option<super::Needs>,
    pub toolchain_warnings: Option<Vec<String>>,
    /// The host tools the recipe and its steps `require`, checked (None: no recipe).
    pub host_tools: Option<HostTools>,
    /// What each compiled package carries ([`super::code`]).
    pub compiled: Vec<super::code::PackageCode>,
    pub deep: Option<DeepFacts>,
}

impl DoctorFacts {
    /// The compute capability the stack must support: the first GPU's, else the pinned one.
    pub(crate) fn target_cc(&self) -> Option<(u32, u32)> {
        self.gpus
            .iter()
            .find_map(Gpu::cc)
            .or_else(|| self.pinned_cc.as_deref().and_then(gpu::parse_cc))
    }

    pub(crate) fn python(&self) -> Option<&PythonFacts> {
        match &self.python {
            PythonState::Found(p) => Some(p.as_ref()),
            _ => None,
        }
    }

    pub(crate) fn env_is(&self, key: &str, value: &str) -> bool {
        self.env.get(key).is_some_and(|v| v == value)
    }

    /// Whether a recipe's profile passes this server flag.
    pub(crate) fn flag_requested(&self, flag: &str) -> bool {
        self.server_flags.iter().any(|f| f == flag)
    }
}

/// Collect every fact; nothing here fails: what cannot be learned is recorded as absent.
pub(crate) fn collect(inputs: &Inputs) -> DoctorFacts {
    let python_cmd = inputs.python.clone().or_else(|| {
        inputs.python_to_come.is_none().then(|| {
            which::which("python3")
                .ok()
                .map(|p| p.display().to_string())
        })?
    });
    let (query, topo, p2p, cuda_facts, python_state) = std::thread::scope(|s| {
        let query = s.spawn(gpu::query);
        let topo = s.spawn(|| {
            gpu::smi(&["topo", "-m"])
                .ok()
                .and_then(|t| topology::parse_matrix(&t))
        });
        let p2p = s.spawn(|| {
            gpu::smi(&["topo", "-p2p", "rw"])
                .ok()
                .and_then(|t| topology::parse_matrix(&t))
        });
        let cuda_facts = s.spawn(|| cuda::collect(Path::new("/usr/local")));
        let python_state = s.spawn(|| match (&python_cmd, &inputs.python_to_come) {
            (None, Some((python, step))) => PythonState::ToCome {
                python: python.clone(),
                step: step.clone(),
            },
            (None, None) => PythonState::NotFound,
            (Some(cmd), _) => match inputs.python_facts.as_deref().map_or_else(
                || python::collect(cmd),
                |dir| python::collect_cached(cmd, dir),
            ) {
                Ok(f) => PythonState::Found(Box::new(f)),
                Err(message) => PythonState::Error {
                    python: cmd.clone(),
                    message,
                },
            },
        });
        let join = "fact collection does not panic";
        (
            query.join().expect(join),
            topo.join().expect(join),
            p2p.join().expect(join),
            cuda_facts.join().expect(join),
            python_state.join().expect(join),
        )
    });
    let which_smi = query.smi == SmiState::Ok;
    let site_packages = inputs
        .site_packages
        .clone()
        .or_else(|| match &python_state {
            PythonState::Found(p) => p.purelib.clone(),
            _ => None,
        });
    let mut packages = match &python_state {
        PythonState::Found(p) => p
            .packages
            .iter()
            .map(|(k, v)| (crate::dist::normalize(k), v.clone()))
            .collect(),
        _ => BTreeMap::new(),
    };
    if let Some(site) = &inputs.site_packages {
        packages.extend(python::dist_versions(site));
    }
    let sources = site_packages
        .as_deref()
        .map(super::sglang::read_sources)
        .unwrap_or_default();
    let mut disks = vec![Disk {
        label: "state dir".into(),
        free_bytes: system::free_disk_bytes(&inputs.state_dir),
        path: inputs.state_dir.clone(),
    }];
    if let Some(prefix) = &inputs.prefix {
        disks.push(Disk {
            label: "install prefix".into(),
            free_bytes: system::free_disk_bytes(prefix),
            path: prefix.clone(),
        });
    }
    let env: BTreeMap<String, String> = ENV_KEYS
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect();
    let gpu_count = query.gpus.len();
    let python_for_deep = match &python_state {
        PythonState::Found(p) => Some(p.executable.clone()),
        _ => None,
    };
    let compiled = super::code::collect(site_packages.as_deref(), &inputs.binaries);
    DoctorFacts {
        compiled,
        system: system::collect(),
        disks,
        nvidia_smi: query.smi,
        gpus: query.gpus,
        compute_cap_field: query.compute_cap_field,
        kernel_module: gpu::kernel_module_version(),
        topology: if which_smi { topo } else { None },
        p2p: if which_smi { p2p } else { None },
        cuda: cuda_facts,
        python: python_state,
        site_packages,
        packages,
        sources,
        flashinfer_cache: flashinfer_cache(&env),
        env,
        pinned_cc: inputs.pinned_cc.clone(),
        toolkit_version: inputs.toolkit_version.clone(),
        driver_floor: inputs.driver_floor.clone(),
        server_flags: inputs.server_flags.clone(),
        needs: inputs.needs.clone(),
        toolchain_warnings: inputs.toolchain_warnings.clone(),
        host_tools: None,
        deep: (inputs.deep && which_smi && gpu_count > 0)
            .then(|| python_for_deep.map(|py| super::deep::collect(&py, gpu_count)))
            .flatten(),
    }
}

/// FlashInfer's JIT workspace (`$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer`, else `~/.cache/flashinfer`).
fn flashinfer_cache(env: &BTreeMap<String, String>) -> Option<FlashinferCache> {
    let base = env
        .get("FLASHINFER_WORKSPACE_BASE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(PathBuf::from))?;
    let dir = base.join(".cache/flashinfer");
    let files = count_files(&dir, 6);
    Some(FlashinferCache { dir, files })
}

fn count_files(dir: &Path, depth: u32) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() && depth > 0 => count_files(&e.path(), depth - 1),
            Ok(t) if t.is_file() => usize::from(e.path().extension().is_some_and(|x| x == "so")),
            _ => 0,
        })
        .sum()
}
