//! Malformed recipes: every fixture under tests/fixtures/recipes/bad gets a snapshot of what a
//! person sees from `kiln plan`, and each must be located (file:line:col + caret) with a hint.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::{scrub, Workspace};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/recipes/bad")
}

/// Fixtures covered by a test of their own (so one known problem fails one named test).
const DEDICATED: &[&str] = &["41-import-cycle.toml"];

/// Run `kiln plan FILE` from the corpus directory; returns `exit: N` + stderr, scrubbed.
fn plan_fixture(ws: &Workspace, file: &str) -> (Option<i32>, String) {
    let out = ws
        .kiln()
        .current_dir(corpus_dir())
        .args(["plan", file])
        .timeout(Duration::from_secs(20))
        .output()
        .expect("kiln runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let code = out.status.code();
    let shown = code.map_or("killed (timed out after 20 s)".to_string(), |c| {
        c.to_string()
    });
    (code, scrub(&format!("exit: {shown}\n{stderr}"), ws))
}

/// What every recipe diagnostic must have; returns the problems found.
fn diagnostic_problems(file: &str, code: Option<i32>, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if code != Some(2) {
        problems.push(format!("exit code {code:?}, expected 2"));
    }
    if text.contains("panicked") || text.contains("RUST_BACKTRACE") {
        problems.push("kiln panicked".into());
    }
    let stderr = text.split_once('\n').map_or("", |(_, rest)| rest);
    if !stderr.starts_with("error: ") {
        problems.push("stderr does not start with `error: `".into());
    }
    let located = stderr.lines().any(|l| {
        let l = l.trim_start();
        l.strip_prefix("--> ").is_some_and(|loc| {
            let mut parts = loc.rsplitn(3, ':');
            let (col, line, path) = (parts.next(), parts.next(), parts.next());
            col.is_some_and(|c| c.parse::<usize>().is_ok())
                && line.is_some_and(|c| c.parse::<usize>().is_ok())
                && path.is_some_and(|p| p == file || p.starts_with("lib/"))
        })
    });
    if !located {
        problems.push(format!("no `--> {file}:LINE:COL` location"));
    }
    if !stderr
        .lines()
        .any(|l| l.trim_start().starts_with('|') && l.contains('^'))
    {
        problems.push("no caret line".into());
    }
    if !stderr
        .lines()
        .any(|l| l.starts_with("hint: ") && l.len() > "hint: ".len() + 10)
    {
        problems.push("no useful `hint:` line".into());
    }
    problems
}

fn check_fixture(ws: &Workspace, file: &str) {
    let (code, text) = plan_fixture(ws, file);
    let problems = diagnostic_problems(file, code, &text);
    let name = file.trim_end_matches(".toml");
    insta::assert_snapshot!(name, text);
    assert!(
        problems.is_empty(),
        "{file}: {}\n{text}",
        problems.join("; ")
    );
}

#[test]
fn every_malformed_recipe_gets_a_located_diagnostic() {
    let ws = Workspace::new();
    let mut files: Vec<String> = std::fs::read_dir(corpus_dir())
        .expect("corpus dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".toml") && f.as_bytes()[0].is_ascii_digit())
        .collect();
    files.sort();
    assert!(
        files.len() >= 35,
        "the corpus has only {} recipes",
        files.len()
    );
    for file in files.iter().filter(|f| !DEDICATED.contains(&f.as_str())) {
        check_fixture(&ws, file);
    }
    // Running `plan` on a broken recipe must not leave state behind.
    assert!(
        !ws.state().join("runs").exists(),
        "a failed plan wrote receipts"
    );
}

#[test]
fn import_cycle_across_two_files_is_reported() {
    // 41-import-cycle.toml → lib/cycle-b.toml → ../41-import-cycle.toml
    check_fixture(&Workspace::new(), "41-import-cycle.toml");
}

const SMALL: &str = r#"[recipe]
name = "small"

[vars]
prefix = "/opt/small"
greeting = "hello"

[[step]]
id = "hello"
kind = "run"
cmd = ["echo", "${greeting}", "${prefix}"]
"#;

fn stderr_of(ws: &Workspace, args: &[&str]) -> String {
    let out = ws.kiln().args(args).output().expect("kiln runs");
    let code = out.status.code().map_or("signal".into(), |c| c.to_string());
    scrub(
        &format!("exit: {code}\n{}", String::from_utf8_lossy(&out.stderr)),
        ws,
    )
}

#[test]
fn set_of_an_unknown_variable_suggests_the_close_one() {
    let ws = Workspace::new();
    ws.write("small.toml", SMALL);
    insta::assert_snapshot!(stderr_of(&ws, &["plan", "small.toml", "--set", "prefx=/x"]), @r"
    exit: 2
    error: `--set prefx=...`: the recipe has no variable `prefx`
    hint: did you mean `--set prefix=...`?
    ");
}

#[test]
fn set_of_an_unrelated_name_lists_the_variables() {
    let ws = Workspace::new();
    ws.write("small.toml", SMALL);
    insta::assert_snapshot!(stderr_of(&ws, &["plan", "small.toml", "--set", "zzz=1"]), @r"
    exit: 2
    error: `--set zzz=...`: the recipe has no variable `zzz`
    hint: variables of this recipe: greeting, prefix
    ");
}

#[test]
fn set_without_an_equals_sign_is_refused() {
    let ws = Workspace::new();
    ws.write("small.toml", SMALL);
    insta::assert_snapshot!(stderr_of(&ws, &["plan", "small.toml", "--set", "prefix"]), @r"
    exit: 2
    error: `--set prefix` is not KEY=VALUE
    hint: write e.g. `--set arch=12.0`
    ");
    insta::assert_snapshot!(stderr_of(&ws, &["plan", "small.toml", "--set", "=/x"]), @r"
    exit: 2
    error: `--set =/x` is not KEY=VALUE
    hint: write e.g. `--set arch=12.0`
    ");
}

#[test]
fn set_values_are_data_not_templates() {
    // An unclosed `${` in a `--set` value is text like any other (see state_dir.rs).
    let ws = Workspace::new();
    ws.write("small.toml", SMALL);
    ws.kiln()
        .args(["plan", "small.toml", "--set", "prefix=${oops"])
        .assert()
        .success();
}

#[test]
fn unknown_shipped_recipe_names_the_shipped_ones() {
    let ws = Workspace::new();
    let text = stderr_of(&ws, &["plan", "demoo"]);
    assert!(text.contains("error: recipe `demoo` not found"), "{text}");
    assert!(text.contains("hint: ") && text.contains("demo"), "{text}");
    assert!(!text.starts_with("exit: 0"), "{text}");
}

#[test]
fn shipped_demo_recipe_plans_cleanly() {
    let ws = Workspace::new();
    let out = ws.kiln().args(["plan", "demo"]).assert().success();
    let stdout = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(stdout.starts_with("recipe demo "), "{stdout}");
    for id in ["source", "compile", "pack", "install", "smoke"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.contains(" stale ") && l.contains(id)),
            "{id} not stale:\n{stdout}"
        );
    }
}
