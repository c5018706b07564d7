//! Container images from recipes: a generated Dockerfile (`kiln image dockerfile`) and a
//! reproducible OCI image-layout archive written straight from prefix directories
//! (`kiln image export`).

pub mod archive;
pub mod dockerfile;
pub mod layer;
mod stream;

use std::collections::BTreeMap;
use std::io::{self, Write};

use sha2::{Digest, Sha256};

use crate::recipe::Recipe;

/// A writer that hashes (sha256) and counts everything passing through it.
pub struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    written: u64,
}

impl<W: Write> HashingWriter<W> {
    pub fn new(inner: W) -> Self {
        HashingWriter {
            inner,
            hasher: Sha256::new(),
            written: 0,
        }
    }

    pub fn written(&self) -> u64 {
        self.written
    }

    /// The inner writer, the hex sha256 and the byte count of what was written.
    pub fn finish(self) -> (W, String, u64) {
        (
            self.inner,
            crate::engine::hashing::hex(&self.hasher.finalize()),
            self.written,
        )
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The environment every step of a recipe shares (its `[env]` table, in effect), minus anything
/// that looks like a secret: that is what an image bakes in. Secrets never enter an image.
pub fn shared_env(recipe: &Recipe) -> BTreeMap<String, String> {
    let mut steps = recipe.steps.iter();
    let Some(first) = steps.next() else {
        return BTreeMap::new();
    };
    let mut env = first.env.clone();
    for step in steps {
        env.retain(|k, v| step.env.get(k) == Some(v));
    }
    env.retain(|k, _| !crate::redact::is_secret_name(k));
    env
}

/// `1.5 GiB`, `12.0 MiB`, `512 B`.
pub fn human_bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{value:.0} {}", UNITS[0])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
