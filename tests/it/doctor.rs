//! `kiln doctor` end to end: real nvidia-smi captures replayed by tests/fixtures/gpu/bin/nvidia-smi
//! (plus scenarios derived from their format), real sglang / flashinfer wheels from PyPI.

use std::io::Read;
use std::path::PathBuf;

use serde_json::Value;

use crate::common::{copy_tree, gpu_fixtures, scrub, wheel_site, Workspace};

/// `kiln doctor ARGS` against a GPU scenario (None: a host without nvidia-smi).
fn doctor(ws: &Workspace, scenario: Option<&str>) -> assert_cmd::Command {
    let mut cmd = match scenario {
        Some(s) => ws.kiln_on_gpu_host(s),
        None => ws.kiln_without_gpu(),
    };
    cmd.arg("doctor")
        .env("FLASHINFER_WORKSPACE_BASE", ws.path())
        .env_remove("TORCH_SYMM_MEM_DISABLE_MULTICAST")
        .env_remove("CUDA_HOME")
        .env_remove("MAX_JOBS")
        .env_remove("KILN_FACT_GPU_CC");
    cmd
}

/// Run with `--json`; returns (exit code, report).
fn json(cmd: &mut assert_cmd::Command) -> (i32, Value) {
    let out = cmd.arg("--json").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let report = crate::reporter::json_event(&text, "doctor");
    (out.status.code().unwrap(), report)
}

fn check<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no check {id}"))
}

fn status(report: &Value, id: &str) -> String {
    check(report, id)["status"].as_str().unwrap().to_string()
}

fn summary(report: &Value, id: &str) -> String {
    check(report, id)["summary"].as_str().unwrap().to_string()
}

/// The exit code must be the worst status: fail 2, warn 1, else 0.
fn assert_exit_matches(code: i32, report: &Value) {
    let statuses: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["status"].as_str().unwrap())
        .collect();
    let want = if statuses.contains(&"fail") {
        2
    } else {
        i32::from(statuses.contains(&"warn"))
    };
    assert_eq!(code, want, "{statuses:?}");
}

/// One site-packages holding both the sglang and flashinfer wheels (symlinks into the cache).
fn stack_site(ws: &Workspace, sglang: &str, flashinfer: &str) -> PathBuf {
    let site = ws.path().join("site");
    std::fs::create_dir_all(&site).unwrap();
    for wheel in [wheel_site(sglang), wheel_site(flashinfer)] {
        for entry in std::fs::read_dir(&wheel).unwrap().flatten() {
            let name = entry.file_name();
            if name.to_string_lossy().starts_with('.') {
                continue;
            }
            let _ = std::os::unix::fs::symlink(entry.path(), site.join(name));
        }
    }
    site
}

#[test]
fn a_host_without_gpu_or_torch_gets_a_clean_report() {
    let ws = Workspace::new();
    // No GPU: doctor follows the recipe `kiln up` picks here, the CPU demo, which needs no
    // driver and no torch (issue 18: exit 0 on a healthy CPU box). Its launch preflight checks
    // the recipe's port: a free one, not the shipped 30080, which a server of the host may hold
    // (CI runs with the host's network).
    let port = crate::serve::free_port();
    let (code, report) = json(doctor(&ws, None).args(["--set", &format!("port={port}")]));
    assert_exit_matches(code, &report);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(
        summary(&report, "launch.port"),
        format!("port {port} is free"),
        "{report:#}"
    );
    assert_eq!(report["facts"]["needs"]["recipe"], "tiny-cpu");
    assert_eq!(status(&report, "nvidia.driver"), "skip");
    assert_eq!(
        summary(&report, "nvidia.driver"),
        "recipe `tiny-cpu` needs no NVIDIA GPU"
    );
    for id in [
        "driver.floor",
        "python.torch",
        "torch.arch",
        "topology.multicast",
        "gpu.persistence",
        "sglang.symm-mem-table",
        "deep.matmul",
    ] {
        assert_eq!(status(&report, id), "skip", "{id}");
    }
    assert_eq!(status(&report, "disk.free"), "pass");
    // The CPU demo's host tools (a compiler, python3 with venv) are what the test host has.
    assert_eq!(status(&report, "host.tools"), "pass", "{report:#}");
    assert_eq!(report["facts"]["nvidia_smi"]["state"], "missing");
    assert!(report["facts"]["system"]["cores"].as_u64().unwrap() >= 1);
    // The human form says the same, one line per check.
    let out = doctor(&ws, None)
        .args(["--set", &format!("port={port}")])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("kiln doctor: no NVIDIA GPU;"), "{text}");
    assert!(text.contains("recipe `tiny-cpu`"), "{text}");
    // The checks that do not apply are a count, listed with -v.
    assert!(!text.contains("[-]"), "{text}");
    let skipped = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "skip")
        .count();
    assert!(
        text.contains(&format!(
            " {skipped} not applicable to this host and recipe). `kiln doctor -v` lists them."
        )),
        "{text}"
    );
    assert_eq!(out.status.code(), Some(code));
    let verbose = doctor(&ws, None)
        .args(["--set", &format!("port={port}"), "-v"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&verbose.stdout);
    assert!(listed.contains("[-] nvidia.driver"), "{listed}");
    assert_eq!(listed.matches("\n[-] ").count(), skipped, "{listed}");
    // A GPU recipe named on the same host needs the driver: its absence is a warning again,
    // and the torch fix names that recipe's command.
    let (code, report) = json(doctor(&ws, None).args(["--recipe", "glm5-nvfp4-sm120"]));
    assert_exit_matches(code, &report);
    assert_eq!(status(&report, "nvidia.driver"), "warn");
    assert!(summary(&report, "nvidia.driver").contains("nvidia-smi is not on PATH"));
    if status(&report, "python.torch") == "warn" {
        assert!(
            check(&report, "python.torch")["fix"]
                .as_str()
                .unwrap()
                .starts_with("kiln up glm5-nvfp4-sm120 (installs its torch)"),
            "{report:#}"
        );
    }
}

#[test]
fn real_h200_captures_give_driver_topology_and_gpu_facts() {
    let ws = Workspace::new();
    let (code, report) = json(&mut doctor(&ws, Some("h200x2")));
    assert_exit_matches(code, &report);
    assert_eq!(status(&report, "nvidia.driver"), "pass");
    assert!(summary(&report, "nvidia.driver")
        .contains("driver 580.159.04, 2× NVIDIA H200 (cc 9.0, 143771 MiB)"));
    let gpus = report["facts"]["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 2);
    assert_eq!(gpus[1]["bus_id"], "00000000:00:07.0");
    assert_eq!(report["facts"]["topology"]["cells"][0][1], "NV18");
    for id in [
        "gpu.uniform",
        "topology.p2p",
        "topology.multicast",
        "topology.custom-allreduce",
        "gpu.persistence",
        "gpu.ecc",
    ] {
        assert_eq!(
            status(&report, id),
            "pass",
            "{id}: {}",
            summary(&report, id)
        );
    }
    // The device machine sets TORCH_SYMM_MEM_DISABLE_MULTICAST=1: symm-mem then falls back.
    let (_, report) =
        json(doctor(&ws, Some("h200x2")).env("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"));
    assert_eq!(status(&report, "topology.multicast"), "warn");
    assert!(summary(&report, "topology.multicast").contains("TORCH_SYMM_MEM_DISABLE_MULTICAST=1"));
}

#[test]
fn sm120_pcie_box_with_sglang_0_5_9_predicts_key_error_12_and_silent_fusion() {
    let ws = Workspace::new();
    let site = stack_site(&ws, "sglang==0.5.9", "flashinfer-python==0.6.3");
    let (code, report) = json(
        doctor(&ws, Some("derived-8x-rtx-pro-6000-pcie"))
            .arg("--site-packages")
            .arg(&site),
    );
    assert_eq!(code, 2);
    assert_exit_matches(code, &report);
    assert_eq!(status(&report, "sglang.symm-mem-table"), "fail");
    assert!(summary(&report, "sglang.symm-mem-table").contains("`KeyError: 12`"));
    assert_eq!(
        check(&report, "sglang.symm-mem-table")["fix"]
            .as_str()
            .unwrap(),
        format!(
            "kiln patch apply sglang-0.5.9-sm120 --site-packages {} --skip-experimental   (or drop --enable-torch-symm-mem)",
            site.display()
        )
    );
    assert_eq!(status(&report, "sglang.allreduce-fusion-gate"), "warn");
    assert!(summary(&report, "sglang.allreduce-fusion-gate").contains("silently ignored on cc 12"));
    assert_eq!(status(&report, "flashinfer.comm-jit-gate"), "skip");
    assert_eq!(status(&report, "sglang.symm-mem-multimem"), "pass");
    assert_eq!(status(&report, "topology.multicast"), "warn");
    assert_eq!(status(&report, "topology.custom-allreduce"), "warn");
    assert_eq!(report["facts"]["packages"]["sglang"], "0.5.9");
    assert_eq!(report["facts"]["packages"]["flashinfer-python"], "0.6.3");

    // What a person sees (machine-dependent checks left out; paths and the interpreter scrubbed).
    let ids = [
        "nvidia.driver",
        "gpu.uniform",
        "topology.p2p",
        "topology.multicast",
        "topology.custom-allreduce",
        "gpu.persistence",
        "gpu.ecc",
        "sglang.symm-mem-table",
        "sglang.symm-mem-multimem",
        "sglang.allreduce-fusion-gate",
        "flashinfer.comm-jit-gate",
    ];
    let out = doctor(&ws, Some("derived-8x-rtx-pro-6000-pcie"))
        .arg("--site-packages")
        .arg(&site)
        .args(ids)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = scrub(&String::from_utf8_lossy(&out.stdout), &ws);
    insta::with_settings!({filters => vec![(r"Python \S+ at \S+", "Python [VERSION] at [PYTHON]")]}, {
        insta::assert_snapshot!("doctor_sm120_sglang_0_5_9", text);
    });
}

#[test]
fn half_patched_sglang_predicts_the_graph_capture_crash_and_the_table_patch_passes() {
    let ws = Workspace::new();
    let site = ws.path().join("site");
    copy_tree(&wheel_site("sglang==0.5.9"), &site);
    for entry in std::fs::read_dir(wheel_site("flashinfer-python==0.6.3"))
        .unwrap()
        .flatten()
    {
        let _ = std::os::unix::fs::symlink(entry.path(), site.join(entry.file_name()));
    }
    // The table patch (key 12 like key 10) and the SGLang half of the fusion gate, FlashInfer untouched.
    let utils = site.join("sglang/srt/distributed/device_communicators/all_reduce_utils.py");
    let text = std::fs::read_to_string(&utils).unwrap();
    std::fs::write(
        &utils,
        text.replacen(
            "    10: {",
            "    12: {\n        2: 64 * MiB,\n    },\n    10: {",
            1,
        ),
    )
    .unwrap();
    let comm = site.join("sglang/srt/layers/communicator.py");
    let text = std::fs::read_to_string(&comm).unwrap();
    assert!(text.contains("(_is_sm90_supported or _is_sm100_supported)"));
    std::fs::write(
        &comm,
        text.replace(
            "(_is_sm90_supported or _is_sm100_supported)",
            "(_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)",
        ),
    )
    .unwrap();

    let (_, report) = json(
        doctor(&ws, Some("derived-8x-rtx-pro-6000-pcie"))
            .arg("--site-packages")
            .arg(&site),
    );
    assert_eq!(
        status(&report, "sglang.symm-mem-table"),
        "pass",
        "{}",
        summary(&report, "sglang.symm-mem-table")
    );
    assert_eq!(status(&report, "sglang.allreduce-fusion-gate"), "pass");
    assert_eq!(status(&report, "flashinfer.comm-jit-gate"), "fail");
    assert!(summary(&report, "flashinfer.comm-jit-gate")
        .contains("No supported CUDA architectures found for major versions [9, 10]"));
}

#[test]
fn sglang_0_5_23_disables_symm_mem_itself_and_refuses_the_fusion() {
    let ws = Workspace::new();
    let site = stack_site(&ws, "sglang==0.5.23", "flashinfer-python==0.7.2");
    let (_, report) = json(
        doctor(&ws, Some("derived-8x-rtx-pro-6000-pcie"))
            .arg("--site-packages")
            .arg(&site),
    );
    assert_eq!(status(&report, "sglang.symm-mem-table"), "warn");
    assert!(summary(&report, "sglang.symm-mem-table").contains("disables itself"));
    assert_eq!(status(&report, "sglang.symm-mem-multimem"), "pass");
    assert_eq!(status(&report, "sglang.allreduce-fusion-gate"), "fail");
    assert!(summary(&report, "sglang.allreduce-fusion-gate").contains("requires SM90 or SM10X"));
    assert_eq!(status(&report, "flashinfer.comm-jit-gate"), "pass");
}

#[test]
fn a_pinned_capability_checks_sglang_on_a_machine_without_the_gpu() {
    let ws = Workspace::new();
    let site = wheel_site("sglang==0.5.9");
    let (_, report) = json(
        doctor(&ws, None)
            .env("KILN_FACT_GPU_CC", "12.0")
            .args(["sglang.symm-mem-table", "--site-packages"])
            .arg(&site),
    );
    assert_eq!(report["checks"].as_array().unwrap().len(), 1);
    assert_eq!(status(&report, "sglang.symm-mem-table"), "fail");
    let (code, report) = json(
        doctor(&ws, None)
            .env("KILN_FACT_GPU_CC", "9.0")
            .args(["sglang.symm-mem-table", "--site-packages"])
            .arg(&site),
    );
    assert_eq!(
        (code, status(&report, "sglang.symm-mem-table")),
        (0, "pass".to_string())
    );
}

/// A CUDA toolkit as `kiln doctor` reads it: `$CUDA_HOME/version.json`.
fn toolkit(ws: &Workspace, version: &str) -> PathBuf {
    ws.write(
        "cuda-13.0/version.json",
        &format!(r#"{{"cuda": {{"name": "CUDA SDK", "version": "{version}"}}}}"#),
    );
    ws.path().join("cuda-13.0")
}

#[test]
fn an_old_driver_fails_the_cuda_13_floor_and_gns_p2p_warns() {
    let ws = Workspace::new();
    let cuda = toolkit(&ws, "13.0.1");
    let (code, report) = json(doctor(&ws, Some("derived-old-driver-570")).env("CUDA_HOME", &cuda));
    assert_eq!(code, 2);
    assert_eq!(status(&report, "driver.floor"), "fail");
    assert!(
        summary(&report, "driver.floor").contains("driver 570.133.07 is too old for CUDA 13.0.1")
    );
    assert!(check(&report, "driver.floor")["fix"]
        .as_str()
        .unwrap()
        .contains("580.82.07"));
    assert_eq!(status(&report, "topology.p2p"), "warn");
    assert!(summary(&report, "topology.p2p").contains("GNS"));
    assert_eq!(status(&report, "gpu.persistence"), "warn");
    assert_eq!(
        check(&report, "gpu.persistence")["fix"],
        "sudo nvidia-smi -pm 1   (or enable the nvidia-persistenced service)"
    );
    // Two PCIe GPUs keep custom all-reduce.
    assert_eq!(status(&report, "topology.custom-allreduce"), "pass");
}

#[test]
fn a_current_driver_passes_the_floor_for_the_toolkit_it_ships_with() {
    let ws = Workspace::new();
    let cuda = toolkit(&ws, "13.0.2");
    let (_, report) = json(
        doctor(&ws, Some("h200x2"))
            .env("CUDA_HOME", &cuda)
            .arg("driver.floor"),
    );
    assert_eq!(status(&report, "driver.floor"), "pass");
    assert_eq!(
        summary(&report, "driver.floor"),
        "driver 580.159.04 ≥ 580.95.05 for CUDA 13.0.2"
    );
}

#[test]
fn a_driver_without_compute_cap_falls_back_to_the_gpu_name() {
    let ws = Workspace::new();
    let (_, report) = json(doctor(&ws, Some("derived-no-compute-cap")).arg("-v"));
    assert_eq!(status(&report, "nvidia.driver"), "pass");
    assert_eq!(report["facts"]["compute_cap_field"], false);
    assert_eq!(report["facts"]["gpus"][0]["compute_cap"], "8.0");
    let evidence = check(&report, "nvidia.driver")["evidence"].to_string();
    assert!(
        evidence.contains("no compute_cap query field"),
        "{evidence}"
    );
}

#[test]
fn a_driver_library_mismatch_is_its_own_failure() {
    let ws = Workspace::new();
    let (code, report) = json(&mut doctor(&ws, Some("derived-driver-mismatch")));
    assert_eq!(code, 2);
    assert_eq!(status(&report, "nvidia.driver"), "fail");
    assert!(summary(&report, "nvidia.driver").contains("Driver/library version mismatch"));
    assert!(check(&report, "nvidia.driver")["fix"]
        .as_str()
        .unwrap()
        .starts_with("reboot"));
    assert_eq!(report["facts"]["nvidia_smi"]["state"], "mismatch");
}

#[test]
fn an_unknown_check_id_is_a_usage_error_with_a_suggestion() {
    let ws = Workspace::new();
    let out = doctor(&ws, None).arg("driver.flor").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("error: unknown check `driver.flor`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("hint: did you mean `driver.floor`?"),
        "{stderr}"
    );
    // Nothing close: every check, with what it is about.
    let out = doctor(&ws, None).arg("qqqqqqqqqqqq").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("`driver.floor`: Driver is new enough for the CUDA toolkit"),
        "{stderr}"
    );
    let out = doctor(&ws, None)
        .args(["--site-packages", "no/such/dir"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("error: --site-packages no/such/dir is not a directory"));
}

#[test]
fn the_bundle_leaves_out_secrets_and_masks_gpu_uuids() {
    let ws = Workspace::new();
    let bundle = ws.path().join("report.tar.gz");
    let out = doctor(&ws, Some("h200x2"))
        .env("HF_TOKEN", "hf_kilnsecretvalue")
        .env("KILN_TEST_VISIBLE", "plain-value")
        .arg("--bundle")
        .arg(&bundle)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("wrote the support bundle"));
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(
        std::fs::File::open(&bundle).unwrap(),
    ));
    let mut files = std::collections::BTreeMap::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let mut text = String::new();
        entry.read_to_string(&mut text).unwrap();
        files.insert(entry.path().unwrap().display().to_string(), text);
    }
    let names: Vec<&str> = files.keys().map(String::as_str).collect();
    for want in [
        "kiln-doctor/doctor.json",
        "kiln-doctor/env.txt",
        "kiln-doctor/nvidia-smi-q.txt",
        "kiln-doctor/nvidia-smi-topo.txt",
        "kiln-doctor/pip-freeze.txt",
    ] {
        assert!(names.contains(&want), "{names:?}");
    }
    let all: String = files.values().cloned().collect();
    assert!(!all.contains("hf_kilnsecretvalue"));
    assert!(!all.contains("HF_TOKEN"));
    assert!(!all.contains("0fa4f92d"), "a GPU UUID leaked");
    assert!(
        !all.contains("1653724025069"),
        "a board serial number leaked"
    );
    assert!(files["kiln-doctor/nvidia-smi-q.txt"].contains("GPU UUID                                           : GPU-XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX"));
    assert!(files["kiln-doctor/env.txt"].contains("KILN_TEST_VISIBLE=plain-value"));
    let report: Value = serde_json::from_str(&files["kiln-doctor/doctor.json"]).unwrap();
    assert_eq!(status(&report, "nvidia.driver"), "pass");
}

#[test]
fn a_recipe_supplies_the_cuda_toolkit_and_its_driver_floor() {
    let ws = Workspace::new();
    let (code, report) = json(doctor(&ws, Some("derived-old-driver-570")).args([
        "--recipe",
        "glm5-nvfp4-sm120",
        "driver.floor",
        "topology.multicast",
    ]));
    assert_eq!(code, 2);
    assert_eq!(status(&report, "driver.floor"), "fail");
    assert!(
        summary(&report, "driver.floor").contains("too old for CUDA 13.0.1"),
        "{}",
        summary(&report, "driver.floor")
    );
    assert!(check(&report, "driver.floor")["evidence"][0]
        .as_str()
        .unwrap()
        .contains("(from recipe); floor 580.82.07"));
    // Its profiles need `model` set, so their flags are unknown: the flag checks assume them passed.
    assert_eq!(report["facts"]["server_flags"], serde_json::json!([]));
    assert_eq!(status(&report, "topology.multicast"), "warn");
}

/// A site-packages dir with a stand-in torch 2.9.1+cu130: its version.py, its dist-info, and as
/// `lib/libtorch_cuda.so` a real shared library nvcc 13.0 built (sm_90, sm_120, compute_120).
/// Its `__init__.py` ends the interpreter: a doctor that imports torch gets no facts.
fn stand_in_torch(ws: &Workspace) -> PathBuf {
    let site = ws.path().join("site");
    let built = ws.path().join("built");
    std::fs::create_dir_all(site.join("torch/lib")).unwrap();
    std::fs::create_dir_all(&built).unwrap();
    crate::sm120_sass::nvcc_builds(&built);
    std::fs::copy(
        built.join("lib.so"),
        site.join("torch/lib/libtorch_cuda.so"),
    )
    .unwrap();
    ws.write(
        "site/torch/__init__.py",
        "import os\nos._exit(7)  # importing torch is what plain doctor must not do\n",
    );
    ws.write(
        "site/torch/version.py",
        "from typing import Optional\n__version__ = '2.9.1+cu130'\ndebug = False\ncuda: Optional[str] = '13.0'\nhip: Optional[str] = None\n",
    );
    ws.write(
        "site/torch-2.9.1+cu130.dist-info/METADATA",
        "Metadata-Version: 2.1\nName: torch\nVersion: 2.9.1+cu130\n",
    );
    // flash-attn built for sm_120 only (a cubin as its extension, read the same way).
    std::fs::copy(
        built.join("k.cubin"),
        site.join("flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so"),
    )
    .unwrap();
    site
}

#[test]
fn torch_facts_come_from_its_files_without_importing_it() {
    let ws = Workspace::new();
    let site = stand_in_torch(&ws);
    let python = which::which("python3").expect("python3 is installed (the tests need it)");
    let run = |args: &[&str]| {
        let mut cmd = doctor(&ws, Some("derived-h200x1"));
        cmd.arg("--python")
            .arg(&python)
            .arg("--site-packages")
            .arg(&site)
            .args(args)
            .env("PYTHONPATH", &site);
        cmd
    };
    let (_, r) = json(&mut run(&[]));
    assert_eq!(status(&r, "python.torch"), "pass", "{r:#}");
    assert_eq!(
        summary(&r, "python.torch"),
        "torch 2.9.1+cu130 (CUDA 13.0), read from its files (`--deep` checks that it sees the GPUs)"
    );
    // The H200 is cc 9.0: torch's library carries sm_90.
    assert_eq!(status(&r, "torch.arch"), "pass");
    let evidence = check(&r, "torch.arch")["evidence"][0]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        evidence.ends_with("torch/lib/libtorch_cuda.so: sm_90 sm_120 compute_120"),
        "{evidence}"
    );
    // flash-attn has sm_120 code only: nothing runs on the H200.
    assert_eq!(status(&r, "sass.packages"), "fail");
    assert!(
        summary(&r, "sass.packages").starts_with("no sm_90 code in flash-attn"),
        "{}",
        summary(&r, "sass.packages")
    );
    // The fix rebuilds through a recipe only where the recipe takes the arch: the seed's does
    // (the default recipe on a GPU host), sglang-cuda, whose kernels come from wheels, does not.
    let fix = |r: &serde_json::Value| {
        check(r, "sass.packages")["fix"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        fix(&r),
        "rebuild them for this GPU: `kiln up glm5-nvfp4-sm120 --set arch=9.0`"
    );
    let (_, wheels) = json(&mut run(&["--recipe", "sglang-cuda"]));
    assert_eq!(
        fix(&wheels),
        "rebuild them with code for sm_90 (their build's arch list names it)"
    );
    // On SM120 (cc 12.0) the same flash-attn carries the GPU's code.
    let mut on_sm120 = doctor(&ws, Some("derived-8x-rtx-pro-6000-pcie"));
    on_sm120
        .arg("--python")
        .arg(&python)
        .arg("--site-packages")
        .arg(&site)
        .env("PYTHONPATH", &site);
    let (_, r120) = json(&mut on_sm120);
    assert_eq!(status(&r120, "sass.packages"), "pass", "{r120:#}");
    assert_eq!(
        summary(&r120, "sass.packages"),
        "code for sm_120 in flash-attn"
    );
    // What needs torch running is said to be left to --deep.
    let out = run(&[]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Left to --deep (they run torch on the GPUs): how many GPUs torch sees"),
        "{text}"
    );
}

#[test]
fn doctor_with_a_recipe_repeats_what_plan_warns_about_its_toolchain() {
    let ws = Workspace::new();
    let (_, r) = json(doctor(&ws, Some("derived-h200x1")).args([
        "--recipe",
        "glm5-nvfp4-sm120",
        "--set",
        "flashinfer_arch=9.0f",
        "toolchain.arch",
    ]));
    assert_eq!(status(&r, "toolchain.arch"), "warn");
    assert!(
        summary(&r, "toolchain.arch").contains("names `9.0f`"),
        "{r:#}"
    );
    // The recipe as shipped picks 9.0a on the H200 itself: nothing to warn about.
    let (_, r) = json(doctor(&ws, Some("derived-h200x1")).args([
        "--recipe",
        "glm5-nvfp4-sm120",
        "toolchain.arch",
    ]));
    assert_eq!(status(&r, "toolchain.arch"), "pass", "{r:#}");
}

/// The real 2× H200 captures with the query's `persistence_mode` rewritten by `edit` (row by
/// row, header included), as a scenario directory in `ws`.
fn h200_with_persistence(ws: &Workspace, edit: fn(Vec<&str>) -> Vec<String>) -> PathBuf {
    let dir = ws.path().join("h200x2-persistence");
    copy_tree(&gpu_fixtures().join("h200x2"), &dir);
    let query = dir.join("nvidia-smi-query.txt");
    let text = std::fs::read_to_string(&query).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    // The invocation line and the `[exit 0]` line stay; the CSV between them is edited.
    let last = lines.len() - 1;
    for line in &mut lines[1..last] {
        *line = edit(line.split(", ").collect()).join(", ");
    }
    std::fs::write(&query, lines.join("\n") + "\n").unwrap();
    dir
}

#[test]
fn a_gpu_that_does_not_report_persistence_mode_passes_and_is_named() {
    // The capture's column 8 is `persistence_mode` (`Enabled` on both GPUs).
    let na: fn(Vec<&str>) -> Vec<String> = |cells| {
        let mut cells: Vec<String> = cells.into_iter().map(str::to_string).collect();
        if cells[8] == "Enabled" {
            cells[8] = "[N/A]".into();
        }
        cells
    };
    let gone: fn(Vec<&str>) -> Vec<String> = |mut cells| {
        cells.remove(8);
        cells.into_iter().map(str::to_string).collect()
    };
    for (how, edit) in [("[N/A]", na), ("no such column", gone)] {
        let ws = Workspace::new();
        let scenario = h200_with_persistence(&ws, edit);
        let header = std::fs::read_to_string(scenario.join("nvidia-smi-query.txt")).unwrap();
        assert_eq!(
            header.lines().nth(1).unwrap().contains("persistence_mode"),
            how == "[N/A]",
            "{header}"
        );
        let (code, report) = json(&mut doctor(&ws, Some(scenario.to_str().unwrap())));
        assert_exit_matches(code, &report);
        // The rest of the query is still read.
        assert_eq!(status(&report, "nvidia.driver"), "pass", "{how}");
        assert_eq!(status(&report, "gpu.persistence"), "pass", "{how}");
        assert_eq!(
            summary(&report, "gpu.persistence"),
            "persistence mode not reported by GPU 0, 1 (the driver answers [N/A] or has no such field): not a warning",
            "{how}"
        );
        assert!(check(&report, "gpu.persistence")["fix"].is_null(), "{how}");
    }
    // Unedited, both GPUs report `Enabled`.
    let ws = Workspace::new();
    let (_, report) = json(&mut doctor(&ws, Some("h200x2")));
    assert_eq!(summary(&report, "gpu.persistence"), "persistence mode on");
}

#[test]
fn sm120_pcie_box_with_sglang_0_5_15_reads_its_own_gates_and_offers_no_0_5_9_patch() {
    // The real 0.5.15.post1 wheel: its symm-mem table is read with `.get` (a warning and a
    // disabled communicator, no KeyError), its fusion gate is still closed on cc 12, and
    // kiln's patch set fits 0.5.9 only, so the fix is to drop the flag, said why.
    let ws = Workspace::new();
    let site = stack_site(&ws, "sglang==0.5.15.post1", "flashinfer-python==0.6.12");
    let (_, report) = json(
        doctor(&ws, Some("derived-8x-rtx-pro-6000-pcie"))
            .arg("--site-packages")
            .arg(&site),
    );
    assert_eq!(report["facts"]["packages"]["sglang"], "0.5.15.post1");
    assert_eq!(status(&report, "sglang.symm-mem-table"), "warn");
    assert!(
        summary(&report, "sglang.symm-mem-table").contains("Device capability 12 not supported"),
        "{}",
        summary(&report, "sglang.symm-mem-table")
    );
    assert_eq!(status(&report, "sglang.allreduce-fusion-gate"), "warn");
    assert_eq!(
        check(&report, "sglang.allreduce-fusion-gate")["fix"].as_str().unwrap(),
        "drop --enable-flashinfer-allreduce-fusion: it does nothing on this GPU   (kiln's patch set sglang-0.5.9-sm120 fits SGLang 0.5.9 only; this is 0.5.15.post1)"
    );
}

/// `kiln doctor --recipe R` says what `kiln up R` would refuse to start without: the host tools
/// the recipe and its steps `require`, each missing one named with who needs it, and the command
/// that installs them (before: "No issues found", exit 0, and `kiln up` then failed on them).
#[test]
fn doctor_with_a_recipe_names_the_host_tools_it_requires_and_lacks() {
    let ws = Workspace::new();
    ws.write(
        "r.toml",
        r#"[recipe]
name = "pre"
requires = ["python3>=99", "cc"]

[[step]]
id = "build"
kind = "run"
cmd = ["true"]
requires = ["cmake>=3.20"]
"#,
    );
    // A PATH with python3 and cc but no cmake: one tool too old, one missing, one found.
    let bin = ws.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["python3", "cc"] {
        std::os::unix::fs::symlink(which::which(tool).unwrap(), bin.join(tool)).unwrap();
    }
    let (code, report) = json(
        doctor(&ws, None)
            .args(["--recipe", "r.toml"])
            .env("PATH", &bin),
    );
    assert_exit_matches(code, &report);
    assert_eq!(code, 2, "{report:#}");
    let tools = check(&report, "host.tools");
    assert_eq!(tools["status"], "fail", "{report:#}");
    // The one line names every problem: the first in full, the others by name.
    let line = tools["summary"].as_str().unwrap();
    assert!(
        line.starts_with("python3>=99: ") && line.ends_with("; also cmake>=3.20"),
        "{tools:#}"
    );
    let evidence: Vec<&str> = tools["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert!(
        evidence[0].starts_with("python3>=99: ")
            && evidence[0].ends_with(" (needed by the recipe)"),
        "{evidence:?}"
    );
    assert_eq!(
        evidence[1],
        "cmake>=3.20: not found on PATH (needed by step `build`)"
    );
    assert!(evidence[2].starts_with("cc: "), "{evidence:?}");
    assert_eq!(evidence.len(), 3, "{evidence:?}");
    assert!(
        tools["fix"].as_str().unwrap().contains("cmake"),
        "{tools:#}"
    );
    // A recipe whose tools are all there: the check passes and names them.
    ws.write(
        "ok.toml",
        "[recipe]\nname = \"ok\"\nrequires = [\"cc\", \"python3\"]\n",
    );
    let (_, report) = json(
        doctor(&ws, None)
            .args(["--recipe", "ok.toml"])
            .env("PATH", &bin),
    );
    assert_eq!(status(&report, "host.tools"), "pass", "{report:#}");
    assert_eq!(summary(&report, "host.tools"), "cc, python3 found");
}

/// The doctor's fixes are commands to run as printed: on the 8× RTX PRO 6000 host with SGLang
/// 0.5.9 and FlashInfer 0.6.3 (a copy of the real wheels), the fusion gate's fix applies both of
/// kiln's patch sets, and the doctor then finds the symm-mem table and both gates open on cc 12.
#[test]
fn the_doctors_patch_fix_run_as_printed_opens_what_it_found_closed() {
    let ws = Workspace::new();
    let site = ws.path().join("site");
    for spec in ["sglang==0.5.9", "flashinfer-python==0.6.3"] {
        copy_tree(&wheel_site(spec), &site);
    }
    let judge = || {
        json(
            doctor(&ws, Some("derived-8x-rtx-pro-6000-pcie"))
                .arg("--site-packages")
                .arg(&site),
        )
        .1
    };
    let before = judge();
    assert_eq!(status(&before, "sglang.symm-mem-table"), "fail");
    assert_eq!(status(&before, "sglang.allreduce-fusion-gate"), "warn");
    let fix = check(&before, "sglang.allreduce-fusion-gate")["fix"]
        .as_str()
        .unwrap()
        .to_string();
    let commands = fix.split("   (").next().unwrap();
    for command in commands.split(" && ") {
        let words: Vec<&str> = command.split_whitespace().collect();
        assert_eq!(words[0], "kiln", "{fix}");
        let out = ws.kiln().args(&words[1..]).output().unwrap();
        assert!(
            out.status.success(),
            "`{command}`: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let after = judge();
    for id in [
        "sglang.symm-mem-table",
        "sglang.allreduce-fusion-gate",
        "flashinfer.comm-jit-gate",
    ] {
        assert_eq!(status(&after, id), "pass", "{id}: {}", check(&after, id));
    }
}

/// The hint under a failed doctor names the command that shows the first failing check's
/// evidence for the same recipe and settings (a bare `kiln doctor ID -v` judged the host's
/// default recipe), and that command, run as printed, shows it; a check failing for two
/// profiles is named once.
#[test]
fn the_evidence_command_in_the_hint_judges_what_this_run_judged() {
    let ws = Workspace::new();
    let out = ws
        .kiln_without_gpu()
        .args([
            "doctor",
            "--recipe",
            "sglang-cuda",
            "--set",
            "mem_fraction=0.5",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let lines: Vec<&str> = stderr.trim_end().lines().collect();
    assert_eq!(
        lines[lines.len() - 2],
        "error: doctor: 1 check(s) failed: launch.gpus"
    );
    let command = lines[lines.len() - 1]
        .split('`')
        .nth(1)
        .unwrap_or_else(|| panic!("{stderr}"));
    assert_eq!(
        command,
        "kiln doctor launch.gpus -v --recipe sglang-cuda --set mem_fraction=0.5"
    );
    let words: Vec<&str> = command.split_whitespace().collect();
    let again = ws.kiln_without_gpu().args(&words[1..]).output().unwrap();
    let shown = String::from_utf8_lossy(&again.stdout);
    assert_eq!(
        shown.matches("[✗] launch.gpus  `").count(),
        2,
        "both profiles of sglang-cuda:\n{shown}"
    );
}

/// A recipe whose venv a `run` step makes (as sglang-cuda's does) and whose profile runs
/// `VENV/bin/python -m sglang.launch_server`: doctor inspects that interpreter, not the system
/// python3 beside it (on the H200, session 22, it read the image's python and said SGLang was not
/// installed while the served venv held 0.5.15); before the step has run, the Python checks wait
/// for it.
#[test]
fn doctor_inspects_the_python_an_sglang_profile_runs() {
    let ws = Workspace::new();
    let venv = ws.path().join("prefix/venv");
    ws.write(
        "r.toml",
        &format!(
            "[recipe]\nname = \"r\"\n\n[[step]]\nid = \"venv\"\nkind = \"run\"\n\
             cmd = [\"python3\", \"-m\", \"venv\", {venv:?}]\n\
             check = {{ paths = [\"{python}\"] }}\n\n\
             [profile.p]\ncmd = [\"{python}\", \"-m\", \"sglang.launch_server\"]\n\
             args = [\"--model-path\", \"m\"]\n",
            venv = venv.display().to_string(),
            python = venv.join("bin/python").display(),
        ),
    );
    let (_, report) = json(doctor(&ws, None).args(["--recipe", "r.toml"]));
    assert_eq!(report["facts"]["python"]["state"], "to_come", "{report:#}");
    assert!(
        summary(&report, "python.torch").starts_with(&format!(
            "the recipe's interpreter {} is not installed yet (step `venv` installs it",
            venv.join("bin/python").display()
        )),
        "{report:#}"
    );
    let made = std::process::Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .unwrap();
    assert!(made.success());
    let (_, report) = json(doctor(&ws, None).args(["--recipe", "r.toml"]));
    let python = &report["facts"]["python"];
    assert_eq!(
        python["executable"].as_str(),
        Some(venv.join("bin/python").to_str().unwrap()),
        "{report:#}"
    );
    let site = python["purelib"].as_str().unwrap();
    assert!(site.starts_with(venv.to_str().unwrap()), "{site}");
    assert_eq!(
        summary(&report, "sglang.symm-mem-table"),
        format!("sglang is not installed in {site}")
    );
}
