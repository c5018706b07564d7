//! The man page as plain text, for a terminal without `man` (or `kiln man --text`): the roff
//! [`super::shell_help`] renders, read back with the few requests and escapes it writes
//! (`.TH .SH .TP .IP .PP .br .nf .fi .RS .RE`, `\fB \fI \fR \fP \- \e \(aq \(bu \*(Aq \&`).
//! Headings flush left, bodies indented, terms above their indented text.

/// `page` (roff) as plain text.
pub(super) fn plain(page: &str) -> String {
    let mut out = String::new();
    let mut indent = 0usize;
    let mut base = 0usize;
    let mut term_next = false;
    for line in page.lines() {
        let (request, rest) = match line.strip_prefix('.') {
            Some(r) => r.split_once(' ').unwrap_or((r, "")),
            None => ("", line),
        };
        match request {
            "" => {
                let text = inline(rest);
                if term_next {
                    push(&mut out, base + 7, &text);
                    indent = base + 14;
                    term_next = false;
                } else {
                    push(&mut out, indent, &text);
                }
            }
            "TH" => {
                let title = rest.split_whitespace().next().unwrap_or("kiln");
                out.push_str(&format!("{}(1)\n\n", inline(title).to_uppercase()));
            }
            "SH" => {
                if !out.ends_with("\n\n") {
                    out.push('\n');
                }
                out.push_str(&inline(rest.trim_matches('"')));
                out.push('\n');
                base = 0;
                indent = 7;
            }
            "TP" => term_next = true,
            "IP" => {
                let bullet = inline(rest.split_whitespace().next().unwrap_or(""));
                push(&mut out, base + 7, &bullet);
                indent = base + 9;
            }
            "PP" | "sp" => {
                out.push('\n');
                indent = base + 7;
            }
            "RS" => {
                base += 7;
                indent = base + 7;
            }
            "RE" => {
                base = base.saturating_sub(7);
                indent = base + 7;
            }
            _ => {} // .br .nf .fi .ie .el and comments: the line structure already shows them
        }
    }
    out
}

fn push(out: &mut String, indent: usize, text: &str) {
    out.push_str(&" ".repeat(indent));
    out.push_str(text.trim_end());
    out.push('\n');
}

/// A roff text line without its font changes and escapes.
fn inline(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('f') => {
                chars.next(); // the font letter
            }
            Some('(') => {
                let name: String = chars.by_ref().take(2).collect();
                out.push_str(match name.as_str() {
                    "bu" => "*",
                    "aq" => "'",
                    "em" | "en" => "-",
                    _ => "",
                });
            }
            Some('*') => {
                // A string: `\*(Aq` (the apostrophe) is the only one the page uses.
                if chars.peek() == Some(&'(') {
                    chars.next();
                    let name: String = chars.by_ref().take(2).collect();
                    if name == "Aq" {
                        out.push('\'');
                    }
                }
            }
            Some('e' | '\\') => out.push('\\'),
            Some('&') | None => {}
            Some(other) => out.push(other), // `\-` and the rest: the character itself
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::plain;

    #[test]
    fn roff_requests_and_escapes_become_plain_text() {
        let page = ".TH kiln\\-up 1 \"x\"\n.SH NAME\nkiln\\-up \\- Provision\n.SH OPTIONS\n.TP\n\\fB\\-\\-dry\\-run\\fR \\fI<N>\\fR\nShow what \\e would run\n.IP \\(bu 2\nit\\*(Aqs\n";
        assert_eq!(
            plain(page),
            "KILN-UP(1)\n\nNAME\n       kiln-up - Provision\n\nOPTIONS\n       --dry-run <N>\n              Show what \\ would run\n       *\n         it's\n"
        );
    }
}
