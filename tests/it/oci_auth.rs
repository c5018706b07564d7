//! Registry credentials go only where they were issued: `kiln cache push|pull` through a
//! token-auth front (a loopback token server and gate written here) before the real Debian
//! `docker-registry`, with every request the front saw recorded and checked. Also the pull's
//! refusals of what a hostile registry can serve: an image index, a wheel id that is not the
//! sha256 of its key, a 50 GiB declared wheel, remote entries whose blob is not there.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::common::{wheel_site, Workspace};
use crate::image::LocalRegistry;

const USER: &str = "kiln-ci";
const PASSWORD: &str = "canary-registry-password-5e1f";

/// One request the front saw.
#[derive(Debug, Clone)]
struct Seen {
    host: String,
    method: String,
    path: String,
    authorization: Option<String>,
}

/// How the front behaves.
#[derive(Clone)]
struct Mode {
    /// The host (`name:port`) upload `Location`s are rewritten to; the front accepts requests
    /// for that host without a token (a capability URL, as storage backends use).
    location_host: Option<String>,
    /// The realm the challenge names (default: the front's own `/token`).
    realm: Option<String>,
}

/// A token-auth front on 127.0.0.1: `/token` grants what the challenge's scope asks for to
/// `USER:PASSWORD` (basic); `/v2/…` wants a bearer token whose scope holds `pull` (GET, HEAD)
/// or `push` (anything else) for the repository, then forwards to the real registry.
struct TokenFront {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    _registry: LocalRegistry,
}

impl TokenFront {
    /// `mode` gets the front's port (a Location host can name it under another name).
    fn start(mode: impl FnOnce(u16) -> Mode) -> TokenFront {
        let registry = LocalRegistry::start();
        let upstream = format!("127.0.0.1:{}", registry.port);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mode = mode(port);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let tokens: Arc<Mutex<HashMap<String, String>>> = Arc::default();
        let front_seen = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (seen, tokens, mode, upstream) = (
                    front_seen.clone(),
                    tokens.clone(),
                    mode.clone(),
                    upstream.clone(),
                );
                std::thread::spawn(move || {
                    let _ = serve_connection(stream, port, &upstream, &mode, &seen, &tokens);
                });
            }
        });
        TokenFront {
            port,
            seen,
            _registry: registry,
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

struct Request {
    method: String,
    target: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let target = parts.next()?.to_string();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        target,
        headers,
        body,
    })
}

fn respond(stream: &mut TcpStream, code: u16, headers: &[(String, String)], body: &[u8]) {
    let mut head = format!("HTTP/1.1 {code} X\r\nConnection: close\r\n");
    let mut has_length = false;
    for (k, v) in headers {
        has_length |= k.eq_ignore_ascii_case("content-length");
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !has_length {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body);
}

fn base64_decode(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::new();
    for c in text.bytes().filter(|c| *c != b'=') {
        let Some(v) = ALPHABET.iter().position(|a| *a == c) else {
            return Vec::new();
        };
        bits = (bits << 6) | u32::try_from(v).unwrap();
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push(u8::try_from((bits >> n) & 0xff).unwrap());
        }
    }
    out
}

fn query_param(target: &str, name: &str) -> Option<String> {
    let query = target.split_once('?')?.1;
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == name).then(|| {
            let mut out = Vec::new();
            let bytes = v.as_bytes();
            let mut i = 0;
            while i < bytes.len() {
                match bytes[i] {
                    b'%' if i + 2 < bytes.len() => {
                        out.push(u8::from_str_radix(&v[i + 1..i + 3], 16).unwrap());
                        i += 3;
                    }
                    b'+' => {
                        out.push(b' ');
                        i += 1;
                    }
                    b => {
                        out.push(b);
                        i += 1;
                    }
                }
            }
            String::from_utf8(out).unwrap()
        })
    })
}

fn serve_connection(
    stream: TcpStream,
    port: u16,
    upstream: &str,
    mode: &Mode,
    seen: &Mutex<Vec<Seen>>,
    tokens: &Mutex<HashMap<String, String>>,
) -> Option<()> {
    let mut writer = stream.try_clone().ok()?;
    let mut reader = BufReader::new(stream);
    let request = read_request(&mut reader)?;
    let host = request.headers.get("host").cloned().unwrap_or_default();
    let path = request
        .target
        .split('?')
        .next()
        .unwrap_or_default()
        .to_string();
    seen.lock().unwrap().push(Seen {
        host: host.clone(),
        method: request.method.clone(),
        path: path.clone(),
        authorization: request.headers.get("authorization").cloned(),
    });
    let auth = request.headers.get("authorization").cloned();
    if path == "/token" {
        let ok = auth
            .as_deref()
            .and_then(|a| a.strip_prefix("Basic "))
            .map(base64_decode)
            .is_some_and(|pair| pair == format!("{USER}:{PASSWORD}").as_bytes());
        if !ok {
            respond(&mut writer, 401, &[], b"{\"details\":\"bad credentials\"}");
            return Some(());
        }
        let scope = query_param(&request.target, "scope").unwrap_or_default();
        let token = format!("tok-{}", tokens.lock().unwrap().len());
        tokens.lock().unwrap().insert(token.clone(), scope);
        let body = format!("{{\"token\":\"{token}\"}}");
        respond(&mut writer, 200, &[], body.as_bytes());
        return Some(());
    }
    let capability_host = mode.location_host.as_deref() == Some(host.as_str());
    if !capability_host {
        let repository = path
            .strip_prefix("/v2/")
            .and_then(|p| {
                ["/blobs/", "/manifests/"]
                    .iter()
                    .find_map(|m| p.split_once(m).map(|(r, _)| r.to_string()))
            })
            .unwrap_or_default();
        let action = if matches!(request.method.as_str(), "GET" | "HEAD") {
            "pull"
        } else {
            "push"
        };
        let granted = auth
            .as_deref()
            .and_then(|a| a.strip_prefix("Bearer "))
            .and_then(|t| tokens.lock().unwrap().get(t).cloned())
            .is_some_and(|scope| {
                scope
                    .strip_prefix(&format!("repository:{repository}:"))
                    .is_some_and(|actions| actions.split(',').any(|a| a == action))
            });
        if !granted {
            let realm = mode
                .realm
                .clone()
                .unwrap_or_else(|| format!("http://127.0.0.1:{port}/token"));
            let scope = if action == "pull" {
                "pull"
            } else {
                "pull,push"
            };
            let challenge = format!(
                "Bearer realm=\"{realm}\",service=\"kiln-test\",scope=\"repository:{repository}:{scope}\""
            );
            respond(
                &mut writer,
                401,
                &[("WWW-Authenticate".into(), challenge)],
                b"{\"errors\":[{\"code\":\"UNAUTHORIZED\",\"message\":\"authentication required\"}]}",
            );
            return Some(());
        }
    }
    // Forward to the real registry.
    let agent = ureq::AgentBuilder::new().redirects(0).build();
    let mut forward = agent.request(
        &request.method,
        &format!("http://{upstream}{}", request.target),
    );
    for name in ["content-type", "accept"] {
        if let Some(v) = request.headers.get(name) {
            forward = forward.set(name, v);
        }
    }
    let answer = if request.body.is_empty() && request.method != "PUT" && request.method != "POST" {
        forward.call()
    } else {
        forward.send_bytes(&request.body)
    };
    let response = match answer {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("the registry behind the front failed: {e}"),
    };
    let code = response.status();
    let public_host = mode
        .location_host
        .clone()
        .unwrap_or_else(|| format!("127.0.0.1:{port}"));
    let mut headers = Vec::new();
    for name in response.headers_names() {
        if ["connection", "transfer-encoding"].contains(&name.as_str()) {
            continue;
        }
        let value = response.header(&name).unwrap_or_default().to_string();
        let value = if name == "location" {
            let absolute = if value.starts_with('/') {
                format!("http://{upstream}{value}")
            } else {
                value
            };
            absolute.replace(upstream, &public_host)
        } else {
            value
        };
        headers.push((name, value));
    }
    let mut body = Vec::new();
    if request.method != "HEAD" {
        response.into_reader().read_to_end(&mut body).ok()?;
        headers.retain(|(k, _)| k != "content-length");
    }
    respond(&mut writer, code, &headers, &body);
    Some(())
}

/// A state dir holding one real wheel (six 1.17.0 from PyPI) as a cache entry.
fn workspace_with_a_wheel() -> Workspace {
    let ws = Workspace::new();
    let site = wheel_site("six==1.17.0");
    let wheel = std::path::PathBuf::from(std::fs::read_to_string(site.join(".complete")).unwrap());
    add_entry(&ws.state().join("cache/wheels"), &wheel);
    ws
}

fn add_entry(wheels: &Path, wheel: &Path) {
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    let key = serde_json::json!({
        "package": "six", "version": "1.17.0", "source_sha256": "0".repeat(64),
        "python_tag": "cp311", "torch": null, "cuda": null, "arch_list": null, "env": {},
    });
    let id = kiln::hash::sha256_bytes(&serde_json::to_vec(&key).unwrap());
    let dir = wheels.join(&id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(wheel, dir.join(&name)).unwrap();
    let (sha256, size) = kiln::hash::sha256_reader(std::fs::File::open(wheel).unwrap()).unwrap();
    let entry = serde_json::json!({
        "key": key, "wheel": name, "sha256": sha256, "size": size, "created_unix": 1_700_000_000u64,
    });
    std::fs::write(
        dir.join("entry.json"),
        serde_json::to_vec_pretty(&entry).unwrap(),
    )
    .unwrap();
}

fn kiln_with_credentials(ws: &Workspace) -> assert_cmd::Command {
    let mut kiln = ws.kiln();
    kiln.env("KILN_REGISTRY_USER", USER)
        .env("KILN_REGISTRY_PASSWORD", PASSWORD);
    kiln
}

fn run(cmd: &mut assert_cmd::Command) -> (bool, String) {
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Nothing the front saw carried the password except `/token` requests, and no bearer token
/// went anywhere but the registry's own origin.
fn assert_credentials_stayed_home(seen: &[Seen], port: u16) {
    let home = format!("127.0.0.1:{port}");
    for s in seen {
        let Some(auth) = &s.authorization else {
            continue;
        };
        if s.path == "/token" {
            assert!(auth.starts_with("Basic "), "{s:?}");
            continue;
        }
        assert!(
            auth.starts_with("Bearer ") && s.host == home,
            "credentials went where they were not issued: {s:?}"
        );
    }
}

#[test]
fn push_and_pull_through_a_token_registry_keep_the_push_scope() {
    let front = TokenFront::start(|_| Mode {
        location_host: None,
        realm: None,
    });
    let reference = format!("127.0.0.1:{}/team/wheels:cu130", front.port);
    let ws = workspace_with_a_wheel();
    let (ok, text) = run(kiln_with_credentials(&ws).args(["cache", "push", &reference]));
    assert!(ok, "push through a token registry failed:\n{text}");
    assert!(text.contains("pushed 1 wheel(s)"), "{text}");
    assert!(!text.contains(PASSWORD), "{text}");
    let seen = front.seen();
    assert!(
        seen.iter().any(|s| s.path == "/token"),
        "the registry's challenge was answered through its token service: {seen:?}"
    );
    assert_credentials_stayed_home(&seen, front.port);

    // The wheel was put in the cache by hand, so nobody signed it: the pulling state accepts
    // unsigned wheels (this test is about the token's scope, wheel_cache_trust.rs about trust).
    let fresh = Workspace::new();
    let (ok, text) = run(kiln_with_credentials(&fresh)
        .env("KILN_CACHE_REQUIRE_SIGS", "false")
        .args(["cache", "pull", &reference]));
    assert!(ok && text.contains("pulled 1 wheel(s)"), "{text}");
    assert_credentials_stayed_home(&front.seen(), front.port);
}

#[test]
fn an_upload_location_on_another_host_gets_no_credentials() {
    // `localhost:PORT` is the same front, but another origin than `127.0.0.1:PORT`.
    let front = TokenFront::start(|port| Mode {
        location_host: Some(format!("localhost:{port}")),
        realm: None,
    });
    let reference = format!("127.0.0.1:{}/team/wheels", front.port);
    let ws = workspace_with_a_wheel();
    let (ok, text) = run(kiln_with_credentials(&ws).args(["cache", "push", &reference]));
    assert!(ok, "push failed:\n{text}");
    let seen = front.seen();
    let uploads: Vec<_> = seen
        .iter()
        .filter(|s| s.host.starts_with("localhost:"))
        .collect();
    assert!(
        uploads.iter().any(|s| s.method == "PUT"),
        "the blob went to the Location's host: {seen:?}"
    );
    assert!(
        uploads.iter().all(|s| s.authorization.is_none()),
        "the registry's token went to another origin: {uploads:?}"
    );
    assert_credentials_stayed_home(&seen, front.port);
}

#[test]
fn a_token_realm_over_plain_http_elsewhere_gets_nothing() {
    // The realm names 0.0.0.0, which is not loopback by name, yet a connection to it stays on
    // this machine (Linux routes it to the local host): to a listener of this test's own, so
    // a regression reaches nothing outside, and the listener tells whether kiln connected.
    let trap = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let trap_port = trap.local_addr().unwrap().port();
    let front = TokenFront::start(|_| Mode {
        location_host: None,
        realm: Some(format!("http://0.0.0.0:{trap_port}/token")),
    });
    let reference = format!("127.0.0.1:{}/team/wheels", front.port);
    let ws = workspace_with_a_wheel();
    let (ok, text) = run(kiln_with_credentials(&ws).args(["cache", "push", &reference]));
    assert!(!ok, "{text}");
    assert!(
        text.contains("refusing the token realm: the token realm is plain http on a host that is not loopback"),
        "{text}"
    );
    assert!(!text.contains(PASSWORD), "{text}");
    trap.set_nonblocking(true).unwrap();
    let connected = trap.accept();
    assert!(
        connected
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "kiln connected to the plain-http realm: {connected:?}"
    );
}

// ---- what a hostile registry can serve ----------------------------------------------------

/// Upload `bytes` as a blob of `repo`; returns its sha256.
fn put_blob(registry: &LocalRegistry, repo: &str, bytes: &[u8]) -> String {
    let base = format!("http://127.0.0.1:{}/v2/{repo}", registry.port);
    let sha256 = kiln::hash::sha256_bytes(bytes);
    let start = ureq::post(&format!("{base}/blobs/uploads/"))
        .call()
        .unwrap();
    let location = start.header("Location").unwrap().to_string();
    let location = if location.starts_with('/') {
        format!("http://127.0.0.1:{}{location}", registry.port)
    } else {
        location
    };
    let sep = if location.contains('?') { '&' } else { '?' };
    ureq::put(&format!("{location}{sep}digest=sha256:{sha256}"))
        .send_bytes(bytes)
        .unwrap();
    sha256
}

/// Put `manifest` (of `media_type`) under `repo:tag` in `registry`, with the empty config blob.
fn put_manifest(
    registry: &LocalRegistry,
    repo: &str,
    tag: &str,
    media_type: &str,
    manifest: &serde_json::Value,
) {
    let base = format!("http://127.0.0.1:{}/v2/{repo}", registry.port);
    put_blob(registry, repo, b"{}");
    ureq::put(&format!("{base}/manifests/{tag}"))
        .set("Content-Type", media_type)
        .send_bytes(&serde_json::to_vec(manifest).unwrap())
        .unwrap();
}

fn wheel_cache_manifest(layers: &[serde_json::Value]) -> serde_json::Value {
    let empty = format!("sha256:{}", kiln::hash::sha256_bytes(b"{}"));
    serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": "application/vnd.kiln.wheel-cache.v1",
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": empty, "size": 2},
        "layers": layers,
    })
}

/// A layer as `kiln cache push` writes it, for a key and a blob digest/size.
fn wheel_layer(id: &str, key: &serde_json::Value, sha256: &str, size: u64) -> serde_json::Value {
    serde_json::json!({
        "mediaType": "application/vnd.kiln.wheel.v1+zip",
        "digest": format!("sha256:{sha256}"),
        "size": size,
        "annotations": {
            "org.opencontainers.image.title": "demo-1.0-py3-none-any.whl",
            "dev.kiln.cache.id": id,
            "dev.kiln.cache.key": key.to_string(),
        },
    })
}

/// `kiln cache pull REFERENCE` into a fresh state that accepts unsigned wheels: these tests hand
/// the registry entries no fleet key signed, to reach the protocol checks under test (an unsigned
/// wheel is refused before them otherwise: wheel_cache_trust.rs).
fn pull(reference: &str) -> (bool, String, Workspace) {
    let ws = Workspace::new();
    let (ok, text) = run(ws
        .kiln()
        .env("KILN_CACHE_REQUIRE_SIGS", "false")
        .args(["cache", "pull", reference]));
    (ok, text, ws)
}

fn written_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in walk(dir) {
        out.push(entry.display().to_string());
    }
    out
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn an_image_index_is_not_a_wheel_cache_of_zero_wheels() {
    let registry = LocalRegistry::start();
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [],
    });
    put_manifest(
        &registry,
        "team/app",
        "v1",
        "application/vnd.oci.image.index.v1+json",
        &index,
    );
    let reference = format!("127.0.0.1:{}/team/app:v1", registry.port);
    let (ok, text, _ws) = pull(&reference);
    assert!(!ok, "pulling an image index must fail, got:\n{text}");
    assert!(
        text.contains("is not a kiln wheel cache") && text.contains("hint:"),
        "{text}"
    );
    assert!(
        text.contains("it holds a `application/vnd.oci.image.index.v1+json`"),
        "{text}"
    );
    // An image manifest is no wheel cache either (it was pulled as "0 wheels", exit 0).
    let config = put_blob(
        &registry,
        "team/app",
        b"{\"architecture\":\"amd64\",\"os\":\"linux\"}",
    );
    let image = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": format!("sha256:{config}"), "size": 36},
        "layers": [],
    });
    put_manifest(
        &registry,
        "team/app",
        "v2",
        "application/vnd.oci.image.manifest.v1+json",
        &image,
    );
    let (ok, text, _ws) = pull(&format!("127.0.0.1:{}/team/app:v2", registry.port));
    assert!(!ok, "pulling an image must fail, got:\n{text}");
    assert!(text.contains("its artifact type is missing"), "{text}");
    // And a push would not replace someone's image.
    let ws = workspace_with_a_wheel();
    let (ok, text) = run(ws.kiln().args(["cache", "push", &reference]));
    assert!(!ok && text.contains("is not a kiln wheel cache"), "{text}");
}

#[test]
fn a_pulled_id_must_be_the_sha256_of_its_key() {
    let registry = LocalRegistry::start();
    let key = serde_json::json!({"package": "demo", "version": "1.0"});
    let forged = "a".repeat(64);
    let blob = put_blob(&registry, "team/wheels", b"not a wheel");
    let layer = wheel_layer(&forged, &key, &blob, 11);
    put_manifest(
        &registry,
        "team/wheels",
        "x",
        "application/vnd.oci.image.manifest.v1+json",
        &wheel_cache_manifest(&[layer]),
    );
    let (ok, text, ws) = pull(&format!("127.0.0.1:{}/team/wheels:x", registry.port));
    assert!(!ok, "{text}");
    assert!(
        text.contains(&format!("entry {forged} is not the sha256 of its key")),
        "{text}"
    );
    assert_eq!(
        written_under(&ws.state().join("cache/wheels")),
        Vec::<String>::new()
    );
}

#[test]
fn a_wheel_declared_as_50_gib_is_refused_before_a_byte_is_written() {
    let registry = LocalRegistry::start();
    let key = serde_json::json!({"package": "demo", "version": "1.0"});
    let id = kiln::hash::sha256_bytes(&serde_json::to_vec(&key).unwrap());
    let blob = put_blob(&registry, "team/wheels", b"small");
    let layer = wheel_layer(&id, &key, &blob, 50 << 30);
    put_manifest(
        &registry,
        "team/wheels",
        "big",
        "application/vnd.oci.image.manifest.v1+json",
        &wheel_cache_manifest(&[layer]),
    );
    let (ok, text, ws) = pull(&format!("127.0.0.1:{}/team/wheels:big", registry.port));
    assert!(!ok, "{text}");
    assert!(
        text.contains("declares demo-1.0-py3-none-any.whl as 50.0 GiB, over kiln's 8.0 GiB limit"),
        "{text}"
    );
    assert_eq!(
        written_under(&ws.state().join("cache/wheels")),
        Vec::<String>::new()
    );
}

#[test]
fn a_push_does_not_republish_remote_entries_it_cannot_verify() {
    let registry = LocalRegistry::start();
    let key = serde_json::json!({"package": "ghost", "version": "1.0"});
    let id = kiln::hash::sha256_bytes(&serde_json::to_vec(&key).unwrap());
    let blob = put_blob(&registry, "team/wheels", b"twelve bytes");
    let ghost = wheel_layer(&id, &key, &blob, 1234);
    put_manifest(
        &registry,
        "team/wheels",
        "latest",
        "application/vnd.oci.image.manifest.v1+json",
        &wheel_cache_manifest(&[ghost]),
    );
    let reference = format!("127.0.0.1:{}/team/wheels", registry.port);
    let ws = workspace_with_a_wheel();
    let (ok, text) = run(ws.kiln().args(["cache", "push", &reference]));
    assert!(ok, "{text}");
    assert!(
        text.contains("not carrying over a remote entry: demo-1.0-py3-none-any.whl is 12 bytes in the registry, the manifest says 1234"),
        "{text}"
    );
    assert!(text.contains("(0 already there, 1 in the tag)"), "{text}");
    let manifest: serde_json::Value = serde_json::from_str(
        &ureq::get(&format!(
            "http://127.0.0.1:{}/v2/team/wheels/manifests/latest",
            registry.port
        ))
        .set("Accept", "application/vnd.oci.image.manifest.v1+json")
        .call()
        .unwrap()
        .into_string()
        .unwrap(),
    )
    .unwrap();
    let ids: Vec<_> = manifest["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            l["annotations"]["dev.kiln.cache.id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(
        !ids.contains(&id),
        "the unverified entry was re-published: {ids:?}"
    );
    assert_eq!(ids.len(), 1);
}
