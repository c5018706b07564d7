//! Source-located diagnostics: `file:line:col`, the offending line with a caret, and a `hint:`.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// A problem located in a source file (a recipe, a patch set, a toolchain file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub message: String,
    pub file: PathBuf,
    pub line: usize,
    pub col: usize,
    /// The full text of the offending line (no trailing newline).
    pub line_text: String,
    /// Caret width, at least 1.
    pub width: u32,
    pub hint: Option<String>,
    /// The line is not shown: the file is not a TOML text file, its lines may be secrets.
    pub hidden: bool,
}

impl Diagnostic {
    /// Locate `span` (byte offsets) inside `source`.
    pub fn at(file: &Path, source: &str, span: Range<usize>, message: impl Into<String>) -> Self {
        let start = span.start.min(source.len());
        let line_start = source[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = source[start..]
            .find('\n')
            .map_or(source.len(), |i| start + i);
        let line = source[..start].matches('\n').count() + 1;
        let col = source[line_start..start].chars().count() + 1;
        let end = span.end.clamp(start, line_end);
        let width = u32::try_from(source[start..end].chars().count().max(1)).unwrap_or(u32::MAX);
        Diagnostic {
            message: message.into(),
            file: file.to_path_buf(),
            line,
            col,
            line_text: source[line_start..line_end]
                .trim_end_matches('\r')
                .to_string(),
            width,
            hint: None,
            hidden: false,
        }
    }

    /// Keep the location but never print the line (for a file that is not TOML text).
    pub fn hide_line(mut self) -> Self {
        self.line_text.clear();
        self.hidden = true;
        self
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn with_hint_opt(mut self, hint: Option<String>) -> Self {
        self.hint = hint;
        self
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gutter = self.line.to_string().len();
        let pad = " ".repeat(gutter);
        writeln!(f, "{}", self.message)?;
        writeln!(
            f,
            "{pad}--> {}:{}:{}",
            self.file.display(),
            self.line,
            self.col
        )?;
        writeln!(f, "{pad} |")?;
        if self.hidden {
            write!(
                f,
                "{pad} = line not shown: the file is not a .toml text file"
            )?;
            if let Some(hint) = &self.hint {
                write!(f, "\nhint: {hint}")?;
            }
            return Ok(());
        }
        writeln!(f, "{} | {}", self.line, self.line_text)?;
        let lead: String = self
            .line_text
            .chars()
            .take(self.col - 1)
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        write!(f, "{pad} | {lead}{}", "^".repeat(self.width as usize))?;
        if let Some(hint) = &self.hint {
            write!(f, "\nhint: {hint}")?;
        }
        Ok(())
    }
}

/// The closest candidate to `word` by edit distance, if it is close enough to be a likely typo.
pub(crate) fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let len = word.chars().count();
    let limit = (len / 3).max(1);
    // No typo is that long; and the distance is at least the difference in length (a hostile
    // 10,000-character key must not cost seconds).
    if len > 256 {
        return None;
    }
    candidates
        .into_iter()
        .filter(|c| c.chars().count().abs_diff(len) <= limit)
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Optimal string alignment: insertions, deletions, substitutions and adjacent swaps
/// (`knid` → `kind`) each cost one.
fn edit_distance(a: &str, b: &str) -> usize {
    strsim::osa_distance(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locates_line_and_column() {
        let src = "a = 1\nbb = 2\n";
        let d = Diagnostic::at(Path::new("r.toml"), src, 6..8, "bad key");
        assert_eq!((d.line, d.col, d.width), (2, 1, 2));
        assert_eq!(d.line_text, "bb = 2");
        assert_eq!(
            d.to_string(),
            "bad key\n --> r.toml:2:1\n  |\n2 | bb = 2\n  | ^^"
        );
    }

    #[test]
    fn a_hidden_line_is_never_printed() {
        let src = "root:$6$secret:19000::::::\n";
        let d = Diagnostic::at(Path::new("/etc/shadow"), src, 4..5, "expected `=`").hide_line();
        let shown = d.to_string();
        assert!(!shown.contains("secret"), "{shown}");
        assert_eq!(
            shown,
            "expected `=`\n --> /etc/shadow:1:5\n  |\n  = line not shown: the file is not a .toml text file"
        );
    }

    #[test]
    fn suggests_close_names_only() {
        assert_eq!(did_you_mean("neds", ["needs", "env"]), Some("needs"));
        assert_eq!(did_you_mean("zzzzzz", ["needs", "env"]), None);
        assert_eq!(did_you_mean("knid", ["id", "kind"]), Some("kind"));
    }
}
