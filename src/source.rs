//! Loaded TOML source files (recipes, patch sets) and locations inside them, so every later check
//! can point at file:line:col.

use std::ops::Range;
use std::path::PathBuf;

use crate::diagnostic::{did_you_mean, Diagnostic};

#[derive(Debug)]
pub struct SourceFile {
    /// The path as shown to the user (`<embedded>/recipes/x.toml` for shipped recipes).
    pub path: PathBuf,
    pub text: String,
    /// The directory relative paths resolve against (for shipped files: their materialized copy).
    pub dir: Option<PathBuf>,
}

/// A byte range in one of the loaded files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Loc {
    pub file: usize,
    pub start: usize,
    pub end: usize,
}

#[derive(Debug, Default)]
pub(crate) struct Sources {
    pub files: Vec<SourceFile>,
}

impl Sources {
    pub(crate) fn add(&mut self, file: SourceFile) -> usize {
        self.files.push(file);
        self.files.len() - 1
    }

    // A location is made through the sources it points into (the file index is theirs).
    #[allow(clippy::unused_self)]
    pub(crate) fn loc(&self, file: usize, span: Range<usize>) -> Loc {
        Loc {
            file,
            start: span.start,
            end: span.end,
        }
    }

    pub(crate) fn diag(&self, loc: Loc, message: impl Into<String>) -> Diagnostic {
        let f = &self.files[loc.file];
        Diagnostic::at(&f.path, &f.text, loc.start..loc.end, message)
    }

    /// The location of bytes `offset..offset + len` of a string value's (unescaped) text.
    pub(crate) fn within(&self, loc: Loc, offset: usize, len: usize) -> Loc {
        Loc {
            file: loc.file,
            start: self.string_offset(loc, offset),
            end: self.string_offset(loc, offset + len),
        }
    }

    /// The source offset of byte `offset` of a string value's (unescaped) text.
    pub(crate) fn string_offset(&self, loc: Loc, offset: usize) -> usize {
        let text = &self.files[loc.file].text[loc.start..loc.end.max(loc.start)];
        let (quote, body) = if text.starts_with("\"\"\"") || text.starts_with("'''") {
            (&text[..1], 3)
        } else if text.starts_with('"') || text.starts_with('\'') {
            (&text[..1], 1)
        } else {
            return loc.start + offset;
        };
        if quote == "'" {
            return loc.start + body + offset;
        }
        // Basic strings: walk escapes so the column matches what the user typed.
        let raw = &text[body..];
        let (mut r, mut u) = (0, 0);
        let bytes = raw.as_bytes();
        while u < offset && r < raw.len() {
            if bytes[r] == b'\\' {
                let esc = match bytes.get(r + 1) {
                    Some(b'u') => (6, 1),
                    Some(b'U') => (10, 1),
                    _ => (2, 1),
                };
                r += esc.0;
                u += esc.1;
            } else {
                let ch = raw[r..].chars().next().map_or(1, char::len_utf8);
                r += ch;
                u += ch;
            }
        }
        loc.start + body + r
    }

    /// Parse one file's TOML into `T`, turning serde's messages into located diagnostics.
    pub(crate) fn parse<T: serde::de::DeserializeOwned>(
        &self,
        file: usize,
    ) -> Result<T, Diagnostic> {
        let f = &self.files[file];
        toml::from_str(&f.text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            let (mut message, hint) = explain(e.message());
            if message == "duplicate key" {
                let key = f.text.get(span.clone()).unwrap_or_default().trim();
                message = format!("duplicate key `{key}`");
            }
            Diagnostic::at(&f.path, &f.text, span, message).with_hint_opt(hint)
        })
    }
}

/// Rephrase a serde/toml message for a person, with a did-you-mean where it applies.
fn explain(message: &str) -> (String, Option<String>) {
    let message = message.trim();
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let (key, expected) = rest.split_once('`').unwrap_or((rest, ""));
        let candidates: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
        let hint = match did_you_mean(key, candidates.iter().copied()) {
            Some(best) => format!("did you mean `{best}`?"),
            None if candidates.is_empty() => "remove it".to_string(),
            None => format!("valid keys here: {}", candidates.join(", ")),
        };
        return (format!("unknown key `{key}`"), Some(hint));
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        let key = rest.split('`').next().unwrap_or(rest);
        return (
            format!("missing required key `{key}`"),
            Some(format!("add `{key} = ...` to this table")),
        );
    }
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = message.strip_prefix(prefix) {
            let (found, expected) = rest.rsplit_once(", expected ").unwrap_or((rest, ""));
            let (wanted, hint) = expected_type(expected);
            if prefix == "invalid value: " {
                return (
                    format!("invalid value: expected {wanted}, found {found}"),
                    Some(format!("use {wanted}")),
                );
            }
            return (
                format!("wrong type: expected {wanted}, found {found}"),
                Some(hint),
            );
        }
    }
    if message.starts_with("invalid basic string") || message.starts_with("invalid literal string")
    {
        return (
            message.to_string(),
            Some("a string must end with its quote on the same line (use `\"\"\"` for text over several lines)".into()),
        );
    }
    if message.starts_with("duplicate key") {
        return (
            message.to_string(),
            Some("each key may appear once per table".into()),
        );
    }
    (
        message.to_string(),
        Some("see docs/recipes.md for the recipe format".into()),
    )
}

/// serde's name for an expected type → words for a person, and how to write such a value.
fn expected_type(expected: &str) -> (String, String) {
    let (wanted, hint) = match expected {
        "u32" | "u64" | "usize" => (
            "a whole number ≥ 0",
            "write a number without quotes, e.g. `3`",
        ),
        "a sequence" => ("a list", "write a list in brackets, e.g. `[\"a\", \"b\"]`"),
        "a boolean" => (
            "`true` or `false`",
            "write `true` or `false` without quotes",
        ),
        "a string" => ("a string", "put the value in quotes, e.g. `\"8\"`"),
        "a map" => ("a table", "write a table, e.g. `{ KEY = \"value\" }`"),
        other => {
            return (
                other.to_string(),
                "see docs/recipes.md for the recipe format".into(),
            )
        }
    };
    (wanted.to_string(), hint.to_string())
}
