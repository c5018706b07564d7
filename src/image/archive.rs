//! `kiln image export`: an OCI image-layout archive (`oci-layout`, `index.json`, `blobs/sha256/…`)
//! with one uncompressed tar layer per prefix, plus Docker's `manifest.json` so that engines
//! older than Docker 25 can `docker load` it too.
//!
//! Single pass, streaming: each layer is written straight into the output file behind a
//! placeholder tar header while it is hashed; once its digest and size are known the header is
//! written over the placeholder (a blob name, `blobs/sha256/<64 hex>`, always fits the 100-byte
//! name field). Layers stay uncompressed: the digest is the diff id, exporting runs at disk
//! speed, and registries or `docker save` can compress later.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{json, Value};

use super::layer::{self, LayerSummary};
use super::stream::HashingStream;
use crate::error::{Error, Result};
use crate::units::human_bytes;

pub(crate) const MEDIA_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub(crate) const MEDIA_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub(crate) const MEDIA_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub(crate) const MEDIA_LAYER: &str = "application/vnd.oci.image.layer.v1.tar";

/// What to export.
#[derive(Debug, Default)]
pub(crate) struct ExportOptions {
    /// Absolute directories, one layer each, in this order.
    pub prefixes: Vec<PathBuf>,
    /// `name[:tag]`
    pub tag: Option<String>,
    /// Seconds since the epoch for every mtime and the config's `created` (SOURCE_DATE_EPOCH).
    pub epoch: u64,
    pub env: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug)]
pub(crate) struct LayerInfo {
    pub prefix: PathBuf,
    pub digest: String,
    pub size: u64,
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
}

#[derive(Debug)]
pub(crate) struct Exported {
    pub manifest_digest: String,
    pub layers: Vec<LayerInfo>,
    pub archive_size: u64,
}

/// Write the archive to `output` (atomically: a temp file next to it, renamed at the end; an
/// existing output must be a regular file, see src/output.rs). Neither the temp file nor the
/// output is packed when `output` is inside an exported prefix. `note` receives progress lines.
pub(crate) fn export(opts: &ExportOptions, output: &Path, note: &dyn Fn(&str)) -> Result<Exported> {
    crate::output::check(output, "the image archive", false)?;
    let temp = crate::output::temp_beside(output);
    let identity = |m: std::fs::Metadata| {
        use std::os::unix::fs::MetadataExt;
        (m.dev(), m.ino())
    };
    let mut exclude: Vec<(u64, u64)> = std::fs::metadata(output)
        .map(identity)
        .into_iter()
        .collect();
    let result = File::create(&temp)
        .map_err(|e| Error::io(format!("cannot create {}", temp.display()), e))
        .and_then(|file| {
            if let Ok(meta) = file.metadata() {
                exclude.push(identity(meta));
            }
            write_archive(opts, file, note, &exclude)
        });
    match result {
        Ok(mut exported) => {
            std::fs::rename(&temp, output).map_err(|e| {
                Error::io(
                    format!("cannot move the archive to {}", output.display()),
                    e,
                )
            })?;
            exported.archive_size = std::fs::metadata(output).map_or(0, |m| m.len());
            Ok(exported)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&temp);
            Err(e)
        }
    }
}

fn write_archive(
    opts: &ExportOptions,
    file: File,
    note: &dyn Fn(&str),
    exclude: &layer::Exclude,
) -> Result<Exported> {
    let mut outer = Outer {
        out: BufWriter::with_capacity(1 << 20, file),
        mtime: opts.epoch,
    };
    outer.entry("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    outer.dir("blobs/")?;
    outer.dir("blobs/sha256/")?;
    let mut layers: Vec<LayerInfo> = Vec::new();
    for (index, prefix) in opts.prefixes.iter().enumerate() {
        let started = Instant::now();
        let label = format!(
            "layer {}/{} {}",
            index + 1,
            opts.prefixes.len(),
            prefix.display()
        );
        let mut summary = LayerSummary::default();
        let (digest, size) = outer.blob_stream(|w| {
            let progress = Progress {
                inner: w,
                label: &label,
                note,
                started,
                last: started,
                written: 0,
            };
            let (_, s) = layer::write_layer(prefix, progress, opts.epoch, exclude)?;
            summary = s;
            Ok(())
        })?;
        crate::report::current().transfer_finished(&label);
        let secs = started.elapsed().as_secs_f64().max(1e-6);
        note(&format!(
            "{label}: {} in {secs:.1}s ({}/s), {} files, {} dirs, {} links, sha256:{}",
            human_bytes(size as f64),
            human_bytes(size as f64 / secs),
            summary.files,
            summary.dirs,
            summary.symlinks,
            &digest[..12]
        ));
        for (path, allocated, size) in &summary.sparse {
            note(&format!(
                "{} is sparse ({} allocated of {}): packed in full, its holes as zeros (an OCI layer is a plain tar, and Docker, containerd and registries do not all read sparse tar entries)",
                layer::shown(path),
                human_bytes(*allocated as f64),
                human_bytes(*size as f64)
            ));
        }
        for skipped in &summary.skipped {
            note(&format!(
                "left out {} (not a file, directory or symlink)",
                layer::shown(skipped)
            ));
        }
        layers.push(LayerInfo {
            prefix: prefix.clone(),
            digest,
            size,
            files: summary.files,
            dirs: summary.dirs,
            symlinks: summary.symlinks,
        });
    }
    let config = config_json(opts, &layers);
    let config_bytes = serde_json::to_vec(&config).expect("json");
    let config_digest = outer.blob_bytes(&config_bytes)?;
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, "digest": format!("sha256:{config_digest}"), "size": config_bytes.len()},
        "layers": layers.iter().map(|l| json!({
            "mediaType": MEDIA_LAYER, "digest": format!("sha256:{}", l.digest), "size": l.size,
        })).collect::<Vec<_>>(),
    });
    let manifest_bytes = serde_json::to_vec(&manifest).expect("json");
    let manifest_digest = outer.blob_bytes(&manifest_bytes)?;
    let mut descriptor = json!({
        "mediaType": MEDIA_MANIFEST,
        "digest": format!("sha256:{manifest_digest}"),
        "size": manifest_bytes.len(),
    });
    let reference = opts.tag.as_deref().map(ImageName::parse);
    if let Some(name) = &reference {
        descriptor["annotations"] = json!({
            "io.containerd.image.name": name.full(),
            "org.opencontainers.image.ref.name": name.tag,
        });
    }
    let index = json!({"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": [descriptor]});
    outer.entry("index.json", &serde_json::to_vec(&index).expect("json"))?;
    let docker = json!([{
        "Config": format!("blobs/sha256/{config_digest}"),
        "RepoTags": reference.iter().map(|n| format!("{}:{}", n.name, n.tag)).collect::<Vec<_>>(),
        "Layers": layers.iter().map(|l| format!("blobs/sha256/{}", l.digest)).collect::<Vec<_>>(),
    }]);
    outer.entry("manifest.json", &serde_json::to_vec(&docker).expect("json"))?;
    outer.finish()?;
    Ok(Exported {
        manifest_digest,
        layers,
        archive_size: 0,
    })
}

fn config_json(opts: &ExportOptions, layers: &[LayerInfo]) -> Value {
    let created = rfc3339(opts.epoch);
    let mut env =
        vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string()];
    env.extend(
        opts.env
            .iter()
            .filter(|(k, _)| k.as_str() != "PATH")
            .map(|(k, v)| format!("{k}={v}")),
    );
    let mut config = json!({ "Env": env });
    if !opts.labels.is_empty() {
        config["Labels"] = json!(opts.labels);
    }
    json!({
        "architecture": oci_architecture(),
        "os": "linux",
        "created": created,
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": layers.iter().map(|l| format!("sha256:{}", l.digest)).collect::<Vec<_>>()},
        "history": layers.iter().map(|l| json!({
            "created": created,
            "created_by": format!("kiln image export --prefix {}", l.prefix.display()),
        })).collect::<Vec<_>>(),
    })
}

fn oci_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// `name[:tag]` split at the tag's colon (not a registry port's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ImageName {
    pub name: String,
    pub tag: String,
}

impl ImageName {
    pub(crate) fn parse(text: &str) -> ImageName {
        let slash = text.rfind('/').map_or(0, |i| i + 1);
        match text[slash..].rfind(':') {
            Some(i) => ImageName {
                name: text[..slash + i].to_string(),
                tag: text[slash + i + 1..].to_string(),
            },
            None => ImageName {
                name: text.to_string(),
                tag: "latest".to_string(),
            },
        }
    }

    /// The fully qualified form containerd records (`docker.io/library/x:tag`).
    pub(crate) fn full(&self) -> String {
        let first = self.name.split('/').next().unwrap_or_default();
        let has_registry = self.name.contains('/')
            && (first.contains('.') || first.contains(':') || first == "localhost");
        let name = if has_registry {
            self.name.clone()
        } else if self.name.contains('/') {
            format!("docker.io/{}", self.name)
        } else {
            format!("docker.io/library/{}", self.name)
        };
        format!("{name}:{}", self.tag)
    }
}

/// `1970-01-01T00:00:00Z` for an epoch second.
pub(crate) fn rfc3339(epoch: u64) -> String {
    let days = (epoch / 86_400) as i64;
    let rem = epoch % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The outer tar, written by hand so that a blob can be streamed behind a header patched later.
struct Outer {
    out: BufWriter<File>,
    mtime: u64,
}

impl Outer {
    fn header(
        &self,
        name: &str,
        size: u64,
        kind: tar::EntryType,
        mode: u32,
    ) -> Result<tar::Header> {
        let mut header = tar::Header::new_ustar();
        header
            .set_path(name)
            .map_err(|e| Error::io(format!("cannot name archive entry {name}"), e))?;
        header.set_entry_type(kind);
        header.set_size(size);
        header.set_mode(mode);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(self.mtime);
        header.set_cksum();
        Ok(header)
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.out
            .write_all(bytes)
            .map_err(|e| Error::io("cannot write the archive", e))
    }

    fn pad(&mut self, size: u64) -> Result<()> {
        let rest = (512 - size % 512) % 512;
        self.write(&[0u8; 512][..rest as usize])
    }

    fn dir(&mut self, name: &str) -> Result<()> {
        let header = self.header(name, 0, tar::EntryType::Directory, 0o755)?;
        self.write(header.as_bytes())
    }

    fn entry(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        let header = self.header(name, bytes.len() as u64, tar::EntryType::Regular, 0o644)?;
        self.write(header.as_bytes())?;
        self.write(bytes)?;
        self.pad(bytes.len() as u64)
    }

    fn blob_bytes(&mut self, bytes: &[u8]) -> Result<String> {
        let digest = crate::hash::sha256_bytes(bytes);
        self.entry(&format!("blobs/sha256/{digest}"), bytes)?;
        Ok(digest)
    }

    /// Stream a blob produced by `produce` behind a placeholder header; returns (hex, size).
    fn blob_stream(
        &mut self,
        produce: impl FnOnce(&mut HashingStream) -> Result<()>,
    ) -> Result<(String, u64)> {
        let seek_err = |e| Error::io("cannot seek in the archive", e);
        let start = self.out.stream_position().map_err(seek_err)?;
        self.write(&[0u8; 512])?;
        let mut hashing = HashingStream::new(&mut self.out);
        produce(&mut hashing)?;
        let (digest, size) = hashing
            .finish()
            .map_err(|e| Error::io("cannot write the archive", e))?;
        self.pad(size)?;
        let end = self.out.stream_position().map_err(seek_err)?;
        let header = self.header(
            &format!("blobs/sha256/{digest}"),
            size,
            tar::EntryType::Regular,
            0o644,
        )?;
        self.out.seek(SeekFrom::Start(start)).map_err(seek_err)?;
        self.write(header.as_bytes())?;
        self.out.seek(SeekFrom::Start(end)).map_err(seek_err)?;
        Ok((digest, size))
    }

    fn finish(mut self) -> Result<()> {
        self.write(&[0u8; 1024])?;
        let file = self
            .out
            .into_inner()
            .map_err(|e| Error::io("cannot write the archive", e.into_error()))?;
        crate::fs::sync_file(&file).map_err(|e| Error::io("cannot write the archive", e))
    }
}

/// Counts bytes on their way into the archive and notes progress every two seconds.
struct Progress<'a, W> {
    inner: W,
    label: &'a str,
    note: &'a dyn Fn(&str),
    started: Instant,
    last: Instant,
    written: u64,
}

impl<W: Write> Write for Progress<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        // A layer's size is known only once it is packed: bytes and rate, no ETA.
        crate::report::current().transfer(self.label, self.written, None);
        if self.last.elapsed().as_secs() >= 2 {
            self.last = Instant::now();
            let secs = self.started.elapsed().as_secs_f64();
            (self.note)(&format!(
                "{}: {} ({}/s)",
                self.label,
                human_bytes(self.written as f64),
                human_bytes(self.written as f64 / secs)
            ));
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_split_at_the_tag_not_the_port() {
        let n = ImageName::parse("localhost:5000/kiln/demo");
        assert_eq!(
            (n.name.as_str(), n.tag.as_str()),
            ("localhost:5000/kiln/demo", "latest")
        );
        assert_eq!(n.full(), "localhost:5000/kiln/demo:latest");
        let n = ImageName::parse("kiln-demo:1");
        assert_eq!(n.full(), "docker.io/library/kiln-demo:1");
        assert_eq!(ImageName::parse("org/x:2").full(), "docker.io/org/x:2");
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
    }
}
