//! Text from elsewhere on its way to a terminal. Fixed-width columns of user text (step ids,
//! required tools, `--vary` values, patch ids): a column is never wider than [`MAX`] characters
//! and a longer value is clipped with `…`. Rust's formatter panics on a width past 65,535, and
//! one 70,000-character name makes no table; the whole value stays in the JSON output and the
//! files kiln writes. Text from the wire or another program (a server's log, an HTTP body, a
//! GPU name from nvidia-smi) has its control characters escaped ([`escape_controls`]), and a
//! number or value quoted into a sentence is kept short ([`number`], [`quoted`]).

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

/// `s` with every control character (tab kept) and bidi control escaped as `\u{HEX}`: no
/// server output, GPU name or log line can move the cursor, recolour the terminal or reorder a
/// report's text.
pub fn escape_controls(s: &str) -> String {
    if !s.chars().any(needs_escape) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if needs_escape(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

fn needs_escape(c: char) -> bool {
    (c.is_control() && c != '\t')
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// The most characters of a value (a number, a task id, a raw token) quoted into a sentence.
pub(crate) const QUOTED: usize = 40;

/// A value read from elsewhere, quoted into a sentence (a verdict's reason): control
/// characters escaped, at most [`QUOTED`] characters (`…` when cut).
pub(crate) fn quoted(value: &str) -> String {
    clip(&escape_controls(value), QUOTED).into_owned()
}

/// `x` as a sentence shows it: as Rust writes it (`12`, `0.5`) while that is short, else in
/// scientific notation (`1e300`, not 301 digits; `5e-324`, not 326 characters).
pub(crate) fn number(x: f64) -> String {
    let plain = x.to_string();
    if plain.len() <= 20 {
        plain
    } else {
        format!("{x:e}")
    }
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

    #[test]
    fn escapes_terminal_controls_and_keeps_text() {
        assert_eq!(
            escape_controls("a\u{1b}[31mred\rb\tc\u{7}\u{202e}é\n"),
            "a\\u{1b}[31mred\\u{d}b\tc\\u{7}\\u{202e}é\\u{a}"
        );
        assert_eq!(escape_controls("plain"), "plain");
    }

    #[test]
    fn numbers_and_values_in_a_sentence_stay_short() {
        assert_eq!(number(12.0), "12");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(1e300), "1e300");
        assert_eq!(number(5e-324), "5e-324");
        assert_eq!(number(-1.5e25), "-1.5e25");
        let long = "9".repeat(741);
        let shown = quoted(&long);
        assert_eq!(shown.chars().count(), QUOTED);
        assert!(shown.ends_with('…'));
        assert_eq!(quoted("a\u{1b}b"), "a\\u{1b}b");
    }
}
