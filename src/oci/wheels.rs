//! The compiled-wheel cache in a registry. Local layout (shared with src/cache):
//! `<state>/cache/wheels/<key>/entry.json` + the `.whl`, where `<key>` is the 64-hex sha256 of
//! the canonical cache key and entry.json is `{"key": {…}, "wheel": NAME, "sha256": HEX, "size": N}`.
//! Remote layout: one OCI artifact manifest per tag, one blob per wheel; each layer's annotations
//! carry the wheel's file name, its cache id and the canonical key. Pushing merges with what the
//! tag already holds (only remote entries that are well formed and whose blob the registry
//! holds at the declared size are carried over); pulling refuses a tag that is not a kiln wheel
//! cache, an entry whose id is not the sha256 of its key or whose size is over `WHEEL_CAP` or
//! the free disk space, and verifies every blob's sha256 and size before anything is cached.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{Reference, Registry};
use crate::error::{Error, Result};
use crate::hash::HashingWriter;

pub const ARTIFACT_TYPE: &str = "application/vnd.kiln.wheel-cache.v1";
pub const MEDIA_WHEEL: &str = "application/vnd.kiln.wheel.v1+zip";
const MEDIA_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// What a tag may hold: asking for every kind lets a pull say what the tag holds instead of
/// "no wheel cache" when it is an image or an index.
const ACCEPT_ANY_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json";
const MEDIA_EMPTY: &str = "application/vnd.oci.empty.v1+json";
const ANNOTATION_TITLE: &str = "org.opencontainers.image.title";
const ANNOTATION_ID: &str = "dev.kiln.cache.id";
const ANNOTATION_KEY: &str = "dev.kiln.cache.key";
const ANNOTATION_EXTRA: &str = "dev.kiln.cache.entry-extra";
/// The largest wheel a pull accepts (the biggest CUDA wheels are a few GiB).
pub const WHEEL_CAP: u64 = 8 << 30;

/// entry.json
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EntryFile {
    pub key: Value,
    pub wheel: String,
    pub sha256: String,
    pub size: u64,
    /// Fields this reader does not interpret (e.g. `created_unix`): carried through unchanged.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// One cached wheel on disk.
#[derive(Debug, Clone, PartialEq)]
pub struct WheelEntry {
    /// The directory name: sha256 of the canonical key.
    pub id: String,
    pub entry: EntryFile,
    /// The .whl file.
    pub path: PathBuf,
}

#[derive(Debug, Default)]
pub struct PushSummary {
    pub uploaded: usize,
    pub already_there: usize,
    /// Entries in the manifest after the push (this push's and earlier ones').
    pub total: usize,
}

#[derive(Debug, Default)]
pub struct PullSummary {
    pub fetched: usize,
    pub already_cached: usize,
    pub bytes: u64,
}

/// Every complete entry under `wheels_dir` (missing directory: none), sorted by id.
pub fn read_wheel_cache(wheels_dir: &Path) -> Result<Vec<WheelEntry>> {
    let listing = match fs::read_dir(wheels_dir) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(Error::io(
                format!("cannot list {}", wheels_dir.display()),
                e,
            ))
        }
    };
    let mut entries = Vec::new();
    for item in listing.flatten() {
        let id = item.file_name().to_string_lossy().into_owned();
        if !is_hex64(&id) {
            continue; // temp directories, locks
        }
        let json_path = item.path().join("entry.json");
        let Ok(text) = fs::read_to_string(&json_path) else {
            continue;
        };
        let entry: EntryFile = serde_json::from_str(&text).map_err(|e| {
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
        entries.push(WheelEntry { id, entry, path });
    }
    entries.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(entries)
}

/// Upload `entries` to `reference`: blobs the registry lacks, then one manifest holding these
/// entries and every entry the tag already had. Each wheel is hashed before it leaves: an entry
/// whose file no longer matches its entry.json is refused.
pub fn push_wheels(
    entries: &[WheelEntry],
    reference: &Reference,
    note: &dyn Fn(&str),
) -> Result<PushSummary> {
    let registry = Registry::new(reference);
    let mut layers = Vec::new();
    for layer in remote_layers(&registry)?.unwrap_or_default() {
        match verified_remote(&registry, &layer, reference) {
            Ok(()) => layers.push(layer),
            Err(why) => note(&format!("not carrying over a remote entry: {why}")),
        }
    }
    let mut summary = PushSummary::default();
    for e in entries {
        let (sha256, size) = hash_file(&e.path)?;
        if sha256 != e.entry.sha256 || size != e.entry.size {
            return Err(Error::other(
                format!(
                    "cache entry {} does not match its entry.json (sha256 {sha256}, {size} bytes)",
                    e.path.display()
                ),
                Some(format!(
                    "remove {} and build the wheel again; nothing was pushed",
                    e.path.parent().unwrap_or(&e.path).display()
                )),
            ));
        }
        let digest = format!("sha256:{sha256}");
        if registry.has_blob(&digest)? {
            summary.already_there += 1;
        } else {
            let file = File::open(&e.path)
                .map_err(|err| Error::io(format!("cannot open {}", e.path.display()), err))?;
            let body = BufReader::with_capacity(1 << 20, file);
            let body = crate::report::Counted::new(&e.entry.wheel, Some(size), body);
            registry.push_blob(&digest, size, body)?;
            summary.uploaded += 1;
            note(&format!(
                "pushed {} ({})",
                e.entry.wheel,
                crate::units::human_bytes(size as f64)
            ));
        }
        layers.retain(|l| {
            l.get("annotations")
                .and_then(|a| a.get(ANNOTATION_ID))
                .and_then(Value::as_str)
                != Some(&e.id)
        });
        layers.push(json!({
            "mediaType": MEDIA_WHEEL,
            "digest": digest,
            "size": size,
            "annotations": {
                ANNOTATION_TITLE: e.entry.wheel,
                ANNOTATION_ID: e.id,
                ANNOTATION_KEY: serde_json::to_string(&e.entry.key).expect("json"),
                ANNOTATION_EXTRA: serde_json::to_string(&e.entry.extra).expect("json"),
            },
        }));
    }
    layers.sort_by(|a, b| {
        a["annotations"][ANNOTATION_ID]
            .as_str()
            .cmp(&b["annotations"][ANNOTATION_ID].as_str())
    });
    let empty = b"{}";
    let empty_digest = format!("sha256:{}", crate::hash::sha256_bytes(empty));
    if !registry.has_blob(&empty_digest)? {
        registry.push_blob(&empty_digest, empty.len() as u64, &empty[..])?;
    }
    summary.total = layers.len();
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": {"mediaType": MEDIA_EMPTY, "digest": empty_digest, "size": empty.len()},
        "layers": layers,
        "annotations": {"dev.kiln.cache.entries": summary.total.to_string()},
    });
    registry.put_manifest(
        MEDIA_MANIFEST,
        &serde_json::to_vec(&manifest).expect("json"),
    )?;
    Ok(summary)
}

/// Fetch every entry `reference` holds into `wheels_dir`. Each blob streams into a temp
/// directory while it is hashed; only a blob whose sha256 and size match its manifest entry is
/// moved into place (with its entry.json). A mismatch fails the pull and leaves nothing behind.
pub fn pull_wheels(
    reference: &Reference,
    wheels_dir: &Path,
    note: &dyn Fn(&str),
) -> Result<PullSummary> {
    let registry = Registry::new(reference);
    let Some(layers) = remote_layers(&registry)? else {
        return Err(Error::other(
            format!("registry has no wheel cache at {reference}"),
            Some(
                "push one first with `kiln cache push`, or check the repository and tag"
                    .to_string(),
            ),
        ));
    };
    let mut summary = PullSummary::default();
    crate::fs::create_dir(wheels_dir)?;
    let remotes = layers
        .iter()
        .map(|layer| RemoteWheel::from_layer(layer, reference))
        .collect::<Result<Vec<_>>>()?;
    for remote in &remotes {
        let final_dir = wheels_dir.join(&remote.id);
        let local = read_wheel_cache(wheels_dir)?
            .into_iter()
            .find(|e| e.id == remote.id);
        if local.is_some_and(|e| e.entry.sha256 == remote.sha256 && e.path.is_file()) {
            summary.already_cached += 1;
            continue;
        }
        check_room(remote, wheels_dir, reference)?;
        let temp = wheels_dir.join(format!(".pull-{}-{}", remote.id, std::process::id()));
        let _ = fs::remove_dir_all(&temp);
        crate::fs::create_dir(&temp)?;
        let result = fetch_into(&registry, remote, &temp, reference);
        if let Err(e) = result {
            let _ = fs::remove_dir_all(&temp);
            return Err(e);
        }
        let _ = fs::remove_dir_all(&final_dir);
        fs::rename(&temp, &final_dir).map_err(|e| {
            Error::io(
                format!("cannot move {} into the cache", remote.entry.wheel),
                e,
            )
        })?;
        summary.fetched += 1;
        summary.bytes += remote.entry.size;
        note(&format!(
            "pulled {} ({})",
            remote.entry.wheel,
            crate::units::human_bytes(remote.entry.size as f64)
        ));
    }
    Ok(summary)
}

fn fetch_into(
    registry: &Registry,
    remote: &RemoteWheel,
    temp: &Path,
    reference: &Reference,
) -> Result<()> {
    let wheel_path = temp.join(&remote.entry.wheel);
    let file = File::create(&wheel_path)
        .map_err(|e| Error::io(format!("cannot create {}", wheel_path.display()), e))?;
    let mut writer = HashingWriter::new(std::io::BufWriter::with_capacity(1 << 20, file));
    let digest = format!("sha256:{}", remote.sha256);
    let body = registry
        .blob(&digest, remote.entry.size)?
        .take(remote.entry.size + 1);
    let mut body = crate::report::Counted::new(&remote.entry.wheel, Some(remote.entry.size), body);
    std::io::copy(&mut body, &mut writer)
        .map_err(|e| Error::io(format!("cannot download {}", remote.entry.wheel), e))?;
    let (out, sha256, size) = writer.finish();
    let file = out
        .into_inner()
        .map_err(|e| Error::io("cannot write the wheel", e.into_error()))?;
    file.sync_all()
        .map_err(|e| Error::io("cannot write the wheel", e))?;
    if sha256 != remote.sha256 || size != remote.entry.size {
        return Err(Error::other(
            format!(
                "blob {digest} ({}) from {reference} failed verification: got sha256:{sha256}, {size} bytes; expected {} bytes",
                remote.entry.wheel, remote.entry.size
            ),
            Some("the registry served corrupted or tampered content; nothing was added to the cache. Push the entry again from a trusted cache".to_string()),
        ));
    }
    let json = serde_json::to_vec_pretty(&remote.entry).expect("json");
    crate::fs::write_atomic(&temp.join("entry.json"), &json)
}

/// One wheel as a manifest lists it.
struct RemoteWheel {
    id: String,
    sha256: String,
    entry: EntryFile,
}

impl RemoteWheel {
    fn from_layer(layer: &Value, reference: &Reference) -> Result<RemoteWheel> {
        let bad = |why: &str| {
            Error::other(
                format!("the wheel cache at {reference} has a malformed entry: {why}"),
                Some("it was not written by `kiln cache push`; push the cache again".to_string()),
            )
        };
        let annotation = |name: &str| {
            layer
                .get("annotations")
                .and_then(|a| a.get(name))
                .and_then(Value::as_str)
        };
        let id = annotation(ANNOTATION_ID)
            .filter(|id| is_hex64(id))
            .ok_or_else(|| bad("no valid cache id"))?;
        let wheel = annotation(ANNOTATION_TITLE).ok_or_else(|| bad("no wheel file name"))?;
        check_wheel_name(wheel, &reference.to_string())?;
        let key: Value = annotation(ANNOTATION_KEY)
            .and_then(|k| serde_json::from_str(k).ok())
            .ok_or_else(|| bad("no cache key"))?;
        // The cache names an entry by the sha256 of its typed key in field order
        // (`WheelKey::id`); a parsed `Value` re-serializes with sorted keys. Either canonical
        // form of this key is its id; any other id is forged.
        let plain_id = crate::hash::sha256_bytes(&serde_json::to_vec(&key).expect("json"));
        let typed_id = serde_json::from_value::<crate::cache::wheels::WheelKey>(key.clone())
            .ok()
            .map(|k| k.id());
        if id != plain_id && typed_id.as_deref() != Some(id) {
            let key_id = typed_id.unwrap_or(plain_id);
            return Err(bad(&format!(
                "entry {id} is not the sha256 of its key (that is {key_id})"
            )));
        }
        let mut extra: BTreeMap<String, Value> = annotation(ANNOTATION_EXTRA)
            .and_then(|x| serde_json::from_str(x).ok())
            .unwrap_or_default();
        extra.retain(|k, _| !["key", "wheel", "sha256", "size"].contains(&k.as_str()));
        let digest = layer
            .get("digest")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let sha256 = digest
            .strip_prefix("sha256:")
            .filter(|h| is_hex64(h))
            .ok_or_else(|| bad("a digest that is not sha256"))?;
        let size = layer
            .get("size")
            .and_then(Value::as_u64)
            .ok_or_else(|| bad("no size"))?;
        Ok(RemoteWheel {
            id: id.to_string(),
            sha256: sha256.to_string(),
            entry: EntryFile {
                key,
                wheel: wheel.to_string(),
                sha256: sha256.to_string(),
                size,
                extra,
            },
        })
    }
}

/// The layers of the tag's kiln wheel-cache manifest; None when the tag does not exist. A tag
/// holding anything else (an image, an image index) is an error: a pull would find "0 wheels"
/// in it and a push would replace it.
fn remote_layers(registry: &Registry) -> Result<Option<Vec<Value>>> {
    let Some((content_type, bytes)) = registry.manifest(ACCEPT_ANY_MANIFEST)? else {
        return Ok(None);
    };
    let reference = registry.reference();
    let not_ours = |what: String| {
        Error::other(
            format!("{reference} is not a kiln wheel cache: {what}"),
            Some("name a tag that `kiln cache push` wrote; nothing was changed".to_string()),
        )
    };
    let manifest: Value = serde_json::from_slice(&bytes)
        .map_err(|e| not_ours(format!("its manifest is not JSON ({e})")))?;
    let media_type = manifest
        .get("mediaType")
        .and_then(Value::as_str)
        .unwrap_or(content_type.as_str());
    if media_type != MEDIA_MANIFEST {
        return Err(not_ours(format!("it holds a `{media_type}`")));
    }
    let artifact = manifest.get("artifactType").and_then(Value::as_str);
    if artifact != Some(ARTIFACT_TYPE) {
        return Err(not_ours(format!(
            "its artifact type is {}",
            artifact.map_or("missing".to_string(), |a| format!("`{a}`"))
        )));
    }
    let layers = manifest
        .get("layers")
        .and_then(Value::as_array)
        .ok_or_else(|| not_ours("its manifest has no layer list".to_string()))?;
    Ok(Some(layers.clone()))
}

/// A remote entry a push may carry over: well formed, and its blob is in the registry at the
/// size the manifest declares (the registry addresses blobs by their sha256).
fn verified_remote(
    registry: &Registry,
    layer: &Value,
    reference: &Reference,
) -> Result<(), String> {
    let remote = RemoteWheel::from_layer(layer, reference).map_err(|e| e.to_string())?;
    let digest = format!("sha256:{}", remote.sha256);
    match registry.blob_size(&digest).map_err(|e| e.to_string())? {
        Some(size) if size == remote.entry.size => Ok(()),
        Some(size) => Err(format!(
            "{} is {size} bytes in the registry, the manifest says {}",
            remote.entry.wheel, remote.entry.size
        )),
        None => Err(format!(
            "{} has no blob in the registry",
            remote.entry.wheel
        )),
    }
}

/// Refuse, before writing a byte, an entry over `WHEEL_CAP` or over the free disk space.
fn check_room(remote: &RemoteWheel, wheels_dir: &Path, reference: &Reference) -> Result<()> {
    let size = remote.entry.size;
    let human = crate::units::format_size;
    if size > WHEEL_CAP {
        return Err(Error::other(
            format!(
                "the wheel cache at {reference} declares {} as {}, over kiln's {} limit for a wheel",
                remote.entry.wheel,
                human(size),
                human(WHEEL_CAP)
            ),
            Some("the manifest is corrupt or hostile; nothing was written".to_string()),
        ));
    }
    if let Some(free) = crate::host::system::free_disk_bytes(wheels_dir) {
        if size > free {
            return Err(Error::other(
                format!(
                    "{} from {reference} is {}, but {} has {} free",
                    remote.entry.wheel,
                    human(size),
                    wheels_dir.display(),
                    human(free)
                ),
                Some(
                    "free some space (`kiln cache gc`) and pull again; nothing was written"
                        .to_string(),
                ),
            ));
        }
    }
    Ok(())
}

fn hash_file(path: &Path) -> Result<(String, u64)> {
    let file =
        File::open(path).map_err(|e| Error::io(format!("cannot open {}", path.display()), e))?;
    crate::hash::sha256_reader(BufReader::with_capacity(1 << 20, file))
        .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))
}

fn is_hex64(text: &str) -> bool {
    text.len() == 64
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A wheel file name is a plain `*.whl` name: never a path.
fn check_wheel_name(name: &str, origin: &str) -> Result<()> {
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && !name.contains(['/', '\\', '\0'])
        && name.ends_with(".whl");
    if plain {
        Ok(())
    } else {
        Err(Error::other(
            format!("refusing wheel name `{name}` from {origin}: not a plain .whl file name"),
            Some("the cache entry is corrupt or hostile; nothing was written".to_string()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::wheels::WheelKey;

    /// A layer as `push_wheels` writes it for a real cache entry.
    fn layer_of(key: &WheelKey) -> Value {
        json!({
            "mediaType": MEDIA_WHEEL,
            "digest": format!("sha256:{}", "a".repeat(64)),
            "size": 11,
            "annotations": {
                ANNOTATION_TITLE: "demo-1.0-py3-none-any.whl",
                ANNOTATION_ID: key.id(),
                ANNOTATION_KEY: serde_json::to_string(&serde_json::to_value(key).unwrap()).unwrap(),
                ANNOTATION_EXTRA: "{}",
            },
        })
    }

    #[test]
    fn a_real_entry_pushed_from_the_cache_passes_the_id_check() {
        // The key's fields are not in alphabetical order: hashing a parsed `Value` (sorted keys)
        // would refuse every entry a real cache pushed (the fleet test found it).
        let key = WheelKey {
            package: "demo".into(),
            version: "1.0".into(),
            source_sha256: "b".repeat(64),
            python_tag: "cp311".into(),
            torch: None,
            cuda: None,
            arch_list: None,
            env: BTreeMap::new(),
        };
        let reference = Reference::parse("127.0.0.1:5000/kiln/wheels:cache").unwrap();
        let remote = RemoteWheel::from_layer(&layer_of(&key), &reference);
        assert!(remote.is_ok(), "{:?}", remote.err());
        let mut forged = layer_of(&key);
        forged["annotations"][ANNOTATION_ID] = json!("c".repeat(64));
        let Err(err) = RemoteWheel::from_layer(&forged, &reference) else {
            panic!("a forged id passed");
        };
        assert!(
            err.to_string().contains("is not the sha256 of its key"),
            "{err}"
        );
    }
}
