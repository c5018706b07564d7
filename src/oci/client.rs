//! The OCI distribution HTTP API, the part a cache needs: check, upload (monolithic, streamed)
//! and download blobs; put and get manifests. Credentials come from `KILN_REGISTRY_USER` and
//! `KILN_REGISTRY_PASSWORD` (basic, or exchanged for a bearer token when the registry asks);
//! they are never written to logs or errors, and go only where src/oci/auth.rs allows. Every
//! request has an overall deadline (a blob's grows with its size) and every answer read into
//! memory has a size cap.

use std::io::Read;
use std::sync::Mutex;
use std::time::Duration;

use super::auth::{self, Origin};
use super::Reference;
use crate::error::{Error, Result};

/// The most a manifest may be: kiln's hold one small layer record per wheel.
pub(crate) const MANIFEST_CAP: u64 = 4 << 20;
/// The most a token service's answer may be.
const TOKEN_CAP: u64 = 1 << 20;
/// The deadline of a request that moves no blob (manifests, HEAD, upload start, token).
const SMALL_DEADLINE: Duration = Duration::from_secs(120);
/// The slowest transfer a blob deadline allows for: 256 KiB/s, on top of `SMALL_DEADLINE`.
const SLOWEST_BYTES_PER_SEC: u64 = 256 << 10;

/// The overall deadline of a request moving a blob of `size` bytes.
pub(crate) fn blob_deadline(size: u64) -> Duration {
    SMALL_DEADLINE + Duration::from_secs(size / SLOWEST_BYTES_PER_SEC)
}

/// A connection to one repository of one registry.
pub struct Registry {
    reference: Reference,
    /// The registry's own origin: the only one its credentials and tokens are sent to.
    origin: Origin,
    agent: ureq::Agent,
    credentials: Option<(String, String)>,
    /// `Authorization` header value once known (basic, or a bearer token from the challenge).
    authorization: Mutex<Option<String>>,
    /// The overall deadline of a request that moves no blob.
    small_deadline: Duration,
}

/// The deadlines of a build's cache miss ([`Registry::for_miss`]): a registry that does not
/// connect within 5 s or answer within 9 s in all is taken as down (the step runs instead), so
/// a remote that is down costs a run at most 10 s (issue 46), process time included.
const MISS_CONNECT: Duration = Duration::from_secs(5);
const MISS_FIRST_BYTE: Duration = Duration::from_secs(9);

impl Registry {
    pub fn new(reference: &Reference) -> Registry {
        Registry::with_deadlines(
            reference,
            Duration::from_secs(15),
            Duration::from_secs(60),
            SMALL_DEADLINE,
        )
    }

    /// A registry asked on a build's cache miss: short connect and first-byte deadlines
    /// ([`MISS_CONNECT`], [`MISS_FIRST_BYTE`]), so a silent one costs seconds, not minutes.
    pub(crate) fn for_miss(reference: &Reference) -> Registry {
        Registry::with_deadlines(reference, MISS_CONNECT, MISS_FIRST_BYTE, MISS_FIRST_BYTE)
    }

    fn with_deadlines(
        reference: &Reference,
        connect: Duration,
        read: Duration,
        small_deadline: Duration,
    ) -> Registry {
        let credentials = match (
            std::env::var("KILN_REGISTRY_USER"),
            std::env::var("KILN_REGISTRY_PASSWORD"),
        ) {
            (Ok(user), Ok(password)) if !user.is_empty() => Some((user, password)),
            _ => None,
        };
        let origin = Origin::of_url(&reference.api_base())
            .expect("a parsed reference has an http(s) origin");
        Registry {
            reference: reference.clone(),
            origin,
            agent: ureq::AgentBuilder::new()
                .timeout_connect(connect)
                .timeout_read(read)
                .timeout_write(Duration::from_secs(60))
                .timeout(small_deadline)
                .redirects(5)
                // A redirect (to blob storage, say) never carries the registry's credentials.
                .redirect_auth_headers(ureq::RedirectAuthHeaders::Never)
                .build(),
            credentials,
            authorization: Mutex::new(None),
            small_deadline,
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

    /// The size of a blob the repository holds (its HEAD's Content-Length), None when it lacks it.
    pub fn blob_size(&self, digest: &str) -> Result<Option<u64>> {
        let url = format!("{}/blobs/{digest}", self.reference.api_base());
        match self.send("HEAD", &url, &[], None) {
            Ok(response) => Ok(response
                .header("Content-Length")
                .and_then(|n| n.trim().parse().ok())),
            Err(Failure::Status(404, _)) => Ok(None),
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
        let url = self.upload_url(location, digest)?;
        let mut request = self
            .agent
            .put(&url)
            .timeout(blob_deadline(size))
            .set("Content-Type", "application/octet-stream")
            .set("Content-Length", &size.to_string());
        if let Some(auth) = self.authorization_for(&url) {
            request = request.set("Authorization", &auth);
        }
        request
            .send(body)
            .map_err(|e| self.error("PUT", &url, Failure::from(e)))?;
        Ok(())
    }

    /// Where the blob goes: the upload `Location` (relative to the registry, or absolute) with
    /// its digest. An https registry's upload never continues over plain http, and a Location on
    /// another origin never gets the registry's credentials (see `authorization_for`).
    fn upload_url(&self, location: &str, digest: &str) -> Result<String> {
        let location = if location.starts_with('/') {
            format!(
                "{}://{}{location}",
                self.reference.scheme, self.reference.registry
            )
        } else {
            location.to_string()
        };
        let refuse = |why: &str| {
            Error::other(
                format!(
                    "registry {} named an upload Location that kiln will not use: {why}",
                    self.reference.registry
                ),
                Some("nothing was uploaded; check the registry's configuration (its external URL) or use another registry".to_string()),
            )
        };
        let Some(target) = Origin::of_url(&location) else {
            return Err(refuse("not an absolute http(s) URL without userinfo"));
        };
        if self.origin.scheme == "https" && target.scheme != "https" {
            return Err(refuse("it downgrades https to plain http"));
        }
        let separator = if location.contains('?') { '&' } else { '?' };
        Ok(format!("{location}{separator}digest={digest}"))
    }

    /// The `Authorization` value for a request to `url`: only on the registry's own origin.
    fn authorization_for(&self, url: &str) -> Option<String> {
        if !self.origin.holds(url) {
            return None;
        }
        self.authorization.lock().expect("auth lock").clone()
    }

    /// Download a blob: a reader over its bytes (the caller verifies the digest).
    pub fn blob(&self, digest: &str, size: u64) -> Result<Box<dyn Read + Send + Sync>> {
        let url = format!("{}/blobs/{digest}", self.reference.api_base());
        let response = self
            .send_within("GET", &url, &[], None, blob_deadline(size))
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

    /// The manifest under the reference's tag (its Content-Type and bytes, at most
    /// `MANIFEST_CAP`), or None when the tag does not exist.
    pub fn manifest(&self, media_type: &str) -> Result<Option<(String, Vec<u8>)>> {
        let url = format!(
            "{}/manifests/{}",
            self.reference.api_base(),
            self.reference.tag
        );
        match self.send("GET", &url, &[("Accept", media_type)], None) {
            Ok(response) => {
                let too_big = || {
                    Error::other(
                        format!(
                            "the manifest of {} is larger than {}",
                            self.reference,
                            crate::units::format_size(MANIFEST_CAP)
                        ),
                        Some(
                            "it is not a kiln wheel cache; check the repository and tag"
                                .to_string(),
                        ),
                    )
                };
                let declared = response
                    .header("Content-Length")
                    .and_then(|n| n.trim().parse::<u64>().ok());
                if declared.is_some_and(|n| n > MANIFEST_CAP) {
                    return Err(too_big());
                }
                let content_type = response.content_type().to_string();
                let mut bytes = Vec::new();
                response
                    .into_reader()
                    .take(MANIFEST_CAP + 1)
                    .read_to_end(&mut bytes)
                    .map_err(|e| {
                        Error::io(format!("cannot read the manifest of {}", self.reference), e)
                    })?;
                if bytes.len() as u64 > MANIFEST_CAP {
                    return Err(too_big());
                }
                Ok(Some((content_type, bytes)))
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
        self.send_within(method, url, headers, body, self.small_deadline)
    }

    /// `send` with an overall deadline for the request and the reading of its answer.
    fn send_within(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
        deadline: Duration,
    ) -> Result<ureq::Response, Failure> {
        let attempt = |auth: Option<String>| -> Result<ureq::Response, Box<ureq::Error>> {
            let mut request = self.agent.request(method, url).timeout(deadline);
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
        let current = self.authorization_for(url);
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

    /// The `Authorization` value answering a `WWW-Authenticate` challenge. The password goes
    /// only to the registry itself over a private channel, or to a bearer realm `auth` allows.
    fn authenticate(&self, header: &str) -> Result<String, Failure> {
        let refused = |why: String| Failure::Status(401, why);
        let basic = self.credentials.as_ref().map(|(user, password)| {
            format!("Basic {}", base64(format!("{user}:{password}").as_bytes()))
        });
        let challenge = auth::parse_challenge(header)
            .ok_or_else(|| refused("the registry sent no usable challenge".into()))?;
        if challenge.scheme != "bearer" {
            let basic = basic.ok_or_else(|| refused("the registry wants credentials".into()))?;
            if !self.origin.is_private_channel() {
                return Err(refused(
                    "kiln sends credentials over plain http only to a loopback registry; use https"
                        .into(),
                ));
            }
            return Ok(basic);
        }
        let realm = challenge
            .params
            .get("realm")
            .ok_or_else(|| refused("the registry's challenge names no realm".into()))?;
        let realm_origin = Origin::of_url(realm).ok_or_else(|| {
            refused("the registry's token realm is not an http(s) URL without userinfo".into())
        })?;
        auth::realm_allowed(&self.origin, &realm_origin)
            .map_err(|why| refused(format!("refusing the token realm: {why}")))?;
        let mut request = self.agent.get(realm).timeout(self.small_deadline);
        for name in ["service", "scope"] {
            if let Some(value) = challenge.params.get(name) {
                request = request.query(name, value);
            }
        }
        if let Some(basic) = &basic {
            request = request.set("Authorization", basic);
        }
        let mut text = String::new();
        request
            .call()
            .map_err(Failure::from)?
            .into_reader()
            .take(TOKEN_CAP)
            .read_to_string(&mut text)
            .map_err(|e| Failure::Transport(format!("unreadable token answer: {e}")))?;
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
