//! Compiled wheels are trusted like step entries (issue 46): the same keys and variables
//! (`KILN_CACHE_SIGNING_KEY`, `KILN_CACHE_TRUSTED_KEYS`, `KILN_CACHE_REQUIRE_SIGS=false`). An
//! unsigned wheel, one signed by a key this machine does not trust, or one changed after it was
//! signed is refused by `kiln cache import` and `pull` with the way to trust or opt out; one
//! signed by a trusted key comes in; an entry merely accepted by the opt-out is never signed on
//! its way out (no laundering).

use std::path::Path;

use base64::Engine as _;
use serde_json::{json, Value};

use crate::image::LocalRegistry;
use crate::step_cache::Setup;
use crate::step_cache_forged::hex;

const WHEEL: &str = "demo-1.0-py3-none-any.whl";

/// The key of the wheel entries made here, as kiln types it, and its id.
fn key() -> (String, String) {
    let key = format!(
        r#"{{"package":"demo","version":"1.0","source_sha256":"{}","python_tag":"cp311","torch":null,"cuda":null,"arch_list":null,"env":{{}}}}"#,
        "0".repeat(64)
    );
    let id = hex(key.as_bytes());
    (key, id)
}

/// `NAME:BASE64` signature of a wheel entry with the workspace's fleet key.
fn fleet_signature(id: &str, wheel: &[u8], index: Option<&str>) -> String {
    let (name, seed) = crate::common::FLEET_TEST_KEY
        .trim()
        .split_once(':')
        .unwrap();
    let seed = base64::engine::general_purpose::STANDARD
        .decode(seed)
        .unwrap();
    let pair = ring::signature::Ed25519KeyPair::from_seed_unchecked(&seed).unwrap();
    let message = format!(
        "kiln-wheel-entry-v1\nkey {id}\nwheel {WHEEL}\nsha256 {} {}\nindex {}\n",
        hex(wheel),
        wheel.len(),
        index.unwrap_or("-")
    );
    let sig = pair.sign(message.as_bytes());
    format!(
        "{name}:{}",
        base64::engine::general_purpose::STANDARD.encode(sig.as_ref())
    )
}

/// A `kiln cache export`-format archive holding one wheel entry, `entry` its entry.json.
fn archive(id: &str, entry: &Value, wheel: &[u8]) -> Vec<u8> {
    let entry = serde_json::to_vec(entry).unwrap();
    let files = json!({
        format!("wheels/{id}/entry.json"): hex(&entry),
        format!("wheels/{id}/{WHEEL}"): hex(wheel),
    });
    let manifest =
        serde_json::to_vec(&json!({"format": "kiln-wheel-cache-v1", "files": files})).unwrap();
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in [
        ("manifest.json".to_string(), &manifest[..]),
        (format!("wheels/{id}/entry.json"), &entry[..]),
        (format!("wheels/{id}/{WHEEL}"), wheel),
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, name, data).unwrap();
    }
    b.into_inner().unwrap()
}

fn entry(wheel: &[u8], signatures: &[String], index: Option<&str>) -> Value {
    let (key, _) = key();
    let mut e = json!({
        "key": serde_json::from_str::<Value>(&key).unwrap(),
        "wheel": WHEEL,
        "sha256": hex(wheel),
        "size": wheel.len(),
        "created_unix": 1,
    });
    if let Some(i) = index {
        e["index"] = json!(i);
    }
    if !signatures.is_empty() {
        e["signatures"] = json!(signatures);
    }
    e
}

fn import(s: &Setup, state: &str, env: &[(&str, Option<&str>)], tar: &[u8]) -> (bool, String) {
    let path = s.ws.path().join(format!("{state}.tar"));
    std::fs::write(&path, tar).unwrap();
    let mut cmd = s.kiln_cmd(state, &s.ws.path().join(format!("{state}-cache")));
    for (k, v) in env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let out = cmd
        .args(["cache", "import", path.to_str().unwrap()])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

fn imported(s: &Setup, state: &str) -> bool {
    let (_, id) = key();
    s.ws.path()
        .join(format!("{state}-cache/wheels/{id}/{WHEEL}"))
        .is_file()
}

#[test]
fn an_imported_wheel_comes_in_only_signed_by_a_trusted_key_or_with_the_opt_out() {
    let s = Setup::new();
    let (_, id) = key();
    let wheel = b"a wheel built elsewhere";
    let unsigned = archive(&id, &entry(wheel, &[], None), wheel);
    let (ok, text) = import(&s, "A", &[], &unsigned);
    assert!(!ok, "{text}");
    assert!(
        text.contains("is refused: it is not signed") && text.contains("KILN_CACHE_TRUSTED_KEYS"),
        "{text}"
    );
    assert!(!imported(&s, "A"), "nothing is imported");
    let (ok, text) = import(
        &s,
        "B",
        &[("KILN_CACHE_REQUIRE_SIGS", Some("false"))],
        &unsigned,
    );
    assert!(ok && imported(&s, "B"), "the opt-out accepts it: {text}");

    let sig = fleet_signature(&id, wheel, None);
    let signed = archive(&id, &entry(wheel, std::slice::from_ref(&sig), None), wheel);
    let (ok, text) = import(&s, "C", &[], &signed);
    assert!(
        ok && imported(&s, "C"),
        "signed by the trusted fleet key: {text}"
    );
    let untrusting = [
        ("KILN_CACHE_SIGNING_KEY", None),
        ("KILN_CACHE_TRUSTED_KEYS", None),
    ];
    let (ok, text) = import(&s, "D", &untrusting, &signed);
    assert!(!ok && !imported(&s, "D"), "{text}");
    assert!(
        text.contains("no valid signature by a trusted key (signed by: kiln-tests)"),
        "{text}"
    );
    // The index is signed: relabelled after signing, the signature no longer holds.
    let relabelled = archive(
        &id,
        &entry(
            wheel,
            &[sig],
            Some("--index-url https://evil.example/simple"),
        ),
        wheel,
    );
    let (ok, text) = import(&s, "E", &[], &relabelled);
    assert!(!ok && !imported(&s, "E"), "{text}");
}

#[test]
fn a_pull_of_an_unsigned_wheel_is_refused_and_nothing_is_cached() {
    let registry = LocalRegistry::start();
    let reference = format!("127.0.0.1:{}/kiln/cache:wheels", registry.port);
    let s = Setup::new();
    let theirs = s.ws.path().join("their-cache");
    crate::cache_perms::wheel_entry(&theirs, WHEEL, b"their build");
    // A private cache's push: accepted by the opt-out, never signed (it has no key).
    let pushed = s
        .kiln_cmd("T", &theirs)
        .env("KILN_CACHE_REQUIRE_SIGS", "false")
        .env_remove("KILN_CACHE_SIGNING_KEY")
        .args(["cache", "push", &reference])
        .output()
        .unwrap();
    assert!(pushed.status.success(), "{pushed:?}");
    let out = s
        .kiln_cmd("A", &s.cache())
        .args(["cache", "pull", &reference])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("is refused: it is not signed"), "{text}");
    let (_, id) = key();
    assert!(!s.cache().join("wheels").join(id).exists(), "{text}");
}

/// The signatures an exported archive's entry.json files carry.
fn exported_signatures(archive: &Path) -> Vec<String> {
    let mut tar = tar::Archive::new(std::fs::File::open(archive).unwrap());
    let mut found = Vec::new();
    for e in tar.entries().unwrap() {
        let mut e = e.unwrap();
        if e.path().unwrap().ends_with("entry.json") {
            let v: Value = serde_json::from_reader(&mut e).unwrap();
            for s in v["signatures"].as_array().into_iter().flatten() {
                found.push(s.as_str().unwrap().to_string());
            }
        }
    }
    found
}

#[test]
fn an_entry_accepted_only_by_the_opt_out_is_never_signed_on_its_way_out() {
    let s = Setup::new();
    // State A stores the step entry unsigned (it has no key); a wheel made elsewhere is there.
    let a = s
        .kiln_cmd("A", &s.cache())
        .env_remove("KILN_CACHE_SIGNING_KEY")
        .args(["up", "r.toml"])
        .output()
        .unwrap();
    assert!(a.status.success(), "{a:?}");
    crate::cache_perms::wheel_entry(&s.cache(), WHEEL, b"their build");
    // State B accepts unsigned entries and holds the fleet's signing key: it exports both.
    let out = s.ws.path().join("out.tar");
    let b = s
        .kiln_cmd("B", &s.cache())
        .env("KILN_CACHE_REQUIRE_SIGS", "false")
        .args(["cache", "export", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(b.status.success(), "{b:?}");
    assert_eq!(
        exported_signatures(&out),
        Vec::<String>::new(),
        "B signed entries it cannot vouch for"
    );
}
