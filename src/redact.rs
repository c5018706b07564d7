//! Keeping secrets (HF_TOKEN and friends) out of logs, receipts and reports.

/// Whether an environment variable's name looks like it holds a secret.
pub(crate) fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    [
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "API_KEY",
        "ACCESS_KEY",
        "CREDENTIAL",
        "AUTH",
    ]
    .iter()
    .any(|needle| upper.contains(needle))
}

/// Replaces known secret values with `***`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Redactor {
    secrets: Vec<String>,
}

impl Redactor {
    /// Secrets from this process's environment plus `extra` (name, value) pairs.
    pub(crate) fn from_env<'a>(extra: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut secrets: Vec<String> = std::env::vars()
            .filter(|(k, _)| is_secret_name(k))
            .map(|(_, v)| v)
            .collect();
        secrets.extend(
            extra
                .into_iter()
                .filter(|(k, _)| is_secret_name(k))
                .map(|(_, v)| v.to_string()),
        );
        // Very short values would redact ordinary text; they are not credentials anyway.
        secrets.retain(|s| s.len() >= 6);
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Redactor { secrets }
    }

    pub(crate) fn redact(&self, line: &str) -> String {
        let mut out = line.to_string();
        for s in &self.secrets {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), "***");
            }
        }
        out
    }
}

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
    }
}
