//! The launch preflight end to end: a profile against the host before anything is provisioned or
//! loaded. Stand-in GPU hosts replay nvidia-smi captures (tests/fixtures/gpu), stand-in
//! checkpoints are real directories of config.json and safetensors index files, SGLang's flags
//! come from the real 0.5.9 wheel, llama-server's from the CPU demo's real build.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{copy_tree, wheel_site, Workspace};
use crate::serve::free_port;

/// `kiln ARGS` on a stand-in GPU host (None: a host without nvidia-smi).
fn on_host(ws: &Workspace, scenario: Option<&str>) -> assert_cmd::Command {
    let mut cmd = match scenario {
        Some(s) => ws.kiln_on_gpu_host(s),
        None => ws.kiln_without_gpu(),
    };
    cmd.env("FLASHINFER_WORKSPACE_BASE", ws.path())
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("TRITON_CACHE_DIR")
        .env_remove("TORCHINDUCTOR_CACHE_DIR");
    cmd
}

/// A stand-in checkpoint: config.json (with `quant`'s quantization_config) and a safetensors
/// index whose `metadata.total_size` is `gib` GiB, as real Hugging Face checkpoints have.
fn checkpoint(ws: &Workspace, name: &str, gib: u64, quant: Option<&str>) -> PathBuf {
    let dir = ws.path().join(name);
    let q = quant.map_or(String::new(), |a| {
        format!(r#", "quantization_config": {{"quant_method": "modelopt", "quant_algo": "{a}"}}"#)
    });
    ws.write(
        &format!("{name}/config.json"),
        &format!(r#"{{"architectures": ["GlmMoeDsaForCausalLM"]{q}}}"#),
    );
    ws.write(
        &format!("{name}/model.safetensors.index.json"),
        &format!(
            r#"{{"metadata": {{"total_size": {}}}, "weight_map": {{}}}}"#,
            gib << 30
        ),
    );
    dir
}

/// Run with `--json`; (exit code, report).
fn json(cmd: &mut assert_cmd::Command) -> (i32, Value) {
    let out = cmd.arg("--json").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let report = crate::reporter::json_event(&text, "doctor");
    (out.status.code().unwrap(), report)
}

/// The launch check `id` of `profile` in a doctor report.
fn launch<'a>(report: &'a Value, id: &str, profile: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id && c["profile"] == profile)
        .unwrap_or_else(|| panic!("no {id} of {profile} in {report:#}"))
}

fn status_summary(report: &Value, id: &str, profile: &str) -> (String, String) {
    let c = launch(report, id, profile);
    (
        c["status"].as_str().unwrap().to_string(),
        c["summary"].as_str().unwrap().to_string(),
    )
}

fn output(cmd: &mut assert_cmd::Command) -> (i32, String) {
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        ),
    )
}

/// Without a GPU the shipped recipes that fit are found the same way: llama-cuda's own preflight
/// fails here (no GPU for its server), the CPU recipe's passes.
#[test]
fn on_a_gpu_less_host_only_the_cpu_recipe_is_named_as_fitting() {
    let ws = Workspace::new();
    let (code, err) = output(on_host(&ws, None).args(["serve", "glm5-nvfp4-sm120"]));
    assert_eq!(code, 1, "{err}");
    let hint = err
        .lines()
        .find(|l| l.starts_with("hint: what would run:"))
        .unwrap_or_else(|| panic!("no hint in:\n{err}"));
    assert_eq!(
        hint,
        "hint: what would run: `kiln up tiny-cpu` (shipped recipes that fit this host)"
    );
    // The recipe named instead really passes its launch preflight here.
    let (_, r) = json(on_host(&ws, None).args(["doctor", "--recipe", "tiny-cpu"]));
    let launch_fails: Vec<&Value> = r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"].as_str().unwrap().starts_with("launch.") && c["status"] == "fail")
        .collect();
    assert!(launch_fails.is_empty(), "{launch_fails:#?}");
    assert!(r.to_string().contains("\"launch."), "{r:#}");
}

#[test]
fn the_default_recipe_on_one_h200_stops_before_any_step_with_what_would_run() {
    let ws = Workspace::new();
    let (code, err) = output(on_host(&ws, Some("derived-h200x1")).args([
        "up",
        "--set",
        &format!("prefix={}", ws.path().join("opt").display()),
    ]));
    assert_eq!(code, 1, "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines[0],
        "kiln: 1 NVIDIA GPU found: using the default recipe `glm5-nvfp4-sm120`"
    );
    let at = |needle: &str| {
        lines
            .iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no `{needle}` in:\n{err}"))
    };
    let tp = at("✗ launch.gpus: --tp-size 8 (tp 8) needs 8 GPUs; 1 visible: 1× NVIDIA H200 (cc 9.0, 143771 MiB)");
    let fp4 = at(
        "✗ launch.quantization: --quantization modelopt_fp4 needs cc ≥ 10.0; NVIDIA H200 is cc 9.0",
    );
    let model = at("✗ launch.model: --model-path comes from `${model}`, which has no value");
    let error = at("error: profile `tuned` of glm5-nvfp4-sm120 cannot launch on this host: launch.gpus, launch.quantization, launch.model");
    assert!(
        tp < fp4 && fp4 < model && model < error && error < 20,
        "{err}"
    );
    // `--set tp=1` was tried: the NVFP4 check still fails on cc 9.0, so it is not offered.
    let hint = lines[error + 1];
    for alt in [
        "no setting of this recipe fits this host (with `--set tp=1` launch.quantization still fails)",
        // The shipped recipes whose own launch preflight passes on this H200, each tried.
        "`kiln up llama-cuda`, `kiln up sglang-cuda`, `kiln up tiny-cpu` (shipped recipes that fit this host)",
        "the same `kiln up` with `--no-serve` to provision only",
    ] {
        assert!(hint.contains(alt), "{alt}: {hint}");
    }
    assert!(!hint.contains("`--set tp=1` to fit"), "{hint}");
    assert!(
        lines[tp + 1].contains("hint: with `--set tp=1` launch.quantization still fails: no setting of this recipe fits this host; shipped recipes that fit it: `kiln up llama-cuda`, `kiln up sglang-cuda`, `kiln up tiny-cpu`"),
        "{err}"
    );
    // Before any step: no step started, no log, nothing downloaded.
    assert!(!err.contains("start  cuda"), "{err}");
    assert!(!ws.state().join("runs/glm5-nvfp4-sm120/logs").exists());
    assert!(!ws.state().join("cache/downloads").exists());
    // The failure is the run's recorded outcome.
    let report: Value = serde_json::from_slice(
        &std::fs::read(ws.state().join("reports/glm5-nvfp4-sm120/report.json")).unwrap(),
    )
    .unwrap();
    assert!(report.to_string().contains("cannot launch on this host"));
}

#[test]
fn doctor_shows_the_preflight_in_json_and_text_with_cuda_visible_devices_honoured() {
    let ws = Workspace::new();
    let model = checkpoint(&ws, "glm5", 400, Some("NVFP4"));
    let args = [
        "doctor",
        "--recipe",
        "glm5-nvfp4-sm120",
        "--profile",
        "baseline",
        "--set",
        &format!("model={}", model.display()),
    ];
    // The real 2× H200 capture, one GPU selected.
    let (code, report) = json(
        on_host(&ws, Some("h200x2"))
            .args(args)
            .env("CUDA_VISIBLE_DEVICES", "1"),
    );
    assert_eq!(code, 2);
    let (st, summary) = status_summary(&report, "launch.gpus", "baseline");
    assert_eq!(st, "fail");
    assert!(
        summary.contains("needs 8 GPUs; 1 visible (CUDA_VISIBLE_DEVICES=1)"),
        "{summary}"
    );
    // The checkpoint's own config.json says NVFP4 too.
    let q = launch(&report, "launch.quantization", "baseline");
    assert_eq!(q["status"], "fail");
    assert!(q["evidence"][0]
        .as_str()
        .unwrap()
        .contains("get_min_capability() is 100"));
    // 400 GiB do not fit in the one GPU's 140 GiB.
    let (st, summary) = status_summary(&report, "launch.weights", "baseline");
    assert_eq!(st, "fail", "{summary}");
    assert!(
        summary.contains("weights 400.0 GiB cannot fit in 140.4 GiB free on 1 GPU(s)"),
        "{summary}"
    );
    let out = on_host(&ws, Some("h200x2"))
        .args(args)
        .env("CUDA_VISIBLE_DEVICES", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("[✗] launch.gpus"), "{text}");
    assert!(
        text.contains("`baseline`: --tp-size 8 (tp 8) needs 8 GPUs"),
        "{text}"
    );
}

#[test]
fn the_8x_rtx_pro_6000_box_with_a_fitting_checkpoint_passes() {
    let ws = Workspace::new();
    let model = checkpoint(&ws, "glm5", 400, Some("NVFP4"));
    let draft = checkpoint(&ws, "draft", 5, None);
    let port = free_port();
    let (_, report) = json(on_host(&ws, Some("derived-8x-rtx-pro-6000-pcie")).args([
        "doctor",
        "--recipe",
        "glm5-nvfp4-sm120",
        "--profile",
        "eagle3",
        "--set",
        &format!("model={}", model.display()),
        "--set",
        &format!("draft_model={}", draft.display()),
        "--set",
        &format!("port={port}"),
    ]));
    for id in [
        "launch.gpus",
        "launch.gpu-group",
        "launch.quantization",
        "launch.model",
        "launch.draft-model",
        "launch.weights",
        "launch.flags",
        "launch.port",
    ] {
        let (st, summary) = status_summary(&report, id, "eagle3");
        assert_eq!(st, "pass", "{id}: {summary}");
    }
    let (_, weights) = status_summary(&report, "launch.weights", "eagle3");
    assert!(
        weights.contains("weights 405.0 GiB (model 400.0 GiB + draft 5.0 GiB) fit in 764.7 GiB"),
        "{weights}"
    );
    // SGLang is not installed here: the flags are checked against the pinned 0.5.9's list.
    let flags = launch(&report, "launch.flags", "eagle3");
    assert!(
        flags["evidence"][0]
            .as_str()
            .unwrap()
            .contains("SGLang 0.5.9, which the recipe pins and is not installed yet"),
        "{flags}"
    );
    // The JIT caches' disk: a warning only when this machine's disk earns it.
    let (st, summary) = status_summary(&report, "launch.jit-disk", "eagle3");
    assert!(
        st == "pass" || (st == "warn" && summary.starts_with("only ")),
        "{summary}"
    );
}

#[test]
fn weights_too_large_too_little_kv_cache_and_missing_paths_are_named() {
    let ws = Workspace::new();
    let host = "derived-8x-rtx-pro-6000-pcie";
    let port = free_port();
    let doctor = |sets: &[String]| {
        let mut cmd = on_host(&ws, Some(host));
        cmd.args([
            "doctor",
            "--recipe",
            "glm5-nvfp4-sm120",
            "--profile",
            "eagle3",
        ])
        .arg("--set")
        .arg(format!("port={port}"));
        for s in sets {
            cmd.arg("--set").arg(s);
        }
        json(&mut cmd).1
    };
    let set = |k: &str, p: &Path| format!("{k}={}", p.display());
    let huge = checkpoint(&ws, "huge", 2000, Some("NVFP4"));
    let tight = checkpoint(&ws, "tight", 700, Some("NVFP4"));
    let draft = checkpoint(&ws, "draft", 1, None);
    let r = doctor(&[set("model", &tight), set("draft_model", &draft)]);
    let (st, summary) = status_summary(&r, "launch.weights", "eagle3");
    assert_eq!(st, "warn");
    assert!(
        summary.contains("leave only 63.7 GiB of 764.7 GiB free on 8 GPU(s)")
            && summary.contains("for the KV cache"),
        "{summary}"
    );
    std::fs::create_dir_all(ws.path().join("glm5-no-config")).unwrap();
    let r = doctor(&[
        "model=/nonexistent/glm5".into(),
        set("draft_model", &ws.path().join("glm5-no-config")),
    ]);
    assert_eq!(
        status_summary(&r, "launch.model", "eagle3"),
        (
            "fail".into(),
            "model /nonexistent/glm5 does not exist (--model-path)".into()
        )
    );
    let r = doctor(&[
        set("model", &huge),
        set("draft_model", &ws.path().join("glm5-no-config")),
    ]);
    let (st, summary) = status_summary(&r, "launch.draft-model", "eagle3");
    assert_eq!(st, "fail");
    assert!(
        summary.ends_with("has no config.json: not a Hugging Face checkpoint"),
        "{summary}"
    );
    let (st, summary) = status_summary(&r, "launch.weights", "eagle3");
    assert_eq!(st, "fail");
    assert!(
        summary.contains("weights 2000.0 GiB cannot fit in 764.7 GiB"),
        "{summary}"
    );
    // `kiln serve` stops at the same line, before it launches anything.
    let (code, err) = output(on_host(&ws, Some(host)).args([
        "serve",
        "glm5-nvfp4-sm120",
        "--profile",
        "baseline",
        "--set",
        &set("model", &huge),
        "--set",
        &format!("port={port}"),
    ]));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(
            "✗ launch.weights: weights 2000.0 GiB cannot fit in 764.7 GiB free on 8 GPU(s)"
        ),
        "{err}"
    );
    assert!(err.contains("error: profile `baseline` of glm5-nvfp4-sm120 cannot launch on this host: launch.weights"), "{err}");
    assert!(!ws.state().join("serve").exists(), "nothing was launched");
    // An unset draft model is named with the variable to set.
    let r = doctor(&[set("model", &tight)]);
    assert_eq!(
        status_summary(&r, "launch.draft-model", "eagle3").1,
        "--speculative-draft-model-path comes from `${draft_model}`, which has no value"
    );
}

/// A recipe serving SGLang from `venv` (installed or not): `extra` args, `pin` a python step
/// pinning sglang==0.5.9.
fn sglang_recipe(ws: &Workspace, venv: &Path, tp: u32, extra: &[&str], pin: bool) {
    let model = checkpoint(ws, "m", 10, None);
    let extra = extra
        .iter()
        .map(|a| format!("\"{a}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let extra = if extra.is_empty() {
        extra
    } else {
        format!(", {extra}")
    };
    let step = if pin {
        format!(
            "[[step]]\nid = \"sglang\"\nkind = \"python\"\nvenv = \"{}\"\ninstall = [\"sglang==0.5.9\"]\n",
            venv.display()
        )
    } else {
        String::new()
    };
    ws.write(
        "sg.toml",
        &format!(
            r#"[recipe]
name = "sg"

[vars]
port = "{port}"

{step}
[profile.p]
cmd = ["{python}", "-m", "sglang.launch_server"]
args = ["--model-path", "{model}", "--tp-size", "{tp}", "--port", "${{port}}"{extra}]
url = "http://127.0.0.1:${{port}}"
"#,
            port = free_port(),
            python = venv.join("bin/python").display(),
            model = model.display(),
        ),
    );
}

fn flags_check(ws: &Workspace, host: &str) -> (String, String, Vec<String>) {
    let (_, r) =
        json(on_host(ws, Some(host)).args(["doctor", "--recipe", "sg.toml", "launch.flags"]));
    let c = launch(&r, "launch.flags", "p");
    (
        c["status"].as_str().unwrap().into(),
        c["summary"].as_str().unwrap().into(),
        c["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap().to_string())
            .collect(),
    )
}

/// A venv in the workspace whose site-packages is the unpacked real wheel `spec` and whose
/// python is the host's.
fn venv_over(ws: &Workspace, spec: &str) -> PathBuf {
    let site = wheel_site(spec);
    let venv = ws.path().join("venv");
    std::fs::create_dir_all(venv.join("bin")).unwrap();
    std::fs::create_dir_all(venv.join("lib/python3.12")).unwrap();
    std::os::unix::fs::symlink(&site, venv.join("lib/python3.12/site-packages")).unwrap();
    std::os::unix::fs::symlink(which::which("python3").unwrap(), venv.join("bin/python")).unwrap();
    venv
}

/// A flag list kiln ships (`src/doctor/launch/FILE`).
fn shipped_flags(file: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/doctor/launch")
            .join(file),
    )
    .unwrap()
}

#[test]
fn sglang_flags_come_from_its_server_args_or_the_pinned_list() {
    let ws = Workspace::new();
    let venv = venv_over(&ws, "sglang==0.5.9");
    // Every flag of the shipped list is one the real wheel's server_args.py defines, and there
    // are as many: the list is that file's.
    let shipped = shipped_flags("sglang-0.5.9.flags");
    let listed: Vec<&str> = shipped.lines().filter(|l| l.starts_with("--")).collect();
    sglang_recipe(&ws, &venv, 1, &listed[..], false);
    let (st, summary, evidence) = flags_check(&ws, "h200x2");
    assert_eq!(st, "pass", "{summary} {evidence:?}");
    assert_eq!(
        evidence[0],
        format!(
            "{} flags known from {}/sglang/srt/server_args.py (sglang 0.5.9)",
            listed.len(),
            venv.join("lib/python3.12/site-packages").display()
        )
    );
    // A misspelt flag is the "unrecognized arguments" crash, with the flag it meant; an
    // abbreviation argparse accepts is said so.
    sglang_recipe(
        &ws,
        &venv,
        1,
        &["--enable-torch-symm-memory", "--trust-remote"],
        false,
    );
    let (st, summary, evidence) = flags_check(&ws, "h200x2");
    assert_eq!(st, "fail");
    assert_eq!(summary, "SGLang does not know --enable-torch-symm-memory (did you mean --enable-torch-symm-mem?): the launch would stop with argparse's \"unrecognized arguments\"");
    assert!(
        evidence.contains(
            &"--trust-remote is taken as --trust-remote-code (an abbreviation)".to_string()
        ),
        "{evidence:?}"
    );
    // Not installed: the pinned version's list, said so; without a pin, skipped with the reason.
    let absent = ws.path().join("absent-venv");
    sglang_recipe(&ws, &absent, 1, &["--enable-torch-symm-memory"], true);
    let (st, summary, evidence) = flags_check(&ws, "h200x2");
    assert_eq!(st, "fail", "{summary}");
    assert!(evidence[0].contains("SGLang 0.5.9, which the recipe pins and is not installed yet (step `sglang` installs it)"), "{evidence:?}");
    sglang_recipe(&ws, &absent, 1, &["--enable-torch-symm-memory"], false);
    let (st, summary, _) = flags_check(&ws, "h200x2");
    assert_eq!(st, "skip");
    assert!(summary.contains("the recipe pins no version"), "{summary}");
}

#[test]
fn mixed_or_busy_gpus_in_one_group_and_quantization_on_the_slowest() {
    let ws = Workspace::new();
    let venv = ws.path().join("venv");
    let run = |scenario: &str, cvd: Option<&str>| {
        let mut cmd = on_host(&ws, Some(scenario));
        cmd.args(["doctor", "--recipe", "sg.toml"]);
        if let Some(c) = cvd {
            cmd.env("CUDA_VISIBLE_DEVICES", c);
        }
        json(&mut cmd).1
    };
    sglang_recipe(&ws, &venv, 4, &["--quantization", "modelopt_fp4"], false);
    let r = run("derived-mixed-4090-5090", None);
    let (st, summary) = status_summary(&r, "launch.gpu-group", "p");
    assert_eq!(st, "warn");
    assert!(summary.starts_with("mixed GPUs in one tensor-parallel group: 2× NVIDIA GeForce RTX 4090 (cc 8.9, 24564 MiB), 2× NVIDIA GeForce RTX 5090 (cc 12.0, 32607 MiB)"), "{summary}");
    assert_eq!(
        status_summary(&r, "launch.quantization", "p"),
        (
            "fail".into(),
            "--quantization modelopt_fp4 needs cc ≥ 10.0; NVIDIA GeForce RTX 4090 is cc 8.9".into()
        )
    );
    // Two of them selected: one model, and FP4 runs on the 5090s (cc 12.0).
    sglang_recipe(&ws, &venv, 2, &["--quantization", "modelopt_fp4"], false);
    let r = run("derived-mixed-4090-5090", Some("2,3"));
    assert_eq!(status_summary(&r, "launch.gpu-group", "p").0, "pass");
    assert_eq!(status_summary(&r, "launch.quantization", "p").0, "pass");
    assert_eq!(status_summary(&r, "launch.gpus", "p").0, "pass");
    // FP8 below cc 8.9 is a table row too: the 4090 passes it.
    sglang_recipe(&ws, &venv, 2, &["--quantization", "modelopt_fp8"], false);
    let r = run("derived-mixed-4090-5090", Some("0,1"));
    assert_eq!(status_summary(&r, "launch.quantization", "p").0, "pass");
    // Another process on GPU 1: SGLang's unbalanced-memory line, predicted.
    sglang_recipe(&ws, &venv, 2, &[], false);
    let r = run("derived-h200x2-gpu1-busy", None);
    let (st, summary) = status_summary(&r, "launch.gpu-group", "p");
    assert_eq!(st, "warn");
    assert!(
        summary.contains("GPU 1 is in use")
            && summary.contains("The memory capacity is unbalanced"),
        "{summary}"
    );
}

#[test]
fn kiln_up_refuses_a_profile_without_its_model_and_no_serve_provisions_without_it() {
    let ws = Workspace::new();
    ws.write(
        "r.toml",
        r#"[recipe]
name = "prov"

[vars]
model = { help = "the checkpoint directory" }

[[step]]
id = "touch"
kind = "run"
cmd = ["touch", "${kiln.work_dir}/ran"]

[profile.p]
cmd = ["/nonexistent/venv/bin/python", "-m", "sglang.launch_server"]
args = ["--model-path", "${model}", "--port", "30999"]
url = "http://127.0.0.1:30999"
"#,
    );
    let ran = ws.state().join("work/prov/ran");
    let (code, err) = output(on_host(&ws, Some("h200x2")).args(["up", "r.toml"]));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("✗ launch.model: --model-path comes from `${model}`, which has no value"),
        "{err}"
    );
    assert!(err.contains("hint: pass `--set model=PATH`"), "{err}");
    assert!(
        !ran.exists(),
        "the step must not run before the preflight passed"
    );
    let (code, err) = output(on_host(&ws, Some("h200x2")).args(["up", "r.toml", "--no-serve"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("kiln: launch preflight skipped: --no-serve provisions only"),
        "{err}"
    );
    assert!(ran.exists());
    // The model can come later, to `kiln serve`, which runs the preflight itself.
    let (code, err) = output(on_host(&ws, Some("h200x2")).args([
        "serve",
        "r.toml",
        "--set",
        "model=/nonexistent/ckpt",
    ]));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("✗ launch.model: model /nonexistent/ckpt does not exist (--model-path)"),
        "{err}"
    );
}

/// The CPU demo's recipe copied into the workspace, with a profile `typo` that passes a flag
/// llama-server does not have.
fn tiny_cpu_with_a_typo(ws: &Workspace) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes");
    copy_tree(&root.join("tiny-cpu"), &ws.path().join("tiny-cpu"));
    let mut text = std::fs::read_to_string(root.join("tiny-cpu.toml")).unwrap();
    text.push_str("\n[profile.typo]\nextends = \"baseline\"\nargs = [\"--thread-count\", \"2\"]\n");
    ws.write("tiny-cpu.toml", &text)
}

#[test]
fn the_cpu_demo_llama_server_rejects_an_unknown_flag_caught_before_launch() {
    let prefix = crate::bench::tiny_cpu();
    let ws = Workspace::new();
    let recipe = tiny_cpu_with_a_typo(&ws);
    let sets = [
        "--set".to_string(),
        format!("prefix={}", prefix.display()),
        "--set".to_string(),
        format!("port={}", free_port()),
    ];
    let (code, err) = output(
        on_host(&ws, None)
            .arg("serve")
            .arg(&recipe)
            .args(["--profile", "typo"])
            .args(&sets),
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("✗ launch.flags: llama-server does not know --thread-count"),
        "{err}"
    );
    assert!(!ws.state().join("serve").exists(), "nothing was launched");
    // The real binary says the same when it is launched with it.
    let real = std::process::Command::new(prefix.join("bin/llama-server"))
        .args(["--thread-count", "2"])
        .output()
        .unwrap();
    assert!(!real.status.success());
    assert!(
        String::from_utf8_lossy(&real.stderr).contains("invalid argument: --thread-count"),
        "{}",
        String::from_utf8_lossy(&real.stderr)
    );
    // The shipped profiles pass; doctor on this CPU box follows the recipe: exit 0, no GPU or
    // torch line.
    let out = on_host(&ws, None)
        .args(["doctor", "--recipe"])
        .arg(&recipe)
        .args(["--profile", "tuned", "-v"])
        .args(&sets)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("[✓] launch.flags"), "{text}");
    assert!(
        text.contains("flags known from `") && text.contains("bin/llama-server --help`"),
        "{text}"
    );
    assert!(
        text.contains("[-] nvidia.driver") && text.contains("needs no NVIDIA GPU"),
        "{text}"
    );
    assert!(text.contains("[-] python.torch"), "{text}");
}

#[test]
fn a_port_held_by_another_process_is_refused_before_launch() {
    let ws = Workspace::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (code, err) = output(on_host(&ws, None).args([
        "serve",
        &format!("{}/recipes/tiny-cpu.toml", env!("CARGO_MANIFEST_DIR")),
        "--set",
        &format!("prefix={}", ws.path().join("p").display()),
        "--set",
        &format!("port={port}"),
    ]));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "✗ launch.port: port {port} is already in use by pid {}",
            std::process::id()
        )) && err.contains("which kiln did not start for tiny-cpu")
            && err.contains(&format!(
                "hint: stop it (`kill {}`) if it is yours",
                std::process::id()
            )),
        "{err}"
    );
    assert!(
        err.contains("error: profile `tuned` of tiny-cpu cannot launch on this host: launch.port"),
        "{err}"
    );
    // tiny-cpu's port is a variable: `--set port=` moves it. A recipe whose port is written in
    // its profile is told to change it there (`--set port=` would be refused: no such variable).
    assert!(
        err.contains("or pick another port (e.g. `--set port="),
        "{err}"
    );
    ws.write(
        "r.toml",
        &crate::sglang_wire::standin_recipe("fixed", port, "0.2", ""),
    );
    let (code, err) = output(on_host(&ws, None).args(["serve", "r.toml"]));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("or give profile `tuned` another `port` in the recipe")
            && !err.contains("--set port="),
        "{err}"
    );
}

/// A tp-variable SGLang recipe (`tp = 8`) serving a 10-GiB checkpoint, `extra` arguments after.
fn tp_recipe(ws: &Workspace, extra: &str) {
    let model = checkpoint(ws, "m", 10, None);
    ws.write(
        "tp.toml",
        &format!(
            r#"[recipe]
name = "tp"

[vars]
tp = 8
port = "{port}"

[profile.p]
cmd = ["{python}", "-m", "sglang.launch_server"]
args = ["--model-path", "{model}", "--tp-size", "${{tp}}", "--port", "${{port}}"{extra}]
url = "http://127.0.0.1:${{port}}"
"#,
            port = free_port(),
            python = ws.path().join("venv/bin/python").display(),
            model = model.display(),
        ),
    );
}

#[test]
fn a_set_is_offered_only_when_the_preflight_passes_with_it_applied() {
    let ws = Workspace::new();
    let gpus_fix = |r: &Value| {
        launch(r, "launch.gpus", "p")["fix"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // BF16 on one H200: with tp=1 every host check passes, so `--set tp=1` is the hint.
    tp_recipe(&ws, "");
    let (_, r) = json(on_host(&ws, Some("derived-h200x1")).args(["doctor", "--recipe", "tp.toml"]));
    assert!(
        gpus_fix(&r).starts_with("`--set tp=1` to fit 1 GPU(s)"),
        "{r:#}"
    );
    let (_, err) = output(on_host(&ws, Some("derived-h200x1")).args(["serve", "tp.toml"]));
    assert!(
        err.contains("hint: what would run: `--set tp=1` to fit 1 GPU(s)"),
        "{err}"
    );
    let (_, again) = json(
        on_host(&ws, Some("derived-h200x1"))
            .args(["doctor", "--recipe", "tp.toml", "--set", "tp=1"]),
    );
    assert_eq!(status_summary(&again, "launch.gpus", "p").0, "pass");
    assert!(
        !again.to_string().contains("\"status\":\"fail\""),
        "{again:#}"
    );
    // NVFP4 on cc 9.0: tp=1 still fails the quantization check; no setting is offered.
    tp_recipe(&ws, r#", "--quantization", "modelopt_fp4""#);
    let (_, r) = json(on_host(&ws, Some("derived-h200x1")).args(["doctor", "--recipe", "tp.toml"]));
    let fix = gpus_fix(&r);
    assert!(
        fix.starts_with("with `--set tp=1` launch.quantization still fails: no setting of this recipe fits this host; shipped recipes that fit it: `kiln up llama-cuda`"),
        "{fix}"
    );
    let (_, err) = output(on_host(&ws, Some("derived-h200x1")).args(["serve", "tp.toml"]));
    assert!(
        err.contains("what would run: no setting of this recipe fits this host (with `--set tp=1` launch.quantization still fails)")
            && !err.contains("to fit 1 GPU(s)"),
        "{err}"
    );
}

#[test]
fn sglang_flags_derived_from_its_dataclass_fields_are_read_like_its_own_parser() {
    // SGLang 0.5.15.post1 adds most flags from ServerArgs's annotated dataclass fields, not from
    // add_argument calls: kiln's reading of the real wheel's server_args.py must find every flag
    // its own argparse parser holds (the shipped list, generated from that parser), no more.
    let ws = Workspace::new();
    let venv = venv_over(&ws, "sglang==0.5.15.post1");
    let shipped = shipped_flags("sglang-0.5.15.post1.flags");
    let listed: Vec<&str> = shipped.lines().filter(|l| l.starts_with("--")).collect();
    assert!(listed.len() > 400, "{}", listed.len());
    sglang_recipe(&ws, &venv, 1, &listed[..], false);
    let (st, summary, evidence) = flags_check(&ws, "h200x2");
    assert_eq!(st, "pass", "{summary} {evidence:?}");
    assert_eq!(
        evidence[0],
        format!(
            "{} flags known from {}/sglang/srt/server_args.py (sglang 0.5.15.post1)",
            listed.len(),
            venv.join("lib/python3.12/site-packages").display()
        )
    );
    // A misspelt dataclass-derived flag is still the "unrecognized arguments" crash.
    sglang_recipe(&ws, &venv, 1, &["--attention-backnd", "triton"], false);
    let (st, summary, _) = flags_check(&ws, "h200x2");
    assert_eq!(st, "fail", "{summary}");
    assert!(
        summary.contains("--attention-backnd (did you mean --attention-backend?)"),
        "{summary}"
    );
}
