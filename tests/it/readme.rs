//! README.md true line by line (issue 50): every `kiln …` command it shows parses with kiln's own
//! command line, and each behaviour it states names the tests or scripts that check it. A claim
//! whose words left README, or whose test was renamed or removed, turns this red: the table below
//! is kept true in both directions.

use std::path::{Path, PathBuf};

use crate::common::Workspace;

const README: &str = include_str!("../../README.md");

/// What README says (its words, spaces and line breaks folded) and what checks each: `it:FILE::fn`
/// (an integration test in tests/it/FILE.rs), `unit:src/PATH.rs::fn` (a unit test), `file:PATH`
/// (a script CI runs, or a test file whose every test pins the claim).
const CLAIMS: &[(&str, &[&str])] = &[
    (
        "A failed or killed run resumes at the first unfinished step",
        &[
            "it:engine::a_failing_step_reports_its_tail_and_log_and_a_rerun_resumes",
            "it:engine::sigkill_mid_step_then_rerun_completes_and_leaves_no_orphans",
        ],
    ),
    (
        "a re-run with nothing changed runs nothing",
        &["it:engine::a_rerun_with_nothing_changed_runs_nothing"],
    ),
    (
        "kiln reports every tuning as one of six statuses",
        &["file:src/serve/verdict.rs", "file:tests/it/spoof.rs", "file:tests/it/gpu_replay.rs"],
    ),
    (
        "a greedy comparison against a baseline profile that says identical, diverged late or wrong output",
        &[
            "unit:src/bench/ab.rs::each_verdict_has_its_own_exit_code",
            "it:spoof::greedy_ab_compares_text_not_chunks_and_an_early_stop_is_wrong_output",
        ],
    ),
    (
        "linked for glibc 2.17 or newer",
        &["file:.ci/wheel-check"],
    ),
    ("kiln 0.1.0 (commit 1a2b3c4d5e6f)", &["it:readme::kiln_version_names_the_version_and_the_commit"]),
    (
        "without one, `tiny-cpu`, and it says so in its first line",
        &["it:shipped::without_a_gpu_kiln_up_picks_the_cpu_demo_and_says_so_first"],
    ),
    (
        "`kiln up` checks the host tools a recipe `requires` before its first step and says how to install what is missing",
        &["it:up_outcome::a_missing_host_tool_stops_up_before_the_first_step"],
    ),
    (
        "a launch that cannot work is refused",
        &[
            "it:launch_preflight::the_default_recipe_on_one_h200_stops_before_any_step_with_what_would_run",
            "it:launch_preflight::weights_too_large_too_little_kv_cache_and_missing_paths_are_named",
            "it:launch_preflight::the_cpu_demo_llama_server_rejects_an_unknown_flag_caught_before_launch",
        ],
    ),
    (
        "`kiln up --no-serve` provisions only",
        &["it:launch_preflight::kiln_up_refuses_a_profile_without_its_model_and_no_serve_provisions_without_it"],
    ),
    (
        "advisories such as bench noise are printed as warnings and kept in the report, and fail the run only with `--strict`",
        &[
            "it:up_outcome::an_advisory_is_a_warning_and_fails_only_with_strict",
            "it:bench_cli::an_advisory_warns_and_exits_0_and_strict_fails_it",
        ],
    ),
    (
        "Any failure ends with one `error:` line saying why, and `report.json`'s `outcome` says the same",
        &[
            "it:up_outcome::a_failed_step_fails_up_with_its_reason_in_the_report",
            "it:up_outcome::a_tuning_that_fell_back_fails_up",
        ],
    ),
    (
        "Run it twice: the second run rebuilds nothing. It finds the server the first one left running",
        &["it:up_e2e::kiln_up_serves_proves_benches_and_reports_on_the_cpu_demo", "file:.ci/fresh-machine"],
    ),
    (
        "A port held by anything kiln did not start is an error that names the process",
        &[
            "it:launch_preflight::a_port_held_by_another_process_is_refused_before_launch",
            "it:serve::port_in_use_is_refused_before_launch",
        ],
    ),
    (
        "Each run that writes over a good report first keeps it as `report.prev.json`",
        &["it:up_e2e::kiln_up_serves_proves_benches_and_reports_on_the_cpu_demo"],
    ),
    (
        "every step: fresh / stale (and why) / skipped — nothing runs",
        &[
            "it:engine::changing_an_input_reruns_that_step_and_its_dependents_only",
            "it:engine::dry_run_runs_nothing_and_says_what_would",
        ],
    ),
    ("re-run a step and everything after it", &["it:engine::from_reruns_a_step_and_everything_downstream"]),
    (
        "JSON lines on stdout: schema first, typed events, error + outcome last",
        &[
            "it:reporter::json_lines_carry_schema_first_and_outcome_last",
            "it:reporter::every_json_flag_prints_json_lines_ending_with_error_then_outcome",
            "it:json_schema::every_commands_json_follows_one_schema",
        ],
    ),
    (
        "the same into a file; the terminal still shows the progress",
        &["it:leads_with::json_to_a_file_still_shows_progress_on_the_terminal"],
    ),
    (
        "a smaller smoke bench (default: 5 runs of 2048 tokens)",
        &[
            "it:bench_cli::a_noisy_bench_names_its_size_and_the_flags_that_set_it",
            "it:up_e2e::kiln_up_serves_proves_benches_and_reports_on_the_cpu_demo",
        ],
    ),
    (
        "(-v: also the checks that do not apply)",
        &["it:doctor::a_host_without_gpu_or_torch_gets_a_clean_report"],
    ),
    (
        "predicts KeyError: 12, silent fallbacks",
        &["it:doctor::sm120_pcie_box_with_sglang_0_5_9_predicts_key_error_12_and_silent_fusion"],
    ),
    ("greedy A/B: wrong output fails", &["it:up_e2e::kiln_up_serves_proves_benches_and_reports_on_the_cpu_demo"]),
    (
        "one launch per variant; ranked, winner file",
        &["it:tune::the_race_launches_each_variant_once_ranks_the_qualified_and_prices_the_next_run"],
    ),
    ("verdicts from a captured log", &["file:tests/it/gpu_replay.rs"]),
    (
        "reproducible OCI archive",
        &["it:image::export_twice_is_byte_identical_and_loads_in_docker_skopeo_and_umoci"],
    ),
    (
        "the manual as plain text (EXIT STATUS, ENVIRONMENT, FILES)",
        &[
            "it:shell_help::man_without_man_on_path_is_plain_text",
            "it:reporter::man_pages_have_exit_status_environment_files_examples_and_every_command",
        ],
    ),
    ("the same as a man page (needs man-db", &["it:shell_help::man_pages_render"]),
    (
        "also zsh, fish: commands, flags, shipped recipe names",
        &[
            "it:shell_help::bash_completion_loads_and_completes_subcommands_and_flags",
            "it:shell_help::zsh_and_fish_scripts_name_every_command",
            "it:reporter::no_shell_completes_the_watchdog_and_recipe_names_are_offered",
        ],
    ),
    (
        "what the step cache and the wheel cache hold",
        &["it:leads_with::cache_ls_lists_its_step_entries_before_saying_it_has_no_wheels"],
    ),
    (
        "drop corrupt and unfinished entries",
        &["it:step_cache::cache_gc_drops_corrupt_and_unfinished_step_entries_and_says_which"],
    ),
    (
        "SM120 SASS built and proven, no GPU needed",
        &["it:sm120_sass::sm120_sass_builds_and_proves_sm120_code_without_a_gpu"],
    ),
    (
        "State (receipts, step logs, download cache) lives in `$KILN_HOME`, else `$XDG_STATE_HOME/kiln`, else `~/.local/state/kiln`; `--state-dir DIR` overrides all of them. Each step's full output is in `<state>/runs/<recipe>/logs/<step>.log`.",
        &["it:readme::the_state_dir_is_state_dir_then_kiln_home_then_xdg_then_home"],
    ),
    (
        "restored, verified file by file, instead of running the step where the key matches",
        &[
            "it:step_cache::a_fresh_state_restores_the_compile_without_running_the_compiler",
            "it:step_cache::a_forged_entry_whose_archive_hash_was_rewritten_is_refused_file_by_file",
            "it:step_cache::cache_false_is_never_stored",
        ],
    ),
    (
        "by `kiln cache export cache.tar` / `kiln cache import cache.tar`",
        &["it:step_cache::export_from_one_cache_import_into_an_empty_one_restores_without_the_compiler"],
    ),
    (
        "`KILN_REMOTE_CACHE=REG/REPO:TAG` (fetched on a miss)",
        &[
            "it:step_cache_remote::a_miss_asks_kiln_remote_cache_for_the_one_entry_and_restores_it",
            "it:step_cache_remote::a_pushed_step_entry_is_pulled_into_an_empty_cache_and_restored_without_the_compiler",
        ],
    ),
    (
        "Unsigned or wrongly signed entries are refused (the step runs, the wheel is built); `KILN_CACHE_REQUIRE_SIGS=false` opts a private cache out",
        &[
            "it:step_cache_trust::an_unsigned_entry_another_state_stored_is_refused_and_the_state_that_stored_it_restores_it",
            "it:step_cache_trust::an_entry_signed_by_a_key_this_machine_does_not_trust_is_refused_until_it_is_trusted",
            "it:step_cache_trust::an_import_of_unsigned_entries_is_refused_with_the_way_to_trust_or_opt_out",
        ],
    ),
    (
        "Unknown keys, wrong types, unknown `needs`, cycles and bad interpolation are errors that name `file:line:col`, show the line and give a `hint:`",
        &["it:recipes::every_malformed_recipe_gets_a_located_diagnostic"],
    ),
    (
        "without one it stops at once and says how to start it",
        &["file:.ci/install-deps"],
    ),
    (
        "`KILN_TEST_SKIP_DOCKER=1` skips those tests explicitly, and each prints `SKIPPED`",
        &["file:tests/it/common.rs"],
    ),
    (
        "The suite runs with its output to a terminal, a pipe or a file (`cargo test >log`)",
        &["file:.ci/container-tests"],
    ),
    (
        "while it builds, the terminal says so past the capture",
        &["file:tests/it/demo_build.rs"],
    ),
    (
        "then README's test command exactly, in a bare Debian container",
        &["file:.ci/run", "file:.ci/container-tests"],
    ),
    (
        "last, the wheel of Install (`.ci/wheel`) proven on a bare Debian 11 with python3 and pip only",
        &["file:.ci/run", "file:.ci/wheel", "file:.ci/wheel-check"],
    ),
];

/// `text` with every run of white space one space: README's line breaks fall anywhere.
fn folded(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether `check` names a test or file that exists.
fn exists(root: &Path, check: &str) -> Result<(), String> {
    let read =
        |rel: &str| std::fs::read_to_string(root.join(rel)).map_err(|e| format!("{rel}: {e}"));
    if let Some(path) = check.strip_prefix("file:") {
        return read(path).map(|_| ());
    }
    let (file, name) = if let Some(rest) = check.strip_prefix("it:") {
        let (module, name) = rest.split_once("::").ok_or("it:MODULE::fn")?;
        (format!("tests/it/{module}.rs"), name)
    } else if let Some(rest) = check.strip_prefix("unit:") {
        let (file, name) = rest.split_once("::").ok_or("unit:FILE::fn")?;
        (file.to_string(), name)
    } else {
        return Err("a check starts with it:, unit: or file:".into());
    };
    let source = read(&file)?;
    if source.contains(&format!("fn {name}(")) {
        Ok(())
    } else {
        Err(format!("{file} has no `fn {name}(`"))
    }
}

#[test]
fn every_claim_of_readme_names_tests_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = folded(README);
    let mut wrong = Vec::new();
    for (claim, checks) in CLAIMS {
        if !readme.contains(&folded(claim)) {
            wrong.push(format!("README no longer says: {claim}"));
        }
        assert!(!checks.is_empty(), "{claim}: names no check");
        for check in *checks {
            if let Err(e) = exists(root, check) {
                wrong.push(format!("{claim}: {check}: {e}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "README's claims and their checks disagree:\n{}",
        wrong.join("\n")
    );
}

/// The `kiln` argument lists of README: each shell line of its ```sh blocks (a comment cut off,
/// pipes, `&&`, `<(…)` and redirections split), and each inline `kiln …` code span without a
/// placeholder; `cargo run … -- ARGS` is `kiln ARGS`. With README's line number.
fn kiln_commands(readme: &str) -> Vec<(usize, Vec<String>)> {
    let mut found = Vec::new();
    let mut in_sh = false;
    for (i, line) in readme.lines().enumerate() {
        let number = i + 1;
        if line.starts_with("```") {
            in_sh = !in_sh && line.trim() == "```sh";
            continue;
        }
        let mut pieces: Vec<&str> = Vec::new();
        if in_sh {
            pieces.push(line.split(" #").next().unwrap_or(""));
        }
        // Inline code spans (the odd pieces between backticks) other than the binary's bare name;
        // a span a line break cuts (an odd number of backticks) is left out.
        let between: Vec<&str> = line.split('`').collect();
        let whole = between.len() - usize::from(between.len().is_multiple_of(2));
        pieces.extend(
            between[..whole]
                .iter()
                .skip(1)
                .step_by(2)
                .filter(|s| s.trim() != "kiln" && !s.contains('…')),
        );
        for piece in pieces {
            for segment in piece
                .split(['|', ';', '>', ')'])
                .flat_map(|s| s.split("&&"))
                .flat_map(|s| s.split("<("))
            {
                let words: Vec<&str> = segment.split_whitespace().collect();
                let args = if words.first() == Some(&"cargo") && words.get(1) == Some(&"run") {
                    words
                        .iter()
                        .position(|w| *w == "--")
                        .map(|at| &words[at + 1..])
                } else {
                    words
                        .iter()
                        .position(|w| *w == "kiln")
                        .map(|at| &words[at + 1..])
                };
                if let Some(args) = args {
                    let mut argv = vec!["kiln".to_string()];
                    argv.extend(args.iter().map(ToString::to_string));
                    found.push((number, argv));
                }
            }
        }
    }
    found
}

#[test]
fn every_kiln_command_in_readme_parses_as_kiln_reads_it() {
    use clap::Parser;
    let commands = kiln_commands(README);
    let mut refused = Vec::new();
    for (line, argv) in &commands {
        if let Err(e) = kiln::cli::Cli::try_parse_from(argv) {
            use clap::error::ErrorKind::{DisplayHelp, DisplayVersion};
            if !matches!(e.kind(), DisplayHelp | DisplayVersion) {
                refused.push(format!(
                    "README.md:{line}: `{}`: {}",
                    argv.join(" "),
                    e.render()
                ));
            }
        }
    }
    assert!(
        refused.is_empty(),
        "README shows commands kiln refuses:\n{}",
        refused.join("\n")
    );
    // The reader found README's commands, not nothing: each subcommand README shows is among them.
    let shown: Vec<&str> = commands
        .iter()
        .filter_map(|(_, a)| a.get(1).map(String::as_str))
        .collect();
    for sub in [
        "up",
        "plan",
        "doctor",
        "patch",
        "serve",
        "verify",
        "tune",
        "bench",
        "image",
        "man",
        "completions",
        "cache",
        "--version",
    ] {
        assert!(
            shown.contains(&sub),
            "no `kiln {sub}` found in README: {commands:?}"
        );
    }
}

#[test]
fn the_reader_of_readmes_commands_splits_what_a_shell_would() {
    let text = "```sh\nkiln man | man -l -   # paged\nsource <(kiln completions bash)\ncargo run --release -- up --json > run.jsonl\nuvx --from ./kiln-*.whl kiln doctor\npip install ./kiln-*.whl\n```\nprose `kiln cache pull …` and `kiln plan x.toml`, the `kiln` binary, `kiln cache\npush REG` cut\n";
    let got: Vec<(usize, String)> = kiln_commands(text)
        .into_iter()
        .map(|(n, a)| (n, a.join(" ")))
        .collect();
    let want: Vec<(usize, String)> = [
        (2, "kiln man"),
        (3, "kiln completions bash"),
        (4, "kiln up --json"),
        (5, "kiln doctor"),
        (8, "kiln plan x.toml"),
    ]
    .into_iter()
    .map(|(n, s)| (n, s.to_string()))
    .collect();
    assert_eq!(got, want);
}

#[test]
fn kiln_version_names_the_version_and_the_commit() {
    let out = Workspace::new().kiln().arg("--version").output().unwrap();
    assert!(out.status.success());
    let line = String::from_utf8(out.stdout).unwrap();
    let inside = line
        .trim_end()
        .strip_prefix(&format!("kiln {} (", env!("CARGO_PKG_VERSION")))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("not `kiln VERSION (…)`: {line:?}"));
    // A checkout names its commit (12 hex digits, as README shows); a tarball without .git says so.
    let commit = inside
        .strip_prefix("commit ")
        .map(|hash| hash.len() == 12 && hash.bytes().all(|b| b.is_ascii_hexdigit()));
    assert!(
        commit == Some(true) || inside == "unknown commit",
        "{line:?}"
    );
}

#[test]
fn the_state_dir_is_state_dir_then_kiln_home_then_xdg_then_home() {
    let ws = Workspace::new();
    ws.write("one.toml", "[recipe]\nname = \"one\"\n\n[[step]]\nid = \"say\"\nkind = \"run\"\ncmd = [\"echo\", \"said by one\"]\n");
    let home = ws.path().join("home");
    let xdg = ws.path().join("xdg");
    let kiln_home = ws.path().join("kiln-home");
    let flag = ws.path().join("flag");
    // Each run takes the first of --state-dir, KILN_HOME, XDG_STATE_HOME/kiln, ~/.local/state/kiln
    // that is set; the step's log lands in <state>/runs/one/logs/say.log.
    // (what decides, --state-dir, KILN_HOME, XDG_STATE_HOME, where the state goes)
    type Case<'p> = (
        &'p str,
        Option<&'p Path>,
        Option<&'p Path>,
        Option<&'p Path>,
        PathBuf,
    );
    let cases: [Case; 4] = [
        (
            "--state-dir",
            Some(&flag),
            Some(&kiln_home),
            Some(&xdg),
            flag.clone(),
        ),
        (
            "KILN_HOME",
            None,
            Some(&kiln_home),
            Some(&xdg),
            kiln_home.clone(),
        ),
        ("XDG_STATE_HOME", None, None, Some(&xdg), xdg.join("kiln")),
        ("HOME", None, None, None, home.join(".local/state/kiln")),
    ];
    for (what, state_dir, kiln_home, xdg, expected) in cases {
        let mut cmd = ws.kiln();
        cmd.env("HOME", &home)
            .env_remove("KILN_HOME")
            .env_remove("XDG_STATE_HOME");
        if let Some(dir) = state_dir {
            cmd.arg("--state-dir").arg(dir);
        }
        if let Some(dir) = kiln_home {
            cmd.env("KILN_HOME", dir);
        }
        if let Some(dir) = xdg {
            cmd.env("XDG_STATE_HOME", dir);
        }
        let out = cmd.args(["up", "one.toml"]).output().unwrap();
        assert!(
            out.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let log = expected.join("runs/one/logs/say.log");
        let text = std::fs::read_to_string(&log)
            .unwrap_or_else(|e| panic!("{what}: {}: {e}", log.display()));
        assert!(text.contains("said by one"), "{what}: {text}");
        std::fs::remove_dir_all(&expected).unwrap();
    }
    // No run wrote anywhere else: every state directory it could have used is gone again.
    for dir in [
        &flag,
        &kiln_home,
        &xdg.join("kiln"),
        &home.join(".local/state/kiln"),
    ] {
        assert!(
            !dir.exists(),
            "{} written by a run that was not its",
            dir.display()
        );
    }
}
