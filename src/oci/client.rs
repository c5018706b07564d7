//! The OCI distribution HTTP API, the part a cache needs: check, upload (monolithic, streamed)
//! and download blobs; put and get manifests. Credentials come from `KILN_REGISTRY_USER` and
//! `KILN_REGISTRY_PASSWORD` (basic, or exchanged for a bearer token when the registry asks);
//! they are never written to logs or errors.

use std::io::Read;
use std::sync::Mutex;
use std::time::Duration;

use super::Reference;
use crate::error::{Error, Result};

/// A connection to one repository of one registry.
pub struct Registry {
    reference: Reference,
    agent: ureq::Agent,
    credentials: Option<(String, String)>,
    /// `Authorization` header value once known (basic, or a bearer token from the challenge).
    authorization: Mutex<Option<String>>,
}

impl Registry {
    pub fn new(reference: &Reference) -> Registry {
        let credentials = match (
            std::env::var("KILN_REGISTRY_USER"),
            std::env::var("KILN_REGISTRY_PASSWORD"),
        ) {
            (Ok(user), Ok(password)) if !user.is_empty() => Some((user, password)),
            _ => None,
        };
        Registry {
            reference: reference.clone(),
            agent: ureq::AgentBuilder::new()
                .timeout_connect(Duration::from_secs(15))
                .timeout_read(Duration::from_secs(300))
                .timeout_write(Duration::from_secs(300))
                .build(),
            credentials,
            authorization: Mutex::new(None),
        }
    }

    pub fn reference(&self) -> &Reference {
        &self.reference
    }

    /// Whether the repository already holds this blob (`sha256:…`).
    pub fn has_blob(&self, digest: &str) -> Result<bool> {
        let url = format!("{}/blobs/{digest}", self.reference.api_base());
        match self.send("HEAD", &url, &[], None) {
            Ok(_) => Ok(true),
            Err(Failure::Status(404, _)) => Ok(false),
            Err(f) => Err(self.error("HEAD", &url, f)),
        }
    }

    /// Upload a blob of `size` bytes read from `body` (one monolithic PUT, streamed).
    pub fn push_blob(&self, digest: &str, size: u64, body: impl Read) -> Result<()> {
        let start = format!("{}/blobs/uploads/", self.reference.api_base());
        let response = self
            .send("POST", &start, &[("Content-Length", "0")], Some(&[]))
            .map_err(|f| self.error("POST", &start, f))?;
        let location = response.header("Location").ok_or_else(|| {
            Error::other(
                format!(
                    "registry {} started an upload without a Location",
                    self.reference.registry
                ),
                None,
            )
        })?;
        let location = if location.starts_with("http://") || location.starts_with("https://") {
            location.to_string()
        } else {
            format!(
                "{}://{}{location}",
                self.reference.scheme, self.reference.registry
            )
        };
        let separator = if location.contains('?') { '&' } else { '?' };
        let url = format!("{location}{separator}digest={digest}");
        let mut request = self
            .agent
            .put(&url)
            .set("Content-Type", "application/octet-stream")
            .set("Content-Length", &size.to_string());
        if let Some(auth) = self.authorization.lock().expect("auth lock").clone() {
            request = request.set("Authorization", &auth);
        }
        request
            .send(body)
            .map_err(|e| self.error("PUT", &url, Failure::from(e)))?;
        Ok(())
    }

    /// Download a blob: a reader over its bytes (the caller verifies the digest).
    pub fn blob(&self, digest: &str) -> Result<Box<dyn Read + Send + Sync>> {
        let url = format!("{}/blobs/{digest}", self.reference.api_base());
        let response = self
            .send("GET", &url, &[], None)
            .map_err(|f| self.error("GET", &url, f))?;
        Ok(response.into_reader())
    }

    /// Put a manifest under the reference's tag.
    pub fn put_manifest(&self, media_type: &str, bytes: &[u8]) -> Result<()> {
        let url = format!(
            "{}/manifests/{}",
            self.reference.api_base(),
            self.reference.tag
        );
        self.send("PUT", &url, &[("Content-Type", media_type)], Some(bytes))
            .map_err(|f| self.error("PUT", &url, f))?;
        Ok(())
    }

    /// The manifest under the reference's tag, or None when the tag does not exist.
    pub fn manifest(&self, media_type: &str) -> Result<Option<Vec<u8>>> {
        let url = format!(
            "{}/manifests/{}",
            self.reference.api_base(),
            self.reference.tag
        );
        match self.send("GET", &url, &[("Accept", media_type)], None) {
            Ok(response) => {
                let mut bytes = Vec::new();
                response
                    .into_reader()
                    .take(16 << 20)
                    .read_to_end(&mut bytes)
                    .map_err(|e| {
                        Error::io(format!("cannot read the manifest of {}", self.reference), e)
                    })?;
                Ok(Some(bytes))
            }
            Err(Failure::Status(404, _)) => Ok(None),
            Err(f) => Err(self.error("GET", &url, f)),
        }
    }

    /// One request with a byte body (or none); on 401 it authenticates once and retries.
    fn send(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Result<ureq::Response, Failure> {
        let attempt = |auth: Option<String>| -> Result<ureq::Response, Box<ureq::Error>> {
            let mut request = self.agent.request(method, url);
            for (k, v) in headers {
                request = request.set(k, v);
            }
            if let Some(auth) = auth {
                request = request.set("Authorization", &auth);
            }
            match body {
                Some(bytes) => request.send_bytes(bytes),
                None => request.call(),
            }
            .map_err(Box::new)
        };
        let current = self.authorization.lock().expect("auth lock").clone();
        let first = attempt(current.clone()).map_err(|e| *e);
        match first {
            Err(ureq::Error::Status(401, response)) => {
                let challenge = response
                    .header("WWW-Authenticate")
                    .unwrap_or_default()
                    .to_string();
                let auth = self.authenticate(&challenge)?;
                if Some(&auth) == current.as_ref() {
                    return Err(Failure::Status(401, "credentials rejected".into()));
                }
                *self.authorization.lock().expect("auth lock") = Some(auth.clone());
                attempt(Some(auth)).map_err(|e| Failure::from(*e))
            }
            other => other.map_err(Failure::from),
        }
    }

    /// The `Authorization` value answering a `WWW-Authenticate` challenge.
    fn authenticate(&self, challenge: &str) -> Result<String, Failure> {
        let basic = self.credentials.as_ref().map(|(user, password)| {
            format!("Basic {}", base64(format!("{user}:{password}").as_bytes()))
        });
        let Some(params) = challenge.strip_prefix("Bearer ") else {
            return basic.ok_or(Failure::Status(
                401,
                "the registry wants credentials".into(),
            ));
        };
        let field = |name: &str| {
            params.split(',').find_map(|kv| {
                let (k, v) = kv.trim().split_once('=')?;
                (k == name).then(|| v.trim_matches('"').to_string())
            })
        };
        let realm = field("realm").ok_or(Failure::Status(
            401,
            "the registry's challenge names no realm".into(),
        ))?;
        let mut request = self.agent.get(&realm);
        for name in ["service", "scope"] {
            if let Some(value) = field(name) {
                request = request.query(name, &value);
            }
        }
        if let Some(basic) = &basic {
            request = request.set("Authorization", basic);
        }
        let text = request
            .call()
            .map_err(Failure::from)?
            .into_string()
            .map_err(|e| Failure::Transport(e.to_string()))?;
        let answer: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Failure::Transport(format!("unreadable token answer: {e}")))?;
        let token = answer
            .get("token")
            .or_else(|| answer.get("access_token"))
            .and_then(|t| t.as_str());
        token.map(|t| format!("Bearer {t}")).ok_or(Failure::Status(
            401,
            "the token service gave no token".into(),
        ))
    }

    fn error(&self, method: &str, url: &str, failure: Failure) -> Error {
        let path = url.split_once("/v2/").map_or(url, |(_, p)| p);
        let registry = &self.reference.registry;
        match failure {
            Failure::Transport(why) => Error::other(
                format!("cannot reach registry {registry}: {why}"),
                Some(format!(
                    "check that the registry runs and the address is right; {} is used for this host (prefix http:// or https:// to choose)",
                    self.reference.scheme
                )),
            ),
            Failure::Status(code @ (401 | 403), why) => Error::other(
                format!("registry {registry} refused {method} /v2/{path}: HTTP {code}: {why}"),
                Some("set KILN_REGISTRY_USER and KILN_REGISTRY_PASSWORD (a token works as the password) with push and pull rights".to_string()),
            ),
            Failure::Status(code, why) => Error::other(format!("registry {registry}: {method} /v2/{path} failed: HTTP {code}: {why}"), None),
        }
    }
}

/// Why a request failed, before it is turned into a user-facing error.
#[derive(Debug)]
enum Failure {
    Status(u16, String),
    Transport(String),
}

impl From<ureq::Error> for Failure {
    fn from(e: ureq::Error) -> Self {
        match e {
            ureq::Error::Status(code, response) => {
                let text = response.into_string().unwrap_or_default();
                // Registry errors: {"errors":[{"code":"…","message":"…"}]}
                let why = serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| {
                        let errors = v.get("errors")?.as_array()?.iter().map(|e| {
                            format!(
                                "{} {}",
                                e.get("code").and_then(|c| c.as_str()).unwrap_or(""),
                                e.get("message").and_then(|c| c.as_str()).unwrap_or("")
                            )
                        });
                        Some(errors.collect::<Vec<_>>().join("; "))
                    })
                    .unwrap_or_else(|| text.chars().take(200).collect());
                Failure::Status(code, why.trim().to_string())
            }
            ureq::Error::Transport(t) => Failure::Transport(t.to_string()),
        }
    }
}

fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_matches_rfc4648_vectors() {
        let cases = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ];
        for (input, expected) in cases {
            assert_eq!(super::base64(input.as_bytes()), expected);
        }
    }
}
