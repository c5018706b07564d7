//! Every shipped recipe and toolchain loads, and `kiln plan` of the default GPU stack works on a
//! machine without a GPU.

use crate::common::{stderr_of, Workspace};

#[test]
fn every_shipped_recipe_plans() {
    let ws = Workspace::new();
    for name in kiln::recipe::shipped::recipe_names() {
        let out = ws
            .kiln()
            .args(["plan", &name])
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with(&format!("recipe {name} ")), "{text}");
    }
}

#[test]
fn every_recipe_and_toolchain_file_in_the_tree_loads() {
    let ws = Workspace::new();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in ["recipes", "toolchains"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap().flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "toml") {
                ws.kiln().arg("plan").arg(&path).assert().success();
            }
        }
    }
}

#[test]
fn the_sm120_stack_plans_without_a_gpu() {
    let ws = Workspace::new();
    let out = ws
        .kiln()
        .args(["plan", "glm5-nvfp4-sm120", "--json"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let plan = crate::reporter::json_event(&String::from_utf8_lossy(&out), "plan");
    let ids: Vec<&str> = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    for id in [
        "cuda",
        "torch",
        "flash-attn",
        "flashinfer",
        "sgl-kernel",
        "sglang",
    ] {
        assert!(ids.contains(&id), "{id} missing from {ids:?}");
    }
    let fa = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "flash-attn")
        .unwrap();
    assert!(
        fa["max_jobs"].as_u64().unwrap() >= 1,
        "MAX_JOBS is shown: {fa}"
    );
}

#[test]
fn arch_follows_the_gpu_and_set_overrides_it() {
    let ws = Workspace::new();
    let dump = |args: &[&str], cc: Option<&str>| {
        let mut c = ws.kiln();
        c.args(["plan", "glm5-nvfp4-sm120", "--json"]).args(args);
        if let Some(cc) = cc {
            c.env("KILN_FACT_GPU_CC", cc);
        }
        let out = c.assert().success().get_output().stdout.clone();
        crate::reporter::json_event(&String::from_utf8_lossy(&out), "plan")
    };
    // The plan differs by arch: the same recipe fingerprints differently for sm_90 and sm_120.
    let sm120 = dump(&[], Some("12.0"));
    let sm90 = dump(&[], Some("9.0"));
    let set90 = dump(&["--set", "arch=9.0"], Some("12.0"));
    assert_eq!(sm90, set90);
    assert_ne!(sm120, sm90);
}

#[test]
fn the_seed_recipe_picks_flashinfers_target_itself() {
    let ws = Workspace::new();
    let plan = |args: &[&str], cc: &str| {
        let out = ws
            .kiln()
            .args(["plan", "glm5-nvfp4-sm120"])
            .args(args)
            .env("KILN_FACT_GPU_CC", cc)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr)
    };
    let json = |args: &[&str], cc: &str| {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        crate::reporter::json_event(&plan(&all, cc), "plan")
    };
    // On an H200 (cc 9.0) the arch list is 9.0a (no family target below 10.0), without a warning;
    // on SM120 it is the family 12.0f. (The plan fingerprints each step's environment.)
    assert_eq!(
        json(&[], "9.0"),
        json(&["--set", "flashinfer_arch=9.0a"], "9.0")
    );
    assert_ne!(
        json(&[], "9.0"),
        json(&["--set", "flashinfer_arch=9.0f"], "9.0")
    );
    assert_eq!(
        json(&[], "12.0"),
        json(&["--set", "flashinfer_arch=12.0f"], "12.0")
    );
    let h200 = plan(&[], "9.0");
    assert!(!h200.contains("warning"), "{h200}");
    let asked = plan(&["--set", "flashinfer_arch=9.0f"], "9.0");
    assert!(
        asked.contains("names `9.0f`") && asked.contains("`9.0a`"),
        "{asked}"
    );
}

#[test]
fn up_of_the_gpu_stack_stops_at_the_doctor_preflight_without_a_driver() {
    let ws = Workspace::new();
    let opt = ws.path().join("opt");
    let stderr = stderr_of(
        ws.kiln()
            .args(["up", "glm5-nvfp4-sm120", "--set"])
            .arg(format!("prefix={}", opt.display()))
            .arg("--set")
            .arg(format!("cuda_link={}", ws.path().join("cuda").display()))
            .env("PATH", crate::common::path_without("nvidia-smi", ws.path())),
        1,
    );
    assert!(
        stderr.contains("doctor preflight failed: nvidia.driver"),
        "{stderr}"
    );
    // One answer: what refuses the run is counted as a failure; the system python is not the
    // recipe's (its venv is installed by a step), so torch is not judged there; the hint names
    // the narrowest switch and says what --no-doctor skips.
    // (How many pass or warn depends on the host's free disk; the refusal is the one failure.)
    let counts = stderr
        .lines()
        .find_map(|l| l.strip_prefix("kiln: doctor preflight: "))
        .unwrap_or_default();
    assert!(counts.contains(" 1 fail"), "{stderr}");
    assert!(stderr.contains("✗ nvidia.driver"), "{stderr}");
    assert!(!stderr.contains("python.torch"), "{stderr}");
    assert!(
        stderr.contains(
            "to provision without a GPU (an image build), `--no-serve --set cuda_source=pypi`"
        ) && stderr.contains("--no-doctor to skip this check (it skips the launch preflight too)"),
        "{stderr}"
    );
    assert!(
        !ws.state().join("runs/glm5-nvfp4-sm120/logs").exists(),
        "no step ran"
    );
    // The dry run gives the same answer, and exits non-zero where the run refuses.
    let dry = stderr_of(
        ws.kiln()
            .args(["up", "glm5-nvfp4-sm120", "--dry-run", "--set"])
            .arg(format!("prefix={}", opt.display()))
            .arg("--set")
            .arg(format!("cuda_link={}", ws.path().join("cuda").display()))
            .env("PATH", crate::common::path_without("nvidia-smi", ws.path())),
        1,
    );
    assert!(
        dry.lines()
            .find_map(|l| l.strip_prefix("kiln: doctor preflight: "))
            .is_some_and(|counts| counts.contains(" 1 fail"))
            && dry.contains("error: doctor preflight failed: nvidia.driver"),
        "{dry}"
    );
}

/// Provisioning only, with the toolkit from PyPI (an image build on a CI machine without a GPU):
/// the missing driver is a warning, not a refusal. A runfile toolkit still needs the driver.
#[test]
fn provisioning_the_gpu_stack_from_pypi_needs_no_driver() {
    let ws = Workspace::new();
    let up = |source: &str| {
        let mut cmd = ws.kiln();
        cmd.args(["up", "glm5-nvfp4-sm120", "--no-serve", "--dry-run"])
            .args(["--set", &format!("cuda_source={source}")])
            .arg("--set")
            .arg(format!("prefix={}", ws.path().join("opt").display()))
            .arg("--set")
            .arg(format!("cuda_link={}", ws.path().join("cuda").display()))
            .env("PATH", crate::common::path_without("nvidia-smi", ws.path()));
        cmd
    };
    let out = up("pypi").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        // (How many pass or warn depends on the host's free disk.)
        stderr.contains(" 0 fail, ")
            && stderr.contains("  ! nvidia.driver: no NVIDIA driver")
            && !stderr.contains("error:"),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("dry run: "));
    let stderr = stderr_of(&mut up("runfile"), 1);
    assert!(
        stderr.contains("error: doctor preflight failed: nvidia.driver"),
        "{stderr}"
    );
}

#[test]
fn without_a_gpu_kiln_up_picks_the_cpu_demo_and_says_so_first() {
    let ws = Workspace::new();
    let out = ws
        .kiln()
        .args(["up", "--dry-run"])
        .env("PATH", crate::common::path_without("nvidia-smi", ws.path()))
        .assert()
        .success()
        .get_output()
        .clone();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.lines().next(),
        Some("kiln: no NVIDIA GPU found: using the CPU demo recipe `tiny-cpu` (name a recipe to choose another)")
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The shipped recipe is named by a path a person can open: the copy kiln keeps of it.
    let copy = ws.state().join("shipped/recipes/tiny-cpu.toml");
    assert!(
        stdout.starts_with(&format!(
            "recipe tiny-cpu (shipped with kiln; a copy: {}): ",
            copy.display()
        )),
        "{stdout}"
    );
    assert_eq!(
        std::fs::read_to_string(&copy).unwrap(),
        std::fs::read_to_string(format!(
            "{}/recipes/tiny-cpu.toml",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    );
    // With a GPU (pinned), the default is the seed's stack.
    let out = ws
        .kiln()
        .args(["plan"])
        .env("KILN_FACT_GPU_COUNT", "8")
        .assert()
        .success()
        .get_output()
        .clone();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("recipe glm5-nvfp4-sm120 "));
}

/// The CPU demo's venv step over a venv another Python made (an upgrade, a state moved between
/// machines: its `bin/python3` links to an interpreter that is gone) rebuilds it, where
/// `python3 -m venv` alone failed on every run until someone deleted it by hand (seen when a
/// test cache moved from a host into a container). Installs the step's wheels from PyPI.
#[test]
fn the_cpu_demos_venv_step_replaces_a_venv_whose_interpreter_is_gone() {
    let ws = Workspace::new();
    let venv = ws.path().join("prefix/venv");
    std::fs::create_dir_all(venv.join("bin")).unwrap();
    std::os::unix::fs::symlink("/nonexistent/python3", venv.join("bin/python3")).unwrap();
    std::os::unix::fs::symlink("python3", venv.join("bin/python")).unwrap();
    std::fs::write(venv.join("pyvenv.cfg"), "home = /nonexistent\n").unwrap();
    let recipe = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes/tiny-cpu.toml");
    ws.kiln()
        .arg("up")
        .arg(&recipe)
        .args(["--only", "venv", "--no-serve", "--set"])
        .arg(format!("prefix={}", ws.path().join("prefix").display()))
        .assert()
        .success();
    let python = std::fs::canonicalize(venv.join("bin/python")).unwrap();
    assert!(!python.starts_with("/nonexistent"), "{}", python.display());
    let ok = std::process::Command::new(venv.join("bin/python"))
        .args(["-c", "import gguf"])
        .status()
        .unwrap();
    assert!(ok.success(), "the rebuilt venv cannot import gguf");
}
