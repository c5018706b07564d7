//! Text that came from the wire (a server's log, an HTTP body, a streamed piece) on its way to a
//! terminal or a report: control characters and bidirectional overrides escaped (`\u{1b}`), so
//! no server output can move the cursor, recolour the terminal or reorder a report's text.

/// `s` with every control character (tab kept) and bidi control escaped as `\u{HEX}`.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_terminal_controls_and_keeps_text() {
        assert_eq!(
            escape_controls("a\u{1b}[31mred\rb\tc\u{7}\u{202e}é\n"),
            "a\\u{1b}[31mred\\u{d}b\tc\\u{7}\\u{202e}é\\u{a}"
        );
        assert_eq!(escape_controls("plain"), "plain");
    }
}
