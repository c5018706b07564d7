//! The step engine: fingerprints, receipts, the pure plan, and parallel execution.

mod cache_key;
pub(crate) mod exec;
pub(crate) mod fingerprint;
mod flush;
pub(crate) mod fresh;
mod index;
pub(crate) mod plan;
mod progress;
mod restore;
mod schedule;
pub(crate) mod state;

pub(crate) use exec::{execute, report_fresh, ExecOptions};
pub(crate) use plan::{plan, Plan, Selection, Status};
