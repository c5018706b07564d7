//! `kiln tune` end to end on the CPU demo with the real llama-server: variants launched once each,
//! judged, compared with the baseline's greedy output, raced, ranked; per-request knobs inside one
//! launch; the cost estimate before and after a run; the winner file is servable.

use crate::bench::tiny_cpu;
use crate::common::Workspace;
use crate::serve::free_port;
use crate::sglang_wire::standin_recipe;

/// What a variant a stopped search never launched says (src/tune/race.rs).
const NOT_LAUNCHED: &str = "not launched: the search was stopped (budget or interrupt)";

fn recipe() -> String {
    format!("{}/recipes/tiny-cpu.toml", env!("CARGO_MANIFEST_DIR"))
}

/// `kiln tune` of tiny-cpu's `tuned` profile, served from the llama-server at `prefix` on a free
/// port.
fn tune_tuned(ws: &Workspace, prefix: &std::path::Path) -> assert_cmd::Command {
    let mut cmd = ws.kiln();
    cmd.args(["tune", &recipe(), "--profile", "tuned"])
        .args(["--set", &format!("prefix={}", prefix.display())])
        .args(["--set", &format!("port={}", free_port())]);
    cmd
}

/// Short requests: the race screens at an eighth of `--max-tokens` (here all 16), duels with more
/// runs while the bounds overlap, and gives the winner the full rung.
fn short_runs(cmd: &mut assert_cmd::Command) -> &mut assert_cmd::Command {
    cmd.args([
        "--runs",
        "2",
        "--warmup",
        "0",
        "--max-tokens",
        "16",
        "--ab-tokens",
        "8",
    ])
}

#[test]
fn the_race_launches_each_variant_once_ranks_the_qualified_and_prices_the_next_run() {
    let prefix = tiny_cpu();
    let ws = Workspace::new();
    // Before any launch of this recipe, the estimate has nothing to time launches with.
    let dry = short_runs(tune_tuned(&ws, &prefix).args([
        "--vary=-fa=on,off",
        "--vary=-b=256,1024",
        "--dry-run",
    ]))
    .output()
    .unwrap();
    let dry_out = String::from_utf8_lossy(&dry.stdout);
    assert_eq!(dry.status.code(), Some(0), "{dry_out}");
    assert!(
        dry_out.contains("-fa=off -b=1024\n4 variant(s), 4 launch(es) + ~")
            && dry_out.contains("no past launch of this recipe"),
        "{dry_out}"
    );
    assert!(
        !ws.state().join("tune/tiny-cpu/tuned.json").exists(),
        "a dry run launches nothing"
    );

    let out =
        short_runs(tune_tuned(&ws, &prefix).args(["--vary=-fa=on,off", "--vary=-b=256,1024"]))
            .output()
            .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("tune `tuned` of tiny-cpu (Race): 4 variant(s), 4 launch(es)"),
        "{stderr}"
    );
    // `tuned` expects flash attention: the `-fa off` variants fell back and cannot win.
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("rank variant"), "{stdout}");
    assert!(
        lines[1].starts_with("1    -fa=on -b=") && lines[1].ends_with("winner"),
        "{stdout}"
    );
    let disqualified: Vec<&&str> = lines
        .iter()
        .filter(|l| l.contains("disqualified: flash-attn fell back"))
        .collect();
    assert_eq!(disqualified.len(), 2, "{stdout}");
    assert!(
        disqualified.iter().all(|l| l.contains("-fa=off")),
        "{stdout}"
    );
    assert!(stdout.contains("4 launches in "), "{stdout}");
    // The race's losers were ruled out on screening runs, each with its reason: the winner
    // claims no margin over one.
    assert!(
        !stdout.contains("ahead of `") && !stdout.contains("not separated from `"),
        "{stdout}"
    );

    let json = results_of(&ws, "tiny-cpu");
    assert_eq!(json["method"], "race");
    assert_eq!(json["complete"], true, "the search ran to its end");
    assert_eq!(json["launches"], 4);
    let records = json["launch_records"].as_array().unwrap();
    let mut launched: Vec<&str> = records
        .iter()
        .map(|r| r["variant"].as_str().unwrap())
        .collect();
    launched.sort_unstable();
    launched.dedup();
    assert_eq!(launched.len(), 4, "each variant launched once: {records:?}");
    let entries = json["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 4);
    let winner = &entries[0];
    assert!(
        winner["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e.as_str().unwrap().starts_with("greedy A/B: identical")),
        "{winner}"
    );
    // The winner's figures all come from its one launch, the last of them the full benchmark.
    let ms = winner["measurements"].as_array().unwrap();
    let launch = ms[0]["launch"].as_u64().unwrap();
    assert!(ms.iter().all(|m| m["launch"] == launch), "{winner}");
    assert_eq!(ms.last().unwrap()["rung"]["runs"], 2, "{winner}");
    // Two servers may be up (the recipe has a port variable, no GPU limits it): the second
    // variant is screened beside the idle leader.
    assert!(
        entries
            .iter()
            .flat_map(|e| e["measurements"].as_array().unwrap())
            .any(|m| m["others_up"] == 1),
        "{json}"
    );
    let runner_up = &entries[1];
    assert!(
        runner_up["out"].is_string(),
        "the loser says why: {runner_up}"
    );
    let svg = std::fs::read_to_string(ws.state().join("tune/tiny-cpu/tuned.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("disqualified: flash-attn fell back"));

    // The winner file is a recipe: its profile replays the winner's own launch log as active.
    let best = ws.state().join("tune/tiny-cpu/tuned-best.toml");
    let text = std::fs::read_to_string(&best).unwrap();
    assert!(
        text.contains("[profile.tuned-best]") && text.contains("baseline = \"baseline\""),
        "{text}"
    );
    let log = records
        .iter()
        .find(|r| r["launch"] == launch)
        .map(|r| r["log"].as_str().unwrap().to_string())
        .unwrap();
    let judged = ws
        .kiln()
        .arg("serve")
        .arg(&best)
        .args(["--profile", "tuned-best", "--log"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&judged.stdout).contains("flash-attn                   active"),
        "{}",
        String::from_utf8_lossy(&judged.stdout)
    );

    // The next estimate is priced with this run's launches and measurements.
    let again = short_runs(tune_tuned(&ws, &prefix).args(["--vary=-b=256,512,1024", "--dry-run"]))
        .output()
        .unwrap();
    let again_out = String::from_utf8_lossy(&again.stdout);
    let last = again_out.lines().last().unwrap_or("");
    assert!(
        last.starts_with("3 variant(s), 3 launch(es) × ~")
            && last.contains(" tok/s ≈ ")
            && last.ends_with("(from 4 past launch(es) of `tuned` in its last tune result)"),
        "{again_out}"
    );
}

#[test]
fn per_request_knobs_are_varied_inside_one_launch() {
    let prefix = tiny_cpu();
    let ws = Workspace::new();
    // The grid: the knob path is the same for every method, and two variants of the same speed
    // would have the race duel them to its last round on this slow CPU.
    let out = short_runs(tune_tuned(&ws, &prefix).args(["--vary=top_k=1,40", "--method=grid"]))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("2 variant(s), 1 launch(es)")
            && stderr.contains("per request, inside one launch: top_k (top-k sampling)"),
        "{stderr}"
    );
    let json = results_of(&ws, "tiny-cpu");
    assert_eq!(json["launches"], 1, "{json}");
    assert_eq!(json["per_request"], serde_json::json!(["top_k"]));
    let entries = json["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    // Both were judged (greedy decoding: top-k changes no token) and measured on launch 1.
    for e in entries {
        assert!(e["disqualified"].is_null(), "{e}");
        assert!(
            e["measurements"]
                .as_array()
                .unwrap()
                .iter()
                .all(|m| m["launch"] == 1),
            "{e}"
        );
    }
    let best = std::fs::read_to_string(ws.state().join("tune/tiny-cpu/tuned-best.toml")).unwrap();
    assert!(
        best.contains("send ") && best.contains("with each request"),
        "{best}"
    );
}

#[test]
fn a_variable_the_recipe_lacks_is_refused_with_a_suggestion() {
    let ws = Workspace::new();
    let out = ws
        .kiln()
        .args([
            "tune",
            &recipe(),
            "--profile",
            "tuned",
            "--vary",
            "thread_tuned=1,2",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("recipe `tiny-cpu` has no variable `thread_tuned`")
            && stderr.contains("did you mean `threads_tuned`?"),
        "{stderr}"
    );
}

#[test]
fn when_every_variant_falls_back_there_is_no_winner_and_the_error_says_why() {
    let prefix = tiny_cpu();
    let ws = Workspace::new();
    let out = tune_tuned(&ws, &prefix)
        .args([
            "--vary=-fa=off",
            "--runs",
            "1",
            "--warmup",
            "0",
            "--max-tokens",
            "32",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("disqualified: flash-attn fell back"),
        "{stdout}"
    );
    assert!(
        stderr.contains("error: no variant of `tuned` qualified"),
        "{stderr}"
    );
    assert!(!ws.state().join("tune/tiny-cpu/tuned-best.toml").exists());
}

#[test]
fn zero_measured_runs_is_refused_before_anything_launches() {
    let ws = Workspace::new();
    for args in [
        &["tune", "r.toml", "--profile", "tuned", "--runs", "0"][..],
        &["bench", "--url", "http://127.0.0.1:9", "--runs", "0"][..],
    ] {
        let out = ws.kiln().args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("invalid value '0' for '--runs <RUNS>'"),
            "{args:?}: {stderr}"
        );
    }
}

/// Every stdout line of a `--json` run, parsed (a line that is not JSON fails the test).
fn json_lines(stdout: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[test]
fn json_gives_typed_events_the_plan_every_variants_figures_and_verdicts_and_the_winner() {
    let prefix = tiny_cpu();
    let ws = Workspace::new();
    let dry =
        short_runs(tune_tuned(&ws, &prefix).args(["--vary=top_k=1,40", "--dry-run", "--json"]))
            .output()
            .unwrap();
    assert_eq!(
        dry.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&dry.stderr)
    );
    let events = json_lines(&dry.stdout);
    assert_eq!(events[0]["schema"], 1, "{events:?}");
    let plan = events.iter().find(|e| e["event"] == "tune_plan").unwrap();
    assert_eq!(plan["profile"], "tuned");
    assert_eq!(plan["method"], "race");
    assert_eq!(plan["launches"], 1, "{plan}");
    assert_eq!(
        plan["variants"][1]["settings"],
        serde_json::json!([["top_k", "40"]])
    );
    assert!(
        plan["estimate"]
            .as_str()
            .unwrap()
            .starts_with("2 variant(s), 1 launch(es)"),
        "{plan}"
    );
    assert_eq!(events.last().unwrap()["event"], "outcome");

    let out =
        short_runs(tune_tuned(&ws, &prefix).args(["--vary=top_k=1,40", "--method=grid", "--json"]))
            .output()
            .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = json_lines(&out.stdout);
    assert_eq!(events[0]["schema"], 1);
    let ranked = events.iter().find(|e| e["event"] == "tune_ranked").unwrap();
    let entries = ranked["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{ranked}");
    assert_eq!(ranked["launches"], 1);
    for e in entries {
        assert!(e["disqualified"].is_null(), "{e}");
        let m = &e["measurements"][0];
        assert!(
            m["tok_s"].as_f64().unwrap() > 0.0 && m["launch"] == 1,
            "{e}"
        );
        // The verdicts and the A/B of its launch ride along.
        let evidence: Vec<&str> = e["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|l| l.as_str())
            .collect();
        assert!(evidence.iter().any(|l| l.starts_with("verdict ")), "{e}");
    }
    let winner = events.iter().find(|e| e["event"] == "tune_winner").unwrap();
    assert_eq!(winner["profile"], "tuned");
    assert!(winner["tok_s"].as_f64().unwrap() > 0.0, "{winner}");
    assert!(
        winner["file"]
            .as_str()
            .unwrap()
            .ends_with("tuned-best.toml"),
        "{winner}"
    );
    assert_eq!(winner["variant"], entries[0]["variant"]);
    // The runner-up ran the same requests on the same server: the winner says by how much it
    // is ahead, or that it is not, and so does its profile file.
    let margin = &winner["margin"];
    let runner_up = entries[1]["variant"]["settings"][0].as_array().unwrap();
    assert_eq!(
        margin["runner_up"],
        format!(
            "{}={}",
            runner_up[0].as_str().unwrap(),
            runner_up[1].as_str().unwrap()
        ),
        "{winner}"
    );
    assert_eq!(margin["runs"], serde_json::json!([2, 2]), "{winner}");
    assert_eq!(
        (&margin["max_tokens"], &margin["same_launch"]),
        (&16.into(), &true.into())
    );
    assert!(
        margin["low_pct"].as_f64().unwrap() <= margin["high_pct"].as_f64().unwrap(),
        "{winner}"
    );
    let file = std::fs::read_to_string(winner["file"].as_str().unwrap()).unwrap();
    let said = file.lines().next().unwrap();
    assert!(
        said.contains(&format!("of `{}`", margin["runner_up"].as_str().unwrap()))
            || said.contains(&format!("from `{}`", margin["runner_up"].as_str().unwrap())),
        "{file}"
    );
    assert!(
        said.contains("(95 % over 2 and 2 runs of 16 tokens, on one launch)"),
        "{file}"
    );
    assert_eq!(
        events.last().unwrap(),
        &serde_json::json!({"event": "outcome", "ok": true, "exit_code": 0})
    );
}

#[test]
fn the_results_file_holds_each_launch_as_it_ends_and_a_killed_tune_keeps_them() {
    use std::os::unix::fs::{symlink, PermissionsExt};
    let prefix = tiny_cpu();
    let ws = Workspace::new();
    // The second variant's server (its own prefix) says it started, then waits for the test:
    // the first variant's launch has ended by then, and kiln is killed while it waits.
    let held = ws.path().join("held");
    std::fs::create_dir_all(held.join("bin")).unwrap();
    for shared in ["model", "llama-bench.json"] {
        symlink(prefix.join(shared), held.join(shared)).unwrap();
    }
    let server = held.join("bin/llama-server");
    std::fs::write(
        &server,
        format!(
            "#!/bin/sh\ntouch '{0}/started'\nwhile [ ! -e '{0}/release' ]; do sleep 0.05; done\nexit 1\n",
            held.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&server, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut kiln = ws
        .kiln_process()
        .args(["tune", &recipe(), "--profile", "tuned"])
        .args(["--set", &format!("prefix={}", prefix.display())])
        .args(["--set", &format!("port={}", free_port())])
        .arg(format!(
            "--vary=prefix={},{}",
            prefix.display(),
            held.display()
        ))
        .args([
            "--runs",
            "2",
            "--warmup",
            "0",
            "--max-tokens",
            "16",
            "--ab-tokens",
            "8",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(300);
    while !held.join("started").exists() {
        if let Some(status) = kiln.try_wait().unwrap() {
            let err = std::io::read_to_string(kiln.stderr.take().unwrap()).unwrap();
            panic!("kiln tune ended ({status}) before its second launch:\n{err}");
        }
        assert!(std::time::Instant::now() < until, "no second launch");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let first = format!("prefix={}", prefix.display());
    let check = |json: &serde_json::Value, when: &str| {
        assert_eq!(json["complete"], false, "{when}: {json}");
        assert_eq!(json["launches"], 1, "{when}: {json}");
        let entries = json["entries"].as_array().unwrap();
        let measured = entries
            .iter()
            .find(|e| e["variant"]["settings"][0][1] == prefix.display().to_string())
            .unwrap_or_else(|| panic!("{when}: no entry of {first}: {json}"));
        assert!(
            !measured["measurements"].as_array().unwrap().is_empty(),
            "{when}: {first} has no measurement: {json}"
        );
    };
    let path = ws.state().join("tune/tiny-cpu/tuned.json");
    let during: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&path).expect("the results file exists once the first launch ended"),
    )
    .unwrap();
    check(&during, "while the second launch starts");
    kiln.kill().unwrap();
    kiln.wait().unwrap();
    std::fs::write(held.join("release"), "").unwrap();
    let after: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    check(&after, "after kiln was killed");
}

/// Interrupted after two launches have ended (SIGINT, as Ctrl-C), `kiln tune` says how many
/// launches ended and that they are in the results file. On the SGLang stand-in: a launch takes
/// about a second.
#[test]
fn an_interrupted_tune_counts_the_launches_that_ended() {
    let ws = Workspace::new();
    let port = free_port();
    ws.write("r.toml", &standin_recipe("sgstop", port, "2", ""));
    let kiln = ws
        .kiln_process()
        .args(["tune", "r.toml", "--profile", "tuned", "--method", "grid"])
        .args(["--vary=--stream-interval=1,2,4,8,16,32,64,128"])
        .args([
            "--runs",
            "3",
            "--warmup",
            "0",
            "--max-tokens",
            "256",
            "--ab-tokens",
            "8",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The results file is written (whole, by rename) as each launch ends: wait for two.
    let results = ws.state().join("tune/sgstop/tuned.json");
    let ended = || -> usize {
        std::fs::read(&results)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v["launch_records"].as_array().map(Vec::len))
            .unwrap_or(0)
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while ended() < 2 {
        assert!(
            std::time::Instant::now() < until,
            "two launches never ended"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: a signal to the kiln this test started.
    unsafe { libc::kill(kiln.id() as libc::pid_t, libc::SIGINT) };
    let out = kiln.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("error: `kiln tune` interrupted after "))
        .unwrap_or_else(|| panic!("{err}"));
    let n: usize = line
        .trim_start_matches("error: `kiln tune` interrupted after ")
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!((2..=4).contains(&n), "{line}");
    assert!(err.contains("the launches that ended are in "), "{err}");
    // Each launch that ended has the time of each of its phases, on its own record.
    let saved = results_of(&ws, "sgstop");
    let records = saved["launch_records"].as_array().unwrap();
    assert!(records.len() >= 2, "{saved}");
    for r in records {
        for phase in ["ready_s", "qualify_s", "measure_s", "held_s"] {
            assert!(r[phase].as_f64().is_some_and(|s| s > 0.0), "{phase}: {r}");
        }
    }
    // Nothing is launched after the interrupt: the variants never reached say so, and none
    // failed (a launch tried after it would fail, interrupted).
    let entries = saved["entries"].as_array().unwrap();
    let never = entries.iter().filter(|e| e["out"] == NOT_LAUNCHED).count();
    assert!(never >= 8 - records.len() - 1, "{saved}");
    assert!(
        entries.iter().all(|e| e["disqualified"].is_null()),
        "{saved}"
    );
}

/// The results file of `kiln tune` of recipe `name`'s `tuned` profile.
fn results_of(ws: &Workspace, name: &str) -> serde_json::Value {
    let path = ws.state().join(format!("tune/{name}/tuned.json"));
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// `kiln tune r.toml --profile tuned --method grid` with one short measured run.
fn grid_tune(ws: &Workspace) -> assert_cmd::Command {
    let mut cmd = ws.kiln();
    cmd.args(["tune", "r.toml", "--profile", "tuned", "--method", "grid"])
        .args(["--runs", "1", "--warmup", "0", "--max-tokens", "16"]);
    cmd
}

/// A per-request knob is sent in every request of its variant's greedy A/B, beside the greedy
/// decoding the A/B imposes: the SGLang stand-in logs each `/generate` it receives (SGLang's own
/// `--log-requests` line), and the launch's log holds them.
#[test]
fn each_variants_per_request_knob_reaches_the_server_in_its_greedy_ab() {
    let ws = Workspace::new();
    let tuned = "args = [\"--log-requests\"]\n";
    ws.write(
        "r.toml",
        &standin_recipe("sgknob", free_port(), "0.2", tuned),
    );
    // `--ab-tokens 6`: the A/B's requests are the ones asking for 6 new tokens.
    let out = grid_tune(&ws)
        .args(["--vary=top_p=0.5,0.9", "--ab-tokens", "6"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let results = results_of(&ws, "sgknob");
    let log = results["launch_records"][0]["log"].as_str().unwrap();
    let log = std::fs::read_to_string(log).unwrap();
    let ab: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("] Receive: obj=") && l.contains("'max_new_tokens': 6,"))
        .collect();
    // Four prompts per variant, each with its variant's top_p, decoded greedily.
    assert_eq!(ab.len(), 8, "{log}");
    for top_p in ["0.5", "0.9"] {
        let sent = format!("'top_p': {top_p}");
        let n = ab.iter().filter(|l| l.contains(&sent)).count();
        assert_eq!(n, 4, "{sent}:\n{log}");
    }
    assert!(ab.iter().all(|l| l.contains("'top_k': 1")), "{log}");
}

/// A variant whose greedy output leaves the baseline's early (the stand-in's `--diverge-after 2`
/// of 8 A/B tokens) is wrong output and out; one that leaves it past half its tokens
/// (`--diverge-after 6`) diverged late and still ranks.
#[test]
fn a_variant_whose_greedy_output_diverges_early_is_disqualified_and_a_late_one_is_not() {
    let ws = Workspace::new();
    ws.write(
        "r.toml",
        &standin_recipe("sgdiverge", free_port(), "0.2", ""),
    );
    let out = grid_tune(&ws)
        .args(["--vary=--diverge-after=2,6", "--ab-tokens", "8"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let results = results_of(&ws, "sgdiverge");
    let entry = |after: &str| {
        results["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["variant"]["settings"][0][1] == after)
            .unwrap_or_else(|| panic!("no entry of --diverge-after={after}: {results}"))
    };
    let early = entry("2");
    assert_eq!(
        early["disqualified"], "wrong greedy output (25.0% tokens agree with the baseline)",
        "{early}"
    );
    // Judged before its benchmark: a wrong output is never measured.
    assert_eq!(early["measurements"], serde_json::json!([]), "{early}");
    let late = entry("6");
    assert!(late["disqualified"].is_null(), "{late}");
    assert!(
        late["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l == "greedy A/B: diverged late (75.0% tokens agree)"),
        "{late}"
    );
}

/// [`grid_tune`] of a stand-in recipe with a `port` variable (two servers allowed unless
/// `--one-server`) and an unused `label`, on a host whose nvidia-smi replays the real idle
/// 2x H200 capture: the same readings before and after a launch (the stand-in takes no GPU).
fn grid_tune_on_h200s(ws: &Workspace) -> assert_cmd::Command {
    let port = free_port();
    let recipe = standin_recipe("sgroom", port, "0.2", "")
        .replace(&format!("\"{port}\""), "\"${port}\"")
        + &format!("[vars]\nport = \"{port}\"\nlabel = \"plain\"\n");
    ws.write("r.toml", &recipe);
    let gpu = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gpu");
    let mut path = std::ffi::OsString::from(gpu.join("bin"));
    path.push(":");
    path.push(crate::common::path_without("nvidia-smi", ws.path()));
    let mut cmd = grid_tune(ws);
    cmd.env("PATH", path)
        .env("FAKE_NVIDIA_SMI_SCENARIO", gpu.join("h200x2"))
        .args(["--ab-tokens", "8"]);
    cmd
}

/// With two servers allowed, the GPUs are read before the first launch and after it is up, and
/// only then: what one server takes, and whether the leader stays up, is said once, between
/// launch 1 and launch 2; one server at a time, it is never said. The milestones reach stderr
/// with a `--vary` value's escape sequence (a title change) shown, not obeyed.
#[test]
fn the_room_for_a_second_server_is_measured_around_the_first_launch_only() {
    let ws = Workspace::new();
    let out = grid_tune_on_h200s(&ws)
        .arg("--vary=label=plain,\u{1b}]0;pwned\u{7}")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains(['\u{1b}', '\u{7}']), "{stderr:?}");
    let lines: Vec<&str> = stderr.lines().collect();
    let at = |start: &str| -> Vec<usize> {
        (0..lines.len())
            .filter(|&i| lines[i].starts_with(start))
            .collect()
    };
    let (first, room) = (
        at("kiln: tune: launch 1: `label=plain`"),
        at("kiln: tune: one "),
    );
    let second = at("kiln: tune: launch 2: `label=\\u{1b}]0;pwned\\u{7}`");
    assert_eq!(
        (first.len(), room.len(), second.len()),
        (1, 1, 1),
        "{stderr}"
    );
    assert!(first[0] < room[0] && room[0] < second[0], "{stderr}");
    assert_eq!(
        lines[room[0]],
        "kiln: tune: one server takes 0 MiB of GPU memory and 143771 MiB are free: \
         the leader stays up while the next variant is measured"
    );

    let ws = Workspace::new();
    let out = grid_tune_on_h200s(&ws)
        .args(["--one-server", "--vary=label=plain"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("kiln: tune: launch 1: `label=plain`\n"),
        "{stderr}"
    );
    assert!(!stderr.contains("tune: one server"), "{stderr}");
}

/// A time budget stops launching once it has passed: with a stand-in that takes 1.2 s to
/// start, `--budget 1s` (counted from the first launch) launches one of three variants, and the
/// two never launched say so in the results; an hour's budget launches all three.
#[test]
fn a_time_budget_launches_nothing_once_it_has_passed() {
    let ws = Workspace::new();
    let recipe = standin_recipe("sgbudget", free_port(), "0.2", "");
    ws.write("r.toml", &recipe.replace("\"0.4\"", "\"1.2\""));
    let tune = |budget: &str| {
        let out = grid_tune(&ws)
            .args(["--vary=--step-ms=0.2,0.3,0.4", "--budget", budget])
            .output()
            .unwrap();
        let results = results_of(&ws, "sgbudget");
        let never = results["entries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["out"] == NOT_LAUNCHED)
            .count();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (
            out.status.code(),
            never,
            results["launches"].as_u64().unwrap(),
            stderr,
        )
    };
    let (code, never, launched, stderr) = tune("1s");
    assert_eq!((code, never, launched), (Some(0), 2, 1), "{stderr}");
    let (code, never, launched, stderr) = tune("1h");
    assert_eq!((code, never, launched), (Some(0), 0, 3), "{stderr}");
}

/// `--launches 2` with the grid: each of the two launch keys is served twice, round after round
/// (the second round in reverse), each launch judged and benchmarked on its own; a row's figure
/// is the median of its launches' (`2x1x16`, launch `x2`), and the winner's margin is over the
/// launches' medians. With the race it is refused before anything launches.
#[test]
fn the_grid_launches_each_variant_as_often_as_asked_and_compares_their_launches() {
    let ws = Workspace::new();
    ws.write("r.toml", &standin_recipe("sgtwice", free_port(), "0.2", ""));
    let vary = "--vary=--step-ms=0.2,0.6";
    let dry = grid_tune(&ws)
        .args([vary, "--launches", "2", "--dry-run"])
        .output()
        .unwrap();
    let dry_out = String::from_utf8_lossy(&dry.stdout);
    assert!(dry_out.contains("2 variant(s), 4 launch(es)"), "{dry_out}");

    let out = grid_tune(&ws)
        .args([vary, "--launches", "2", "--ab-tokens", "8"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results = results_of(&ws, "sgtwice");
    assert_eq!(
        (&results["launches"], &results["launches_each"]),
        (&4.into(), &2.into())
    );
    let launched: Vec<&str> = results["launch_records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["variant"].as_str().unwrap())
        .collect();
    assert_eq!(
        launched,
        [
            "--step-ms=0.2",
            "--step-ms=0.6",
            "--step-ms=0.6",
            "--step-ms=0.2"
        ]
    );
    for e in results["entries"].as_array().unwrap() {
        let ms = e["measurements"].as_array().unwrap();
        let launches: Vec<u64> = ms.iter().map(|m| m["launch"].as_u64().unwrap()).collect();
        assert_eq!(launches.len(), 2, "{e}");
        assert_ne!(launches[0], launches[1], "{e}");
        // Each launch judged on its own: a greedy A/B line for each.
        let abs = e["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l.as_str().unwrap().starts_with("greedy A/B: identical"))
            .count();
        assert_eq!(abs, 2, "{e}");
    }
    let rows: Vec<&str> = stdout.lines().skip(1).take(2).collect();
    assert!(
        rows.iter()
            .all(|r| r.contains(" 2x1x16 ") && r.contains(" x2  ")),
        "{stdout}"
    );
    assert!(
        stdout.contains("(95 % over 2 and 2 launches' medians, 2 and 2 runs of 16 tokens)"),
        "{stdout}"
    );

    let race = ws
        .kiln()
        .args([
            "tune",
            "r.toml",
            "--profile",
            "tuned",
            vary,
            "--launches",
            "2",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&race.stderr);
    assert_eq!(race.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("error: `--launches 2` relaunches the grid's variants, not the Race's")
            && stderr
                .trim_end()
                .ends_with("halving relaunches its survivors for each rung)"),
        "{stderr}"
    );
    assert_eq!(
        results_of(&ws, "sgtwice")["method"],
        "grid",
        "the refused race wrote no results"
    );
}
