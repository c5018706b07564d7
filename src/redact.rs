//! Keeping secrets out of everything kiln writes or prints: the one owner of redaction.
//!
//! A secret is (1) the value of an environment variable, recipe variable, `--set` value or step
//! env entry whose name says secret (`*TOKEN*`, `*KEY*`, `*SECRET*`, `*PASSWORD*`, …,
//! case-insensitive), registered with [`register_pairs`] when a recipe loads, and read from the
//! process environment each time; (2) the userinfo of any URL (`https://user:pw@host/` →
//! `https://***@host/`). Every sink (stderr, step logs, reports, `--json` events, the serve log
//! header, bench history, the doctor bundle) passes its text through [`scrub`] or a
//! [`Redactor`]; the recipe cache stores digests in place of secret values (src/recipe/cache.rs).

use std::sync::RwLock;

/// Secret values registered by this process (recipe variables, `--set` values, env entries).
static REGISTERED: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// The shortest value treated as a secret: shorter ones would redact ordinary text.
pub(crate) const MIN_SECRET_LEN: usize = 6;

/// Whether a variable's name says it holds a secret.
pub(crate) fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    [
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "KEY",
        "CREDENTIAL",
        "AUTH",
    ]
    .iter()
    .any(|needle| upper.contains(needle))
}

/// Register the values of the secret-named `(name, value)` pairs, and the password of every
/// URL a value holds, for every later [`scrub`] and [`Redactor`] of this process.
pub(crate) fn register_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) {
    let mut found = Vec::new();
    for (name, value) in pairs {
        if is_secret_name(name) {
            found.push(value.to_string());
        }
        found.extend(url_passwords(value));
    }
    found.retain(|s| s.len() >= MIN_SECRET_LEN);
    if found.is_empty() {
        return;
    }
    let mut registered = REGISTERED
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for s in found {
        if !registered.contains(&s) {
            registered.push(s);
        }
    }
}

/// `text` with every known secret and every URL's userinfo replaced by `***`.
pub(crate) fn scrub(text: &str) -> String {
    Redactor::from_env([]).redact(text)
}

/// Replaces known secret values (and URL userinfo) with `***`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Redactor {
    secrets: Vec<String>,
}

impl Redactor {
    /// Secrets from this process's environment, the registered ones, plus `extra` (name, value)
    /// pairs (a child's environment).
    pub(crate) fn from_env<'a>(extra: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut secrets: Vec<String> = Vec::new();
        // `vars_os`: a value that is not UTF-8 is as much a secret (what reaches a log is its
        // lossy text), and `vars` would panic on it.
        for (k, v) in std::env::vars_os() {
            let v = v.to_string_lossy();
            if is_secret_name(&k.to_string_lossy()) {
                secrets.push(v.to_string());
            }
            secrets.extend(url_passwords(&v));
        }
        for (k, v) in extra {
            if is_secret_name(k) {
                secrets.push(v.to_string());
            }
            secrets.extend(url_passwords(v));
        }
        secrets.extend(
            REGISTERED
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .iter()
                .cloned(),
        );
        secrets.retain(|s| s.len() >= MIN_SECRET_LEN);
        // A JSON sink (report.json, `--json` events, the doctor bundle) holds a secret with its
        // `"`, `\` and control characters escaped: that form is the secret too.
        let escaped: Vec<String> = secrets.iter().filter_map(|s| json_form(s)).collect();
        secrets.extend(escaped);
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Redactor { secrets }
    }

    /// The secrets with a space, tab or carriage return in them: a line cut after a space could
    /// split one ([`crate::process::Limits`] keeps them whole).
    pub(crate) fn with_spaces(&self) -> Vec<Vec<u8>> {
        self.secrets
            .iter()
            .filter(|s| s.contains([' ', '\t', '\r']))
            .map(|s| s.as_bytes().to_vec())
            .collect()
    }

    pub(crate) fn redact(&self, line: &str) -> String {
        let mut out = mask_url_userinfo(line);
        for s in &self.secrets {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), "***");
            }
        }
        out
    }
}

/// `secret` as it stands inside a JSON string, where that differs from the secret itself.
fn json_form(secret: &str) -> Option<String> {
    let quoted = serde_json::to_string(secret).ok()?;
    let inner = &quoted[1..quoted.len() - 1];
    (inner != secret).then(|| inner.to_string())
}

/// A writer that redacts each line before it reaches `inner` (a step log): whatever writes to
/// it, a command line, a check's message or a child's output, is redacted. A last line without
/// a newline is written on flush or drop.
pub(crate) struct LineWriter<W: std::io::Write> {
    inner: W,
    pending: Vec<u8>,
    redactor: Redactor,
}

impl<W: std::io::Write> LineWriter<W> {
    pub(crate) fn new(inner: W) -> Self {
        LineWriter {
            inner,
            pending: Vec::new(),
            redactor: Redactor::from_env([]),
        }
    }

    fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        let text = String::from_utf8_lossy(line);
        self.inner.write_all(self.redactor.redact(&text).as_bytes())
    }
}

impl<W: std::io::Write> std::io::Write for LineWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.pending.extend_from_slice(buf);
        while let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            self.write_line(&line)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if !self.pending.is_empty() {
            let line = std::mem::take(&mut self.pending);
            self.write_line(&line)?;
        }
        self.inner.flush()
    }
}

impl<W: std::io::Write> Drop for LineWriter<W> {
    fn drop(&mut self) {
        let _ = std::io::Write::flush(self);
    }
}

/// The userinfo (`user:password`) of each URL in `text`, and its password part alone.
pub(crate) fn url_passwords(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (start, end) in userinfo_spans(text) {
        let userinfo = &text[start..end];
        out.push(userinfo.to_string());
        if let Some((_, password)) = userinfo.split_once(':') {
            out.push(password.to_string());
        }
    }
    out
}

/// `text` with the userinfo of every `scheme://userinfo@host` replaced by `***`.
pub(crate) fn mask_url_userinfo(text: &str) -> String {
    let spans = userinfo_spans(text);
    if spans.is_empty() {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (start, end) in spans {
        out.push_str(&text[last..start]);
        out.push_str("***");
        last = end;
    }
    out.push_str(&text[last..]);
    out
}

/// Byte ranges of URL userinfo: after `://`, up to the last `@` of the authority.
fn userinfo_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut from = 0;
    while let Some(found) = text[from..].find("://") {
        let start = from + found + 3;
        let authority_end = text[start..]
            .find(|c: char| {
                matches!(c, '/' | '?' | '#' | '"' | '\'' | '<' | '>' | '`' | '\\')
                    || c.is_whitespace()
            })
            .map_or(text.len(), |i| start + i);
        if let Some(at) = text[start..authority_end].rfind('@') {
            if at > 0 && text[start..start + at] != *"***" {
                spans.push((start, start + at));
            }
        }
        from = authority_end.max(start);
    }
    spans
}

#[cfg(test)]
mod pins;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_secret_values_only() {
        let r = Redactor::from_env([("HF_TOKEN", "hf_abcdefgh"), ("PATHX", "/usr/bin")]);
        assert_eq!(
            r.redact("token=hf_abcdefgh path=/usr/bin"),
            "token=*** path=/usr/bin"
        );
        assert!(is_secret_name("hf_token") && !is_secret_name("PATH"));
        for name in ["OPENAI_API_KEY", "aws_secret", "Db_Password", "ssh_key"] {
            assert!(is_secret_name(name), "{name}");
        }
    }

    #[test]
    fn url_userinfo_is_masked_wherever_it_stands() {
        assert_eq!(
            mask_url_userinfo("pip: https://me:s3cr3t@pypi.example/simple and http://tok@h:1/x"),
            "pip: https://***@pypi.example/simple and http://***@h:1/x"
        );
        assert_eq!(
            mask_url_userinfo("plain https://pypi.org/simple, mail a@b.c"),
            "plain https://pypi.org/simple, mail a@b.c"
        );
        assert_eq!(mask_url_userinfo("\"https://u:p@h\""), "\"https://***@h\"");
        assert_eq!(
            url_passwords("x https://user:pa55word@h/"),
            ["user:pa55word", "pa55word"]
        );
    }

    #[test]
    fn a_line_writer_redacts_across_write_calls() {
        use std::io::Write;
        let mut out = Vec::new();
        {
            let mut w = LineWriter::new(&mut out);
            write!(w, "$ curl https://u:pw1234@h/").unwrap();
            writeln!(w, "x").unwrap();
            write!(w, "tail https://a:b12345@h").unwrap();
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "$ curl https://***@h/x\ntail https://***@h"
        );
    }

    #[test]
    fn a_url_password_is_redacted_where_it_is_printed_outside_its_url() {
        // A value whose name says nothing secret: its URL's password is the secret.
        register_pairs([("index", "https://me:canary-url-pw-7c2@pypi.example/simple")]);
        assert_eq!(
            scrub("pip said canary-url-pw-7c2 was refused"),
            "pip said *** was refused"
        );
        assert_eq!(scrub("login me:canary-url-pw-7c2"), "login ***");
        // A child's environment entry, likewise.
        let r = Redactor::from_env([("PIP_INDEX_URL", "https://u:canary-env-pw-51d@h/")]);
        assert_eq!(r.redact("auth canary-env-pw-51d failed"), "auth *** failed");
    }

    /// report.json and `--json` events write a secret's `"`, `\` and controls escaped.
    #[test]
    fn a_secret_is_redacted_in_its_json_escaped_form() {
        let secret = "canary\"q\\b\tj-3e8";
        let r = Redactor::from_env([("API_TOKEN", secret)]);
        let json = serde_json::to_string(&format!("said {secret} twice {secret}")).unwrap();
        assert_eq!(r.redact(&json), "\"said *** twice ***\"");
        assert_eq!(r.redact(&format!("raw {secret}")), "raw ***");
        // A secret JSON writes as it is has no second form to match.
        assert_eq!(json_form("plain-secret-9"), None);
    }

    #[test]
    fn registered_values_are_redacted_by_every_later_redactor() {
        register_pairs([("db_password", "canary-registered-9f1"), ("n", "4")]);
        assert_eq!(
            scrub("connect with canary-registered-9f1 now"),
            "connect with *** now"
        );
        assert_eq!(scrub("n=4"), "n=4");
    }
}
