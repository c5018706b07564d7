//! What an edit yields: byte-range splices of a Python source, or the drift that says why it
//! cannot be placed. Shared by the syntax edits (`ops`) and unified diffs (`diff`), so neither
//! imports the other for it.

use std::ops::Range;

/// Replace `range` of the source with `text`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Splice {
    pub range: Range<usize>,
    pub text: String,
}

/// Why an edit cannot be placed: its anchor is missing, ambiguous, or holds something unexpected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    pub message: String,
    /// Where in the Python file the problem was seen, if somewhere specific.
    pub at: Option<usize>,
}

pub(super) fn drift(message: impl Into<String>, at: Option<usize>) -> Drift {
    Drift {
        message: message.into(),
        at,
    }
}

/// Apply splices (which must not overlap) to `source`.
pub fn splice(source: &str, splices: &[Splice]) -> String {
    let mut sorted: Vec<&Splice> = splices.iter().collect();
    sorted.sort_by_key(|s| std::cmp::Reverse(s.range.start));
    let mut out = source.to_string();
    for s in sorted {
        out.replace_range(s.range.clone(), &s.text);
    }
    out
}
