//! `fetch` against a real HTTP server on 127.0.0.1 (and file://), and `extract` of real archives,
//! including hostile ones: nothing unverified is cached, nothing escapes the destination.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::common::{scrub, Workspace};

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .fold(String::new(), |mut out, b| {
            out.push_str(&format!("{b:02x}"));
            out
        })
}

/// What the server answers on one path: a body, and optionally a Content-Length that lies.
#[derive(Clone)]
struct Route {
    body: Vec<u8>,
    /// Claim this length but send only `body`, then close (a truncated transfer).
    claimed_len: Option<usize>,
}

/// A tiny HTTP/1.1 server in a thread; unknown paths get 404. Counts requests per path.
struct Server {
    base: String,
    hits: Arc<std::sync::Mutex<BTreeMap<String, usize>>>,
    total: Arc<AtomicUsize>,
}

impl Server {
    fn start(routes: BTreeMap<&str, Route>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let base = format!("http://{}", listener.local_addr().unwrap());
        let routes: BTreeMap<String, Route> = routes
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let hits = Arc::new(std::sync::Mutex::new(BTreeMap::new()));
        let total = Arc::new(AtomicUsize::new(0));
        let (h, t) = (hits.clone(), total.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request_line = String::new();
                if reader.read_line(&mut request_line).is_err() {
                    continue;
                }
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).map_or(true, |n| n == 0) || header == "\r\n" {
                        break;
                    }
                }
                let path = request_line
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or("/")
                    .to_string();
                t.fetch_add(1, Ordering::SeqCst);
                *h.lock().unwrap().entry(path.clone()).or_insert(0) += 1;
                let _ = match routes.get(&path) {
                    Some(r) => {
                        let len = r.claimed_len.unwrap_or(r.body.len());
                        write!(stream, "HTTP/1.1 200 OK\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n")
                            .and_then(|()| stream.write_all(&r.body))
                    }
                    None => stream.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\nnot found"),
                };
                let _ = stream.flush();
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
        });
        Server { base, hits, total }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn hits(&self, path: &str) -> usize {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}

fn fetch_step(id: &str, url: &str, sha: &str) -> String {
    format!("[[step]]\nid = \"{id}\"\nkind = \"fetch\"\nurl = \"{url}\"\nsha256 = \"{sha}\"\n\n")
}

fn run(ws: &Workspace, args: &[&str]) -> (Option<i32>, String) {
    let out = ws
        .kiln()
        .args(args)
        .timeout(Duration::from_secs(60))
        .output()
        .expect("kiln runs");
    (
        out.status.code(),
        scrub(&String::from_utf8_lossy(&out.stderr), ws),
    )
}

/// Every regular file under `dir` (recursively), relative to it.
fn files_under(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let ty = e.file_type().unwrap();
            if ty.is_dir() {
                walk(root, &p, out);
            } else {
                out.push(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

fn downloads(ws: &Workspace) -> PathBuf {
    ws.state().join("cache/downloads")
}

#[test]
fn http_fetch_is_verified_cached_and_reused() {
    let body = b"release tarball bytes\n".repeat(5000);
    let sha = sha256(&body);
    let server = Server::start(BTreeMap::from([(
        "/pkg-1.0.tar.gz",
        Route {
            body: body.clone(),
            claimed_len: None,
        },
    )]));
    let ws = Workspace::new();
    ws.write(
        "r.toml",
        &fetch_step("download", &server.url("/pkg-1.0.tar.gz"), &sha),
    );
    let (code, err) = run(&ws, &["up", "r.toml"]);
    assert_eq!(code, Some(0), "{err}");
    let cached = downloads(&ws).join(&sha).join("pkg-1.0.tar.gz");
    assert_eq!(std::fs::read(&cached).unwrap(), body);
    assert_eq!(
        files_under(&downloads(&ws)),
        [format!("{sha}/pkg-1.0.tar.gz")]
    );
    assert_eq!(server.hits("/pkg-1.0.tar.gz"), 1);

    // Nothing changed: no request at all.
    let (code, err) = run(&ws, &["up", "r.toml"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(server.total.load(Ordering::SeqCst), 1);
    // Forced: the step runs, finds the verified file in the cache, and still does not download.
    let (code, err) = run(&ws, &["up", "r.toml", "--force", "download"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(server.total.load(Ordering::SeqCst), 1);
    let log = std::fs::read_to_string(ws.state().join("runs/r/logs/download.log")).unwrap();
    assert!(log.starts_with("cached: "), "{log}");

    // A second recipe (another workspace, same state dir) asking for the same bytes reuses them.
    let other = Workspace::new();
    other.write(
        "s.toml",
        &fetch_step("again", &server.url("/pkg-1.0.tar.gz"), &sha),
    );
    let out = other
        .kiln()
        .env("KILN_HOME", ws.state())
        .args(["up", "s.toml"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(server.total.load(Ordering::SeqCst), 1);
}

#[test]
fn a_cached_file_that_was_tampered_with_is_fetched_again() {
    let body = b"the real thing".to_vec();
    let sha = sha256(&body);
    let server = Server::start(BTreeMap::from([(
        "/f.bin",
        Route {
            body: body.clone(),
            claimed_len: None,
        },
    )]));
    let ws = Workspace::new();
    ws.write(
        "r.toml",
        &fetch_step("download", &server.url("/f.bin"), &sha),
    );
    assert_eq!(run(&ws, &["up", "r.toml"]).0, Some(0));
    let cached = downloads(&ws).join(&sha).join("f.bin");
    std::fs::write(&cached, b"tampered!!!!!!").unwrap();
    let (code, err) = run(&ws, &["up", "r.toml", "--force", "download"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(std::fs::read(&cached).unwrap(), body);
    assert_eq!(server.hits("/f.bin"), 2);
}

#[test]
fn file_url_fetch_works_and_verifies() {
    let ws = Workspace::new();
    let body = b"local artifact".to_vec();
    let src = ws.write("src/artifact.bin", std::str::from_utf8(&body).unwrap());
    let sha = sha256(&body);
    ws.write(
        "r.toml",
        &fetch_step("local", &format!("file://{}", src.display()), &sha),
    );
    let (code, err) = run(&ws, &["up", "r.toml"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        std::fs::read(downloads(&ws).join(&sha).join("artifact.bin")).unwrap(),
        body
    );
    // A missing local file is a clear failure.
    ws.write(
        "r.toml",
        &fetch_step(
            "local",
            &format!("file://{}/nope.bin", ws.path().display()),
            &sha,
        ),
    );
    let (code, err) = run(&ws, &["up", "r.toml"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("error: step `local` failed: download of file://[WS]/nope.bin failed: "),
        "{err}"
    );
}

#[test]
fn a_sha256_mismatch_names_both_digests_and_caches_nothing() {
    let body = b"what the server really has".to_vec();
    let wrong = sha256(b"what the recipe expected");
    let server = Server::start(BTreeMap::from([(
        "/x.tar.gz",
        Route {
            body: body.clone(),
            claimed_len: None,
        },
    )]));
    let ws = Workspace::new();
    let url = server.url("/x.tar.gz");
    ws.write(
        "r.toml",
        &format!(
            "{}[[step]]\nid = \"use\"\nkind = \"run\"\nneeds = [\"download\"]\ncmd = [\"true\"]\n",
            fetch_step("download", &url, &wrong)
        ),
    );
    let (code, err) = run(&ws, &["up", "r.toml"]);
    assert_eq!(code, Some(1), "{err}");
    let err = err.replace(&server.base, "http://[SERVER]");
    assert!(
        err.contains(&format!(
            "error: step `download` failed: sha256 mismatch for http://[SERVER]/x.tar.gz: expected {wrong}, got {}",
            sha256(&body)
        )),
        "{err}"
    );
    assert!(
        err.contains(
            "hint: the file changed upstream or the recipe's sha256 is wrong; nothing was cached"
        ),
        "{err}"
    );
    assert!(
        err.contains("notrun use: dependency `download` failed"),
        "{err}"
    );
    assert_eq!(
        files_under(&downloads(&ws)),
        Vec::<String>::new(),
        "something was left in the cache"
    );
    assert!(!ws.state().join("runs/r/receipts/download.json").exists());
}

#[test]
fn a_truncated_download_is_an_error_and_caches_nothing() {
    let full = b"0123456789".repeat(2000);
    let sha = sha256(&full);
    let half = full[..7000].to_vec();
    let server = Server::start(BTreeMap::from([(
        "/big.bin",
        Route {
            body: half,
            claimed_len: Some(full.len()),
        },
    )]));
    let ws = Workspace::new();
    ws.write(
        "r.toml",
        &fetch_step("download", &server.url("/big.bin"), &sha),
    );
    let (code, err) = run(&ws, &["up", "r.toml"]);
    assert_eq!(code, Some(1), "{err}");
    let err = err.replace(&server.base, "http://[SERVER]");
    let first = err
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_default()
        .to_string();
    assert!(
        first.starts_with("error: step `download` failed: "),
        "{err}"
    );
    assert!(first.contains("http://[SERVER]/big.bin"), "{err}");
    assert!(
        first.contains("transfer interrupted after 7000 bytes: response body closed before all bytes were read"),
        "unclear truncation error: {err}"
    );
    assert!(err.contains("nothing was cached"), "{err}");
    assert_eq!(
        files_under(&downloads(&ws)),
        Vec::<String>::new(),
        "a partial file was left in the cache"
    );
}

#[test]
fn a_missing_url_is_a_clear_error() {
    let server = Server::start(BTreeMap::new());
    let ws = Workspace::new();
    ws.write(
        "r.toml",
        &fetch_step("download", &server.url("/gone.tar.gz"), &sha256(b"x")),
    );
    let (code, err) = run(&ws, &["up", "r.toml"]);
    assert_eq!(code, Some(1), "{err}");
    let err = err.replace(&server.base, "http://[SERVER]");
    assert!(
        err.contains("download of http://[SERVER]/gone.tar.gz failed: "),
        "{err}"
    );
    assert!(err.contains("404"), "{err}");
    assert_eq!(files_under(&downloads(&ws)), Vec::<String>::new());
}

// ---- archives ----

/// A tar with `pkg-1.0/bin/tool` (0755), `pkg-1.0/README` and `pkg-1.0/share/doc/a.txt`.
fn good_tar() -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut add = |path: &str, mode: u32, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(mode);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, path, data).unwrap();
    };
    add("pkg-1.0/bin/tool", 0o755, b"#!/bin/sh\necho tool\n");
    add("pkg-1.0/README", 0o644, b"read me\n");
    add("pkg-1.0/share/doc/a.txt", 0o644, b"doc\n");
    b.into_inner().unwrap()
}

/// `tar` as `format` (tar, tar.gz, tar.xz, tar.zst): shared with the archive-safety tests.
pub(crate) fn compress(tar: &[u8], format: &str) -> Vec<u8> {
    match format {
        "tar" => tar.to_vec(),
        "tar.gz" => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(tar).unwrap();
            e.finish().unwrap()
        }
        "tar.xz" => {
            let mut e = xz2::write::XzEncoder::new(Vec::new(), 6);
            e.write_all(tar).unwrap();
            e.finish().unwrap()
        }
        "tar.zst" => zstd::encode_all(tar, 3).unwrap(),
        other => panic!("unknown format {other}"),
    }
}

fn extract_step(id: &str, archive: &str, dest: &str, extra: &str) -> String {
    format!("[[step]]\nid = \"{id}\"\nkind = \"extract\"\narchive = \"{archive}\"\ndest = \"{dest}\"\n{extra}\n\n")
}

#[test]
fn extracts_tar_gz_xz_and_zst_with_and_without_strip_components() {
    let ws = Workspace::new();
    let tar = good_tar();
    let mut text = String::new();
    for (i, format) in ["tar", "tar.gz", "tar.xz", "tar.zst"].iter().enumerate() {
        let path = ws.path().join(format!("pkg.{format}"));
        std::fs::write(&path, compress(&tar, format)).unwrap();
        let id = format.replace('.', "-");
        text.push_str(&extract_step(
            &id,
            &path.display().to_string(),
            &format!("${{recipe.dir}}/out/{id}"),
            "",
        ));
        if i == 3 {
            text.push_str(&extract_step(
                "strip",
                &path.display().to_string(),
                "${recipe.dir}/out/strip",
                "strip_components = 1",
            ));
        }
    }
    ws.write("r.toml", &text);
    let (code, err) = run(&ws, &["up", "r.toml"]);
    assert_eq!(code, Some(0), "{err}");
    for id in ["tar", "tar-gz", "tar-xz", "tar-zst"] {
        let out = ws.path().join("out").join(id);
        assert_eq!(
            files_under(&out),
            [
                "pkg-1.0/README",
                "pkg-1.0/bin/tool",
                "pkg-1.0/share/doc/a.txt"
            ],
            "{id}"
        );
        assert_eq!(
            std::fs::read_to_string(out.join("pkg-1.0/README")).unwrap(),
            "read me\n"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(out.join("pkg-1.0/bin/tool"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o111, 0o111, "{id}: the executable bit was lost");
    }
    assert_eq!(
        files_under(&ws.path().join("out/strip")),
        ["README", "bin/tool", "share/doc/a.txt"]
    );
    // No staging directories are left next to the destinations.
    let leftovers: Vec<String> = std::fs::read_dir(ws.path().join("out"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn fetch_then_extract_through_from() {
    let archive = compress(&good_tar(), "tar.zst");
    let sha = sha256(&archive);
    let server = Server::start(BTreeMap::from([(
        "/pkg-1.0.tar.zst",
        Route {
            body: archive,
            claimed_len: None,
        },
    )]));
    let ws = Workspace::new();
    ws.write(
        "r.toml",
        &format!(
            "{}[[step]]\nid = \"unpack\"\nkind = \"extract\"\nfrom = \"download\"\ndest = \"${{recipe.dir}}/pkg\"\nstrip_components = 1\n\n\
             [[step]]\nid = \"use\"\nkind = \"run\"\nneeds = [\"unpack\"]\ncmd = [\"${{steps.unpack.path}}/bin/tool\"]\n",
            fetch_step("download", &server.url("/pkg-1.0.tar.zst"), &sha)
        ),
    );
    let (code, err) = run(&ws, &["up", "r.toml"]);
    assert_eq!(code, Some(0), "{err}");
    let log = std::fs::read_to_string(ws.state().join("runs/r/logs/use.log")).unwrap();
    assert!(log.contains("\ntool\n") || log.ends_with("tool\n"), "{log}");
}

/// Write a tar header with a raw name (the tar crate refuses `..` and absolute names).
fn raw_entry(
    b: &mut tar::Builder<Vec<u8>>,
    name: &str,
    kind: tar::EntryType,
    link: Option<&str>,
    data: &[u8],
) {
    let mut h = tar::Header::new_old();
    {
        let old = h.as_old_mut();
        old.name[..name.len()].copy_from_slice(name.as_bytes());
        if let Some(l) = link {
            old.linkname[..l.len()].copy_from_slice(l.as_bytes());
        }
    }
    h.set_entry_type(kind);
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append(&h, data).unwrap();
}

/// Run an extract of `archive` bytes into a destination that already holds `keep.txt`.
fn extract_hostile(archive: Vec<u8>) -> (Workspace, Option<i32>, String) {
    let ws = Workspace::new();
    std::fs::write(ws.path().join("evil.tar"), archive).unwrap();
    ws.write("dest/keep.txt", "keep");
    std::fs::create_dir_all(ws.path().join("outside")).unwrap();
    ws.write(
        "r.toml",
        &extract_step("unpack", "${recipe.dir}/evil.tar", "${recipe.dir}/dest", ""),
    );
    let (code, err) = run(&ws, &["up", "r.toml"]);
    (ws, code, err)
}

fn assert_refused(ws: &Workspace, code: Option<i32>, err: &str, entry: &str) {
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "refusing unsafe entry `{entry}` in archive [WS]/evil.tar"
        )),
        "{err}"
    );
    assert!(
        err.contains("\nhint: ") && err.contains("nothing was extracted"),
        "{err}"
    );
    assert_eq!(
        files_under(&ws.path().join("dest")),
        ["keep.txt"],
        "the destination was touched"
    );
    assert_eq!(
        files_under(&ws.path().join("outside")),
        Vec::<String>::new(),
        "something escaped"
    );
    let names: Vec<String> = std::fs::read_dir(ws.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names.iter().any(|n| n.contains("partial")),
        "staging left behind: {names:?}"
    );
    assert!(!ws.path().join("evil").exists() && !ws.path().parent().unwrap().join("evil").exists());
    assert!(!ws.state().join("runs/r/receipts/unpack.json").exists());
}

#[test]
fn an_entry_with_dot_dot_is_refused_and_nothing_is_extracted() {
    let mut b = tar::Builder::new(Vec::new());
    raw_entry(&mut b, "pkg/ok.txt", tar::EntryType::Regular, None, b"fine");
    raw_entry(
        &mut b,
        "pkg/../../outside/evil",
        tar::EntryType::Regular,
        None,
        b"pwned",
    );
    let (ws, code, err) = extract_hostile(b.into_inner().unwrap());
    assert_refused(&ws, code, &err, "pkg/../../outside/evil");
    assert!(err.contains("it contains `..`"), "{err}");
}

#[test]
fn an_absolute_entry_is_refused() {
    let ws_probe = tempfile::tempdir().unwrap();
    let target = ws_probe.path().join("abs-evil");
    let mut b = tar::Builder::new(Vec::new());
    raw_entry(
        &mut b,
        target.to_str().unwrap(),
        tar::EntryType::Regular,
        None,
        b"pwned",
    );
    let (ws, code, err) = extract_hostile(b.into_inner().unwrap());
    assert_refused(&ws, code, &err, target.to_str().unwrap());
    assert!(err.contains("it is an absolute path"), "{err}");
    assert!(!target.exists(), "an absolute entry was written");
}

#[test]
fn writing_through_a_planted_symlink_is_refused() {
    let mut b = tar::Builder::new(Vec::new());
    raw_entry(&mut b, "pkg/README", tar::EntryType::Regular, None, b"fine");
    raw_entry(
        &mut b,
        "pkg/link",
        tar::EntryType::Symlink,
        Some("../../outside"),
        b"",
    );
    raw_entry(
        &mut b,
        "pkg/link/evil",
        tar::EntryType::Regular,
        None,
        b"pwned",
    );
    let (ws, code, err) = extract_hostile(b.into_inner().unwrap());
    assert_refused(&ws, code, &err, "pkg/link/evil");
}

#[test]
fn a_hard_link_out_of_the_destination_is_refused() {
    let mut b = tar::Builder::new(Vec::new());
    raw_entry(
        &mut b,
        "pkg/passwd",
        tar::EntryType::Link,
        Some("../../outside/secret"),
        b"",
    );
    let (ws, code, err) = extract_hostile(b.into_inner().unwrap());
    assert_refused(&ws, code, &err, "pkg/passwd");
}

#[test]
fn a_corrupt_archive_fails_cleanly_and_keeps_the_destination() {
    let mut bytes = compress(&good_tar(), "tar.gz");
    let mid = bytes.len() / 2;
    bytes.truncate(mid);
    let (ws, code, err) = extract_hostile(bytes);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("error: step `unpack` failed: cannot read archive [WS]/evil.tar"),
        "{err}"
    );
    assert_eq!(files_under(&ws.path().join("dest")), ["keep.txt"]);
}
