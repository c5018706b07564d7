//! POSIX shell words: the one quoting rule for every value that reaches shell text (recipe
//! interpolation, Dockerfiles, the command lines kiln logs).

/// Quote `s` as one POSIX shell word (left bare when it holds only safe characters).
pub(crate) fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn bare_words_stay_bare_and_the_rest_is_single_quoted() {
        assert_eq!(quote("a-b_c.d/e=f:g"), "a-b_c.d/e=f:g");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's $(id)"), r"'it'\''s $(id)'");
    }
}
