//! kiln: provision a GPU LLM-serving stack from declarative recipes, start the tuned server, and
//! prove that it works.

#[cfg(test)]
mod architecture;
pub mod bench;
pub mod cache;
pub mod cli;
pub mod commands;
pub mod diagnostic;
pub mod dist;
pub mod doctor;
pub mod embedded;
pub mod engine;
pub mod error;
pub mod fs;
pub mod hash;
pub mod host;
pub mod image;
pub mod oci;
pub mod patch;
pub mod paths;
pub mod pipeline;
pub mod process;
pub mod recipe;
pub mod redact;
pub mod report;
pub mod serve;
pub mod shell;
pub mod source;
pub mod steps;
pub mod units;
pub mod version;
