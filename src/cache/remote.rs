//! The compiled-wheel cache in a registry, through oci's transport ([`Registry`]). One OCI
//! artifact manifest per tag, one blob per wheel; each layer's annotations carry the wheel's file
//! name, its cache id, the key and the rest of its entry.json (the entry format is
//! [`super::wheels`]'s). Pushing merges with what the tag already holds (only remote entries that
//! are well formed and whose blob the registry holds at the declared size are carried over);
//! pulling refuses a tag that is not a kiln wheel cache, an entry whose id does not name its key
//! or whose size is over `WHEEL_CAP` or the free disk space, and verifies every blob's sha256 and
//! size before anything is cached.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufReader, Read, Write};
use std::path::Path;

use serde_json::{json, Value};

use super::remote_steps::{self, is_step_layer, layer_id};
use super::steps::StepCache;
use super::wheels::{
    check_wheel_name, is_hex64, names_key, write_entry, Entry, StoredWheel, WheelCache, WheelKey,
};
use super::{ANNOTATION_ID, ANNOTATION_TITLE};
use crate::error::{Error, Result};
use crate::hash::HashingWriter;
use crate::oci::{Reference, Registry};

/// The variable naming the remote cache a build asks on a miss (an OCI reference).
pub(crate) const REMOTE_CACHE_VAR: &str = "KILN_REMOTE_CACHE";

pub(crate) const ARTIFACT_TYPE: &str = "application/vnd.kiln.wheel-cache.v1";
pub(crate) const MEDIA_WHEEL: &str = "application/vnd.kiln.wheel.v1+zip";
const MEDIA_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// What a tag may hold: asking for every kind lets a pull say what the tag holds instead of
/// "no wheel cache" when it is an image or an index.
const ACCEPT_ANY_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json";
const MEDIA_EMPTY: &str = "application/vnd.oci.empty.v1+json";
const ANNOTATION_KEY: &str = "dev.kiln.cache.key";
const ANNOTATION_EXTRA: &str = "dev.kiln.cache.entry-extra";
/// The largest wheel a pull accepts (the biggest CUDA wheels are a few GiB).
pub(crate) const WHEEL_CAP: u64 = 8 << 30;

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

impl WheelCache {
    /// Upload every entry of this cache to `reference` ([`push_entries`]).
    pub fn push(&self, reference: &Reference, note: &dyn Fn(&str)) -> Result<PushSummary> {
        super::perms::check_tree(&self.root)?;
        for (id, _) in self.list() {
            self.sign_trusted(&id)?;
        }
        push_entries(&self.stored()?, None, reference, note).map(|p| p.wheels)
    }

    /// Fetch every entry `reference` holds into this cache. Each blob streams into a staging
    /// directory while it is hashed; only a blob whose sha256 and size match its manifest entry
    /// is moved into place (with its entry.json). A mismatch fails the pull and leaves nothing
    /// behind.
    pub fn pull(&self, reference: &Reference, note: &dyn Fn(&str)) -> Result<PullSummary> {
        pull_into(self, reference, note)
    }

    /// A build's miss: pull the remote cache `remote` (the value of [`REMOTE_CACHE_VAR`]) into
    /// this one and look `key` up again. An unreachable remote is logged, and the miss stands.
    pub(crate) fn lookup_remote(
        &self,
        remote: &str,
        key: &WheelKey,
        log: &mut dyn Write,
    ) -> Result<Option<(Entry, std::path::PathBuf)>> {
        let _ = writeln!(log, "wheel cache miss: asking the remote cache {remote}");
        let reference = Reference::parse(remote)?;
        match self.pull(&reference, &|_| {}) {
            Ok(s) => {
                let _ = writeln!(
                    log,
                    "remote cache: {} wheel(s) pulled, {} already here",
                    s.fetched, s.already_cached
                );
            }
            Err(e) => {
                let _ = writeln!(
                    log,
                    "remote cache unavailable ({}); building instead",
                    e.render().replace('\n', " ")
                );
            }
        }
        self.lookup(key, log)
    }
}

/// What `kiln cache push` did: to the wheels, to the step entries.
#[derive(Debug, Default)]
pub(crate) struct Pushed {
    pub(crate) wheels: PushSummary,
    pub(crate) steps: PushSummary,
}

/// Upload every wheel and every step entry to `reference`, in one manifest.
pub(crate) fn push_all(
    wheels: &WheelCache,
    steps: &StepCache,
    reference: &Reference,
    note: &dyn Fn(&str),
) -> Result<Pushed> {
    super::perms::check_tree(&wheels.root)?;
    super::perms::check_tree(&steps.root)?;
    for (id, _) in wheels.list() {
        wheels.sign_trusted(&id)?;
    }
    push_entries(&wheels.stored()?, Some(steps), reference, note)
}

impl StepCache {
    /// Fetch the step entries `reference` holds (only entry `only`, when given) into this cache,
    /// each verified before it is renamed into place ([`remote_steps::fetch`]). A malformed
    /// entry fails the pull, when it is one asked for.
    pub(crate) fn pull(
        &self,
        reference: &Reference,
        only: Option<&str>,
        note: &dyn Fn(&str),
    ) -> Result<PullSummary> {
        // `only`: a build's miss, with short deadlines; a `kiln cache pull` waits longer.
        let registry = match only {
            Some(_) => Registry::for_miss(reference),
            None => Registry::new(reference),
        };
        let mut summary = PullSummary::default();
        let Some(layers) = remote_layers(&registry)? else {
            // A miss asking for one entry: a tag not pushed yet does not hold it.
            return match only {
                Some(_) => Ok(summary),
                None => Err(no_cache(reference)),
            };
        };
        for (id, remote) in remote_steps::remote_steps(&layers) {
            if only.is_some_and(|o| o != id) {
                continue;
            }
            let remote = remote.map_err(|why| {
                Error::other(
                    format!("the cache at {reference} has a malformed step entry: {why}"),
                    Some("it was not written by `kiln cache push`; push the cache again".into()),
                )
            })?;
            if remote_steps::fetch(&registry, self, &remote, note)? {
                summary.fetched += 1;
                summary.bytes += remote.outputs_size + remote.entry_size;
            } else {
                summary.already_cached += 1;
            }
        }
        Ok(summary)
    }

    /// A step's miss: fetch entry `id` from the remote cache `remote` (the value of
    /// [`REMOTE_CACHE_VAR`]). Whether it is here now; why not, when the remote failed.
    pub(crate) fn pull_remote(&self, remote: &str, id: &str) -> Result<bool> {
        let reference = Reference::parse(remote)?;
        self.pull(&reference, Some(id), &|_| {})?;
        Ok(self.has(id))
    }
}

fn no_cache(reference: &Reference) -> Error {
    Error::other(
        format!("registry has no wheel cache at {reference}"),
        Some("push one first with `kiln cache push`, or check the repository and tag".to_string()),
    )
}

/// The remote cache a build asks on a miss: `$KILN_REMOTE_CACHE`, when set and not empty.
pub(crate) fn configured() -> Option<String> {
    std::env::var(REMOTE_CACHE_VAR)
        .ok()
        .filter(|r| !r.is_empty())
}

/// Upload `entries` to `reference`: blobs the registry lacks, then one manifest holding these
/// entries and every entry the tag already had. Each wheel is hashed before it leaves: an entry
/// whose file no longer matches its entry.json is refused.
fn push_entries(
    entries: &[StoredWheel],
    steps: Option<&StepCache>,
    reference: &Reference,
    note: &dyn Fn(&str),
) -> Result<Pushed> {
    let registry = Registry::new(reference);
    let mut layers = Vec::new();
    let (remote_step_layers, remote_wheels): (Vec<Value>, Vec<Value>) = remote_layers(&registry)?
        .unwrap_or_default()
        .into_iter()
        .partition(is_step_layer);
    for layer in remote_wheels {
        match verified_remote(&registry, &layer, reference) {
            Ok(()) => layers.push(layer),
            Err(why) => note(&format!("not carrying over a remote entry: {why}")),
        }
    }
    let mut step_layers: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for (id, remote) in remote_steps::remote_steps(&remote_step_layers) {
        match remote.and_then(|r| remote_steps::carried(&registry, &r)) {
            Ok(()) => {
                let own = remote_step_layers
                    .iter()
                    .filter(|l| layer_id(l) == Some(&id));
                step_layers.insert(id.clone(), own.cloned().collect());
            }
            Err(why) => note(&format!("not carrying over a remote entry: {why}")),
        }
    }
    let mut pushed = Pushed::default();
    for id in steps.map(StepCache::list).unwrap_or_default() {
        let cache = steps.expect("listed from it");
        cache.sign_trusted(&id)?;
        let (own, uploaded) = remote_steps::upload(&registry, cache, &id, note)?;
        if uploaded {
            pushed.steps.uploaded += 1;
        } else {
            pushed.steps.already_there += 1;
        }
        step_layers.insert(id, own);
    }
    pushed.steps.total = step_layers.len();
    let mut summary = PushSummary::default();
    for e in entries {
        let (sha256, size) = hash_file(&e.path, e.entry.size)?;
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
            let (file, _) = super::open_regular(&e.path)
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
                ANNOTATION_EXTRA: serde_json::to_string(&rest_of(&e.entry)).expect("json"),
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
    layers.extend(step_layers.into_values().flatten());
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": {"mediaType": MEDIA_EMPTY, "digest": empty_digest, "size": empty.len()},
        "layers": layers,
        "annotations": {
            "dev.kiln.cache.entries": summary.total.to_string(),
            "dev.kiln.cache.step-entries": pushed.steps.total.to_string(),
        },
    });
    registry.put_manifest(
        MEDIA_MANIFEST,
        &serde_json::to_vec(&manifest).expect("json"),
    )?;
    pushed.wheels = summary;
    Ok(pushed)
}

/// The fields of an entry besides the four a layer holds itself (key, wheel, sha256, size).
fn rest_of(entry: &Entry<Value>) -> BTreeMap<String, Value> {
    let Ok(Value::Object(all)) = serde_json::to_value(entry) else {
        return BTreeMap::new();
    };
    all.into_iter()
        .filter(|(k, _)| !LAYER_FIELDS.contains(&k.as_str()))
        .collect()
}

/// The entry fields a layer carries as its own (digest, size, annotations).
const LAYER_FIELDS: [&str; 4] = ["key", "wheel", "sha256", "size"];

fn pull_into(
    cache: &WheelCache,
    reference: &Reference,
    note: &dyn Fn(&str),
) -> Result<PullSummary> {
    let wheels_dir = cache.root.as_path();
    let registry = Registry::new(reference);
    let Some(layers) = remote_layers(&registry)? else {
        return Err(no_cache(reference));
    };
    let mut summary = PullSummary::default();
    super::perms::create_dir(wheels_dir)?;
    let remotes = layers
        .iter()
        .filter(|l| !is_step_layer(l))
        .map(|layer| RemoteWheel::from_layer(layer, reference))
        .collect::<Result<Vec<_>>>()?;
    for remote in &remotes {
        let final_dir = cache.entry_dir(&remote.id);
        // An entry of this key is here (this build's, or a different build of the same key:
        // wheels are not byte-reproducible): kept as it is, never deleted or replaced.
        if std::fs::symlink_metadata(&final_dir).is_ok() {
            summary.already_cached += 1;
            continue;
        }
        cache.trusted(&remote.id, &remote.entry).map_err(|why| {
            Error::other(
                format!("the wheel cache at {reference}: {why}"),
                Some("nothing of it was added to the cache".to_string()),
            )
        })?;
        check_room(remote, wheels_dir, reference)?;
        let temp = cache.staging_dir(&remote.id)?;
        let result = fetch_into(&registry, remote, &temp, reference);
        if let Err(e) = result {
            let _ = fs::remove_dir_all(&temp);
            return Err(e);
        }
        // A rename onto a directory another kiln put there meanwhile fails: that one stays.
        match fs::rename(&temp, &final_dir) {
            Ok(()) => {}
            Err(_) if std::fs::symlink_metadata(&final_dir).is_ok() => {
                let _ = fs::remove_dir_all(&temp);
                summary.already_cached += 1;
                continue;
            }
            Err(e) => {
                let _ = fs::remove_dir_all(&temp);
                return Err(Error::io(
                    format!("cannot move {} into the cache", remote.entry.wheel),
                    e,
                ));
            }
        }
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
    let file = super::perms::create_file(&wheel_path)
        .map_err(|e| Error::io(format!("cannot create {}", wheel_path.display()), e))?;
    let mut writer = HashingWriter::new(std::io::BufWriter::with_capacity(1 << 20, file));
    let digest = format!("sha256:{}", remote.sha256);
    let body = registry
        .blob(&digest, remote.entry.size)?
        .take(remote.entry.size.saturating_add(1));
    let mut body = crate::report::Counted::new(&remote.entry.wheel, Some(remote.entry.size), body);
    std::io::copy(&mut body, &mut writer)
        .map_err(|e| Error::io(format!("cannot download {}", remote.entry.wheel), e))?;
    let (out, sha256, size) = writer.finish();
    let file = out
        .into_inner()
        .map_err(|e| Error::io("cannot write the wheel", e.into_error()))?;
    crate::fs::sync_file(&file).map_err(|e| Error::io("cannot write the wheel", e))?;
    if sha256 != remote.sha256 || size != remote.entry.size {
        return Err(Error::other(
            format!(
                "blob {digest} ({}) from {reference} failed verification: got sha256:{sha256}, {size} bytes; expected {} bytes",
                remote.entry.wheel, remote.entry.size
            ),
            Some("the registry served corrupted or tampered content; nothing was added to the cache. Push the entry again from a trusted cache".to_string()),
        ));
    }
    write_entry(temp, &remote.entry)
}

/// One wheel as a manifest lists it.
struct RemoteWheel {
    id: String,
    sha256: String,
    entry: Entry<Value>,
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
        if let Err(key_id) = names_key(id, &key) {
            return Err(bad(&format!(
                "entry {id} is not the sha256 of its key (that is {key_id})"
            )));
        }
        let mut rest: serde_json::Map<String, Value> = annotation(ANNOTATION_EXTRA)
            .and_then(|x| serde_json::from_str(x).ok())
            .unwrap_or_default();
        rest.retain(|k, _| !LAYER_FIELDS.contains(&k.as_str()));
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
            entry: entry_of(rest, key, wheel, sha256, size)
                .map_err(|e| bad(&format!("its entry does not read ({e})")))?,
        })
    }
}

/// The entry a layer describes: its annotated fields, then the layer's own four.
fn entry_of(
    mut fields: serde_json::Map<String, Value>,
    key: Value,
    wheel: &str,
    sha256: &str,
    size: u64,
) -> serde_json::Result<Entry<Value>> {
    fields.insert("key".into(), key);
    fields.insert("wheel".into(), wheel.into());
    fields.insert("sha256".into(), sha256.into());
    fields.insert("size".into(), size.into());
    serde_json::from_value(Value::Object(fields))
}

/// The layers of the tag's kiln wheel-cache manifest; None when the tag does not exist. A tag
/// holding anything else (an image, an image index) is an error: a pull would find "0 wheels"
/// in it and a push would replace it.
pub(crate) fn remote_layers(registry: &Registry) -> Result<Option<Vec<Value>>> {
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
                    "free some space (`kiln cache gc --older-than 30d` drops entries made over 30 days ago) and pull again; nothing was written"
                        .to_string(),
                ),
            ));
        }
    }
    Ok(())
}

/// The sha256 and size of cached wheel `path`, read as [`super::wheels::read_wheel`] does.
fn hash_file(path: &Path, size: u64) -> Result<(String, u64)> {
    super::wheels::read_wheel(path, size)
        .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// A layer holds four entry fields itself (`LAYER_FIELDS`, a second spelling of [`Entry`]'s)
    /// and the rest in an annotation: an entry with every field set comes back whole.
    #[test]
    fn an_entry_survives_its_split_into_a_layer_and_back() {
        let entry: Entry<Value> = Entry {
            key: json!({"package": "demo", "version": "1.0"}),
            wheel: "demo-1.0-py3-none-any.whl".into(),
            sha256: "a".repeat(64),
            size: 11,
            created_unix: Some(1_700_000_000),
            index: Some("default".into()),
            signatures: vec!["fleet:c2ln".into()],
            extra: [("future".to_string(), json!(["kept"]))].into(),
        };
        let all = serde_json::to_value(&entry).unwrap();
        for field in LAYER_FIELDS {
            assert!(
                all.get(field).is_some(),
                "`{field}` is no entry field: {all}"
            );
        }
        let rest: serde_json::Map<String, Value> = rest_of(&entry).into_iter().collect();
        assert_eq!(
            rest.keys().collect::<Vec<_>>(),
            ["created_unix", "future", "index", "signatures"]
        );
        let back = entry_of(
            rest,
            entry.key.clone(),
            &entry.wheel,
            &entry.sha256,
            entry.size,
        );
        assert_eq!(back.unwrap(), entry);
    }
}
