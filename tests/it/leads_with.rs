//! Output that leads with what matters: `kiln cache ls` says what the cache holds before what
//! it does not.

use crate::step_cache::Setup;

#[test]
fn cache_ls_lists_its_step_entries_before_saying_it_has_no_wheels() {
    let s = Setup::new();
    s.up("state-a");
    let out =
        s.ws.kiln()
            .args(["cache", "ls"])
            .env("KILN_CACHE_DIR", s.cache())
            .output()
            .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].contains("  step cc-demo/build  "), "{text}");
    assert!(lines[1].starts_with("no compiled wheels in "), "{text}");
}
