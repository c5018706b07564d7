//! `when` conditions: a small boolean language over host facts and vars.
//!
//! `gpu.cc >= 12.0 and os == "linux"`, `not (arch == aarch64)`, `var.flavour != "cpu"`.
//! Numbers and versions compare component-wise; a fact that is absent (no GPU) makes every
//! comparison false except `!=`.

use std::cmp::Ordering;

/// How deep parentheses and `not` may nest.
pub const MAX_DEPTH: usize = 64;
/// How many tokens one condition may hold.
pub const MAX_TOKENS: usize = 4096;

#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Or(Box<Expr>, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    /// A bare fact: true when present and not `false`, `0` or empty.
    Truthy(Ident),
    Cmp(Ident, Op, String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Ident {
    pub name: String,
    pub offset: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub offset: usize,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Lit(String),
    Op(Op),
    And,
    Or,
    Not,
    Open,
    Close,
}

fn lex(src: &str) -> Result<Vec<(usize, Tok)>, ParseError> {
    let mut out = Vec::new();
    let b = src.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i] as char;
        let start = i;
        let two = src.get(i..i + 2).unwrap_or("");
        let tok = match c {
            ' ' | '\t' => {
                i += 1;
                continue;
            }
            '(' => Tok::Open,
            ')' => Tok::Close,
            '"' | '\'' => {
                let end = src[i + 1..].find(c).ok_or(ParseError {
                    offset: i,
                    message: "unterminated string".into(),
                })?;
                i += end + 2;
                out.push((start, Tok::Lit(src[start + 1..i - 1].to_string())));
                continue;
            }
            _ if two == "&&" => Tok::And,
            _ if two == "||" => Tok::Or,
            _ if ["==", "!=", "<=", ">="].contains(&two) => Tok::Op(match two {
                "==" => Op::Eq,
                "!=" => Op::Ne,
                "<=" => Op::Le,
                _ => Op::Ge,
            }),
            '<' => Tok::Op(Op::Lt),
            '>' => Tok::Op(Op::Gt),
            '!' => Tok::Not,
            _ if c.is_ascii_alphanumeric() || c == '_' => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b"_.-+".contains(&b[i])) {
                    i += 1;
                }
                let word = &src[start..i];
                out.push((
                    start,
                    match word {
                        "and" => Tok::And,
                        "or" => Tok::Or,
                        "not" => Tok::Not,
                        _ if word.starts_with(|c: char| c.is_ascii_digit()) => {
                            Tok::Lit(word.to_string())
                        }
                        _ => Tok::Ident(word.to_string()),
                    },
                ));
                continue;
            }
            _ => {
                return Err(ParseError {
                    offset: i,
                    message: format!("unexpected character `{c}`"),
                })
            }
        };
        i += if matches!(tok, Tok::Open | Tok::Close | Tok::Not)
            || matches!(tok, Tok::Op(Op::Lt) | Tok::Op(Op::Gt))
        {
            1
        } else {
            2
        };
        out.push((start, tok));
    }
    Ok(out)
}

struct Parser {
    toks: Vec<(usize, Tok)>,
    pos: usize,
    end: usize,
    /// Open parentheses and `not`s around the current position.
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|(_, t)| t)
    }
    fn offset(&self) -> usize {
        self.toks.get(self.pos).map_or(self.end, |(o, _)| *o)
    }
    fn err<T>(&self, message: impl Into<String>) -> Result<T, ParseError> {
        Err(ParseError {
            offset: self.offset(),
            message: message.into(),
        })
    }
    fn or(&mut self) -> Result<Expr, ParseError> {
        let mut lhs = self.and()?;
        while self.peek() == Some(&Tok::Or) {
            self.pos += 1;
            lhs = Expr::Or(Box::new(lhs), Box::new(self.and()?));
        }
        Ok(lhs)
    }
    fn and(&mut self) -> Result<Expr, ParseError> {
        let mut lhs = self.not()?;
        while self.peek() == Some(&Tok::And) {
            self.pos += 1;
            lhs = Expr::And(Box::new(lhs), Box::new(self.not()?));
        }
        Ok(lhs)
    }
    /// Enter one level of nesting; past [`MAX_DEPTH`] the condition is refused here.
    fn nest(&mut self) -> Result<(), ParseError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return self.err(format!(
                "the condition nests more than {MAX_DEPTH} levels deep"
            ));
        }
        Ok(())
    }
    fn not(&mut self) -> Result<Expr, ParseError> {
        if self.peek() == Some(&Tok::Not) {
            self.nest()?;
            self.pos += 1;
            let e = Expr::Not(Box::new(self.not()?));
            self.depth -= 1;
            return Ok(e);
        }
        self.atom()
    }
    fn atom(&mut self) -> Result<Expr, ParseError> {
        let offset = self.offset();
        match self.peek().cloned() {
            Some(Tok::Open) => {
                self.nest()?;
                self.pos += 1;
                let e = self.or()?;
                if self.peek() != Some(&Tok::Close) {
                    return self.err("expected `)`");
                }
                self.pos += 1;
                self.depth -= 1;
                Ok(e)
            }
            Some(Tok::Ident(name)) => {
                self.pos += 1;
                let ident = Ident { name, offset };
                let Some(Tok::Op(op)) = self.peek().cloned() else {
                    return Ok(Expr::Truthy(ident));
                };
                self.pos += 1;
                match self.peek().cloned() {
                    Some(Tok::Lit(v)) | Some(Tok::Ident(v)) => {
                        self.pos += 1;
                        Ok(Expr::Cmp(ident, op, v))
                    }
                    _ => self.err("expected a value after the comparison"),
                }
            }
            Some(_) => self.err("expected a fact name such as `gpu.cc`, `os` or `var.NAME`"),
            None => self.err("expected a condition"),
        }
    }
}

pub fn parse(src: &str) -> Result<Expr, ParseError> {
    let toks = lex(src)?;
    // Parentheses first: their depth is the likelier mistake, and the clearer message.
    let mut depth = 0usize;
    for (offset, t) in &toks {
        match t {
            Tok::Open => depth += 1,
            Tok::Close => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth > MAX_DEPTH {
            return Err(ParseError {
                offset: *offset,
                message: format!("the condition nests more than {MAX_DEPTH} levels deep"),
            });
        }
    }
    if let Some((offset, _)) = toks.get(MAX_TOKENS) {
        return Err(ParseError {
            offset: *offset,
            message: format!("the condition is longer than {MAX_TOKENS} words and symbols"),
        });
    }
    let mut p = Parser {
        toks,
        pos: 0,
        end: src.len(),
        depth: 0,
    };
    let e = p.or()?;
    if p.pos < p.toks.len() {
        return p.err("unexpected text after the condition; join conditions with `and` / `or`");
    }
    Ok(e)
}

impl Expr {
    pub fn idents(&self) -> Vec<&Ident> {
        match self {
            Expr::Or(a, b) | Expr::And(a, b) => {
                let mut v = a.idents();
                v.extend(b.idents());
                v
            }
            Expr::Not(e) => e.idents(),
            Expr::Truthy(i) | Expr::Cmp(i, _, _) => vec![i],
        }
    }

    pub fn eval(&self, lookup: &dyn Fn(&str) -> Option<String>) -> bool {
        match self {
            Expr::Or(a, b) => a.eval(lookup) || b.eval(lookup),
            Expr::And(a, b) => a.eval(lookup) && b.eval(lookup),
            Expr::Not(e) => !e.eval(lookup),
            Expr::Truthy(i) => {
                lookup(&i.name).is_some_and(|v| !v.is_empty() && v != "false" && v != "0")
            }
            Expr::Cmp(i, op, rhs) => match lookup(&i.name) {
                None => *op == Op::Ne,
                Some(lhs) => {
                    let ord = compare(&lhs, rhs);
                    match op {
                        Op::Eq => ord == Ordering::Equal,
                        Op::Ne => ord != Ordering::Equal,
                        Op::Lt => ord == Ordering::Less,
                        Op::Le => ord != Ordering::Greater,
                        Op::Gt => ord == Ordering::Greater,
                        Op::Ge => ord != Ordering::Less,
                    }
                }
            },
        }
    }
}

/// Versions (`12.0`, `580.82.07`) compare component-wise as numbers; anything else as text.
pub fn compare(a: &str, b: &str) -> Ordering {
    fn nums(s: &str) -> Option<Vec<u64>> {
        s.split('.').map(|p| p.parse().ok()).collect()
    }
    match (nums(a), nums(b)) {
        (Some(mut x), Some(mut y)) => {
            let n = x.len().max(y.len());
            x.resize(n, 0);
            y.resize(n, 0);
            x.cmp(&y)
        }
        _ => a.cmp(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(src: &str) -> bool {
        parse(src).unwrap().eval(&|k| match k {
            "gpu.cc" => Some("12.0".into()),
            "os" => Some("linux".into()),
            _ => None,
        })
    }

    #[test]
    fn evaluates_against_facts() {
        assert!(eval("gpu.cc >= 12.0 and os == linux"));
        assert!(eval("gpu.cc > 9.0 && !(os == 'macos')"));
        assert!(eval("gpu.cc == 12"));
        assert!(eval("gpu.cc == 12.0"));
        assert!(eval("driver != 1") && !eval("driver >= 1"));
        assert!(eval("os or nothing") && !eval("nothing"));
    }

    #[test]
    fn reports_where_parsing_failed() {
        assert_eq!(parse("gpu.cc >=").unwrap_err().offset, 9);
        assert_eq!(parse("os == linux arch").unwrap_err().offset, 12);
        assert!(parse("(os == linux").is_err());
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let src = format!("{}os{}", "(".repeat(10_000), ")".repeat(10_000));
        let e = parse(&src).unwrap_err();
        assert_eq!(e.offset, MAX_DEPTH);
        assert!(e.message.contains("nests more than 64 levels"), "{e:?}");
        let nots = format!("{}os", "not ".repeat(100));
        assert!(parse(&nots).unwrap_err().message.contains("nests"));
        let long = vec!["os"; 5000].join(" and ");
        assert!(parse(&long).unwrap_err().message.contains("longer than"));
        let ok = format!("{}os{}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
        assert!(parse(&ok).is_ok());
    }

    #[test]
    fn versions_compare_numerically() {
        assert_eq!(compare("580.82.07", "580.9"), Ordering::Greater);
        assert_eq!(compare("12.0", "12"), Ordering::Equal);
    }
}
