//! The shipped `sm120-sass` recipe for real, on this box with no GPU: CUDA 13.0.1 and 12.8.1 from
//! PyPI (downloads cached in `KILN_TEST_CACHE`), nvcc 13.0 and ptxas 12.8 build sm_120 code that
//! cuobjdump lists, and the family target `sm_120f` is built by 13.0 and refused by 12.8. Also the
//! PyPI source's refusals and the `sass` check's `unproven` without cuobjdump.

use std::path::{Path, PathBuf};

use crate::common::{stderr_of, test_cache, Workspace};

/// Where every test's CUDA wheel downloads are cached (`KILN_CACHE_DIR`), and the lock that
/// keeps two tests from writing it at once (held until dropped).
pub(crate) fn cuda_downloads() -> (PathBuf, std::fs::File) {
    let dir = test_cache().join("cuda-pypi-cache");
    std::fs::create_dir_all(&dir).unwrap();
    let lock = std::fs::File::create(test_cache().join("cuda-pypi-cache.lock")).unwrap();
    lock.lock().unwrap();
    (dir, lock)
}

/// A real toolkit laid out by kiln's PyPI source, cached under the test cache:
/// `toolchain` is `13.0.1` (nvcc, ptxas, cuobjdump) or `12.8.1` (ptxas only).
pub(crate) fn pypi_toolkit(toolchain: &str) -> PathBuf {
    let (cache, _lock) = cuda_downloads();
    let root = test_cache().join("cuda-pypi");
    let prefix = root.join(toolchain);
    let (file, var, tools) = match toolchain {
        "13.0.1" => ("cuda-13.0.1.toml", "cuda_13_0_1_wheels", "[\"nvcc\"]"),
        _ => ("cuda-12.8.toml", "cuda_12_8_1_wheels", "[\"ptxas\"]"),
    };
    let ws = Workspace::new();
    ws.write(
        &format!("toolchains/{file}"),
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("toolchains")
                .join(file),
        )
        .unwrap(),
    );
    ws.write(
        "toolkit.toml",
        &format!(
            r#"[recipe]
name = "toolkit"
import = ["toolchains/{file}"]
[[step]]
id = "cuda"
kind = "cuda"
source = "pypi"
wheels = ["${{{var}}}"]
version = "{toolchain}"
install_path = "{prefix}"
link = "{root}/current-{toolchain}"
tools = {tools}
"#,
            prefix = prefix.display(),
            root = root.display(),
        ),
    );
    // The prefix's marker makes a second lay-out a no-op; kiln decides, not this helper.
    ws.kiln()
        .args(["up", "toolkit.toml"])
        .env("KILN_CACHE_DIR", &cache)
        .assert()
        .success();
    prefix
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn sm120_sass_builds_and_proves_sm120_code_without_a_gpu() {
    let (cache, _lock) = cuda_downloads();
    let ws = Workspace::new();
    let out = ws
        .kiln()
        .args(["up", "sm120-sass"])
        .env("KILN_CACHE_DIR", &cache)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let work = ws.state().join("work/sm120-sass");
    let logs = ws.state().join("runs/sm120-sass/logs");
    // Side by side, each behind its own link.
    assert_eq!(
        std::fs::read_link(work.join("cuda")).unwrap(),
        work.join("cuda-13.0")
    );
    assert_eq!(
        std::fs::read_link(work.join("cuda-12")).unwrap(),
        work.join("cuda-12.8")
    );
    let l13 = read(&logs.join("cuda-13.0.log"));
    assert!(l13.contains("nvcc reports release 13.0"), "{l13}");
    let l12 = read(&logs.join("cuda-12.8.log"));
    assert!(
        l12.contains("CUDA 12.8.1 from PyPI offers: ptxas\n")
            && l12.contains("ptxas reports release 12.8"),
        "{l12}"
    );
    // nvcc 13.0.88 compiled the kernel; cuobjdump lists an sm_120 ELF.
    let nvcc = read(&logs.join("nvcc-sm120.log"));
    assert!(
        nvcc.contains("Cuda compilation tools, release 13.0, V13.0.88"),
        "{nvcc}"
    );
    assert!(
        nvcc.contains("ELF file    1: axpy-nvcc13.0.sm_120.cubin")
            && nvcc.contains("carries sm_120 code"),
        "{nvcc}"
    );
    // ptxas 12.8.93 assembled the PTX kernel for sm_120.
    let ptxas = read(&logs.join("ptxas-sm120.log"));
    assert!(ptxas.contains("release 12.8, V12.8.93"), "{ptxas}");
    assert!(
        ptxas.contains("ELF file    1: axpy-ptxas12.8.sm_120.cubin"),
        "{ptxas}"
    );
    // The family target, as evidence files.
    let ev = work.join("out/evidence");
    let built = read(&ev.join("family-nvcc13.0.txt"));
    assert!(
        built.contains("nvcc 13.0, V13.0.88")
            && built.contains("accepted")
            && built.contains("axpy-nvcc13.0-family.sm_120.cubin"),
        "{built}"
    );
    let refused = read(&ev.join("family-ptxas12.8.txt"));
    assert!(
        refused.contains("ptxas 12.8, V12.8.93")
            && refused
                .contains("ptxas fatal   : Value 'sm_120f' is not defined for option 'gpu-name'"),
        "{refused}"
    );
    // A second run finds everything in place: nothing to run.
    let again = ws
        .kiln()
        .args(["up", "sm120-sass"])
        .env("KILN_CACHE_DIR", &cache)
        .output()
        .unwrap();
    assert!(again.status.success());
    let again = String::from_utf8_lossy(&again.stderr);
    assert!(again.contains("0 of 6 steps to run"), "{again}");
}

/// A recipe in a workspace that imports a copy of a shipped toolchain file.
fn with_toolchain(ws: &Workspace, file: &str, step: &str) {
    ws.write(
        &format!("toolchains/{file}"),
        &read(
            &Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("toolchains")
                .join(file),
        ),
    );
    ws.write(
        "r.toml",
        &format!(
            "[recipe]\nname = \"r\"\nimport = [\"toolchains/{file}\"]\n[[step]]\nid = \"cuda\"\nkind = \"cuda\"\n{step}"
        ),
    );
}

#[test]
fn the_12_8_wheels_are_refused_where_a_recipe_needs_nvcc() {
    let ws = Workspace::new();
    with_toolchain(
        &ws,
        "cuda-12.8.toml",
        "source = \"pypi\"\nwheels = [\"${cuda_wheels}\"]\nversion = \"12.8.1\"\ninstall_path = \"/tmp/x\"\n",
    );
    let stderr = stderr_of(ws.kiln().args(["plan", "r.toml"]), 2);
    assert!(
        stderr.contains("r.toml:8:10")
            && stderr.contains("a `cuda` step needs (by default) `nvcc`, but CUDA 12.8.1 from these wheels has none: they bring ptxas, nvvm libraries, the runtime (cudart), CCCL headers"),
        "{stderr}"
    );
    assert!(
        stderr.contains("hint: a step that compiles .cu files needs nvcc")
            && stderr.contains("`tools = [\"ptxas\"]`"),
        "{stderr}"
    );
    // Asked for by name: the error points at the name.
    with_toolchain(
        &ws,
        "cuda-12.8.toml",
        "source = \"pypi\"\nwheels = [\"${cuda_wheels}\"]\nversion = \"12.8.1\"\ninstall_path = \"/tmp/x\"\ntools = [\"ptxas\", \"nvcc\"]\n",
    );
    let stderr = stderr_of(ws.kiln().args(["plan", "r.toml"]), 2);
    assert!(
        stderr.contains("r.toml:11:19") && stderr.contains("`tools` asks for `nvcc`"),
        "{stderr}"
    );
    // A PTX-only toolkit, then a step that compiles with its nvcc: refused at that step.
    let ptx_only = "source = \"pypi\"\nwheels = [\"${cuda_wheels}\"]\nversion = \"12.8.1\"\ninstall_path = \"/tmp/x\"\ntools = [\"ptxas\"]\n";
    with_toolchain(
        &ws,
        "cuda-12.8.toml",
        &format!("{ptx_only}[[step]]\nid = \"k\"\nkind = \"run\"\nneeds = [\"cuda\"]\ncmd = [\"/tmp/x/bin/nvcc\", \"-cubin\", \"k.cu\"]\n"),
    );
    let stderr = stderr_of(ws.kiln().args(["plan", "r.toml"]), 2);
    assert!(
        stderr.contains("r.toml:16:7")
            && stderr.contains("step `k` runs nvcc from /tmp/x, but step `cuda` provides CUDA 12.8.1 with ptxas only: no nvcc"),
        "{stderr}"
    );
    with_toolchain(
        &ws,
        "cuda-12.8.toml",
        &format!("{ptx_only}[[step]]\nid = \"ext\"\nkind = \"python\"\nneeds = [\"cuda\"]\nvenv = \"/tmp/v\"\ninstall = [\"flash-attn==2.8.3\"]\nbuild = [\"flash-attn==2.8.3\"]\nenv = {{ CUDA_HOME = \"/tmp/x\" }}\n"),
    );
    let stderr = stderr_of(ws.kiln().args(["plan", "r.toml"]), 2);
    assert!(
        stderr.contains("r.toml:18:9")
            && stderr.contains("step `ext` builds from source with CUDA_HOME /tmp/x")
            && stderr.contains("hint: compile .cu files with a toolkit that has nvcc"),
        "{stderr}"
    );
}

#[test]
fn a_wheel_pin_without_a_sha256_or_an_unknown_source_is_refused_where_it_is_written() {
    let ws = Workspace::new();
    with_toolchain(
        &ws,
        "cuda-12.8.toml",
        "source = \"pypi\"\nwheels = [\"https://files.pythonhosted.org/x/nvidia_cuda_nvcc-13.0.88-py3-none-any.whl\"]\nversion = \"13.0.1\"\ninstall_path = \"/tmp/x\"\n",
    );
    let stderr = stderr_of(ws.kiln().args(["plan", "r.toml"]), 2);
    assert!(
        stderr.contains("r.toml:8:11") && stderr.contains("has no `#sha256=`"),
        "{stderr}"
    );
    with_toolchain(
        &ws,
        "cuda-12.8.toml",
        "source = \"conda\"\nversion = \"13.0.1\"\ninstall_path = \"/tmp/x\"\n",
    );
    let stderr = stderr_of(ws.kiln().args(["plan", "r.toml"]), 2);
    assert!(
        stderr.contains("r.toml:7:10")
            && stderr.contains("unknown CUDA source `conda`")
            && stderr.contains("hint: `source = \"runfile\"`"),
        "{stderr}"
    );
}

/// A run step whose `sass` check cannot run, with PATH holding no cuobjdump.
fn unproven_recipe(ws: &Workspace) {
    ws.write("k.cubin", "not checked");
    ws.write(
        "u.toml",
        r#"[recipe]
name = "u"
[[step]]
id = "build"
kind = "run"
cmd = ["true"]
sass = { file = "k.cubin", arch = "sm_120" }
"#,
    );
}

#[test]
fn a_sass_check_without_cuobjdump_is_unproven_and_fails_with_strict() {
    let path = "/usr/bin:/bin";
    assert!(
        std::env::split_paths(path).all(|d| !d.join("cuobjdump").exists()),
        "this test needs a PATH without cuobjdump; {path} has one"
    );
    let ws = Workspace::new();
    unproven_recipe(&ws);
    let out = ws
        .kiln()
        .args(["up", "u.toml"])
        .env("PATH", path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: step `build` is unproven: the sass check (sm_120) did not run: cuobjdump is not on the step's PATH"),
        "{stderr}"
    );
    let receipt: serde_json::Value =
        serde_json::from_str(&read(&ws.state().join("runs/u/receipts/build.json"))).unwrap();
    assert!(
        receipt["unproven"][0]
            .as_str()
            .is_some_and(|w| w.starts_with("the sass check (sm_120) did not run")),
        "{receipt}"
    );
    let ws = Workspace::new();
    unproven_recipe(&ws);
    let stderr = stderr_of(
        ws.kiln()
            .args(["up", "--strict", "u.toml"])
            .env("PATH", path),
        1,
    );
    assert!(
        stderr.contains("unproven with --strict: the sass check (sm_120) did not run")
            && stderr.contains("hint: install cuobjdump (the nvidia-cuda-cuobjdump wheel"),
        "{stderr}"
    );
    assert!(!ws.state().join("runs/u/receipts/build.json").exists());
}

/// A recipe that provisions `toolchain` from PyPI (the cached prefix: nothing is unpacked) and
/// assembles the PTX kernel for the arch list the toolchain's suffix makes.
fn arch_suffix_recipe(ws: &Workspace, toolchain: &str) {
    let prefix = pypi_toolkit(toolchain);
    let (file, tools) = match toolchain {
        "13.0.1" => ("cuda-13.0.1.toml", "[\"nvcc\"]"),
        _ => ("cuda-12.8.toml", "[\"ptxas\"]"),
    };
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    ws.write(
        &format!("toolchains/{file}"),
        &read(&manifest.join("toolchains").join(file)),
    );
    ws.write(
        "axpy.ptx",
        &read(&manifest.join("recipes/sm120-sass/axpy.ptx")),
    );
    ws.write(
        "a.toml",
        &format!(
            r#"[recipe]
name = "a"
import = ["toolchains/{file}"]
[vars]
arch = "12.0"
flashinfer_arch = "${{arch}}${{cuda_arch_suffix}}"
[[step]]
id = "cuda"
kind = "cuda"
source = "pypi"
wheels = ["${{cuda_wheels}}"]
version = "{toolchain}"
install_path = "{prefix}"
link = "{link}"
tools = {tools}
[[step]]
id = "build"
kind = "run"
needs = ["cuda"]
env = {{ FLASHINFER_CUDA_ARCH_LIST = "${{flashinfer_arch}}" }}
shell = true
cmd = "echo \"arch list $FLASHINFER_CUDA_ARCH_LIST\"; {prefix}/bin/ptxas -arch=sm_$(echo $FLASHINFER_CUDA_ARCH_LIST | tr -d .) -o {dir}/k.cubin {dir}/axpy.ptx"
"#,
            dir = ws.path().display(),
            prefix = prefix.display(),
            link = ws.path().join("cuda").display(),
        ),
    );
}

#[test]
fn the_arch_suffix_follows_the_provisioned_compiler() {
    for (toolchain, list) in [("13.0.1", "12.0f"), ("12.8.1", "12.0")] {
        let ws = Workspace::new();
        arch_suffix_recipe(&ws, toolchain);
        let out = ws.kiln().args(["up", "a.toml"]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let log = read(&ws.state().join("runs/a/logs/build.log"));
        assert!(
            log.contains(&format!("arch list {list}\n")),
            "{toolchain}: {log}"
        );
        let plan = ws.kiln().args(["plan", "a.toml"]).output().unwrap();
        let plan = String::from_utf8_lossy(&plan.stdout);
        assert!(
            plan.contains(&format!("cuda  CUDA {toolchain} from ")) && !plan.contains("warning:"),
            "{plan}"
        );
    }
    // The suffix forced onto the 12.8 toolkit: the plan says they disagree, and the build fails
    // as it says.
    let ws = Workspace::new();
    arch_suffix_recipe(&ws, "12.8.1");
    let plan = ws
        .kiln()
        .args(["plan", "a.toml", "--set", "cuda_arch_suffix=f"])
        .output()
        .unwrap();
    assert!(plan.status.success());
    let plan = String::from_utf8_lossy(&plan.stdout);
    assert!(
        plan.contains("warning: step `build`: FLASHINFER_CUDA_ARCH_LIST=12.0f asks for a family target (`f`), which needs nvcc ≥ 12.9; step `cuda` provisions CUDA 12.8.1"),
        "{plan}"
    );
    let stderr = stderr_of(
        ws.kiln()
            .args(["up", "a.toml", "--set", "cuda_arch_suffix=f"]),
        1,
    );
    assert!(
        stderr.contains(
            "warning: step `build`: FLASHINFER_CUDA_ARCH_LIST=12.0f asks for a family target"
        ) && stderr.contains("Value 'sm_120f' is not defined for option 'gpu-name'"),
        "{stderr}"
    );
}

#[test]
fn an_unproven_step_is_a_warning_in_the_report_of_a_served_run() {
    let path = "/usr/bin:/bin";
    let prefix = crate::bench::tiny_cpu();
    let ws = Workspace::new();
    ws.write("k.cubin", "not checked");
    ws.write(
        "u.toml",
        &format!(
            r#"[recipe]
name = "u"
[[step]]
id = "build"
kind = "run"
cmd = ["true"]
sass = {{ file = "k.cubin", arch = "sm_120" }}

[profile.p]
cmd = ["{prefix}/bin/llama-server"]
args = ["-m", "{prefix}/model/tiny.gguf", "--host", "127.0.0.1", "--port", "{port}", "-c", "160", "-np", "1", "-t", "1", "-n", "8"]
port = "{port}"
api = "openai"
ready = "/health"
"#,
            prefix = prefix.display(),
            port = crate::serve::free_port(),
        ),
    );
    let out = ws
        .kiln()
        .args(["up", "u.toml"])
        .env("PATH", path)
        .output()
        .unwrap();
    let stop = ws
        .kiln()
        .args(["serve", "u.toml", "--stop"])
        .output()
        .unwrap();
    assert!(
        stop.status.success(),
        "{}",
        String::from_utf8_lossy(&stop.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value =
        serde_json::from_str(&read(&ws.state().join("reports/u/report.json"))).unwrap();
    let warnings = report["outcome"]["warnings"].as_array().unwrap();
    assert!(
        warnings.iter().any(|w| w
            .as_str()
            .unwrap()
            .starts_with("step `build` is unproven: the sass check (sm_120) did not run")),
        "{report}"
    );
}
