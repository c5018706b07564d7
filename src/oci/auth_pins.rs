//! Pins of the `WWW-Authenticate` parser (issue 48's mutation run): kiln reads the first
//! challenge only; whatever is not an auth-param (the next challenge's scheme, a token68, a
//! name with a space or comma in it, an empty name) ends it.

use super::*;

fn params(header: &str) -> Vec<(String, String)> {
    parse_challenge(header)
        .unwrap()
        .params
        .into_iter()
        .collect()
}

#[test]
fn the_next_challenge_or_a_malformed_param_ends_the_first_challenge() {
    let realm = ("realm".to_string(), "https://a/token".to_string());
    for header in [
        // A second challenge: its scheme and first param read as the name `Basic realm`.
        r#"Bearer realm="https://a/token", Basic realm="https://b/token""#,
        // A name with a comma or a space in it, or none at all.
        r#"Bearer realm="https://a/token", x,y="1", service="s""#,
        r#"Bearer realm="https://a/token", x y="1", service="s""#,
        r#"Bearer realm="https://a/token", ="1", service="s""#,
    ] {
        assert_eq!(params(header), std::slice::from_ref(&realm), "{header}");
    }
}
