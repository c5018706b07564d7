//! kiln's caches: the compiled-wheel cache and the step cache (each the one owner of its entry
//! format), their portable archives, and its copy in an OCI registry (through oci's transport).

pub(crate) mod archive;
pub(crate) mod gc;
pub(crate) mod layout;
pub(crate) mod pack;
pub(crate) mod remote;
pub(crate) mod remote_steps;
pub(crate) mod staging;
pub(crate) mod steps;
pub(crate) mod trust;
pub(crate) mod wheels;

pub use remote::{PullSummary, PushSummary};
pub use wheels::{Entry, StoredWheel, WheelCache, WheelKey};

/// The OCI annotations both kinds of remote entry carry: a file name, the entry's cache id.
pub(crate) const ANNOTATION_TITLE: &str = "org.opencontainers.image.title";
pub(crate) const ANNOTATION_ID: &str = "dev.kiln.cache.id";

/// `text` (a name an entry carries, from anywhere) safe to print on a terminal: control
/// characters (escape sequences, newlines) written as `\u{..}` escapes.
pub(crate) fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}
