//! `kiln completions` and `kiln man`: the bash script loads in a real bash and completes
//! subcommands; zsh and fish scripts name every command; the man page has the roff structure man
//! needs and renders with the real `man -l` (man-db).

use std::process::Command;

use crate::common::Workspace;

fn stdout(ws: &Workspace, args: &[&str]) -> String {
    let out = ws.kiln().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn bash_completion_loads_and_completes_subcommands_and_flags() {
    let ws = Workspace::new();
    let script = ws.write("kiln.bash", &stdout(&ws, &["completions", "bash"]));
    // Load the script in a real bash, then ask its completion function what `kiln u<TAB>` and
    // `kiln up --str<TAB>` offer.
    let probe = format!(
        "source {}\ncomplete -p kiln\n\
         COMP_WORDS=(kiln u); COMP_CWORD=1; COMP_LINE='kiln u'; COMP_POINT=6; _kiln kiln u kiln\n\
         echo \"words: ${{COMPREPLY[*]}}\"\n\
         COMP_WORDS=(kiln up --str); COMP_CWORD=2; COMP_LINE='kiln up --str'; COMP_POINT=13; _kiln kiln --str up\n\
         echo \"flags: ${{COMPREPLY[*]}}\"",
        script.display()
    );
    let out = Command::new("bash").arg("-c").arg(&probe).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains(" -F _kiln kiln"), "{text}");
    assert!(text.contains("words: up"), "{text}");
    assert!(text.contains("flags: --strict"), "{text}");
}

#[test]
fn zsh_and_fish_scripts_name_every_command() {
    let ws = Workspace::new();
    let zsh = stdout(&ws, &["completions", "zsh"]);
    let fish = stdout(&ws, &["completions", "fish"]);
    assert!(zsh.starts_with("#compdef kiln"), "{zsh}");
    for cmd in [
        "up",
        "plan",
        "doctor",
        "serve",
        "bench",
        "verify",
        "cache",
        "completions",
        "man",
    ] {
        assert!(zsh.contains(&format!("'{cmd}:")), "zsh lacks {cmd}");
        assert!(fish.contains(&format!("-a \"{cmd}\"")), "fish lacks {cmd}");
    }
}

#[test]
fn man_pages_render() {
    let ws = Workspace::new();
    let main = stdout(&ws, &["man"]);
    let up = stdout(&ws, &["man", "up"]);
    for (page, title) in [(&main, ".TH kiln 1"), (&up, ".TH kiln-up 1")] {
        assert!(page.contains(title), "{page}");
        for section in [".SH NAME", ".SH SYNOPSIS", ".SH DESCRIPTION", ".SH OPTIONS"] {
            assert!(page.contains(section), "{section} missing:\n{page}");
        }
    }
    assert!(
        main.contains(".SH COMMANDS") && main.contains("\\fBkiln man up\\fR"),
        "{main}"
    );
    assert!(up.contains("\\-\\-strict"), "{up}");
    // Rendered for real by Debian's man-db (`man -l FILE`; bash .ci/install-deps installs it).
    let file = ws.write("kiln-up.1", &up);
    let out = Command::new("man")
        .args(["-l", "-P", "cat"])
        .arg(&file)
        .env("MANWIDTH", "100")
        .output()
        .expect("man runs (apt-get install man-db, or bash .ci/install-deps)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("NAME") && text.contains("--strict"), "{text}");
    assert!(
        !text.contains(".SH") && !text.contains("\\-"),
        "rendered, not raw roff: {text}"
    );
    let err = ws.kiln().args(["man", "upp"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&err.stderr);
    assert_eq!(err.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("error: no command `upp`") && stderr.contains("did you mean `up`?"),
        "{stderr}"
    );
}

/// Where no `man` is on PATH, `kiln man` prints the page as text a person reads: headings, the
/// options and their help, no roff requests or escapes; `--text` asks for the same where `man` is.
#[test]
fn man_without_man_on_path_is_plain_text() {
    let ws = Workspace::new();
    let bare = ws.path().join("no-man-bin");
    std::fs::create_dir_all(&bare).unwrap();
    let out = ws
        .kiln()
        .args(["man", "up"])
        .env("PATH", &bare)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.starts_with("KILN-UP(1)\n\nNAME\n       kiln-up - "),
        "{text}"
    );
    assert!(
        text.contains("\nOPTIONS\n")
            && text.contains("\n       --strict\n              Fail (exit 1)"),
        "{text}"
    );
    assert!(
        text.contains("\nEXIT STATUS\n") && text.contains("\nEXAMPLES\n"),
        "{text}"
    );
    for roff in ["\\f", "\\-", "\\(", "\n.TP", "\n.SH", ".TH "] {
        assert!(!text.contains(roff), "raw roff {roff:?} left in:\n{text}");
    }
    let asked = ws.kiln().args(["man", "up", "--text"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&asked.stdout), text);
}
