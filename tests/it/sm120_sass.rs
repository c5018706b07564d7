//! The shipped `sm120-sass` recipe for real, on this box with no GPU: CUDA 13.0.1 and 12.8.1 from
//! PyPI (downloads cached in `KILN_TEST_CACHE`), nvcc 13.0 and ptxas 12.8 build sm_120 code that
//! cuobjdump lists, and the family target `sm_120f` is built by 13.0 and refused by 12.8. Also the
//! PyPI source's refusals, and kiln's device-code reader against cuobjdump on what nvcc built.

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
    // nvcc 13.0.88 compiled the kernel; kiln's reader finds sm_120 SASS in it.
    let nvcc = read(&logs.join("nvcc-sm120.log"));
    assert!(
        nvcc.contains("Cuda compilation tools, release 13.0, V13.0.88"),
        "{nvcc}"
    );
    assert!(
        nvcc.contains("axpy-nvcc13.0.cubin: sm_120\n") && nvcc.contains("carries sm_120 code"),
        "{nvcc}"
    );
    // ptxas 12.8.93 assembled the PTX kernel for sm_120.
    let ptxas = read(&logs.join("ptxas-sm120.log"));
    assert!(ptxas.contains("release 12.8, V12.8.93"), "{ptxas}");
    assert!(ptxas.contains("axpy-ptxas12.8.cubin: sm_120\n"), "{ptxas}");
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
    // The run's last lines say what it proved and where the evidence is.
    let tail: Vec<&str> = stderr.lines().rev().take(6).collect();
    for step in [
        "axpy-nvcc13.0.cubin (step `nvcc-sm120`",
        "axpy-ptxas12.8.cubin (step `ptxas-sm120`",
        "axpy-nvcc13.0-family.cubin (step `family-nvcc13.0`",
    ] {
        assert!(
            tail.iter()
                .any(|l| l.starts_with("kiln: proved: sm_120 SASS in ") && l.contains(step)),
            "{step}: {stderr}"
        );
    }
    assert_eq!(
        tail[0],
        format!(
            "kiln: evidence: {} (2 file(s): family-nvcc13.0.txt, family-ptxas12.8.txt)",
            ev.display()
        ),
        "{stderr}"
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

/// A run of steps ends with what it proved and where its evidence is: nvcc 13.0 (the cached
/// PyPI toolkit) builds an sm_120 cubin that the step's `sass` check reads, and a second step
/// writes an evidence file; the run's last lines name both, after the steps' own lines.
#[test]
fn a_run_ends_saying_what_it_proved_and_where_the_evidence_is() {
    let cuda = pypi_toolkit("13.0.1");
    let ws = Workspace::new();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes/sm120-sass/axpy.cu");
    ws.write(
        "proof.toml",
        &format!(
            r#"[recipe]
name = "proof"
[vars]
out = "${{kiln.work_dir}}/out"
[[step]]
id = "cubin"
kind = "run"
env = {{ CUDA_HOME = "{cuda}" }}
shell = true
cmd = "mkdir -p ${{out}} && {cuda}/bin/nvcc -cubin -arch=sm_120 -o ${{out}}/axpy.cubin {src}"
sass = {{ file = "${{out}}/axpy.cubin", arch = "sm_120" }}
[[step]]
id = "record"
kind = "run"
needs = ["cubin"]
shell = true
cmd = "mkdir -p ${{out}}/evidence && echo nvcc 13.0 built sm_120 > ${{out}}/evidence/built.txt"
check = {{ paths = ["${{out}}/evidence/built.txt"] }}
"#,
            cuda = cuda.display(),
            src = src.display(),
        ),
    );
    let out = ws.kiln().args(["up", "proof.toml"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let outdir = ws.state().join("work/proof/out");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        lines[lines.len() - 2..],
        [
            format!(
                "kiln: proved: sm_120 SASS in {}/axpy.cubin (step `cubin`: kiln read its device code)",
                outdir.display()
            ),
            format!(
                "kiln: evidence: {}/evidence (1 file(s): built.txt)",
                outdir.display()
            ),
        ],
        "{stderr}"
    );
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

/// The CUDA files nvcc 13.0 builds of one kernel in `dir`: (file, the arch its `sass` check
/// asks for). Objects, a shared library of two translation units, a fatbin, a cubin; SASS for
/// sm_90 and sm_120, the arch-specific sm_90a, the family sm_120f, compressed and PTX-only code.
pub(crate) fn nvcc_builds(dir: &Path) -> Vec<(&'static str, &'static str)> {
    let prefix = pypi_toolkit("13.0.1");
    std::fs::write(
        dir.join("k.cu"),
        "__global__ void add(float *a, const float *b, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] += b[i]; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("k2.cu"),
        "__global__ void sub(float *a, const float *b, int n) { int i = threadIdx.x; if (i < n) a[i] -= b[i]; }\n",
    )
    .unwrap();
    let g = |a: &str, c: &str| format!("-gencode=arch={a},code={c}");
    let sm90 = g("compute_90", "sm_90");
    let sm120 = g("compute_120", "sm_120");
    let ptx120 = g("compute_120", "compute_120");
    let builds: Vec<(&str, &str, Vec<String>)> = vec![
        (
            "multi.o",
            "sm_90",
            vec![
                "-c".into(),
                "k.cu".into(),
                sm90.clone(),
                sm120.clone(),
                ptx120.clone(),
            ],
        ),
        (
            "ptx.o",
            "sm_90",
            vec!["-c".into(), "k.cu".into(), g("compute_90", "compute_90")],
        ),
        (
            "spec.o",
            "sm_120",
            vec![
                "-c".into(),
                "k.cu".into(),
                g("compute_90a", "sm_90a"),
                g("compute_120f", "sm_120f"),
            ],
        ),
        (
            "comp.o",
            "sm_90",
            vec![
                "-c".into(),
                "k.cu".into(),
                "-Xfatbin=-compress-all".into(),
                sm90.clone(),
                g("compute_100", "compute_100"),
            ],
        ),
        (
            "lib.so",
            "sm_120",
            vec![
                "-shared".into(),
                "-Xcompiler=-fPIC".into(),
                "k.cu".into(),
                "k2.cu".into(),
                format!("-L{}/lib", prefix.display()),
                format!("-L{}/lib64", prefix.display()),
                "-Xfatbin=-compress-all".into(),
                sm90.clone(),
                sm120.clone(),
                ptx120.clone(),
            ],
        ),
        (
            "k.fatbin",
            "sm_90",
            vec!["--fatbin".into(), "k.cu".into(), sm90, ptx120],
        ),
        (
            "k.cubin",
            "sm_120",
            vec!["--cubin".into(), "k.cu".into(), "-arch=sm_120".into()],
        ),
    ];
    for (out, _, args) in &builds {
        let run = std::process::Command::new(prefix.join("bin/nvcc"))
            .args(args)
            .args(["-o", out])
            .current_dir(dir)
            .env("PATH", format!("{}/bin:/usr/bin:/bin", prefix.display()))
            .output()
            .unwrap();
        assert!(
            run.status.success(),
            "nvcc {out}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    builds.into_iter().map(|(f, a, _)| (f, a)).collect()
}

/// What `cuobjdump --list-elf --list-ptx` lists of `file`, in kiln's spelling (`sm_90a` for
/// an ELF, `compute_120` for PTX), sorted and once each.
fn cuobjdump_lists(file: &Path) -> Vec<String> {
    let cuobjdump = pypi_toolkit("13.0.1").join("bin/cuobjdump");
    let out = std::process::Command::new(cuobjdump)
        .args(["--list-elf", "--list-ptx"])
        .arg(file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut found: Vec<String> = text
        .lines()
        .filter_map(|l| {
            let name = l.rsplit(' ').next()?;
            let arch = name.split('.').find(|p| p.starts_with("sm_"))?;
            if l.starts_with("ELF file") {
                Some(arch.to_string())
            } else if l.starts_with("PTX file") {
                Some(arch.replace("sm_", "compute_"))
            } else {
                None
            }
        })
        .collect();
    found.sort();
    found.dedup();
    found
}

#[test]
fn the_sass_check_reads_what_cuobjdump_lists_in_files_nvcc_built() {
    let ws = Workspace::new();
    let dir = ws.path().join("built");
    std::fs::create_dir_all(&dir).unwrap();
    let builds = nvcc_builds(&dir);
    let step = |id: &str, file: &str, arch: &str| {
        format!(
            "[[step]]\nid = \"{id}\"\nkind = \"run\"\ncmd = [\"true\"]\nsass = {{ file = \"{}\", arch = \"{arch}\" }}\n",
            dir.join(file).display()
        )
    };
    let mut recipe = String::from("[recipe]\nname = \"code\"\n");
    for (i, (file, arch)) in builds.iter().enumerate() {
        if *file != "ptx.o" {
            recipe.push_str(&step(&format!("s{i}"), file, arch));
        }
    }
    ws.write("code.toml", &recipe);
    let out = ws.kiln().args(["up", "code.toml"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (i, (file, _)) in builds.iter().enumerate() {
        if *file == "ptx.o" {
            continue;
        }
        let path = dir.join(file);
        let log = read(&ws.state().join(format!("runs/code/logs/s{i}.log")));
        let line = log
            .lines()
            .find_map(|l| l.strip_prefix(&format!("device code in {}: ", path.display())))
            .unwrap_or_else(|| panic!("{file}: {log}"));
        // cuobjdump spells the family sm_120f as sm_120 and cannot tell a bare cubin's suffix.
        let mut kiln: Vec<String> = line
            .split(' ')
            .map(|a| a.trim_end_matches('f').to_string())
            .collect();
        kiln.sort();
        kiln.dedup();
        assert_eq!(kiln, cuobjdump_lists(&path), "{file}");
    }
    // ptx.o has no SASS: its step fails, saying what the file has (what cuobjdump lists).
    assert_eq!(cuobjdump_lists(&dir.join("ptx.o")), ["compute_90"]);
    ws.write(
        "ptx.toml",
        &format!("[recipe]\nname = \"ptx\"\n{}", step("s", "ptx.o", "sm_90")),
    );
    let stderr = stderr_of(ws.kiln().args(["up", "ptx.toml"]), 1);
    assert!(
        stderr.contains("ptx.o carries no sm_90 code (it has: compute_90)"),
        "{stderr}"
    );
    let spec = read(&ws.state().join("runs/code/logs/s2.log"));
    assert!(spec.contains(": sm_90a sm_120f\n"), "{spec}");
    let lib = read(&ws.state().join("runs/code/logs/s4.log"));
    assert!(lib.contains("lib.so: sm_90 sm_120 compute_120\n"), "{lib}");
}

#[test]
fn a_sass_check_on_a_truncated_or_hostile_library_is_an_error_that_says_where() {
    let ws = Workspace::new();
    let dir = ws.path().join("built");
    std::fs::create_dir_all(&dir).unwrap();
    nvcc_builds(&dir);
    let whole = std::fs::read(dir.join("lib.so")).unwrap();
    // The first fatbin of the .nv_fatbin section: the first 0xBA55ED50 of the file.
    let magic = 0xBA55_ED50u32.to_le_bytes();
    let at = whole.windows(4).position(|w| w == magic).unwrap();
    let mut huge = whole.clone();
    huge[at + 8..at + 16].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(dir.join("huge.so"), &huge).unwrap();
    std::fs::write(dir.join("cut.so"), &whole[..at + 100]).unwrap();
    for (file, says) in [
        ("huge.so", "malformed fatbin at byte 0 of its device code: a fatbin of 18446744073709551615 bytes runs past the end of the section"),
        ("cut.so", "not an ELF file or fatbin kiln can read"),
    ] {
        ws.write(
            "bad.toml",
            &format!(
                "[recipe]\nname = \"bad\"\n[[step]]\nid = \"build\"\nkind = \"run\"\ncmd = [\"true\"]\nsass = {{ file = \"{}\", arch = \"sm_90\" }}\n",
                dir.join(file).display()
            ),
        );
        let stderr = stderr_of(ws.kiln().args(["up", "bad.toml"]), 1);
        assert!(
            stderr.contains("the sass check (sm_90) cannot read")
                && stderr.contains(&format!("{file}: {says}"))
                && stderr.contains("hint: the file is truncated"),
            "{file}: {stderr}"
        );
    }
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
