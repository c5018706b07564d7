//! The `cuda` step kind against a stand-in runfile (the real one cannot be fetched here): install
//! side by side, atomic link switch, rollback on failure or wrong version, skip when present.

use std::path::Path;

use crate::common::{stderr_of, Workspace};

/// A stand-in for NVIDIA's runfile: installs a fake toolkit whose nvcc reports `$FAKE_RELEASE`,
/// or fails midway when `$FAKE_FAIL` is set.
const FAKE_RUNFILE: &str = r#"#!/bin/sh
for a in "$@"; do case "$a" in --toolkitpath=*) dest="${a#--toolkitpath=}";; esac; done
mkdir -p "$dest/bin"
echo "run" >> "$(dirname "$dest")/installer-runs"
if [ -n "$FAKE_FAIL" ]; then echo "installer: disk full" >&2; exit 3; fi
printf '#!/bin/sh\necho "Cuda compilation tools, release %s, V%s.88"\n' "$FAKE_RELEASE" "$FAKE_RELEASE" > "$dest/bin/nvcc"
chmod +x "$dest/bin/nvcc"
"#;

fn nvcc(dir: &Path, release: &str) {
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    let p = dir.join("bin/nvcc");
    std::fs::write(
        &p,
        format!("#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.1'\n"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A workspace with an "old" 12.8 toolkit linked at `root/cuda` and a recipe for 13.0.1.
fn setup() -> Workspace {
    let ws = Workspace::new();
    let root = ws.path().join("root");
    nvcc(&root.join("cuda-12.8"), "12.8");
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
version = "13.0.1"
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
fn installs_side_by_side_and_switches_the_link() {
    let ws = setup();
    ws.kiln()
        .args(["up", "cuda.toml"])
        .env("KILN_FACT_GPU_DRIVER", "580.95.05")
        .env("FAKE_RELEASE", "13.0")
        .assert()
        .success();
    assert_eq!(link_target(&ws), "cuda-13.0");
    assert!(
        ws.path().join("root/cuda-12.8/bin/nvcc").exists(),
        "the old toolkit stays"
    );
    assert_eq!(installer_runs(&ws), 1);
    let log = std::fs::read_to_string(ws.state().join("runs/cuda-test/logs/cuda.log")).unwrap();
    assert!(log.contains("nvcc reports release 13.0"), "{log}");
}

#[test]
fn a_failing_installer_leaves_the_old_link() {
    let ws = setup();
    let stderr = stderr_of(
        ws.kiln()
            .args(["up", "cuda.toml"])
            .env("KILN_FACT_GPU_DRIVER", "580.95.05")
            .env("FAKE_RELEASE", "13.0")
            .env("FAKE_FAIL", "1"),
        1,
    );
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
    let ws = setup();
    let stderr = stderr_of(
        ws.kiln()
            .args(["up", "cuda.toml"])
            .env("KILN_FACT_GPU_DRIVER", "580.95.05")
            .env("FAKE_RELEASE", "12.9"),
        1,
    );
    assert!(
        stderr.contains(
            "nvcc reports release 12.9 instead of release 13.0; the link was switched back"
        ),
        "{stderr}"
    );
    assert_eq!(link_target(&ws), "cuda-12.8");
}

#[test]
fn an_installed_toolkit_is_detected_and_the_installer_skipped() {
    let ws = setup();
    nvcc(&ws.path().join("root/cuda-13.0"), "13.0");
    std::fs::write(
        ws.path().join("root/cuda-13.0/version.json"),
        r#"{"cuda": {"name": "CUDA SDK", "version": "13.0.1"}}"#,
    )
    .unwrap();
    ws.kiln()
        .args(["up", "cuda.toml"])
        .env("KILN_FACT_GPU_DRIVER", "580.95.05")
        .assert()
        .success();
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
