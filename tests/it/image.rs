//! `kiln image export` / `kiln image dockerfile` and the OCI wheel cache, proven with real tools:
//! Docker (load, run, build with BuildKit), skopeo, umoci and Debian's `docker-registry`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::common::{run_ok, test_cache, wheel_site, Workspace};

/// The locally made base image for `docker build` (debootstrap + `docker import`, made once).
const BASE_IMAGE: &str = "kiln-test-base:bookworm";

fn sha256_file(path: &Path) -> String {
    kiln::hash::sha256_reader(std::fs::File::open(path).unwrap())
        .unwrap()
        .0
}

fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{name}-{}-{nanos}", std::process::id())
}

/// A prefix with a static busybox, a symlink to it, an executable script and a read-only file.
fn make_prefix(root: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let prefix = root.join("opt/kiln/demo");
    let bin = prefix.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy("/bin/busybox", bin.join("busybox"))
        .expect("busybox-static is installed (apt-get install busybox-static)");
    std::os::unix::fs::symlink("busybox", bin.join("sh")).unwrap();
    let script = bin.join("hello");
    std::fs::write(
        &script,
        format!("#!{}/sh\necho \"hello from $0\"\n", bin.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(prefix.join("share/a long directory name")).unwrap();
    let data = prefix
        .join("share/a long directory name")
        .join("x".repeat(120));
    std::fs::write(&data, "data\n").unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o444)).unwrap();
    prefix
}

#[test]
fn export_twice_is_byte_identical_and_loads_in_docker_skopeo_and_umoci() {
    if !crate::common::docker_engine(
        "export_twice_is_byte_identical_and_loads_in_docker_skopeo_and_umoci",
    ) {
        return;
    }
    let ws = Workspace::new();
    let prefix = make_prefix(ws.path());
    let tag = unique("kiln-it-export");
    let export = |out: &str| {
        let assert = ws
            .kiln()
            .args(["image", "export", "--prefix"])
            .arg(&prefix)
            .args(["-o", out, "--tag", &format!("{tag}:v1")])
            .assert()
            .success();
        let stdout = String::from_utf8_lossy(&assert.get_output().stdout).into_owned();
        let stderr = String::from_utf8_lossy(&assert.get_output().stderr).into_owned();
        assert!(
            stdout.trim().starts_with("sha256:") && stdout.trim().len() == 71,
            "{stdout}"
        );
        assert!(
            stderr.contains("/s)") && stderr.contains("3 files"),
            "progress with bytes/s: {stderr}"
        );
        ws.path().join(out)
    };
    let first = export("one.tar");
    // New mtimes must not change a byte.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    std::fs::write(
        prefix.join("bin/hello"),
        std::fs::read(prefix.join("bin/hello")).unwrap(),
    )
    .unwrap();
    let second = export("two.tar");
    assert_eq!(
        sha256_file(&first),
        sha256_file(&second),
        "two exports of one tree differ"
    );

    // Docker: load, then run a program from the prefix (no base image at all).
    let loaded = run_ok(Command::new("docker").arg("load").arg("-i").arg(&first));
    assert!(loaded.contains(&format!("{tag}:v1")), "{loaded}");
    let image = format!("{tag}:v1");
    let hello = prefix.join("bin/hello");
    let ran = Command::new("docker")
        .args(["run", "--rm", &image])
        .arg(&hello)
        .output()
        .unwrap();
    let listed = Command::new("docker")
        .args(["run", "--rm", &image])
        .arg(prefix.join("bin/busybox"))
        .args(["stat", "-c", "%A %N"])
        .arg(prefix.join("bin/hello"))
        .arg(prefix.join("bin/sh"))
        .output()
        .unwrap();
    let _ = Command::new("docker").args(["rmi", "-f", &image]).output();
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&ran.stdout),
        format!("hello from {}\n", hello.display())
    );
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.contains("-rwxr-xr-x"), "exec bit survives: {listed}");
    assert!(
        listed.contains("-> 'busybox'") || listed.contains("-> `busybox'"),
        "symlink survives: {listed}"
    );

    // skopeo reads the OCI archive.
    let inspect = run_ok(
        Command::new("skopeo")
            .arg("inspect")
            .arg(format!("oci-archive:{}:v1", first.display())),
    );
    let inspect: serde_json::Value = serde_json::from_str(&inspect).unwrap();
    assert_eq!(inspect["Layers"].as_array().unwrap().len(), 1, "{inspect}");
    assert_eq!(inspect["Os"], "linux");

    // umoci unpacks the layout into a runtime bundle with the prefix at its absolute path.
    let layout = ws.path().join("layout");
    std::fs::create_dir_all(&layout).unwrap();
    run_ok(
        Command::new("tar")
            .arg("-xf")
            .arg(&first)
            .arg("-C")
            .arg(&layout),
    );
    let bundle = ws.path().join("bundle");
    run_ok(
        Command::new("umoci")
            .args(["unpack", "--rootless", "--image"])
            .arg(format!("{}:v1", layout.display()))
            .arg(&bundle),
    );
    let unpacked = bundle
        .join("rootfs")
        .join(prefix.strip_prefix("/").unwrap());
    assert_eq!(
        std::fs::read_link(unpacked.join("bin/sh")).unwrap(),
        Path::new("busybox")
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(unpacked.join("bin/hello"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    let long = unpacked
        .join("share/a long directory name")
        .join("x".repeat(120));
    assert_eq!(std::fs::read_to_string(long).unwrap(), "data\n");
}

/// `kiln image export --json` and `kiln image dockerfile --json`: every stdout line is a typed
/// event; the result's numbers and digests are the archive's own (read back with `tar`).
#[test]
fn image_json_events_are_typed_and_match_the_archive() {
    let ws = Workspace::new();
    let prefix = make_prefix(ws.path());
    let out = ws
        .kiln()
        .args(["image", "export", "--json", "--prefix"])
        .arg(&prefix)
        .args(["-o", "img.tar", "--tag", "kiln-json:1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let events = crate::reporter::events(&stdout);
    assert_eq!(events[0]["schema"], 1, "{stdout}");
    assert_eq!(events.last().unwrap()["event"], "outcome", "{stdout}");
    // Progress is notes; no line is bare text (each parsed as an event above).
    assert!(events.iter().any(|e| e["event"] == "note"), "{stdout}");
    let done = crate::reporter::json_event(&stdout, "image_exported");
    let archive = ws.path().join("img.tar");
    assert_eq!(done["output"], "img.tar");
    assert_eq!(done["tag"], "kiln-json:1");
    assert_eq!(
        done["archive_size"].as_u64().unwrap(),
        std::fs::metadata(&archive).unwrap().len()
    );
    // `tar -xOf ARCHIVE MEMBER` / `tar -tvf ARCHIVE`.
    let tar_out = |flags: &str, member: Option<&str>| {
        let o = Command::new("tar")
            .arg(flags)
            .arg(&archive)
            .args(member)
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        String::from_utf8(o.stdout).unwrap()
    };
    let index: serde_json::Value =
        serde_json::from_str(&tar_out("-xOf", Some("index.json"))).unwrap();
    assert_eq!(
        done["manifest_digest"], index["manifests"][0]["digest"],
        "{index:#}"
    );
    let layers = done["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1);
    let layer = &layers[0];
    assert_eq!(layer["prefix"], prefix.to_str().unwrap());
    // busybox, hello and the data file; bin/sh -> busybox.
    assert_eq!(
        (layer["files"].as_u64(), layer["symlinks"].as_u64()),
        (Some(3), Some(1))
    );
    assert!(layer["dirs"].as_u64().unwrap() >= 3, "{layer}");
    let blob = format!(
        "blobs/sha256/{}",
        &layer["digest"].as_str().unwrap()["sha256:".len()..]
    );
    let listing = tar_out("-tvf", None);
    let line = listing
        .lines()
        .find(|l| l.ends_with(&blob))
        .unwrap_or_else(|| panic!("no layer {blob} in:\n{listing}"));
    assert!(
        line.split_whitespace()
            .any(|f| f.parse::<u64>().ok() == layer["size"].as_u64()),
        "{line} vs {layer}"
    );

    // The Dockerfile as an event: its text is what a human gets on stdout.
    let plain = ws
        .kiln()
        .args(["image", "dockerfile", "demo"])
        .output()
        .unwrap();
    let out = ws
        .kiln()
        .args(["image", "dockerfile", "demo", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let d = crate::reporter::json_event(&stdout, "dockerfile");
    assert_eq!(d["recipe"], "demo");
    assert!(
        d["base"].is_string() && d["output"].is_null() && d["profile"].is_null(),
        "{d}"
    );
    assert_eq!(d["text"], String::from_utf8_lossy(&plain.stdout).as_ref());
}

#[test]
fn export_reports_a_missing_prefix() {
    let ws = Workspace::new();
    let assert = ws
        .kiln()
        .args(["image", "export", "--prefix", "no/such/dir", "-o", "x.tar"])
        .assert()
        .code(2);
    insta::assert_snapshot!(String::from_utf8_lossy(&assert.get_output().stderr), @r"
    error: prefix no/such/dir is not a directory
    hint: pass directories that `kiln up` provisioned, e.g. --prefix /opt/kiln/glm5
    ");
    assert!(!ws.path().join("x.tar").exists());
}

#[test]
fn export_rejects_a_bad_source_date_epoch() {
    let ws = Workspace::new();
    std::fs::create_dir_all(ws.path().join("p")).unwrap();
    let assert = ws
        .kiln()
        .env("SOURCE_DATE_EPOCH", "yesterday")
        .args(["image", "export", "--prefix", "p", "-o", "x.tar"])
        .assert()
        .code(2);
    insta::assert_snapshot!(String::from_utf8_lossy(&assert.get_output().stderr), @r"
    error: SOURCE_DATE_EPOCH=yesterday is not a number of seconds
    hint: set it to e.g. `$(git log -1 --format=%ct)`, or unset it for mtime 0
    ");
}

#[test]
fn dockerfile_for_an_unknown_profile_says_which_exist() {
    let ws = Workspace::new();
    let assert = ws
        .kiln()
        .args(["image", "dockerfile", "demo", "--profile", "tuned"])
        .assert()
        .code(2);
    insta::assert_snapshot!(String::from_utf8_lossy(&assert.get_output().stderr), @r"
    error: recipe `demo` has no profile `tuned`
    hint: it has none
    ");
}

#[test]
fn dockerfile_refuses_a_recipe_outside_the_build_context() {
    let ws = Workspace::new();
    let recipe = ws.write(
        "recipes/demo.toml",
        kiln::recipe::shipped::get("recipes/demo.toml").unwrap(),
    );
    let context = ws.path().join("context");
    std::fs::create_dir_all(&context).unwrap();
    let assert = ws
        .kiln()
        .current_dir(&context)
        .args(["image", "dockerfile"])
        .arg(&recipe)
        .assert()
        .code(2);
    let stderr = crate::common::scrub(&String::from_utf8_lossy(&assert.get_output().stderr), &ws);
    insta::assert_snapshot!(stderr, @r"
    error: recipe [WS]/recipes/demo.toml is outside the build context [WS]/context
    hint: run `kiln image dockerfile` from the directory you pass to `docker build`, with the recipe inside it
    ");
}

/// `docker build` with BuildKit: the `docker` on PATH when it has buildx, else Debian's docker.io
/// client (/usr/bin/docker), whose builder is BuildKit built in.
fn docker_buildkit() -> Command {
    let buildx = Command::new("docker")
        .args(["buildx", "version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let program = if buildx.is_ok_and(|s| s.success()) || !Path::new("/usr/bin/docker").exists() {
        "docker"
    } else {
        "/usr/bin/docker"
    };
    let mut cmd = Command::new(program);
    cmd.env("DOCKER_BUILDKIT", "1");
    cmd
}

/// The base image, made once per machine: a minimal Debian with a C compiler (for the demo).
pub(crate) fn base_image() -> &'static str {
    let cache = test_cache().join("image");
    std::fs::create_dir_all(&cache).unwrap();
    let lock = std::fs::File::create(cache.join(".lock")).unwrap();
    lock.lock().unwrap();
    let present = Command::new("docker")
        .args(["image", "inspect", BASE_IMAGE])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if present.is_ok_and(|s| s.success()) {
        return BASE_IMAGE;
    }
    let rootfs = cache.join("rootfs");
    let _ = std::fs::remove_dir_all(&rootfs);
    run_ok(
        Command::new("debootstrap")
            .args(["--variant=minbase", "--include=gcc,libc6-dev", "bookworm"])
            .arg(&rootfs)
            .arg("http://deb.debian.org/debian"),
    );
    run_ok(Command::new("sh").arg("-c").arg(format!(
        "tar -C '{}' -c . | docker import - {BASE_IMAGE}",
        rootfs.display()
    )));
    let _ = std::fs::remove_dir_all(&rootfs);
    BASE_IMAGE
}

#[test]
fn dockerfile_builds_an_image_whose_plan_is_all_fresh() {
    if !crate::common::docker_engine("dockerfile_builds_an_image_whose_plan_is_all_fresh") {
        return;
    }
    let ws = Workspace::new();
    ws.write(
        "recipes/demo.toml",
        kiln::recipe::shipped::get("recipes/demo.toml").unwrap(),
    );
    std::fs::copy(env!("CARGO_BIN_EXE_kiln"), ws.path().join("kiln")).unwrap();
    let base = base_image();
    ws.kiln()
        .args([
            "image",
            "dockerfile",
            "recipes/demo.toml",
            "--base",
            base,
            "-o",
            "Dockerfile",
        ])
        .assert()
        .success();
    let dockerfile = std::fs::read_to_string(ws.path().join("Dockerfile")).unwrap();
    insta::with_settings!({filters => vec![(r"kiln \d+\.\d+\.\d+\S*", "kiln [VERSION]")]}, {
        insta::assert_snapshot!("dockerfile_demo", dockerfile);
    });

    let image = unique("kiln-it-build");
    let built = docker_buildkit()
        // No layer cache: a re-run with the same kiln binary would find the steps' layer cached
        // and not run them.
        .args(["build", "--no-cache", "--progress=plain", "-t", &image])
        .arg(ws.path())
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&built.stderr).into_owned();
    let planned = Command::new("docker")
        .args(["run", "--rm", &image])
        .output()
        .unwrap();
    let _ = Command::new("docker").args(["rmi", "-f", &image]).output();
    assert!(built.status.success(), "docker build failed:\n{log}");
    assert!(
        log.contains("ran    smoke"),
        "kiln up ran the steps in the build:\n{log}"
    );
    assert!(
        planned.status.success(),
        "{}",
        String::from_utf8_lossy(&planned.stderr)
    );
    let plan = String::from_utf8_lossy(&planned.stdout).into_owned();
    insta::assert_snapshot!("dockerfile_demo_plan_in_image", plan);
}

// ---- the wheel cache in a real registry -------------------------------------------------

/// Debian's `docker-registry` on 127.0.0.1 with its own storage; killed on drop.
pub(crate) struct LocalRegistry {
    child: std::process::Child,
    pub port: u16,
    storage: PathBuf,
    _dir: tempfile::TempDir,
}

impl LocalRegistry {
    pub(crate) fn start() -> LocalRegistry {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let storage = dir.path().join("storage");
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
                storage.display()
            ),
        )
        .unwrap();
        let log = dir.path().join("registry.log");
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("docker-registry is installed (apt-get install docker-registry)");
        let mut registry = LocalRegistry {
            child,
            port,
            storage,
            _dir: dir,
        };
        // A loaded 2-core CI machine can take seconds to start it: wait up to a minute, and say
        // why if it exits.
        let why = |what: String| {
            format!(
                "{what}; its log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        };
        for _ in 0..600 {
            if ureq::get(&format!("http://127.0.0.1:{port}/v2/"))
                .call()
                .is_ok()
            {
                return registry;
            }
            if let Ok(Some(status)) = registry.child.try_wait() {
                panic!("{}", why(format!("docker-registry exited ({status})")));
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!(
            "{}",
            why(format!(
                "docker-registry did not answer on port {port} in 60 s"
            ))
        );
    }

    fn reference(&self, repo: &str) -> kiln::oci::Reference {
        kiln::oci::Reference::parse(&format!("127.0.0.1:{}/{repo}", self.port)).unwrap()
    }

    fn blob_data(&self, sha256: &str) -> PathBuf {
        self.storage
            .join("docker/registry/v2/blobs/sha256")
            .join(&sha256[..2])
            .join(sha256)
            .join("data")
    }
}

impl Drop for LocalRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A real wheel from PyPI, as a cache entry under `wheels_dir`; returns its id.
fn add_entry(wheels_dir: &Path, spec: &str) -> String {
    let site = wheel_site(spec);
    let wheel = PathBuf::from(std::fs::read_to_string(site.join(".complete")).unwrap());
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    let key =
        serde_json::json!({"requirement": spec, "python": "cp311", "platform": "linux_x86_64"});
    let id = kiln::hash::sha256_bytes(serde_json::to_string(&key).unwrap().as_bytes());
    let dir = wheels_dir.join(&id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&wheel, dir.join(&name)).unwrap();
    let entry = serde_json::json!({
        "key": key, "wheel": name, "sha256": sha256_file(&wheel), "size": std::fs::metadata(&wheel).unwrap().len(),
        "created_unix": 1_700_000_000u64,
    });
    std::fs::write(
        dir.join("entry.json"),
        serde_json::to_vec_pretty(&entry).unwrap(),
    )
    .unwrap();
    id
}

fn tree_digest(dir: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    for entry in kiln::cache::WheelCache::new(dir).stored().unwrap() {
        files.push((
            format!("{}/{}", entry.id, entry.entry.wheel),
            sha256_file(&entry.path),
        ));
        let json: serde_json::Value = serde_json::from_slice(
            &std::fs::read(entry.path.with_file_name("entry.json")).unwrap(),
        )
        .unwrap();
        files.push((format!("{}/entry.json", entry.id), json.to_string()));
    }
    files
}

#[test]
fn wheel_cache_round_trips_through_a_registry_and_pushes_merge() {
    let registry = LocalRegistry::start();
    let reference = registry.reference("kiln/wheels:cu130");
    let host_a = tempfile::tempdir().unwrap();
    let host_b = tempfile::tempdir().unwrap();
    add_entry(host_a.path(), "six==1.17.0");
    add_entry(host_b.path(), "idna==3.10");
    let quiet = |_: &str| {};

    let pushed = kiln::cache::WheelCache::new(host_a.path())
        .push(&reference, &quiet)
        .unwrap();
    assert_eq!((pushed.uploaded, pushed.total), (1, 1));
    let again = kiln::cache::WheelCache::new(host_a.path())
        .push(&reference, &quiet)
        .unwrap();
    assert_eq!(
        (again.uploaded, again.already_there, again.total),
        (0, 1, 1)
    );
    let merged = kiln::cache::WheelCache::new(host_b.path())
        .push(&reference, &quiet)
        .unwrap();
    assert_eq!(
        (merged.uploaded, merged.total),
        (1, 2),
        "a second host's push keeps the first host's entry"
    );

    let fresh = tempfile::tempdir().unwrap();
    let pulled = kiln::cache::WheelCache::new(fresh.path())
        .pull(&reference, &quiet)
        .unwrap();
    assert_eq!(pulled.fetched, 2);
    let mut expected = tree_digest(host_a.path());
    expected.extend(tree_digest(host_b.path()));
    expected.sort();
    let mut got = tree_digest(fresh.path());
    got.sort();
    assert_eq!(
        got, expected,
        "pulled entries are byte-identical to the pushed ones"
    );
    let twice = kiln::cache::WheelCache::new(fresh.path())
        .pull(&reference, &quiet)
        .unwrap();
    assert_eq!((twice.fetched, twice.already_cached), (0, 2));
}

#[test]
fn a_tampered_blob_is_rejected_and_nothing_is_cached() {
    let registry = LocalRegistry::start();
    let reference = registry.reference("kiln/wheels");
    let local = tempfile::tempdir().unwrap();
    add_entry(local.path(), "six==1.17.0");
    let local = kiln::cache::WheelCache::new(local.path());
    let entries = local.stored().unwrap();
    local.push(&reference, &|_| {}).unwrap();

    let data = registry.blob_data(&entries[0].entry.sha256);
    let mut bytes = std::fs::read(&data).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&data, bytes).unwrap();

    let fresh = tempfile::tempdir().unwrap();
    let error = kiln::cache::WheelCache::new(fresh.path())
        .pull(&reference, &|_| {})
        .unwrap_err();
    let rendered = error.render().replace(&registry.port.to_string(), "[PORT]");
    let rendered = regex_free_hashes(&rendered);
    insta::assert_snapshot!(rendered, @r"
    error: blob sha256:[HASH] (six-1.17.0-py2.py3-none-any.whl) from 127.0.0.1:[PORT]/kiln/wheels:latest failed verification: got sha256:[HASH], 11050 bytes; expected 11050 bytes
    hint: the registry served corrupted or tampered content; nothing was added to the cache. Push the entry again from a trusted cache
    ");
    let left: Vec<_> = std::fs::read_dir(fresh.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        left.is_empty(),
        "nothing half-written stays in the cache: {left:?}"
    );
}

/// Replace every 64-hex run with [HASH].
fn regex_free_hashes(text: &str) -> String {
    let mut out = String::new();
    let mut run = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_hexdigit() {
            run.push(c);
            continue;
        }
        out.push_str(if run.len() == 64 { "[HASH]" } else { &run });
        run.clear();
        out.push(c);
    }
    out.pop();
    out
}

#[test]
fn pulling_a_tag_that_does_not_exist_says_so() {
    let registry = LocalRegistry::start();
    let error = kiln::cache::WheelCache::new(Path::new("/nonexistent-never-created"))
        .pull(&registry.reference("kiln/none:x"), &|_| {})
        .unwrap_err();
    let rendered = error.render().replace(&registry.port.to_string(), "[PORT]");
    insta::assert_snapshot!(rendered, @r"
    error: registry has no wheel cache at 127.0.0.1:[PORT]/kiln/none:x
    hint: push one first with `kiln cache push`, or check the repository and tag
    ");
}

/// A shipped recipe needs no build context but the kiln binary: the build runs it by name (it
/// once copied the context to /etc/kiln/recipes/NAME/ and ran a file NAME there, which does not
/// exist).
#[test]
fn dockerfile_of_a_shipped_recipe_runs_it_by_name() {
    let ws = Workspace::new();
    let out = ws
        .kiln()
        .args(["image", "dockerfile", "tiny-cpu", "--profile", "tuned"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("# Build context: the kiln binary as ./kiln.\n"),
        "{text}"
    );
    assert!(
        text.contains("    kiln up --no-serve tiny-cpu\n")
            && text.contains("CMD [\"serve\",\"tiny-cpu\",\"--profile\",\"tuned\"]"),
        "{text}"
    );
    assert!(
        !text.contains("COPY ./") && !text.contains("/etc/kiln/recipes"),
        "{text}"
    );
}

/// `--set` reaches the build's `kiln up` (shell-quoted: a shell runs the line as written, which
/// this test does too, as a dry run) and the image's command (JSON, one argument each); a
/// secret-named variable is refused, its value never printed.
#[test]
fn dockerfile_passes_each_set_on_quoted_and_refuses_a_secret() {
    let ws = Workspace::new();
    let sets = ["--set", "prefix=/opt/my dir", "--set", "port=30181"];
    let out = ws
        .kiln()
        .args(["image", "dockerfile", "tiny-cpu", "--profile", "tuned"])
        .args(sets)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let run = text
        .lines()
        .find(|l| l.trim_start().starts_with("kiln up "))
        .unwrap_or_else(|| panic!("{text}"))
        .trim();
    assert_eq!(
        run,
        "kiln up --no-serve tiny-cpu --set 'prefix=/opt/my dir' --set port=30181"
    );
    assert!(
        text.contains(r#"CMD ["serve","tiny-cpu","--profile","tuned","--set","prefix=/opt/my dir","--set","port=30181"]"#),
        "{text}"
    );
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_kiln"))
        .parent()
        .unwrap();
    let shell = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{run} --dry-run"))
        .env(
            "PATH",
            format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
        )
        .env("KILN_HOME", ws.state())
        .env("KILN_NO_PROGRESS", "1")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&shell.stdout);
    assert!(
        shell.status.success() && said.contains("dry run: "),
        "{said}{}",
        String::from_utf8_lossy(&shell.stderr)
    );

    ws.write(
        "secret.toml",
        "[recipe]\nname = \"secret\"\n[vars]\napi_token = \"none\"\n\
         [profile.p]\ncmd = [\"true\"]\nargs = [\"${api_token}\"]\n",
    );
    let out = ws
        .kiln()
        .args([
            "image",
            "dockerfile",
            "secret.toml",
            "--set",
            "api_token=CANARY-IMG-77",
        ])
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(
        all.contains("error: `--set api_token=…` names a secret: a Dockerfile keeps it in the image's history")
            && !all.contains("CANARY-IMG-77"),
        "{all}"
    );
}

/// `image export --config-from` a recipe whose environment needs a variable without a default:
/// refused with the hint to pass it, then `--set` gives it, and the image config carries the
/// recipe's environment and labels.
#[test]
fn export_takes_the_config_of_a_recipe_given_its_settings() {
    let ws = Workspace::new();
    std::fs::create_dir_all(ws.path().join("p")).unwrap();
    ws.write(
        "r.toml",
        "[recipe]\nname = \"needs\"\n[vars]\nhome = { help = \"where the toolkit is\" }\n\
         [env]\nTOOL_HOME = \"${home}\"\n[[step]]\nid = \"a\"\nkind = \"run\"\ncmd = [\"true\"]\n",
    );
    let export = |more: &[&str]| {
        let mut cmd = ws.kiln();
        cmd.args([
            "image",
            "export",
            "--prefix",
            "p",
            "--config-from",
            "r.toml",
        ])
        .args(more)
        .args(["-o", "x.tar"]);
        cmd
    };
    let out = export(&[]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.trim_end().ends_with("hint: pass `--set home=...`"),
        "{stderr}"
    );
    let out = export(&["--set", "home=/opt/t"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut blobs = std::collections::BTreeMap::new();
    let file = std::fs::File::open(ws.path().join("x.tar")).unwrap();
    for entry in tar::Archive::new(file).entries().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().display().to_string();
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut bytes).unwrap();
        blobs.insert(path, bytes);
    }
    let json = |path: &str| -> serde_json::Value {
        serde_json::from_slice(&blobs[path]).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let blob = |digest: &serde_json::Value| {
        format!(
            "blobs/sha256/{}",
            digest.as_str().unwrap().trim_start_matches("sha256:")
        )
    };
    let index = json("index.json");
    let manifest = json(&blob(&index["manifests"][0]["digest"]));
    let config = json(&blob(&manifest["config"]["digest"]));
    let env: Vec<&str> = config["config"]["Env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert!(env.contains(&"TOOL_HOME=/opt/t"), "{config}");
    assert_eq!(
        config["config"]["Labels"]["org.opencontainers.image.title"],
        "needs"
    );
}
