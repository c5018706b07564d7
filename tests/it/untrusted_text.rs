//! Text kiln did not write (a GPU name nvidia-smi reports, its error message) reaches the
//! terminal with its control characters escaped (issue #47): an escape sequence in a GPU name
//! cannot retitle, clear or recolour the user's terminal through `kiln doctor`, `plan` or `up`.

use std::path::Path;

use crate::common::Workspace;

/// A GPU name carrying a title change (OSC 0), a screen clear and a bell, and a `nvidia-smi *`
/// failure carrying the same: the two scenarios, under the workspace.
const HOSTILE: &str = "NVIDIA H200\u{1b}]0;owned\u{7}\u{1b}[2J";

fn scenarios(ws: &Workspace) -> (std::path::PathBuf, std::path::PathBuf) {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gpu");
    let query = std::fs::read_to_string(fixtures.join("derived-h200x1/nvidia-smi-query.txt"))
        .unwrap()
        .replace("NVIDIA H200", HOSTILE);
    let named = ws.write("smi-named/nvidia-smi-query.txt", &query);
    let failing = ws.write(
        "smi-failing/nvidia-smi-any.txt",
        &format!("$ nvidia-smi *\nNVML says {HOSTILE}\n[exit 9]\n"),
    );
    (
        named.parent().unwrap().to_path_buf(),
        failing.parent().unwrap().to_path_buf(),
    )
}

/// `kiln ARGS` with the fake nvidia-smi replaying `scenario`: its stdout and stderr together.
fn run(ws: &Workspace, scenario: &Path, args: &[&str]) -> String {
    let out = ws.kiln_on_gpu_host(scenario).args(args).output().unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn a_gpu_name_with_escape_sequences_reaches_the_terminal_escaped() {
    let ws = Workspace::new();
    let (named, failing) = scenarios(&ws);
    ws.write(
        "r.toml",
        "[recipe]\nname = \"r\"\ndescription = \"on ${host.gpu.name}\"\n\n[vars]\ngpu = \"${host.gpu.name}\"\n\n[[step]]\nid = \"say\"\nkind = \"run\"\ncmd = [\"echo\", \"${gpu}\"]\n",
    );
    for (scenario, args) in [
        (&named, &["doctor"][..]),
        (&named, &["doctor", "--json"]),
        (&failing, &["doctor"]),
        (&named, &["plan", "r.toml"]),
        (&named, &["up", "r.toml", "--dry-run"]),
    ] {
        let shown = run(&ws, scenario, args);
        assert!(
            !shown.contains('\u{1b}') && !shown.contains('\u{7}'),
            "kiln {args:?} wrote a control character:\n{shown:?}"
        );
        if args == ["doctor"] {
            assert!(
                shown.contains("\\u{1b}]0;owned\\u{7}\\u{1b}[2J"),
                "kiln {args:?} does not show the name escaped:\n{shown}"
            );
        }
    }
}

/// On a terminal a step's output line is the spinner's message: a step that prints a GPU name
/// (or anything) with a title-changing OSC sequence shows it escaped, never obeyed (#47). A
/// real pseudo-terminal (util-linux `script`), as in reporter.rs.
#[test]
fn a_step_output_line_on_a_terminal_is_escaped() {
    let ws = Workspace::new();
    ws.write(
        "r.toml",
        "[recipe]\nname = \"r\"\n\n[[step]]\nid = \"say\"\nkind = \"run\"\ncmd = [\"sh\", \"-c\", \"printf 'GPU \\\\033]0;owned\\\\007\\\\n'; sleep 1.5\"]\n",
    );
    let kiln = assert_cmd::cargo::cargo_bin("kiln");
    let out = std::process::Command::new("script")
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
    assert!(!text.contains("\u{1b}]0;owned"), "{text:?}");
    assert!(text.contains("GPU \\u{1b}]0;owned\\u{7}"), "{text:?}");
}
