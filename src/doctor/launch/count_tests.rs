//! Unit tests of the launch preflight's GPU count (tp × pp × dp ÷ nodes, `CUDA_VISIBLE_DEVICES`
//! by index and by UUID prefix) and of the JIT-disk check measuring the fullest cache directory.

use std::collections::BTreeMap;
use std::path::Path;

use super::tests::h200x2;
use super::*;

/// Every launch check of an SGLang profile with `args` and `env` on the two H200s of the real
/// capture, with kiln's own `CUDA_VISIBLE_DEVICES` set to `cvd`.
fn checks(args: &[&str], env: &[(&str, &str)], cvd: Option<&str>) -> Vec<Check> {
    checks_on(&h200x2(), args, env, cvd)
}

/// The same on a host with `gpus`.
pub(super) fn checks_on(
    gpus: &[Gpu],
    args: &[&str],
    env: &[(&str, &str)],
    cvd: Option<&str>,
) -> Vec<Check> {
    let cmd = ["python", "-m", "sglang.launch_server"].map(String::from);
    checks_of(&cmd, gpus, args, env, cvd)
}

/// The same for the server `cmd` launches.
pub(super) fn checks_of(
    cmd: &[String],
    gpus: &[Gpu],
    args: &[&str],
    env: &[(&str, &str)],
    cvd: Option<&str>,
) -> Vec<Check> {
    checks_with(cmd, gpus, args, env, cvd, None, None)
}

/// The same with `ram` bytes of RAM available and SGLang `pinned` by the recipe.
pub(super) fn checks_with(
    cmd: &[String],
    gpus: &[Gpu],
    args: &[&str],
    env: &[(&str, &str)],
    cvd: Option<&str>,
    ram: Option<u64>,
    pinned: Option<&str>,
) -> Vec<Check> {
    let args: Vec<String> = args.iter().map(|a| (*a).to_string()).collect();
    let env: BTreeMap<String, String> = env
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect();
    let l = Launch {
        recipe: "r",
        profile: "p",
        cmd,
        args: &args,
        env: &env,
        port: None,
        unset: &[],
        made_by: &[],
        pinned_sglang: pinned,
        tp_var: true,
        port_var: true,
    };
    let h = Host {
        gpus,
        cuda_visible: cvd,
        own_server: None,
        home: Some(Path::new("/nonexistent-kiln-home")),
        ram_available: ram,
    };
    check(&l, &h)
}

pub(super) fn one(checks: Vec<Check>, id: &str) -> Check {
    checks.into_iter().find(|c| c.id == id).unwrap()
}

/// The GPU-count check's status, summary and fix.
fn count(args: &[&str], cvd: Option<&str>) -> (Status, String, String) {
    let c = one(checks(args, &[], cvd), "launch.gpus");
    (c.status, c.summary, c.fix.unwrap_or_default())
}

#[test]
fn a_host_without_a_gpu_is_said_to_have_none_visible() {
    let c = one(
        checks_on(&[], &["--tp-size", "2"], &[], None),
        "launch.gpus",
    );
    assert_eq!(c.status, Status::Fail);
    assert_eq!(
        c.summary,
        "--tp-size 2 (tp 2) needs 2 GPUs; no NVIDIA GPU visible (nvidia-smi lists none or is missing)"
    );
    let c = one(
        checks_on(&[], &["--tp-size", "1"], &[], None),
        "launch.gpus",
    );
    assert_eq!(
        c.summary,
        "--tp-size 1 (tp 1) needs 1 GPU; no NVIDIA GPU visible (nvidia-smi lists none or is missing)"
    );
}

#[test]
fn llama_server_offloading_layers_needs_a_gpu_and_ngl_0_serves_from_the_cpu() {
    let cmd = ["llama-server".to_string()];
    let gpus = |args: &[&str], on: &[Gpu]| one(checks_of(&cmd, on, args, &[], None), "launch.gpus");
    let h200 = h200x2();
    let offload = gpus(&["-m", "m.gguf", "-ngl", "99"], &h200);
    assert_eq!(offload.status, Status::Pass, "{offload:?}");
    assert!(
        offload
            .summary
            .starts_with("-ngl 99: offloads to 2 visible"),
        "{offload:?}"
    );
    let cpu = gpus(&["-m", "m.gguf", "-ngl", "0"], &h200);
    assert_eq!(cpu.status, Status::Skip, "{cpu:?}");
    assert!(cpu.summary.contains("serves from the CPU"), "{cpu:?}");
    let none = gpus(&["-m", "m.gguf", "-ngl", "99"], &[]);
    assert_eq!(none.status, Status::Fail, "{none:?}");
    assert_eq!(
        gpus(&["-m", "m.gguf", "-ngl", "0"], &[]).status,
        Status::Skip
    );
}

#[test]
fn the_gpu_count_is_tensor_times_pipeline_times_data_parallel_over_nodes() {
    let two = ": 2× NVIDIA H200 (cc 9.0, 143771 MiB)";
    let pass = |args: &[&str], summary: &str| {
        let (status, got, _) = count(args, None);
        assert_eq!((status, got), (Status::Pass, format!("{summary}{two}")));
    };
    pass(&["--tp-size", "2"], "tp 2 needs 2 GPU(s); 2 visible");
    pass(
        &["--tp-size", "1", "--pp-size", "2"],
        "tp 1 × pp 2 needs 2 GPU(s); 2 visible",
    );
    pass(
        &["--tp-size", "1", "--dp-size", "2"],
        "tp 1 × dp 2 needs 2 GPU(s); 2 visible",
    );
    // DP attention runs the data-parallel ranks inside the tensor-parallel group.
    pass(
        &[
            "--tensor-parallel-size",
            "2",
            "--data-parallel-size",
            "2",
            "--enable-dp-attention",
        ],
        "tp 2 (dp 2 inside tp: DP attention) needs 2 GPU(s); 2 visible",
    );
    // Nodes share the count, rounded up.
    pass(
        &["--tp-size", "4", "--nnodes", "2"],
        "tp 4 ÷ 2 nodes needs 2 GPU(s); 2 visible",
    );
    pass(
        &["--tp-size", "3", "--nnodes", "2"],
        "tp 3 ÷ 2 nodes needs 2 GPU(s); 2 visible",
    );
    let fail = |args: &[&str], cvd: Option<&str>, summary: &str, fix: &str| {
        let (status, got, got_fix) = count(args, cvd);
        assert_eq!(
            (status, got.as_str(), got_fix.as_str()),
            (Status::Fail, summary, fix)
        );
    };
    fail(
        &["--tp-size", "2", "--pp-size", "2", "--dp-size", "3"],
        None,
        &format!("--tp-size 2 (tp 2 × pp 2 × dp 3) needs 12 GPUs; 2 visible{two}"),
        "run it on a host with enough GPUs",
    );
    fail(
        &["--tp-size", "1", "--pp-size", "2"],
        Some("0"),
        "--tp-size 1 (tp 1 × pp 2) needs 2 GPUs; 1 visible (CUDA_VISIBLE_DEVICES=0): 1× NVIDIA H200 (cc 9.0, 143771 MiB)",
        "widen CUDA_VISIBLE_DEVICES, or run it on a host with enough GPUs",
    );
    fail(
        &["--tp-size", "3", "--nnodes", "2"],
        Some("1"),
        "--tp-size 3 (tp 3 ÷ 2 nodes) needs 2 GPUs; 1 visible (CUDA_VISIBLE_DEVICES=1): 1× NVIDIA H200 (cc 9.0, 143771 MiB)",
        "`--set tp=1` to fit 1 GPU(s), or widen CUDA_VISIBLE_DEVICES, or run it on a host with enough GPUs",
    );
    // The recipe's `tp` retargets the tensor-parallel part only: pp × dp stays.
    fail(
        &["--tp-size", "4"],
        None,
        &format!("--tp-size 4 (tp 4) needs 4 GPUs; 2 visible{two}"),
        "`--set tp=2` to fit 2 GPU(s), or run it on a host with enough GPUs",
    );
    fail(
        &["--tp-size", "4", "--pp-size", "2"],
        None,
        &format!("--tp-size 4 (tp 4 × pp 2) needs 8 GPUs; 2 visible{two}"),
        "`--set tp=1` to fit 2 GPU(s), or run it on a host with enough GPUs",
    );
    fail(
        &["--tp-size", "2", "--dp-size", "3"],
        None,
        &format!("--tp-size 2 (tp 2 × dp 3) needs 6 GPUs; 2 visible{two}"),
        "run it on a host with enough GPUs",
    );
}

#[test]
fn cuda_visible_devices_names_each_gpu_once_by_index_or_uuid_prefix() {
    let gpus = h200x2();
    let seen = |cvd: Option<&str>| -> Vec<u32> {
        visible(&gpus, cvd).gpus.iter().map(|g| g.index).collect()
    };
    assert_eq!(seen(None), [0, 1]);
    assert_eq!(seen(Some("1,0")), [1, 0]);
    assert_eq!(seen(Some("0, 1")), [0, 1]);
    // A GPU named twice is one GPU: CUDA stops at the repeat.
    assert_eq!(seen(Some("0,0")), [0]);
    assert_eq!(seen(Some("0,0,1")), [0]);
    // CUDA stops at the first entry it cannot match.
    assert_eq!(seen(Some("0,7,1")), [0]);
    assert_eq!(seen(Some("")), Vec::<u32>::new());
    // UUIDs, whole or a prefix; one that matches no GPU ends the list.
    assert_eq!(seen(Some("GPU-d2866409")), [1]);
    assert_eq!(
        seen(Some(
            "GPU-0fa4f92d-5f0e-8d91-b18f-922b56a6e20b,GPU-d2866409"
        )),
        [0, 1]
    );
    assert_eq!(seen(Some("GPU-d2866409,1")), [1]);
    assert_eq!(seen(Some("GPU-ffffffff,0")), Vec::<u32>::new());
    assert_eq!(seen(Some("d2866409,0")), Vec::<u32>::new());

    let (status, summary, _) = count(&["--tp-size", "2"], Some("0,0"));
    assert_eq!(status, Status::Fail, "{summary}");
    assert!(
        summary
            .starts_with("--tp-size 2 (tp 2) needs 2 GPUs; 1 visible (CUDA_VISIBLE_DEVICES=0,0)"),
        "{summary}"
    );
    let (status, summary, _) = count(&["--tp-size", "2"], Some("GPU-0fa4f92d,GPU-d2866409"));
    assert_eq!(status, Status::Pass, "{summary}");
    // The profile's env wins over kiln's own.
    let c = one(
        checks(
            &["--tp-size", "2"],
            &[("CUDA_VISIBLE_DEVICES", "1")],
            Some("0,1"),
        ),
        "launch.gpus",
    );
    assert_eq!(c.status, Status::Fail, "{}", c.summary);
}

#[test]
fn the_jit_disk_check_measures_the_fullest_cache_dir() {
    // procfs has no free blocks: the Triton cache there is the fullest of the three, between two
    // in the temp dir, so neither the first nor the last measured is taken for the fullest.
    let tmp = std::env::temp_dir();
    let tmp = tmp.to_str().unwrap();
    let env = [
        ("FLASHINFER_WORKSPACE_BASE", tmp),
        ("TRITON_CACHE_DIR", "/proc/kiln-jit-cache"),
        ("TORCHINDUCTOR_CACHE_DIR", tmp),
    ];
    let c = one(checks(&["--tp-size", "1"], &env, None), "launch.jit-disk");
    assert_eq!(c.status, Status::Fail, "{c:?}");
    assert!(
        c.summary.starts_with(
            "only 0.0 MiB free for the Triton cache (/proc/kiln-jit-cache): the first launch"
        ),
        "{}",
        c.summary
    );
    assert_eq!(c.evidence.len(), 4, "{:?}", c.evidence);
    assert_eq!(
        c.evidence[0],
        "kiln's margins: a failure below 1.0 GiB, a warning below 5.0 GiB"
    );
    assert!(
        c.evidence[1].starts_with(&format!("FlashInfer JIT cache {tmp}/.cache/flashinfer: ")),
        "{:?}",
        c.evidence
    );
    assert_eq!(
        c.evidence[2],
        "Triton cache /proc/kiln-jit-cache: 0.0 MiB free"
    );
    assert!(
        c.evidence[3].starts_with(&format!("torch inductor cache {tmp}: ")),
        "{:?}",
        c.evidence
    );
}

#[test]
fn a_server_that_compiles_no_kernels_skips_the_jit_disk_check() {
    let cmd = ["llama-server".to_string()];
    let env = BTreeMap::new();
    let l = Launch {
        recipe: "r",
        profile: "p",
        cmd: &cmd,
        args: &[],
        env: &env,
        port: None,
        unset: &[],
        made_by: &[],
        pinned_sglang: None,
        tp_var: false,
        port_var: false,
    };
    let server = table::server_of(l.cmd).unwrap();
    let h = Host {
        gpus: &[],
        cuda_visible: None,
        own_server: None,
        home: None,
        ram_available: None,
    };
    let c = jit_disk(&l, server, &h);
    assert_eq!(
        (c.status, c.summary.as_str()),
        (Status::Skip, "llama-server compiles no kernels at launch")
    );
}
