//! The compiled-wheel cache: every wheel kiln builds from source, keyed by everything that shapes
//! the binary (package, version, source sha256, python tag, torch, CUDA, arch list, build env).
//!
//! This module is the one owner of the entry format: the layout `<cache>/wheels/<id>/entry.json`
//! and the `.whl`, where `<id>` is [`key_id`] of the key, and entry.json is an [`Entry`]. An entry
//! directory appears by rename from a `.staging-*` directory, so it is whole or absent.
//! `cache::remote` carries entries to and from a registry; `cache::archive` to a tar archive.
//!
//! A wheel built from a pinned `name==version` also records the package index its sdist came from:
//! with that, [`WheelCache::lookup_pinned`] finds the wheel from name, version, index and the local
//! build facts alone, so a cache hit never contacts the index (the sdist sha256 recorded at the
//! first build stands for the download; a later download that disagrees is reported).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::hash::{sha256_bytes, sha256_reader};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WheelKey {
    pub package: String,
    pub version: String,
    pub source_sha256: String,
    pub python_tag: String,
    pub torch: Option<String>,
    pub cuda: Option<String>,
    pub arch_list: Option<String>,
    /// Build environment variables that change the binary (parallelism knobs excluded).
    pub env: BTreeMap<String, String>,
}

impl WheelKey {
    /// The entry id: [`key_id`] of this key.
    pub(crate) fn id(&self) -> String {
        key_id(self)
    }
}

/// The entry id of a key: the sha256 of its canonical JSON (a typed [`WheelKey`] in field order;
/// a key carried as a JSON value with its keys sorted).
pub(crate) fn key_id(key: &impl Serialize) -> String {
    sha256_bytes(&serde_json::to_vec(key).expect("keys serialize"))
}

/// Whether `id` names `key`: either canonical form of the key (typed, or as JSON) hashes to it.
/// Entries pushed by earlier kilns, and keys this kiln cannot type, are named by the JSON form.
pub(crate) fn names_key(id: &str, key: &Value) -> std::result::Result<(), String> {
    let plain = key_id(key);
    let typed = serde_json::from_value::<WheelKey>(key.clone())
        .ok()
        .map(|k| k.id());
    if id == plain || typed.as_deref() == Some(id) {
        Ok(())
    } else {
        Err(typed.unwrap_or(plain))
    }
}

/// entry.json: one cached wheel. `K` is its key: the typed [`WheelKey`] where kiln builds and
/// looks up wheels, a JSON value where it only carries entries (`kiln cache push|pull`), so that
/// a key this kiln cannot type travels unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry<K = WheelKey> {
    pub key: K,
    /// File name of the wheel inside the entry directory.
    pub wheel: String,
    pub sha256: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_unix: Option<u64>,
    /// Where the sdist came from (`pinned` builds): the index arguments, or `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<String>,
    /// `NAME:BASE64` ed25519 signatures of the entry ([`super::trust`]), as step entries'.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signatures: Vec<String>,
    /// Fields this kiln does not interpret: carried through unchanged.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl<K> super::trust::Signed for Entry<K> {
    fn own_name(id: &str) -> String {
        format!("wheel-{id}")
    }

    /// The key id, the wheel's file name, sha256 and size, and the index its source came from.
    fn message(&self, id: &str) -> Vec<u8> {
        format!(
            "kiln-wheel-entry-v1\nkey {id}\nwheel {}\nsha256 {} {}\nindex {}\n",
            self.wheel,
            self.sha256,
            self.size,
            self.index.as_deref().unwrap_or("-")
        )
        .into_bytes()
    }

    fn signatures(&self) -> &[String] {
        &self.signatures
    }

    fn signatures_mut(&mut self) -> &mut Vec<String> {
        &mut self.signatures
    }
}

/// One cached wheel on disk as it is carried: its id (the directory name), its entry.json with
/// the key as JSON, and the `.whl` file.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredWheel {
    pub id: String,
    pub entry: Entry<Value>,
    pub path: PathBuf,
}

/// How an entry records its source's index: without URL credentials (entry.json travels with
/// `kiln cache export` and `push`); the host and path say which index it was.
fn stored_index(index: &str) -> String {
    crate::redact::mask_url_userinfo(index)
}

/// Environment variables that only change how fast a build runs, not what it produces.
pub(crate) const PARALLELISM_VARS: &[&str] = &[
    "MAX_JOBS",
    "NVCC_THREADS",
    "CMAKE_BUILD_PARALLEL_LEVEL",
    "FLASHINFER_NVCC_THREADS",
];

/// The compiled-wheel cache under one directory (`StatePaths::wheels`).
pub struct WheelCache {
    pub(crate) root: PathBuf,
    /// Whom it trusts ([`super::trust`], as the step cache): checked on lookup, import and
    /// pull; signing on insert, export and push. `None`: listing and gc, which trust nothing.
    trust: Option<super::trust::Trust>,
}

impl WheelCache {
    /// The cache rooted at `root` (`StatePaths::wheels`).
    pub fn new(root: &Path) -> Self {
        WheelCache {
            root: root.to_path_buf(),
            trust: None,
        }
    }

    /// The cache rooted at `root`, with `trust`.
    pub(crate) fn with_trust(root: &Path, trust: super::trust::Trust) -> Self {
        WheelCache {
            root: root.to_path_buf(),
            trust: Some(trust),
        }
    }

    /// Whether entry `id` may be used here ([`super::trust::Trust::check`]), with the way to
    /// trust it on refusal; always without a trust.
    pub(crate) fn trusted<K>(&self, id: &str, entry: &Entry<K>) -> std::result::Result<(), String> {
        self.trust.as_ref().map_or(Ok(()), |t| {
            t.check(id, entry).map_err(|why| {
                format!(
                    "the cached wheel {} ({}) is refused: {why} (hint: {})",
                    &id[..12.min(id.len())],
                    super::printable(&entry.wheel),
                    super::trust::hint()
                )
            })
        })
    }

    /// Sign entry `id` with the signing key, if one is set and this kiln trusts the entry (one
    /// it does not trust is carried unsigned, never laundered by a signature): what export and
    /// push do before an entry leaves.
    pub(crate) fn sign_trusted(&self, id: &str) -> Result<()> {
        match &self.trust {
            Some(trust) => trust.sign_stored(id, &self.entry_dir(id), read_entry, write_entry),
            None => Ok(()),
        }
    }

    pub(crate) fn entry_dir(&self, id: &str) -> PathBuf {
        self.root.join(id)
    }

    /// A fresh, locked directory an entry `id` is written into before it is renamed into place
    /// ([`super::staging`]: unique across hosts, swept once its writer is gone).
    pub(crate) fn staging_dir(&self, id: &str) -> Result<super::staging::Staging> {
        super::staging::create(&self.root, id)
    }

    /// The cached wheel for `key`, verified against its recorded sha256, when this kiln trusts
    /// it (stored by this state, or signed by a trusted key); one it does not trust is a miss,
    /// said in `log` (the wheel is built, and its entry replaced).
    pub(crate) fn lookup(
        &self,
        key: &WheelKey,
        log: &mut dyn std::io::Write,
    ) -> Result<Option<(Entry, PathBuf)>> {
        let dir = self.entry_dir(&key.id());
        if std::fs::symlink_metadata(&dir).is_err() {
            return Ok(None);
        }
        let refused = |why: String| {
            let (message, hint) = match why.split_once(" (hint: ") {
                Some((m, h)) => (m.to_string(), h.trim_end_matches(')').to_string()),
                None => (
                    why,
                    format!(
                        "remove {} (or run `kiln cache gc`), then run again",
                        dir.display()
                    ),
                ),
            };
            Error::other(
                format!("the cached wheel {} is refused: {message}", &key.id()[..12]),
                Some(hint),
            )
        };
        let entry = read_entry_checked(&dir).map_err(refused)?;
        let wheel = dir.join(&entry.wheel);
        let (sha, _) = read_wheel(&wheel, entry.size).map_err(|e| refused(e.to_string()))?;
        if sha != entry.sha256 || entry.key != *key {
            return Err(Error::other(
                format!(
                    "the cached wheel {} is corrupt (sha256 {sha}, recorded {})",
                    wheel.display(),
                    entry.sha256
                ),
                Some("run `kiln cache gc` to drop corrupt entries, then run again".into()),
            ));
        }
        if let Err(why) = self.trusted(&key.id(), &entry) {
            let _ = writeln!(log, "{why}; building it instead");
            return Ok(None);
        }
        Ok(Some((entry, wheel)))
    }

    /// The wheel for a pinned build without its source: an entry from `index` whose key equals
    /// `key` in everything but `source_sha256` (the sdist recorded when it was built).
    pub(crate) fn lookup_pinned(
        &self,
        key: &WheelKey,
        index: &str,
        log: &mut dyn std::io::Write,
    ) -> Result<Option<(Entry, PathBuf)>> {
        let found = self.list().into_iter().map(|(_, e)| e).find(|e| {
            e.index.as_deref() == Some(index)
                && WheelKey {
                    source_sha256: key.source_sha256.clone(),
                    ..e.key.clone()
                } == *key
        });
        match found {
            Some(e) => self.lookup(&e.key, log),
            None => Ok(None),
        }
    }

    /// The sdist sha256 recorded for `package==version` from `index`, if any wheel has one.
    pub(crate) fn recorded_source(
        &self,
        package: &str,
        version: &str,
        index: &str,
    ) -> Option<String> {
        self.list()
            .into_iter()
            .map(|(_, e)| e)
            .find(|e| {
                e.key.package == package
                    && e.key.version == version
                    && e.index.as_deref() == Some(stored_index(index).as_str())
            })
            .map(|e| e.key.source_sha256)
    }

    /// Note on an entry (made before indexes were recorded) which index its source came from:
    /// only on one this kiln trusts, signed again (the index is signed) and recorded as its own.
    pub(crate) fn record_index(&self, key: &WheelKey, index: &str) -> Result<()> {
        let id = key.id();
        let dir = self.entry_dir(&id);
        match read_entry(&dir) {
            Some(mut e)
                if e.index.is_none() && self.trust.as_ref().is_none_or(|t| t.vouches(&id, &e)) =>
            {
                e.index = Some(stored_index(index));
                if let Some(trust) = &self.trust {
                    trust.sign(&id, &mut e);
                }
                write_entry(&dir, &e)?;
                match &self.trust {
                    Some(trust) => trust.record_own(&id, &e),
                    None => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }

    /// Store `wheel` under `key`, built from a source downloaded from `index` (`None` for a
    /// local source tree); returns the cached path.
    pub(crate) fn insert(
        &self,
        key: &WheelKey,
        wheel: &Path,
        index: Option<&str>,
    ) -> Result<PathBuf> {
        let name = wheel
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| {
                Error::other(format!("{} is not a wheel file", wheel.display()), None)
            })?;
        let f = std::fs::File::open(wheel)
            .map_err(|e| Error::io(format!("cannot read {}", wheel.display()), e))?;
        let (sha256, size) = sha256_reader(f)
            .map_err(|e| Error::io(format!("cannot read {}", wheel.display()), e))?;
        let entry = Entry {
            key: key.clone(),
            wheel: name.clone(),
            sha256,
            size,
            created_unix: Some(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
            ),
            index: index.map(stored_index),
            signatures: Vec::new(),
            extra: BTreeMap::new(),
        };
        let mut entry = entry;
        if let Some(trust) = &self.trust {
            trust.sign(&key.id(), &mut entry);
        }
        let stored = self.insert_entry(&entry, wheel)?;
        if let Some(trust) = &self.trust {
            trust.record_own(&key.id(), &entry)?;
        }
        Ok(stored)
    }

    /// Store a wheel whose entry is already known (an import, or this kiln's own build through
    /// [`Self::insert`]); the sha256 must match. An entry of the key that this kiln trusts is
    /// kept; one it does not trust (a lookup refused it) is replaced by this one, in one rename
    /// after the old one is moved aside.
    pub(crate) fn insert_entry(&self, entry: &Entry, wheel: &Path) -> Result<PathBuf> {
        let id = entry.key.id();
        let dir = self.entry_dir(&id);
        let replace = match read_entry(&dir) {
            Some(there) if self.trusted(&id, &there).is_ok() => {
                return Ok(dir.join(&there.wheel));
            }
            Some(_) => true,
            None => false,
        };
        check_wheel_name(&entry.wheel, &wheel.display().to_string())?;
        let staging = self.staging_dir(&id)?;
        let result = (|| {
            let target = staging.join(&entry.wheel);
            std::fs::File::open(wheel)
                .and_then(|mut from| {
                    let mut to = super::perms::create_file(&target)?;
                    std::io::copy(&mut from, &mut to)?;
                    crate::fs::sync_file(&to)
                })
                .map_err(|e| Error::io(format!("cannot copy {}", wheel.display()), e))?;
            let f = std::fs::File::open(&target)
                .map_err(|e| Error::io("cannot read the copied wheel", e))?;
            let (sha, _) =
                sha256_reader(f).map_err(|e| Error::io("cannot read the copied wheel", e))?;
            if sha != entry.sha256 {
                return Err(Error::ChecksumMismatch {
                    url: wheel.display().to_string(),
                    expected: entry.sha256.clone(),
                    actual: sha,
                });
            }
            write_entry(&staging, entry)?;
            // The refused entry goes aside under a staging name (swept by the next insert
            // or gc once no process holds it), then this one is renamed in.
            let aside = if replace {
                let aside = self.staging_dir(&format!("{id}-replaced"))?;
                crate::fs::rename(&dir, &aside)
                    .map_err(|e| Error::io(format!("cannot replace {}", dir.display()), e))?;
                Some(aside)
            } else {
                None
            };
            let renamed = std::fs::rename(&staging, &dir)
                .map_err(|e| Error::io(format!("cannot store {}", dir.display()), e));
            if let Some(aside) = aside {
                let _ = std::fs::remove_dir_all(&aside);
            }
            renamed
        })();
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&staging);
        }
        result.map(|()| dir.join(&entry.wheel))
    }

    /// Every complete entry, sorted by package and version.
    pub(crate) fn list(&self) -> Vec<(String, Entry)> {
        let mut out: Vec<(String, Entry)> = std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .filter_map(|e| {
                Some((
                    e.file_name().to_string_lossy().into_owned(),
                    read_entry(&e.path())?,
                ))
            })
            .collect();
        out.sort_by(|a, b| {
            (&a.1.key.package, &a.1.key.version, &a.0).cmp(&(
                &b.1.key.package,
                &b.1.key.version,
                &b.0,
            ))
        });
        out
    }

    pub(crate) fn wheel_path(&self, id: &str, entry: &Entry) -> PathBuf {
        self.entry_dir(id).join(&entry.wheel)
    }

    /// Remove staging leftovers, unreadable or corrupt entries, and entries older than `max_age_secs`.
    /// Returns the removed directories with the reason.
    pub(crate) fn gc(&self, max_age_secs: Option<u64>) -> Result<Vec<(String, String)>> {
        super::perms::check_tree(&self.root)?;
        super::gc::gc(&self.root, max_age_secs, |path, name| {
            let entry = read_entry_checked(path)?;
            let sha = read_wheel(&path.join(&entry.wheel), entry.size)
                .ok()
                .map(|(s, _)| s);
            if sha.as_deref() != Some(entry.sha256.as_str()) || entry.key.id() != name {
                return Err("wheel missing or corrupt".into());
            }
            Ok(entry.created_unix.unwrap_or(0))
        })
    }

    /// Every complete entry as it is carried (key as JSON; a missing cache: none), sorted by
    /// id. An entry.json that does not parse is an error here (`list` skips it).
    pub fn stored(&self) -> Result<Vec<StoredWheel>> {
        let listing = match std::fs::read_dir(&self.root) {
            Ok(l) => l,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(format!("cannot list {}", self.root.display()), e)),
        };
        let mut entries = Vec::new();
        for item in listing.flatten() {
            let id = item.file_name().to_string_lossy().into_owned();
            if !is_hex64(&id) {
                continue; // staging directories, locks
            }
            let json_path = item.path().join("entry.json");
            let Ok(text) = super::read_regular(&json_path, ENTRY_JSON_CAP) else {
                continue;
            };
            let entry: Entry<Value> = serde_json::from_slice(&text).map_err(|e| {
                Error::other(
                    format!("cache entry {} is unreadable: {e}", json_path.display()),
                    Some(format!(
                        "remove {} and build the wheel again",
                        item.path().display()
                    )),
                )
            })?;
            check_wheel_name(&entry.wheel, &json_path.display().to_string())?;
            let path = item.path().join(&entry.wheel);
            entries.push(StoredWheel { id, entry, path });
        }
        entries.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(entries)
    }
}

/// The largest wheel entry.json read.
const ENTRY_JSON_CAP: u64 = 1 << 20;

fn read_entry(dir: &Path) -> Option<Entry> {
    read_entry_checked(dir).ok()
}

/// The entry.json of `dir`: a regular file of at most [`ENTRY_JSON_CAP`] bytes naming a plain
/// `.whl` file, in a directory that, as the one above it, no other user can change
/// ([`super::perms`]). Why not.
fn read_entry_checked(dir: &Path) -> std::result::Result<Entry, String> {
    if let Some(above) = dir.parent() {
        super::perms::check_dir(above)?;
    }
    super::perms::check_dir(dir)?;
    let bytes =
        super::read_regular(&dir.join("entry.json"), ENTRY_JSON_CAP).map_err(|e| {
            match e.kind() {
                std::io::ErrorKind::NotFound => "its entry.json is missing".to_string(),
                _ => format!("its entry.json is refused: {e}"),
            }
        })?;
    let entry: Entry =
        serde_json::from_slice(&bytes).map_err(|e| format!("its entry.json does not read: {e}"))?;
    check_wheel_name(&entry.wheel, &dir.display().to_string()).map_err(|e| e.to_string())?;
    Ok(entry)
}

/// The sha256 and size of wheel file `path`: a regular file ([`super::open_regular`]: never a
/// FIFO, a device or a link) read no further than one byte past the `size` its entry states.
pub(crate) fn read_wheel(path: &Path, size: u64) -> std::io::Result<(String, u64)> {
    use std::io::Read;
    let (f, _) = super::open_regular(path)?;
    sha256_reader(std::io::BufReader::with_capacity(
        1 << 20,
        f.take(size.saturating_add(1)),
    ))
}

/// Write an entry's entry.json into its directory (or its staging directory).
pub(crate) fn write_entry<K: Serialize>(dir: &Path, entry: &Entry<K>) -> Result<()> {
    super::perms::write_file(
        &dir.join("entry.json"),
        &serde_json::to_vec_pretty(entry).expect("entries serialize"),
        super::perms::FILE_MODE,
    )
}

pub(crate) use super::is_hex64;

/// A wheel file name is a plain `*.whl` name: never a path, no control characters (it is
/// printed).
pub(crate) fn check_wheel_name(name: &str, origin: &str) -> Result<()> {
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && !name.contains(['/', '\\', '\0'])
        && !name.chars().any(char::is_control)
        && name.ends_with(".whl");
    if plain {
        Ok(())
    } else {
        Err(Error::other(
            format!(
                "refusing wheel name `{}` from {origin}: not a plain .whl file name",
                super::printable(name)
            ),
            Some("the cache entry is corrupt or hostile; nothing was written".to_string()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_records_its_index_without_credentials() {
        let dir = tempfile::tempdir().unwrap();
        let cache = WheelCache::new(&dir.path().join("wheels"));
        let wheel = dir.path().join("demo-1.0-py3-none-any.whl");
        std::fs::write(&wheel, "not really a zip").unwrap();
        let key = demo_key();
        let index = "--index-url https://ci:index-pass-77@pypi.example/simple";
        cache.insert(&key, &wheel, Some(index)).unwrap();
        let json = std::fs::read_to_string(cache.entry_dir(&key.id()).join("entry.json")).unwrap();
        assert!(!json.contains("index-pass-77"), "{json}");
        assert!(json.contains("https://***@pypi.example/simple"), "{json}");
        assert_eq!(
            cache.recorded_source("demo", "1.0", index),
            Some("0".repeat(64)),
            "the same index (its credentials aside) finds the entry"
        );
    }

    fn demo_key() -> WheelKey {
        WheelKey {
            package: "demo".into(),
            version: "1.0".into(),
            source_sha256: "0".repeat(64),
            python_tag: "cp311".into(),
            torch: None,
            cuda: None,
            arch_list: None,
            env: BTreeMap::new(),
        }
    }

    /// An entry.json whose wheel name is a path (`../`, absolute): a lookup read (and would
    /// install) a file outside the entry, and one naming `/dev/zero` never finished.
    #[test]
    fn a_lookup_never_reads_a_wheel_outside_its_entry() {
        let dir = tempfile::tempdir().unwrap();
        let cache = WheelCache::new(&dir.path().join("wheels"));
        let key = demo_key();
        let outside = dir.path().join("wheels").join("planted.whl");
        std::fs::create_dir_all(outside.parent().unwrap()).unwrap();
        std::fs::write(&outside, b"not the cached wheel").unwrap();
        let entry_dir = cache.entry_dir(&key.id());
        std::fs::create_dir_all(&entry_dir).unwrap();
        let entry = Entry {
            key: key.clone(),
            wheel: "../planted.whl".into(),
            sha256: sha256_bytes(b"not the cached wheel"),
            size: 20,
            created_unix: None,
            index: None,
            signatures: Vec::new(),
            extra: BTreeMap::new(),
        };
        std::fs::write(
            entry_dir.join("entry.json"),
            serde_json::to_vec(&entry).unwrap(),
        )
        .unwrap();
        let found = cache.lookup(&key, &mut std::io::sink());
        assert!(
            !matches!(found, Ok(Some(_))),
            "a wheel outside its entry was used: {found:?}"
        );
    }

    /// A wheel name is printed (`pulled NAME`, refusals): one with control characters set the
    /// terminal's title from a registry's annotation.
    #[test]
    fn a_wheel_name_with_control_characters_is_refused() {
        assert!(check_wheel_name("demo-1.0-py3-none-any.whl", "test").is_ok());
        let hostile = check_wheel_name("demo\u{1b}]0;pwned\u{7}-1.0-py3-none-any.whl", "test");
        assert!(hostile.is_err());
    }

    /// Another state's unsigned wheel on a shared `KILN_CACHE_DIR` is a miss, said in the log;
    /// this state's own build then replaces it and is found.
    #[test]
    fn an_untrusted_wheel_is_a_miss_and_this_states_build_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("wheels");
        let key = demo_key();
        let theirs = dir.path().join("theirs.whl");
        std::fs::write(&theirs, b"their build").unwrap();
        WheelCache::new(&root).insert(&key, &theirs, None).unwrap();
        let cache = WheelCache::with_trust(
            &root,
            super::super::trust::Trust::strict(&dir.path().join("state/cache-own")),
        );
        let mut log = Vec::new();
        assert!(cache.lookup(&key, &mut log).unwrap().is_none());
        let log = String::from_utf8(log).unwrap();
        assert!(log.contains("is refused: it is not signed"), "{log}");
        let ours = dir.path().join("build").join("demo-1.0-py3-none-any.whl");
        std::fs::create_dir_all(ours.parent().unwrap()).unwrap();
        std::fs::write(&ours, b"our build").unwrap();
        let stored = cache.insert(&key, &ours, None).unwrap();
        assert_eq!(std::fs::read(&stored).unwrap(), b"our build");
        let (_, found) = cache.lookup(&key, &mut std::io::sink()).unwrap().unwrap();
        assert_eq!(std::fs::read(found).unwrap(), b"our build");
    }
}
