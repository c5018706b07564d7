//! Where registry credentials may go: origins (`scheme://host:port`), the loopback rule, and the
//! `WWW-Authenticate` challenge parser (RFC 9110 auth-params: quoted values keep their commas).
//!
//! The rules: the registry's credentials (basic, or the bearer token they are exchanged for) go
//! only to the registry's own origin; the user's password goes to a bearer realm only over https
//! (plain http only on loopback, for tests); an https registry never sends anything sensitive
//! over plain http (no downgrade); nothing is sent in clear to a non-loopback host.

use std::collections::BTreeMap;

/// `scheme://host:port`, the unit credentials are scoped to (like a browser's origin). The one
/// place kiln decides whether two URLs share an origin: [`Origin::holds`] and [`same_origin`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Origin {
    pub scheme: String,
    /// Lowercased (IDNA for names); IPv6 in brackets.
    pub host: String,
    /// Explicit, or the scheme's default (80, 443).
    pub port: u16,
}

impl Origin {
    /// The origin of an absolute `http://` or `https://` URL (WHATWG parsing, the `url` crate);
    /// None for anything else, including a URL with userinfo, which kiln never follows.
    pub(crate) fn of_url(url: &str) -> Option<Origin> {
        let parsed = url::Url::parse(url).ok()?;
        if !matches!(parsed.scheme(), "http" | "https")
            || !parsed.username().is_empty()
            || parsed.password().is_some()
        {
            return None;
        }
        Some(Origin {
            scheme: parsed.scheme().to_string(),
            host: parsed.host_str()?.to_string(),
            port: parsed.port_or_known_default()?,
        })
    }

    /// Whether `url` is on this origin (an unparsable URL is on none).
    pub(crate) fn holds(&self, url: &str) -> bool {
        Origin::of_url(url).as_ref() == Some(self)
    }

    pub(crate) fn is_loopback(&self) -> bool {
        self.host == "localhost"
            || self.host == "[::1]"
            || self
                .host
                .parse::<std::net::Ipv4Addr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    /// Whether a secret may travel to this origin at all: https, or plain http on loopback.
    pub(crate) fn is_private_channel(&self) -> bool {
        self.scheme == "https" || self.is_loopback()
    }
}

/// Whether `a` and `b` are absolute http(s) URLs of one origin: scheme, host and port (a
/// default port written out or not), case-insensitive; a URL with userinfo matches nothing.
pub(crate) fn same_origin(a: &str, b: &str) -> bool {
    Origin::of_url(a).is_some_and(|o| o.holds(b))
}

/// Whether the registry's password may be sent to a bearer `realm` named by `registry`'s
/// challenge: over https, or plain http on loopback; never from an https registry to http.
pub(crate) fn realm_allowed(registry: &Origin, realm: &Origin) -> Result<(), &'static str> {
    if registry.scheme == "https" && realm.scheme != "https" {
        return Err("the registry speaks https but its token realm is plain http (a downgrade)");
    }
    if !realm.is_private_channel() {
        return Err("the token realm is plain http on a host that is not loopback");
    }
    Ok(())
}

/// A parsed `WWW-Authenticate` challenge: its scheme (lowercased) and auth-params (names
/// lowercased, quoted values unescaped).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Challenge {
    pub scheme: String,
    pub params: BTreeMap<String, String>,
}

/// Parse the first challenge of a `WWW-Authenticate` value, e.g.
/// `Bearer realm="https://a/token",service="r",scope="repository:x:pull,push"`.
pub(crate) fn parse_challenge(header: &str) -> Option<Challenge> {
    let header = header.trim_start();
    let (scheme, mut rest) = header
        .split_once(|c: char| c.is_ascii_whitespace())
        .unwrap_or((header, ""));
    if scheme.is_empty() {
        return None;
    }
    let mut params = BTreeMap::new();
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_ascii_whitespace() || c == ',');
        if rest.is_empty() {
            break;
        }
        let Some((name, after)) = rest.split_once('=') else {
            break; // a token68 or the next challenge's scheme: kiln reads only the first
        };
        let name = name.trim();
        if name.is_empty() || name.contains(|c: char| c.is_ascii_whitespace() || c == ',') {
            break;
        }
        let after = after.trim_start();
        let (value, remaining) = if let Some(quoted) = after.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, escaped)) = chars.next() {
                            value.push(escaped);
                        }
                    }
                    '"' => {
                        end = Some(i + 1);
                        break;
                    }
                    c => value.push(c),
                }
            }
            (value, &quoted[end?..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (after[..end].trim().to_string(), &after[end..])
        };
        params.insert(name.to_ascii_lowercase(), value);
        rest = remaining;
    }
    Some(Challenge {
        scheme: scheme.to_ascii_lowercase(),
        params,
    })
}

#[cfg(test)]
#[path = "auth_pins.rs"]
mod pins;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_values_keep_their_commas_and_escapes() {
        let c = parse_challenge(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:team/x:pull,push",error="a \"b\"""#,
        )
        .unwrap();
        assert_eq!(c.scheme, "bearer");
        assert_eq!(c.params["realm"], "https://auth.example/token");
        assert_eq!(c.params["service"], "registry.example");
        assert_eq!(c.params["scope"], "repository:team/x:pull,push");
        assert_eq!(c.params["error"], r#"a "b""#);
        let c = parse_challenge(r#"Basic realm="Registry Realm", charset=UTF-8"#).unwrap();
        assert_eq!(
            (c.scheme.as_str(), c.params["realm"].as_str()),
            ("basic", "Registry Realm")
        );
        assert_eq!(c.params["charset"], "UTF-8");
        assert!(parse_challenge(r#"Bearer realm="unterminated"#).is_none());
    }

    #[test]
    fn origins_compare_scheme_host_and_port() {
        let o = |u| Origin::of_url(u).unwrap();
        assert_eq!(o("http://127.0.0.1:5000/v2/x"), o("HTTP://127.0.0.1:5000"));
        assert_eq!(o("https://ghcr.io/v2/"), o("https://GHCR.io:443/token?x=1"));
        assert_ne!(o("http://127.0.0.1:5000/"), o("http://localhost:5000/"));
        assert_ne!(o("https://r.example/"), o("http://r.example:443/"));
        assert_eq!(o("http://[::1]:8080/x").host, "[::1]");
        assert!(Origin::of_url("http://user:pw@evil.example/").is_none());
        assert!(Origin::of_url("ftp://x/").is_none());
        assert!(Origin::of_url("/v2/x/blobs/uploads/1").is_none());
    }

    #[test]
    fn same_origin_normalises_default_ports_and_case_and_refuses_userinfo() {
        // Default ports, written out or not.
        assert!(same_origin("http://r.example/v2/", "http://r.example:80/x"));
        assert!(same_origin(
            "https://r.example:443/a",
            "https://r.example/b"
        ));
        assert!(!same_origin("http://r.example/", "http://r.example:443/"));
        // Scheme and host compare without case; the path, query and fragment do not count.
        assert!(same_origin(
            "HTTPS://GHCR.io/v2/",
            "https://ghcr.io/token?x=1#f"
        ));
        // Userinfo: never an origin, not even its own.
        assert!(!same_origin(
            "http://u:p@r.example/",
            "http://u:p@r.example/"
        ));
        assert!(!same_origin("http://r.example/", "http://u@r.example/"));
        assert!(!same_origin(
            "http://r.example/",
            "http://r.example@evil.example/"
        ));
        // IPv6: the bracketed address, its port outside the brackets.
        let v6 = Origin::of_url("http://[::1]/x").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("[::1]", 80));
        assert!(v6.is_loopback());
        assert!(same_origin(
            "http://[::1]:8080/",
            "http://[0:0:0:0:0:0:0:1]:8080/y"
        ));
        assert!(!same_origin("http://[::1]:8080/", "http://[::1]:8081/"));
        // A redirect to another port or scheme is another origin: credentials stay behind.
        assert!(!same_origin(
            "http://127.0.0.1:5000/v2/",
            "http://127.0.0.1:5001/v2/"
        ));
        assert!(!same_origin(
            "https://r.example/v2/",
            "http://r.example/v2/"
        ));
        assert!(!same_origin(
            "http://127.0.0.1:5000/",
            "http://localhost:5000/"
        ));
        // Not absolute http(s): no origin at all.
        assert!(!same_origin("/v2/x", "/v2/x"));
        assert!(!same_origin("file:///etc/passwd", "file:///etc/passwd"));
        assert!(!same_origin(
            "http://r.example:99999/",
            "http://r.example:99999/"
        ));
    }

    #[test]
    fn the_password_goes_to_a_realm_only_over_a_private_channel() {
        let o = |u| Origin::of_url(u).unwrap();
        let https = o("https://registry.example");
        assert!(realm_allowed(&https, &o("https://auth.example/token")).is_ok());
        assert!(realm_allowed(&https, &o("http://auth.example/token")).is_err());
        assert!(realm_allowed(&https, &o("http://127.0.0.1:9/token")).is_err());
        let lan = o("http://10.0.0.5:5000");
        assert!(realm_allowed(&lan, &o("http://10.0.0.5:5001/token")).is_err());
        let local = o("http://127.0.0.1:5000");
        assert!(realm_allowed(&local, &o("http://localhost:5001/token")).is_ok());
    }
}
