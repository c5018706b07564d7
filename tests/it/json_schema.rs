//! One schema over every command's `--json`, run for real on cheap inputs: every line is a JSON
//! object with an `event` name the table below knows, the first carries `schema`, each event's
//! fields have their types (numbers are numbers, flags are booleans), a field named like a
//! number (`*_ms`, `*_s`, `exit_code`, `pid`, ...) is a number at any depth, and only `note`,
//! `warning` and `error` are prose. A command is one line of `COMMANDS`; an event is one line of
//! `EVENTS` (an event the table does not know fails the test, so a new one gets a schema).

use serde_json::Value;

use crate::common::Workspace;
use crate::sglang_wire::Server;

/// (what, the arguments; `{url}` is the loopback SGLang stand-in's URL).
const COMMANDS: &[(&str, &[&str])] = &[
    ("doctor", &["doctor", "--json"]),
    (
        "doctor, a bad check id",
        &["doctor", "driver.flor", "--json"],
    ),
    ("plan", &["plan", "r.toml", "--json"]),
    ("up --dry-run", &["up", "r.toml", "--dry-run", "--json"]),
    ("up", &["up", "r.toml", "--json"]),
    ("up, a failing step", &["up", "fails.toml", "--json"]),
    (
        "serve --log",
        &["serve", "served.toml", "--log", "server.log", "--json"],
    ),
    (
        "serve --stop",
        &["serve", "served.toml", "--stop", "--json"],
    ),
    ("verify, no profile", &["verify", "r.toml", "--json"]),
    (
        "bench",
        &[
            "bench",
            "--url",
            "{url}",
            "--api",
            "sglang",
            "--max-tokens",
            "16",
            "--runs",
            "2",
            "--warmup",
            "0",
            "--json",
        ],
    ),
    (
        "patch check",
        &[
            "patch",
            "check",
            "demo-set.toml",
            "--site-packages",
            "site",
            "--json",
        ],
    ),
    ("cache ls", &["cache", "ls", "--json"]),
    (
        "tune --dry-run",
        &[
            "tune",
            "tiny-cpu",
            "--profile",
            "tuned",
            "--vary",
            "threads_tuned=1,2",
            "--dry-run",
            "--json",
        ],
    ),
    (
        "image dockerfile",
        &[
            "image",
            "dockerfile",
            "tiny-cpu",
            "--profile",
            "tuned",
            "--json",
        ],
    ),
];

/// The JSON types a field may have.
#[derive(Clone, Copy)]
enum Ty {
    Str,
    Num,
    Bool,
    Arr,
    Obj,
    /// The type, or null.
    Opt(&'static Ty),
}

const OPT_STR: Ty = Ty::Opt(&Ty::Str);
const OPT_NUM: Ty = Ty::Opt(&Ty::Num);

/// (event, its required fields and their types). Result events list the fields a reader of
/// that event relies on; the number rule below covers the rest.
const EVENTS: &[(&str, &[(&str, Ty)])] = &[
    ("note", &[("text", Ty::Str)]),
    ("warning", &[("text", Ty::Str)]),
    (
        "error",
        &[
            ("message", Ty::Str),
            ("causes", Ty::Arr),
            ("hint", OPT_STR),
            ("exit_code", Ty::Num),
        ],
    ),
    ("outcome", &[("ok", Ty::Bool), ("exit_code", Ty::Num)]),
    (
        "run_started",
        &[("recipe", Ty::Str), ("to_run", Ty::Num), ("total", Ty::Num)],
    ),
    (
        "step_started",
        &[("step", Ty::Str), ("kind", Ty::Str), ("attempt", Ty::Num)],
    ),
    (
        "step_finished",
        &[
            ("step", Ty::Str),
            ("outcome", Ty::Str),
            ("elapsed_ms", Ty::Num),
        ],
    ),
    ("run_finished", &[("ok", Ty::Bool), ("elapsed_ms", Ty::Num)]),
    ("plan", &[("recipe", Ty::Str), ("steps", Ty::Arr)]),
    ("doctor", &[("checks", Ty::Arr), ("facts", Ty::Obj)]),
    (
        "verdicts",
        &[
            ("profile", Ty::Str),
            ("log", Ty::Str),
            ("verdicts", Ty::Arr),
        ],
    ),
    (
        "stopped",
        &[("recipe", Ty::Str), ("stopped", Ty::Str), ("pid", OPT_NUM)],
    ),
    (
        "bench_run",
        &[
            ("run", Ty::Num),
            ("of", Ty::Num),
            ("tokens", Ty::Num),
            ("seconds", Ty::Num),
            ("e2e_tok_s", Ty::Num),
            ("ttft_ms", Ty::Num),
            ("decode_tok_s", OPT_NUM),
        ],
    ),
    ("bench", &[("report", Ty::Obj), ("history", Ty::Str)]),
    (
        "patch",
        &[
            ("action", Ty::Str),
            ("effective", Ty::Bool),
            ("patches", Ty::Arr),
        ],
    ),
    ("cache", &[("entries", Ty::Arr), ("root", Ty::Str)]),
    (
        "tune_plan",
        &[
            ("launches", Ty::Num),
            ("variants", Ty::Arr),
            ("estimated_wall_s", OPT_NUM),
        ],
    ),
    (
        "dockerfile",
        &[
            ("recipe", Ty::Str),
            ("profile", Ty::Str),
            ("text", Ty::Str),
            ("output", OPT_STR),
        ],
    ),
];

/// Fields named like these hold numbers (or null), at any depth of any event.
fn numeric_name(key: &str) -> bool {
    [
        "_ms", "_s", "_tok_s", "_bytes", "_tokens", "_ct", "_ratio", "_count",
    ]
    .iter()
    .any(|suffix| key.ends_with(suffix))
        || [
            "exit_code",
            "pid",
            "port",
            "tokens",
            "done",
            "total",
            "to_run",
            "attempt",
            "launches",
            "size",
            "run",
            "of",
            "median",
            "mean",
            "min",
            "max",
            "cv",
        ]
        .contains(&key)
}

fn has_type(v: &Value, ty: Ty) -> bool {
    match ty {
        Ty::Str => v.is_string(),
        Ty::Num => v.is_number(),
        Ty::Bool => v.is_boolean(),
        Ty::Arr => v.is_array(),
        Ty::Obj => v.is_object(),
        Ty::Opt(t) => v.is_null() || has_type(v, *t),
    }
}

/// Every place under `v` where a number-named field is not a number: `path: value`.
fn misnumbered(v: &Value, path: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let at = format!("{path}.{k}");
                if numeric_name(k) && !(x.is_number() || x.is_null() || x.is_object()) {
                    out.push(format!("{at}: {x}"));
                }
                misnumbered(x, &at, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                misnumbered(x, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// What is wrong with one command's stdout against the schema (empty: nothing).
fn problems(stdout: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut first = true;
    if stdout.trim().is_empty() {
        out.push("no JSON lines at all".to_string());
    }
    for line in stdout.lines() {
        let Ok(Value::Object(e)) = serde_json::from_str::<Value>(line) else {
            out.push(format!("not a JSON object: {line}"));
            continue;
        };
        if first != e.get("schema").is_some_and(|s| s == 1) {
            out.push(format!("`schema` belongs on the first event only: {line}"));
        }
        first = false;
        let Some(name) = e.get("event").and_then(Value::as_str) else {
            out.push(format!("no `event` name: {line}"));
            continue;
        };
        let Some((_, fields)) = EVENTS.iter().find(|(n, _)| *n == name) else {
            out.push(format!(
                "event `{name}` has no schema here (add it to EVENTS): {line}"
            ));
            continue;
        };
        for (field, ty) in *fields {
            if !e.get(*field).is_some_and(|v| has_type(v, *ty)) {
                out.push(format!("`{name}`.{field} missing or mistyped: {line}"));
            }
        }
        let own: Vec<&String> = e
            .keys()
            .filter(|k| *k != "event" && *k != "schema")
            .collect();
        let prose = ["text", "message", "line", "summary"];
        if !["note", "warning", "error"].contains(&name)
            && !own.is_empty()
            && own.iter().all(|k| prose.contains(&k.as_str()))
        {
            out.push(format!(
                "`{name}` is prose only (a note or a warning?): {line}"
            ));
        }
        let mut wrong = Vec::new();
        misnumbered(&Value::Object(e.clone()), name, &mut wrong);
        out.extend(wrong.into_iter().map(|w| format!("not a number: {w}")));
    }
    if stdout
        .lines()
        .last()
        .is_some_and(|l| !l.contains("\"event\":\"outcome\""))
    {
        out.push("the last event is not `outcome`".to_string());
    }
    out
}

/// The cheap inputs the commands read.
fn workspace() -> Workspace {
    let ws = Workspace::new();
    let step = |id: &str, cmd: &str| {
        format!("[[step]]\nid = \"{id}\"\nkind = \"run\"\ncmd = [\"sh\", \"-c\", '{cmd}']\n\n")
    };
    ws.write(
        "r.toml",
        &format!("[recipe]\nname = \"voice\"\n\n{}", step("one", "true")),
    );
    ws.write(
        "fails.toml",
        &format!("[recipe]\nname = \"fails\"\n\n{}", step("bad", "exit 3")),
    );
    ws.write(
        "served.toml",
        "[recipe]\nname = \"served\"\n\n[profile.p]\ncmd = [\"true\"]\nsignatures = \"llama-server\"\n",
    );
    ws.write(
        "server.log",
        "0.00.100.000 I srv  llama_server: listening on http://127.0.0.1\n",
    );
    ws.write(
        "site/demo-1.0.dist-info/METADATA",
        "Name: demo\nVersion: 1.0\n",
    );
    ws.write("site/m.py", "a\n");
    ws.write(
        "demo-set.toml",
        "[patchset]\nname = \"demo-set\"\npackage = \"demo\"\nversions = \">=1.0\"\n\n[[patch]]\nid = \"P1\"\nfile = \"m.py\"\nrationale = \"r\"\nedits = [{ op = \"diff\", diff = \"@@ -1 +1 @@\\n-a\\n+b\\n\" }]\n",
    );
    ws
}

#[test]
fn every_commands_json_follows_one_schema() {
    let ws = workspace();
    let server = Server::start(&[]);
    let mut failures = Vec::new();
    for (what, args) in COMMANDS {
        let args: Vec<String> = args
            .iter()
            .map(|a| a.replace("{url}", &server.url))
            .collect();
        let out = ws.kiln().args(&args).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        for p in problems(&stdout) {
            failures.push(format!("kiln {} ({what}): {p}", args.join(" ")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The rules themselves: each catches what it is for.
#[test]
fn the_schema_catches_strings_for_numbers_unknown_events_and_prose() {
    let ok = "{\"schema\":1,\"event\":\"run_started\",\"recipe\":\"r\",\"to_run\":1,\"total\":2}\n{\"event\":\"outcome\",\"ok\":true,\"exit_code\":0}\n";
    assert_eq!(problems(ok), Vec::<String>::new());
    let cases = [
        (ok.replace("\"total\":2", "\"total\":\"2\""), "run_started`.total"),
        (ok.replace("{\"schema\":1,", "{"), "`schema` belongs on the first event only"),
        (ok.replace("\"run_started\"", "\"run_begun\""), "event `run_begun` has no schema"),
        (
            ok.replace("\"ok\":true,\"exit_code\":0", "\"ok\":true,\"exit_code\":0,\"extra\":{\"elapsed_ms\":\"5\"}"),
            "not a number: outcome.extra.elapsed_ms",
        ),
        (
            "{\"schema\":1,\"event\":\"stopped\",\"text\":\"stopped it\"}\n{\"event\":\"outcome\",\"ok\":true,\"exit_code\":0}\n".to_string(),
            "`stopped` is prose only",
        ),
        (ok.lines().next().unwrap().to_string(), "the last event is not `outcome`"),
    ];
    for (text, expected) in cases {
        let found = problems(&text);
        assert!(
            found.iter().any(|p| p.contains(expected)),
            "{expected}: {found:?}"
        );
    }
}
