//! Structured source patches: patch sets located by Python syntax, applied, checked and reverted.

pub mod diff;
pub mod ops;
pub mod syntax;
pub mod version;
