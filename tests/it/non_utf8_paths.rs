//! A recipe whose directory is not UTF-8 (issue 34): `${recipe.dir}`, the step inputs and a
//! profile's directory are text, so a lossy copy (`\xff` read as U+FFFD) would name another
//! directory, which a step would then create and run in. It is refused, located and with a
//! hint, and nothing is made at the lossy name.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use crate::common::Workspace;

#[test]
fn a_recipe_in_a_directory_that_is_not_utf8_is_refused_not_run_elsewhere() {
    let ws = Workspace::new();
    let dir = ws.path().join(OsStr::from_bytes(b"recipes-\xff"));
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(
        dir.join("r.toml"),
        "[recipe]\nname = \"odd\"\n\n[[step]]\nid = \"use\"\nkind = \"run\"\ncwd = \"${recipe.dir}\"\ncmd = [\"sh\", \"-c\", \"echo run >> counts\"]\n",
    )
    .unwrap();
    // The command line itself must be UTF-8 (clap refuses it): kiln is run from that
    // directory, with the recipe named relative to it.
    for args in [["up", "r.toml"], ["plan", "r.toml"]] {
        let out = ws.kiln().args(args).current_dir(&dir).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("is not valid UTF-8") && stderr.contains("recipes-\u{fffd},"),
            "{args:?}: {stderr}"
        );
        assert!(stderr.contains("hint:"), "{args:?}: {stderr}");
    }
    // Nothing ran, here or at the name the lossy copy spells.
    assert!(!dir.join("counts").exists());
    assert!(!ws.path().join("recipes-\u{fffd}").exists());
}
