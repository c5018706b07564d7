//! Structured source patches: patch sets located by Python syntax, applied, checked and reverted.
//!
//! The library API a recipe step calls: [`apply_named`], [`check_named`], [`site_packages_of`].

pub mod diff;
mod engine;
mod journal;
mod kill_switch;
mod op_table;
pub mod ops;
pub mod package;
mod render;
pub mod set;
pub mod splice;
pub mod store;
pub mod syntax;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::Result;
use crate::paths::StatePaths;

pub use engine::WriteFile;
pub use package::site_packages_of;
pub use render::render;
pub use set::{load, PatchSet};

/// How apply / check / revert behave.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Compute and show the change (a unified diff), write nothing.
    pub dry_run: bool,
    /// apply: outside the set's version range; revert: files changed since apply.
    pub force: bool,
    /// Leave patches marked `experimental` out.
    pub skip_experimental: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Apply,
    Check,
    Revert,
}

/// Where a patch stands in a site-packages directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Every edit is in effect.
    Applied,
    /// Its anchors are found and its edits are not (all) there yet.
    NotApplied,
    /// Upstream fixed it in the installed version (`fixed_in`): nothing to do.
    Obsolete,
    /// An anchor is missing or ambiguous, or the file is gone: it cannot be placed.
    Drifted,
    /// Experimental, and left out on request.
    Skipped,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Applied => "applied",
            Status::NotApplied => "not applied",
            Status::Obsolete => "obsolete",
            Status::Drifted => "drifted",
            Status::Skipped => "skipped",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PatchReport {
    pub id: String,
    /// Relative to site-packages.
    pub file: String,
    /// For apply: the status found before applying.
    pub status: Status,
    pub experimental: bool,
    /// apply: this run made the edits.
    pub changed: bool,
    pub detail: Option<String>,
}

/// The outcome of apply / check / revert, printed as text or JSON.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub action: Action,
    pub set: String,
    pub package: String,
    /// The installed version, from METADATA.
    pub version: String,
    /// The range the set was written for.
    pub versions: String,
    pub in_range: bool,
    pub site_packages: PathBuf,
    pub patches: Vec<PatchReport>,
    /// Files written (apply, revert) or that would be (with --dry-run); relative to site-packages.
    pub changed_files: Vec<String>,
    pub pycache_removed: usize,
    /// --dry-run: the unified diff of the change.
    pub diff: Option<String>,
    /// check: every patch is applied or obsolete and every requirement holds; apply / revert: done.
    pub effective: bool,
    /// check: an apply of this set was killed before it finished (what its journal says).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<String>,
    /// apply / revert: files an interrupted earlier apply had changed, put back first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub undone: Vec<String>,
}

/// Apply a patch set (all-or-nothing); idempotent.
pub fn apply(
    set: &PatchSet,
    site_packages: &Path,
    paths: &StatePaths,
    opts: &Options,
) -> Result<Report> {
    engine::apply(set, site_packages, paths, *opts, &mut |path, bytes| {
        store::write_preserving(path, bytes)
    })
}

/// Apply with a custom file writer (tests use it to fail midway on purpose).
pub fn apply_with(
    set: &PatchSet,
    site_packages: &Path,
    paths: &StatePaths,
    opts: &Options,
    write: WriteFile<'_>,
) -> Result<Report> {
    engine::apply(set, site_packages, paths, *opts, write)
}

/// Report each patch as applied / not applied / obsolete / drifted, and an apply that was
/// interrupted (the journal in `paths`); writes nothing.
pub fn check(
    set: &PatchSet,
    site_packages: &Path,
    paths: &StatePaths,
    opts: &Options,
) -> Result<Report> {
    engine::check(set, site_packages, Some(paths), *opts)
}

/// Restore the byte-identical originals recorded by apply.
pub fn revert(
    set: &PatchSet,
    site_packages: &Path,
    paths: &StatePaths,
    opts: &Options,
) -> Result<Report> {
    engine::revert(set, site_packages, paths, *opts)
}

/// Apply a patch set given by shipped name or path: what a recipe step of kind `patch` calls.
pub fn apply_named(
    set: &str,
    site_packages: &Path,
    paths: &StatePaths,
    dry_run: bool,
) -> Result<Report> {
    apply(
        &load(set)?,
        site_packages,
        paths,
        &Options {
            dry_run,
            ..Options::default()
        },
    )
}

/// Check a patch set given by shipped name or path (a step's "is it still in effect" probe,
/// right after its apply, which finished any interrupted one).
pub fn check_named(set: &str, site_packages: &Path) -> Result<Report> {
    engine::check(&load(set)?, site_packages, None, Options::default())
}
