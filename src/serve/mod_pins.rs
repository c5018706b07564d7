//! Pins of `serve` that its launch-boundary test leaves open (issue 48's mutation run): which
//! arguments a launch passes, the command digest, whose argv a URL's record gives, the record
//! read back and `--stop` signalling only the process it names, a `Running` that is alive until
//! stopped, and `start` itself: a job judged by its exit status and its last lines, milestones
//! said once, the fatal-line deadline, the readiness timeout, the note of a quiet server that is
//! compiling, readiness by a real generation of eight tokens (and a health check probed again
//! after a slow answer), a server tied to the thread that started it, and what `server_info` and
//! `fetch_text` read.
//!
//! Real processes (`sh`, `sleep`) in their own process groups, real files in a tempdir, and
//! loopback HTTP servers on ports the kernel picks; no environment variable is set.

use super::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn strings(s: &[&str]) -> Vec<String> {
    s.iter().map(|x| (*x).to_string()).collect()
}

/// A state directory of its own.
struct Here {
    _dir: tempfile::TempDir,
    paths: StatePaths,
}

fn here() -> Here {
    let dir = tempfile::tempdir().unwrap();
    let paths = StatePaths::new(dir.path().join("state"), None);
    create_dir(&paths.serve_dir()).unwrap();
    Here { _dir: dir, paths }
}

/// `sleep 600` in a process group of its own (ended when dropped).
struct Sleeper(Detached);

impl Sleeper {
    fn new(h: &Here) -> Sleeper {
        let spec = CommandSpec::new("sleep", ["600"]);
        Sleeper(
            process::spawn_detached(&spec, &h.paths.serve_dir().join("sleeper.log"), true).unwrap(),
        )
    }

    fn pid(&self) -> u32 {
        self.0.pid
    }

    /// Whether it has ended (reaped now if so).
    fn ended(&mut self) -> bool {
        self.0.try_exit().is_some()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        process::kill_group(self.0.pid);
        let _ = self.0.try_exit();
    }
}

/// The identity of a process that has ended (and been reaped).
fn gone_identity() -> process::Identity {
    let mut child = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    let id = process::Identity::of(child.id()).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    id
}

/// A record of recipe `r`, profile `p`, for `pid`.
fn record_of(pid: u32) -> Record {
    Record {
        recipe: "r".into(),
        profile: "p".into(),
        pid,
        url: None,
        api: "openai".into(),
        log: PathBuf::new(),
        started_unix: 0,
        identity: None,
        log_offset: 0,
        launch_id: String::new(),
        argv: vec![],
        cmd: vec![],
        cmd_sha256: String::new(),
    }
}

fn write_record(path: &Path, r: &Record) {
    std::fs::write(path, serde_json::to_string(r).unwrap()).unwrap();
}

/// A job profile: `sh -c SCRIPT`, no URL.
fn job(script: &str) -> Profile {
    Profile {
        cmd: strings(&["sh", "-c", script]),
        ..Profile::default()
    }
}

/// A server profile: `sleep 600` answered for by the loopback server at `url`.
fn server(url: &str) -> Profile {
    Profile {
        cmd: strings(&["sleep", "600"]),
        url: Some(url.into()),
        api: Some(Api::Openai),
        ..Profile::default()
    }
}

fn launch<'a>(p: &'a Profile, sigs: &'a Signatures, h: &'a Here, timeout: Duration) -> Launch<'a> {
    Launch {
        recipe: "r",
        profile_name: "p",
        profile: p,
        sigs,
        paths: &h.paths,
        detach: false,
        timeout,
        evidence: false,
    }
}

/// `start`, and every line it said.
fn started(l: &Launch) -> (Result<Running>, Vec<String>) {
    let mut said = Vec::new();
    let r = start(l, &mut |s| said.push(s.to_string()));
    (r, said)
}

fn re(s: &str) -> regex::Regex {
    regex::Regex::new(s).unwrap()
}

/// A loopback HTTP server: each request of `path` is answered with `answer(path, n)` (n: how
/// many requests of any path came before it): a status line and a body.
fn stand_in(
    answer: impl Fn(&str, usize) -> (&'static str, String) + Send + Sync + 'static,
) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let answer = Arc::new(answer);
    let count = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let (answer, count) = (answer.clone(), count.clone());
            std::thread::spawn(move || answer_one(conn, &*answer, &count));
        }
    });
    url
}

fn answer_one(
    mut conn: TcpStream,
    answer: &(dyn Fn(&str, usize) -> (&'static str, String) + Send + Sync),
    count: &AtomicUsize,
) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let path = request_line.split(' ').nth(1).unwrap_or("").to_string();
    let mut len = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; len];
    let _ = reader.read_exact(&mut body);
    let (status, body) = answer(&path, count.fetch_add(1, Ordering::SeqCst));
    let kind = if body.starts_with("data:") {
        "text/event-stream"
    } else {
        "application/json"
    };
    let _ = write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// An OpenAI completion stream of `n` tokens, its usage saying `n`.
fn completion(n: usize) -> String {
    let chunk = |v: serde_json::Value| format!("data: {v}\n\n");
    let mut s: String = (0..n)
        .map(|i| {
            chunk(
                serde_json::json!({"choices": [{"text": format!("w{i} "), "finish_reason": null}]}),
            )
        })
        .collect();
    s.push_str(&chunk(serde_json::json!({
        "choices": [{"text": "", "finish_reason": "length"}],
        "usage": {"completion_tokens": n, "prompt_tokens": 3}
    })));
    s.push_str("data: [DONE]\n\n");
    s
}

/// A server whose health answers 200 and whose completions stream `tokens` tokens.
fn healthy(tokens: usize) -> String {
    stand_in(move |path, _| match path {
        "/health" => ("200 OK", "{}".into()),
        "/v1/completions" => ("200 OK", completion(tokens)),
        _ => ("404 Not Found", "{}".into()),
    })
}

#[test]
fn an_evidence_launch_passes_the_judged_args_and_a_bench_launch_the_plain_ones() {
    let h = here();
    let sigs = Signatures::empty();
    let p = Profile {
        args: strings(&["-t", "2"]),
        evidence_args: strings(&["-lv", "5"]),
        ..job("true")
    };
    let mut l = launch(&p, &sigs, &h, DEFAULT_TIMEOUT);
    assert_eq!(l.args(), strings(&["-t", "2"]));
    l.evidence = true;
    assert_eq!(l.args(), strings(&["-t", "2", "-lv", "5"]));
}

#[test]
fn a_command_digest_is_the_sha256_of_the_program_file_name_and_each_argument_nul_ended() {
    let digest = command_digest(&strings(&["/usr/bin/python3", "-m", "a/b"]));
    assert_eq!(digest, crate::hash::sha256_bytes(b"python3\0-m\0a/b\0"));
    assert_eq!(digest, command_digest(&strings(&["python3", "-m", "a/b"])));
    // Only the program is taken by its file name.
    assert_ne!(digest, command_digest(&strings(&["python3", "-m", "b"])));
}

#[test]
fn the_recorded_argv_is_the_live_servers_recorded_at_that_url_and_no_others() {
    let h = here();
    let live = Sleeper::new(&h);
    let alive = process::Identity::of(live.pid());
    assert!(alive.is_some());
    let dir = h.paths.serve_dir();
    let at = |url: &str, argv: &[&str], identity: Option<process::Identity>| Record {
        url: Some(url.into()),
        argv: strings(argv),
        identity,
        ..record_of(live.pid())
    };
    let put = |file: &str, r: Record| write_record(&dir.join(file), &r);
    put(
        "a.json",
        at("http://127.0.0.1:9/", &["srv", "--a"], alive.clone()),
    );
    put(
        "b.json",
        at("http://127.0.0.1:8", &["other"], alive.clone()),
    );
    // No argv recorded; a process that has ended; not a record file.
    put("c.json", at("http://127.0.0.1:7", &[], alive.clone()));
    put(
        "d.json",
        at("http://127.0.0.1:6", &["gone"], Some(gone_identity())),
    );
    put("e.txt", at("http://127.0.0.1:5", &["text"], alive.clone()));
    let argv = |url: &str| recorded_argv(&h.paths, url);
    assert_eq!(argv("http://127.0.0.1:9"), Some(strings(&["srv", "--a"])));
    assert_eq!(argv("http://127.0.0.1:8/"), Some(strings(&["other"])));
    for url in [
        "http://127.0.0.1:7",
        "http://127.0.0.1:6",
        "http://127.0.0.1:5",
        "http://127.0.0.1:4",
    ] {
        assert_eq!(argv(url), None, "{url}");
    }
}

#[test]
fn base_url_is_the_url_else_the_loopback_port_else_none() {
    let p = Profile {
        url: Some("http://h:1".into()),
        port: Some(2),
        ..Profile::default()
    };
    assert_eq!(base_url(&p).as_deref(), Some("http://h:1"));
    let p = Profile {
        port: Some(30000),
        ..Profile::default()
    };
    assert_eq!(base_url(&p).as_deref(), Some("http://127.0.0.1:30000"));
    assert_eq!(base_url(&Profile::default()), None);
}

#[test]
fn stop_ends_a_recorded_server_whose_identity_holds_and_signals_none_when_it_names_another_pid() {
    let h = here();
    let path = record_path(&h.paths, "r");
    assert_eq!(path, h.paths.serve_dir().join("r.json"));
    assert!(matches!(stop_recorded(&h.paths, "r"), Ok(Stopped::Nothing)));

    let mut server = Sleeper::new(&h);
    let r = Record {
        identity: process::Identity::of(server.pid()),
        ..record_of(server.pid())
    };
    write_record(&path, &r);
    assert_eq!(
        read_record(&h.paths, "r").map(|r| r.pid),
        Some(server.pid())
    );
    match stop_recorded(&h.paths, "r").unwrap() {
        Stopped::Ended(r) => assert_eq!(r.pid, server.pid()),
        _ => panic!("the recorded server was not ended"),
    }
    assert!(server.ended(), "its group was ended");
    assert!(!path.exists(), "its record was removed");

    // The identity of one process under the pid of another: neither is signalled.
    let (mut a, mut b) = (Sleeper::new(&h), Sleeper::new(&h));
    let r = Record {
        identity: process::Identity::of(a.pid()),
        ..record_of(b.pid())
    };
    write_record(&path, &r);
    assert!(matches!(
        stop_recorded(&h.paths, "r"),
        Ok(Stopped::Stale(..))
    ));
    assert!(!a.ended() && !b.ended());
    assert!(!path.exists(), "the stale record was removed");
}

#[test]
fn a_running_server_is_alive_until_it_ends_and_stopping_ends_its_group_and_forgets_it() {
    let h = here();
    let running = |record: Record, child: Option<Detached>| Running {
        record,
        api: Api::Openai,
        log: vec![],
        log_start: 0,
        ready_after: Duration::ZERO,
        child,
    };
    let other = Sleeper::new(&h);
    assert!(running(record_of(other.pid()), None).alive(), "a live pid");
    let gone = gone_identity();
    assert!(
        !running(record_of(gone.pid), None).alive(),
        "a pid that ended"
    );

    let spec = CommandSpec::new("sleep", ["600"]);
    let child = process::spawn_detached(&spec, &h.paths.serve_dir().join("s.log"), true).unwrap();
    let pid = child.pid;
    let mut r = running(record_of(pid), Some(child));
    assert!(r.alive());
    write_record(&record_path(&h.paths, "r"), &r.record);
    r.stop(&h.paths);
    assert!(!process::pid_alive(pid), "its group was ended");
    assert!(
        !record_path(&h.paths, "r").exists(),
        "its record was removed"
    );
}

#[test]
fn an_exit_status_is_described_by_its_code_or_its_signal() {
    use std::os::unix::process::ExitStatusExt;
    let status = std::process::ExitStatus::from_raw;
    assert_eq!(describe(status(3 << 8)), "exited with status 3");
    assert_eq!(describe(status(9)), "was killed by signal 9");
}

#[test]
fn a_job_that_fails_is_an_error_with_its_exit_status_and_its_last_lines() {
    let h = here();
    let sigs = Signatures::empty();
    let p = job("echo boom-line; exit 3");
    let (r, _) = started(&launch(&p, &sigs, &h, Duration::from_secs(60)));
    let e = r.err().expect("a failed job is an error").to_string();
    assert!(e.contains("profile `p` exited with status 3 after"), "{e}");
    assert!(
        e.contains("\n--- last lines of the server log ---\nboom-line"),
        "{e}"
    );
    assert!(
        read_record(&h.paths, "r").is_none(),
        "its record was removed"
    );
}

#[test]
fn a_job_that_finishes_is_running_with_its_record_its_lines_and_each_milestone_said_once() {
    let h = here();
    let mut sigs = Signatures::empty();
    sigs.milestones = vec![
        ("loading".into(), re("^loading")),
        ("serving".into(), re("^ready-line")),
        ("never".into(), re("^never-printed")),
    ];
    let p = job("echo loading; echo ready-line; echo loading again");
    let (r, said) = started(&launch(&p, &sigs, &h, Duration::from_secs(60)));
    let running = r.unwrap();
    assert_eq!(
        running.log,
        strings(&["loading", "ready-line", "loading again"])
    );
    assert_eq!(launch_lines(&running.record), Some(running.log.clone()));
    let record = read_record(&h.paths, "r").expect("the record was written");
    assert_eq!(record.pid, running.record.pid);
    assert_eq!(record.cmd_sha256, command_digest(&p.cmd));
    let phase = |name: &str| {
        said.iter()
            .filter(|s| s.contains(&format!("s] {name} (+")))
            .count()
    };
    assert_eq!(
        (phase("loading"), phase("serving"), phase("never")),
        (1, 1, 0),
        "{said:?}"
    );
    assert!(said.iter().any(|s| s.ends_with("s] finished")), "{said:?}");
}

#[test]
fn a_line_that_is_not_fatal_arms_no_fatal_deadline() {
    let h = here();
    let mut sigs = Signatures::empty();
    sigs.fatal = vec![re("FATAL")];
    // Running on for twice the fatal grace after an ordinary line: it finishes.
    let p = job("echo loading; sleep 4");
    let (r, said) = started(&launch(&p, &sigs, &h, Duration::from_secs(60)));
    assert!(r.is_ok(), "{:?} {said:?}", r.err());
}

#[test]
fn a_fatal_line_ends_a_launch_that_goes_on_running() {
    let h = here();
    let mut sigs = Signatures::empty();
    sigs.fatal = vec![re("FATAL")];
    let p = job("echo FATAL: out of memory; exec sleep 600");
    let (r, _) = started(&launch(&p, &sigs, &h, Duration::from_secs(30)));
    let e = r.err().expect("a fatal line is an error").to_string();
    assert!(
        e.contains("profile `p` hit a fatal error while its HTTP port may still answer"),
        "{e}"
    );
}

#[test]
fn an_exit_soon_after_a_fatal_line_is_judged_by_its_exit_status() {
    let h = here();
    let mut sigs = Signatures::empty();
    sigs.fatal = vec![re("FATAL")];
    let p = job("echo FATAL: out of memory; sleep 0.5; exit 3");
    let (r, _) = started(&launch(&p, &sigs, &h, Duration::from_secs(60)));
    let e = r.err().expect("a failed job is an error").to_string();
    assert!(e.contains("profile `p` exited with status 3"), "{e}");
}

#[test]
fn a_job_running_past_its_timeout_is_not_ready() {
    let h = here();
    let sigs = Signatures::empty();
    let p = job("echo loading; sleep 30");
    let (r, _) = started(&launch(&p, &sigs, &h, Duration::from_secs(2)));
    let e = r.err().expect("not ready in time").to_string();
    assert!(e.contains("profile `p` was not ready after 2 s"), "{e}");
}

#[test]
fn a_quiet_job_whose_group_runs_a_compiler_is_said_compiling_once_every_twenty_seconds() {
    let h = here();
    let mut sigs = Signatures::empty();
    sigs.compilers = strings(&["sleep"]);
    // One line, then 22 s of silence while two `sleep`s (the "compiler") run in its group.
    let p = job("echo loading; sleep 22 & sleep 22 & wait");
    let (r, said) = started(&launch(&p, &sigs, &h, Duration::from_secs(120)));
    assert!(r.is_ok(), "{:?} {said:?}", r.err());
    let notes: Vec<&String> = said
        .iter()
        .filter(|s| s.contains("compiling") || s.contains("waiting"))
        .collect();
    assert_eq!(notes.len(), 1, "{said:?}");
    assert!(
        notes[0].ends_with("s] still compiling (sleep), not hung"),
        "{said:?}"
    );
}

#[test]
fn a_job_that_prints_every_few_seconds_is_never_said_quiet() {
    let h = here();
    let mut sigs = Signatures::empty();
    sigs.compilers = strings(&["sleep"]);
    // 24 s of work, a line every 4 s: never 20 s without output, so no note, though the last
    // note (none: the start) is more than 20 s old by the end.
    let p = job("for i in 1 2 3 4 5 6; do echo step $i; sleep 4; done");
    let (r, said) = started(&launch(&p, &sigs, &h, Duration::from_secs(120)));
    assert!(r.is_ok(), "{:?} {said:?}", r.err());
    assert!(said.iter().any(|s| s.ends_with("s] finished")), "{said:?}");
    assert!(
        !said
            .iter()
            .any(|s| s.contains("compiling") || s.contains("waiting")),
        "{said:?}"
    );
}

#[test]
fn a_server_is_ready_after_a_generation_of_eight_tokens_and_ends_with_the_thread_that_started_it() {
    let h = here();
    let sigs = Signatures::empty();
    let p = server(&healthy(8));
    let l = launch(&p, &sigs, &h, Duration::from_secs(60));
    // Started (not detached) by a thread that then ends.
    let (r, said) = std::thread::scope(|s| s.spawn(|| started(&l)).join().unwrap());
    let mut running = r.unwrap();
    assert!(
        said.iter()
            .any(|s| s.ends_with("s] ready: a real generation returned 8 tokens")),
        "{said:?}"
    );
    let until = Instant::now() + Duration::from_secs(20);
    while running.alive() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    let alive = running.alive();
    running.stop(&h.paths);
    assert!(
        !alive,
        "a server kiln does not detach ends with the thread that started it"
    );
}

#[test]
fn a_server_whose_generation_returns_fewer_tokens_is_not_ready() {
    let h = here();
    let sigs = Signatures::empty();
    let p = server(&healthy(3));
    let (r, _) = started(&launch(&p, &sigs, &h, Duration::from_secs(60)));
    let e = r.err().expect("three tokens are not ready").to_string();
    assert!(
        e.contains("answered its health check but a generation returned 3 of 8 tokens"),
        "{e}"
    );
}

#[test]
fn a_health_check_slower_than_the_probe_interval_is_probed_again() {
    let h = here();
    let sigs = Signatures::empty();
    // The first health check answers 503 after 600 ms (longer than the 500 ms between probes);
    // every later one answers 200.
    let url = stand_in(|path, n| match path {
        "/health" if n == 0 => {
            std::thread::sleep(Duration::from_millis(600));
            ("503 Service Unavailable", "{}".into())
        }
        "/health" => ("200 OK", "{}".into()),
        "/v1/completions" => ("200 OK", completion(8)),
        _ => ("404 Not Found", "{}".into()),
    });
    let p = server(&url);
    let (r, said) = started(&launch(&p, &sigs, &h, Duration::from_secs(20)));
    let running = r.unwrap_or_else(|e| panic!("{e} {said:?}"));
    running.stop(&h.paths);
}

#[test]
fn server_info_is_the_json_of_a_200_and_fetch_text_the_body_of_a_200() {
    let url = stand_in(|path, _| match path {
        "/props" => ("200 OK", r#"{"model":"m"}"#.into()),
        "/metrics" => ("200 OK", "kiln_metric 1\n".into()),
        "/missing" => ("404 Not Found", r#"{"error":"no"}"#.into()),
        _ => ("404 Not Found", "{}".into()),
    });
    let mut sigs = Signatures::empty();
    sigs.info = Some("/props".into());
    assert_eq!(
        server_info(&sigs, &format!("{url}/")),
        Some(serde_json::json!({"model": "m"}))
    );
    sigs.info = Some("/missing".into());
    assert_eq!(server_info(&sigs, &url), None, "a 404's JSON is no answer");
    assert_eq!(
        fetch_text(&format!("{url}/metrics")).as_deref(),
        Some("kiln_metric 1\n")
    );
    assert_eq!(fetch_text(&format!("{url}/missing")), None);
}
