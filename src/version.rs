//! Versions, one type for all of kiln: Python package versions (the PEP 440 subset wheels use),
//! ranges like `>=0.5.9, <0.6`, and the same ordering for tool, driver and toolkit versions
//! (`12.0`, `580.82.07`) in recipe conditions and doctor checks.

use std::cmp::Ordering;
use std::fmt;

/// A parsed version: release numbers, then optional pre-release, post-release and dev parts.
/// A local part (`+cu130`) is kept for display and ignored when comparing, as pip does for ranges.
#[derive(Debug, Clone)]
pub struct Version {
    text: String,
    release: Vec<u64>,
    /// (0 = a, 1 = b, 2 = rc, number)
    pre: Option<(u8, u64)>,
    post: Option<u64>,
    dev: Option<u64>,
}

impl Version {
    pub fn parse(text: &str) -> Option<Version> {
        let trimmed = text.trim();
        let lower = trimmed.to_ascii_lowercase();
        let public = lower.split('+').next()?;
        let public = public.strip_prefix('v').unwrap_or(public);
        let (release_text, mut rest) = split_release(public);
        let release = release_text
            .split('.')
            .map(|p| p.parse::<u64>().ok())
            .collect::<Option<Vec<_>>>()?;
        let mut version = Version {
            text: trimmed.to_string(),
            release,
            pre: None,
            post: None,
            dev: None,
        };
        for (kind, tags) in [
            (0u8, &["alpha", "a"][..]),
            (1, &["beta", "b"]),
            (2, &["rc", "c", "pre", "preview"]),
        ] {
            if let Some((n, after)) = take_tag(rest, tags) {
                version.pre = Some((kind, n));
                rest = after;
                break;
            }
        }
        if let Some((n, after)) = take_tag(rest, &["post", "rev", "r"]) {
            version.post = Some(n);
            rest = after;
        }
        if let Some((n, after)) = take_tag(rest, &["dev"]) {
            version.dev = Some(n);
            rest = after;
        }
        rest.is_empty().then_some(version)
    }

    /// Sort key per PEP 440: dev releases sort before pre-releases, which sort before the release.
    fn key(&self) -> SortKey {
        let mut release = self.release.clone();
        while release.len() > 1 && release.last() == Some(&0) {
            release.pop();
        }
        let pre = match (self.pre, self.post, self.dev) {
            (Some((k, n)), _, _) => (1 + k, n),
            (None, None, Some(_)) => (0, 0),
            _ => (9, 0),
        };
        let post = self.post.map_or((0, 0), |n| (1, n));
        let dev = self.dev.map_or((1, 0), |n| (0, n));
        (release, pre, post, dev)
    }
}

/// (release without trailing zeros, pre-release rank, post-release rank, dev rank).
type SortKey = (Vec<u64>, (u8, u64), (u8, u64), (u8, u64));

fn split_release(s: &str) -> (&str, &str) {
    let end = s
        .char_indices()
        .find(|(i, c)| {
            !(c.is_ascii_digit()
                || (*c == '.' && s[i + 1..].starts_with(|d: char| d.is_ascii_digit())))
        })
        .map_or(s.len(), |(i, _)| i);
    (&s[..end], &s[end..])
}

/// `.post1`, `-post1`, `post1`, `rc2`: the tag, then an optional number (default 0).
fn take_tag<'a>(s: &'a str, tags: &[&str]) -> Option<(u64, &'a str)> {
    let s = s.strip_prefix(['.', '-', '_']).unwrap_or(s);
    let tag = tags.iter().find(|t| s.starts_with(*t))?;
    let s = &s[tag.len()..];
    let s = s.strip_prefix(['.', '-', '_']).unwrap_or(s);
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n = if digits == 0 {
        0
    } else {
        s[..digits].parse().ok()?
    };
    Some((n, &s[digits..]))
}

impl PartialEq for Version {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Version {}
impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Ge,
    Gt,
    Le,
    Lt,
    Eq,
    Ne,
    Compatible,
}

/// A comma-separated list of clauses, all of which must hold: `>=0.5.9, <0.6`.
#[derive(Debug, Clone)]
pub struct Range {
    text: String,
    clauses: Vec<(Op, Version)>,
}

impl Range {
    /// Parse a range; the error names the clause that is not understood.
    pub fn parse(text: &str) -> Result<Range, String> {
        let mut clauses = Vec::new();
        for clause in text.split(',').map(str::trim) {
            let (op, rest) = [
                (">=", Op::Ge),
                ("<=", Op::Le),
                ("==", Op::Eq),
                ("!=", Op::Ne),
                ("~=", Op::Compatible),
                (">", Op::Gt),
                ("<", Op::Lt),
            ]
            .iter()
            .find_map(|(p, op)| clause.strip_prefix(p).map(|r| (*op, r)))
            .ok_or_else(|| {
                format!("`{clause}` does not start with one of >=, <=, ==, !=, ~=, >, <")
            })?;
            let version = Version::parse(rest)
                .ok_or_else(|| format!("`{}` is not a version", rest.trim()))?;
            if op == Op::Compatible && version.release.len() < 2 {
                return Err(format!("`{clause}`: ~= needs at least two release numbers"));
            }
            clauses.push((op, version));
        }
        Ok(Range {
            text: text.trim().to_string(),
            clauses,
        })
    }

    pub fn contains(&self, v: &Version) -> bool {
        self.clauses.iter().all(|(op, bound)| match op {
            Op::Ge => v >= bound,
            Op::Gt => v > bound,
            Op::Le => v <= bound,
            Op::Lt => v < bound,
            Op::Eq => v == bound,
            Op::Ne => v != bound,
            Op::Compatible => {
                let prefix = &bound.release[..bound.release.len() - 1];
                v >= bound
                    && v.release.len() >= prefix.len()
                    && &v.release[..prefix.len()] == prefix
            }
        })
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Order two version texts: as versions when both parse (`12` == `12.0`, `1.10` > `1.9`,
/// `580.82.07`), else as text (`linux` vs `macos`).
pub(crate) fn compare(a: &str, b: &str) -> Ordering {
    match (Version::parse(a), Version::parse(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        _ => a.cmp(b),
    }
}

/// The release numbers a version text starts with, for texts that are not PEP 440 versions
/// (`12.8+cu128` → [12, 8], `580.82.07` → [580, 82, 7]).
pub(crate) fn numbers(text: &str) -> Vec<u64> {
    text.split(['.', '-', '+'])
        .map_while(|p| p.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap_or_else(|| panic!("{s} parses"))
    }

    #[test]
    fn orders_like_pip() {
        let ordered = [
            "0.5.9.dev1",
            "0.5.9rc1",
            "0.5.9",
            "0.5.9.post1",
            "0.5.10",
            "0.5.13.post1",
            "0.5.14",
            "0.6",
        ];
        for pair in ordered.windows(2) {
            assert!(v(pair[0]) < v(pair[1]), "{} < {}", pair[0], pair[1]);
        }
        assert_eq!(v("0.6"), v("0.6.0"));
        assert_eq!(v("2.9.1+cu130"), v("2.9.1"));
        assert_eq!(v("2.9.1+cu130").to_string(), "2.9.1+cu130");
    }

    #[test]
    fn ranges() {
        let r = Range::parse(">=0.5.9, <0.6").unwrap();
        assert!(r.contains(&v("0.5.9")) && r.contains(&v("0.5.23")));
        assert!(!r.contains(&v("0.5.8")) && !r.contains(&v("0.6.0")));
        let compatible = Range::parse("~=0.6.3").unwrap();
        assert!(compatible.contains(&v("0.6.9")) && !compatible.contains(&v("0.7.0")));
        assert!(Range::parse("==0.6.3").unwrap().contains(&v("0.6.3")));
    }

    #[test]
    fn loose_comparison_and_leading_numbers() {
        assert_eq!(compare("12", "12.0"), Ordering::Equal);
        assert_eq!(compare("1.10", "1.9"), Ordering::Greater);
        assert_eq!(compare("580.159.04", "580.95.05"), Ordering::Greater);
        assert_eq!(compare("570.172.08", "580"), Ordering::Less);
        assert_eq!(compare("linux", "macos"), Ordering::Less);
        assert_eq!(numbers("12.8+cu128"), [12, 8]);
    }

    #[test]
    fn rejects_garbage() {
        assert!(Version::parse("0.5.x").is_none());
        assert_eq!(
            Range::parse("0.5").unwrap_err(),
            "`0.5` does not start with one of >=, <=, ==, !=, ~=, >, <"
        );
        assert_eq!(
            Range::parse(">=zero").unwrap_err(),
            "`zero` is not a version"
        );
    }
}
