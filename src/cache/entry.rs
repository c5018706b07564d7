//! What one step-cache entry is: the [`StepKey`] it answers, the [`Item`]s of its manifest and
//! its `entry.json` ([`StepEntry`]). Plain data, shared by the store ([`super::steps`]), the
//! restore ([`super::layout`]), the packer ([`super::pack`]) and the signatures
//! ([`super::trust`]); it imports none of them but the signatures' [`super::trust::Signed`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::wheels::key_id;

pub(crate) const FORMAT: &str = "kiln-step-v1";

/// Everything a step's outputs depend on, with the state and cache directories written as
/// `${state}` and `${cache}` so that another state directory asks for the same key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StepKey {
    pub(crate) format: String,
    /// sha256 of the step's definition (kind, command, cwd, check, outputs), paths made portable.
    pub(crate) definition: String,
    /// Env var name → sha256 of its portable value.
    pub(crate) env: BTreeMap<String, String>,
    /// Portable input path → sha256 of its content.
    pub(crate) inputs: BTreeMap<String, String>,
    /// Dependency id → its step-cache key id (`skipped` for a step `when` left out).
    pub(crate) deps: BTreeMap<String, String>,
    /// `requires` tool → the version found on PATH (`missing`, `unknown`).
    pub(crate) tools: BTreeMap<String, String>,
    /// Host facts every build sees: `os`, `arch`, `libc`.
    pub(crate) host: BTreeMap<String, String>,
}

impl StepKey {
    pub(crate) fn new() -> Self {
        StepKey {
            format: FORMAT.into(),
            definition: String::new(),
            env: BTreeMap::new(),
            inputs: BTreeMap::new(),
            deps: BTreeMap::new(),
            tools: BTreeMap::new(),
            host: BTreeMap::new(),
        }
    }

    /// The entry id: [`key_id`] of this key.
    pub(crate) fn id(&self) -> String {
        key_id(self)
    }
}

impl Default for StepKey {
    fn default() -> Self {
        StepKey::new()
    }
}

/// What one archive path is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Item {
    File {
        sha256: String,
        size: u64,
        mode: u32,
    },
    Dir {
        mode: u32,
    },
    Symlink {
        target: String,
    },
}

/// entry.json of one cached step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StepEntry {
    pub(crate) key: StepKey,
    pub(crate) recipe: String,
    pub(crate) step: String,
    /// The outputs, portable (`${state}/work/…`), in the order of the archive's indexes.
    pub(crate) outputs: Vec<String>,
    /// Archive path → what it is.
    pub(crate) manifest: BTreeMap<String, Item>,
    pub(crate) archive_sha256: String,
    pub(crate) size: u64,
    pub(crate) created_unix: u64,
    /// `NAME:BASE64` ed25519 signatures of the entry ([`super::trust`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) signatures: Vec<String>,
}

impl super::trust::Signed for StepEntry {
    fn own_name(id: &str) -> String {
        id.to_string()
    }

    /// The key id, the manifest and outputs, the archive's digest.
    fn message(&self, id: &str) -> Vec<u8> {
        let described = serde_json::to_vec(&(&self.manifest, &self.outputs)).expect("serializes");
        format!(
            "kiln-step-entry-v1\nkey {id}\nmanifest {}\narchive {} {}\n",
            super::trust::sha256_hex(&described),
            self.archive_sha256,
            self.size
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

/// Why a step's outputs were not stored (a warning, never a failed step).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NotStored(pub(crate) String);
