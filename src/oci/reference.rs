//! `REGISTRY/REPOSITORY[:TAG]` references, e.g. `127.0.0.1:5000/team/wheels:cu130` or
//! `ghcr.io/org/kiln-cache`. Loopback registries speak plain HTTP, like Docker's default;
//! `http://` in front forces plain HTTP for any other host.

use std::fmt;

use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// `http` or `https`.
    pub scheme: String,
    /// `host[:port]`
    pub registry: String,
    pub repository: String,
    pub tag: String,
}

impl Reference {
    pub fn parse(text: &str) -> Result<Reference> {
        let bad = |why: &str| {
            Error::usage(
                format!("`{text}` is not a registry reference: {why}"),
                Some(
                    "write REGISTRY/REPOSITORY[:TAG], e.g. 127.0.0.1:5000/kiln/wheels:latest"
                        .to_string(),
                ),
            )
        };
        let (forced, rest) = match text.split_once("://") {
            Some(("http", rest)) => (Some("http"), rest),
            Some(("https", rest)) => (Some("https"), rest),
            Some(_) => return Err(bad("only http:// and https:// are supported")),
            None => (None, text),
        };
        let (registry, path) = rest
            .split_once('/')
            .ok_or_else(|| bad("it names no repository"))?;
        if registry.is_empty() || path.is_empty() {
            return Err(bad("it names no registry or no repository"));
        }
        if registry.contains('@') {
            return Err(Error::usage(
                "a registry reference carries no credentials (`user:password@` would reach logs and shell history)".to_string(),
                Some("set KILN_REGISTRY_USER and KILN_REGISTRY_PASSWORD instead".to_string()),
            ));
        }
        let (repository, tag) = match path.rsplit_once(':') {
            Some((repo, tag)) if !tag.contains('/') => (repo, tag),
            _ => (path, "latest"),
        };
        let repo_ok = repository.split('/').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
        });
        if !repo_ok {
            return Err(bad(
                "repository names are lowercase letters, digits, `.`, `_`, `-` and `/`",
            ));
        }
        let tag_ok = !tag.is_empty()
            && tag.len() <= 128
            && tag
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
        if !tag_ok {
            return Err(bad("tags are letters, digits, `.`, `_` and `-`"));
        }
        let (host, port) = match registry.rsplit_once(':') {
            Some((h, p)) if !h.ends_with('[') && !p.ends_with(']') => (h, Some(p)),
            _ => (registry, None),
        };
        if let Some(p) = port {
            if p.parse::<u16>().map_or(true, |n| n == 0) {
                return Err(bad(&format!("port `{p}` is not a number from 1 to 65535")));
            }
        }
        let loopback = matches!(host, "localhost" | "127.0.0.1" | "[::1]");
        let scheme = forced.unwrap_or(if loopback { "http" } else { "https" });
        let reference = Reference {
            scheme: scheme.to_string(),
            registry: registry.to_string(),
            repository: repository.to_string(),
            tag: tag.to_string(),
        };
        if super::auth::Origin::of_url(&reference.api_base()).is_none() {
            return Err(bad("its registry is not a host name or address"));
        }
        Ok(reference)
    }

    /// `scheme://registry/v2/repository`
    pub fn api_base(&self) -> String {
        format!("{}://{}/v2/{}", self.scheme, self.registry, self.repository)
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}:{}", self.registry, self.repository, self.tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_registry_port_repository_and_tag() {
        let r = Reference::parse("127.0.0.1:5000/kiln/wheels:cu130").unwrap();
        assert_eq!(
            (r.scheme.as_str(), r.registry.as_str()),
            ("http", "127.0.0.1:5000")
        );
        assert_eq!(
            (r.repository.as_str(), r.tag.as_str()),
            ("kiln/wheels", "cu130")
        );
        let r = Reference::parse("ghcr.io/org/cache").unwrap();
        assert_eq!((r.scheme.as_str(), r.tag.as_str()), ("https", "latest"));
        assert_eq!(r.api_base(), "https://ghcr.io/v2/org/cache");
        assert!(Reference::parse("wheels").is_err());
        assert!(Reference::parse("ghcr.io/Org/cache").is_err());
        assert!(Reference::parse("ftp://x/y").is_err());
        let e = Reference::parse("https://me:hunter22@ghcr.io/org/cache").unwrap_err();
        assert!(!e.render().contains("hunter22"), "{}", e.render());
    }

    #[test]
    fn a_port_outside_1_to_65535_is_refused() {
        for text in [
            "127.0.0.1:70000/k/w",
            "localhost:0/k/w",
            "h:99999999999/k/w",
            "h:x/k/w",
        ] {
            let e = Reference::parse(text).unwrap_err().render();
            assert!(e.contains("not a number from 1 to 65535"), "{text}: {e}");
        }
        assert!(Reference::parse("[::1]:5000/k/w").is_ok());
        assert!(Reference::parse("[::1]/k/w").is_ok());
    }
}
