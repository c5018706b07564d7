//! Shared helpers: a temp workspace with its own state dir, and the real `kiln` binary.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use assert_cmd::Command;

/// A temp directory holding recipes and a private `KILN_HOME`.
/// The secret key (`NAME:BASE64(seed)`) every workspace's states sign step-cache entries with.
pub(crate) const FLEET_TEST_KEY: &str = "kiln-tests:AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=\n";

pub(crate) struct Workspace {
    pub dir: tempfile::TempDir,
}

impl Workspace {
    pub(crate) fn new() -> Self {
        Workspace {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn state(&self) -> PathBuf {
        self.path().join("state")
    }

    /// Write a file relative to the workspace, creating parent directories.
    pub(crate) fn write(&self, rel: &str, content: &str) -> PathBuf {
        let p = self.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
        p
    }

    /// `kiln` with cwd = workspace, KILN_HOME = workspace/state, no progress bars.
    pub(crate) fn kiln(&self) -> Command {
        Command::from_std(self.kiln_process())
    }

    /// [`Workspace::kiln`] as a `std::process::Command`, for a test that spawns kiln and
    /// signals it while it runs.
    pub(crate) fn kiln_process(&self) -> std::process::Command {
        let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("kiln"));
        // Every state of a workspace is one fleet: it signs step-cache entries with one key
        // (whose own public key it trusts); tests of trust remove or replace these.
        let key = self.path().join(".fleet-test.key");
        if !key.exists() {
            std::fs::write(&key, FLEET_TEST_KEY).unwrap();
        }
        c.current_dir(self.path())
            .env("KILN_HOME", self.state())
            .env("KILN_NO_PROGRESS", "1")
            .env("KILN_CACHE_SIGNING_KEY", &key)
            .env_remove("KILN_CACHE_TRUSTED_KEYS")
            .env_remove("KILN_CACHE_REQUIRE_SIGS")
            .env_remove("XDG_STATE_HOME");
        for (k, _) in std::env::vars() {
            if k.starts_with("KILN_FACT_") {
                c.env_remove(k);
            }
        }
        c
    }

    /// [`Workspace::kiln`] on a stand-in GPU host: tests/fixtures/gpu/bin/nvidia-smi first on
    /// PATH, replaying `scenario` (a directory of real captures under tests/fixtures/gpu, or a
    /// path), this machine's own nvidia-smi hidden; HOME is the workspace.
    pub(crate) fn kiln_on_gpu_host(&self, scenario: impl AsRef<Path>) -> Command {
        self.kiln_with_gpu_bin(&gpu_fixtures().join("bin"), scenario)
    }

    /// [`Workspace::kiln_on_gpu_host`] with the nvidia-smi of `bin` (a wrapper of the fake).
    pub(crate) fn kiln_with_gpu_bin(&self, bin: &Path, scenario: impl AsRef<Path>) -> Command {
        let mut path = std::ffi::OsString::from(bin);
        path.push(":");
        path.push(path_without("nvidia-smi", self.path()));
        let mut cmd = self.kiln();
        cmd.env("PATH", path)
            .env(
                "FAKE_NVIDIA_SMI_SCENARIO",
                gpu_fixtures().join(scenario.as_ref()),
            )
            .env("HOME", self.path());
        cmd
    }

    /// [`Workspace::kiln`] on a host without nvidia-smi (this machine's own hidden); HOME is
    /// the workspace.
    pub(crate) fn kiln_without_gpu(&self) -> Command {
        let mut cmd = self.kiln();
        cmd.env("PATH", path_without("nvidia-smi", self.path()))
            .env("HOME", self.path());
        cmd
    }
}

/// Real nvidia-smi captures (one directory a host) and the fake nvidia-smi that replays them.
pub(crate) fn gpu_fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gpu")
}

/// A step's line of `kiln plan`'s table, its words joined by single spaces: `fresh a run`.
pub(crate) fn status_of(plan: &str, id: &str) -> String {
    plan.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.get(1) == Some(&id))
        .map_or_else(|| panic!("no step {id} in:\n{plan}"), |w| w.join(" "))
}

/// Replace the workspace path in output so snapshots are stable.
pub(crate) fn scrub(text: &str, ws: &Workspace) -> String {
    text.replace(&ws.path().display().to_string(), "[WS]")
}

/// Where tests cache what they download (wheels), shared across runs: `$KILN_TEST_CACHE`, else
/// `target/test-cache`.
pub(crate) fn test_cache() -> PathBuf {
    std::env::var_os("KILN_TEST_CACHE").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-cache"),
        PathBuf::from,
    )
}

/// A real wheel from PyPI (`pip download --no-deps`), unpacked once into a cached
/// site-packages directory, which is returned. `spec` is e.g. `sglang==0.5.9`.
/// Callers that modify files must copy the tree first (see `copy_tree`).
pub(crate) fn wheel_site(spec: &str) -> PathBuf {
    let root = test_cache().join("wheels");
    let site = root
        .join("site")
        .join(spec.replace(['=', '<', '>', '!', ' '], "_"));
    std::fs::create_dir_all(&root).unwrap();
    let lock = std::fs::File::create(root.join(".lock")).unwrap();
    lock.lock().unwrap();
    if site.join(".complete").exists() {
        return site;
    }
    let dl = root.join("dl");
    let status = std::process::Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
        ])
        .arg(&dl)
        .arg(spec)
        .status()
        .expect("python3 -m pip runs");
    assert!(status.success(), "pip download {spec} failed");
    let name = spec
        .split(['=', '<', '>', '!'])
        .next()
        .unwrap()
        .replace('-', "_")
        .to_lowercase();
    let version = spec.rsplit('=').next().unwrap();
    let wheel = std::fs::read_dir(&dl)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            let f = p.file_name().unwrap().to_string_lossy().to_lowercase();
            f.starts_with(&format!("{name}-{version}-")) && f.ends_with(".whl")
        })
        .unwrap_or_else(|| panic!("no wheel for {spec} in {}", dl.display()));
    let _ = std::fs::remove_dir_all(&site);
    let status = std::process::Command::new("python3")
        .args(["-m", "zipfile", "-e"])
        .arg(&wheel)
        .arg(&site)
        .status()
        .expect("python3 -m zipfile runs");
    assert!(status.success(), "cannot unpack {}", wheel.display());
    std::fs::write(site.join(".complete"), wheel.display().to_string()).unwrap();
    site
}

/// Copy a directory tree (regular files and directories; symlinks are recreated).
pub(crate) fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let ty = entry.file_type().unwrap();
        if ty.is_dir() {
            copy_tree(&src, &dst);
        } else if ty.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src).unwrap(), &dst).unwrap();
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// Run `cmd`, require exit `code`, and return its stderr.
pub(crate) fn stderr_of(cmd: &mut assert_cmd::Command, code: i32) -> String {
    let out = cmd.assert().code(code).get_output().clone();
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Run `cmd`, require success, and return its stdout (the command and both streams on failure).
pub(crate) fn run_ok(cmd: &mut std::process::Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether a Docker-backed test runs. It needs a running Docker engine: without one it fails at
/// once, saying how to start one, unless `KILN_TEST_SKIP_DOCKER=1` skips it explicitly; a skipped
/// test says so on stderr past the test harness's capture (so it shows on a passing run), and
/// asserts nothing.
pub(crate) fn docker_engine(test: &str) -> bool {
    use std::io::Write;
    if std::env::var_os("KILN_TEST_SKIP_DOCKER").is_some_and(|v| v == "1") {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test}: KILN_TEST_SKIP_DOCKER=1 (it needs a running Docker engine)"
        );
        return false;
    }
    let info = std::process::Command::new("docker")
        .args(["info", "--format", "{{.ServerVersion}}"])
        .output();
    match info {
        Ok(o) if o.status.success() => true,
        Ok(o) => panic!(
            "{test} needs a running Docker engine: `docker info` says: {}\nstart one (`sudo systemctl start docker`), or skip the Docker-backed tests explicitly with KILN_TEST_SKIP_DOCKER=1",
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => panic!(
            "{test} needs Docker: cannot run `docker`: {e}\ninstall it (bash .ci/install-deps) and start the engine, or skip the Docker-backed tests explicitly with KILN_TEST_SKIP_DOCKER=1"
        ),
    }
}

/// This process's PATH with `program` hidden, everything else still found: each directory that
/// holds `program` is replaced by a directory under `root` of links to its other entries (a
/// GPU box's nvidia-smi sits in /usr/bin beside tools the test needs, so narrowing PATH to
/// `/usr/bin:/bin` would not hide it, and dropping /usr/bin would hide everything).
pub(crate) fn path_without(program: &str, root: &Path) -> std::ffi::OsString {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs: Vec<PathBuf> = std::env::split_paths(&path)
        .enumerate()
        .map(|(i, dir)| {
            if !dir.join(program).exists() {
                return dir;
            }
            let shadow = root.join(format!("path-{i}"));
            std::fs::create_dir_all(&shadow).unwrap();
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                if entry.file_name() != program {
                    let _ =
                        std::os::unix::fs::symlink(entry.path(), shadow.join(entry.file_name()));
                }
            }
            shadow
        })
        .collect();
    let joined = std::env::join_paths(dirs).unwrap();
    assert!(
        which::which_in(program, Some(&joined), root).is_err(),
        "{program} is still on the PATH"
    );
    joined
}
