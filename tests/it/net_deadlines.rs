//! Misbehaving HTTP servers on loopback (issue 11): a server that stalls, one that streams forever
//! and one that sends a huge body. `fetch` honours the step's `timeout` for the whole download and
//! names the URL and the bytes received; `kiln bench` is bounded per request and caps what it reads.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use crate::common::{scrub, Workspace};

#[derive(Clone, Copy)]
enum Misbehave {
    /// Headers promising 1,000,000 bytes, 10 bytes, then silence (the socket stays open).
    StallMidBody,
    /// Read the request, never answer.
    NeverAnswer,
    /// Headers, then bytes forever (SSE comment lines for bench, raw bytes for fetch).
    Endless,
    /// One line of 8 MiB without a newline.
    HugeLine,
    /// 64 KiB SSE comment lines, 100 MiB in all.
    HugeBody,
    /// A status line, then one header of 100 KiB, then silence (the socket stays open); GETs
    /// too.
    HugeHeader,
}

/// A server whose GETs other than `/file` get 404 at once (bench asks for server info) and whose
/// other requests misbehave as told. Threads end with the test process.
fn serve(how: Misbehave) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || answer(stream, how));
        }
    });
    base
}

fn answer(mut stream: TcpStream, how: Misbehave) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request = String::new();
    let _ = reader.read_line(&mut request);
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).map_or(true, |n| n == 0) || h == "\r\n" {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length];
    let _ = std::io::Read::read_exact(&mut reader, &mut body);
    if request.starts_with("GET")
        && !request.contains("/file")
        && !matches!(how, Misbehave::HugeHeader)
    {
        let _ = stream
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        return;
    }
    let forever = Duration::from_secs(3600);
    let _ = match how {
        Misbehave::StallMidBody => stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n0123456789")
            .map(|()| std::thread::sleep(forever)),
        Misbehave::NeverAnswer => {
            std::thread::sleep(forever);
            Ok(())
        }
        Misbehave::Endless => stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
            .and_then(|()| loop {
                stream.write_all(b": still thinking\n")?;
                std::thread::sleep(Duration::from_millis(5));
            }),
        Misbehave::HugeLine => stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n: ")
            .and_then(|()| stream.write_all(&vec![b'x'; 8 << 20])),
        Misbehave::HugeBody => {
            let mut line = vec![b'x'; 64 << 10];
            line[0] = b':';
            *line.last_mut().unwrap() = b'\n';
            stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
                .and_then(|()| (0..1600).try_for_each(|_| stream.write_all(&line)))
        }
        Misbehave::HugeHeader => stream
            .write_all(b"HTTP/1.1 200 OK\r\nX-Padding: ")
            .and_then(|()| stream.write_all(&vec![b'a'; 100 << 10]))
            .and_then(|()| stream.write_all(b"\r\n\r\n"))
            .map(|()| std::thread::sleep(forever)),
    };
}

fn fetch_recipe(ws: &Workspace, url: &str) {
    ws.write(
        "r.toml",
        &format!("[[step]]\nid = \"get\"\nkind = \"fetch\"\nurl = \"{url}\"\nsha256 = \"{}\"\ntimeout = \"2s\"\n", "0".repeat(64)),
    );
}

fn kiln(ws: &Workspace, args: &[&str]) -> (Option<i32>, String) {
    let out = ws
        .kiln()
        .args(args)
        .timeout(Duration::from_secs(90))
        .output()
        .unwrap();
    (
        out.status.code(),
        scrub(&String::from_utf8_lossy(&out.stderr), ws),
    )
}

#[test]
fn a_fetch_that_stalls_mid_body_ends_at_the_step_timeout() {
    let url = format!("{}/file", serve(Misbehave::StallMidBody));
    let ws = Workspace::new();
    fetch_recipe(&ws, &url);
    let (code, err) = kiln(&ws, &["up", "r.toml"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!("download of {url} failed: not finished within the step's timeout of 2 s (10 bytes received)")),
        "{err}"
    );
    let downloads = ws.state().join("cache/downloads");
    let left: Vec<_> = std::fs::read_dir(&downloads)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_fetch_that_streams_forever_ends_at_the_step_timeout() {
    let url = format!("{}/file", serve(Misbehave::Endless));
    let ws = Workspace::new();
    fetch_recipe(&ws, &url);
    let (code, err) = kiln(&ws, &["up", "r.toml"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "download of {url} failed: not finished within the step's timeout of 2 s ("
        )),
        "{err}"
    );
    assert!(err.contains(" bytes received)"), "{err}");
}

fn bench(base: &str) -> (Option<i32>, String) {
    let ws = Workspace::new();
    kiln(
        &ws,
        &[
            "bench",
            "--url",
            base,
            "--api",
            "sglang",
            "--runs",
            "1",
            "--warmup",
            "0",
            "--max-tokens",
            "8",
            "--request-timeout",
            "2",
        ],
    )
}

#[test]
fn bench_against_a_server_that_never_answers_is_bounded() {
    let base = serve(Misbehave::NeverAnswer);
    let (code, err) = bench(&base);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!("no answer from {base}/generate within 2 s")),
        "{err}"
    );
    assert!(err.contains("--request-timeout"), "{err}");
}

#[test]
fn bench_against_an_endless_stream_is_bounded() {
    let base = serve(Misbehave::Endless);
    let (code, err) = bench(&base);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "the response from {base}/generate did not finish within 2 s ("
        )),
        "{err}"
    );
    assert!(err.contains(" bytes received)"), "{err}");
}

#[test]
fn bench_caps_what_it_reads_from_a_huge_response() {
    let base = serve(Misbehave::HugeLine);
    let (code, err) = bench(&base);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("a line longer than 1 MiB"), "{err}");
    let base = serve(Misbehave::HugeBody);
    let (code, err) = bench(&base);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "{base}/generate sent more than 64 MiB in one response"
        )),
        "{err}"
    );
}

/// A 100 KiB response header is said to be one, not "no answer within N s" (#47).
#[test]
fn bench_says_a_header_too_large_is_one() {
    let base = serve(Misbehave::HugeHeader);
    let (code, err) = bench(&base);
    assert_eq!(code, Some(1), "{err}");
    assert!(!err.contains("no answer"), "{err}");
    assert!(
        err.contains(&format!(
            "{base}/generate answered with a header larger than kiln reads (header field longer than 102400 bytes)"
        )),
        "{err}"
    );
}

/// Without `--api`, kiln asks the server which API it speaks: a 100 KiB header there is said
/// to be one too, not "nothing answered" (#47).
#[test]
fn bench_detect_says_a_header_too_large_is_one() {
    let base = serve(Misbehave::HugeHeader);
    let (code, err) = kiln(
        &Workspace::new(),
        &[
            "bench",
            "--url",
            &base,
            "--runs",
            "1",
            "--warmup",
            "0",
            "--max-tokens",
            "8",
        ],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "{base}/get_model_info answered with a header larger than kiln reads (header field longer than 102400 bytes)"
        )),
        "{err}"
    );
}

/// A server whose health check answers with a 100 KiB header never becomes ready in kiln's
/// eyes: `kiln serve` says so at once instead of polling until its timeout (#47). A hang
/// detector, not a speed test: without the fix kiln polls for the 600 s `--timeout` and
/// assert_cmd kills it at 120 s (no exit code then).
#[test]
fn serve_says_a_health_header_too_large_is_one() {
    let ws = crate::common::Workspace::new();
    let port = crate::serve::free_port();
    ws.write(
        "big.py",
        "import http.server, sys\n\
         class H(http.server.BaseHTTPRequestHandler):\n\
         \x20   def do_GET(self):\n\
         \x20       self.send_response(200); self.send_header('X-Padding', 'a' * (100 << 10)); self.end_headers(); self.wfile.write(b'{}')\n\
         http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n",
    );
    ws.write(
        "r.toml",
        &format!(
            "[recipe]\nname = \"big\"\n[profile.p]\ncmd = [\"python3\", {:?}, \"{port}\"]\nport = \"{port}\"\napi = \"openai\"\n",
            ws.path().join("big.py").display().to_string()
        ),
    );
    let out = ws
        .kiln()
        .args(["serve", "r.toml", "--timeout", "600"])
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "http://127.0.0.1:{port}/health answered with a header larger than kiln reads (header field longer than 102400 bytes)"
        )),
        "{err}"
    );
}
