//! kiln's caches: the compiled-wheel cache (the one owner of its entry format), its portable
//! archives, and its copy in an OCI registry (through oci's transport).

pub(crate) mod archive;
pub(crate) mod remote;
pub(crate) mod wheels;

pub use remote::{PullSummary, PushSummary};
pub use wheels::{Entry, StoredWheel, WheelCache, WheelKey};
