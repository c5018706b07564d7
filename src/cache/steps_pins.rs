//! Pins of the step cache's store, verify and restore (issue 48's mutation run): whom a restore
//! and `kiln plan` trust, that an export's signing signs, the date a store writes, that an
//! archive's own hash refuses a changed or grown archive before anything is laid out, why an
//! entry without its entry.json is refused, that a refused restore of a file output leaves no
//! temp beside it, and how a store or an import tells "another writer put it there first" from a
//! rename that failed.
//!
//! Real files in a tempdir; the signing pin signs with a key file through `Trust::signing`,
//! never through this process's environment, which every other test reads.

use super::*;
use crate::cache::pack::Before;
use crate::cache::trust::Trust;

/// A key of its own for each `tag`.
fn key(tag: &str) -> StepKey {
    let mut k = StepKey::new();
    k.definition = tag.into();
    k
}

/// Store `outputs` under `key` in `cache`: the entry id.
fn store(cache: &StepCache, key: &StepKey, outputs: &[PathBuf]) -> String {
    let portable: Vec<String> = outputs.iter().map(|o| o.display().to_string()).collect();
    cache
        .store(key, "r", "s", outputs, &portable, &Before::default())
        .unwrap()
        .unwrap()
}

/// A file `path` holding `text`, its directory made.
fn write(path: &Path, text: &[u8]) -> PathBuf {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    path.to_path_buf()
}

/// The names in directory `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn an_entry_another_state_stored_unsigned_is_neither_restored_nor_promised_where_signatures_are_required(
) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("steps");
    let ours = StepCache::with_trust(&root, Trust::strict(&dir.path().join("A/cache-own")));
    let theirs = StepCache::with_trust(&root, Trust::strict(&dir.path().join("B/cache-own")));
    let out = write(&dir.path().join("built/a.txt"), b"built by A");
    let id = store(&ours, &key("a"), &[out]);

    // State A stored it (its own record vouches for it): promised and restored.
    assert!(ours.holds_trusted(&id));
    let at_a = dir.path().join("A-work/a.txt");
    ours.restore(&id, std::slice::from_ref(&at_a)).unwrap();
    assert_eq!(std::fs::read(&at_a).unwrap(), b"built by A");

    // State B did not, and it is unsigned: no promise in the plan, and the run refuses it.
    assert!(
        !theirs.holds_trusted(&id),
        "the plan promised an untrusted entry"
    );
    let at_b = dir.path().join("B-work/a.txt");
    let e = theirs
        .restore(&id, std::slice::from_ref(&at_b))
        .unwrap_err()
        .with_causes();
    assert!(
        e.contains("is refused: it is not signed, and this state directory did not store it"),
        "{e}"
    );
    assert!(!at_b.exists(), "an untrusted entry was restored");
}

#[test]
fn an_entry_whose_entry_json_names_another_key_is_not_promised_even_by_a_cache_that_trusts_all() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("steps");
    let cache = StepCache::new(&root);
    let out = write(&dir.path().join("built/a.txt"), b"a");
    let id = store(&cache, &key("a"), &[out]);
    assert!(cache.holds_trusted(&id));
    // The same entry under the id of another key: its entry.json does not answer that key.
    let other = key("b").id();
    std::fs::rename(root.join(&id), root.join(&other)).unwrap();
    assert!(
        !cache.holds_trusted(&other),
        "an entry was promised for a key it does not match"
    );
}

/// A secret key (`NAME:BASE64(seed)`), as `kiln cache key generate` writes one.
const PIN_KEY: &str = "pins:AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=\n";

#[test]
fn signing_for_an_export_signs_an_entry_this_state_stored_and_leaves_another_states_unsigned() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("steps");
    let (state_a, state_b) = (dir.path().join("A"), dir.path().join("B"));
    let out = write(&dir.path().join("built/a.txt"), b"a");
    // Both stored without a signing key: unsigned, each recorded as its state's own.
    let own = store(
        &StepCache::with_trust(&root, Trust::strict(&state_a.join("cache-own"))),
        &key("a"),
        std::slice::from_ref(&out),
    );
    let other = store(
        &StepCache::with_trust(&root, Trust::strict(&state_b.join("cache-own"))),
        &key("b"),
        &[out],
    );
    let signatures = |id: &str| read_entry(&root.join(id)).unwrap().signatures;
    assert!(signatures(&own).is_empty() && signatures(&other).is_empty());

    let key_file = dir.path().join("pins.key");
    std::fs::write(&key_file, PIN_KEY).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    // State A, now with a signing key, signs what an export would carry.
    let cache = StepCache::with_trust(
        &root,
        Trust::signing(&state_a.join("cache-own"), &key_file).unwrap(),
    );
    cache.sign_trusted(&own).unwrap();
    cache.sign_trusted(&other).unwrap();

    let signed = signatures(&own);
    assert_eq!(signed.len(), 1, "{signed:?}");
    assert!(signed[0].starts_with("pins:"), "{signed:?}");
    assert!(
        signatures(&other).is_empty(),
        "an entry state A did not store was signed by it"
    );
}

#[test]
fn a_stored_entry_is_dated_when_it_was_stored() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("steps");
    let out = write(&dir.path().join("built/a.txt"), b"a");
    let before = now_unix();
    let id = store(&StepCache::new(&root), &key("a"), &[out]);
    let after = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let created = read_entry(&root.join(&id)).unwrap().created_unix;
    assert!(
        before > 1 && (before..=after).contains(&created),
        "created {created}, stored between {before} and {after}"
    );
}

#[test]
fn an_archive_changed_in_one_byte_or_grown_by_one_is_refused_by_its_hash_before_anything_is_laid_out(
) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("steps");
    let cache = StepCache::new(&root);
    let out = write(&dir.path().join("built/a.bin"), &[b'x'; 4096]);
    let id = store(&cache, &key("a"), &[out]);
    let tar = root.join(&id).join(ARCHIVE);
    let good = std::fs::read(&tar).unwrap();
    let mut flipped = good.clone();
    flipped[good.len() / 2] ^= 0xff;
    let mut grown = good.clone();
    grown.push(0);
    for (what, bytes) in [("one byte changed", flipped), ("one byte more", grown)] {
        std::fs::write(&tar, &bytes).unwrap();
        let work = dir.path().join("work");
        let at = work.join("a.bin");
        let e = cache
            .restore(&id, std::slice::from_ref(&at))
            .unwrap_err()
            .with_causes();
        assert!(e.contains("outputs.tar has sha256"), "{what}: {e}");
        assert!(!work.exists(), "{what}: the restore laid out {work:?}");
    }
    std::fs::write(&tar, &good).unwrap();
    let at = dir.path().join("work/a.bin");
    cache.restore(&id, std::slice::from_ref(&at)).unwrap();
    assert_eq!(std::fs::read(&at).unwrap(), [b'x'; 4096]);
}

#[test]
fn a_restore_of_an_entry_directory_without_its_entry_json_says_it_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("steps");
    let id = key("a").id();
    std::fs::create_dir_all(root.join(&id)).unwrap();
    let e = StepCache::new(&root)
        .restore(&id, &[dir.path().join("work/a.txt")])
        .unwrap_err()
        .with_causes();
    assert!(e.contains("its entry.json is missing"), "{e}");
}

#[test]
fn a_refused_restore_of_a_file_output_leaves_no_temp_file_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("steps");
    let cache = StepCache::new(&root);
    let out = write(&dir.path().join("built/a.txt"), b"a");
    let id = store(&cache, &key("a"), &[out]);
    // A directory where the entry has a file: unpacked beside it, then refused (a merge would
    // delete it).
    let work = dir.path().join("work");
    let at = work.join("a.txt");
    std::fs::create_dir_all(&at).unwrap();
    let e = cache
        .restore(&id, std::slice::from_ref(&at))
        .unwrap_err()
        .with_causes();
    assert!(
        e.contains("is a directory, where the cached entry has a file"),
        "{e}"
    );
    assert_eq!(names(&work), ["a.txt"], "the refused restore left its temp");
    assert!(at.is_dir());
}

#[test]
fn a_store_onto_an_entry_directory_that_holds_no_entry_is_an_error_not_a_success() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("steps");
    let k = key("a");
    // What is at the entry's place is no entry (no entry.json), and the rename cannot replace it.
    let stray = write(&root.join(k.id()).join("stray"), b"not kiln's");
    let out = write(&dir.path().join("built/a.txt"), b"a");
    let e = StepCache::new(&root)
        .store(&k, "r", "s", &[out], &["a".into()], &Before::default())
        .unwrap_err()
        .with_causes();
    assert!(e.contains("cannot store"), "{e}");
    assert_eq!(std::fs::read(&stray).unwrap(), b"not kiln's");
    assert_eq!(names(&root), [k.id()], "the staging directory was left");
}

#[test]
fn a_store_that_another_writer_beats_to_the_same_entry_is_a_success() {
    let dir = tempfile::tempdir().unwrap();
    // Ours takes a while (a big output, hashed twice and synced): the other writer's entry
    // appears once our staging directory is there, after our check that no entry is, before our
    // rename. A try where ours renamed first anyway (a starved thread) proves nothing: again,
    // with another key.
    let big = write(&dir.path().join("big/a.bin"), &vec![7u8; 8 << 20]);
    let small = write(&dir.path().join("small/a.txt"), b"a");
    for attempt in 0..10 {
        let root = dir.path().join(format!("steps-{attempt}"));
        let k = key(&format!("a-{attempt}"));
        // The other writer's entry, whole, ready to appear by rename (as a store or import does).
        let theirs = dir.path().join(format!("theirs-{attempt}"));
        store(&StepCache::new(&theirs), &k, std::slice::from_ref(&small));
        std::fs::create_dir_all(&root).unwrap();
        let other = {
            let (from, to, root) = (theirs.join(k.id()), root.join(k.id()), root.clone());
            std::thread::spawn(move || {
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
                while std::time::Instant::now() < deadline {
                    let staging = std::fs::read_dir(&root)
                        .unwrap()
                        .flatten()
                        .any(|e| e.file_name().to_string_lossy().starts_with(".staging-"));
                    if staging {
                        return std::fs::rename(&from, &to).is_ok();
                    }
                    std::thread::yield_now();
                }
                false
            })
        };
        let stored = StepCache::new(&root).store(
            &k,
            "r",
            "s",
            std::slice::from_ref(&big),
            &["a".into()],
            &Before::default(),
        );
        let beaten = other.join().unwrap();
        assert_eq!(stored.unwrap().unwrap(), k.id());
        assert_eq!(names(&root), [k.id()]);
        assert!(read_entry(&root.join(k.id())).is_some());
        if beaten {
            return;
        }
    }
    panic!("in 10 tries, the other writer's entry never appeared before our rename");
}

#[test]
fn an_import_whose_rename_fails_with_nothing_in_place_is_an_error_not_already_here() {
    let dir = tempfile::tempdir().unwrap();
    let out = write(&dir.path().join("built/a.txt"), b"a");
    let id = store(&StepCache::new(&dir.path().join("made")), &key("a"), &[out]);
    let staged = dir.path().join("import").join(&id);
    std::fs::create_dir_all(staged.parent().unwrap()).unwrap();
    std::fs::rename(dir.path().join("made").join(&id), &staged).unwrap();
    // A cache inside the staged entry: nothing is at the entry's place, yet the rename fails (a
    // directory cannot move into itself).
    let cache = StepCache::new(&staged.join("steps"));
    let e = cache.insert_staged(&staged).unwrap_err();
    assert!(e.contains("cannot store step entry"), "{e}");
    assert!(!cache.has(&id));
}

/// An accepted entry.json stating the largest size there is (a forged one, under the opt-out)
/// is refused by its archive's hash and size, not a panic on `size + 1`.
#[test]
fn an_entry_stating_the_largest_size_is_refused_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("steps");
    let cache = StepCache::new(&root);
    let out = write(&dir.path().join("built/a.txt"), b"a");
    let id = store(&cache, &key("a"), &[out]);
    let path = root.join(&id).join("entry.json");
    let mut entry: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    entry["size"] = serde_json::json!(u64::MAX);
    std::fs::write(&path, entry.to_string()).unwrap();
    let e = cache
        .restore(&id, &[dir.path().join("work/a.txt")])
        .unwrap_err()
        .with_causes();
    assert!(e.contains("the entry says"), "{e}");
    assert!(!dir.path().join("work").exists());
}
