//! `kiln serve`: early-exit triage and tuning verdicts replayed from real SGLang logs (a profile
//! whose command prints a captured log), and the readiness of a real llama-server (tiny-cpu).

use std::path::PathBuf;

use crate::common::Workspace;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/serve")
        .join(name)
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A recipe with one profile `replay` that prints the captured text of `log` (without the
/// fixture's `#` header lines) and exits with `code`, judged by SGLang 0.5.9's signatures.
fn replay_recipe(ws: &Workspace, log: &str, code: i32, port: Option<u16>, args: &[&str]) {
    replay_recipe_of(ws, log, code, port, args, "sglang-0.5.9");
}

/// [`replay_recipe`] judged by the shipped signatures `sigs`.
fn replay_recipe_of(
    ws: &Workspace,
    log: &str,
    code: i32,
    port: Option<u16>,
    args: &[&str],
    sigs: &str,
) {
    let port = port.map_or(String::new(), |p| format!("port = \"{p}\"\n"));
    let args = args
        .iter()
        .map(|a| format!("{a:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    ws.write(
        "r.toml",
        &format!(
            "[recipe]\nname = \"replay\"\n\n[profile.replay]\ncmd = [\"sh\", \"-c\", \"grep -v '^#' \\\"$0\\\"; exit {code}\", {:?}]\n\
             args = [{args}]\nsignatures = \"{sigs}\"\napi = \"sglang\"\n{port}",
            fixture(log).display().to_string()
        ),
    );
}

fn serve_fails_with(log: &str, cause_id: &str, evidence: &str) {
    serve_of_fails_with(log, "sglang-0.5.9", 1, cause_id, evidence);
}

/// The replayed `log` of a server that exits with `code`, judged by `sigs`, is the crash
/// `cause_id` with the `evidence` line.
fn serve_of_fails_with(log: &str, sigs: &str, code: i32, cause_id: &str, evidence: &str) {
    let ws = Workspace::new();
    replay_recipe_of(&ws, log, code, Some(free_port()), &[], sigs);
    let out = ws.kiln().args(["serve", "r.toml"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "error: profile `replay` exited with status {code} after"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("[{cause_id}]")),
        "expected cause {cause_id}:\n{err}"
    );
    assert!(err.contains(&format!("evidence: {evidence}")), "{err}");
    assert!(
        err.contains("--- last lines of the server log ---") && err.contains("hint: "),
        "{err}"
    );
    assert!(
        !ws.state().join("serve/replay.json").exists(),
        "the record of a dead server must go"
    );
}

#[test]
fn triage_capability_table_keyerror() {
    serve_fails_with(
        "sglang-0.5.9-symm-mem-real-code.log",
        "capability-table",
        "KeyError: 12",
    );
}

#[test]
fn triage_a_real_sglang_0_5_15_bad_flag_value() {
    serve_of_fails_with(
        "sglang-0.5.15-bad-attention-backend.log",
        "sglang-0.5.15",
        2,
        "bad-argument",
        "sglang serve: error: argument --attention-backend: invalid choice: 'nonsense' (choose from 'triton', 'torch_native',",
    );
}

#[test]
fn triage_a_real_sglang_0_5_15_start_without_a_gpu() {
    serve_of_fails_with(
        "sglang-0.5.15-no-accelerator.log",
        "sglang-0.5.15",
        1,
        "no-accelerator",
        "RuntimeError: No accelerator (CUDA, XPU, HPU, NPU, MUSA, MPS) or platform plugin is available.",
    );
}

/// A real SGLang 0.5.15 crash on an H100 (kiln's `spec` profile of sglang-cuda, STANDALONE
/// speculative decoding): the traceback runs through `init_cuda_graphs`, but its last line is a
/// missing module. Read as "CUDA graph capture failed" before, with a hint to disable graphs.
#[test]
fn triage_a_real_sglang_0_5_15_missing_module_is_not_a_graph_capture_failure() {
    serve_of_fails_with(
        "sglang-0.5.15-h100-standalone-missing-cutlass.log",
        "sglang-0.5.15",
        1,
        "missing-module",
        "ModuleNotFoundError: No module named 'cutlass'",
    );
}

/// A real SGLang 0.5.15 start-up on an H200 given `--mem-fraction-static 1.7` (sglang-cuda's
/// `baseline` with `--set mem_fraction=1.7`, session 22): SGLang takes the value, runs out of
/// memory allocating the KV cache and ends its own process tree with SIGKILL (the replay kills
/// itself the same way; `$$$$` is the shell's `$$` in a recipe).
#[test]
fn triage_a_real_sglang_0_5_15_kv_cache_oom_killed_by_its_own_signal() {
    let ws = Workspace::new();
    ws.write(
        "r.toml",
        &format!(
            "[recipe]\nname = \"replay\"\n\n[profile.replay]\ncmd = [\"sh\", \"-c\", \"cat \\\"$0\\\"; kill -9 $$$$\", {:?}]\n\
             signatures = \"sglang-0.5.15\"\napi = \"sglang\"\nport = \"{}\"\n",
            fixture("sglang-0.5.15-h200-kv-cache-oom.log").display().to_string(),
            free_port()
        ),
    );
    let out = ws.kiln().args(["serve", "r.toml"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error: profile `replay` was killed by signal 9 after"),
        "{err}"
    );
    assert!(
        err.contains("cause: CUDA out of memory [cuda-oom]"),
        "{err}"
    );
    assert!(
        err.contains(
            "evidence: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.35 GiB."
        ),
        "{err}"
    );
    assert!(
        err.trim_end()
            .lines()
            .last()
            .is_some_and(|l| l.starts_with("hint: lower --mem-fraction-static")),
        "{err}"
    );
}

#[test]
fn triage_cuda_oom() {
    serve_fails_with(
        "sglang-capture-cuda-graph-failed-cuda-oom-h20-tp8.txt",
        "cuda-oom",
        "Exception: Capture cuda graph failed: CUDA out of memory.",
    );
}

#[test]
fn triage_no_kernel_image() {
    serve_fails_with(
        "sglang-capture-cuda-graph-failed-no-supported-cuda-arch-10-8x-16gb-blackwell.txt",
        "no-kernel-image",
        "Exception: Capture cuda graph failed: No supported CUDA architectures found for major versions [10].",
    );
}

#[test]
fn triage_nccl_error() {
    serve_fails_with(
        "sglang-nccl-unhandled-system-error-groupcoordinator-init.txt",
        "nccl",
        "raise RuntimeError(f\"NCCL error: {error_str}\")",
    );
}

#[test]
fn triage_graph_capture_failure() {
    serve_fails_with("sglang-rtx-5090-cuda-graph-init-traceback-rmsnorm-no-kernel-image.txt", "graph-capture", "File \"/home/user/sglang/python/sglang/srt/model_executor/model_runner.py\", line 1138, in init_cuda_graphs");
}

#[test]
fn triage_jit_build_failure() {
    serve_fails_with(
        "sglang-flashinfer-jit-ninja-build-failed-during-cuda-graph-capture-ray.txt",
        "jit-build",
        "(SGLangEngine pid=23902)   File",
    );
}

#[test]
fn port_in_use_is_refused_before_launch() {
    let ws = Workspace::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    replay_recipe(
        &ws,
        "sglang-nccl-unhandled-system-error-groupcoordinator-init.txt",
        1,
        Some(port),
        &[],
    );
    let out = ws.kiln().args(["serve", "r.toml"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "port {port} is already in use by pid {}",
            std::process::id()
        )) && err.contains("which kiln did not start")
            && err.contains(&format!(
                "hint: stop it (`kill {}`) if it is yours",
                std::process::id()
            )),
        "{err}"
    );
}

#[test]
fn verdict_symm_mem_fell_back_multicast_unsupported() {
    let ws = Workspace::new();
    replay_recipe(
        &ws,
        "sglang-0.5.9-symm-mem-fell-back-h200x2.log",
        0,
        None,
        &["--enable-torch-symm-mem"],
    );
    let out = ws.kiln().args(["serve", "r.toml"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a fallback is a warning: {text}"
    );
    assert!(
        text.contains("torch-symm-mem               fell back: multicast unsupported"),
        "{text}"
    );
    assert!(text.contains("evidence: [2026-11-30 08:41:50,613 TP0] TorchSymmMemCommunicator: torch symmetric memory multicast operations are not supported."), "{text}");
}

#[test]
fn verdict_symm_mem_crashed_on_keyerror() {
    let ws = Workspace::new();
    replay_recipe(
        &ws,
        "sglang-0.5.9-symm-mem-real-code.log",
        0,
        None,
        &["--enable-torch-symm-mem"],
    );
    let out = ws
        .kiln()
        .args(["serve", "r.toml", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let v = crate::reporter::json_event(&String::from_utf8_lossy(&out.stdout), "verdicts");
    assert_eq!(v["verdicts"][0]["feature"], "torch-symm-mem");
    assert_eq!(v["verdicts"][0]["status"], "crashed");
    assert_eq!(v["verdicts"][0]["evidence"], "KeyError: 12");
}

#[test]
fn verdict_fusion_fell_back_without_workspace_line_and_custom_ar_disabled() {
    let ws = Workspace::new();
    replay_recipe(
        &ws,
        "sglang-startup-4gpu-pcie-custom-allreduce-disabled-gloo-nccl-2.27.3.txt",
        0,
        None,
        &[
            "--enable-flashinfer-allreduce-fusion",
            "--attention-backend",
            "flashinfer",
        ],
    );
    ws.write(
        "r.toml",
        &(std::fs::read_to_string(ws.path().join("r.toml")).unwrap()
            + "expect = [\"custom-all-reduce\"]\n"),
    );
    let out = ws.kiln().args(["serve", "r.toml"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("flashinfer-allreduce-fusion  fell back: requested, but \"FlashInfer workspace initialized\" never appeared"), "{text}");
    assert!(
        text.contains("custom-all-reduce            fell back: more than two PCIe-only GPUs"),
        "{text}"
    );
    assert!(
        text.contains("attention-backend            unknown"),
        "{text}"
    );
}

#[test]
fn verdict_from_the_real_h200_probe_run_reads_fell_back_no_multicast() {
    // Replays the log kiln wrote on 2x H200 (tests/fixtures/serve/symm-mem-probe.toml, TP=2).
    let ws = Workspace::new();
    ws.write(
        "r.toml",
        &format!(
            "[recipe]\nname = \"probe\"\n[profile.tp2]\ncmd = [\"sh\", \"-c\", \"grep -v '^#' \\\"$0\\\"\", {:?}]\n\
             args = [\"--enable-torch-symm-mem\"]\nsignatures = \"torch-symm-mem-probe\"\n",
            fixture("symm-mem-probe-h200x2-kiln.log").display().to_string()
        ),
    );
    let out = ws.kiln().args(["serve", "r.toml"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("torch-symm-mem               fell back: no multicast (multicast_ptr is 0)"),
        "{text}"
    );
    assert!(
        text.contains(
            "evidence: RESULT {\"rank\": 1, \"world\": 2, \"cap\": [9, 0], \"multicast_ptr\": 0"
        ),
        "{text}"
    );
}

#[test]
fn triage_port_in_use_from_real_llama_server_output() {
    // Captured from the real llama-server (tiny-cpu build) started on a port another one held.
    let ws = Workspace::new();
    ws.write(
        "r.toml",
        &format!(
            "[recipe]\nname = \"replay\"\n[profile.replay]\ncmd = [\"sh\", \"-c\", \"cat \\\"$0\\\"; exit 1\", {:?}]\n\
             port = \"{}\"\nsignatures = \"llama-server\"\n",
            fixture("llama-server-port-in-use.log").display().to_string(),
            free_port()
        ),
    );
    let out = ws.kiln().args(["serve", "r.toml"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("[port-in-use]")
            && err.contains("couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 30992"),
        "{err}"
    );
}

/// A server whose health check answers but whose generation never does: the readiness
/// generation gets what is left of `serve --timeout`, so kiln gives up near that timeout instead
/// of the request's own ten minutes (issue 20: every wait bounded).
#[test]
fn the_readiness_generation_ends_with_the_serve_timeout() {
    let ws = Workspace::new();
    let port = free_port();
    ws.write(
        "hang.py",
        "import http.server, sys, time\n\
         class H(http.server.BaseHTTPRequestHandler):\n\
         \x20   def do_GET(self):\n\
         \x20       self.send_response(200); self.end_headers(); self.wfile.write(b'{}')\n\
         \x20   def do_POST(self):\n\
         \x20       time.sleep(300)\n\
         http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n",
    );
    ws.write(
        "r.toml",
        &format!(
            "[recipe]\nname = \"hang\"\n[profile.p]\ncmd = [\"python3\", {:?}, \"{port}\"]\nport = \"{port}\"\napi = \"openai\"\n",
            ws.path().join("hang.py").display().to_string()
        ),
    );
    // A hang detector, not a speed test: without the fix the request waits ten minutes, and
    // assert_cmd kills kiln at 120 s (no exit code then).
    let out = ws
        .kiln()
        .args(["serve", "r.toml", "--timeout", "5"])
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    let status = out.status;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("/health answered 200"), "{err}");
}

/// `kiln serve` before `kiln up` (README's order for a newcomer who skips the main job): the
/// profile's program is made by the recipe's steps, so the error says to run them, not to fix
/// the PATH.
#[test]
fn serving_a_recipe_whose_steps_have_not_run_says_to_run_them_first() {
    let ws = Workspace::new();
    let out = ws
        .kiln()
        .args(["serve", "tiny-cpu", "--profile", "tuned"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cannot launch: the profile's program ")
            && err.contains("/work/tiny-cpu/bin/llama-server does not exist"),
        "{err}"
    );
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("hint: if the steps of recipe `tiny-cpu` make it, run them first: `kiln up` with the same recipe and `--no-serve`"),
        "{err}"
    );
    assert!(!err.contains("fix the PATH"), "{err}");
}
