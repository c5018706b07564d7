//! kiln's caches: the compiled-wheel cache and its portable archives.

pub(crate) mod archive;
pub(crate) mod wheels;
