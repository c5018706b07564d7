//! `${name}` / `${name|filter}` templates: parsing, filters, and shell-safe expansion.
//!
//! `$$` is a literal `$` (so `$${x}` is the text `${x}`); a `$` not followed by `{` is literal. A value is substituted as data: in an argv element it stays inside that
//! one argument; in shell text it is single-quoted, so `$(...)` in a value is never executed.

use crate::shell::quote as shell_quote;

/// A parsed template: literal text and variable references with their byte offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Lit(String),
    Var(VarRef),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VarRef {
    pub name: String,
    /// `${name:-fallback}`: used when `name` has no value (e.g. no GPU on this host).
    pub default: Option<String>,
    pub filters: Vec<String>,
    /// Byte offset of `${` in the template text, and the length through `}`.
    pub offset: usize,
    pub len: usize,
}

/// A template syntax error at a byte offset within the template text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    pub offset: usize,
    pub len: usize,
    pub message: String,
    pub hint: &'static str,
}

/// The longest value one `${}` expansion may produce (a template, or a variable's value).
pub const MAX_VALUE_BYTES: usize = 1 << 20;
/// How many variables may be in the middle of expanding at once (`a` uses `b` uses `c` ...).
pub const MAX_DEPTH: usize = 64;

pub const FILTERS: &[&str] = &[
    "nodot", "major", "minor", "lower", "upper", "quote", "target",
];

impl Template {
    /// A template that expands to `text` itself: a `--set` value is data, never a template
    /// (`$$` stays two dollars, `${x}` stays those four characters).
    pub fn literal(text: &str) -> Template {
        Template {
            parts: if text.is_empty() {
                vec![]
            } else {
                vec![Part::Lit(text.to_string())]
            },
        }
    }

    pub fn parse(text: &str) -> Result<Template, SyntaxError> {
        let mut parts = Vec::new();
        let mut lit = String::new();
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < text.len() {
            if bytes[i] != b'$' {
                let ch = text[i..].chars().next().expect("in bounds");
                lit.push(ch);
                i += ch.len_utf8();
                continue;
            }
            match bytes.get(i + 1) {
                Some(b'$') => {
                    lit.push('$');
                    i += 2;
                }
                Some(b'{') => {
                    let close = text[i..].find('}').ok_or(SyntaxError {
                        offset: i,
                        len: text.len() - i,
                        message: "unclosed `${` in interpolation".into(),
                        hint: "close it with `}`, or write `$$` for a literal `$`",
                    })?;
                    let inner = &text[i + 2..i + close];
                    let var = parse_ref(inner, i, close + 1)?;
                    if !lit.is_empty() {
                        parts.push(Part::Lit(std::mem::take(&mut lit)));
                    }
                    parts.push(Part::Var(var));
                    i += close + 1;
                }
                _ => {
                    lit.push('$');
                    i += 1;
                }
            }
        }
        if !lit.is_empty() {
            parts.push(Part::Lit(lit));
        }
        Ok(Template { parts })
    }

    pub fn vars(&self) -> impl Iterator<Item = &VarRef> {
        self.parts.iter().filter_map(|p| match p {
            Part::Var(v) => Some(v),
            Part::Lit(_) => None,
        })
    }

    /// Expand with `lookup`, quoting each substituted value as `quoting` says; past
    /// [`MAX_VALUE_BYTES`] the expansion stops with `too_long()`, whatever the recipe nests.
    pub fn expand<E>(
        &self,
        quoting: Quoting,
        mut lookup: impl FnMut(&VarRef) -> Result<String, E>,
        too_long: impl FnOnce() -> E,
    ) -> Result<String, E> {
        let mut out = String::new();
        for part in &self.parts {
            if out.len() > MAX_VALUE_BYTES {
                return Err(too_long());
            }
            match part {
                Part::Lit(s) => out.push_str(s),
                Part::Var(v) => {
                    let value = apply_filters(&lookup(v)?, &v.filters);
                    let quoted = v.filters.iter().any(|f| f == "quote");
                    match quoting {
                        Quoting::Shell if !quoted => out.push_str(&shell_quote(&value)),
                        Quoting::Python => out.push_str(&python_quote(&value)),
                        _ => out.push_str(&value),
                    }
                }
            }
        }
        if out.len() > MAX_VALUE_BYTES {
            return Err(too_long());
        }
        Ok(out)
    }
}

fn parse_ref(inner: &str, offset: usize, len: usize) -> Result<VarRef, SyntaxError> {
    let err = |message: String, hint: &'static str| SyntaxError {
        offset,
        len,
        message,
        hint,
    };
    let mut pieces = inner.split('|').map(str::trim);
    let head = pieces.next().unwrap_or_default();
    let (name, default) = match head.split_once(":-") {
        Some((n, d)) => (n.trim(), Some(d.to_string())),
        None => (head, None),
    };
    if name.is_empty() {
        return Err(err(
            "empty variable name in `${}`".into(),
            "name a variable from [vars], e.g. `${prefix}`",
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(err(
            format!("invalid variable name `{name}`"),
            "variable names use letters, digits, `_`, `-` and `.`",
        ));
    }
    let mut filters = Vec::new();
    for f in pieces {
        if !FILTERS.contains(&f) {
            return Err(err(
                format!("unknown filter `{f}`"),
                "filters: nodot (12.0→120), major (12.0→12), minor, lower, upper, quote",
            ));
        }
        filters.push(f.to_string());
    }
    Ok(VarRef {
        name: name.to_string(),
        default,
        filters,
        offset,
        len,
    })
}

fn apply_filters(value: &str, filters: &[String]) -> String {
    let mut v = value.to_string();
    for f in filters {
        v = match f.as_str() {
            "nodot" => v.replace('.', ""),
            "major" => v.split('.').next().unwrap_or_default().to_string(),
            "minor" => v.split('.').nth(1).unwrap_or("0").to_string(),
            "lower" => v.to_lowercase(),
            "upper" => v.to_uppercase(),
            "quote" => shell_quote(&v),
            "target" => super::cuda_arch::target(&v),
            _ => v,
        };
    }
    v
}

/// How substituted values are written into the surrounding text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quoting {
    /// As is: the text is one argv element, a path or a value.
    None,
    /// As one POSIX shell word: the text is a `sh -c` script.
    Shell,
    /// As a Python string literal: the text is Python source (`verify`).
    Python,
}

/// `s` as a Python string literal (JSON strings are valid Python literals).
pub fn python_quote(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(t: &str, shell: bool) -> String {
        let q = if shell { Quoting::Shell } else { Quoting::None };
        Template::parse(t)
            .unwrap()
            .expand::<()>(
                q,
                |v| {
                    Ok(match v.name.as_str() {
                        "arch" => "12.0".into(),
                        "evil" => "$(touch pwned); `id` 'x'".into(),
                        _ => String::new(),
                    })
                },
                || (),
            )
            .unwrap()
    }

    #[test]
    fn filters_and_escapes() {
        assert_eq!(expand("sm_${arch|nodot} $$HOME", false), "sm_120 $HOME");
        assert_eq!(expand("${arch|major}", false), "12");
        let t = Template::parse("${host.gpu.cc:-9.0|nodot}").unwrap();
        let v = t.vars().next().unwrap();
        assert_eq!(
            (v.name.as_str(), v.default.as_deref()),
            ("host.gpu.cc", Some("9.0"))
        );
    }

    #[test]
    fn an_expansion_past_the_size_limit_stops() {
        let t = Template::parse(&"${big}".repeat(1000)).unwrap();
        let mut calls = 0;
        let r = t.expand(
            Quoting::None,
            |_| {
                calls += 1;
                Ok::<_, &str>("x".repeat(1 << 16))
            },
            || "too long",
        );
        assert_eq!(r, Err("too long"));
        assert_eq!(calls, 17, "stopped soon after the limit");
    }

    #[test]
    fn shell_values_are_quoted() {
        assert_eq!(
            expand("echo ${evil}", true),
            r"echo '$(touch pwned); `id` '\''x'\'''"
        );
    }

    #[test]
    fn syntax_errors_point_at_the_reference() {
        let e = Template::parse("a ${oops").unwrap_err();
        assert_eq!(
            (e.offset, e.message.as_str()),
            (2, "unclosed `${` in interpolation")
        );
        let e = Template::parse("${x|nodott}").unwrap_err();
        assert_eq!(e.message, "unknown filter `nodott`");
        assert_eq!(
            Template::parse("cost $5").unwrap().parts,
            [Part::Lit("cost $5".into())]
        );
    }
}
