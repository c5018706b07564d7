//! Against a real CPU LLM server: llama.cpp's llama-server from recipes/tiny-cpu.toml, built once
//! into `$KILN_TEST_CACHE/tiny-cpu` (demo_build.rs).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::Workspace;
use crate::serve::free_port;

pub(crate) use crate::demo_build::tiny_cpu;

fn recipe_path() -> String {
    format!("{}/recipes/tiny-cpu.toml", env!("CARGO_MANIFEST_DIR"))
}

fn sets(prefix: &std::path::Path, port: u16) -> Vec<String> {
    vec![
        "--set".into(),
        format!("prefix={}", prefix.display()),
        "--set".into(),
        format!("port={port}"),
    ]
}

#[test]
fn tiny_cpu_serve_bench_parity_and_baseline_gate() {
    let prefix = tiny_cpu();
    let ws = Workspace::new();
    let port = free_port();
    let out = ws
        .kiln()
        .args(["serve", &recipe_path(), "--profile", "baseline", "--detach"])
        .args(sets(&prefix, port))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.code().is_some_and(|c| c <= 1), "{err}\n{text}");
    assert!(
        err.contains("ready: a real generation returned 8 tokens"),
        "{err}"
    );
    assert!(
        text.contains("threads                      active: `1` confirmed by the log"),
        "{text}"
    );
    let url = format!("http://127.0.0.1:{port}");
    let bench = |extra: &[&str]| {
        ws.kiln()
            .args([
                "bench",
                "--url",
                &url,
                "--api",
                "openai",
                "--max-tokens",
                "256",
                "--runs",
                "3",
                "--warmup",
                "1",
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = bench(&["--json"]);
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = crate::reporter::json_event(&String::from_utf8_lossy(&out.stdout), "bench")
        ["report"]
        .clone();
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    let mut ratios = Vec::new();
    for r in runs {
        assert_eq!(r["tokens"], 256);
        assert!(r["prompt_tokens"].as_u64().unwrap() > 5);
        assert!(r["ttft_s"].as_f64().unwrap() > 0.0);
        ratios
            .push(r["decode_tok_s"].as_f64().unwrap() / r["server_decode_tok_s"].as_f64().unwrap());
    }
    ratios.sort_by(f64::total_cmp);
    eprintln!("kiln decode tok/s / llama.cpp predicted_per_second per run: {ratios:?}");
    // Within 2 %: kiln times the decode from the first token's arrival to the last's, the server
    // inside its own loop; on a loaded 2-core box the arrivals jitter (median 0.9885 seen with a
    // test run and a mutation run beside it, session 18). This catches gross errors of the rate
    // (a wrong unit, the wrong window); the token counts are exact above.
    assert!((ratios[1] - 1.0).abs() < 0.02, "median ratio {ratios:?}");
    for k in ["median", "mean", "min", "max", "cv"] {
        assert!(
            report["decode_tok_s"][k].is_number() && report["e2e_tok_s"][k].is_number(),
            "{k}"
        );
    }
    assert!(
        report["fingerprint"]["server"]
            .as_str()
            .unwrap()
            .starts_with("llama.cpp "),
        "{report}"
    );
    assert_eq!(report["fingerprint"]["model"], "tiny-random-llama");
    let history = std::fs::read_to_string(ws.state().join("bench/history.jsonl")).unwrap();
    assert_eq!(history.lines().count(), 1);

    // The gate, both ways: against itself (the JSON lines `bench --json` wrote) it passes;
    // against a record a thousand times as fast (the single document earlier kilns wrote) it fails.
    let base = ws.write("base.json", &String::from_utf8_lossy(&out.stdout));
    let out = bench(&["--baseline", base.to_str().unwrap(), "--plot", "runs.svg"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Run 1/3: 256 tokens in ") && text.contains("(prompt: "),
        "{text}"
    );
    let gate_line = text
        .lines()
        .find(|l| l.starts_with("baseline: median decode tok/s"))
        .unwrap_or_default();
    let ratio: f64 = gate_line
        .split(" = ")
        .nth(1)
        .and_then(|r| r.split('x').next())
        .and_then(|r| r.parse().ok())
        .unwrap();
    // Against its own record the ratio is near 1, but a loaded box can dip under the gate: either
    // way the verdict and the exit code must be the ones the measured ratio calls for (and no
    // other error, such as writing the plot, may hide behind them).
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("error: cannot"), "{err}");
    if ratio >= 0.9 {
        assert!(gate_line.ends_with(": pass"), "ratio {ratio}: {text}");
        assert!(
            out.status.code().is_some_and(|c| c <= 1),
            "ratio {ratio}: {text}"
        );
    } else {
        assert!(gate_line.ends_with(": FAIL"), "ratio {ratio}: {text}");
        assert_eq!(out.status.code(), Some(2), "ratio {ratio}: {text}");
    }
    assert!(std::fs::read_to_string(ws.path().join("runs.svg"))
        .unwrap()
        .contains("baseline median"));
    // A baseline a thousand times faster than this server measured: no noise crosses that
    // (twice as fast did not hold: under two busy loops one bench ran 3.6x faster than the one
    // before it).
    let mut faster: serde_json::Value = report.clone();
    for s in ["median", "mean", "min", "max"] {
        faster["decode_tok_s"][s] = (faster["decode_tok_s"][s].as_f64().unwrap() * 1000.0).into();
    }
    let fast = ws.write("fast.json", &faster.to_string());
    let out = bench(&["--baseline", fast.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("(gate 0.90x): FAIL"), "{text}");

    let record: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(ws.state().join("serve/tiny-cpu.json")).unwrap(),
    )
    .unwrap();
    let pid = record["pid"].as_u64().unwrap() as i32;
    ws.kiln()
        .args(["serve", &recipe_path(), "--stop"])
        .args(sets(&prefix, port))
        .assert()
        .success();
    assert!(!alive(pid), "server pid {pid} survived --stop");
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.rsplit_once(')').unwrap().1.trim_start().starts_with('Z'))
}

fn group_members(pgid: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                let f: Vec<&str> = s.rsplit_once(')').unwrap().1.split_whitespace().collect();
                f[0] != "Z" && f[2] == pgid.to_string()
            })
        })
        .collect()
}

#[test]
fn ctrl_c_ends_the_whole_process_group() {
    let prefix = tiny_cpu();
    let ws = Workspace::new();
    let port = free_port();
    // The server runs under a shell that also leaves a background grandchild: both must go.
    let model = prefix.join("model/tiny.gguf");
    ws.write(
        "r.toml",
        &format!(
            "[recipe]\nname = \"cc\"\n[profile.s]\ncmd = [\"sh\", \"-c\", \"sleep 300 & exec \\\"$0\\\" \\\"$@\\\"\", {:?}]\n\
             args = [\"-m\", {:?}, \"--host\", \"127.0.0.1\", \"--port\", \"{port}\", \"-t\", \"1\"]\nport = \"{port}\"\nsignatures = \"llama-server\"\n",
            prefix.join("bin/llama-server").display().to_string(),
            model.display().to_string()
        ),
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["serve", "r.toml"])
        .current_dir(ws.path())
        .env("KILN_HOME", ws.state())
        .env("KILN_NO_PROGRESS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let until = Instant::now() + Duration::from_secs(120);
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| l.contains("Ctrl-C stops it")) {
        assert!(
            Instant::now() < until,
            "kiln serve never became ready: {seen:?}"
        );
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
            seen.push(l);
        }
    }
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ws.state().join("serve/cc.json")).unwrap())
            .unwrap();
    let pgid = record["pid"].as_u64().unwrap() as i32;
    assert!(
        group_members(pgid).len() >= 2,
        "server + background sleep expected"
    );
    // SAFETY: a plain kill(2) of the kiln child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert!(
        status.code().is_some_and(|c| c <= 1),
        "kiln must exit normally after Ctrl-C: {status:?}"
    );
    assert_eq!(
        group_members(pgid),
        Vec::<i32>::new(),
        "orphans left in process group {pgid}"
    );
    assert!(!ws.state().join("serve/cc.json").exists());
}

#[test]
fn missing_model_is_classified_from_real_llama_server_output() {
    let prefix = tiny_cpu();
    let ws = Workspace::new();
    let port = free_port();
    // A file llama-server cannot load (a path that does not exist is refused before the launch
    // by the launch preflight: launch_preflight.rs), so the classification reads its real output.
    ws.write("model.gguf", "not a GGUF file\n");
    let model = ws.path().join("model.gguf");
    ws.write(
        "r.toml",
        &format!(
            "[recipe]\nname = \"mm\"\n[profile.s]\ncmd = [{:?}]\nargs = [\"-m\", {:?}, \"--port\", \"{port}\"]\nport = \"{port}\"\nsignatures = \"llama-server\"\n",
            prefix.join("bin/llama-server").display().to_string(),
            model.display().to_string()
        ),
    );
    let out = ws.kiln().args(["serve", "r.toml"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("[missing-model]") && err.contains("hint: check the -m path"),
        "{err}"
    );
}
