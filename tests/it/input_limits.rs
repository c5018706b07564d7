//! Bounded recipe input (issue 11): deep `when` nesting, exponential `${}` expansion, imports of
//! devices, FIFOs, huge files, deep chains or files outside the recipe's tree all end in a located
//! error; a file that is not TOML never has a line echoed; bad bytes get a line:col.

use std::time::{Duration, Instant};

use crate::common::{scrub, Workspace};

fn plan(ws: &Workspace, recipe: &str) -> (Option<i32>, String) {
    let out = ws
        .kiln()
        .args(["plan", recipe])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    (
        out.status.code(),
        scrub(&String::from_utf8_lossy(&out.stderr), ws),
    )
}

const STEP: &str = "[[step]]\nid = \"a\"\nkind = \"run\"\ncmd = [\"true\"]\n";

#[test]
fn ten_thousand_nested_parentheses_are_a_located_error() {
    let ws = Workspace::new();
    let when = format!("{}os == 'linux'{}", "(".repeat(10_000), ")".repeat(10_000));
    ws.write("r.toml", &format!("{STEP}when = \"{when}\"\n"));
    let (code, err) = plan(&ws, "r.toml");
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("invalid `when` condition: the condition nests more than 64 levels deep"),
        "{err}"
    );
    // `when = "` is 8 columns; the 65th parenthesis is where it stops.
    assert!(err.contains("--> r.toml:5:73"), "{err}");
    assert!(err.contains("hint: "), "{err}");
}

#[test]
fn exponential_interpolation_stops_fast_with_a_located_error() {
    let ws = Workspace::new();
    let mut text = String::from("[vars]\nv0 = \"xxxxxxxx\"\n");
    for i in 1..=20 {
        let p = i - 1;
        text.push_str(&format!(
            "v{i} = \"${{v{p}}}${{v{p}}}${{v{p}}}${{v{p}}}\"\n"
        ));
    }
    text.push_str("\n[[step]]\nid = \"a\"\nkind = \"run\"\ncmd = [\"echo\", \"${v20}\"]\n");
    assert!(text.len() < 700, "{}", text.len());
    ws.write("r.toml", &text);
    let started = Instant::now();
    let (code, err) = plan(&ws, "r.toml");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("expands to more than 1 MiB"), "{err}");
    assert!(err.contains("--> r.toml:"), "{err}");
    assert!(
        err.contains("hint: variables that repeat other variables grow exponentially"),
        "{err}"
    );
    eprintln!("refused in {:?}", started.elapsed());
}

#[test]
fn a_long_chain_of_variables_is_a_located_error() {
    let ws = Workspace::new();
    let mut text = String::from("[vars]\nv0 = \"x\"\n");
    for i in 1..200 {
        text.push_str(&format!("v{i} = \"${{v{}}}\"\n", i - 1));
    }
    text.push_str(&format!("\n{STEP}env = {{ X = \"${{v199}}\" }}\n"));
    ws.write("r.toml", &text);
    let (code, err) = plan(&ws, "r.toml");
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("is nested more than 64 variables deep"),
        "{err}"
    );
    assert!(err.contains("--> r.toml:"), "{err}");
}

fn import(ws: &Workspace, what: &str) -> (Option<i32>, String) {
    ws.write(
        "tree/r.toml",
        &format!("[recipe]\nimport = [\"{what}\"]\n\n{STEP}"),
    );
    plan(ws, "tree/r.toml")
}

#[test]
fn imports_must_be_regular_toml_files_of_bounded_size() {
    let ws = Workspace::new();
    let (code, err) = import(&ws, "/dev/zero");
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("cannot import /dev/zero: not a .toml file"),
        "{err}"
    );
    assert!(err.contains("--> tree/r.toml:2:11"), "{err}");

    std::fs::create_dir_all(ws.path().join("tree/dir.toml")).unwrap();
    let (code, err) = import(&ws, "dir.toml");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("it is a directory"), "{err}");

    let fifo = ws.path().join("tree/fifo.toml");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let (code, err) = import(&ws, "fifo.toml");
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("not a regular file (a device, FIFO or socket)"),
        "{err}"
    );

    ws.write("tree/big.toml", &format!("# {}\n", "x".repeat(5 << 20)));
    let (code, err) = import(&ws, "big.toml");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("larger than 4 MiB"), "{err}");
}

#[test]
fn an_import_chain_deeper_than_the_limit_is_refused() {
    let ws = Workspace::new();
    for i in 0..40 {
        ws.write(
            &format!("tree/f{i}.toml"),
            &format!("[recipe]\nimport = [\"f{}.toml\"]\n", i + 1),
        );
    }
    ws.write("tree/f40.toml", "");
    ws.write(
        "tree/r.toml",
        &format!("[recipe]\nimport = [\"f0.toml\"]\n\n{STEP}"),
    );
    let (code, err) = plan(&ws, "tree/r.toml");
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("imports nest more than 32 files deep"),
        "{err}"
    );
    assert!(err.contains("--> tree/f30.toml:2:11"), "{err}");
}

#[test]
fn imports_stay_inside_the_recipe_tree_and_secrets_are_never_echoed() {
    let ws = Workspace::new();
    let secret = "root:$6$s3cr3tHASH:19000:0:99999:7:::";
    ws.write("outside/shadow.toml", &format!("{secret}\n"));
    ws.write("outside/shadow", &format!("{secret}\n"));
    for what in ["../outside/shadow.toml", "/etc/hostname.toml"] {
        let (code, err) = import(&ws, what);
        assert_eq!(code, Some(2), "{what}: {err}");
        assert!(
            err.contains("it is outside the recipe's tree [WS]/tree")
                || err.contains("not a .toml file"),
            "{what}: {err}"
        );
        assert!(!err.contains("s3cr3t"), "{err}");
    }
    // A symlink inside the tree that leads out is outside too.
    std::os::unix::fs::symlink(
        ws.path().join("outside/shadow.toml"),
        ws.path().join("tree/link.toml"),
    )
    .unwrap();
    let (code, err) = import(&ws, "link.toml");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("outside the recipe's tree"), "{err}");
    assert!(!err.contains("s3cr3t"), "{err}");
    // Named on the command line, the file is read, but as it is not TOML its line is not shown.
    let (code, err) = plan(&ws, "outside/shadow");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--> outside/shadow:1:"), "{err}");
    assert!(
        err.contains("= line not shown: the file is not a .toml text file"),
        "{err}"
    );
    assert!(!err.contains("s3cr3t"), "{err}");
    // Inside the tree (`recipes/` next to `toolchains/`, as kiln ships them) imports work.
    ws.write("kit/toolchains/t.toml", "[vars]\ncuda = \"13.0\"\n");
    ws.write(
        "kit/recipes/r.toml",
        &format!("[recipe]\nimport = [\"../toolchains/t.toml\"]\n\n{STEP}"),
    );
    let (code, err) = plan(&ws, "kit/recipes/r.toml");
    assert_eq!(code, Some(0), "{err}");
    // But not the rest of that parent (a `~/recipes/` makes the parent a home directory).
    ws.write("kit/credentials.toml", &format!("token = \"{secret}\"\n"));
    ws.write(
        "kit/recipes/r.toml",
        &format!("[recipe]\nimport = [\"../credentials.toml\"]\n\n{STEP}"),
    );
    let (code, err) = plan(&ws, "kit/recipes/r.toml");
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("it is outside the recipe's tree [WS]/kit/recipes (and [WS]/kit/toolchains)"),
        "{err}"
    );
    assert!(!err.contains("s3cr3t"), "{err}");
}

#[test]
fn a_recipe_that_is_not_utf8_gets_the_position_of_the_bad_byte() {
    let ws = Workspace::new();
    let mut bytes = b"[[step]]\nid = \"caf".to_vec();
    bytes.push(0xe9); // Latin-1 é
    bytes.extend_from_slice(b"\"\nkind = \"run\"\ncmd = [\"true\"]\n");
    std::fs::write(ws.path().join("r.toml"), bytes).unwrap();
    let (code, err) = plan(&ws, "r.toml");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("byte 0xe9 at offset 18 is not UTF-8"), "{err}");
    assert!(err.contains("--> r.toml:2:10"), "{err}");
    assert!(
        err.contains("hint: recipes are UTF-8 text; convert the file"),
        "{err}"
    );
    assert!(!err.contains("shipped recipes"), "misleading hint: {err}");
}

#[test]
fn a_nul_byte_in_argv_names_the_argument() {
    let ws = Workspace::new();
    ws.write(
        "r.toml",
        "[[step]]\nid = \"a\"\nkind = \"run\"\ncmd = [\"echo\", \"ok\", \"a\\u0000b\"]\n",
    );
    let out = ws
        .kiln()
        .args(["up", "r.toml"])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let err = scrub(&String::from_utf8_lossy(&out.stderr), &ws);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot run `echo`: argument 2 contains a NUL byte"),
        "{err}"
    );
    assert!(
        err.contains("hint: a program's arguments and environment cannot hold NUL"),
        "{err}"
    );
}

/// `kiln ARGS` in `ws` with extra environment (values as raw bytes): (exit code, stderr).
fn kiln_with_env(
    ws: &Workspace,
    args: &[&str],
    env: &[(&str, &std::ffi::OsStr)],
) -> (Option<i32>, String) {
    let mut cmd = ws.kiln();
    cmd.args(args).timeout(Duration::from_secs(120));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code(),
        scrub(&String::from_utf8_lossy(&out.stderr), ws),
    )
}

#[test]
fn environment_values_that_are_not_utf8_are_read_never_a_panic() {
    use std::os::unix::ffi::OsStrExt;
    let ws = Workspace::new();
    ws.write("r.toml", &format!("[recipe]\nname = \"env\"\n{STEP}"));
    let latin1 = std::ffi::OsStr::from_bytes(b"caf\xe9");
    let secret = std::ffi::OsStr::from_bytes(b"hf_\xffnot-utf8-secret-value");
    let env = [("KILN_ODD_VALUE", latin1), ("HF_TOKEN", secret)];
    let (code, err) = kiln_with_env(&ws, &["up", "r.toml"], &env);
    assert_eq!(code, Some(0), "{err}");
    let (code, err) = kiln_with_env(&ws, &["doctor", "--json"], &env);
    assert!(
        matches!(code, Some(0..=2)),
        "doctor exited {code:?}:\n{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_state_directory_path_that_is_not_utf8_is_refused_with_a_hint() {
    use std::os::unix::ffi::OsStrExt;
    let ws = Workspace::new();
    ws.write("r.toml", &format!("[recipe]\nname = \"env\"\n{STEP}"));
    let mut state = ws.path().as_os_str().to_owned();
    state.push(std::ffi::OsStr::from_bytes(b"/st\xffate"));
    for args in [&["up", "r.toml"][..], &["doctor"][..]] {
        let (code, err) = kiln_with_env(&ws, args, &[("KILN_HOME", &state)]);
        assert_eq!(code, Some(2), "kiln {args:?}:\n{err}");
        assert!(
            err.contains("is not valid UTF-8") && err.contains("hint: choose a directory"),
            "kiln {args:?}:\n{err}"
        );
    }
    assert!(
        !std::path::Path::new(&state).exists(),
        "nothing was created"
    );
}

#[test]
fn a_step_id_of_70000_characters_is_clipped_in_the_plan_never_a_panic() {
    // Rust's formatter panics on a column width past 65,535: a table of user text clips it.
    let long = "a".repeat(70_000);
    let ws = Workspace::new();
    ws.write(
        "r.toml",
        &format!("[recipe]\nname = \"wide\"\n\n[[step]]\nid = \"{long}\"\nkind = \"run\"\ncmd = [\"true\"]\n"),
    );
    let out = ws
        .kiln()
        .args(["plan", "r.toml"])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let widest = stdout.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    assert!(widest < 1_000, "a line of {widest} characters");
    assert!(stdout.contains("aaaa…"), "not clipped:\n{stdout}");
}
