//! Fixed-width columns of user text (step ids, required tools, `--vary` values, patch ids): a
//! column is never wider than [`MAX`] characters and a longer value is clipped with `…`. Rust's
//! formatter panics on a width past 65,535, and one 70,000-character name makes no table; the
//! whole value stays in the JSON output and the files kiln writes.

use std::borrow::Cow;

/// The widest a column of user text gets, in characters.
pub(crate) const MAX: usize = 60;

/// The width of a column holding `values`: the widest of them, at least `min`, at most [`MAX`].
pub(crate) fn width<'a>(values: impl IntoIterator<Item = &'a str>, min: usize) -> usize {
    values
        .into_iter()
        .map(|v| v.chars().count())
        .max()
        .unwrap_or(0)
        .max(min)
        .min(MAX.max(min))
}

/// `value` as a cell of a column `width` characters wide: clipped with `…` past it.
pub(crate) fn cell(value: &str, width: usize) -> Cow<'_, str> {
    clip(value, width)
}

/// `value` in at most `max` characters, the last one `…` when it was cut (free text after a
/// table's columns: a reason, a status).
pub(crate) fn clip(value: &str, max: usize) -> Cow<'_, str> {
    if value.char_indices().nth(max).is_none() {
        return Cow::Borrowed(value);
    }
    let keep: String = value.chars().take(max.saturating_sub(1)).collect();
    Cow::Owned(format!("{keep}…"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_column_is_as_wide_as_its_widest_value_up_to_the_cap() {
        assert_eq!(width(["ab", "abcd"], 3), 4);
        assert_eq!(width(Vec::<&str>::new(), 7), 7);
        let long = "é".repeat(70_000);
        assert_eq!(width([long.as_str(), "x"], 0), MAX);
        let shown = cell(&long, MAX);
        assert_eq!(shown.chars().count(), MAX);
        assert!(shown.ends_with('…'));
        assert_eq!(cell("short", MAX), "short");
        assert_eq!(clip(&"x".repeat(MAX), MAX).chars().count(), MAX);
        assert_eq!(clip("", 0), "");
    }
}
