//! Verdicts from the real H200 runs of `recipes/llama-cuda.toml` (tests/fixtures/gpu-llama/: the
//! server logs kiln wrote and the /metrics pages it read; per-token debug lines trimmed), replayed
//! with `kiln serve --log` so CI proves them without a GPU.

use std::path::PathBuf;

use crate::common::Workspace;

fn fixture(run: &str, name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/gpu-llama")
        .join(run)
        .join(name)
}

/// `kiln serve llama-cuda --profile P --log LOG [--metrics M]`: (exit code, stdout).
fn judge(profile: &str, log: PathBuf, metrics: Option<PathBuf>) -> (i32, String) {
    let ws = Workspace::new();
    let mut cmd = ws.kiln();
    cmd.args(["serve", "llama-cuda", "--profile", profile, "--log"])
        .arg(log);
    if let Some(m) = metrics {
        cmd.arg("--metrics").arg(m);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn tuned_profile_on_the_h200_every_tuning_active() {
    let (code, text) = judge("tuned", fixture("h200-run2", "llama-cuda-tuned.log"), None);
    assert_eq!(code, 0, "{text}");
    for line in [
        "flash-attn                   active: `on` confirmed by the log",
        "offload                      active: 17/17 layers on the GPU (100.0 %)",
        "cuda-graphs                  active: confirmed by the log",
        "evidence: 0.00.731.427 D ggml_backend_cuda_graph_compute: CUDA graph warmup complete",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}

#[test]
fn self_draft_is_accepted_and_a_mismatched_draft_falls_back() {
    // The counters decide; the log's 7409/7533 over its eight requests corroborates (no more).
    let (code, text) = judge(
        "spec",
        fixture("h200-run2", "llama-cuda-spec.log"),
        Some(fixture("h200-run2", "metrics-spec.txt")),
    );
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains(
            "speculative                  active: 9225/9380 draft tokens accepted (98.3 %)"
        ),
        "{text}"
    );
    // The log alone cannot prove acceptance: per-request lines only corroborate.
    let (code, text) = judge("spec", fixture("h200-run2", "llama-cuda-spec.log"), None);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("speculative                  unknown: the log's `draft tokens accepted` lines add up to 7409/7533 (98.4 %), but per-request lines only corroborate"),
        "{text}"
    );
    let (code, text) = judge(
        "spec-mismatch",
        fixture("h200-run2", "llama-cuda-spec-mismatch.log"),
        Some(fixture("h200-run2", "metrics-spec-mismatch.txt")),
    );
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("speculative                  fell back: 0/82869 draft tokens accepted (0.0 %), below the 30 % it takes"),
        "{text}"
    );
}

#[test]
fn acceptance_from_metrics_when_the_log_has_no_request_yet() {
    // The spec log cut before its first finished request: only /metrics can say.
    let full = std::fs::read_to_string(fixture("h200-run2", "llama-cuda-spec.log")).unwrap();
    let cut: String = full
        .lines()
        .take_while(|l| !l.contains("draft acceptance"))
        .flat_map(|l| [l, "\n"])
        .collect();
    let ws = Workspace::new();
    let log = ws.write("spec-start.log", &cut);
    let (code, text) = judge("spec", log, Some(fixture("h200-run2", "metrics-spec.txt")));
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains(
            "speculative                  active: 9225/9380 draft tokens accepted (98.3 %)"
        ) && text.contains("/metrics: llamacpp:spec_decode_num_accepted_tokens_total 9225"),
        "{text}"
    );
}

#[test]
fn first_h200_run_draft_loaded_but_nothing_drafted() {
    // llama.cpp loads `-md` but drafts only with `--spec-type`: the run looked healthy (tok/s as
    // without a draft) and kiln said why.
    let (code, text) = judge("spec", fixture("h200-run1", "llama-cuda-spec.log"), None);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("speculative                  fell back: the draft model is loaded but nothing drafts: no speculative type is set (add `--spec-type draft-simple`)")
            && text.contains("no implementations specified for speculative decoding"),
        "{text}"
    );
    // Logged at -lv 4, CUDA graph capture leaves no line: not counted as active.
    assert!(
        text.contains("cuda-graphs                  fell back: no CUDA graph was captured"),
        "{text}"
    );
}

#[test]
fn a_log_that_cannot_be_read_is_an_error_naming_it() {
    let ws = Workspace::new();
    let out = ws
        .kiln()
        .args([
            "serve",
            "llama-cuda",
            "--profile",
            "tuned",
            "--log",
            "nope.log",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0));
    assert!(err.contains("cannot read the server log nope.log"), "{err}");
    // It ends with what to do, not with the OS's cause.
    assert!(
        err.trim_end()
            .lines()
            .last()
            .is_some_and(|l| l.starts_with("hint: nothing is at that path")),
        "{err}"
    );
}

/// A server log of `recipes/sglang-cuda.toml`'s `profile` from a real run: the H100's
/// (sessions 17 and 19) or the H200's (session 22), `gpu` naming it.
fn sglang_log(gpu: &str, profile: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/fixtures/gpu-{gpu}-sglang"))
        .join(format!("sglang-cuda-{profile}.log"))
}

/// The real SGLang runs of `recipes/sglang-cuda.toml` (SGLang 0.5.15.post1 on an H100, session
/// 17, and on an H200, session 22): `tuned`'s CUDA graphs are proven by SGLang's own
/// capture line; its Triton attention is only named in the resolved configuration (configured,
/// a warning that fails a judged launch); `--enable-torch-symm-mem` at TP=1 fell back.
#[test]
fn the_real_sglang_runs_read_graphs_active_attention_configured_and_symm_mem_fell_back() {
    for gpu in ["h100", "h200"] {
        real_sglang_run_reads_graphs_active_attention_configured_and_symm_mem_fell_back(gpu);
    }
}

fn real_sglang_run_reads_graphs_active_attention_configured_and_symm_mem_fell_back(gpu: &str) {
    let log = |p: &str| sglang_log(gpu, p);
    let verdict = |out: &str, tuning: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(tuning))
            .map_or_else(
                || panic!("no verdict for {tuning}:\n{out}"),
                |l| l[tuning.len()..].trim().to_string(),
            )
    };
    let ws = Workspace::new();
    for profile in ["tuned", "symm-mem"] {
        let out = ws
            .kiln()
            .args(["serve", "sglang-cuda", "--profile", profile, "--log"])
            .arg(log(profile))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{gpu} {profile}: {stdout}");
        // Not a failure: the hint says nothing proved it either way, and what `kiln up` makes of it.
        if profile == "tuned" {
            assert!(
                stderr.trim_end().ends_with(
                    "hint: not proven either way (configured: only the server's settings name it; unknown: no line decided it): `kiln up` takes these as warnings, failing only with --strict"
                ),
                "{stderr}"
            );
        } else {
            assert!(
                stderr
                    .trim_end()
                    .ends_with("`kiln doctor` checks the gates behind most fallbacks"),
                "{gpu} {profile}: {stderr}"
            );
        }
        assert_eq!(
            verdict(&stdout, "cuda-graphs"),
            "active: confirmed by the log",
            "{gpu} {profile}"
        );
        assert!(
            verdict(&stdout, "attention-backend").starts_with("configured: "),
            "{gpu} {profile}: {stdout}"
        );
    }
    let out = ws
        .kiln()
        .args(["serve", "sglang-cuda", "--profile", "symm-mem", "--log"])
        .arg(log("symm-mem"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        verdict(&stdout, "torch-symm-mem").starts_with("fell back: predicted: TP=1"),
        "{stdout}"
    );
}

/// The speculative profiles on the H100 (session 19, after `cutlass` and `deep_gemm` joined
/// the offline set) and on the H200 (session 22): the target as its own draft accepts 4.7-4.9
/// tokens per step (active), the mismatched draft 1.00 (fell back: no draft token accepted).
/// Each log holds the decode lines of `kiln bench`'s traffic.
#[test]
fn the_real_speculative_profiles_read_active_and_fell_back_by_their_accept_length() {
    let ws = Workspace::new();
    for (gpu, profile, want) in [
        ("h100", "spec", "active: accept length"),
        ("h100", "spec-mismatch", "fell back: accept length 1.00"),
        ("h200", "spec", "active: accept length"),
        ("h200", "spec-mismatch", "fell back: accept length 1.00"),
    ] {
        let log = sglang_log(gpu, profile);
        let out = ws
            .kiln()
            .args(["serve", "sglang-cuda", "--profile", profile, "--log"])
            .arg(&log)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .find(|l| l.starts_with("speculative-decoding"))
            .unwrap_or_else(|| panic!("{gpu} {profile}: no verdict:\n{stdout}"));
        assert!(
            line["speculative-decoding".len()..]
                .trim()
                .starts_with(want),
            "{gpu} {profile}: {line}"
        );
        assert_eq!(out.status.code(), Some(1), "{gpu} {profile}: {stdout}");
    }
}
