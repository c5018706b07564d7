//! Pins of the launch preflight's group, checkpoint and quantization rules: each test is red
//! with one mutant of `bench/mutants.sh src/doctor/launch/mod.rs --shard 1/4` or `2/4` applied
//! (issue 48), named beside it.

use super::count_tests::{checks_on, checks_with, one};
use super::tests::h200x2;
use super::*;

fn gpus_with(edit: impl Fn(&mut [Gpu])) -> Vec<Gpu> {
    let mut gpus = h200x2();
    edit(&mut gpus);
    gpus
}

/// `seen > 0 &&` → `>=`: with no GPU at all, no `--set tp=…` is offered (there is nothing to fit).
#[test]
fn no_gpu_gets_no_tensor_parallel_size_to_fit() {
    let c = one(
        checks_on(&[], &["--tp-size", "2", "--nnodes", "2"], &[], None),
        "launch.gpus",
    );
    assert_eq!(c.status, Status::Fail, "{c:?}");
    let fix = c.fix.unwrap_or_default();
    assert!(!fix.contains("--set tp"), "{fix}");
}

/// The group check's `||` → `&&`: data parallelism without tensor parallelism is no
/// tensor-parallel group, and two GPUs of one name but different memory are mixed.
#[test]
fn a_group_is_tensor_parallel_and_mixed_by_name_or_by_memory() {
    let dp = one(
        checks_on(&h200x2(), &["--tp-size", "1", "--dp-size", "2"], &[], None),
        "launch.gpu-group",
    );
    assert_eq!(dp.status, Status::Skip, "{dp:?}");
    let smaller = gpus_with(|g| g[1].memory_mib -= 1024);
    let mixed = one(
        checks_on(&smaller, &["--tp-size", "2"], &[], None),
        "launch.gpu-group",
    );
    assert_eq!(mixed.status, Status::Warn, "{mixed:?}");
    assert!(
        mixed
            .summary
            .starts_with("mixed GPUs in one tensor-parallel group"),
        "{mixed:?}"
    );
}

/// `min < max * 0.9` → `<=`: free memory exactly 90 % of the roomiest GPU's is balanced.
#[test]
fn free_memory_within_a_tenth_is_balanced_at_the_boundary() {
    let edge = gpus_with(|g| {
        let total = g[0].memory_mib;
        g[0].memory_used_mib = Some(total - 1000);
        g[1].memory_used_mib = Some(total - 900);
    });
    let c = one(
        checks_on(&edge, &["--tp-size", "2"], &[], None),
        "launch.gpu-group",
    );
    assert_eq!(c.status, Status::Pass, "{c:?}");
    let below = gpus_with(|g| {
        let total = g[0].memory_mib;
        g[0].memory_used_mib = Some(total - 1000);
        g[1].memory_used_mib = Some(total - 899);
    });
    let c = one(
        checks_on(&below, &["--tp-size", "2"], &[], None),
        "launch.gpu-group",
    );
    assert_eq!(c.status, Status::Warn, "{c:?}");
}

/// The hub rule (`!starts_with` `&&` one `/`): only `org/name` is a hub id; a path that starts
/// with `.` or has more parts is a local path that does not exist.
#[test]
fn only_org_slash_name_is_read_as_a_hub_model() {
    let model = |path: &str| {
        one(
            checks_on(
                &h200x2(),
                &["--model-path", path, "--tp-size", "1"],
                &[],
                None,
            ),
            "launch.model",
        )
    };
    let hub = model("zai-org/GLM-5-kiln-test");
    assert_eq!(hub.status, Status::Warn, "{hub:?}");
    assert!(hub.summary.contains("Hugging Face hub"), "{hub:?}");
    for local in [
        "./zai-org/GLM-5-kiln-test",
        "zai-org/GLM-5/kiln-test",
        "GLM-5-kiln-test",
    ] {
        let c = model(local);
        assert_eq!(c.status, Status::Fail, "{local}: {c:?}");
        assert!(c.summary.contains("does not exist"), "{local}: {c:?}");
    }
}

/// The checkpoint's own quantization is judged (`!` deleted: it was dropped), and once when the
/// flag names the same method (`==` → `!=`: it was listed twice).
#[test]
fn the_checkpoints_quantization_counts_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"architectures": ["LlamaForCausalLM"], "quantization_config": {"quant_method": "fp8"}}"#,
    )
    .unwrap();
    let path = dir.path().to_str().unwrap();
    let quant = |extra: &[&str]| {
        let mut args = vec!["--model-path", path, "--tp-size", "1"];
        args.extend_from_slice(extra);
        one(
            checks_on(&h200x2(), &args, &[], None),
            "launch.quantization",
        )
    };
    let own = quant(&[]);
    assert_eq!(own.status, Status::Pass, "{own:?}");
    assert!(own.summary.starts_with("the checkpoint's "), "{own:?}");
    let both = quant(&["--quantization", "fp8"]);
    assert_eq!(both.status, Status::Pass, "{both:?}");
    assert!(
        both.summary.starts_with("--quantization fp8 runs on ") && !both.summary.contains(" and "),
        "{both:?}"
    );
}

/// Every launch check of `cmd` + `args` on `gpus`, with `ram` bytes of RAM available and SGLang
/// `pinned` by the recipe.
fn run(
    cmd: &[&str],
    gpus: &[Gpu],
    args: &[&str],
    ram: Option<u64>,
    pinned: Option<&str>,
) -> Vec<Check> {
    let cmd: Vec<String> = cmd.iter().map(|a| (*a).to_string()).collect();
    checks_with(&cmd, gpus, args, &[], None, ram, pinned)
}

const MIB_BYTES: u64 = 1 << 20;

/// A sparse GGUF file of `mib` MiB.
fn gguf(dir: &Path, mib: u64) -> String {
    let path = dir.join(format!("m{mib}.gguf"));
    std::fs::File::create(&path)
        .unwrap()
        .set_len(mib * MIB_BYTES)
        .unwrap();
    path.to_str().unwrap().to_string()
}

/// `fit`'s `on_gpu` (`&&` → `||`, `!=` → `==`, `!` deleted): llama-server's weights go to the
/// GPUs only when it offloads layers and has a GPU; otherwise they are measured against RAM.
#[test]
fn llama_server_weights_are_measured_on_the_gpus_only_when_it_offloads_to_one() {
    let dir = tempfile::tempdir().unwrap();
    let model = gguf(dir.path(), 64);
    let weights = |gpus: &[Gpu], ngl: &str| {
        one(
            run(
                &["llama-server"],
                gpus,
                &["-m", &model, "-ngl", ngl],
                Some(64 * 1024 * MIB_BYTES),
                None,
            ),
            "launch.weights",
        )
        .summary
    };
    let h200 = h200x2();
    assert!(
        weights(&h200, "99").contains(" free on "),
        "{}",
        weights(&h200, "99")
    );
    assert!(
        weights(&h200, "0").contains("of RAM available"),
        "{}",
        weights(&h200, "0")
    );
    assert!(
        weights(&[], "99").contains("of RAM available"),
        "{}",
        weights(&[], "99")
    );
}

/// `share > FIT_SHARE` and `share > KV_SHARE` → `>=`: weights of exactly 95 % of free memory
/// still fit (with a warning), exactly 85 % pass.
#[test]
fn weights_at_exactly_the_margins_are_on_the_lenient_side() {
    let dir = tempfile::tempdir().unwrap();
    let status = |mib: u64| {
        one(
            run(
                &["llama-server"],
                &[],
                &["-m", &gguf(dir.path(), mib), "-ngl", "0"],
                Some(20 * MIB_BYTES),
                None,
            ),
            "launch.weights",
        )
        .status
    };
    assert_eq!(status(19), Status::Warn); // 95 %
    assert_eq!(status(20), Status::Fail);
    assert_eq!(status(17), Status::Pass); // 85 %
    assert_eq!(status(18), Status::Warn);
}

/// `Err(c) if c.is_empty()` → `true`: an abbreviation that matches several flags is said to be
/// ambiguous, with the flags it could mean, not "unknown".
#[test]
fn an_ambiguous_abbreviation_is_named_with_what_it_could_mean() {
    let c = one(
        run(
            &[
                "/nonexistent-kiln/venv/bin/python",
                "-m",
                "sglang.launch_server",
            ],
            &h200x2(),
            &["--model-path", "zai-org/GLM-5-kiln-test", "--enable-torch"],
            None,
            Some("0.5.15.post1"),
        ),
        "launch.flags",
    );
    assert_eq!(c.status, Status::Fail, "{c:?}");
    assert!(
        c.summary.contains("--enable-torch (ambiguous: ")
            && c.summary.contains("--enable-torch-symm-mem"),
        "{c:?}"
    );
}
