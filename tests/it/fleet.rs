//! `ci/ansible/kiln-fleet.yml` run by a real `ansible-playbook` (the `ansible` package from PyPI,
//! whose bundled community.docker connection plugin drives containers through the docker CLI)
//! against two containers acting as hosts: the first compiles a C extension wheel and pushes it
//! to a real registry, the second gets it from the registry instead of compiling.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::common::{run_ok, test_cache, Workspace};

/// The `ansible` release the test installs (ansible-core 2.19; runs on Python 3.11).
const ANSIBLE: &str = "ansible==12.3.0";

/// The hosts' image: the test base image plus what the `python` step needs (python3 with venv,
/// pip and headers; gcc is in the base) and uv. Made once per machine.
const FLEET_IMAGE: &str = "kiln-test-fleet:bookworm";

/// `docker run` options that let a container trust what this machine trusts: its CA bundle
/// (a TLS-intercepting proxy's CA, say) mounted read-only, and pip, uv and Python pointed at it.
fn trust_args() -> Vec<String> {
    let bundle = "/etc/ssl/certs/ca-certificates.crt";
    if !Path::new(bundle).exists() {
        return Vec::new();
    }
    // Beside the system's path: the image's own ca-certificates package writes that one.
    let inside = "/opt/kiln-test-ca.pem";
    let mut args = vec!["-v".to_string(), format!("{bundle}:{inside}:ro")];
    for var in ["SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE"] {
        args.extend(["-e".to_string(), format!("{var}={inside}")]);
    }
    args
}

/// `ansible-playbook` from PyPI in a venv under the test cache, installed once.
fn ansible_playbook() -> PathBuf {
    let root = test_cache().join("ansible");
    std::fs::create_dir_all(&root).unwrap();
    let lock = std::fs::File::create(root.join(".lock")).unwrap();
    lock.lock().unwrap();
    let venv = root.join(ANSIBLE.replace("==", "-"));
    let playbook = venv.join("bin/ansible-playbook");
    if venv.join(".complete").exists() {
        return playbook;
    }
    let _ = std::fs::remove_dir_all(&venv);
    run_ok(Command::new("python3").args(["-m", "venv"]).arg(&venv));
    run_ok(Command::new(venv.join("bin/pip")).args([
        "install",
        "--quiet",
        "--disable-pip-version-check",
        ANSIBLE,
    ]));
    std::fs::write(venv.join(".complete"), ANSIBLE).unwrap();
    playbook
}

/// The hosts' image, derived from the base image once (`docker run` + `docker commit`).
fn fleet_image() -> &'static str {
    let base = crate::image::base_image();
    let cache = test_cache().join("image");
    let lock = std::fs::File::create(cache.join(".fleet.lock")).unwrap();
    lock.lock().unwrap();
    let present = Command::new("docker")
        .args(["image", "inspect", FLEET_IMAGE])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if present.is_ok_and(|s| s.success()) {
        return FLEET_IMAGE;
    }
    let builder = format!("kiln-fleet-image-{}", std::process::id());
    let _container = Container(builder.clone());
    run_ok(
        Command::new("docker")
            .args(["run", "--network", "host", "--name", &builder])
            .args(trust_args())
            .arg(base)
            .args([
                "sh",
                "-c",
                "apt-get update -qq \
                 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                    python3 python3-venv python3-dev python3-pip \
                 && python3 -m pip install --quiet --disable-pip-version-check \
                    --break-system-packages uv \
                 && apt-get clean && rm -rf /var/lib/apt/lists/*",
            ]),
    );
    run_ok(Command::new("docker").args([
        "commit",
        "--change",
        r#"CMD ["sleep", "infinity"]"#,
        &builder,
        FLEET_IMAGE,
    ]));
    FLEET_IMAGE
}

/// A container removed (with `docker rm -f`) on drop, also when the test fails.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rm", "-f", &self.0])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn start_host(image: &str, name: &str) -> Container {
    let container = Container(name.to_string());
    run_ok(
        Command::new("docker")
            .args(["run", "-d", "--network", "host", "--name", name])
            .args(trust_args())
            .args([image, "sleep", "infinity"]),
    );
    container
}

fn read_in(host: &Container, path: &str) -> String {
    run_ok(Command::new("docker").args(["exec", &host.0, "cat", path]))
}

#[test]
fn the_fleet_playbook_compiles_once_and_the_second_host_pulls_the_wheel() {
    if !crate::common::docker_engine(
        "the_fleet_playbook_compiles_once_and_the_second_host_pulls_the_wheel",
    ) {
        return;
    }
    let playbook_bin = ansible_playbook();
    let image = fleet_image();
    let registry = crate::image::LocalRegistry::start();
    let ws = Workspace::new();
    ws.write("recipe.toml", crate::python_step::RECIPE);

    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let names: Vec<String> = (1..=2)
        .map(|n| format!("kiln-fleet-{}-{nanos}-{n}", std::process::id()))
        .collect();
    let hosts: Vec<Container> = names.iter().map(|n| start_host(image, n)).collect();

    let inventory = ws.write(
        "inventory.ini",
        &format!(
            "[gpu_hosts]\n{}\n\n[gpu_hosts:vars]\n\
             ansible_connection=community.docker.docker\n\
             ansible_python_interpreter=/usr/bin/python3\n\
             registry=127.0.0.1:{}\ncache_tag=fleet\n",
            names.join("\n"),
            registry.port
        ),
    );
    // The fleet's builders sign what they build with one key (issue 46): the second host uses
    // the first's wheel only because it is signed by it.
    let key = ws.path().join("fleet.key");
    run_ok(
        Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(["cache", "key", "generate", "fleet", "--out"])
            .arg(&key)
            .env("KILN_HOME", ws.path().join("keys")),
    );
    let playbook = Path::new(env!("CARGO_MANIFEST_DIR")).join("ci/ansible/kiln-fleet.yml");
    let out = Command::new(&playbook_bin)
        .arg("-i")
        .arg(&inventory)
        .arg(&playbook)
        .arg("-e")
        .arg(format!("kiln_binary={}", env!("CARGO_BIN_EXE_kiln")))
        .arg("-e")
        .arg(format!(
            "kiln_recipe={}",
            ws.path().join("recipe.toml").display()
        ))
        .arg("-e")
        .arg(format!("kiln_signing_key={}", key.display()))
        .current_dir(ws.path())
        .env("ANSIBLE_HOME", ws.path().join("ansible-home"))
        .env("ANSIBLE_LOCAL_TEMP", ws.path().join("ansible-tmp"))
        .env("ANSIBLE_NOCOLOR", "1")
        .env("ANSIBLE_FORCE_COLOR", "0")
        .output()
        .expect("ansible-playbook runs");
    let log = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "ansible-playbook failed:\n{log}");
    // "changed" or "ok" for a host in a task whose name starts with `task`.
    let outcome = |task: &str, name: &str| -> Option<&str> {
        log.split("TASK [")
            .filter(|section| section.starts_with(task))
            .find_map(|section| {
                ["changed", "ok"]
                    .into_iter()
                    .find(|o| section.contains(&format!("{o}: [{name}]")))
            })
    };
    for name in &names {
        assert_eq!(
            outcome("Provision", name),
            Some("changed"),
            "kiln up ran steps on {name}:\n{log}"
        );
        assert!(
            log.lines()
                .any(|l| l.starts_with(name.as_str()) && l.contains(" failed=0")),
            "{name} has no failed task:\n{log}"
        );
    }

    assert_eq!(
        outcome("Share", &names[0]),
        Some("changed"),
        "the first host pushed its wheel:\n{log}"
    );
    assert_eq!(
        outcome("Share", &names[1]),
        Some("ok"),
        "the second host had nothing new to push:\n{log}"
    );

    let step_log = "/var/lib/kiln/runs/py/logs/env.log";
    let first = read_in(&hosts[0], step_log);
    assert!(
        first.contains("wheel cache miss: building bitarray 2.9.2 from source"),
        "the first host compiles:\n{first}"
    );
    let second = read_in(&hosts[1], step_log);
    assert!(
        second.contains("wheel cache hit from the remote cache: bitarray 2.9.2"),
        "the second host gets the wheel from the registry:\n{second}"
    );
    assert!(
        !second.contains("Building wheel") && !second.contains("building bitarray"),
        "the second host compiles nothing:\n{second}"
    );

    // Every step fresh on every host, checked here too, not only by the playbook's last task.
    for host in &hosts {
        let plan = run_ok(Command::new("docker").args([
            "exec",
            "-e",
            "KILN_HOME=/var/lib/kiln",
            &host.0,
            "kiln",
            "plan",
            "/etc/kiln/recipe.toml",
        ]));
        assert!(
            plan.contains("1 step: 0 stale, 1 fresh"),
            "{}: {plan}",
            host.0
        );
    }
}
