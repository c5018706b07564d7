//! The `cuda` step kind. The runfile path against a stand-in runfile (NVIDIA's 4 GB runfile
//! cannot be fetched here) that installs the real nvcc 13.0.88 from PyPI (cached in
//! `KILN_TEST_CACHE`): install side by side, atomic link switch, rollback on failure or wrong
//! version, skip when present, and the installer options kiln passes. The PyPI path's rollback.

use std::path::Path;

use crate::common::{stderr_of, Workspace};
use crate::sm120_sass::{cuda_downloads, pypi_toolkit};

/// A stand-in for NVIDIA's runfile: records its arguments, then "installs" the real PyPI
/// toolkit at `$REAL_CUDA` (its `bin/` linked into `--toolkitpath`), or fails midway when
/// `$FAKE_FAIL` is set.
const FAKE_RUNFILE: &str = r#"#!/bin/sh
for a in "$@"; do case "$a" in --toolkitpath=*) dest="${a#--toolkitpath=}";; esac; done
mkdir -p "$dest"
echo "$*" >> "$(dirname "$dest")/installer-runs"
if [ -n "$FAKE_FAIL" ]; then echo "installer: disk full" >&2; exit 3; fi
ln -s "$REAL_CUDA/bin" "$dest/bin"
"#;

/// A toolkit directory at `dir` whose programs are those of the real toolkit at `real`.
fn toolkit_at(dir: &Path, real: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::os::unix::fs::symlink(real.join("bin"), dir.join("bin")).unwrap();
}

/// The shipped toolchains/cuda-12.8.toml (its PyPI wheels) in the workspace, for `import`.
fn copy_toolchain_12_8(ws: &Workspace) {
    let toolchain = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("toolchains/cuda-12.8.toml"),
    )
    .unwrap();
    ws.write("toolchains/cuda-12.8.toml", &toolchain);
}

/// A workspace with an "old" toolkit (the real 12.8 ptxas) linked at `root/cuda` and a recipe
/// for CUDA `version` through the stand-in runfile.
fn setup_for(version: &str) -> Workspace {
    let ws = Workspace::new();
    let root = ws.path().join("root");
    toolkit_at(&root.join("cuda-12.8"), &pypi_toolkit("12.8.1"));
    std::os::unix::fs::symlink(root.join("cuda-12.8"), root.join("cuda")).unwrap();
    let runfile = ws.write("dl/cuda_13.0.1_fake.run", FAKE_RUNFILE);
    let sha = kiln::hash::sha256_bytes(FAKE_RUNFILE.as_bytes());
    ws.write(
        "cuda.toml",
        &format!(
            r#"[recipe]
name = "cuda-test"
[vars]
root = "{root}"
[[step]]
id = "cuda"
kind = "cuda"
url = "file://{runfile}"
sha256 = "{sha}"
version = "{version}"
install_path = "${{root}}/cuda-13.0"
link = "${{root}}/cuda"
driver_floor = "580.82.07"
"#,
            root = root.display(),
            runfile = runfile.display(),
        ),
    );
    ws
}

fn setup() -> Workspace {
    setup_for("13.0.1")
}

/// `kiln up cuda.toml` with a driver new enough and the real 13.0 toolkit for the stand-in.
fn up(ws: &Workspace) -> assert_cmd::Command {
    let mut c = ws.kiln();
    c.args(["up", "cuda.toml"])
        .env("KILN_FACT_GPU_DRIVER", "580.95.05")
        .env("REAL_CUDA", pypi_toolkit("13.0.1"));
    c
}

fn link_target(ws: &Workspace) -> String {
    std::fs::read_link(ws.path().join("root/cuda"))
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

fn installer_runs(ws: &Workspace) -> usize {
    std::fs::read_to_string(ws.path().join("root/installer-runs")).map_or(0, |s| s.lines().count())
}

#[test]
fn the_runfile_gets_its_documented_toolkit_only_options() {
    let ws = setup();
    up(&ws).assert().success();
    let args = std::fs::read_to_string(ws.path().join("root/installer-runs")).unwrap();
    // docs/recipes.md cites these from NVIDIA's installation guide (Runfile → Advanced Options).
    assert_eq!(
        args.trim(),
        format!(
            "--silent --toolkit --no-man-page --override --toolkitpath={}",
            ws.path().join("root/cuda-13.0").display()
        )
    );
}

#[test]
fn installs_side_by_side_and_switches_the_link() {
    let ws = setup();
    up(&ws).assert().success();
    assert_eq!(link_target(&ws), "cuda-13.0");
    assert!(
        ws.path().join("root/cuda-12.8/bin/ptxas").exists(),
        "the old toolkit stays"
    );
    assert_eq!(installer_runs(&ws), 1);
    let log = std::fs::read_to_string(ws.state().join("runs/cuda-test/logs/cuda.log")).unwrap();
    assert!(log.contains("nvcc reports release 13.0"), "{log}");
}

#[test]
fn a_failing_installer_leaves_the_old_link() {
    let ws = setup();
    let stderr = stderr_of(up(&ws).env("FAKE_FAIL", "1"), 1);
    assert!(
        stderr.contains("exited with status 3") && stderr.contains("installer: disk full"),
        "{stderr}"
    );
    assert_eq!(link_target(&ws), "cuda-12.8");
    assert!(!ws
        .state()
        .join("runs/cuda-test/receipts/cuda.json")
        .exists());
}

#[test]
fn a_wrong_version_switches_the_link_back() {
    // The real nvcc 13.0.88 answers for a recipe that asked for 12.9.1.
    let ws = setup_for("12.9.1");
    let stderr = stderr_of(&mut up(&ws), 1);
    assert!(
        stderr.contains(
            "nvcc reports release 13.0 instead of release 12.9; the link was switched back"
        ),
        "{stderr}"
    );
    assert_eq!(link_target(&ws), "cuda-12.8");
}

#[test]
fn an_installed_toolkit_is_detected_and_the_installer_skipped() {
    let ws = setup();
    toolkit_at(&ws.path().join("root/cuda-13.0"), &pypi_toolkit("13.0.1"));
    std::fs::write(
        ws.path().join("root/cuda-13.0/version.json"),
        r#"{"cuda": {"name": "CUDA SDK", "version": "13.0.1"}}"#,
    )
    .unwrap();
    up(&ws).assert().success();
    assert_eq!(installer_runs(&ws), 0);
    assert_eq!(link_target(&ws), "cuda-13.0");
    let log = std::fs::read_to_string(ws.state().join("runs/cuda-test/logs/cuda.log")).unwrap();
    assert!(log.contains("CUDA 13.0.1 is already installed"), "{log}");
}

#[test]
fn an_old_driver_stops_before_anything_is_installed() {
    let ws = setup();
    let stderr = stderr_of(
        ws.kiln()
            .args(["up", "cuda.toml"])
            .env("KILN_FACT_GPU_DRIVER", "570.124.06"),
        1,
    );
    assert!(
        stderr.contains("driver 570.124.06 is older than 580.82.07, the floor of CUDA 13.0.1"),
        "{stderr}"
    );
    assert!(stderr.contains("hint:"), "{stderr}");
    assert_eq!(installer_runs(&ws), 0);
    assert_eq!(link_target(&ws), "cuda-12.8");
}

#[test]
fn a_pypi_toolkit_that_reports_another_release_switches_the_link_back() {
    let real = pypi_toolkit("13.0.1");
    let (cache, _lock) = cuda_downloads();
    let ws = Workspace::new();
    let root = ws.path().join("root");
    toolkit_at(&root.join("cuda-13.0"), &real);
    std::os::unix::fs::symlink(root.join("cuda-13.0"), root.join("cuda")).unwrap();
    copy_toolchain_12_8(&ws);
    // The 12.8.1 wheels, said to be 12.9.1: their ptxas reports release 12.8.
    ws.write(
        "cuda.toml",
        &format!(
            r#"[recipe]
name = "cuda-pypi"
import = ["toolchains/cuda-12.8.toml"]
[[step]]
id = "cuda"
kind = "cuda"
source = "pypi"
wheels = ["${{cuda_wheels}}"]
version = "12.9.1"
install_path = "{root}/cuda-12.9"
link = "{root}/cuda"
tools = ["ptxas"]
"#,
            root = root.display()
        ),
    );
    let stderr = stderr_of(
        ws.kiln()
            .args(["up", "cuda.toml"])
            .env("KILN_CACHE_DIR", &cache),
        1,
    );
    assert!(
        stderr.contains(
            "ptxas reports release 12.8 instead of release 12.9; the link was switched back"
        ),
        "{stderr}"
    );
    assert_eq!(link_target(&ws), "cuda-13.0");
    let log = std::fs::read_to_string(ws.state().join("runs/cuda-pypi/logs/cuda.log")).unwrap();
    assert!(
        log.contains("no driver floor: the toolkit is installed to compile"),
        "{log}"
    );
}

#[test]
fn a_pypi_toolkit_never_replaces_a_directory_kiln_did_not_lay_out() {
    let ws = Workspace::new();
    let root = ws.path().join("root");
    // A toolkit (or anything of the user's) already at install_path, with no kiln marker.
    let theirs = root.join("cuda-12.9");
    std::fs::create_dir_all(theirs.join("bin")).unwrap();
    std::fs::write(theirs.join("bin/nvcc"), "#!/bin/sh\n").unwrap();
    std::fs::write(theirs.join("notes.txt"), "mine\n").unwrap();
    copy_toolchain_12_8(&ws);
    ws.write(
        "cuda.toml",
        &format!(
            r#"[recipe]
name = "cuda-pypi"
import = ["toolchains/cuda-12.8.toml"]
[[step]]
id = "cuda"
kind = "cuda"
source = "pypi"
wheels = ["${{cuda_wheels}}"]
version = "12.9.1"
install_path = "{}"
link = "{}"
tools = ["ptxas"]
"#,
            theirs.display(),
            root.join("cuda").display()
        ),
    );
    // The wheels are at hand (the shared download cache): without the refusal, the step would
    // lay them out and delete the directory.
    let (cache, _lock) = cuda_downloads();
    let stderr = stderr_of(
        ws.kiln()
            .args(["up", "cuda.toml"])
            .env("KILN_CACHE_DIR", &cache),
        1,
    );
    assert!(
        stderr.contains(&format!(
            "refusing to replace {}: it is a directory kiln did not lay out (it has no .kiln-cuda.json)",
            theirs.display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("hint: point the step's install_path"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(theirs.join("notes.txt")).unwrap(),
        "mine\n"
    );
    assert!(theirs.join("bin/nvcc").is_file());
    let beside: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(beside, ["cuda-12.9"], "nothing staged or moved aside");
}

/// The recipe of the step-cache tests: CUDA 12.8.1's ptxas from PyPI laid out in the state's own
/// work dir, its link beside it, the prefix declared as the step's output.
const CACHED_PYPI: &str = r#"[recipe]
name = "cuda-pypi"
import = ["toolchains/cuda-12.8.toml"]
[[step]]
id = "cuda"
kind = "cuda"
source = "pypi"
wheels = ["${cuda_wheels}"]
version = "12.8.1"
install_path = "${kiln.work_dir}/cuda-12.8"
link = "${kiln.work_dir}/cuda"
tools = ["ptxas"]
outputs = ["${kiln.work_dir}/cuda-12.8"]
"#;

/// A cache directory whose downloads are the shared test downloads (the wheels at hand) and
/// whose step cache is its own.
fn cache_with_downloads(ws: &Workspace, name: &str, downloads: &Path) -> std::path::PathBuf {
    let cache = ws.path().join(name);
    std::fs::create_dir_all(&cache).unwrap();
    std::os::unix::fs::symlink(downloads.join("downloads"), cache.join("downloads")).unwrap();
    cache
}

#[test]
fn a_pypi_toolkit_is_restored_from_the_step_cache_on_a_new_machine_and_its_link_switched() {
    let (downloads, _lock) = cuda_downloads();
    std::fs::create_dir_all(downloads.join("downloads")).unwrap();
    let ws = Workspace::new();
    copy_toolchain_12_8(&ws);
    ws.write("cuda.toml", CACHED_PYPI);
    let a_cache = cache_with_downloads(&ws, "a-cache", &downloads);
    let a = stderr_of(
        ws.kiln()
            .args(["up", "cuda.toml", "--state-dir", "A"])
            .env("KILN_CACHE_DIR", &a_cache),
        0,
    );
    assert!(a.contains("ran    cuda"), "{a}");
    ws.kiln()
        .args(["cache", "export", "cache.tar"])
        .env("KILN_CACHE_DIR", &a_cache)
        .assert()
        .success();

    // Host B: an empty state and a cache that only imported A's: no downloads at all.
    let b_cache = ws.path().join("b-cache");
    ws.kiln()
        .args(["cache", "import", "cache.tar"])
        .env("KILN_CACHE_DIR", &b_cache)
        .assert()
        .success();
    let b = stderr_of(
        ws.kiln()
            .args(["up", "cuda.toml", "--state-dir", "B"])
            .env("KILN_CACHE_DIR", &b_cache),
        0,
    );
    assert!(b.contains("restored from cache (entry"), "{b}");
    assert!(!b_cache.join("downloads").exists(), "B downloaded wheels");
    let work = ws.path().join("B/work/cuda-pypi");
    assert_eq!(
        std::fs::read_link(work.join("cuda")).unwrap(),
        work.join("cuda-12.8"),
        "B's link points at B's restored toolkit"
    );
    let ptxas = std::process::Command::new(work.join("cuda/bin/ptxas"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&ptxas.stdout).contains("release 12.8"),
        "the restored ptxas runs through the link: {ptxas:?}"
    );
    let log = std::fs::read_to_string(ws.path().join("B/runs/cuda-pypi/logs/cuda.log")).unwrap();
    assert!(
        log.contains("--- outputs restored from the step cache (entry")
            && log.contains(&format!(
                "{} → {}; ptxas reports release 12.8",
                work.join("cuda").display(),
                work.join("cuda-12.8").display()
            )),
        "the step log says what the restore did:\n{log}"
    );
    assert!(!log.contains("unpack"), "B unpacked wheels:\n{log}");

    // Host C: a directory of the user's already at install_path. The restore never replaces it;
    // the step runs and refuses it, as it would without a cache.
    let theirs = ws.path().join("C/work/cuda-pypi/cuda-12.8");
    std::fs::create_dir_all(&theirs).unwrap();
    std::fs::write(theirs.join("notes.txt"), "mine\n").unwrap();
    let plan = |state: &str| {
        let out = ws
            .kiln()
            .args(["plan", "cuda.toml", "--state-dir", state])
            .env("KILN_CACHE_DIR", &b_cache)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let empty = plan("D");
    assert!(
        empty.contains("restore from cache (entry"),
        "an empty state is served by the entry:\n{empty}"
    );
    let over_theirs = plan("C");
    assert!(
        !over_theirs.contains("restore"),
        "plan offers no restore over the user's directory:\n{over_theirs}"
    );
    let c = stderr_of(
        ws.kiln()
            .args(["up", "cuda.toml", "--state-dir", "C"])
            .env("KILN_CACHE_DIR", &b_cache),
        1,
    );
    assert!(
        c.contains("not restored from cache (step `cuda`: refusing to replace"),
        "{c}"
    );
    assert!(
        c.contains("kiln never deletes what it did not create"),
        "{c}"
    );
    assert_eq!(
        std::fs::read_to_string(theirs.join("notes.txt")).unwrap(),
        "mine\n"
    );
}

/// A toolkit in the step cache is not restored where the driver is below the step's floor: the
/// step runs instead and stops at the driver, nothing laid out.
#[test]
fn a_cached_toolkit_is_not_restored_below_the_driver_floor() {
    let (downloads, _lock) = cuda_downloads();
    std::fs::create_dir_all(downloads.join("downloads")).unwrap();
    let ws = Workspace::new();
    copy_toolchain_12_8(&ws);
    ws.write(
        "cuda.toml",
        &format!("{CACHED_PYPI}driver_floor = \"570.124.06\"\n"),
    );
    let cache = cache_with_downloads(&ws, "cache", &downloads);
    let up = |state: &str, driver: &str, code: i32| {
        stderr_of(
            ws.kiln()
                .args(["up", "cuda.toml", "--state-dir", state])
                .env("KILN_CACHE_DIR", &cache)
                .env("KILN_FACT_GPU_DRIVER", driver),
            code,
        )
    };
    let a = up("A", "580.95.05", 0);
    assert!(a.contains("ran    cuda"), "{a}");
    let b = up("B", "550.54.15", 1);
    assert!(!b.contains("restored from cache (entry"), "{b}");
    assert!(
        b.contains("not restored from cache (driver 550.54.15"),
        "{b}"
    );
    assert!(
        b.contains("driver 550.54.15 is older than 570.124.06, the floor of CUDA 12.8.1"),
        "{b}"
    );
    assert!(
        !ws.path().join("B/work/cuda-pypi/cuda-12.8").exists(),
        "a toolkit was restored below the driver floor"
    );
}
