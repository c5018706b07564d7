//! The `python` step kind against the real package registry: a uv venv, pinned packages, and a
//! C extension built from its sdist once, then reused from the wheel cache with no compiler.

use crate::common::{stderr_of, Workspace};

/// Also the recipe tests/it/fleet.rs provisions on every host.
pub(crate) const RECIPE: &str = r#"[recipe]
name = "py"
[vars]
venv = "${kiln.work_dir}/venv"
version = "2.9.2"
[[step]]
id = "env"
kind = "python"
venv = "${venv}"
install = ["six==1.16.0", "bitarray==${version}"]
build = ["bitarray==${version}"]
env = { CFLAGS = "-O1" }
mem_per_job = "512MiB"
verify = "import bitarray, six; assert bitarray.__version__ == ${version}, bitarray.__version__"
"#;

fn log(ws: &Workspace, state: &str) -> String {
    std::fs::read_to_string(ws.path().join(state).join("runs/py/logs/env.log")).unwrap()
}

#[test]
fn builds_once_then_installs_the_cached_wheel_without_a_compiler() {
    let ws = Workspace::new();
    ws.write("py.toml", RECIPE);
    let cache = ws.path().join("shared-cache");
    ws.kiln()
        .args(["up", "py.toml"])
        .env("KILN_CACHE_DIR", &cache)
        .assert()
        .success();
    let first = log(&ws, "state");
    assert!(
        first.contains("wheel cache miss: building bitarray 2.9.2 from source"),
        "{first}"
    );
    assert!(
        first.contains("venv --seed"),
        "the venv is made with uv: {first}"
    );
    assert!(first.contains("Successfully built bitarray"), "{first}");

    // A second box: new state, same cache, and no working compiler at all.
    ws.kiln()
        .args(["up", "py.toml", "--state-dir", "state2"])
        .env("KILN_CACHE_DIR", &cache)
        .env("CC", "/bin/false")
        .env("CXX", "/bin/false")
        .assert()
        .success();
    let second = log(&ws, "state2");
    assert!(
        second.contains("wheel cache hit: bitarray 2.9.2"),
        "{second}"
    );
    assert!(!second.contains("Building wheel"), "{second}");

    // A third box gets the wheel from a real OCI registry instead of compiling.
    let registry = crate::image::LocalRegistry::start();
    let remote = format!("127.0.0.1:{}/kiln/wheels:py", registry.port);
    ws.kiln()
        .args(["cache", "push", &remote])
        .env("KILN_CACHE_DIR", &cache)
        .assert()
        .success();
    ws.kiln()
        .args(["up", "py.toml", "--state-dir", "state3"])
        .env("KILN_CACHE_DIR", ws.path().join("empty-cache"))
        .env("KILN_REMOTE_CACHE", &remote)
        .env("CC", "/bin/false")
        .env("CXX", "/bin/false")
        .assert()
        .success();
    let third = log(&ws, "state3");
    assert!(
        third.contains("wheel cache hit from the remote cache: bitarray 2.9.2"),
        "{third}"
    );
    assert!(!third.contains("Building wheel"), "{third}");

    let ls = ws
        .kiln()
        .args(["cache", "ls"])
        .env("KILN_CACHE_DIR", &cache)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let ls = String::from_utf8_lossy(&ls);
    assert!(ls.contains("bitarray 2.9.2") && ls.contains("cp3"), "{ls}");

    // Export, import into an empty cache, and refuse a tampered archive.
    let archive = ws.path().join("wheels.tar");
    ws.kiln()
        .args(["cache", "export"])
        .arg(&archive)
        .env("KILN_CACHE_DIR", &cache)
        .assert()
        .success();
    let other = ws.path().join("other-cache");
    ws.kiln()
        .args(["cache", "import"])
        .arg(&archive)
        .env("KILN_CACHE_DIR", &other)
        .assert()
        .success();
    let listed = |c: &std::path::Path| -> Vec<String> {
        let out = ws
            .kiln()
            .args(["cache", "ls", "--json"])
            .env("KILN_CACHE_DIR", c)
            .output()
            .unwrap()
            .stdout;
        let v = crate::reporter::json_event(&String::from_utf8_lossy(&out), "cache");
        v["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(listed(&cache), listed(&other));
    assert_eq!(listed(&cache).len(), 1);

    let mut bytes = std::fs::read(&archive).unwrap();
    let at = bytes
        .windows(4)
        .position(|w| w == b"PK\x03\x04")
        .expect("the wheel (a zip) is in the archive");
    bytes[at + 40] ^= 0xff;
    let tampered = ws.path().join("tampered.tar");
    std::fs::write(&tampered, bytes).unwrap();
    let third = ws.path().join("third-cache");
    let stderr = stderr_of(
        ws.kiln()
            .args(["cache", "import"])
            .arg(&tampered)
            .env("KILN_CACHE_DIR", &third),
        1,
    );
    assert!(stderr.contains("the manifest says"), "{stderr}");
    assert!(
        listed(&third).is_empty(),
        "nothing imported from a tampered archive"
    );
}

#[test]
fn a_failed_verification_fails_the_step() {
    let ws = Workspace::new();
    ws.write(
        "py.toml",
        r#"[recipe]
name = "py"
[[step]]
id = "env"
kind = "python"
venv = "${kiln.work_dir}/venv"
install = ["six==1.16.0"]
verify = "import six; assert six.__version__ == '0.0', 'six is ' + six.__version__"
"#,
    );
    let stderr = stderr_of(ws.kiln().args(["up", "py.toml"]), 1);
    assert!(
        stderr.contains("post-install verification failed"),
        "{stderr}"
    );
    assert!(stderr.contains("six is 1.16.0"), "{stderr}");
}

/// Regression (issue 10): a pinned build whose wheel is cached used to download the sdist again
/// to compute its cache key, so a box without the index could not even reuse its own wheel.
#[test]
fn a_cached_pinned_wheel_installs_with_the_index_unreachable() {
    let ws = Workspace::new();
    ws.write(
        "py.toml",
        r#"[recipe]
name = "py"
[[step]]
id = "env"
kind = "python"
venv = "${kiln.work_dir}/venv"
install = ["bitarray==2.9.2"]
build = ["bitarray==2.9.2"]
verify = "import bitarray; assert bitarray.__version__ == '2.9.2'"
"#,
    );
    let cache = ws.path().join("cache");
    ws.kiln()
        .args(["up", "py.toml"])
        .env("KILN_CACHE_DIR", &cache)
        .env("KILN_NO_UV", "1")
        .assert()
        .success();
    assert!(log(&ws, "state").contains("wheel cache miss: building bitarray 2.9.2"));
    let entry = std::fs::read_dir(cache.join("wheels"))
        .unwrap()
        .flatten()
        .find(|e| e.path().join("entry.json").exists())
        .expect("the built wheel is cached");
    let entry: serde_json::Value =
        serde_json::from_slice(&std::fs::read(entry.path().join("entry.json")).unwrap()).unwrap();
    assert_eq!(entry["index"], "default", "{entry}");

    // A second box with the same cache and every route to the index dead.
    let dead = "http://127.0.0.1:1";
    let mut second = ws.kiln();
    second
        .args(["up", "py.toml", "--state-dir", "state2"])
        .env("KILN_CACHE_DIR", &cache)
        .env("KILN_NO_UV", "1")
        .env("PIP_RETRIES", "0")
        .env("PIP_DEFAULT_TIMEOUT", "5")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy");
    for var in [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        second.env(var, dead);
    }
    second.assert().success();
    let log2 = log(&ws, "state2");
    assert!(
        log2.contains("wheel cache hit: bitarray 2.9.2") && log2.contains("no download"),
        "{log2}"
    );
    assert!(!log2.contains("pip download"), "{log2}");
}

/// Issue 18: Debian 12's own `python3 -m venv` has pip 23.0.1 and setuptools 66 but no `wheel`,
/// and that pip builds a `setup.py`-only sdist the legacy way (`invalid command 'bdist_wheel'`).
/// Without uv, the build goes through PEP 517: in pip's isolated build environment by default,
/// and with `build_isolation = false` in the venv, which kiln gives setuptools and wheel first.
#[test]
fn an_sdist_builds_in_a_stock_debian_venv_with_and_without_build_isolation() {
    let python = "/usr/bin/python3";
    let probe = std::process::Command::new(python)
        .args([
            "-c",
            "import sys, ensurepip; print(sys.version.split()[0], ensurepip.version())",
        ])
        .output()
        .expect("python3 is installed (bash .ci/install-deps)");
    println!(
        "{python}: python and bundled pip {}",
        String::from_utf8_lossy(&probe.stdout).trim()
    );
    for isolation in [true, false] {
        let ws = Workspace::new();
        ws.write(
            "py.toml",
            &format!(
                r#"[recipe]
name = "py"
[[step]]
id = "env"
kind = "python"
python = "{python}"
venv = "${{kiln.work_dir}}/venv"
install = ["bitarray==2.9.2"]
build = ["bitarray==2.9.2"]
build_isolation = {isolation}
verify = "import bitarray; assert bitarray.__version__ == '2.9.2'"
"#
            ),
        );
        let out = ws
            .kiln()
            .args(["up", "py.toml"])
            .env("KILN_NO_UV", "1")
            .output()
            .unwrap();
        let log = std::fs::read_to_string(ws.path().join("state/runs/py/logs/env.log"))
            .unwrap_or_default();
        assert!(
            out.status.success(),
            "build_isolation = {isolation}: {}\n{log}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(log.contains("using python -m venv and pip"), "{log}");
        assert!(log.contains("--use-pep517"), "{log}");
        assert!(log.contains("Successfully built bitarray"), "{log}");
        assert_eq!(
            log.contains("installing setuptools and wheel into it"),
            !isolation,
            "{log}"
        );
    }
}
