//! kiln: provision a GPU LLM-serving stack from declarative recipes, start the tuned server, and
//! prove that it works.

pub mod bench;
pub mod cache;
pub mod cli;
pub mod commands;
pub mod diagnostic;
pub mod doctor;
pub mod engine;
pub mod error;
pub mod host;
pub mod image;
pub mod oci;
pub mod patch;
pub mod process;
pub mod recipe;
pub mod redact;
pub mod report;
pub mod requires;
pub mod serve;
pub mod steps;
pub mod tune;
