//! Pins of redaction rules the module's own tests leave open (issue 48's mutation run): which
//! secrets a line cutter must keep whole, and a URL whose userinfo is empty.

use super::*;

#[test]
fn the_secrets_a_line_cut_could_split_are_exactly_those_with_a_space_tab_or_return() {
    let r = Redactor::from_env([
        ("PIN_TOKEN", "two words canary-9e4"),
        ("PIN_KEY", "tab\tcanary-31b"),
        ("PIN_SECRET", "cr\rcanary-77c"),
        ("PIN_PASSWORD", "no-space-canary-5d0"),
    ]);
    let whole = r.with_spaces();
    for s in ["two words canary-9e4", "tab\tcanary-31b", "cr\rcanary-77c"] {
        assert!(whole.contains(&s.as_bytes().to_vec()), "{s:?} in {whole:?}");
    }
    assert!(
        whole.iter().all(|s| s.iter().any(|b| b" \t\r".contains(b))),
        "{whole:?}"
    );
}

#[test]
fn a_url_with_an_empty_userinfo_is_left_as_written() {
    // `https://@host` carries no secret: nothing is masked and no password is registered.
    assert_eq!(mask_url_userinfo("see https://@h/x"), "see https://@h/x");
    assert!(url_passwords("see https://@h/x").is_empty());
    // Text masked already stays as it is.
    assert_eq!(mask_url_userinfo("https://***@h/x"), "https://***@h/x");
}
