//! OCI distribution: a small HTTP client for registries (the transport the wheel cache's remote
//! copy, `cache::remote`, and image pushes use), its token auth, and image references.

pub(crate) mod auth;
pub mod client;
pub mod reference;

pub use client::Registry;
pub use reference::Reference;
