//! kiln's caches: the compiled-wheel cache and its portable archives.

pub mod archive;
pub mod wheels;
