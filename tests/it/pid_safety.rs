//! kiln signals only processes it started: hostile and stale pids in `serve/<recipe>.json` and
//! in the watchdog's `running/<pid>` registries are refused, reported and removed.
//!
//! Every case runs inside a fresh pid namespace (`unshare --pid --fork --mount-proc`, as root),
//! so that a regression (`kill(-1)`, kiln's own group) can only hit the namespace's own
//! processes. Without `unshare` the tests fail; `KILN_TEST_SKIP_PIDNS=1` skips them on purpose.

use std::os::unix::process::CommandExt;

use crate::common::Workspace;

const RECIPE: &str =
    "[recipe]\nname = \"hostile\"\n\n[[step]]\nid = \"x\"\nkind = \"run\"\ncmd = [\"true\"]\n";

/// The script every case runs as the namespace's pid 1: two bystanders, one leading its own
/// group (`$BY`) and one in kiln's group (`$MATE`); `$SETUP` writes the hostile record (with
/// `$BY`, `$TICKS` (its start time), `$BOOT` in scope); then kiln runs and each bystander
/// reports whether it survived.
const SCRIPT: &str = r#"
setsid sleep 307 </dev/null >/dev/null 2>&1 &
BY=$!
sleep 306 </dev/null >/dev/null 2>&1 &
MATE=$!
sleep 0.3
TICKS=$(cut -d' ' -f22 /proc/$BY/stat)
BOOT=$(cat /proc/sys/kernel/random/boot_id)
eval "$SETUP"
"$KILN" "$@"
echo "kiln exit $?"
sleep 0.5
alive() { s=$(cut -d' ' -f3 /proc/$1/stat 2>/dev/null); [ -n "$s" ] && [ "$s" != Z ]; }
alive $BY && echo "bystander alive" || echo "bystander dead"
alive $MATE && echo "groupmate alive" || echo "groupmate dead"
kill -9 $BY $MATE 2>/dev/null
exit 0
"#;

/// Run `kiln ARGS` inside a new pid namespace after `setup` (shell text); the script's output
/// and kiln's stderr. `None` only when skipped on purpose.
fn in_pid_namespace(ws: &Workspace, setup: &str, args: &[&str]) -> Option<String> {
    if std::env::var_os("KILN_TEST_SKIP_PIDNS").is_some_and(|v| v == "1") {
        eprintln!("KILN_TEST_SKIP_PIDNS=1: pid-namespace test skipped on request");
        return None;
    }
    // `setsid`: the namespace's pid 1 leads a session and group of its own, so that even
    // `kill(0)` from kiln reaches no process outside the namespace (the test's own group).
    let out = std::process::Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--mount-proc",
            "setsid",
            "sh",
            "-c",
            SCRIPT,
            "sh",
        ])
        .process_group(0)
        .args(args)
        .current_dir(ws.path())
        .env("KILN", assert_cmd::cargo::cargo_bin("kiln"))
        .env("KILN_HOME", ws.state())
        .env("STATE", ws.state())
        .env("KILN_NO_PROGRESS", "1")
        .env("SETUP", setup)
        .env_remove("XDG_STATE_HOME")
        .output()
        .expect("unshare runs (util-linux); set KILN_TEST_SKIP_PIDNS=1 to skip on purpose");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("kiln exit"),
        "cannot run kiln in a pid namespace (needs root and `unshare --pid`; \
         KILN_TEST_SKIP_PIDNS=1 skips on purpose):\n{text}"
    );
    Some(text)
}

/// A serve record for `pid`, with `identity` (JSON) when given.
fn record(pid: &str, identity: Option<&str>) -> String {
    let identity = identity.map_or(String::new(), |i| format!(",\\\"identity\\\":{i}"));
    format!(
        "mkdir -p \"$STATE/serve\"; printf '%s' \"{{\\\"recipe\\\":\\\"hostile\\\",\\\"profile\\\":\\\"s\\\",\\\"pid\\\":{pid},\\\"url\\\":null,\\\"api\\\":\\\"openai\\\",\\\"log\\\":\\\"/nonexistent\\\",\\\"started_unix\\\":0{identity}}}\" > \"$STATE/serve/hostile.json\""
    )
}

fn identity(pid: &str, ticks: &str, boot: &str) -> String {
    format!("{{\\\"pid\\\":{pid},\\\"start_ticks\\\":{ticks},\\\"boot_id\\\":\\\"{boot}\\\",\\\"exe\\\":\\\"/bin/sleep\\\"}}")
}

#[test]
fn serve_stop_signals_only_the_process_it_recorded() {
    let cases: [(&str, String, &str); 6] = [
        (
            "pid 1",
            record("1", Some(&identity("1", "$TICKS", "$BOOT"))),
            "pid 1 is never signalled",
        ),
        (
            "pid 0",
            record("0", Some(&identity("0", "$TICKS", "$BOOT"))),
            "pid 0 is never signalled",
        ),
        (
            "reused id",
            record("$BY", Some(&identity("$BY", "$((TICKS - 1))", "$BOOT"))),
            "now belongs to another process",
        ),
        (
            "stale after a reboot",
            record(
                "$BY",
                Some(&identity(
                    "$BY",
                    "$TICKS",
                    "00000000-0000-0000-0000-000000000000",
                )),
            ),
            "recorded before the machine restarted",
        ),
        (
            "no identity (an older kiln's record)",
            record("$BY", None),
            "has no start time",
        ),
        (
            "pid 1 without identity",
            record("1", None),
            "pid 1 is never signalled",
        ),
    ];
    for (case, setup, why) in cases {
        let ws = Workspace::new();
        ws.write("r.toml", RECIPE);
        let Some(out) = in_pid_namespace(&ws, &setup, &["serve", "r.toml", "--stop"]) else {
            return;
        };
        assert!(
            out.contains("bystander alive") && out.contains("groupmate alive"),
            "{case}: a process kiln did not start was signalled:\n{out}"
        );
        assert!(
            out.contains("kiln exit 0") && out.contains("is stale: ") && out.contains(why),
            "{case}: the refusal is not reported:\n{out}"
        );
        assert!(
            out.contains("nothing was signalled and the record was removed"),
            "{case}:\n{out}"
        );
        assert!(
            !ws.state().join("serve/hostile.json").exists(),
            "{case}: the stale record was kept"
        );
    }

    // The record of the very process, as kiln writes it: that group, and only it, is ended.
    let ws = Workspace::new();
    ws.write("r.toml", RECIPE);
    let exact = record("$BY", Some(&identity("$BY", "$TICKS", "$BOOT")));
    let Some(out) = in_pid_namespace(&ws, &exact, &["serve", "r.toml", "--stop"]) else {
        return;
    };
    assert!(
        out.contains("stopped profile `s` of hostile")
            && out.contains("bystander dead")
            && out.contains("groupmate alive"),
        "{out}"
    );
}

#[test]
fn the_leftover_sweep_ends_only_groups_whose_leader_is_unchanged() {
    // Hostile lines in an earlier run's registry: group 1 (`kill(-1)`), group 0 (kiln's own), a
    // reused id, a line from before a reboot and an older kiln's line without a start time.
    let setups = [
        (
            "hostile lines",
            "mkdir -p \"$STATE/running\"; printf 'boot %s\\n+1 5\\n+0 5\\n+%s %s\\n' \"$BOOT\" \"$BY\" \"$((TICKS - 1))\" > \"$STATE/running/999999\"",
        ),
        (
            "another boot",
            "mkdir -p \"$STATE/running\"; printf 'boot 00000000-0000-0000-0000-000000000000\\n+%s %s\\n' \"$BY\" \"$TICKS\" > \"$STATE/running/999999\"",
        ),
        (
            "older format",
            "mkdir -p \"$STATE/running\"; printf '+%s\\n+1\\n+0\\n' \"$BY\" > \"$STATE/running/999999\"",
        ),
    ];
    for (case, setup) in setups {
        let ws = Workspace::new();
        ws.write("r.toml", RECIPE);
        let Some(out) = in_pid_namespace(&ws, setup, &["up", "r.toml"]) else {
            return;
        };
        assert!(
            out.contains("bystander alive") && out.contains("groupmate alive"),
            "{case}: a process kiln did not start was signalled:\n{out}"
        );
        assert!(
            out.contains("kiln exit 0") && out.contains("stale process record removed"),
            "{case}: not reported:\n{out}"
        );
        assert!(
            !ws.state().join("running/999999").exists(),
            "{case}: the stale registry was kept"
        );
    }
    // The line kiln writes for a group it started, whose leader still runs: that group ends.
    let ws = Workspace::new();
    ws.write("r.toml", RECIPE);
    let exact = "mkdir -p \"$STATE/running\"; printf 'boot %s\\n+%s %s\\n' \"$BOOT\" \"$BY\" \"$TICKS\" > \"$STATE/running/999999\"";
    let Some(out) = in_pid_namespace(&ws, exact, &["up", "r.toml"]) else {
        return;
    };
    assert!(
        out.contains("bystander dead") && out.contains("groupmate alive"),
        "{out}"
    );
    assert!(!out.contains("stale process record"), "{out}");
}
