//! What loading hands validation: the caller's options and the files read, in merge order.
//! A leaf shared by `load` (which fills it) and `validate` (which reads it), so neither imports
//! the other's file.

use super::wire;
use crate::host::Facts;
use crate::paths::StatePaths;
use crate::source::Sources;

/// What a caller sets when loading a recipe.
pub struct LoadOptions<'a> {
    /// `--set key=value`, in order.
    pub overrides: &'a [(String, String)],
    pub facts: &'a Facts,
    /// The state directory (and its cache) the recipe's `${kiln.*}` paths point into.
    pub paths: &'a StatePaths,
}

pub(super) struct Loaded {
    pub sources: Sources,
    /// Parsed files, imports before the files that import them; the root is last.
    pub files: Vec<(usize, wire::File)>,
}
