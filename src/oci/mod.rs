//! OCI distribution: a small HTTP client for registries, and kiln's compiled-wheel cache carried
//! as OCI artifacts (one blob per wheel, the cache key in the manifest's annotations).

pub(crate) mod auth;
pub mod client;
pub mod reference;
pub mod wheels;

pub use client::Registry;
pub use reference::Reference;
pub use wheels::{
    pull_wheels, push_wheels, read_wheel_cache, PullSummary, PushSummary, WheelEntry,
};
