//! The step cache through a real registry (Debian's `docker-registry` on loopback): state A's
//! entry pushed with `kiln cache push`, pulled into an empty cache and restored in state B
//! without the compiler; fetched on a miss through `KILN_REMOTE_CACHE`; a manifest whose
//! outputs layer is not the entry's archive is refused and nothing is cached.

use std::path::Path;

use serde_json::Value;

use crate::image::LocalRegistry;
use crate::step_cache::{is_executable, Setup};

/// The JSON-lines event `name` of `out` (the only one).
fn event(out: &str, name: &str) -> Value {
    let found: Vec<Value> = out
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == name)
        .collect();
    assert_eq!(found.len(), 1, "one `{name}` event:\n{out}");
    found.into_iter().next().unwrap()
}

fn step_entries(cache: &Path) -> usize {
    std::fs::read_dir(cache.join("steps")).map_or(0, |d| {
        d.flatten()
            .filter(|e| e.path().join("entry.json").is_file())
            .count()
    })
}

#[test]
fn a_pushed_step_entry_is_pulled_into_an_empty_cache_and_restored_without_the_compiler() {
    let registry = LocalRegistry::start();
    let reference = format!("127.0.0.1:{}/kiln/cache:steps", registry.port);
    let s = Setup::new();
    s.up("A");
    assert_eq!(s.compiler_runs(), 1);
    let pushed = s.kiln_ok("A", &s.cache(), &["cache", "push", "--json", &reference]);
    let pushed = event(&pushed, "cache_pushed");
    assert_eq!(pushed["steps"]["uploaded"], 1, "{pushed}");
    assert_eq!(pushed["steps"]["in_tag"], 1, "{pushed}");
    // A second push uploads nothing and keeps the entry in the tag.
    let again = s.kiln_ok("A", &s.cache(), &["cache", "push", "--json", &reference]);
    let again = event(&again, "cache_pushed");
    assert_eq!(again["steps"]["already_there"], 1, "{again}");
    assert_eq!(again["steps"]["in_tag"], 1, "{again}");

    let empty = s.ws.path().join("cache-b");
    let pulled = s.kiln_ok("B", &empty, &["cache", "pull", "--json", &reference]);
    let pulled = event(&pulled, "cache_pulled");
    assert_eq!(pulled["steps"]["fetched"], 1, "{pulled}");
    assert!(pulled["steps"]["bytes"].as_u64().unwrap() > 0, "{pulled}");
    assert_eq!(step_entries(&empty), 1);
    let b = s.up_with_cache("B", &empty);
    assert_eq!(s.compiler_runs(), 1, "state B ran the compiler:\n{b}");
    assert!(b.contains("restored from cache (entry"), "{b}");
    assert!(is_executable(&s.hello("B")));
}

#[test]
fn a_miss_asks_kiln_remote_cache_for_the_one_entry_and_restores_it() {
    let registry = LocalRegistry::start();
    let reference = format!("127.0.0.1:{}/kiln/cache:miss", registry.port);
    let s = Setup::new();
    s.up("A");
    s.kiln_ok("A", &s.cache(), &["cache", "push", &reference]);
    let empty = s.ws.path().join("cache-c");
    let out = s
        .kiln_cmd("C", &empty)
        .args(["up", "r.toml"])
        .env("KILN_REMOTE_CACHE", &reference)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert_eq!(s.compiler_runs(), 1, "state C ran the compiler:\n{text}");
    assert!(text.contains("pulled from the remote cache"), "{text}");
    assert!(text.contains("restored from cache (entry"), "{text}");
    assert_eq!(step_entries(&empty), 1, "the pulled entry stays cached");
}

#[test]
fn a_manifest_whose_outputs_layer_is_not_the_entrys_archive_is_refused_and_nothing_cached() {
    let registry = LocalRegistry::start();
    let reference = format!("127.0.0.1:{}/kiln/cache:forged", registry.port);
    let s = Setup::new();
    s.up("A");
    s.kiln_ok("A", &s.cache(), &["cache", "push", &reference]);
    // The registry's manifest now points the outputs layer at the entry.json blob.
    let parsed = kiln::oci::Reference::parse(&reference).unwrap();
    let client = kiln::oci::Registry::new(&parsed);
    let media = "application/vnd.oci.image.manifest.v1+json";
    let (_, bytes) = client.manifest(media).unwrap().unwrap();
    let mut manifest: Value = serde_json::from_slice(&bytes).unwrap();
    let layers = manifest["layers"].as_array_mut().unwrap();
    let entry = layers
        .iter()
        .find(|l| l["mediaType"] == "application/vnd.kiln.step-entry.v1+json")
        .unwrap()
        .clone();
    for l in layers.iter_mut() {
        if l["mediaType"] == "application/vnd.kiln.step-outputs.v1.tar" {
            l["digest"] = entry["digest"].clone();
            l["size"] = entry["size"].clone();
        }
    }
    client
        .put_manifest(media, &serde_json::to_vec(&manifest).unwrap())
        .unwrap();

    let empty = s.ws.path().join("cache-d");
    let out = s.kiln_in("D", &empty, &["cache", "pull", &reference]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a forged entry was pulled: {err}");
    assert!(err.contains("disagree"), "{err}");
    assert!(err.contains("hint:"), "{err}");
    assert_eq!(step_entries(&empty), 0, "nothing cached");
    let left: Vec<_> = std::fs::read_dir(empty.join("steps"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");

    // On a miss the refusal is a warning and the step runs.
    let out = s
        .kiln_cmd("D", &empty)
        .args(["up", "r.toml"])
        .env("KILN_REMOTE_CACHE", &reference)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{text}");
    assert!(text.contains("remote cache is unavailable"), "{text}");
    assert_eq!(s.compiler_runs(), 2, "the step ran: {text}");
}
