//! `kiln patch` on the real sglang 0.5.9 / 0.5.23 and flashinfer-python 0.6.3 wheels, unpacked
//! into a temp site-packages: apply, idempotence, compile, revert to the wheel's bytes, check
//! exit codes, dry-run diffs, drift on the current sglang, and the error messages.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::common::{copy_tree, scrub, wheel_site, Workspace};

const SGLANG_FILES: [&str; 3] = [
    "sglang/srt/distributed/device_communicators/all_reduce_utils.py",
    "sglang/srt/distributed/device_communicators/torch_symm_mem.py",
    "sglang/srt/layers/communicator.py",
];
const FLASHINFER_FILE: &str = "flashinfer/jit/comm.py";

/// A writable site-packages in the workspace holding copies of the given wheels.
fn site(ws: &Workspace, specs: &[&str]) -> PathBuf {
    let site = ws.path().join("site");
    for spec in specs {
        copy_tree(&wheel_site(spec), &site);
    }
    site
}

fn sha256(path: &Path) -> String {
    kiln::hash::sha256_bytes(
        &std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
}

/// sha256 of every file under `dir`, by relative path.
fn tree_hashes(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let p = entry.path();
            if entry.file_type().unwrap().is_dir() {
                stack.push(p);
            } else {
                out.insert(p.strip_prefix(dir).unwrap().to_path_buf(), sha256(&p));
            }
        }
    }
    out
}

/// Hashes of the directories holding the files the shipped sets patch (the whole site is 74 MB).
fn patched_dirs(site: &Path) -> BTreeMap<PathBuf, String> {
    [
        "sglang/srt/distributed",
        "sglang/srt/layers",
        "flashinfer/jit",
    ]
    .iter()
    .filter(|d| site.join(d).is_dir())
    .flat_map(|d| {
        tree_hashes(&site.join(d))
            .into_iter()
            .map(move |(p, h)| (Path::new(d).join(p), h))
    })
    .collect()
}

/// Run `kiln patch ACTION SET --site-packages SITE [extra]`: (exit code, stdout, stderr).
fn patch(
    ws: &Workspace,
    action: &str,
    set: &str,
    site: &Path,
    extra: &[&str],
) -> (i32, String, String) {
    let out = ws
        .kiln()
        .args(["patch", action, set, "--site-packages"])
        .arg(site)
        .args(extra)
        .output()
        .unwrap();
    let text = |b: &[u8]| scrub(&String::from_utf8_lossy(b), ws);
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

fn python(args: &[&str]) -> std::process::Output {
    std::process::Command::new("python3")
        .args(args)
        .output()
        .expect("python3 runs")
}

#[test]
fn sm120_sets_apply_compile_and_revert_on_sglang_0_5_9() {
    let ws = Workspace::new();
    let site = site(&ws, &["sglang==0.5.9", "flashinfer-python==0.6.3"]);
    let (code, out, _) = patch(&ws, "check", "sglang-0.5.9-sm120", &site, &[]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(out.matches("not applied ").count(), 3, "{out}");

    // A stale bytecode cache of a file about to change must go.
    let stale = site.join("sglang/srt/distributed/device_communicators/__pycache__");
    let compiled = python(&[
        "-m",
        "py_compile",
        site.join(SGLANG_FILES[0]).to_str().unwrap(),
    ]);
    assert!(compiled.status.success());
    assert_eq!(std::fs::read_dir(&stale).unwrap().count(), 1);

    let (code, out, err) = patch(&ws, "apply", "flashinfer-0.6.3-sm120", &site, &[]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = patch(&ws, "apply", "sglang-0.5.9-sm120", &site, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("patched 3 files; removed 1 stale __pycache__ entries"),
        "{out}"
    );
    assert_eq!(std::fs::read_dir(&stale).unwrap().count(), 0);

    for file in SGLANG_FILES
        .iter()
        .map(|f| site.join(f))
        .chain([site.join(FLASHINFER_FILE)])
    {
        let out = python(&["-m", "py_compile", file.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // all_reduce_utils.py needs only the standard library: run it and read the table.
    let probe = format!(
        "import runpy; t = runpy.run_path({:?})['TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES']; \
         assert t[12] == t[10], t; print(sorted(t))",
        site.join(SGLANG_FILES[0])
    );
    let out = python(&["-c", &probe]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[9, 10, 12]");
    let communicator = std::fs::read_to_string(site.join(SGLANG_FILES[2])).unwrap();
    assert!(
        communicator.contains("(_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)")
    );

    let (code, out, _) = patch(&ws, "check", "sglang-0.5.9-sm120", &site, &[]);
    assert_eq!((code, out.matches("  applied").count()), (0, 3), "{out}");

    // Twice = once: no byte changes, nothing reported as patched.
    let before = patched_dirs(&site);
    let (code, out, _) = patch(&ws, "apply", "sglang-0.5.9-sm120", &site, &[]);
    assert_eq!(code, 0);
    assert!(
        out.contains("nothing to do: the set is already in effect"),
        "{out}"
    );
    assert_eq!(patched_dirs(&site), before);

    let (code, out, err) = patch(&ws, "revert", "sglang-0.5.9-sm120", &site, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("restored 3 files to their originals"), "{out}");
    let (code, _, _) = patch(&ws, "revert", "flashinfer-0.6.3-sm120", &site, &[]);
    assert_eq!(code, 0);
    let wheel = wheel_site("sglang==0.5.9");
    for file in SGLANG_FILES {
        assert_eq!(
            sha256(&site.join(file)),
            sha256(&wheel.join(file)),
            "{file}"
        );
    }
    assert_eq!(
        sha256(&site.join(FLASHINFER_FILE)),
        sha256(&wheel_site("flashinfer-python==0.6.3").join(FLASHINFER_FILE))
    );
    let (code, out, _) = patch(&ws, "revert", "sglang-0.5.9-sm120", &site, &[]);
    assert_eq!(code, 0);
    assert!(out.ends_with("nothing to revert\n"), "{out}");
}

#[test]
fn dry_run_prints_the_diff_and_writes_nothing() {
    let ws = Workspace::new();
    let site = site(&ws, &["sglang==0.5.9", "flashinfer-python==0.6.3"]);
    let before = patched_dirs(&site);
    let (code, sglang, _) = patch(
        &ws,
        "apply",
        "sglang-0.5.9-sm120",
        &site,
        &["--dry-run", "--skip-experimental"],
    );
    assert_eq!(code, 0);
    let (code, flashinfer, _) = patch(
        &ws,
        "apply",
        "flashinfer-0.6.3-sm120",
        &site,
        &["--dry-run"],
    );
    assert_eq!(code, 0);
    assert_eq!(patched_dirs(&site), before);
    assert!(!ws.state().join("patches").exists());
    insta::assert_snapshot!("patch_dry_run_sm120", format!("{sglang}\n{flashinfer}"));
}

#[test]
fn current_sglang_reports_obsolete_and_drifted_and_changes_nothing() {
    let ws = Workspace::new();
    let site = site(&ws, &["sglang==0.5.23"]);
    let before = patched_dirs(&site);
    let (code, out, _) = patch(&ws, "check", "sglang-0.5.9-sm120", &site, &[]);
    assert_eq!(code, 1);
    insta::assert_snapshot!("patch_check_sglang_0_5_23", out);
    let (code, _, err) = patch(&ws, "apply", "sglang-0.5.9-sm120", &site, &[]);
    assert_eq!(code, 1);
    assert!(
        err.contains("does not fit sglang 0.5.23; nothing was changed"),
        "{err}"
    );
    assert!(
        err.contains("S3: file not found: sglang/srt/layers/communicator.py"),
        "{err}"
    );
    assert_eq!(patched_dirs(&site), before);
    // Without the drifted experimental patch, only obsolete ones remain: in effect, nothing to write.
    let (code, out, _) = patch(
        &ws,
        "apply",
        "sglang-0.5.9-sm120",
        &site,
        &["--skip-experimental"],
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.ends_with("nothing to do: the set is already in effect\n"),
        "{out}"
    );
    assert_eq!(patched_dirs(&site), before);
}

#[test]
fn the_fusion_patch_requires_the_flashinfer_set() {
    let ws = Workspace::new();
    let site = site(&ws, &["sglang==0.5.9", "flashinfer-python==0.6.3"]);
    let before = patched_dirs(&site);
    let (code, _, err) = patch(&ws, "apply", "sglang-0.5.9-sm120", &site, &[]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "error: patch set `sglang-0.5.9-sm120` cannot be applied; nothing was changed:\n  \
         S3 requires flashinfer-0.6.3-sm120:S3b, which is not applied\n\
         hint: apply the required set first (`kiln patch apply flashinfer-0.6.3-sm120 --site-packages [WS]/site`), \
         or leave experimental patches out with --skip-experimental\n"
    );
    assert_eq!(patched_dirs(&site), before);
}

#[test]
fn revert_refuses_files_changed_since_apply_unless_forced() {
    let ws = Workspace::new();
    let site = site(&ws, &["sglang==0.5.9"]);
    let (code, _, err) = patch(
        &ws,
        "apply",
        "sglang-0.5.9-sm120",
        &site,
        &["--skip-experimental"],
    );
    assert_eq!(code, 0, "{err}");
    let edited = site.join(SGLANG_FILES[1]);
    let mut text = std::fs::read_to_string(&edited).unwrap();
    text.push_str("# local edit\n");
    std::fs::write(&edited, &text).unwrap();
    let (code, _, err) = patch(&ws, "revert", "sglang-0.5.9-sm120", &site, &[]);
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!(
            "changed since kiln applied it: {}; nothing was changed",
            SGLANG_FILES[1]
        )),
        "{err}"
    );
    assert!(
        err.contains("hint: --force restores the originals anyway"),
        "{err}"
    );
    assert_ne!(
        sha256(&site.join(SGLANG_FILES[0])),
        sha256(&wheel_site("sglang==0.5.9").join(SGLANG_FILES[0]))
    );
    let (code, _, err) = patch(&ws, "revert", "sglang-0.5.9-sm120", &site, &["--force"]);
    assert_eq!(code, 0, "{err}");
    for file in &SGLANG_FILES[..2] {
        assert_eq!(
            sha256(&site.join(file)),
            sha256(&wheel_site("sglang==0.5.9").join(file)),
            "{file}"
        );
    }
}

#[test]
fn a_failed_write_midway_restores_the_files_already_written() {
    let ws = Workspace::new();
    let site = site(&ws, &["sglang==0.5.9"]);
    let before = patched_dirs(&site);
    let set = kiln::patch::load("sglang-0.5.9-sm120").unwrap();
    let opts = kiln::patch::Options {
        skip_experimental: true,
        ..Default::default()
    };
    let mut writes = 0;
    let mut failing = |path: &Path, bytes: &[u8]| {
        writes += 1;
        if writes == 2 {
            return Err(kiln::error::Error::other(
                format!("disk full writing {}", path.display()),
                None,
            ));
        }
        kiln::patch::store::write_preserving(path, bytes)
    };
    let err = kiln::patch::apply_with(
        &set,
        &site,
        &kiln::paths::StatePaths::new(ws.state(), None),
        &opts,
        &mut failing,
    )
    .unwrap_err();
    assert!(err.to_string().starts_with("disk full writing "), "{err}");
    assert_eq!(writes, 2, "the first file was written before the failure");
    assert_eq!(patched_dirs(&site), before);
}

#[test]
fn json_report() {
    let ws = Workspace::new();
    let site = site(&ws, &["flashinfer-python==0.6.3"]);
    let (code, out, _) = patch(&ws, "check", "flashinfer-0.6.3-sm120", &site, &["--json"]);
    assert_eq!(code, 1);
    // JSON lines: the report as a `patch` event, then why the set is not in effect.
    let kinds: Vec<_> = crate::reporter::events(&out)
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(kinds, ["patch", "error", "outcome"], "{out}");
    let report = crate::reporter::json_event(&out, "patch");
    assert_eq!(report["schema"], 1);
    assert_eq!(report["action"], "check");
    assert_eq!(report["version"], "0.6.3");
    assert_eq!(report["effective"], false);
    assert_eq!(report["patches"][0]["id"], "S3b");
    assert_eq!(report["patches"][0]["status"], "not-applied");
    assert_eq!(report["patches"][0]["experimental"], true);
}

#[test]
fn patch_set_errors_point_at_the_line() {
    let ws = Workspace::new();
    let site = ws.path().join("site");
    std::fs::create_dir_all(site.join("demo-1.0.dist-info")).unwrap();
    std::fs::write(
        site.join("demo-1.0.dist-info/METADATA"),
        "Name: demo\nVersion: 1.0\n",
    )
    .unwrap();
    let header = "[patchset]\nname = \"t\"\npackage = \"demo\"\nversions = \">=1.0\"\n\n[[patch]]\nid = \"P1\"\nfile = \"m.py\"\nrationale = \"r\"\n";
    let cases = [
        ("unknown_key", format!("{header}fixed_inn = \"2.0\"\nedits = [{{ op = \"diff\", diff = \"@@ -1 +1 @@\\n-a\\n+b\\n\" }}]\n")),
        ("unknown_op", format!("{header}edits = [{{ op = \"dict-add-kye\", dict = \"D\", key = \"1\", value = \"2\" }}]\n")),
        ("wrong_field", format!("{header}edits = [{{ op = \"import-add-name\", module = \"m\", name = \"n\", to = \"[1]\" }}]\n")),
        ("bad_python", format!("{header}edits = [{{ op = \"dict-add-key\", dict = \"D\", key = \"1\", value = \"[1,\" }}]\n")),
        ("bad_range", header.replace(">=1.0", "1.0") + "edits = []\n"),
        ("escaping_path", header.replace("m.py", "../evil.py") + "edits = [{ op = \"diff\", diff = \"@@ -1 +1 @@\\n-a\\n+b\\n\" }]\n"),
    ];
    let mut shown = String::new();
    for (name, text) in cases {
        let path = ws.write(&format!("{name}.toml"), &text);
        let (code, _, err) = patch(&ws, "check", path.to_str().unwrap(), &site, &[]);
        assert_eq!(code, 2, "{name}: {err}");
        shown.push_str(&format!("== {name}\n{err}"));
    }
    let (code, _, err) = patch(&ws, "apply", "sglang-0.5.9-sm12", &site, &[]);
    assert_eq!(code, 2);
    shown.push_str(&format!("== unknown set\n{err}"));
    let out = ws
        .kiln()
        .args(["patch", "check", "sglang-0.5.9-sm120"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    shown.push_str(&format!(
        "== no site\n{}",
        String::from_utf8_lossy(&out.stderr)
    ));
    let (code, _, err) = patch(&ws, "check", "sglang-0.5.9-sm120", &site, &[]);
    assert_eq!(code, 1);
    shown.push_str(&format!("== not installed\n{err}"));
    insta::assert_snapshot!("patch_set_errors", shown);
}

#[test]
fn python_flag_finds_the_interpreters_site_packages() {
    // A real venv (python3 -m venv) with the flashinfer wheel copied into its site-packages:
    // `--python` must find that directory (sysconfig's purelib of the venv's interpreter), not
    // the system's, and patch the file there.
    let ws = Workspace::new();
    let venv = ws.path().join("venv");
    let made = python(&["-m", "venv", "--without-pip", venv.to_str().unwrap()]);
    assert!(made.status.success(), "{made:?}");
    let interpreter = venv.join("bin/python");
    let purelib = std::process::Command::new(&interpreter)
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .unwrap();
    let site = PathBuf::from(String::from_utf8(purelib.stdout).unwrap().trim());
    assert!(site.starts_with(&venv), "{}", site.display());
    copy_tree(&wheel_site("flashinfer-python==0.6.3"), &site);
    let original = sha256(&site.join(FLASHINFER_FILE));
    let run = |action: &str, python: &Path| {
        let out = ws
            .kiln()
            .args(["patch", action, "flashinfer-0.6.3-sm120", "--python"])
            .arg(python)
            .output()
            .unwrap();
        let text = |b: &[u8]| scrub(&String::from_utf8_lossy(b), &ws);
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let (code, out, err) = run("check", &interpreter);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.contains("not applied "), "{out}");
    let (code, out, err) = run("apply", &interpreter);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_ne!(sha256(&site.join(FLASHINFER_FILE)), original);
    let (code, out, err) = run("check", &interpreter);
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, out, err) = run("revert", &interpreter);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(sha256(&site.join(FLASHINFER_FILE)), original);

    // An interpreter that does not exist is named.
    let (code, _, err) = run("check", Path::new("/nonexistent/python3"));
    assert_eq!(code, Some(1));
    assert!(
        err.contains("cannot run `/nonexistent/python3`: program not found"),
        "{err}"
    );
}
