//! Unified diffs: parsing hunks, placing them by their context lines (never by line numbers
//! alone), and rendering a diff for `--dry-run`.

use super::splice::{Drift, Splice};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    /// 1-based line the hunk claims to start at in the old file (a hint for ambiguous context).
    pub old_start: usize,
    /// Context and removed lines, each with its `\n`.
    pub old: String,
    /// Context and added lines, each with its `\n`.
    pub new: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnifiedDiff {
    pub hunks: Vec<Hunk>,
}

impl UnifiedDiff {
    /// Parse the hunks of a unified diff (file headers, if present, are skipped).
    pub fn parse(text: &str) -> Result<UnifiedDiff, String> {
        let mut hunks: Vec<Hunk> = Vec::new();
        let mut current: Option<(Hunk, usize, usize)> = None;
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            if let Some(header) = line.strip_prefix("@@ ") {
                if let Some((h, old_left, new_left)) = current.take() {
                    if old_left + new_left > 0 {
                        return Err(format!("line {number}: the hunk before this one is shorter than its header says"));
                    }
                    hunks.push(h);
                }
                let (old_start, old_len, new_len) = parse_header(header)
                    .ok_or_else(|| format!("line {number}: `{line}` is not a hunk header"))?;
                current = Some((
                    Hunk {
                        old_start,
                        old: String::new(),
                        new: String::new(),
                    },
                    old_len,
                    new_len,
                ));
                continue;
            }
            let Some((hunk, old_left, new_left)) = current.as_mut() else {
                if line.starts_with("--- ")
                    || line.starts_with("+++ ")
                    || line.starts_with("diff ")
                    || line.trim().is_empty()
                {
                    continue;
                }
                return Err(format!(
                    "line {number}: text before the first `@@` hunk header: `{line}`"
                ));
            };
            if line == "\\ No newline at end of file" {
                continue;
            }
            let (tag, body) = line.split_at(line.len().min(1));
            let body = format!("{body}\n");
            let take = |left: &mut usize| -> Result<(), String> {
                *left = left.checked_sub(1).ok_or_else(|| {
                    format!("line {number}: the hunk is longer than its header says")
                })?;
                Ok(())
            };
            match tag {
                " " | "" => {
                    take(old_left)?;
                    take(new_left)?;
                    hunk.old.push_str(&body);
                    hunk.new.push_str(&body);
                }
                "-" => {
                    take(old_left)?;
                    hunk.old.push_str(&body);
                }
                "+" => {
                    take(new_left)?;
                    hunk.new.push_str(&body);
                }
                _ => {
                    return Err(format!(
                        "line {number}: a hunk line must start with ' ', '-' or '+': `{line}`"
                    ))
                }
            }
        }
        match current {
            Some((h, 0, 0)) => hunks.push(h),
            Some(_) => return Err("the last hunk is shorter than its header says".into()),
            None => return Err("no `@@` hunk found".into()),
        }
        Ok(UnifiedDiff { hunks })
    }

    /// Place every hunk by its context: already applied when each hunk's new text is present and
    /// its old text is not.
    pub fn locate(&self, source: &str) -> Result<Vec<Splice>, Drift> {
        let mut splices = Vec::new();
        let mut applied = 0;
        for (i, hunk) in self.hunks.iter().enumerate() {
            let olds = line_matches(source, &hunk.old);
            let news = line_matches(source, &hunk.new);
            let label = format!("hunk {} (@@ -{})", i + 1, hunk.old_start);
            if olds.is_empty() {
                if !news.is_empty() {
                    applied += 1;
                    continue;
                }
                return Err(Drift {
                    message: format!("{label}: its context and removed lines are not in the file"),
                    at: None,
                });
            }
            let at = if olds.len() == 1 {
                olds[0]
            } else {
                let hinted = olds
                    .iter()
                    .copied()
                    .find(|&o| super::syntax::line_of(source, o) == hunk.old_start);
                hinted.ok_or_else(|| Drift {
                    message: format!(
                        "{label}: ambiguous anchor: its context matches {} places",
                        olds.len()
                    ),
                    at: Some(olds[1]),
                })?
            };
            splices.push(Splice {
                range: at..at + hunk.old.len(),
                text: hunk.new.clone(),
            });
        }
        if applied > 0 && !splices.is_empty() {
            return Err(Drift {
                message: format!(
                    "{applied} of {} hunks are already applied and the others are not",
                    self.hunks.len()
                ),
                at: None,
            });
        }
        Ok(splices)
    }
}

/// `-a,b +c,d @@ ...` → (a, b, d); a missing count means 1.
fn parse_header(header: &str) -> Option<(usize, usize, usize)> {
    let mut parts = header.split_whitespace();
    let range = |p: &str| -> Option<(usize, usize)> {
        match p.split_once(',') {
            Some((s, n)) => Some((s.parse().ok()?, n.parse().ok()?)),
            None => Some((p.parse().ok()?, 1)),
        }
    };
    let (old_start, old_len) = range(parts.next()?.strip_prefix('-')?)?;
    let (_, new_len) = range(parts.next()?.strip_prefix('+')?)?;
    (parts.next()? == "@@").then_some((old_start, old_len, new_len))
}

/// Byte offsets where `needle` (whole lines) occurs in `source` starting at a line start.
fn line_matches(source: &str, needle: &str) -> Vec<usize> {
    if needle.is_empty() {
        return vec![];
    }
    let mut found = Vec::new();
    let mut start = 0;
    while let Some(i) = source[start..].find(needle) {
        let at = start + i;
        if at == 0 || source.as_bytes()[at - 1] == b'\n' {
            found.push(at);
        }
        start = at + 1;
    }
    found
}

/// A unified diff between two versions of a file, with `a/` and `b/` headers.
pub fn render(path: &str, old: &str, new: &str) -> String {
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::splice::splice;

    const DIFF: &str = "--- a/m.py\n+++ b/m.py\n@@ -2,3 +2,3 @@\n a = 1\n-b = 2\n+b = 3\n c = 4\n";

    #[test]
    fn applies_by_context_then_reports_applied() {
        let diff = UnifiedDiff::parse(DIFF).unwrap();
        let source = "# moved down\n\nx = 0\na = 1\nb = 2\nc = 4\n";
        let splices = diff.locate(source).unwrap();
        let patched = splice(source, &splices);
        assert_eq!(patched, "# moved down\n\nx = 0\na = 1\nb = 3\nc = 4\n");
        assert_eq!(diff.locate(&patched).unwrap(), vec![]);
    }

    #[test]
    fn missing_and_ambiguous_context() {
        let diff = UnifiedDiff::parse(DIFF).unwrap();
        let missing = diff.locate("a = 1\nb = 5\nc = 4\n").unwrap_err();
        assert_eq!(
            missing.message,
            "hunk 1 (@@ -2): its context and removed lines are not in the file"
        );
        let twice = "a = 1\nb = 2\nc = 4\n\na = 1\nb = 2\nc = 4\n";
        let ambiguous = diff.locate(twice).unwrap_err();
        assert_eq!(
            ambiguous.message,
            "hunk 1 (@@ -2): ambiguous anchor: its context matches 2 places"
        );
    }

    #[test]
    fn rejects_malformed_diffs() {
        assert_eq!(
            UnifiedDiff::parse("a = 1\n").unwrap_err(),
            "line 1: text before the first `@@` hunk header: `a = 1`"
        );
        assert_eq!(
            UnifiedDiff::parse("@@ -1,2 +1,2 @@\n a\n").unwrap_err(),
            "the last hunk is shorter than its header says"
        );
        assert_eq!(UnifiedDiff::parse("").unwrap_err(), "no `@@` hunk found");
    }

    #[test]
    fn renders_with_headers() {
        let d = render("m.py", "a\nb\n", "a\nc\n");
        assert_eq!(d, "--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n");
    }
}
