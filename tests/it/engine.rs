//! The step engine at the user's level: re-runs, staleness reasons, kills, failures, selection
//! flags, parallelism, retries, timeouts, `when`, checks, the state lock and hostile values.
//! Side effects are counted by steps appending a line to `counts/<id>` in the workspace.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::{scrub, Workspace};

/// A step that appends one line to `counts/<id>` each time it runs. `extra` is more TOML.
fn counting(id: &str, needs: &[&str], extra: &str) -> String {
    let needs = needs
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "[[step]]\nid = \"{id}\"\nkind = \"run\"\nneeds = [{needs}]\n\
         cmd = [\"sh\", \"-c\", 'echo run >> \"$1\"', \"sh\", \"${{recipe.dir}}/counts/{id}\"]\n{extra}\n"
    )
}

fn recipe(name: &str, vars: &str, steps: &[String]) -> String {
    format!(
        "[recipe]\nname = \"{name}\"\n\n[vars]\n{vars}\n\n{}",
        steps.join("\n")
    )
}

fn setup(text: &str) -> Workspace {
    let ws = Workspace::new();
    ws.write("r.toml", text);
    std::fs::create_dir_all(ws.path().join("counts")).unwrap();
    ws
}

fn count(ws: &Workspace, id: &str) -> usize {
    std::fs::read_to_string(ws.path().join("counts").join(id)).map_or(0, |t| t.lines().count())
}

fn counts(ws: &Workspace, ids: &[&str]) -> Vec<usize> {
    ids.iter().map(|id| count(ws, id)).collect()
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn kiln(ws: &Workspace, args: &[&str]) -> Run {
    kiln_env(ws, args, &[])
}

fn kiln_env(ws: &Workspace, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = ws.kiln();
    cmd.args(args).timeout(Duration::from_secs(60));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("kiln runs");
    Run {
        code: out.status.code(),
        stdout: scrub(&String::from_utf8_lossy(&out.stdout), ws),
        stderr: scrub(&String::from_utf8_lossy(&out.stderr), ws),
    }
}

fn up_ok(ws: &Workspace, args: &[&str]) -> Run {
    let mut all = vec!["up", "r.toml"];
    all.extend_from_slice(args);
    let run = kiln(ws, &all);
    assert_eq!(run.code, Some(0), "kiln {all:?} failed:\n{}", run.stderr);
    run
}

fn plan(ws: &Workspace, args: &[&str]) -> String {
    let mut all = vec!["plan", "r.toml"];
    all.extend_from_slice(args);
    let run = kiln(ws, &all);
    assert_eq!(run.code, Some(0), "kiln {all:?} failed:\n{}", run.stderr);
    run.stdout
}

/// The plan line of one step, e.g. `stale    b  run      dependency a changed`.
fn plan_line(plan: &str, id: &str) -> String {
    plan.lines()
        .map(str::trim)
        .find(|l| l.split_whitespace().nth(1) == Some(id))
        .unwrap_or_else(|| panic!("no step {id} in plan:\n{plan}"))
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn receipts_dir(ws: &Workspace, recipe: &str) -> PathBuf {
    ws.state().join("runs").join(recipe).join("receipts")
}

/// Every receipt parses as JSON with the fields a receipt has; no temp files are left.
fn assert_receipts_sound(ws: &Workspace, recipe: &str) -> Vec<String> {
    receipts_after(ws, recipe, false)
}

/// As `assert_receipts_sound`; `just_killed` allows the temp file of a write a kill cut short.
fn receipts_after(ws: &Workspace, recipe: &str, just_killed: bool) -> Vec<String> {
    let mut ids = Vec::new();
    let Ok(entries) = std::fs::read_dir(receipts_dir(ws, recipe)) else {
        return ids;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if just_killed && name.starts_with('.') && name.contains(".json.tmp-") {
            continue;
        }
        assert!(
            name.ends_with(".json") && !name.starts_with('.'),
            "stray file in receipts: {name}"
        );
        let text = std::fs::read_to_string(e.path()).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|err| panic!("corrupt receipt {name}: {err}\n{text}"));
        assert_eq!(
            v["step"].as_str(),
            Some(name.trim_end_matches(".json")),
            "{text}"
        );
        assert_eq!(
            v["fingerprint"]["digest"].as_str().map(str::len),
            Some(64),
            "{text}"
        );
        ids.push(v["step"].as_str().unwrap().to_string());
    }
    ids.sort();
    ids
}

/// Pids of live processes whose command line contains `token`.
fn processes_with(token: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(raw) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let zombie = stat
            .rsplit(')')
            .next()
            .is_some_and(|s| s.trim_start().starts_with('Z'));
        if !zombie
            && String::from_utf8_lossy(&raw)
                .replace('\0', " ")
                .contains(token)
        {
            pids.push(pid);
        }
    }
    pids
}

fn wait_for(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
    let until = Instant::now() + timeout;
    while !ready() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `kiln up r.toml` in the background, output discarded.
fn spawn_up(ws: &Workspace) -> Child {
    std::process::Command::new(assert_cmd::cargo::cargo_bin("kiln"))
        .args(["up", "r.toml"])
        .current_dir(ws.path())
        .env("KILN_HOME", ws.state())
        .env("KILN_NO_PROGRESS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("kiln starts")
}

fn chain() -> String {
    recipe(
        "chain",
        "",
        &[
            counting("a", &[], "inputs = [\"in/a.txt\"]"),
            counting("b", &["a"], "env = { MODE = \"${mode}\" }"),
            counting("c", &["b"], ""),
            counting("d", &[], "inputs = [\"in/d.txt\"]"),
        ],
    )
    .replace("[vars]\n", "[vars]\nmode = \"fast\"\n")
}

fn chain_ws() -> Workspace {
    let ws = setup(&chain());
    ws.write("in/a.txt", "one");
    ws.write("in/d.txt", "one");
    ws
}

#[test]
fn a_rerun_with_nothing_changed_runs_nothing() {
    let ws = chain_ws();
    let first = up_ok(&ws, &[]);
    assert!(
        first.stderr.contains("chain: 4 of 4 steps to run"),
        "{}",
        first.stderr
    );
    assert_eq!(counts(&ws, &["a", "b", "c", "d"]), [1, 1, 1, 1]);
    let second = up_ok(&ws, &[]);
    assert!(
        second.stderr.contains("chain: 0 of 4 steps to run"),
        "{}",
        second.stderr
    );
    assert_eq!(counts(&ws, &["a", "b", "c", "d"]), [1, 1, 1, 1]);
    let p = plan(&ws, &[]);
    assert!(
        p.starts_with("recipe chain (r.toml): 4 steps: 0 stale, 4 fresh, 0 skipped"),
        "{p}"
    );
    assert_eq!(assert_receipts_sound(&ws, "chain"), ["a", "b", "c", "d"]);
}

#[test]
fn changing_an_input_reruns_that_step_and_its_dependents_only() {
    let ws = chain_ws();
    up_ok(&ws, &[]);
    ws.write("in/a.txt", "two");
    let p = plan(&ws, &[]);
    let input = ws.path().canonicalize().unwrap().join("in/a.txt");
    let input = scrub(&input.display().to_string(), &ws);
    assert_eq!(
        plan_line(&p, "a"),
        format!("stale a run input {input} changed"),
        "{p}"
    );
    assert_eq!(plan_line(&p, "b"), "stale b run dependency a changed");
    assert_eq!(plan_line(&p, "c"), "stale c run dependency b changed");
    assert_eq!(plan_line(&p, "d"), "fresh d run");
    up_ok(&ws, &[]);
    assert_eq!(counts(&ws, &["a", "b", "c", "d"]), [2, 2, 2, 1]);
    // A new file matched by an input pattern counts as a change too; a deleted one as well.
    std::fs::remove_file(ws.path().join("in/d.txt")).unwrap();
    assert!(
        plan_line(&plan(&ws, &[]), "d").starts_with("stale d run input"),
        "deleted input not noticed"
    );
    ws.write("in/d.txt", "one");
    up_ok(&ws, &[]);
    assert_eq!(
        counts(&ws, &["a", "b", "c", "d"]),
        [2, 2, 2, 1],
        "restoring the input restored the fingerprint"
    );
}

#[test]
fn changing_an_env_var_through_set_reruns_what_uses_it() {
    let ws = chain_ws();
    up_ok(&ws, &[]);
    let p = plan(&ws, &["--set", "mode=slow"]);
    assert_eq!(plan_line(&p, "a"), "fresh a run");
    assert_eq!(plan_line(&p, "b"), "stale b run env var MODE changed");
    assert_eq!(plan_line(&p, "c"), "stale c run dependency b changed");
    up_ok(&ws, &["--set", "mode=slow"]);
    assert_eq!(counts(&ws, &["a", "b", "c", "d"]), [1, 2, 2, 1]);
    up_ok(&ws, &["--set", "mode=slow"]);
    assert_eq!(counts(&ws, &["a", "b", "c", "d"]), [1, 2, 2, 1]);
}

#[test]
fn changing_a_var_used_in_a_command_reruns_that_step() {
    let text = recipe(
        "cmdvar",
        "word = \"one\"",
        &[
            counting("plain", &[], ""),
            "[[step]]\nid = \"say\"\nkind = \"run\"\ncmd = [\"sh\", \"-c\", 'echo \"$1\" >> \"$2\"', \"sh\", \"${word}\", \"${recipe.dir}/counts/say\"]\n".into(),
        ],
    );
    let ws = setup(&text);
    up_ok(&ws, &[]);
    assert_eq!(
        plan_line(&plan(&ws, &["--set", "word=two"]), "say"),
        "stale say run its definition changed"
    );
    up_ok(&ws, &["--set", "word=two"]);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("counts/say")).unwrap(),
        "one\ntwo\n"
    );
    assert_eq!(count(&ws, "plain"), 1);
}

#[test]
fn sigkill_mid_step_then_rerun_completes_and_leaves_no_orphans() {
    // `b` sleeps (as kiln's direct child, through exec) while the `slow` marker exists, and
    // only records its side effect when it runs to the end.
    let token = format!("31.{}", std::process::id());
    let b = format!(
        "[[step]]\nid = \"b\"\nkind = \"run\"\nneeds = [\"a\"]\n\
         cmd = [\"sh\", \"-c\", 'if [ -e \"$1\" ]; then touch \"$1.started\"; exec sleep {token}; fi; echo run >> \"$2\"', \
         \"sh\", \"${{recipe.dir}}/slow\", \"${{recipe.dir}}/counts/b\"]\n"
    );
    let text = recipe(
        "killed",
        "",
        &[
            counting("a", &[], ""),
            b,
            counting("c", &["b"], ""),
            counting("d", &[], ""),
        ],
    );
    let ws = setup(&text);
    ws.write("slow", "");
    let mut child = spawn_up(&ws);
    wait_for("step b to start", Duration::from_secs(30), || {
        ws.path().join("slow.started").exists()
    });
    wait_for("the sleep to appear", Duration::from_secs(10), || {
        !processes_with(&token).is_empty()
    });
    // `d` runs beside `b`: a kill before its receipt is written runs it once more (at least
    // once is the rule), which is not what this test is about, so the kill waits for it.
    wait_for("step d's receipt", Duration::from_secs(30), || {
        receipts_dir(&ws, "killed").join("d.json").exists()
    });
    child.kill().expect("SIGKILL kiln");
    child.wait().unwrap();
    // The sleeping step must not outlive kiln (PDEATHSIG).
    wait_for("the orphaned sleep to end", Duration::from_secs(10), || {
        processes_with(&token).is_empty()
    });
    let done = receipts_after(&ws, "killed", true);
    assert!(
        !done.contains(&"b".to_string()) && !done.contains(&"c".to_string()),
        "{done:?}"
    );
    assert_eq!(counts(&ws, &["b", "c"]), [0, 0]);

    std::fs::remove_file(ws.path().join("slow")).unwrap();
    let p = plan(&ws, &[]);
    assert_eq!(plan_line(&p, "a"), "fresh a run", "{p}");
    assert_eq!(plan_line(&p, "b"), "stale b run never completed", "{p}");
    up_ok(&ws, &[]);
    assert_eq!(counts(&ws, &["a", "b", "c", "d"]), [1, 1, 1, 1]);
    assert_eq!(assert_receipts_sound(&ws, "killed"), ["a", "b", "c", "d"]);
    up_ok(&ws, &[]);
    assert_eq!(counts(&ws, &["a", "b", "c", "d"]), [1, 1, 1, 1]);
}

/// A recipe whose one step sleeps `token` seconds (the token finds it in the process table).
fn sleeping(name: &str, token: &str) -> String {
    recipe(
        name,
        "",
        &[format!(
            "[[step]]\nid = \"wait\"\nkind = \"run\"\ncmd = [\"sleep\", \"{token}\"]\n"
        )],
    )
}

#[test]
fn ctrl_c_at_the_terminal_ends_the_running_step_too() {
    // A terminal's Ctrl-C sends SIGINT to kiln's whole process group; each step runs in a group
    // of its own, so it is the watchdog (outside kiln's group) that must end it.
    let token = format!("32.{}", std::process::id());
    let ws = setup(&sleeping("interrupted", &token));
    let mut child = {
        use std::os::unix::process::CommandExt;
        std::process::Command::new(assert_cmd::cargo::cargo_bin("kiln"))
            .args(["up", "r.toml"])
            .current_dir(ws.path())
            .env("KILN_HOME", ws.state())
            .env("KILN_NO_PROGRESS", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("kiln starts")
    };
    wait_for("the step to start", Duration::from_secs(30), || {
        !processes_with(&token).is_empty()
    });
    let group = i32::try_from(child.id()).unwrap();
    // SAFETY: a signal to the process group this test just made.
    assert_eq!(unsafe { libc::killpg(group, libc::SIGINT) }, 0);
    child.wait().unwrap();
    wait_for("the step to end with kiln", Duration::from_secs(10), || {
        processes_with(&token).is_empty()
    });
    assert!(receipts_after(&ws, "interrupted", true).is_empty());
}

#[test]
fn a_signal_between_a_steps_spawn_and_its_registration_still_ends_the_step() {
    // The moment a loaded machine once hit: Ctrl-C after the step started, before kiln wrote its
    // group down for the watchdog. The hook sends SIGINT exactly there.
    let token = format!("33.{}", std::process::id());
    let ws = setup(&sleeping("early", &token));
    let status = std::process::Command::new(assert_cmd::cargo::cargo_bin("kiln"))
        .args(["up", "r.toml"])
        .current_dir(ws.path())
        .env("KILN_HOME", ws.state())
        .env("KILN_NO_PROGRESS", "1")
        .env("KILN_TEST_SIGNAL_AT_SPAWN", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("kiln runs");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGINT), "{status:?}");
    wait_for("the step to end with kiln", Duration::from_secs(10), || {
        processes_with(&token).is_empty()
    });
    assert!(receipts_after(&ws, "early", true).is_empty());
}

#[test]
fn repeated_kills_at_random_moments_never_corrupt_receipts() {
    let steps: Vec<String> = (0..12)
        .map(|i| {
            let needs: Vec<String> = if i >= 3 {
                vec![format!("s{}", i - 3)]
            } else {
                vec![]
            };
            let needs: Vec<&str> = needs.iter().map(String::as_str).collect();
            counting(&format!("s{i}"), &needs, "")
        })
        .collect();
    let ws = setup(&recipe("churn", "", &steps));
    let ids: Vec<String> = (0..12).map(|i| format!("s{i}")).collect();
    for delay_ms in [15u64, 40, 70, 100, 140, 190, 250] {
        let mut child = spawn_up(&ws);
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = child.kill();
        child.wait().unwrap();
        let done = receipts_after(&ws, "churn", true);
        for id in &done {
            assert!(count(&ws, id) >= 1, "{id} has a receipt but never ran");
        }
    }
    // As if a kill had cut a receipt write short: the next run that takes the lock to run
    // steps sweeps it. (`--from s0`: the killed runs may have finished every step, and a run
    // with nothing to do writes nothing, so it sweeps nothing either.)
    std::fs::create_dir_all(receipts_dir(&ws, "churn")).unwrap();
    std::fs::write(
        receipts_dir(&ws, "churn").join(".s0.json.tmp-999999"),
        "{\"step\": \"s0\", \"fing",
    )
    .unwrap();
    up_ok(&ws, &["--from", "s0"]);
    assert_eq!(assert_receipts_sound(&ws, "churn"), {
        let mut v = ids.clone();
        v.sort();
        v
    });
    let before: Vec<usize> = ids.iter().map(|id| count(&ws, id)).collect();
    assert!(before.iter().all(|n| *n >= 1), "{before:?}");
    up_ok(&ws, &[]);
    let after: Vec<usize> = ids.iter().map(|id| count(&ws, id)).collect();
    assert_eq!(before, after, "a completed run left work for the next one");
}

fn failing_recipe() -> String {
    // `bad` prints 60 numbered lines and fails while the `fail` marker exists.
    let bad = "[[step]]\nid = \"bad\"\nkind = \"run\"\n\
               cmd = [\"sh\", \"-c\", 'if [ -e \"$1\" ]; then for i in $(seq 1 60); do echo \"output line $i\"; done; exit 3; fi; echo run >> \"$2\"', \
               \"sh\", \"${recipe.dir}/fail\", \"${recipe.dir}/counts/bad\"]\n"
        .to_string();
    recipe(
        "failing",
        "",
        &[
            counting("ok", &[], ""),
            bad,
            counting("after", &["bad"], ""),
            counting("last", &["after"], ""),
        ],
    )
}

#[test]
fn a_failing_step_reports_its_tail_and_log_and_a_rerun_resumes() {
    let ws = setup(&failing_recipe());
    ws.write("fail", "");
    let run = kiln(&ws, &["up", "r.toml", "--jobs", "1"]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let err = run
        .stderr
        .split_once("error: ")
        .map(|(_, e)| format!("error: {e}"))
        .expect("an error line");
    let log = "[WS]/state/runs/failing/logs/bad.log";
    assert!(
        err.starts_with("error: step `bad` failed: `sh -c "),
        "{err}"
    );
    assert!(err.contains("exited with status 3"), "{err}");
    assert!(
        err.contains("output line 60") && err.contains("output line 21"),
        "{err}"
    );
    assert!(
        !err.contains("output line 20\n"),
        "more than 40 lines of tail:\n{err}"
    );
    assert!(err.contains(&format!("hint: full log: {log}")), "{err}");
    let full = std::fs::read_to_string(ws.state().join("runs/failing/logs/bad.log")).unwrap();
    assert!(
        full.contains("output line 1\n") && full.contains("output line 60\n"),
        "{full}"
    );
    assert!(
        run.stderr.contains("notrun after: dependency `bad` failed"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("notrun last: dependency `after` failed"),
        "{}",
        run.stderr
    );
    assert_eq!(counts(&ws, &["ok", "bad", "after", "last"]), [1, 0, 0, 0]);
    assert_eq!(assert_receipts_sound(&ws, "failing"), ["ok"]);

    std::fs::remove_file(ws.path().join("fail")).unwrap();
    let rerun = up_ok(&ws, &[]);
    assert!(
        rerun.stderr.contains("failing: 3 of 4 steps to run"),
        "{}",
        rerun.stderr
    );
    assert_eq!(counts(&ws, &["ok", "bad", "after", "last"]), [1, 1, 1, 1]);
}

#[test]
fn dry_run_runs_nothing_and_says_what_would() {
    let ws = chain_ws();
    let run = up_ok(&ws, &["--dry-run"]);
    assert!(
        run.stdout.contains("dry run: 4 steps would run"),
        "{}",
        run.stdout
    );
    assert_eq!(counts(&ws, &["a", "b", "c", "d"]), [0, 0, 0, 0]);
    assert!(assert_receipts_sound(&ws, "chain").is_empty());
    up_ok(&ws, &[]);
    let run = up_ok(&ws, &["--dry-run", "--from", "b"]);
    assert!(
        run.stdout.contains("dry run: 2 steps would run"),
        "{}",
        run.stdout
    );
    assert_eq!(counts(&ws, &["a", "b", "c", "d"]), [1, 1, 1, 1]);
}

#[test]
fn from_reruns_a_step_and_everything_downstream() {
    let ws = chain_ws();
    up_ok(&ws, &[]);
    up_ok(&ws, &["--from", "b"]);
    assert_eq!(counts(&ws, &["a", "b", "c", "d"]), [1, 2, 2, 1]);
}

#[test]
fn force_reruns_only_the_named_step() {
    let ws = chain_ws();
    up_ok(&ws, &[]);
    up_ok(&ws, &["--force", "a", "--force", "d"]);
    assert_eq!(counts(&ws, &["a", "b", "c", "d"]), [2, 1, 1, 2]);
}

#[test]
fn only_runs_the_selection_and_refuses_when_a_dependency_never_completed() {
    let ws = chain_ws();
    up_ok(&ws, &["--only", "a"]);
    assert_eq!(counts(&ws, &["a", "b", "c", "d"]), [1, 0, 0, 0]);
    let run = kiln(&ws, &["up", "r.toml", "--only", "c"]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("notrun c: dependency `b` has never completed"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("error: "), "{}", run.stderr);
    assert!(run.stderr.contains("hint: "), "{}", run.stderr);
    assert_eq!(counts(&ws, &["a", "b", "c", "d"]), [1, 0, 0, 0]);
    up_ok(&ws, &["--only", "b", "--only", "c"]);
    assert_eq!(counts(&ws, &["a", "b", "c", "d"]), [1, 1, 1, 0]);
    let run = kiln(&ws, &["up", "r.toml", "--only", "cc"]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("error: no step `cc` in recipe `chain`\nhint: did you mean `c`?"),
        "{}",
        run.stderr
    );
}

#[test]
fn json_prints_one_event_per_line() {
    let ws = chain_ws();
    let run = up_ok(&ws, &["--json", "--jobs", "1"]);
    let events: Vec<serde_json::Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.first(),
        Some(&"run_started"),
        "stdout:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
    // The run's events, then how the command ended.
    assert_eq!(kinds[kinds.len() - 2..], ["run_finished", "outcome"]);
    assert_eq!(events[0]["to_run"], 4);
    assert_eq!(events[events.len() - 2]["ok"], true);
    assert_eq!(events.last().unwrap()["exit_code"], 0);
    for id in ["a", "b", "c", "d"] {
        let finished = events
            .iter()
            .find(|e| e["event"] == "step_finished" && e["step"] == id)
            .expect(id);
        assert_eq!(finished["outcome"], "ran", "{finished}");
        assert!(events
            .iter()
            .any(|e| e["event"] == "step_started" && e["step"] == id && e["attempt"] == 1));
    }
    // Nothing but events on stdout; the summary of a no-op run is JSON too.
    let again = up_ok(&ws, &["--json"]);
    let finished = crate::reporter::json_event(&again.stdout, "run_finished");
    assert_eq!(finished["ok"], true);
    let plan_json =
        crate::reporter::json_event(&kiln(&ws, &["plan", "r.toml", "--json"]).stdout, "plan");
    assert_eq!(plan_json["steps"].as_array().unwrap().len(), 4);
    assert!(
        plan_json["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["status"] == "fresh"),
        "{plan_json}"
    );
}

/// Two independent steps that record start/end times (ns) around a short sleep.
fn pair(extra: &str) -> String {
    let step = |id: &str| {
        format!(
            "[[step]]\nid = \"{id}\"\nkind = \"run\"\n\
             cmd = [\"sh\", \"-c\", 'date +%s%N > \"$1.start\"; sleep 0.4; date +%s%N > \"$1.end\"', \"sh\", \"${{recipe.dir}}/counts/{id}\"]\n{extra}\n"
        )
    };
    recipe("pair", "", &[step("x"), step("y")])
}

fn span(ws: &Workspace, id: &str) -> (u128, u128) {
    let read = |suffix: &str| -> u128 {
        std::fs::read_to_string(ws.path().join(format!("counts/{id}.{suffix}")))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    (read("start"), read("end"))
}

fn overlap(ws: &Workspace) -> bool {
    let (x, y) = (span(ws, "x"), span(ws, "y"));
    x.0 < y.1 && y.0 < x.1
}

#[test]
fn jobs_two_runs_independent_steps_at_once() {
    let ws = setup(&pair(""));
    up_ok(&ws, &["--jobs", "2"]);
    assert!(
        overlap(&ws),
        "x {:?} and y {:?} did not overlap",
        span(&ws, "x"),
        span(&ws, "y")
    );
    let ws = setup(&pair(""));
    up_ok(&ws, &["--jobs", "1"]);
    assert!(
        !overlap(&ws),
        "--jobs 1 overlapped: x {:?} y {:?}",
        span(&ws, "x"),
        span(&ws, "y")
    );
}

#[test]
fn mem_per_job_beyond_the_budget_runs_steps_one_at_a_time() {
    let ws = setup(&pair("mem_per_job = \"1000TiB\""));
    up_ok(&ws, &["--jobs", "2"]);
    assert!(
        !overlap(&ws),
        "x {:?} and y {:?} overlapped",
        span(&ws, "x"),
        span(&ws, "y")
    );
    assert_eq!(assert_receipts_sound(&ws, "pair"), ["x", "y"]);
}

#[test]
fn retries_turn_a_first_failure_into_success() {
    let step = "[[step]]\nid = \"flaky\"\nkind = \"run\"\nretries = 2\n\
                cmd = [\"sh\", \"-c\", 'echo run >> \"$1\"; if [ ! -e \"$1.once\" ]; then touch \"$1.once\"; echo first try fails; exit 1; fi', \
                \"sh\", \"${recipe.dir}/counts/flaky\"]\n";
    let ws = setup(&recipe("flaky", "", &[step.to_string()]));
    let run = up_ok(&ws, &[]);
    assert!(
        run.stderr.contains("start  flaky [run] (attempt 2)"),
        "{}",
        run.stderr
    );
    assert_eq!(count(&ws, "flaky"), 2);
    let log = std::fs::read_to_string(ws.state().join("runs/flaky/logs/flaky.log")).unwrap();
    assert!(
        log.contains("first try fails") && log.contains("--- attempt 1 failed"),
        "{log}"
    );
    up_ok(&ws, &[]);
    assert_eq!(count(&ws, "flaky"), 2);
}

#[test]
fn a_step_past_its_timeout_fails_with_timed_out() {
    let step =
        "[[step]]\nid = \"slow\"\nkind = \"run\"\ntimeout = \"1s\"\ncmd = [\"sleep\", \"30\"]\n";
    let ws = setup(&recipe(
        "slow",
        "",
        &[step.to_string(), counting("next", &["slow"], "")],
    ));
    let started = Instant::now();
    let run = kiln(&ws, &["up", "r.toml"]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("error: step `slow` failed: `sleep 30` timed out"),
        "{}",
        run.stderr
    );
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "the timeout did not end the step"
    );
    assert_eq!(count(&ws, "next"), 0);
    assert!(assert_receipts_sound(&ws, "slow").is_empty());
}

#[test]
fn when_conditions_follow_pinned_host_facts() {
    let text = recipe(
        "facts",
        "",
        &[
            counting("always", &[], ""),
            counting("blackwell", &[], "when = \"gpu.cc >= 12.0\""),
            counting("multi", &["blackwell"], "when = \"gpu.count >= 2\""),
        ],
    );
    let ws = setup(&text);
    let hopper = [("KILN_FACT_GPU_CC", "9.0"), ("KILN_FACT_GPU_COUNT", "8")];
    let run = kiln_env(&ws, &["up", "r.toml"], &hopper);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("skip   blackwell: `when = \"gpu.cc >= 12.0\"` is false on this host"),
        "{}",
        run.stderr
    );
    assert_eq!(counts(&ws, &["always", "blackwell", "multi"]), [1, 0, 1]);
    let json = kiln_env(&ws, &["up", "r.toml", "--json"], &hopper);
    let skipped: Vec<serde_json::Value> = json
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["event"] == "step_finished" && e["outcome"] == "skipped")
        .collect();
    assert_eq!(skipped.len(), 1, "{}", json.stdout);
    assert_eq!(skipped[0]["step"], "blackwell");
    assert_eq!(
        skipped[0]["detail"],
        "`when = \"gpu.cc >= 12.0\"` is false on this host"
    );
    let plan = kiln_env(&ws, &["plan", "r.toml"], &hopper).stdout;
    assert!(plan.contains("1 skipped"), "{plan}");

    let one_sm120 = [("KILN_FACT_GPU_CC", "12.0"), ("KILN_FACT_GPU_COUNT", "1")];
    let run = kiln_env(&ws, &["up", "r.toml"], &one_sm120);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("skip   multi: `when = \"gpu.count >= 2\"` is false on this host"),
        "{}",
        run.stderr
    );
    assert_eq!(counts(&ws, &["always", "blackwell", "multi"]), [1, 1, 1]);
}

#[test]
fn a_failing_check_means_the_step_is_not_recorded() {
    let step = counting(
        "make",
        &[],
        "check = { paths = [\"${recipe.dir}/product\"] }",
    );
    let ws = setup(&recipe("checked", "", &[step]));
    let run = kiln(&ws, &["up", "r.toml"]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("check failed: [WS]/product does not exist"),
        "{}",
        run.stderr
    );
    assert!(assert_receipts_sound(&ws, "checked").is_empty());
    assert_eq!(
        plan_line(&plan(&ws, &[]), "make"),
        "stale make run never completed"
    );
    ws.write("product", "made");
    up_ok(&ws, &[]);
    assert_eq!(count(&ws, "make"), 2);
    // A receipt whose check path disappeared is stale again.
    std::fs::remove_file(ws.path().join("product")).unwrap();
    assert!(
        plan_line(&plan(&ws, &[]), "make").starts_with("stale make run check path"),
        "missing check path not noticed"
    );
}

#[test]
fn a_second_concurrent_run_fails_on_the_lock() {
    let hold = "[[step]]\nid = \"hold\"\nkind = \"run\"\n\
                cmd = [\"sh\", \"-c\", 'touch \"$1\"; sleep 3', \"sh\", \"${recipe.dir}/holding\"]\n";
    let ws = setup(&recipe("locked", "", &[hold.to_string()]));
    let mut first = spawn_up(&ws);
    wait_for(
        "the first run to hold the lock",
        Duration::from_secs(30),
        || ws.path().join("holding").exists(),
    );
    let second = kiln(&ws, &["up", "r.toml"]);
    assert_eq!(second.code, Some(1), "{}", second.stderr);
    let pid = first.id().to_string();
    let text = second.stderr.replace(&pid, "[PID]");
    assert_eq!(
        text.trim_end(),
        "error: state directory [WS]/state is in use by another kiln run (pid [PID])\n\
         hint: wait for the other run to finish, or use a separate --state-dir"
    );
    assert!(first.wait().unwrap().success());
    up_ok(&ws, &[]);
}

#[test]
fn hostile_values_stay_inert_in_argv_env_and_shell_scripts() {
    let evil = "$(touch pwned1) `touch pwned2`; touch pwned3 && rm -rf nope | 'q' \"dq\" \\";
    let text = r#"[recipe]
name = "hostile"

[vars]
evil = "x"

[[step]]
id = "argv"
kind = "run"
cmd = ["sh", "-c", 'printf %s "$1" > "$2"', "sh", "${evil}", "${recipe.dir}/argv.txt"]

[[step]]
id = "script"
kind = "run"
shell = true
cmd = "printf %s ${evil} > ${recipe.dir}/script.txt"

[[step]]
id = "env"
kind = "run"
env = { EVIL = "${evil}" }
shell = true
cmd = 'printf %s "$EVIL" > ${recipe.dir}/env.txt'

[[step]]
id = "direct"
kind = "run"
cmd = ["touch", "${evil}"]
"#;
    let ws = setup(text);
    let run = kiln(&ws, &["up", "r.toml", "--set", &format!("evil={evil}")]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    for f in ["argv.txt", "script.txt", "env.txt"] {
        assert_eq!(
            std::fs::read_to_string(ws.path().join(f)).unwrap(),
            evil,
            "{f}"
        );
    }
    // `touch` got the whole value as one file name: exactly one odd file, nothing else made.
    let work = ws.state().join("work/hostile");
    let made: Vec<String> = std::fs::read_dir(&work)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(made.len(), 1, "{made:?}");
    assert!(
        made[0].starts_with("$(touch pwned1) `touch pwned2`; touch pwned3"),
        "{made:?}"
    );
    for root in [ws.path(), &work, Path::new(".")] {
        for p in ["pwned1", "pwned2", "pwned3"] {
            assert!(
                !root.join(p).exists(),
                "{} was created",
                root.join(p).display()
            );
        }
    }
}

#[test]
fn sigkill_leaves_no_grandchildren_behind() {
    let token = format!("27.{}", std::process::id());
    let step = format!("[[step]]\nid = \"fork\"\nkind = \"run\"\ncmd = [\"sh\", \"-c\", 'touch \"$1\"; sleep {token} & wait', \"sh\", \"${{recipe.dir}}/started\"]\n");
    let ws = setup(&recipe("forks", "", &[step]));
    let mut child = spawn_up(&ws);
    wait_for("the step to start", Duration::from_secs(30), || {
        ws.path().join("started").exists()
    });
    wait_for("the grandchild to appear", Duration::from_secs(10), || {
        !processes_with(&token).is_empty()
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let gone = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        processes_with(&token).is_empty()
    });
    for pid in processes_with(&token) {
        let _ = std::process::Command::new("kill")
            .arg(pid.to_string())
            .status();
    }
    assert!(gone, "a grandchild of a step survived the SIGKILL of kiln");
}

#[test]
fn an_edited_recipe_cache_entry_is_never_run() {
    let ws = setup(&recipe("cached", "", &[counting("a", &[], "")]));
    up_ok(&ws, &[]);
    assert_eq!(count(&ws, "a"), 1);
    // Someone edits the cached, validated recipe: its command now writes `pwned`.
    let entries: Vec<PathBuf> = std::fs::read_dir(ws.state().join("recipe-cache"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let text = std::fs::read_to_string(&entries[0]).unwrap();
    let pwned = ws.path().join("pwned");
    let edited = text.replace(
        "echo run >> \\\"$1\\\"",
        &format!("touch {}", pwned.display()),
    );
    assert_ne!(edited, text, "the command is in the entry:\n{text}");
    std::fs::write(&entries[0], edited).unwrap();
    up_ok(&ws, &["--from", "a"]);
    assert!(!pwned.exists(), "the edited entry's command ran");
    assert_eq!(count(&ws, "a"), 2, "the recipe file's command ran");
}
