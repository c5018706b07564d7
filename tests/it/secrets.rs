//! Secrets never leave in clear: canary secrets planted in every place a user puts one (recipe
//! variables and `--set` values with secret names, env entries, URL userinfo in a recipe, in
//! `--url` and in the environment, `*_KEY` variables) are searched for in everything kiln printed
//! and every file it wrote: stderr, stdout, `--json` events, step logs, report.json/md/html, the
//! serve log, the recipe cache and the doctor bundle.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::Workspace;
use crate::serve::free_port;

const CANARIES: &[&str] = &[
    "CANARY-SET-TOKEN-7c1a",
    "CANARY-SET-PASSWORD-2b9e",
    "CANARY-RECIPE-KEY-5d0f",
    "CANARY-URL-PASS-81aa",
    "CANARY-ENV-URL-PASS-44c3",
    "CANARY-ENV-API-KEY-90e2",
    "CANARY-CLI-URL-PASS-3f6b",
];

/// A recipe whose secrets all come from `--set`, with a step that uses and prints them and
/// fails, and a server profile that carries one in its arguments and exits at once.
const FROM_SET: &str = r#"[recipe]
name = "canary"

[vars]
hf_token = ""
db_password = ""

[env]
HF_TOKEN = "${hf_token}"

[[step]]
id = "leak"
kind = "run"
cmd = ["sh", "-c", "printf %s \"$HF_TOKEN\" | sha256sum > \"$0/seen\"; echo token=$HF_TOKEN pw=$1; exit 3", "${kiln.work_dir}", "${db_password}"]

[profile.p]
cmd = ["sh", "-c", "exit 1", "--api-key", "${hf_token}"]
env = { DB_PASSWORD = "${db_password}" }
port = "PORT"
"#;

/// A recipe holding secrets in its own text: a secret-named variable and a URL password.
const IN_RECIPE: &str = r#"[recipe]
name = "inline"

[vars]
service_key = "CANARY-RECIPE-KEY-5d0f"
mirror = "https://ci:CANARY-URL-PASS-81aa@pypi.example/simple"

[[step]]
id = "leak"
kind = "run"
cmd = ["sh", "-c", "echo key=$0 mirror=$1; exit 3", "${service_key}", "${mirror}"]
"#;

fn sets() -> Vec<&'static str> {
    vec![
        "--set",
        "hf_token=CANARY-SET-TOKEN-7c1a",
        "--set",
        "db_password=CANARY-SET-PASSWORD-2b9e",
    ]
}

fn hostile_env(cmd: &mut assert_cmd::Command) -> &mut assert_cmd::Command {
    cmd.env(
        "PIP_INDEX_URL",
        "https://ci:CANARY-ENV-URL-PASS-44c3@pypi.example/simple",
    )
    .env("OPENAI_API_KEY", "CANARY-ENV-API-KEY-90e2")
}

fn printed(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let ty = entry.file_type().unwrap();
        if ty.is_dir() {
            out.extend(files_under(&path));
        } else if ty.is_file() {
            out.push(path);
        }
    }
    out
}

fn assert_no_canary(what: &str, text: &str) {
    for canary in CANARIES {
        assert!(
            !text.contains(canary),
            "{canary} leaked into {what}:\n{text}"
        );
    }
}

#[test]
fn no_canary_secret_reaches_any_output_or_file() {
    let ws = Workspace::new();
    let port = free_port().to_string();
    ws.write("r.toml", &FROM_SET.replace("PORT", &port));
    ws.write("inline.toml", IN_RECIPE);
    let mut outputs = Vec::new();

    // A failing step, twice (the second load comes from the recipe cache), and with --json.
    for json in [false, false, true] {
        let mut cmd = ws.kiln();
        cmd.args(["up", "r.toml", "--no-serve", "--no-doctor"])
            .args(sets());
        if json {
            cmd.arg("--json");
        }
        let out = hostile_env(&mut cmd).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", printed(&out));
        let text = printed(&out);
        assert!(
            text.contains("token=***"),
            "the step's line is shown, redacted:\n{text}"
        );
        outputs.push(("kiln up r.toml", text));
    }
    // The cached recipe gave the step the real value back (it hashed what it saw).
    let seen = files_under(&ws.state())
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n == "seen"))
        .expect("the step wrote what it saw");
    let seen = std::fs::read_to_string(seen).unwrap();
    assert!(
        seen.starts_with(&kiln::hash::sha256_bytes(b"CANARY-SET-TOKEN-7c1a")),
        "the step saw the --set value: {seen}"
    );
    let cached = files_under(&ws.state().join("recipe-cache"));
    assert!(
        cached
            .iter()
            .any(|p| std::fs::read_to_string(p).is_ok_and(|t| t.contains("@@kiln-secret:sha256:"))),
        "the recipe was cached, its secrets as digests: {cached:?}"
    );

    // Secrets written in the recipe itself.
    let out = hostile_env(
        ws.kiln()
            .args(["up", "inline.toml", "--no-serve", "--no-doctor"]),
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", printed(&out));
    outputs.push(("kiln up inline.toml", printed(&out)));
    let out = hostile_env(ws.kiln().args(["plan", "inline.toml"]))
        .output()
        .unwrap();
    outputs.push(("kiln plan inline.toml", printed(&out)));

    // A server whose arguments and env hold secrets, exiting at once.
    let out = hostile_env(
        ws.kiln()
            .args(["serve", "r.toml", "--profile", "p"])
            .args(sets()),
    )
    .output()
    .unwrap();
    assert_ne!(out.status.code(), Some(0), "{}", printed(&out));
    outputs.push(("kiln serve", printed(&out)));

    // A bench URL with userinfo, against a port nothing listens on.
    let url = format!(
        "http://bench:CANARY-CLI-URL-PASS-3f6b@127.0.0.1:{}",
        free_port()
    );
    let out = hostile_env(ws.kiln().args(["bench", "--url", &url, "--runs", "1"]))
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0), "{}", printed(&out));
    outputs.push(("kiln bench --url", printed(&out)));

    // The doctor bundle, from an environment holding a pip index password and an API key.
    let bundle = ws.path().join("bundle.tgz");
    let out = hostile_env(ws.kiln().arg("doctor").arg("--bundle").arg(&bundle))
        .output()
        .unwrap();
    outputs.push(("kiln doctor --bundle", printed(&out)));
    assert!(bundle.is_file(), "{}", printed(&out));
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&bundle).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the bundle is the user's alone");
    }
    let unpacked = ws.path().join("unpacked");
    std::fs::create_dir_all(&unpacked).unwrap();
    let status = std::process::Command::new("tar")
        .arg("xzf")
        .arg(&bundle)
        .arg("-C")
        .arg(&unpacked)
        .status()
        .unwrap();
    assert!(status.success());
    let env_txt = std::fs::read_to_string(unpacked.join("kiln-doctor/env.txt")).unwrap();
    assert!(
        env_txt.contains("PIP_INDEX_URL=https://***@pypi.example/simple"),
        "the index is kept, its credentials masked:\n{env_txt}"
    );
    assert!(!env_txt.contains("OPENAI_API_KEY"), "{env_txt}");

    for (what, text) in &outputs {
        assert_no_canary(what, text);
    }
    let mut written = files_under(&ws.state());
    written.extend(files_under(&unpacked));
    assert!(
        written.iter().any(|p| p.ends_with("report.json"))
            && written.iter().any(|p| p.ends_with("report.html"))
            && written
                .iter()
                .any(|p| p.extension().is_some_and(|e| e == "log")),
        "reports and logs were written: {written:?}"
    );
    for path in &written {
        let bytes = std::fs::read(path).unwrap();
        assert_no_canary(
            &path.display().to_string(),
            &String::from_utf8_lossy(&bytes),
        );
    }
}

#[test]
fn the_serve_record_is_private_and_keeps_no_secret_in_its_command_line() {
    let ws = Workspace::new();
    // A server that never answers: the record is written at start and read while kiln waits.
    ws.write(
        "r.toml",
        &format!(
            "[recipe]\nname = \"rec\"\n\n[vars]\nhf_token = \"\"\n\n[profile.p]\n\
             cmd = [\"sleep\", \"600\", \"--api-key\", \"${{hf_token}}\"]\n\
             url = \"http://127.0.0.1:{}\"\n",
            free_port()
        ),
    );
    let mut serve = std::process::Command::new(assert_cmd::cargo::cargo_bin("kiln"))
        .args([
            "serve",
            "r.toml",
            "--profile",
            "p",
            "--set",
            "hf_token=CANARY-SET-TOKEN-7c1a",
        ])
        .current_dir(ws.path())
        .env("KILN_HOME", ws.state())
        .env("KILN_NO_PROGRESS", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let record = ws.state().join("serve/rec.json");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !record.exists() {
        assert!(
            std::time::Instant::now() < until,
            "no serve record appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let text = std::fs::read_to_string(&record).unwrap();
    let mode = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(&record).unwrap().permissions().mode() & 0o777
    };
    let _ = serve.kill();
    serve.wait().unwrap();
    assert_no_canary("the serve record", &text);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["cmd"][3], "***", "{text}");
    assert_eq!(mode, 0o600, "the serve record is the user's alone");
}

#[test]
fn a_bench_urls_password_reaches_no_plot_report_or_history() {
    // A real llama-server (the tiny CPU model) behind a URL with userinfo.
    let prefix = crate::bench::tiny_cpu();
    let ws = Workspace::new();
    let port = free_port();
    let mut server = std::process::Command::new(prefix.join("bin/llama-server"))
        .arg("-m")
        .arg(prefix.join("model/tiny.gguf"))
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "-c",
            "512",
            "-t",
            "1",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ready = (0..600).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        std::net::TcpStream::connect(("127.0.0.1", port))
            .and_then(|mut s| {
                use std::io::{Read, Write};
                s.write_all(b"GET /health HTTP/1.0\r\n\r\n")?;
                let mut answer = String::new();
                s.read_to_string(&mut answer)?;
                Ok(answer.starts_with("HTTP/1.1 200"))
            })
            .unwrap_or(false)
    });
    assert!(ready, "llama-server did not come up");
    let secret = "CANARY-PLOT-PASS-9d2e";
    let url = format!("http://alice:{secret}@127.0.0.1:{port}");
    let plot = ws.path().join("p.svg");
    let out = ws
        .kiln()
        .args([
            "bench",
            "--url",
            &url,
            "--api",
            "openai",
            "--max-tokens",
            "8",
        ])
        .args(["--runs", "1", "--warmup", "0", "--plot"])
        .arg(&plot)
        .output()
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "{}",
        printed(&out)
    );
    let clean = |what: &str, text: &str| {
        assert!(
            !text.contains(secret),
            "the password leaked into {what}:\n{text}"
        );
    };
    clean("kiln bench", &printed(&out));
    let svg = std::fs::read_to_string(&plot).expect("the plot was written");
    assert!(
        svg.contains("127.0.0.1"),
        "the plot names the server:\n{svg}"
    );
    clean("the plot", &svg);
    let mut written = files_under(&ws.state());
    written.push(plot);
    for path in &written {
        let bytes = std::fs::read(path).unwrap();
        clean(
            &path.display().to_string(),
            &String::from_utf8_lossy(&bytes),
        );
    }
}
