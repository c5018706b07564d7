//! Trust by signature (issue 46): a step-cache entry from elsewhere (another state directory on
//! a shared `KILN_CACHE_DIR`, an imported archive, a registry pull) is used only when signed by
//! a trusted ed25519 key; unsigned, wrongly signed and tampered-after-signing entries are refused
//! with the way to trust or opt out; a state's own entries need no signature.

use std::path::Path;

use crate::step_cache::Setup;
use crate::step_cache_forged::{forge_entry, Member};

/// `kiln <args>` in state `state`, its own env changes `env` applied (`None`: removed).
fn kiln(
    s: &Setup,
    state: &str,
    cache: &Path,
    env: &[(&str, Option<&str>)],
    args: &[&str],
) -> (bool, String) {
    let mut cmd = s.kiln_cmd(state, cache);
    for (k, v) in env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let out = cmd.args(args).output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

const NO_KEY: &[(&str, Option<&str>)] = &[("KILN_CACHE_SIGNING_KEY", None)];

/// `kiln cache key generate NAME`: its secret key file and public key.
fn generate(s: &Setup, name: &str) -> (String, String) {
    let out = s.ws.path().join(format!("{name}.key"));
    let (ok, text) = kiln(
        s,
        "keys",
        &s.cache(),
        &[],
        &[
            "cache",
            "key",
            "generate",
            name,
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(ok, "{text}");
    let public = text
        .lines()
        .find_map(|l| l.strip_prefix("public key: "))
        .unwrap_or_else(|| panic!("no public key:\n{text}"))
        .to_string();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&out).unwrap().permissions().mode();
    assert_eq!(
        mode & 0o077,
        0,
        "the secret key is readable by others: {mode:o}"
    );
    (out.to_str().unwrap().to_string(), public)
}

#[test]
fn an_unsigned_entry_another_state_stored_is_refused_and_the_state_that_stored_it_restores_it() {
    let s = Setup::new();
    let (ok, a) = kiln(&s, "A", &s.cache(), NO_KEY, &["up", "r.toml"]);
    assert!(ok, "{a}");
    let (ok, b) = kiln(&s, "B", &s.cache(), NO_KEY, &["up", "r.toml"]);
    assert!(ok, "{b}");
    assert!(
        b.contains("ran    build"),
        "an unsigned entry was used:\n{b}"
    );
    assert!(
        b.contains("is refused: it is not signed, and this state directory did not store it"),
        "{b}"
    );
    assert!(
        b.contains("KILN_CACHE_TRUSTED_KEYS"),
        "the way to trust: {b}"
    );
    assert_eq!(s.compiler_runs(), 2);
    // State A stored it: its own entry restores without any key.
    std::fs::remove_dir_all(s.ws.path().join("A/work/cc-demo/bin")).unwrap();
    let (ok, again) = kiln(&s, "A", &s.cache(), NO_KEY, &["up", "r.toml"]);
    assert!(ok, "{again}");
    assert!(again.contains("restored from cache (entry"), "{again}");
    assert_eq!(s.compiler_runs(), 2);
    // A private cache's explicit opt-out accepts it.
    let opt_out = [
        ("KILN_CACHE_SIGNING_KEY", None),
        ("KILN_CACHE_REQUIRE_SIGS", Some("false")),
    ];
    let (ok, c) = kiln(&s, "C", &s.cache(), &opt_out, &["up", "r.toml"]);
    assert!(ok && c.contains("restored from cache (entry"), "{c}");
}

/// `kiln plan` and `kiln up --dry-run` promise a restore only where the run makes one: an
/// unsigned entry another state stored is refused by the run, so it is planned as a run; with
/// the private cache's opt-out it is a restore again.
#[test]
fn plan_promises_a_restore_only_from_an_entry_the_run_would_trust() {
    let s = Setup::new();
    let (ok, a) = kiln(&s, "A", &s.cache(), NO_KEY, &["up", "r.toml"]);
    assert!(ok, "{a}");
    let (ok, plan) = kiln(&s, "B", &s.cache(), NO_KEY, &["plan", "r.toml"]);
    assert!(ok && !plan.contains("restore from cache"), "{plan}");
    let (ok, dry) = kiln(&s, "B", &s.cache(), NO_KEY, &["up", "r.toml", "--dry-run"]);
    assert!(ok && dry.contains("dry run: 2 steps would run\n"), "{dry}");
    let opt_out = [
        ("KILN_CACHE_SIGNING_KEY", None),
        ("KILN_CACHE_REQUIRE_SIGS", Some("false")),
    ];
    let (ok, plan) = kiln(&s, "B", &s.cache(), &opt_out, &["plan", "r.toml"]);
    assert!(ok && plan.contains("restore from cache (entry"), "{plan}");
}

#[test]
fn an_entry_signed_by_a_key_this_machine_does_not_trust_is_refused_until_it_is_trusted() {
    let s = Setup::new();
    let (secret, public) = generate(&s, "builder-7");
    let signed_by_other = [("KILN_CACHE_SIGNING_KEY", Some(secret.as_str()))];
    let (ok, a) = kiln(&s, "A", &s.cache(), &signed_by_other, &["up", "r.toml"]);
    assert!(ok, "{a}");
    // B signs with (and so trusts) the workspace's fleet key only.
    let (ok, b) = kiln(&s, "B", &s.cache(), &[], &["up", "r.toml"]);
    assert!(ok, "{b}");
    assert!(b.contains("ran    build"), "{b}");
    assert!(
        b.contains("no valid signature by a trusted key (signed by: builder-7)"),
        "{b}"
    );
    let trusting = [("KILN_CACHE_TRUSTED_KEYS", Some(public.as_str()))];
    let (ok, c) = kiln(&s, "C", &s.cache(), &trusting, &["up", "r.toml"]);
    assert!(ok && c.contains("restored from cache (entry"), "{c}");
    assert_eq!(s.compiler_runs(), 2);
}

#[test]
fn an_entry_changed_after_it_was_signed_is_refused() {
    let s = Setup::new();
    // A's signed entry, its manifest and archive replaced (every hash consistent, the
    // signature A made kept).
    let (id, entry, outputs) = forge_entry(
        &s,
        &[
            Member::Dir("0", 0o755),
            Member::File("0/hello", 0o755, b"#!/bin/sh\necho forged\n"),
        ],
    );
    assert!(
        String::from_utf8_lossy(&entry).contains("kiln-tests:"),
        "A signed it"
    );
    let dir = s.cache().join("steps").join(&id);
    std::fs::write(dir.join("entry.json"), &entry).unwrap();
    std::fs::write(dir.join("outputs.tar"), &outputs).unwrap();
    let b = s.up("B");
    assert!(
        b.contains("ran    build"),
        "a tampered entry was used:\n{b}"
    );
    assert!(b.contains("no valid signature by a trusted key"), "{b}");
}

#[test]
fn an_import_of_unsigned_entries_is_refused_with_the_way_to_trust_or_opt_out() {
    let s = Setup::new();
    let (ok, a) = kiln(&s, "A", &s.cache(), NO_KEY, &["up", "r.toml"]);
    assert!(ok, "{a}");
    let archive = s.ws.path().join("cache.tar");
    let path = archive.to_str().unwrap();
    let (ok, out) = kiln(&s, "A", &s.cache(), NO_KEY, &["cache", "export", path]);
    assert!(ok, "{out}");
    let other = s.ws.path().join("other");
    let (ok, err) = kiln(&s, "B", &other, &[], &["cache", "import", path]);
    assert!(!ok, "{err}");
    assert!(err.contains("is refused: it is not signed"), "{err}");
    assert!(err.contains("KILN_CACHE_REQUIRE_SIGS=false"), "{err}");
    assert!(
        !other.join("steps").exists()
            || std::fs::read_dir(other.join("steps")).unwrap().all(|e| e
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with('.'))
    );
    // Exported by a machine that signs: imported.
    let (ok, out) = kiln(&s, "A", &s.cache(), &[], &["cache", "export", path]);
    assert!(ok, "{out}");
    let (ok, imported) = kiln(&s, "B", &other, &[], &["cache", "import", path]);
    assert!(ok && imported.contains("1 step entry"), "{imported}");
}

#[test]
fn a_pull_of_an_unsigned_entry_on_a_miss_is_refused() {
    let registry = crate::image::LocalRegistry::start();
    let reference = format!("127.0.0.1:{}/kiln/cache:steps", registry.port);
    let s = Setup::new();
    let (ok, a) = kiln(&s, "A", &s.cache(), NO_KEY, &["up", "r.toml"]);
    assert!(ok, "{a}");
    let (ok, pushed) = kiln(&s, "A", &s.cache(), NO_KEY, &["cache", "push", &reference]);
    assert!(ok, "{pushed}");
    let empty = s.ws.path().join("cache-b");
    let remote = [("KILN_REMOTE_CACHE", Some(reference.as_str()))];
    let (ok, b) = kiln(&s, "B", &empty, &remote, &["up", "r.toml"]);
    assert!(ok, "{b}");
    assert!(b.contains("ran    build"), "{b}");
    assert!(b.contains("is refused: it is not signed"), "{b}");
    assert_eq!(s.compiler_runs(), 2);
}
