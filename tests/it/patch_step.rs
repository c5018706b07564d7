//! The `patch` step kind: `kiln up` applies the SM120 patch sets to real sglang 0.5.9 and
//! flashinfer-python 0.6.3 wheels, and a re-run changes nothing.

use crate::common::{copy_tree, stderr_of, wheel_site, Workspace};

#[test]
fn kiln_up_applies_the_sm120_patch_sets_once() {
    let ws = Workspace::new();
    let site = ws.path().join("site");
    copy_tree(&wheel_site("sglang==0.5.9"), &site);
    copy_tree(&wheel_site("flashinfer-python==0.6.3"), &site);
    ws.write(
        "patch.toml",
        &format!(
            r#"[recipe]
name = "patch-step"
[vars]
site = "{}"
[[step]]
id = "flashinfer"
kind = "patch"
set = "flashinfer-0.6.3-sm120"
site_packages = "${{site}}"
[[step]]
id = "sglang"
kind = "patch"
needs = ["flashinfer"]
set = "sglang-0.5.9-sm120"
site_packages = "${{site}}"
"#,
            site.display()
        ),
    );
    ws.kiln().args(["up", "patch.toml"]).assert().success();
    let utils = site.join("sglang/srt/distributed/device_communicators/all_reduce_utils.py");
    let text = std::fs::read_to_string(&utils).unwrap();
    assert!(text.contains("12:"), "key 12 added: {text}");
    let comm = std::fs::read_to_string(site.join("flashinfer/jit/comm.py")).unwrap();
    assert!(comm.contains("[9, 10, 12]"), "{comm}");

    let before = std::fs::read(&utils).unwrap();
    let out = ws
        .kiln()
        .args(["up", "patch.toml"])
        .assert()
        .success()
        .get_output()
        .stderr
        .clone();
    assert!(String::from_utf8_lossy(&out).contains("0 of 2 steps to run"));
    assert_eq!(std::fs::read(&utils).unwrap(), before);

    // Undo the patch behind kiln's back (the wheel's own file put back): the step forced again
    // finds the patch set unapplied and applies it, byte for byte as before.
    let rel = "sglang/srt/distributed/device_communicators/all_reduce_utils.py";
    std::fs::copy(wheel_site("sglang==0.5.9").join(rel), &utils).unwrap();
    assert_ne!(
        std::fs::read(&utils).unwrap(),
        before,
        "the edit undid the patch"
    );
    let out = ws
        .kiln()
        .args(["up", "patch.toml", "--force", "sglang"])
        .assert()
        .success()
        .get_output()
        .stderr
        .clone();
    let out = String::from_utf8_lossy(&out);
    assert!(out.contains("ran    sglang"), "{out}");
    assert_eq!(std::fs::read(&utils).unwrap(), before);
}

#[test]
fn an_unknown_patch_set_is_a_located_error() {
    let ws = Workspace::new();
    ws.write(
        "bad.toml",
        "[[step]]\nid = \"p\"\nkind = \"patch\"\nset = \"sglang-0.5.9-sm12\"\nsite_packages = \"/nonexistent\"\n",
    );
    let text = stderr_of(ws.kiln().args(["plan", "bad.toml"]), 2);
    assert!(text.contains("no patch set `sglang-0.5.9-sm12`"), "{text}");
    assert!(text.contains("bad.toml:4:7"), "{text}");
    assert!(
        text.contains("did you mean `sglang-0.5.9-sm120`?"),
        "{text}"
    );
}
