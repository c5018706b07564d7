//! kiln: provision a GPU LLM-serving stack from declarative recipes, start the tuned server, and
//! prove that it works.
//!
//! The binary (`src/main.rs`) uses `cli` and `commands`; the integration tests reach a few
//! library items directly, so the modules holding them stay `pub`. Everything else is
//! `pub(crate)` (the `unreachable_pub` lint keeps it so).

#[cfg(test)]
mod architecture;
pub mod bench;
pub(crate) mod bounded;
pub mod cache;
pub mod cli;
pub(crate) mod columns;
pub mod commands;
pub(crate) mod diagnostic;
pub(crate) mod dist;
pub(crate) mod doctor;
pub(crate) mod embedded;
pub(crate) mod engine;
pub mod error;
pub(crate) mod fatbin;
pub(crate) mod fs;
pub mod hash;
pub mod host;
pub(crate) mod image;
pub mod oci;
pub(crate) mod output;
pub mod patch;
pub mod paths;
pub mod pipeline;
pub(crate) mod process;
pub mod recipe;
pub(crate) mod redact;
pub(crate) mod report;
pub(crate) mod requires;
pub mod serve;
pub(crate) mod shell;
pub(crate) mod source;
pub(crate) mod steps;
pub(crate) mod tune;
pub mod units;
pub(crate) mod version;
