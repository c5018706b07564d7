//! The step cache with the real binary: a real `cc` compile step stored by state A is restored
//! in a fresh state B sharing `KILN_CACHE_DIR`, the compiler not run; a changed input byte, GPU
//! arch, C compiler or nvcc version misses; a corrupted entry is refused (nothing restored, the
//! step runs); `cache = false` never stores.

use std::path::{Path, PathBuf};

use crate::common::Workspace;

/// `prep` is never cached (`cache = false`, no outputs) and still hands `build` its key.
const RECIPE: &str = r#"[recipe]
name = "cc-demo"

[vars]
prefix = "${kiln.work_dir}"

[[step]]
id = "prep"
kind = "run"
cmd = ["sh", "-c", "mkdir -p \"$1\" && echo prep > \"$1/prep.txt\"", "sh", "${prefix}/prep"]
check = { paths = ["${prefix}/prep/prep.txt"] }
cache = false

[[step]]
id = "build"
kind = "run"
needs = ["prep"]
inputs = ["${recipe.dir}/hello.c"]
cmd = ["sh", "-c", "mkdir -p \"$1/bin\" && cc -o \"$1/bin/hello\" \"$2\"", "sh", "${prefix}", "${recipe.dir}/hello.c"]
outputs = ["${prefix}/bin"]
check = { paths = ["${prefix}/bin/hello"] }
"#;

pub(crate) struct Setup {
    pub(crate) ws: Workspace,
}

impl Setup {
    pub(crate) fn new() -> Self {
        let ws = Workspace::new();
        ws.write("r.toml", RECIPE);
        ws.write("hello.c", "int main(void) { return 0; }\n");
        // A `cc` that counts its calls, then is the real compiler.
        let cc = ws.write(
            "bin/cc",
            "#!/bin/sh\necho run >> \"$CC_COUNT\"\nfor c in /usr/bin/cc /usr/bin/gcc /usr/bin/clang; do [ -x \"$c\" ] && exec \"$c\" \"$@\"; done\nexit 127\n",
        );
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cc, std::fs::Permissions::from_mode(0o755)).unwrap();
        Setup { ws }
    }

    pub(crate) fn cache(&self) -> PathBuf {
        self.ws.path().join("shared-cache")
    }

    /// `kiln up r.toml` with state dir `state`, the shared cache, the counting `cc` first on PATH.
    pub(crate) fn up(&self, state: &str) -> String {
        self.up_with_cache(state, &self.cache())
    }

    pub(crate) fn up_with_cache(&self, state: &str, cache: &Path) -> String {
        self.kiln_ok(state, cache, &["up", "r.toml"])
    }

    /// `kiln` with state dir `state`, cache `cache`, the counting `cc` first on PATH.
    pub(crate) fn kiln_cmd(&self, state: &str, cache: &Path) -> assert_cmd::Command {
        let path = format!(
            "{}:{}",
            self.ws.path().join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = self.ws.kiln();
        cmd.env("KILN_HOME", self.ws.path().join(state))
            .env("KILN_CACHE_DIR", cache)
            .env("CC_COUNT", self.ws.path().join("cc-count"))
            .env("PATH", path);
        cmd
    }

    /// `kiln <args>` in [`Self::kiln_cmd`]'s environment.
    pub(crate) fn kiln_in(&self, state: &str, cache: &Path, args: &[&str]) -> std::process::Output {
        self.kiln_cmd(state, cache).args(args).output().unwrap()
    }

    /// [`Self::kiln_in`], which must succeed: its stdout and stderr.
    pub(crate) fn kiln_ok(&self, state: &str, cache: &Path, args: &[&str]) -> String {
        let out = self.kiln_in(state, cache, args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "kiln {args:?} failed:\n{text}");
        text
    }

    pub(crate) fn compiler_runs(&self) -> usize {
        std::fs::read_to_string(self.ws.path().join("cc-count")).map_or(0, |s| s.lines().count())
    }

    pub(crate) fn entries(&self) -> Vec<PathBuf> {
        let dir = self.cache().join("steps");
        let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        v.retain(|p| p.join("entry.json").is_file());
        v
    }

    pub(crate) fn receipt(&self, state: &str) -> serde_json::Value {
        let p = self
            .ws
            .path()
            .join(state)
            .join("runs/cc-demo/receipts/build.json");
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
    }

    pub(crate) fn hello(&self, state: &str) -> PathBuf {
        self.ws.path().join(state).join("work/cc-demo/bin/hello")
    }
}

pub(crate) fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.permissions().mode() & 0o111 != 0)
}

#[test]
fn a_fresh_state_restores_the_compile_without_running_the_compiler() {
    let s = Setup::new();
    let a = s.up("A");
    assert!(a.contains("ran    build"), "{a}");
    assert_eq!(s.compiler_runs(), 1);
    assert_eq!(
        s.entries().len(),
        1,
        "one entry: build (prep is cache = false)"
    );
    let b = s.up("B");
    assert_eq!(s.compiler_runs(), 1, "state B ran the compiler:\n{b}");
    let entry = s.entries()[0].file_name().unwrap().to_string_lossy()[..12].to_string();
    assert!(
        b.contains(&format!("restored from cache (entry {entry})")),
        "{b}"
    );
    assert_eq!(
        s.receipt("B")["restored_from"],
        format!("restored from cache (entry {entry})")
    );
    assert!(is_executable(&s.hello("B")), "the mode is kept");
    // prep is never cached: it ran in B too.
    assert!(b.contains("ran    prep"), "{b}");
}

#[test]
fn one_changed_input_byte_misses() {
    let s = Setup::new();
    s.up("A");
    s.ws.write("hello.c", "int main(void) { return 1; }\n");
    let b = s.up("B");
    assert!(b.contains("ran    build"), "{b}");
    assert_eq!(s.compiler_runs(), 2);
    assert_eq!(s.entries().len(), 2, "the new key is stored beside the old");
}

#[test]
fn a_corrupted_entry_is_refused_nothing_restored_and_the_step_runs() {
    let s = Setup::new();
    s.up("A");
    let tar = s.entries()[0].join("outputs.tar");
    let mut bytes = std::fs::read(&tar).unwrap();
    // Flip a byte in the middle of the compiled binary's data, then also try a truncation.
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&tar, &bytes).unwrap();
    let b = s.up("B");
    assert!(
        b.contains("ran    build"),
        "a corrupted entry was used:\n{b}"
    );
    assert!(!b.contains("restored from cache"), "{b}");
    assert_eq!(s.compiler_runs(), 2);
    assert_eq!(s.receipt("B")["restored_from"], serde_json::Value::Null);

    std::fs::write(&tar, &bytes[..bytes.len() / 3]).unwrap();
    std::fs::remove_dir_all(s.ws.path().join("B")).unwrap();
    let b = s.up("B");
    assert!(
        b.contains("ran    build"),
        "a truncated entry was used:\n{b}"
    );
    assert_eq!(s.compiler_runs(), 3);
    let leftovers: Vec<_> = std::fs::read_dir(s.hello("B").parent().unwrap().parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "bin" && n != "prep")
        .collect();
    assert!(leftovers.is_empty(), "restore temps left: {leftovers:?}");
}

#[test]
fn a_forged_entry_whose_archive_hash_was_rewritten_is_refused_file_by_file() {
    use sha2::{Digest, Sha256};
    let s = Setup::new();
    s.up("A");
    let dir = &s.entries()[0];
    let tar = dir.join("outputs.tar");
    let mut bytes = std::fs::read(&tar).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&tar, &bytes).unwrap();
    // The forger also rewrites the archive's hash in entry.json; only the manifest is left.
    let entry_path = dir.join("entry.json");
    let mut entry: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&entry_path).unwrap()).unwrap();
    let sha = Sha256::digest(&bytes)
        .iter()
        .fold(String::new(), |mut hex, b| {
            use std::fmt::Write;
            let _ = write!(hex, "{b:02x}");
            hex
        });
    entry["archive_sha256"] = serde_json::Value::String(sha);
    std::fs::write(&entry_path, entry.to_string()).unwrap();
    // Past the signature check (which refuses it first), the manifest refuses it file by file.
    let out = s
        .kiln_cmd("B", &s.cache())
        .env("KILN_CACHE_REQUIRE_SIGS", "false")
        .args(["up", "r.toml"])
        .output()
        .unwrap();
    let b =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(b.contains("ran    build"), "a forged entry was used:\n{b}");
    assert!(
        b.contains("the manifest says"),
        "refused by the manifest:\n{b}"
    );
    assert_eq!(s.compiler_runs(), 2);
}

#[test]
fn cache_false_is_never_stored() {
    let s = Setup::new();
    s.ws.write(
        "r.toml",
        &RECIPE.replace(
            "outputs = [\"${prefix}/bin\"]",
            "outputs = [\"${prefix}/bin\"]\ncache = false",
        ),
    );
    s.up("A");
    assert!(s.entries().is_empty(), "entries: {:?}", s.entries());
    let log = std::fs::read_to_string(s.ws.path().join("A/runs/cc-demo/logs/build.log"))
        .unwrap_or_default();
    let b = s.up("B");
    assert!(b.contains("ran    build"), "{b}");
    assert_eq!(s.compiler_runs(), 2);
    assert!(
        log.contains("not stored in the step cache: `cache = false`"),
        "the step log says why: {log}"
    );
}

#[test]
fn cache_pull_with_a_port_over_65535_is_a_usage_error_not_a_panic() {
    let ws = Workspace::new();
    let out = ws
        .kiln()
        .args(["cache", "pull", "127.0.0.1:70000/kiln/wheels:t"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("port `70000` is not a number from 1 to 65535"),
        "{err}"
    );
    assert!(err.contains("hint:"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn export_from_one_cache_import_into_an_empty_one_restores_without_the_compiler() {
    let s = Setup::new();
    s.up("A");
    let archive = s.ws.path().join("cache.tar");
    let other = s.ws.path().join("other-cache");
    let cache = |dir: &Path, args: &[&str]| {
        let out =
            s.ws.kiln()
                .args(args)
                .env("KILN_CACHE_DIR", dir)
                .output()
                .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{args:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    let exported = cache(&s.cache(), &["cache", "export", archive.to_str().unwrap()]);
    assert!(exported.contains("1 step entry"), "{exported}");
    let imported = cache(&other, &["cache", "import", archive.to_str().unwrap()]);
    assert!(imported.contains("1 step entry"), "{imported}");
    let b = s.up_with_cache("B", &other);
    assert_eq!(s.compiler_runs(), 1, "state B ran the compiler:\n{b}");
    assert!(b.contains("restored from cache (entry"), "{b}");
}

#[test]
fn an_archive_with_a_tampered_step_entry_imports_nothing() {
    let s = Setup::new();
    s.up("A");
    let tar = s.entries()[0].join("outputs.tar");
    let mut bytes = std::fs::read(&tar).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&tar, &bytes).unwrap();
    let archive = s.ws.path().join("cache.tar");
    let other = s.ws.path().join("other-cache");
    let run = |dir: &Path, args: &[&str]| {
        s.ws.kiln()
            .args(args)
            .env("KILN_CACHE_DIR", dir)
            .output()
            .unwrap()
    };
    assert!(
        run(&s.cache(), &["cache", "export", archive.to_str().unwrap()])
            .status
            .success()
    );
    let out = run(&other, &["cache", "import", archive.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("the entry says"), "{err}");
    let left: Vec<_> = std::fs::read_dir(other.join("steps"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "imported: {left:?}");
}

#[test]
fn plan_and_dry_run_say_which_steps_a_restore_would_serve() {
    let s = Setup::new();
    s.up("A");
    let entry = s.entries()[0].file_name().unwrap().to_string_lossy()[..12].to_string();
    let plan = s.kiln_ok("B", &s.cache(), &["plan", "r.toml"]);
    let line = |id: &str| {
        plan.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(id))
            .unwrap_or_else(|| panic!("no line for {id}:\n{plan}"))
            .to_string()
    };
    assert!(
        line("build").ends_with(&format!(
            "never completed; restore from cache (entry {entry})"
        )),
        "{plan}"
    );
    assert!(
        line("prep").ends_with("never completed"),
        "prep runs: {plan}"
    );
    let dry = s.kiln_ok("B", &s.cache(), &["up", "r.toml", "--dry-run"]);
    assert!(
        dry.contains("dry run: 1 step would run, 1 would be restored from the step cache"),
        "{dry}"
    );
    let json = s.kiln_ok("B", &s.cache(), &["plan", "r.toml", "--json"]);
    let event: serde_json::Value = json
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == "plan")
        .unwrap_or_else(|| panic!("no plan event:\n{json}"));
    let steps = event["steps"].as_array().unwrap();
    assert_eq!(steps[1]["id"], "build");
    assert_eq!(steps[1]["restore_entry"], entry.as_str(), "{event}");
    assert!(steps[0].get("restore_entry").is_none(), "{event}");
    assert_eq!(s.compiler_runs(), 1, "planning ran nothing");
    let forced = s.kiln_ok(
        "C",
        &s.cache(),
        &["up", "r.toml", "--dry-run", "--force", "build"],
    );
    assert!(
        !forced.contains("restore from cache"),
        "--force runs: {forced}"
    );

    // What the plan said is what the run does.
    let b = s.up("B");
    assert!(
        b.contains(&format!("restored from cache (entry {entry})")),
        "{b}"
    );
    assert_eq!(s.compiler_runs(), 1);

    // A changed input byte: the key misses, the plan says the step runs.
    s.ws.write("hello.c", "int main(void) { return 2; }\n");
    let plan = s.kiln_ok("B", &s.cache(), &["plan", "r.toml"]);
    assert!(!plan.contains("restore from cache"), "{plan}");
}

/// A restore SIGKILLed (the debug-only `KILN_TEST_RESTORE_KILL_AT`) after its outputs are
/// unpacked beside their place, or after they are in place but before the receipt: the step is
/// not done, and the next run restores it whole, leaving no temporaries.
#[test]
fn a_restore_killed_midway_leaves_the_step_not_done_and_a_rerun_completes() {
    for at in ["unpacked", "replaced"] {
        let s = Setup::new();
        s.up("A");
        let killed = s
            .kiln_cmd("B", &s.cache())
            .args(["up", "r.toml"])
            .env("KILN_TEST_RESTORE_KILL_AT", at)
            .output()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            killed.status.signal(),
            Some(9),
            "{at}: not killed: {}",
            String::from_utf8_lossy(&killed.stderr)
        );
        let receipt = s.ws.path().join("B/runs/cc-demo/receipts/build.json");
        assert!(!receipt.exists(), "{at}: the killed restore left a receipt");
        let work = s
            .hello("B")
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .to_path_buf();
        let names = || -> Vec<String> {
            let mut v: Vec<String> = std::fs::read_dir(&work)
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        match at {
            "unpacked" => assert!(
                names().iter().any(|n| n.starts_with(".bin.kiln-restore-")),
                "the kill came before the rename: {:?}",
                names()
            ),
            _ => assert!(is_executable(&s.hello("B")), "{at}: the output is in place"),
        }
        let plan = s.kiln_ok("B", &s.cache(), &["plan", "r.toml"]);
        assert!(plan.contains("restore from cache (entry"), "{at}: {plan}");
        let b = s.up("B");
        assert!(b.contains("restored from cache (entry"), "{at}: {b}");
        assert_eq!(
            s.compiler_runs(),
            1,
            "{at}: the rerun ran the compiler:\n{b}"
        );
        assert!(is_executable(&s.hello("B")));
        assert_eq!(names(), ["bin", "prep"], "{at}: temporaries left");
        assert!(receipt.exists());
    }
}

/// A step that builds with nvcc has the nvcc version in its key: the same version restores, a
/// changed one misses. `nvcc` here replays the H200's real `nvcc --version` (no toolkit on
/// this machine), with the release the test sets.
#[test]
fn a_changed_nvcc_version_misses() {
    let s = Setup::new();
    s.ws.write(
        "r.toml",
        &RECIPE.replace(
            "mkdir -p \\\"$1/bin\\\" && cc",
            "nvcc --version > /dev/null && mkdir -p \\\"$1/bin\\\" && cc",
        ),
    );
    assert!(
        std::fs::read_to_string(s.ws.path().join("r.toml"))
            .unwrap()
            .contains("nvcc --version"),
        "the recipe runs nvcc"
    );
    let release = |v: &str| {
        s.ws.write(
            "nvcc-version.txt",
            &format!(
                "nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2025 NVIDIA Corporation\nBuilt on Wed_Aug_20_01:58:59_PM_PDT_2025\nCuda compilation tools, release {v}, V{v}.88\nBuild cuda_{v}.r{v}/compiler.36424714_0\n"
            ),
        );
    };
    release("13.0");
    let nvcc = s.ws.write(
        "bin/nvcc",
        &format!(
            "#!/bin/sh\ncat '{}'\n",
            s.ws.path().join("nvcc-version.txt").display()
        ),
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&nvcc, std::fs::Permissions::from_mode(0o755)).unwrap();
    s.up("A");
    assert_eq!(s.compiler_runs(), 1);
    let b = s.up("B");
    assert!(b.contains("restored from cache (entry"), "same nvcc: {b}");
    assert_eq!(s.compiler_runs(), 1);
    release("12.8");
    let c = s.up("C");
    assert!(c.contains("ran    build"), "another nvcc restored: {c}");
    assert_eq!(s.compiler_runs(), 2);
}

/// An entry built for one GPU arch is never restored for another: a step that names the arch
/// (`${host.gpu.cc}`, as the seed's builds do in TORCH_CUDA_ARCH_LIST) has it in its key.
#[test]
fn a_changed_gpu_arch_misses() {
    let s = Setup::new();
    s.ws.write(
        "r.toml",
        &RECIPE.replace(
            "needs = [\"prep\"]\n",
            "needs = [\"prep\"]\nenv = { TORCH_CUDA_ARCH_LIST = \"${host.gpu.cc}\" }\n",
        ),
    );
    let up = |state: &str, cc: &str| {
        let out = s
            .kiln_cmd(state, &s.cache())
            .env("KILN_FACT_GPU_CC", cc)
            .args(["up", "r.toml"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{text}");
        text
    };
    up("A", "9.0");
    assert_eq!(s.compiler_runs(), 1);
    let b = up("B", "9.0");
    assert!(b.contains("restored from cache (entry"), "same arch: {b}");
    assert_eq!(s.compiler_runs(), 1);
    let c = up("C", "12.0");
    assert!(
        c.contains("ran    build"),
        "an sm_90 entry restored for sm_120: {c}"
    );
    assert_eq!(s.compiler_runs(), 2);
}

/// An entry built with one C compiler is never restored where `cc` is another version: a step's
/// `requires` tools' versions are in its key.
#[test]
fn a_changed_c_compiler_version_misses() {
    let s = Setup::new();
    s.ws.write(
        "r.toml",
        &RECIPE.replace(
            "needs = [\"prep\"]\n",
            "needs = [\"prep\"]\nrequires = [\"cc\"]\n",
        ),
    );
    // `cc --version` answers from a file (the compiler "upgraded" by rewriting it); any other
    // call is counted and compiles with the real compiler.
    let version = s.ws.path().join("cc-version.txt");
    let cc = s.ws.write(
        "bin/cc",
        &format!(
            "#!/bin/sh\nif [ \"$1\" = --version ]; then cat '{}'; exit 0; fi\n\
             echo run >> \"$CC_COUNT\"\n\
             for c in /usr/bin/cc /usr/bin/gcc /usr/bin/clang; do [ -x \"$c\" ] && exec \"$c\" \"$@\"; done\nexit 127\n",
            version.display()
        ),
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cc, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(&version, "cc (Debian 12.2.0-14) 12.2.0\n").unwrap();
    s.up("A");
    assert_eq!(s.compiler_runs(), 1);
    let b = s.up("B");
    assert!(
        b.contains("restored from cache (entry"),
        "same compiler: {b}"
    );
    assert_eq!(s.compiler_runs(), 1);
    std::fs::write(&version, "cc (Debian 13.1.0-1) 13.1.0\n").unwrap();
    let c = s.up("C");
    assert!(
        c.contains("ran    build"),
        "a gcc 12 entry restored for gcc 13: {c}"
    );
    assert_eq!(s.compiler_runs(), 2);
}

/// `kiln cache gc --json` drops a corrupt step entry and a staging leftover (the walk both caches
/// share), keeps a good one until `--older-than` says it is old, and says each as typed fields.
#[test]
fn cache_gc_drops_corrupt_and_unfinished_step_entries_and_says_which() {
    let s = Setup::new();
    s.up("A");
    let staging = s.cache().join("steps/.staging-left-1");
    std::fs::create_dir_all(&staging).unwrap();
    let gc = |args: &[&str]| -> serde_json::Value {
        let out = s.kiln_ok("A", &s.cache(), args);
        out.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["event"] == "cache_gc")
            .unwrap_or_else(|| panic!("no cache_gc event:\n{out}"))
    };
    let kept = gc(&["cache", "gc", "--json"]);
    assert_eq!(
        kept["removed"],
        serde_json::json!([{"kind": "step", "id": ".staging-left-1", "reason": "unfinished insert"}])
    );
    assert_eq!(s.entries().len(), 1, "a good entry stays");
    let tar = s.entries()[0].join("outputs.tar");
    let id = s.entries()[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    std::fs::write(&tar, b"truncated").unwrap();
    let removed = gc(&["cache", "gc", "--json"]);
    assert_eq!(removed["removed"][0]["id"], id, "{removed}");
    let reason = removed["removed"][0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("archive missing or corrupt: "),
        "{removed}"
    );
    assert!(s.entries().is_empty());
}
