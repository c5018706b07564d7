//! The one reporter at the user's level: JSON lines (schema first, `error` and `outcome` last),
//! `--quiet`, `--color` with NO_COLOR and CLICOLOR_FORCE, byte progress of fetch and extract,
//! `--jobs 0`, the watchdog outside clap (no shell completes it), recipe-name completion, and man
//! pages that name every environment variable kiln reads.

use std::process::Command;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::common::Workspace;

/// The first event named `event` in JSON lines (every line must be a JSON object).
pub(crate) fn json_event(stdout: &str, event: &str) -> serde_json::Value {
    events(stdout)
        .into_iter()
        .find(|e| e["event"] == event)
        .unwrap_or_else(|| panic!("no `{event}` event in:\n{stdout}"))
}

/// Every line of `stdout` as a JSON object.
pub(crate) fn events(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}"));
            assert!(v.is_object() && v["event"].is_string(), "not an event: {l}");
            v
        })
        .collect()
}

struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn kiln(ws: &Workspace, args: &[&str], env: &[(&str, &str)]) -> Out {
    let mut cmd = ws.kiln();
    cmd.args(args).timeout(Duration::from_secs(120));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("kiln runs");
    Out {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn run_step(id: &str, cmd: &str) -> String {
    format!("[[step]]\nid = \"{id}\"\nkind = \"run\"\ncmd = [\"sh\", \"-c\", '{cmd}']\n\n")
}

fn recipe(ws: &Workspace, steps: &str) {
    ws.write("r.toml", &format!("[recipe]\nname = \"voice\"\n\n{steps}"));
}

#[test]
fn json_lines_carry_schema_first_and_outcome_last() {
    let ws = Workspace::new();
    recipe(&ws, &run_step("one", "true"));
    let out = kiln(&ws, &["up", "r.toml", "--json"], &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let events = events(&out.stdout);
    assert_eq!(events[0]["schema"], 1, "{}", out.stdout);
    assert!(
        events[1..].iter().all(|e| e.get("schema").is_none()),
        "schema only on the first event:\n{}",
        out.stdout
    );
    let last = events.last().unwrap();
    assert_eq!(
        (&last["event"], &last["ok"], &last["exit_code"]),
        (&"outcome".into(), &true.into(), &0.into())
    );
}

#[test]
fn a_failing_run_ends_with_an_error_event_then_the_outcome() {
    let ws = Workspace::new();
    recipe(&ws, &run_step("breaks", "echo doomed; exit 3"));
    let out = kiln(&ws, &["up", "r.toml", "--json"], &[]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let events = events(&out.stdout);
    let n = events.len();
    assert_eq!(events[n - 2]["event"], "error", "{}", out.stdout);
    assert_eq!(events[n - 1]["event"], "outcome");
    assert_eq!(events[n - 1]["ok"], false);
    assert_eq!(events[n - 1]["exit_code"], 1);
    let error = &events[n - 2];
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("step `breaks` failed"),
        "{error}"
    );
    assert!(
        error["hint"].as_str().unwrap().contains("full log"),
        "{error}"
    );
    assert_eq!(error["exit_code"], 1);
    // The human error line is on stderr too, for a person reading a CI log.
    assert!(
        out.stderr.contains("error: step `breaks` failed"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_recipe_error_with_json_is_an_error_event_with_exit_2() {
    let ws = Workspace::new();
    ws.write("r.toml", "[recipe]\nname = \"voice\"\nbogus = 1\n");
    for cmd in ["up", "plan"] {
        let out = kiln(&ws, &[cmd, "r.toml", "--json"], &[]);
        assert_eq!(out.code, Some(2), "{}", out.stderr);
        let error = json_event(&out.stdout, "error");
        assert_eq!(error["exit_code"], 2);
        assert!(
            error["message"].as_str().unwrap().contains("bogus"),
            "{error}"
        );
        assert_eq!(events(&out.stdout)[0]["schema"], 1);
    }
}

#[test]
fn plan_json_is_one_plan_event_then_the_outcome() {
    let ws = Workspace::new();
    recipe(&ws, &run_step("one", "true"));
    let out = kiln(&ws, &["plan", "r.toml", "--json"], &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let kinds: Vec<String> = events(&out.stdout)
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(kinds, ["plan", "outcome"], "{}", out.stdout);
    assert_eq!(json_event(&out.stdout, "plan")["steps"][0]["id"], "one");
}

#[test]
fn quiet_says_only_results_warnings_and_errors() {
    let ws = Workspace::new();
    recipe(&ws, &run_step("one", "true"));
    let out = kiln(&ws, &["--quiet", "up", "r.toml"], &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(out.stderr, "", "nothing but errors on stderr with --quiet");
    recipe(&ws, &run_step("one", "exit 1"));
    let out = kiln(&ws, &["up", "r.toml", "-q"], &[]);
    assert_eq!(out.code, Some(1));
    assert!(!out.stderr.contains("kiln: "), "{}", out.stderr);
    assert!(out.stderr.contains("✗ failed one"), "{}", out.stderr);
    assert!(
        out.stderr.contains("error: step `one` failed"),
        "{}",
        out.stderr
    );
}

#[test]
fn colour_follows_the_flag_then_no_color_then_clicolor_force() {
    let ws = Workspace::new();
    ws.write("bad.toml", "[recipe]\nname = \"voice\"\nbogus = 1\n");
    const RED: &str = "\x1b[1;31merror:\x1b[0m";
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut all = vec!["plan", "bad.toml"];
        all.extend_from_slice(args);
        let out = kiln(&ws, &all, env);
        assert_eq!(out.code, Some(2), "{}", out.stderr);
        out.stderr
    };
    // Not a terminal: no colour by default.
    assert!(!run(&[], &[]).contains('\x1b'));
    assert!(run(&["--color", "always"], &[]).starts_with(RED));
    assert!(run(&["--color=always"], &[("NO_COLOR", "1")]).starts_with(RED));
    assert!(run(&[], &[("CLICOLOR_FORCE", "1")]).starts_with(RED));
    assert!(!run(&[], &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")]).contains('\x1b'));
    assert!(!run(&["--color", "never"], &[("CLICOLOR_FORCE", "1")]).contains('\x1b'));
    // The hint is coloured too.
    let hint = run(&["--color", "always"], &[]);
    assert!(hint.contains("\x1b[1;36mhint:\x1b[0m"), "{hint}");
}

/// 4 MiB that do not compress.
fn noise() -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..4 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn fetch_and_extract_say_how_many_bytes_of_how_many() {
    let ws = Workspace::new();
    let data = noise();
    let mut tar = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    tar.append_data(&mut h, "noise.bin", data.as_slice())
        .unwrap();
    let archive = tar.into_inner().unwrap();
    let file = ws.path().join("noise.tar");
    std::fs::write(&file, &archive).unwrap();
    let sha = Sha256::digest(&archive)
        .iter()
        .fold(String::new(), |mut out, b| {
            out.push_str(&format!("{b:02x}"));
            out
        });
    ws.write(
        "r.toml",
        &format!(
            "[recipe]\nname = \"voice\"\n\n[[step]]\nid = \"download\"\nkind = \"fetch\"\nurl = \"file://{}\"\nsha256 = \"{sha}\"\n\n\
             [[step]]\nid = \"unpack\"\nkind = \"extract\"\nfrom = \"download\"\ndest = \"${{recipe.dir}}/out\"\n",
            file.display()
        ),
    );
    let out = kiln(&ws, &["up", "r.toml"], &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    // Plain lines: one per quarter, the last at the full size.
    let total = archive.len() as f64 / (1024.0 * 1024.0);
    let full = format!("of {total:.1} MiB (100%)");
    for step in ["download", "unpack"] {
        let lines: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| l.trim_start().starts_with(&format!("{step}: ")))
            .collect();
        assert!(lines.len() >= 2, "{step}: {lines:?}\n{}", out.stderr);
        assert!(lines.last().unwrap().ends_with(&full), "{lines:?}");
    }
    // JSON lines: step_bytes events with the total (a fresh state: the download is not cached).
    std::fs::remove_dir_all(ws.state()).unwrap();
    let out = kiln(&ws, &["up", "r.toml", "--json"], &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let bytes = json_event(&out.stdout, "step_bytes");
    assert_eq!(bytes["step"], "download");
    assert_eq!(bytes["total"], archive.len());
}

#[test]
fn jobs_zero_is_refused() {
    let ws = Workspace::new();
    recipe(&ws, &run_step("one", "true"));
    let out = kiln(&ws, &["up", "r.toml", "--jobs", "0"], &[]);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("must be at least 1"), "{}", out.stderr);
}

#[test]
fn no_shell_completes_the_watchdog_and_recipe_names_are_offered() {
    let ws = Workspace::new();
    for shell in ["bash", "zsh", "fish"] {
        let out = kiln(&ws, &["completions", shell], &[]);
        assert_eq!(out.code, Some(0));
        assert!(
            !out.stdout.contains("watchdog"),
            "{shell} offers the watchdog"
        );
        assert!(
            out.stdout.contains("demo"),
            "{shell} lacks the shipped recipe names"
        );
    }
    // In a real bash: `kiln up de<TAB>` offers the shipped `demo`.
    let script = ws.write(
        "kiln.bash",
        &kiln(&ws, &["completions", "bash"], &[]).stdout,
    );
    let probe = format!(
        "source {}\nCOMP_WORDS=(kiln up de); COMP_CWORD=2; COMP_LINE='kiln up de'; COMP_POINT=10; _kiln kiln de up\n\
         echo \"names: ${{COMPREPLY[*]}}\"",
        script.display()
    );
    let out = Command::new("bash").arg("-c").arg(&probe).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("names: demo"), "{text}");
    // kiln's own watchdog still starts (outside clap): a malformed one is a usage error.
    let out = kiln(&ws, &["__watchdog"], &[]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("usage: kiln __watchdog"),
        "{}",
        out.stderr
    );
    let help = kiln(&ws, &["--help"], &[]).stdout;
    assert!(!help.contains("watchdog"), "{help}");
}

#[test]
fn man_pages_have_exit_status_environment_files_examples_and_every_command() {
    let ws = Workspace::new();
    let main = kiln(&ws, &["man"], &[]).stdout;
    for section in [
        ".SH \"EXIT STATUS\"",
        ".SH ENVIRONMENT",
        ".SH FILES",
        ".SH EXAMPLES",
    ] {
        assert!(main.contains(section), "{section} missing:\n{main}");
    }
    assert!(!main.contains("(1)"), "names an uninstalled page:\n{main}");
    // Every environment variable kiln reads is documented (PATH aside); the switches of
    // kiln's own tests (`KILN_TEST_*`, debug builds only) are not a user's to set, and the page
    // does not offer them.
    assert!(
        !main.contains("KILN_TEST_"),
        "a test switch in the man page:\n{main}"
    );
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let re = regex::Regex::new(r#"var(?:_os)?\("([A-Z_]+)"\)|env = "([A-Z_]+)""#).unwrap();
    let mut missing = Vec::new();
    for entry in walk(&src) {
        let text = std::fs::read_to_string(&entry).unwrap();
        for c in re.captures_iter(&text) {
            let name = c.get(1).or_else(|| c.get(2)).unwrap().as_str();
            if name != "PATH"
                && !name.starts_with("KILN_TEST_")
                && !main.contains(&format!("\\fB{name}\\fR"))
            {
                missing.push(format!("{name} ({})", entry.display()));
            }
        }
    }
    assert!(missing.is_empty(), "undocumented: {missing:?}");
    // Every command's page prints, nested ones too, in one word or two.
    for path in [
        &["up"][..],
        &["patch", "apply"],
        &["patch apply"],
        &["cache", "push"],
        &["image", "export"],
    ] {
        let mut args = vec!["man"];
        args.extend_from_slice(path);
        let out = kiln(&ws, &args, &[]);
        assert_eq!(out.code, Some(0), "{path:?}: {}", out.stderr);
        let title = format!(".TH kiln-{} 1", path.join(" ").replace(' ', "-"));
        assert!(out.stdout.contains(&title), "{path:?}:\n{}", out.stdout);
        assert!(out.stdout.contains(".SH \"EXIT STATUS\""), "{path:?}");
        assert_eq!(out.stdout.matches(".ds Aq").count(), 2, "one preamble");
    }
    let out = kiln(&ws, &["man", "patch", "aply"], &[]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.contains("did you mean `apply`?"),
        "{}",
        out.stderr
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out
}

#[test]
fn help_groups_the_global_options_and_shows_examples_and_env() {
    let ws = Workspace::new();
    // The `[env: NAME=value]` shows the value set: none here, so the snapshot is stable.
    let out = ws
        .kiln()
        .arg("--help")
        .env("COLUMNS", "100")
        .env_remove("KILN_HOME")
        .env_remove("KILN_NO_PROGRESS")
        .output()
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let global = &help[help.find("Global options:").expect("a global heading")..];
    for flag in ["--state-dir", "--quiet", "--no-progress", "--color"] {
        assert!(
            global.contains(flag),
            "{flag} not among the global options:\n{help}"
        );
    }
    assert!(help.contains("[env: KILN_HOME="), "{help}");
    assert!(help.contains("KILN_NO_PROGRESS=]"), "{help}");
    assert!(help.contains("Examples:"), "{help}");
    let up = kiln(&ws, &["up", "--help"], &[]).stdout;
    assert!(up.contains("serve it and prove"), "{up}");
    insta::assert_snapshot!("kiln_help", help);
}

#[test]
fn a_profile_asked_of_a_recipe_without_profiles_says_it_has_none() {
    let ws = Workspace::new();
    recipe(&ws, &run_step("one", "true"));
    let out = kiln(&ws, &["serve", "r.toml", "--profile", "x"], &[]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("hint: recipe `voice` has no profiles: add a [profile.x] table"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_dead_host_is_named_once_per_line() {
    let ws = Workspace::new();
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/file.tar");
    ws.write(
        "r.toml",
        &format!(
            "[recipe]\nname = \"voice\"\n\n[[step]]\nid = \"dl\"\nkind = \"fetch\"\nurl = \"{url}\"\nsha256 = \"{}\"\n",
            "0".repeat(64)
        ),
    );
    let out = kiln(&ws, &["up", "r.toml"], &[]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let error = out
        .stderr
        .lines()
        .find(|l| l.starts_with("error: "))
        .expect("an error line");
    assert_eq!(error.matches(&url).count(), 1, "{}", out.stderr);
    // The step log's copy of the error is not repeated under it.
    assert_eq!(
        out.stderr.matches("Connection refused").count(),
        2,
        "the failed step's line and the error line:\n{}",
        out.stderr
    );
}

#[test]
fn on_a_terminal_a_download_shows_bytes_of_total_rate_and_eta() {
    let ws = Workspace::new();
    let data = noise();
    let mut big = Vec::with_capacity(data.len() * 4);
    for _ in 0..4 {
        big.extend_from_slice(&data);
    }
    let file = ws.path().join("big.bin");
    std::fs::write(&file, &big).unwrap();
    let sha = Sha256::digest(&big)
        .iter()
        .fold(String::new(), |mut out, b| {
            out.push_str(&format!("{b:02x}"));
            out
        });
    ws.write(
        "r.toml",
        &format!(
            "[recipe]\nname = \"voice\"\n\n[[step]]\nid = \"download\"\nkind = \"fetch\"\nurl = \"file://{}\"\nsha256 = \"{sha}\"\n",
            file.display()
        ),
    );
    // A real pseudo-terminal (util-linux `script`), so kiln draws its bars.
    let kiln = assert_cmd::cargo::cargo_bin("kiln");
    let out = Command::new("script")
        .args([
            "-qec",
            &format!("{} up r.toml", kiln.display()),
            "/dev/null",
        ])
        .current_dir(ws.path())
        .env("KILN_HOME", ws.state())
        .env_remove("KILN_NO_PROGRESS")
        .env_remove("NO_COLOR")
        .env("TERM", "xterm")
        .output()
        .expect("script runs (util-linux)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let bar = text
        .split(['\r', '\n'])
        .find(|l| l.contains("download [fetch] [") && l.contains("/16.00 MiB"))
        .unwrap_or_else(|| panic!("no byte bar in:\n{text}"));
    assert!(bar.contains("/s, ETA "), "{bar}");
    // The overall bar and the end, in colour on a terminal.
    assert!(text.contains("1 of 1 step to run"), "{text}");
    assert!(text.contains("\x1b[32m✓ ran   \x1b[0m download"), "{text}");
}

/// Times (`1.2s`, `"elapsed_ms":12`) and the workspace path out of kiln's output.
fn stable(text: &str, ws: &Workspace) -> String {
    let secs = regex::Regex::new(r"\d+\.\d+s\b").unwrap();
    let ms = regex::Regex::new(r#""elapsed_ms":\d+"#).unwrap();
    let text = text.replace(&ws.path().display().to_string(), "[ws]");
    let text = secs.replace_all(&text, "[t]");
    ms.replace_all(&text, r#""elapsed_ms":[t]"#).into_owned()
}

#[test]
fn plain_and_json_lines_of_a_failing_run() {
    let ws = Workspace::new();
    recipe(
        &ws,
        &format!(
            "{}{}[[step]]\nid = \"after\"\nkind = \"run\"\nneeds = [\"breaks\"]\ncmd = [\"true\"]\n",
            run_step("fine", "true"),
            run_step("breaks", "echo doomed; exit 3")
        ),
    );
    let plain = kiln(&ws, &["up", "r.toml", "--jobs", "1"], &[]);
    assert_eq!(plain.code, Some(1));
    std::fs::remove_dir_all(ws.state()).unwrap();
    let json = kiln(&ws, &["up", "r.toml", "--jobs", "1", "--json"], &[]);
    assert_eq!(json.code, Some(1));
    insta::assert_snapshot!(
        "failing_run_plain",
        stable(
            &format!("--- stdout\n{}--- stderr\n{}", plain.stdout, plain.stderr),
            &ws
        )
    );
    insta::assert_snapshot!("failing_run_json", stable(&json.stdout, &ws));
}

#[test]
fn the_man_page_environment_and_exit_status() {
    let ws = Workspace::new();
    let main = kiln(&ws, &["man"], &[]).stdout;
    let from = main.find(".SH \"EXIT STATUS\"").unwrap();
    let to = main.find(".SH EXAMPLES").unwrap();
    insta::assert_snapshot!("man_exit_status_environment_files", &main[from..to]);
}

#[test]
fn a_signature_file_is_diagnosed_like_a_recipe() {
    let ws = Workspace::new();
    ws.write(
        "r.toml",
        "[recipe]\nname = \"voice\"\n\n[profile.p]\ncmd = [\"true\"]\nsignatures = \"sigs.toml\"\n",
    );
    ws.write("sigs.toml", "name = \"mine\"\nredy = [\"up\"]\n");
    ws.write("server.log", "up\n");
    let out = kiln(
        &ws,
        &["serve", "r.toml", "--profile", "p", "--log", "server.log"],
        &[],
    );
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("sigs.toml:2:1"), "{}", out.stderr);
    assert!(out.stderr.contains("unknown key `redy`"), "{}", out.stderr);
    assert!(
        out.stderr.contains("hint: did you mean `ready`?"),
        "{}",
        out.stderr
    );
}

/// `out`'s stdout is JSON lines of one command: `schema` on the first event only, `outcome`
/// last with the process's status, and an `error` just before it exactly when it failed.
fn assert_stream(out: &Out, what: &str) -> Vec<serde_json::Value> {
    let events = events(&out.stdout);
    let code = out.code.expect("kiln exits");
    assert_eq!(events[0]["schema"], 1, "{what}:\n{}", out.stdout);
    assert!(
        events[1..].iter().all(|e| e.get("schema").is_none()),
        "{what}: schema only on the first event:\n{}",
        out.stdout
    );
    let n = events.len();
    let last = &events[n - 1];
    assert_eq!(
        (&last["event"], &last["ok"], &last["exit_code"]),
        (&"outcome".into(), &(code == 0).into(), &code.into()),
        "{what}:\n{}",
        out.stdout
    );
    let errors = events.iter().filter(|e| e["event"] == "error").count();
    if code == 0 {
        assert_eq!(errors, 0, "{what}:\n{}", out.stdout);
    } else {
        assert!(
            n >= 2 && events[n - 2]["event"] == "error",
            "{what}:\n{}",
            out.stdout
        );
        assert_eq!(events[n - 2]["exit_code"], code, "{what}");
        assert_eq!(errors, 1, "{what}:\n{}", out.stdout);
    }
    events
}

/// Every command's `--json`, on success and on failure: JSON lines only on stdout (a CI job
/// never parses stderr), the result as a typed event.
#[test]
fn every_json_flag_prints_json_lines_ending_with_error_then_outcome() {
    let ws = Workspace::new();
    recipe(&ws, &run_step("one", "true"));
    ws.write("bad.toml", "[recipe]\nname = \"voice\"\nbogus = 1\n");
    ws.write(
        "served.toml",
        "[recipe]\nname = \"served\"\n\n[profile.p]\ncmd = [\"true\"]\nsignatures = \"llama-server\"\n",
    );
    ws.write(
        "server.log",
        "0.00.100.000 I srv  llama_server: listening on http://127.0.0.1\n",
    );
    ws.write("garbage.json", "{\n  \"url\": [\n");
    let bench = [
        "bench",
        "--url",
        "http://127.0.0.1:9",
        "--runs",
        "1",
        "--warmup",
        "0",
    ];
    let bad_baseline = [&bench[..], &["--baseline", "garbage.json"]].concat();
    // (arguments, the result event it shows, its exit status)
    let cases: Vec<(&[&str], Option<&str>, i32)> = vec![
        (&["doctor", "driver.flor"], None, 2),
        (&["doctor", "--recipe", "bad.toml"], None, 2),
        (
            &["patch", "check", "no-such-set", "--site-packages", "."],
            None,
            2,
        ),
        (&["cache", "ls"], Some("cache"), 0),
        (&["serve", "bad.toml"], None, 2),
        (
            &["serve", "served.toml", "--log", "server.log"],
            Some("verdicts"),
            0,
        ),
        (&["serve", "served.toml", "--stop"], Some("stopped"), 0),
        (&bench, None, 1),
        (&bad_baseline, None, 2),
        (&["verify", "r.toml"], None, 2),
        (&["plan", "bad.toml"], None, 2),
        (&["up", "r.toml", "--dry-run"], Some("plan"), 0),
        (&["up", "bad.toml", "--dry-run"], None, 2),
    ];
    for (args, result, code) in cases {
        let args = [args, &["--json"]].concat();
        let what = args.join(" ");
        let out = kiln(&ws, &args, &[]);
        let events = assert_stream(&out, &what);
        assert_eq!(
            out.code,
            Some(code),
            "{what}:\n{}{}",
            out.stdout,
            out.stderr
        );
        if let Some(result) = result {
            json_event(&out.stdout, result);
        }
        let error = events.iter().find(|e| e["event"] == "error");
        if let Some(e) = error {
            assert!(
                e["message"].as_str().is_some_and(|m| !m.is_empty()),
                "{what}: {e}"
            );
        }
    }
}

/// The streams of commands whose output does not depend on the host, as a CI job reads them.
#[test]
fn json_lines_of_cache_ls_serve_stop_patch_doctor_and_a_bad_baseline() {
    let ws = Workspace::new();
    ws.write("r.toml", "[recipe]\nname = \"voice\"\n");
    ws.write("base.json", "{\"event\":\"note\",\"schema\":1,\"text\":\"x\"}\n{\"event\":\"bench\",\"report\":{\"url\":7}}\n");
    let mut shown = String::new();
    for args in [
        &["cache", "ls", "--json"][..],
        &["serve", "r.toml", "--stop", "--json"],
        &[
            "patch",
            "check",
            "no-such-set",
            "--site-packages",
            ".",
            "--json",
        ],
        &["doctor", "driver.flor", "--json"],
        &[
            "bench",
            "--url",
            "http://127.0.0.1:9",
            "--baseline",
            "base.json",
            "--json",
        ],
    ] {
        let out = kiln(&ws, args, &[]);
        assert_stream(&out, &args.join(" "));
        shown.push_str(&format!("$ kiln {}\n{}", args.join(" "), out.stdout));
    }
    insta::assert_snapshot!("json_lines_of_commands", stable(&shown, &ws));
}
