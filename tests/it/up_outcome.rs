//! Every exit path of `kiln up`: success, an advisory (a warning: exit 0 and kept in the report),
//! the same with `--strict` (exit 1), a step failure, a host-tool preflight failure and a verdict
//! failure. Each non-zero exit ends with one `error:` block, and report.json says how it ended.

use std::process::Output;

use crate::bench::tiny_cpu;
use crate::common::Workspace;
use crate::serve::free_port;

/// The stderr of a failed run: exactly one `error:` line, and nothing of kiln's after its block.
fn error_line(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let errors: Vec<(usize, &str)> = stderr
        .lines()
        .enumerate()
        .filter(|(_, l)| l.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 1, "one `error:` line:\n{stderr}");
    let (at, line) = errors[0];
    assert!(
        stderr
            .lines()
            .skip(at + 1)
            .all(|l| !l.starts_with("kiln: ")),
        "the error block ends the output:\n{stderr}"
    );
    line.to_string()
}

fn report(ws: &Workspace, recipe: &str) -> serde_json::Value {
    let path = ws.state().join("reports").join(recipe).join("report.json");
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

#[test]
fn a_missing_host_tool_stops_up_before_the_first_step() {
    let ws = Workspace::new();
    ws.write(
        "r.toml",
        r#"[recipe]
name = "pre"
requires = ["python3>=99", "cc"]

[[step]]
id = "touch"
kind = "run"
cmd = ["touch", "${kiln.work_dir}/ran"]
requires = ["python3", "cmake>=3.20"]
"#,
    );
    // A PATH with python3 and cc but no cmake: the check finds one tool too old, one missing.
    let bin = ws.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["python3", "cc", "touch"] {
        let real = which::which(tool).unwrap();
        std::os::unix::fs::symlink(real, bin.join(tool)).unwrap();
    }
    let out = ws
        .kiln()
        .args(["up", "r.toml"])
        .env("PATH", &bin)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let line = error_line(&out);
    assert_eq!(line, "error: 2 host tool(s) missing for recipe `pre`:");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("\n  python3>=99: ")
            && stderr.contains(" (needed by the recipe, step `touch`)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("\n  cmake>=3.20: not found on PATH (needed by step `touch`)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("\nhint: "),
        "an install hint for this OS: {stderr}"
    );
    assert!(!ws.state().join("work/pre/ran").exists(), "no step ran");
    let r = report(&ws, "pre");
    assert_eq!(r["outcome"]["ok"], false);
    assert_eq!(r["stage"], "preflight");
    assert!(
        r["outcome"]["error"]
            .as_str()
            .unwrap()
            .contains("cmake>=3.20"),
        "{r}"
    );

    // `kiln plan` shows the same requirements, and does not fail on them.
    let plan = ws
        .kiln()
        .args(["plan", "r.toml"])
        .env("PATH", &bin)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&plan.stdout);
    assert!(plan.status.success(), "{text}");
    assert!(text.contains("requires (host tools"), "{text}");
    assert!(
        text.contains("✗ cmake>=3.20  not found on PATH  (step `touch`)"),
        "{text}"
    );
    assert!(text.contains("✓ cc "), "{text}");
}

#[test]
fn a_failed_step_fails_up_with_its_reason_in_the_report() {
    let ws = Workspace::new();
    ws.write(
        "r.toml",
        "[recipe]\nname = \"stepfail\"\n\n[[step]]\nid = \"boom\"\nkind = \"run\"\ncmd = [\"sh\", \"-c\", \"echo going down; exit 3\"]\n",
    );
    let out = ws.kiln().args(["up", "r.toml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let line = error_line(&out);
    assert!(line.starts_with("error: step `boom` failed"), "{line}");
    let r = report(&ws, "stepfail");
    assert_eq!(r["outcome"]["ok"], false);
    assert_eq!(r["stage"], "steps");
    assert!(
        r["outcome"]["error"]
            .as_str()
            .unwrap()
            .starts_with("step `boom` failed"),
        "{r}"
    );
}

/// The same step fixed: a run of steps only that succeeds replaces the failed run's report
/// (report.json describes the last run; a README walk found the failed one left in place).
#[test]
fn a_run_of_steps_only_that_succeeds_replaces_the_failed_runs_report() {
    let ws = Workspace::new();
    let recipe = |code: u8| {
        format!("[recipe]\nname = \"stepfix\"\n\n[[step]]\nid = \"boom\"\nkind = \"run\"\ncmd = [\"sh\", \"-c\", \"exit {code}\"]\n")
    };
    ws.write("r.toml", &recipe(3));
    let out = ws.kiln().args(["up", "r.toml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(report(&ws, "stepfix")["outcome"]["ok"], false);
    ws.write("r.toml", &recipe(0));
    let out = ws.kiln().args(["up", "r.toml"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = report(&ws, "stepfix");
    assert_eq!(r["outcome"]["ok"], true, "{r}");
    assert_eq!(r["exit_code"], 0, "{r}");
    assert!(
        r.get("stage").is_none() && r.get("verdicts").is_none(),
        "{r}"
    );
    let md = std::fs::read_to_string(ws.state().join("reports/stepfix/report.md")).unwrap();
    assert!(md.contains("ok: the steps ran; nothing was served"), "{md}");
    let html = std::fs::read_to_string(ws.state().join("reports/stepfix/report.html")).unwrap();
    assert!(
        html.contains("exit code 0") && !html.contains("failed"),
        "{html}"
    );
}

/// A recipe with no steps whose profile serves the tiny-cpu build with a 160-token context: the
/// bench asks for 2048 tokens, so its runs come back short (an advisory); `extra` adds args.
fn serving_recipe(ws: &Workspace, expect: &str, extra: &str) -> Vec<String> {
    let prefix = tiny_cpu();
    ws.write(
        "serve.toml",
        &format!(
            r#"[recipe]
name = "outcome"

[vars]
prefix = "/nonexistent"
port = "0"

[profile.p]
cmd = ["${{prefix}}/bin/llama-server"]
args = ["-m", "${{prefix}}/model/tiny.gguf", "--host", "127.0.0.1", "--port", "${{port}}",
        "-c", "160", "-np", "1", "-lv", "4", "-t", "1"{extra}]
expect = [{expect}]
port = "${{port}}"
api = "openai"
ready = "/health"
signatures = "llama-server"
"#
        ),
    );
    vec![
        "--set".into(),
        format!("prefix={}", prefix.display()),
        "--set".into(),
        format!("port={}", free_port()),
    ]
}

fn up(ws: &Workspace, sets: &[String], extra: &[&str]) -> Output {
    let out = ws
        .kiln()
        .args(["up", "serve.toml"])
        .args(sets)
        .args(extra)
        .output()
        .unwrap();
    let stop = ws
        .kiln()
        .args(["serve", "serve.toml", "--stop"])
        .args(sets)
        .output()
        .unwrap();
    assert!(
        stop.status.success(),
        "{}",
        String::from_utf8_lossy(&stop.stderr)
    );
    out
}

#[test]
fn an_advisory_is_a_warning_and_fails_only_with_strict() {
    let ws = Workspace::new();
    let sets = serving_recipe(&ws, "\"threads\"", "");
    let out = up(&ws, &sets, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("error:"), "{stderr}");
    // Said once, with the bench it came from (not again at the end of the run).
    let short: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("run 1 returned ") && l.contains(" of 2048 tokens"))
        .collect();
    assert!(
        short.len() == 1 && short[0].starts_with("warning: run 1 returned "),
        "{stderr}"
    );
    let r = report(&ws, "outcome");
    assert_eq!(r["outcome"]["ok"], true, "{r}");
    assert_eq!(r["exit_code"], 0);
    assert!(r["outcome"]["error"].is_null());
    let warnings = r["outcome"]["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains(" of 2048 tokens")),
        "{r}"
    );

    let out = up(&ws, &sets, &["--strict"]);
    assert_eq!(out.status.code(), Some(1));
    let line = error_line(&out);
    // One warning, or two when the bench was also noisy (CV > 5%) on a busy box.
    assert!(
        line.starts_with("error: ")
            && line.contains(" warning(s) with --strict: bench: run 1 returned "),
        "{line}"
    );
    let r = report(&ws, "outcome");
    assert_eq!(r["outcome"]["ok"], false, "{r}");
    assert_eq!(r["strict"], true);
    assert_eq!(r["exit_code"], 1);
}

#[test]
fn a_tuning_that_fell_back_fails_up() {
    let ws = Workspace::new();
    // Flash attention asked for, and turned off: its verdict is "fell back".
    let sets = serving_recipe(&ws, "\"flash-attn\"", ", \"--flash-attn\", \"off\"");
    let out = up(&ws, &sets, &[]);
    assert_eq!(out.status.code(), Some(1));
    let line = error_line(&out);
    assert!(
        line.starts_with("error: profile `p`: flash-attn fell back"),
        "{line}"
    );
    let r = report(&ws, "outcome");
    assert_eq!(r["outcome"]["ok"], false, "{r}");
    assert!(
        r["outcome"]["error"]
            .as_str()
            .unwrap()
            .contains("flash-attn fell back"),
        "{r}"
    );
}
