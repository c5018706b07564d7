//! The step engine: fingerprints, receipts, the pure plan, and parallel execution.

pub mod exec;
pub mod fingerprint;
pub mod plan;
pub mod state;

pub use exec::{execute, ExecOptions, RunSummary};
pub use plan::{plan, Plan, PlannedStep, Selection, Status};
