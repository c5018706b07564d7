//! `serve`: launch a profile's server in its own process group (log in the state dir), wait for
//! readiness with phase milestones, triage an early exit, and judge the tunings it asked for.

pub mod evidence;
pub mod logtail;
mod reuse;

pub(crate) use reuse::listener as port_holder;
pub mod signatures;
pub mod verdict;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::bench::client::{self, Api, Request};
use crate::error::{Error, Result};
use crate::fs::{create_dir, write_atomic_private};
use crate::paths::StatePaths;
use crate::process::{self, CommandSpec, Detached};
use crate::recipe::Profile;
use logtail::LogTail;
use signatures::Signatures;

/// Default readiness timeout: big models with JIT warm-up take minutes.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);
/// Tokens the readiness generation must return.
const READY_TOKENS: u32 = 8;

/// Everything needed to start one profile.
pub struct Launch<'a> {
    pub recipe: &'a str,
    pub profile_name: &'a str,
    pub profile: &'a Profile,
    pub sigs: &'a Signatures,
    pub paths: &'a StatePaths,
    /// Keep running after kiln exits (no parent-death signal).
    pub detach: bool,
    pub timeout: Duration,
    /// A judged launch: the profile's `evidence_args` are applied to its `args` (a bench
    /// launch leaves them off).
    pub evidence: bool,
}

impl Launch<'_> {
    /// The arguments this launch passes after `cmd`.
    pub fn args(&self) -> Vec<String> {
        if self.evidence {
            self.profile.judged_args()
        } else {
            self.profile.args.clone()
        }
    }
}

/// What `kiln serve --stop` needs to end a server it started.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub recipe: String,
    pub profile: String,
    pub pid: u32,
    pub url: Option<String>,
    pub api: String,
    pub log: PathBuf,
    pub started_unix: u64,
    /// Which process `pid` is (start time, boot, executable): `--stop` signals only that one.
    #[serde(default)]
    pub(crate) identity: Option<process::Identity>,
    /// Where this launch's header starts in `log` (the file is appended to, launch after launch):
    /// the launch boundary is this offset kiln recorded, never a line of text.
    #[serde(default)]
    pub log_offset: u64,
    /// The nonce in this launch's header line, checked at `log_offset` before its lines are read.
    #[serde(default)]
    pub launch_id: String,
    /// The command line it was started with (secret values redacted): the bench fingerprint's
    /// server arguments.
    #[serde(default)]
    pub argv: Vec<String>,
    /// The command line kiln launched (program and arguments), secret values redacted like
    /// `argv`'s.
    #[serde(default)]
    pub cmd: Vec<String>,
    /// [`command_digest`] of the command line as launched, secrets in: how the process is
    /// recognised later without keeping them in the record.
    #[serde(default)]
    pub cmd_sha256: String,
}

/// sha256 of a command line (the program by its file name, then each argument, NUL-separated):
/// what identifies a launch in its record without the secrets its arguments may hold.
pub(crate) fn command_digest(cmd: &[String]) -> String {
    let mut bytes = Vec::new();
    for (i, part) in cmd.iter().enumerate() {
        let part = if i == 0 {
            part.rsplit('/').next().unwrap_or(part)
        } else {
            part
        };
        bytes.extend_from_slice(part.as_bytes());
        bytes.push(0);
    }
    crate::hash::sha256_bytes(&bytes)
}

/// The command line of the server kiln recorded at `url`, if one is recorded and alive.
pub fn recorded_argv(paths: &StatePaths, url: &str) -> Option<Vec<String>> {
    let url = url.trim_end_matches('/');
    std::fs::read_dir(paths.serve_dir())
        .ok()?
        .filter_map(std::result::Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| crate::bounded::read_state(&e.path(), crate::bounded::STATE_CAP).ok())
        .filter_map(|t| serde_json::from_str::<Record>(&t).ok())
        .find(|r| {
            r.url.as_deref().map(|u| u.trim_end_matches('/')) == Some(url)
                && !r.argv.is_empty()
                && r.identity.as_ref().is_some_and(|i| i.verify().is_ok())
        })
        .map(|r| r.argv)
}

pub fn record_path(paths: &StatePaths, recipe: &str) -> PathBuf {
    paths.serve_record(recipe)
}

pub fn read_record(paths: &StatePaths, recipe: &str) -> Option<Record> {
    let text =
        crate::bounded::read_state(&record_path(paths, recipe), crate::bounded::STATE_CAP).ok()?;
    serde_json::from_str(&text).ok()
}

/// A server that came up (or a job that finished, for profiles without a port).
pub struct Running {
    pub record: Record,
    pub api: Api,
    pub log: Vec<String>,
    /// Where this launch's lines start in `record.log` (the file is appended to, launch after
    /// launch): verdicts read from here instead of the whole file.
    pub log_start: u64,
    pub ready_after: Duration,
    child: Option<Detached>,
}

impl Running {
    /// Whether the server process itself is still alive.
    pub fn alive(&mut self) -> bool {
        match &mut self.child {
            Some(c) => c.try_exit().is_none(),
            None => process::pid_alive(self.record.pid),
        }
    }

    /// End the whole process group and forget the record.
    pub fn stop(mut self, paths: &StatePaths) {
        process::kill_group(self.record.pid);
        if let Some(c) = &mut self.child {
            let _ = c.try_exit();
        }
        let _ = std::fs::remove_file(record_path(paths, &self.record.recipe));
    }

    /// Give up the handle without stopping the server (`--detach`).
    pub fn leave_running(self) {}
}

/// The server's base URL: `url`, else `http://127.0.0.1:PORT`, else none (a batch job).
pub fn base_url(p: &Profile) -> Option<String> {
    p.url
        .clone()
        .or_else(|| p.port.map(|port| format!("http://127.0.0.1:{port}")))
}

/// The API the profile declares; `openai` when it declares none (validation rejected any
/// unknown name with its location).
pub fn profile_api(p: &Profile) -> Api {
    p.api.unwrap_or(Api::Openai)
}

/// Start the profile and wait until it is ready. On any failure the process group is ended and
/// the error carries the classified cause and the log tail.
pub fn start(l: &Launch, say: &mut dyn FnMut(&str)) -> Result<Running> {
    let p = l.profile;
    let Some((program, rest)) = p.cmd.split_first() else {
        return Err(Error::usage(
            format!("profile `{}` has no `cmd`", l.profile_name),
            Some("give it `cmd = [\"python\", \"-m\", \"sglang.launch_server\"]` or extend a profile that has one".into()),
        ));
    };
    let url = base_url(p);
    let api = profile_api(p);
    let args = l.args();
    let mut spec = CommandSpec::new(program.clone(), rest.iter().chain(&args).cloned());
    spec.env = p.env.clone();
    let cmd: Vec<String> = std::iter::once(&spec.program)
        .chain(&spec.args)
        .cloned()
        .collect();
    not_built(&spec.program, l.recipe)?;
    if let (Some(port), None) = (p.port, &p.url) {
        reuse::clear_port(l, port, &cmd, say)?;
    }
    let log_path = l.paths.serve_log(l.recipe, l.profile_name);
    create_dir(&l.paths.serve_dir())?;
    let log_start;
    let launch_id = launch_nonce();
    let redactor =
        crate::redact::Redactor::from_env(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let argv: Vec<String> = p
        .cmd
        .iter()
        .chain(&args)
        .map(|a| redactor.redact(a))
        .collect();
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| Error::io(format!("cannot open {}", log_path.display()), e))?;
        log_start = f.metadata().map_or(0, |m| m.len());
        let _ = writeln!(
            f,
            "{} {}: {}",
            launch_header(l.recipe, l.profile_name),
            launch_tag(&launch_id),
            redactor.redact(&spec.display())
        );
    }
    let mut tail = LogTail::from_end(&log_path);
    let started = Instant::now();
    let mut child = process::spawn_detached(&spec, &log_path, !l.detach)?;
    let record = Record {
        recipe: l.recipe.to_string(),
        profile: l.profile_name.to_string(),
        pid: child.pid,
        url: url.clone(),
        api: api.name().to_string(),
        log: log_path.clone(),
        started_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        identity: process::Identity::of(child.pid),
        log_offset: log_start,
        launch_id,
        argv,
        cmd_sha256: command_digest(&cmd),
        cmd: cmd.iter().map(|a| redactor.redact(a)).collect(),
    };
    write_record_or_stop(l, &record, &mut child)?;
    say(&format!(
        "started profile `{}` (pid {}), log: {}",
        l.profile_name,
        child.pid,
        log_path.display()
    ));
    let mut running = Running {
        log_start,
        record,
        api,
        log: Vec::new(),
        ready_after: Duration::ZERO,
        child: Some(child),
    };
    match wait_ready(l, &mut running, &mut tail, started, say) {
        Ok(()) => {
            running.log = tail.lines();
            running.ready_after = started.elapsed();
            Ok(running)
        }
        Err(e) => {
            let pid = running.record.pid;
            process::kill_group(pid);
            if let Some(c) = &mut running.child {
                let _ = c.try_exit();
            }
            let _ = std::fs::remove_file(record_path(l.paths, l.recipe));
            Err(e)
        }
    }
}

/// Write the record of the server just started (0600). Without its record a detached server
/// could never be found again (`--stop`): one whose record cannot be written (a full disk) is
/// stopped, not left running unrecorded.
fn write_record_or_stop(l: &Launch, record: &Record, child: &mut Detached) -> Result<()> {
    let recorded = serde_json::to_string_pretty(record)
        .map_err(|e| Error::other(format!("cannot record the server: {e}"), None))
        .and_then(|json| write_atomic_private(&record_path(l.paths, l.recipe), json.as_bytes()));
    let Err(e) = recorded else {
        return Ok(());
    };
    process::kill_group(child.pid);
    let _ = child.try_exit();
    let mut why = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        why.push_str(&format!(": {c}"));
        cause = c.source();
    }
    Err(Error::other(
        format!(
            "{why}; the server (pid {}) was stopped: without its record, `kiln serve --stop` \
             could not find it",
            record.pid
        ),
        Some(format!(
            "free space under {} and start it again",
            l.paths.serve_dir().display()
        )),
    ))
}

/// The first words of the header line kiln writes before each launch.
/// A profile's program given as a path where nothing is: most often made by the recipe's own
/// steps, which have not run on this state yet (`kiln serve` before `kiln up`).
fn not_built(program: &str, recipe: &str) -> Result<()> {
    let path = Path::new(program);
    if !program.contains('/') || path.exists() {
        return Ok(());
    }
    Err(Error::usage(
        format!("cannot launch: the profile's program {program} does not exist"),
        format!("if the steps of recipe `{recipe}` make it, run them first: `kiln up` with the same recipe and `--no-serve` (or without it, to serve too); otherwise fix the profile's `cmd`"),
    ))
}

fn launch_header(recipe: &str, profile: &str) -> String {
    format!("=== kiln serve {recipe} --profile {profile}")
}

fn launch_tag(id: &str) -> String {
    format!("[launch {id}]")
}

/// A nonce for one launch: 16 random bytes as hex (the time and pid where /dev/urandom is not
/// readable).
fn launch_nonce() -> String {
    use std::io::Read;
    let mut b = [0u8; 16];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    if read.is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        return crate::hash::sha256_bytes(format!("{t}-{}", std::process::id()).as_bytes())[..32]
            .to_string();
    }
    b.iter().fold(String::new(), |mut s, x| {
        use std::fmt::Write;
        let _ = write!(s, "{x:02x}");
        s
    })
}

/// This launch's lines of its log: what follows the header kiln wrote at `record.log_offset`,
/// checked by its nonce. `None` when the file no longer holds that header there (rotated,
/// truncated): no line of server output can stand in for it.
pub fn launch_lines(record: &Record) -> Option<Vec<String>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(&record.log).ok()?;
    f.seek(SeekFrom::Start(record.log_offset)).ok()?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let (header, rest) = text.split_once('\n')?;
    let expected = format!(
        "{} {}: ",
        launch_header(&record.recipe, &record.profile),
        launch_tag(&record.launch_id)
    );
    if record.launch_id.is_empty() || !header.starts_with(&expected) {
        return None;
    }
    Some(rest.lines().map(String::from).collect())
}

/// The error of a profile that was not ready within its timeout.
fn not_ready(l: &Launch, lines: &[String], phase: Option<&String>, log: &Path) -> Error {
    let phase = phase.map_or("before any milestone".to_string(), |p| {
        format!("after `{p}`")
    });
    Error::other(
        format!(
            "profile `{}` was not ready after {} s ({phase}); its process group was ended\n--- last lines of the server log ---\n{}",
            l.profile_name,
            l.timeout.as_secs(),
            logtail::crash_tail(lines, 20).join("\n")
        ),
        Some(format!(
            "full log: {}; raise `timeout` in the profile if it was still making progress",
            log.display()
        )),
    )
}

/// What a quiet server is doing: compiling (a known compiler runs in its group), or waiting.
fn quiet_note(l: &Launch, pgid: u32, started: Instant, last_output: Instant) -> String {
    let compiling: Vec<String> = process::group_commands(pgid)
        .into_iter()
        .filter(|c| l.sigs.compilers.iter().any(|k| k == c))
        .collect();
    let at = started.elapsed().as_secs_f64();
    if compiling.is_empty() {
        format!(
            "  [{at:>7.1}s] waiting (no output for {} s)",
            last_output.elapsed().as_secs()
        )
    } else {
        format!(
            "  [{at:>7.1}s] still compiling ({}), not hung",
            dedup(compiling).join(", ")
        )
    }
}

fn wait_ready(
    l: &Launch,
    run: &mut Running,
    tail: &mut LogTail,
    started: Instant,
    say: &mut dyn FnMut(&str),
) -> Result<()> {
    let url = run.record.url.clone();
    let ready_path = l
        .profile
        .ready
        .clone()
        .unwrap_or_else(|| run.api.spec().ready.to_string());
    let mut last_phase_at = Duration::ZERO;
    let mut seen_phases = Vec::<String>::new();
    let mut last_output = Instant::now();
    let mut last_compile_note = Instant::now();
    // None: not probed yet (an Instant 10 s back does not exist on a box booted since).
    let mut last_probe: Option<Instant> = None;
    let mut fatal_at: Option<Instant> = None;
    let mut log_ready = false;
    loop {
        let lines = tail.poll(false);
        if !lines.is_empty() {
            last_output = Instant::now();
        }
        for line in &lines {
            for (phase, re) in &l.sigs.milestones {
                if re.is_match(line) && !seen_phases.contains(phase) {
                    let at = started.elapsed();
                    say(&format!(
                        "  [{:>7.1}s] {phase} (+{:.1}s)",
                        at.as_secs_f64(),
                        at.checked_sub(last_phase_at).unwrap().as_secs_f64()
                    ));
                    last_phase_at = at;
                    seen_phases.push(phase.clone());
                }
            }
            if l.sigs.ready.iter().any(|r| r.is_match(line)) {
                log_ready = true;
            }
            if fatal_at.is_none() && l.sigs.fatal.iter().any(|r| r.is_match(line)) {
                fatal_at = Some(Instant::now());
            }
        }
        if let Some(status) = run.child.as_mut().and_then(Detached::try_exit) {
            std::thread::sleep(Duration::from_millis(100));
            tail.poll(true);
            if url.is_none() && status.success() {
                say(&format!(
                    "  [{:>7.1}s] finished",
                    started.elapsed().as_secs_f64()
                ));
                return Ok(());
            }
            return Err(exited(
                l,
                &tail.lines(),
                &describe(status),
                started.elapsed(),
                &run.record.log,
            ));
        }
        if fatal_at.is_some_and(|t| t.elapsed() > Duration::from_secs(2)) {
            tail.poll(true);
            return Err(exited(
                l,
                &tail.lines(),
                "hit a fatal error while its HTTP port may still answer",
                started.elapsed(),
                &run.record.log,
            ));
        }
        if process::interrupted() {
            return Err(Error::other(
                format!(
                    "interrupted while profile `{}` was starting; its process group was ended",
                    l.profile_name
                ),
                None,
            ));
        }
        if started.elapsed() > l.timeout {
            tail.poll(true);
            return Err(not_ready(
                l,
                &tail.lines(),
                seen_phases.last(),
                &run.record.log,
            ));
        }
        if last_output.elapsed() > Duration::from_secs(20)
            && last_compile_note.elapsed() > Duration::from_secs(20)
        {
            last_compile_note = Instant::now();
            say(&quiet_note(l, run.record.pid, started, last_output));
        }
        if let Some(base) = &url {
            let every = Duration::from_millis(if log_ready { 100 } else { 500 });
            if last_probe.is_none_or(|t| t.elapsed() >= every) {
                last_probe = Some(Instant::now());
                // An answer kiln cannot read (a header too large) will not change: said now,
                // not after the timeout.
                let answered =
                    client::answer(&format!("{base}{ready_path}"), Duration::from_secs(5))?;
                if matches!(answered, Some((200, _))) {
                    let at = started.elapsed();
                    say(&format!(
                        "  [{:>7.1}s] {ready_path} answered 200 (+{:.1}s)",
                        at.as_secs_f64(),
                        at.checked_sub(last_phase_at).unwrap().as_secs_f64()
                    ));
                    check_generation(base, run.api, l, started)?;
                    say(&format!(
                        "  [{:>7.1}s] ready: a real generation returned {READY_TOKENS} tokens",
                        started.elapsed().as_secs_f64()
                    ));
                    tail.poll(true);
                    return Ok(());
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn dedup(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v.dedup();
    v
}

fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("was killed by signal {s}"),
        _ => "ended".into(),
    }
}

/// The readiness generation: health alone can pass on a server that cannot generate. It gets
/// what is left of the profile's readiness timeout (`serve --timeout`), not a deadline of its own.
fn check_generation(base: &str, api: Api, l: &Launch, started: Instant) -> Result<()> {
    let profile = l.profile_name;
    let deadline = l.timeout.saturating_sub(started.elapsed());
    let req = Request {
        prompt: "Hello",
        max_tokens: READY_TOKENS,
        greedy: true,
        ignore_eos: true,
        timeout: deadline.max(Duration::from_secs(1)),
    };
    let g = client::generate(base, api, &req)?;
    if g.tokens != u64::from(READY_TOKENS) {
        return Err(Error::other(
            format!("profile `{profile}` answered its health check but a generation returned {} of {READY_TOKENS} tokens", g.tokens),
            Some("the server ignores `ignore_eos` or stops early; check its sampling defaults".into()),
        ));
    }
    Ok(())
}

/// The error for a server that died early: classified cause, traceback tail, hint.
pub fn exited(l: &Launch, lines: &[String], how: &str, after: Duration, log: &Path) -> Error {
    let cause = l.sigs.classify(lines);
    let mut msg = format!(
        "profile `{}` {how} after {:.1} s",
        l.profile_name,
        after.as_secs_f64()
    );
    match &cause {
        Some((c, line)) => msg.push_str(&format!(
            "\ncause: {} [{}]\n  evidence: {line}",
            c.title, c.id
        )),
        None => msg.push_str("\ncause: unclassified (no known signature in the log)"),
    }
    let shown = logtail::crash_tail(lines, 40);
    if !shown.is_empty() {
        msg.push_str("\n--- last lines of the server log ---\n");
        msg.push_str(&shown.join("\n"));
    }
    let hint = match cause {
        Some((c, _)) => format!("{}; full log: {}", c.hint, log.display()),
        None => format!("read the full log: {}", log.display()),
    };
    Error::other(msg, Some(hint))
}

/// The server's own view of its settings (`/server_info`, `/props`), if it has one.
pub fn server_info(sigs: &Signatures, base: &str) -> Option<serde_json::Value> {
    let path = sigs.info.as_deref()?;
    let (code, body) = client::get(
        &format!("{}{path}", base.trim_end_matches('/')),
        Duration::from_secs(10),
    )?;
    (code == 200)
        .then(|| serde_json::from_str(&body).ok())
        .flatten()
}

/// The body of a GET that answered 200 (a metrics page), if any.
pub fn fetch_text(url: &str) -> Option<String> {
    match client::get(url, Duration::from_secs(10))? {
        (200, body) => Some(body),
        _ => None,
    }
}

/// What `kiln serve --stop` found.
pub enum Stopped {
    /// No server recorded (or it had ended already).
    Nothing,
    /// Its process group was ended.
    Ended(Record),
    /// The record no longer names the process kiln started: nothing was signalled (why).
    Stale(Record, String),
}

/// Stop the server recorded for `recipe`, only if its pid still names the process kiln started
/// (see [`process::identity`]); the record is removed either way.
pub fn stop_recorded(paths: &StatePaths, recipe: &str) -> Result<Stopped> {
    let Some(r) = read_record(paths, recipe) else {
        return Ok(Stopped::Nothing);
    };
    let outcome = match &r.identity {
        Some(id) if id.pid == r.pid => process::stop_recorded_group(id),
        _ => process::identity::verify_bare(r.pid),
    };
    let _ = std::fs::remove_file(record_path(paths, recipe));
    Ok(match outcome {
        Ok(()) => Stopped::Ended(r),
        Err(process::Refusal::Gone(_)) => Stopped::Nothing,
        Err(why) => Stopped::Stale(r, why.to_string()),
    })
}

#[cfg(test)]
#[path = "."] // `pins` below is src/serve/mod_pins.rs, under `serve::tests::`
mod tests {
    use super::*;

    #[path = "mod_pins.rs"]
    mod pins;

    /// A record of launch `id` of `r --profile p` whose header sits at `offset` of `log`.
    fn record(log: &Path, offset: u64, id: &str) -> Record {
        serde_json::from_value(serde_json::json!({
            "recipe": "r", "profile": "p", "pid": 1, "url": null, "api": "openai",
            "log": log, "started_unix": 0, "log_offset": offset, "launch_id": id,
        }))
        .unwrap()
    }

    #[test]
    fn a_launch_header_counts_only_with_its_own_nonce_at_the_recorded_offset() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("server.log");
        let nonce = launch_nonce();
        assert_eq!(nonce.len(), 32);
        assert_ne!(nonce, launch_nonce(), "a nonce per launch");
        let earlier = "=== kiln serve r --profile p [launch 0]: server\nold line\n";
        let header = format!("=== kiln serve r --profile p [launch {nonce}]: server\n");
        std::fs::write(&log, format!("{earlier}{header}new line\n")).unwrap();
        let at = earlier.len() as u64;
        assert_eq!(
            launch_lines(&record(&log, at, &nonce)),
            Some(vec!["new line".to_string()])
        );
        // The header without its nonce, another launch's nonce, no nonce recorded, or the
        // offset of an earlier header: none is this launch's boundary.
        for (offset, id) in [(at, "0"), (at, "deadbeef"), (at, ""), (0, nonce.as_str())] {
            assert_eq!(
                launch_lines(&record(&log, offset, id)),
                None,
                "{offset} {id}"
            );
        }
        let bare = "=== kiln serve r --profile p: server\nnew line\n";
        std::fs::write(&log, bare).unwrap();
        assert_eq!(
            launch_lines(&record(&log, 0, &nonce)),
            None,
            "no nonce in the header"
        );
        // A record without a nonce (written before there were any) matches no header at all,
        // not even one with an empty tag that a line of server output could print.
        std::fs::write(
            &log,
            "=== kiln serve r --profile p [launch ]: server\nnew line\n",
        )
        .unwrap();
        assert_eq!(launch_lines(&record(&log, 0, "")), None, "an empty nonce");
    }
}
