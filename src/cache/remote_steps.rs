//! The step cache in a registry: the same tag, manifest and transport as the wheels
//! ([`super::remote`]). A step entry is two layers, both named by the entry's id in the
//! `dev.kiln.cache.id` annotation: its entry.json ([`MEDIA_STEP_ENTRY`]) and its outputs.tar
//! ([`MEDIA_STEP_OUTPUTS`], whose digest is the entry's `archive_sha256`). A pull streams both
//! into a staging directory while hashing them, refuses a blob whose digest or size is not the
//! manifest's, an entry.json whose key does not name its id, an archive over
//! [`MAX_ENTRY_BYTES`] or the free disk space; then the step cache's own import check
//! ([`StepCache::insert_staged`]) runs before the entry is renamed into place.

use std::collections::BTreeMap;
use std::io::{BufReader, Read};
use std::path::Path;

use serde_json::{json, Value};

use super::steps::{read_entry, short, StepCache, ENTRY_JSON_CAP, MAX_ENTRY_BYTES};
use super::wheels::is_hex64;
use super::{ANNOTATION_ID, ANNOTATION_TITLE};
use crate::error::{Error, Result};
use crate::hash::HashingWriter;
use crate::oci::Registry;

pub(crate) const MEDIA_STEP_ENTRY: &str = "application/vnd.kiln.step-entry.v1+json";
pub(crate) const MEDIA_STEP_OUTPUTS: &str = "application/vnd.kiln.step-outputs.v1.tar";

/// Whether a manifest layer belongs to a step entry.
pub(crate) fn is_step_layer(layer: &Value) -> bool {
    matches!(
        layer.get("mediaType").and_then(Value::as_str),
        Some(MEDIA_STEP_ENTRY | MEDIA_STEP_OUTPUTS)
    )
}

/// The entry id a layer names.
pub(crate) fn layer_id(layer: &Value) -> Option<&str> {
    layer
        .get("annotations")
        .and_then(|a| a.get(ANNOTATION_ID))
        .and_then(Value::as_str)
}

/// What one step entry's pair of layers says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RemoteStep {
    pub(crate) id: String,
    pub(crate) entry_sha256: String,
    pub(crate) entry_size: u64,
    pub(crate) outputs_sha256: String,
    pub(crate) outputs_size: u64,
}

/// A blob a layer names: its sha256 and size.
type Blob = (String, u64);

/// The step entries of a manifest's layers, by id; an entry whose pair is incomplete or
/// malformed is the error's reason.
pub(crate) fn remote_steps(
    layers: &[Value],
) -> BTreeMap<String, std::result::Result<RemoteStep, String>> {
    let mut parts: BTreeMap<String, (Option<Blob>, Option<Blob>)> = BTreeMap::new();
    let mut bad: BTreeMap<String, String> = BTreeMap::new();
    for layer in layers.iter().filter(|l| is_step_layer(l)) {
        let id = layer_id(layer).unwrap_or_default().to_string();
        if !is_hex64(&id) {
            bad.insert(id, "a step layer without a valid cache id".into());
            continue;
        }
        let digest = layer
            .get("digest")
            .and_then(Value::as_str)
            .and_then(|d| d.strip_prefix("sha256:"))
            .filter(|h| is_hex64(h));
        let size = layer.get("size").and_then(Value::as_u64);
        let (Some(digest), Some(size)) = (digest, size) else {
            bad.insert(id, "a step layer without a sha256 digest and size".into());
            continue;
        };
        let slot = parts.entry(id).or_default();
        let part = Some((digest.to_string(), size));
        if layer["mediaType"] == MEDIA_STEP_ENTRY {
            slot.0 = part;
        } else {
            slot.1 = part;
        }
    }
    let mut out: BTreeMap<_, _> = parts
        .into_iter()
        .map(|(id, parts)| {
            let step = match parts {
                (Some((entry_sha256, entry_size)), Some((outputs_sha256, outputs_size))) => {
                    Ok(RemoteStep {
                        id: id.clone(),
                        entry_sha256,
                        entry_size,
                        outputs_sha256,
                        outputs_size,
                    })
                }
                _ => Err(format!(
                    "step entry {} lacks its entry.json or outputs.tar layer",
                    short(&id)
                )),
            };
            (id, step)
        })
        .collect();
    for (id, why) in bad {
        out.insert(id, Err(why));
    }
    out
}

/// Whether a push may carry over a remote step entry: well formed, and both blobs are in the
/// registry at the declared sizes.
pub(crate) fn carried(registry: &Registry, step: &RemoteStep) -> std::result::Result<(), String> {
    for (what, sha, size) in [
        ("entry.json", &step.entry_sha256, step.entry_size),
        ("outputs.tar", &step.outputs_sha256, step.outputs_size),
    ] {
        match registry
            .blob_size(&format!("sha256:{sha}"))
            .map_err(|e| e.to_string())?
        {
            Some(s) if s == size => {}
            Some(s) => {
                return Err(format!(
                "step entry {}: its {what} is {s} bytes in the registry, the manifest says {size}",
                short(&step.id)
            ))
            }
            None => {
                return Err(format!(
                    "step entry {}: its {what} has no blob in the registry",
                    short(&step.id)
                ))
            }
        }
    }
    Ok(())
}

/// Upload step entry `id` (its blobs the registry lacks) after checking it against its own
/// entry.json; its two layers, and whether anything was uploaded.
pub(crate) fn upload(
    registry: &Registry,
    cache: &StepCache,
    id: &str,
    note: &dyn Fn(&str),
) -> Result<(Vec<Value>, bool)> {
    let dir = cache.entry_dir(id);
    StepCache::verify_staged(&dir).map_err(|why| {
        Error::other(
            format!("cannot push {why}"),
            Some(format!(
                "`kiln cache gc` drops the bad entry ({}); nothing was pushed",
                dir.display()
            )),
        )
    })?;
    let mut layers = Vec::new();
    let mut uploaded = false;
    for (name, path) in cache.entry_files(id) {
        let (sha256, size) = hash_file(&path)?;
        let digest = format!("sha256:{sha256}");
        if !registry.has_blob(&digest)? {
            let (file, _) = super::open_regular(&path)
                .map_err(|e| Error::io(format!("cannot open {}", path.display()), e))?;
            let what = format!("step {} {name}", short(id));
            let body = crate::report::Counted::new(
                &what,
                Some(size),
                BufReader::with_capacity(1 << 20, file),
            );
            registry.push_blob(&digest, size, body)?;
            uploaded = true;
            note(&format!(
                "pushed {what} ({})",
                crate::units::human_bytes(size as f64)
            ));
        }
        let media = if name == "entry.json" {
            MEDIA_STEP_ENTRY
        } else {
            MEDIA_STEP_OUTPUTS
        };
        layers.push(json!({
            "mediaType": media,
            "digest": digest,
            "size": size,
            "annotations": {ANNOTATION_TITLE: name, ANNOTATION_ID: id},
        }));
    }
    Ok((layers, uploaded))
}

/// Fetch `step` into `cache`, verified (see the module's doc). `Ok(false)`: it was here.
pub(crate) fn fetch(
    registry: &Registry,
    cache: &StepCache,
    step: &RemoteStep,
    note: &dyn Fn(&str),
) -> Result<bool> {
    if cache.has(&step.id) {
        return Ok(false);
    }
    let reference = registry.reference().clone();
    let refuse = |why: String| {
        Error::other(
            format!(
                "step entry {} from {reference} is refused: {why}",
                short(&step.id)
            ),
            Some(
                "the registry served corrupted or hostile content; nothing was added to the cache"
                    .to_string(),
            ),
        )
    };
    if step.entry_size > ENTRY_JSON_CAP {
        return Err(refuse(format!(
            "its entry.json is declared {} (at most {})",
            crate::units::format_size(step.entry_size),
            crate::units::format_size(ENTRY_JSON_CAP)
        )));
    }
    if step.outputs_size > MAX_ENTRY_BYTES {
        return Err(refuse(format!(
            "its outputs.tar is declared {} (the step cache stores at most {})",
            crate::units::format_size(step.outputs_size),
            crate::units::format_size(MAX_ENTRY_BYTES)
        )));
    }
    super::perms::create_dir(&cache.root)?;
    if let Some(free) = crate::host::system::free_disk_bytes(&cache.root) {
        if step.outputs_size + step.entry_size > free {
            return Err(Error::other(
                format!(
                    "step entry {} from {reference} is {}, but {} has {} free",
                    short(&step.id),
                    crate::units::format_size(step.outputs_size),
                    cache.root.display(),
                    crate::units::format_size(free)
                ),
                Some("free some space (`kiln cache gc --older-than 30d` drops entries made over 30 days ago); nothing was written".to_string()),
            ));
        }
    }
    // `insert_staged` takes a directory named by the id: one inside a fresh staging directory.
    let staging = cache.staging_dir(&step.id)?;
    let named = staging.join(&step.id);
    let result = (|| {
        super::perms::create_dir(&named)?;
        let [(entry_name, _), (outputs_name, _)] = cache.entry_files(&step.id);
        let what = |name: &str| format!("step {} {name}", short(&step.id));
        download(
            registry,
            &step.entry_sha256,
            step.entry_size,
            &named.join(entry_name),
            &what(entry_name),
        )
        .map_err(|e| refuse(e.with_causes()))?;
        let entry =
            read_entry(&named).ok_or_else(|| refuse("its entry.json does not read".into()))?;
        if entry.key.id() != step.id {
            return Err(refuse("its entry.json does not match its key".into()));
        }
        if entry.archive_sha256 != step.outputs_sha256 || entry.size != step.outputs_size {
            return Err(refuse(
                "its entry.json and its outputs.tar layer disagree".into(),
            ));
        }
        download(
            registry,
            &step.outputs_sha256,
            step.outputs_size,
            &named.join(outputs_name),
            &what(outputs_name),
        )
        .map_err(|e| refuse(e.with_causes()))?;
        cache.insert_staged(&named).map_err(refuse)
    })();
    let _ = std::fs::remove_dir_all(&staging);
    let added = result?;
    note(&format!(
        "pulled step entry {} ({})",
        short(&step.id),
        crate::units::human_bytes((step.outputs_size + step.entry_size) as f64)
    ));
    Ok(added)
}

/// Stream blob `sha256` into `path`, hashing it; refused unless it is exactly `size` bytes
/// with that sha256.
fn download(registry: &Registry, sha256: &str, size: u64, path: &Path, what: &str) -> Result<()> {
    let file = super::perms::create_file(path)
        .map_err(|e| Error::io(format!("cannot create {}", path.display()), e))?;
    let mut writer = HashingWriter::new(std::io::BufWriter::with_capacity(1 << 20, file));
    let digest = format!("sha256:{sha256}");
    let body = registry.blob(&digest, size)?.take(size + 1);
    let mut body = crate::report::Counted::new(what, Some(size), body);
    std::io::copy(&mut body, &mut writer)
        .map_err(|e| Error::io(format!("cannot download {what}"), e))?;
    let (out, got, got_size) = writer.finish();
    let file = out
        .into_inner()
        .map_err(|e| Error::io(format!("cannot write {what}"), e.into_error()))?;
    crate::fs::sync_file(&file).map_err(|e| Error::io(format!("cannot write {what}"), e))?;
    if got != sha256 || got_size != size {
        return Err(Error::other(
            format!("blob {digest} ({what}) failed verification: got sha256:{got}, {got_size} bytes; expected {size} bytes"),
            None,
        ));
    }
    Ok(())
}

/// The sha256 and size of entry file `path`: a regular file ([`super::open_regular`]).
fn hash_file(path: &Path) -> Result<(String, u64)> {
    let (file, _) = super::open_regular(path)
        .map_err(|e| Error::io(format!("cannot open {}", path.display()), e))?;
    crate::hash::sha256_reader(BufReader::with_capacity(1 << 20, file))
        .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))
}
