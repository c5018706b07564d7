//! Hostile archives (issue 11): hard links resolve inside the destination only, setuid/setgid bits
//! are dropped unless asked for, device nodes and FIFOs are refused, a compression bomb stops at
//! `max_size`, and every failure keeps its OS cause (in the error and in the step log).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use crate::common::{scrub, Workspace};
use crate::fetch_extract::compress;

const FORMATS: [&str; 4] = ["tar", "tar.gz", "tar.xz", "tar.zst"];

/// One header with a raw name and link name, mode and type.
fn entry(
    b: &mut tar::Builder<Vec<u8>>,
    name: &str,
    kind: tar::EntryType,
    link: &str,
    mode: u32,
    data: &[u8],
) {
    let mut h = tar::Header::new_gnu();
    {
        let old = h.as_old_mut();
        old.name[..name.len()].copy_from_slice(name.as_bytes());
        old.linkname[..link.len()].copy_from_slice(link.as_bytes());
    }
    h.set_entry_type(kind);
    h.set_size(data.len() as u64);
    h.set_mode(mode);
    h.set_cksum();
    b.append(&h, data).unwrap();
}

/// Extract `archive` (written as `evil.<format>`) into `dest` with extra step keys.
fn up(ws: &Workspace, archive: &[u8], format: &str, extra: &str) -> (Option<i32>, String) {
    let name = format!("evil.{format}");
    std::fs::write(ws.path().join(&name), archive).unwrap();
    ws.write(
        "r.toml",
        &format!("[[step]]\nid = \"unpack\"\nkind = \"extract\"\narchive = \"${{recipe.dir}}/{name}\"\ndest = \"${{recipe.dir}}/dest\"\n{extra}\n"),
    );
    let out = ws
        .kiln()
        .args(["up", "r.toml"])
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    (
        out.status.code(),
        scrub(&String::from_utf8_lossy(&out.stderr), ws),
    )
}

fn step_log(ws: &Workspace) -> String {
    std::fs::read_to_string(ws.state().join("runs/r/logs/unpack.log")).unwrap_or_default()
}

#[test]
fn a_relative_hard_link_never_reaches_outside_the_destination_in_any_format() {
    let mut b = tar::Builder::new(Vec::new());
    // Relative, no `..`: kiln's working directory (the workspace) holds `outside/secret`.
    entry(
        &mut b,
        "pkg/passwd",
        tar::EntryType::Link,
        "outside/secret",
        0o644,
        b"",
    );
    let tar = b.into_inner().unwrap();
    for format in FORMATS {
        let ws = Workspace::new();
        let secret = ws.write("outside/secret", "secret\n");
        let (code, err) = up(&ws, &compress(&tar, format), format, "");
        assert_eq!(code, Some(1), "{format}: {err}");
        assert!(
            err.contains("refusing unsafe entry `pkg/passwd`")
                && err.contains("hard link to a path that is not a file extracted earlier"),
            "{format}: {err}"
        );
        assert!(
            !ws.path().join("dest").exists(),
            "{format}: dest was created"
        );
        assert_eq!(
            std::fs::metadata(&secret).unwrap().nlink(),
            1,
            "{format}: linked"
        );
    }
}

#[test]
fn hard_links_between_entries_work_with_strip_components() {
    let mut b = tar::Builder::new(Vec::new());
    entry(
        &mut b,
        "pkg/bin/tool",
        tar::EntryType::Regular,
        "",
        0o755,
        b"#!/bin/sh\n",
    );
    entry(
        &mut b,
        "pkg/bin/alias",
        tar::EntryType::Link,
        "pkg/bin/tool",
        0o755,
        b"",
    );
    let tar = b.into_inner().unwrap();
    for format in FORMATS {
        let ws = Workspace::new();
        let (code, err) = up(&ws, &compress(&tar, format), format, "strip_components = 1");
        assert_eq!(code, Some(0), "{format}: {err}");
        let (a, b) = (
            ws.path().join("dest/bin/tool"),
            ws.path().join("dest/bin/alias"),
        );
        assert_eq!(
            std::fs::metadata(&a).unwrap().ino(),
            std::fs::metadata(&b).unwrap().ino(),
            "{format}: not one file"
        );
    }
}

#[test]
fn setuid_and_setgid_bits_are_dropped_unless_the_step_keeps_them() {
    let mut b = tar::Builder::new(Vec::new());
    entry(&mut b, "bin/su", tar::EntryType::Regular, "", 0o6755, b"x");
    entry(&mut b, "share", tar::EntryType::Directory, "", 0o2775, b"");
    let tar = b.into_inner().unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    let ws = Workspace::new();
    let (code, err) = up(&ws, &tar, "tar", "");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(mode(&ws.path().join("dest/bin/su")), 0o755);
    assert_eq!(mode(&ws.path().join("dest/share")), 0o775);
    let ws = Workspace::new();
    let (code, err) = up(&ws, &tar, "tar", "keep_setid = true");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(mode(&ws.path().join("dest/bin/su")), 0o6755);
    assert_eq!(mode(&ws.path().join("dest/share")), 0o2775);
}

#[test]
fn device_nodes_and_fifos_are_refused() {
    for (kind, what) in [
        (tar::EntryType::Char, "a device node"),
        (tar::EntryType::Block, "a device node"),
        (tar::EntryType::Fifo, "a FIFO"),
    ] {
        let mut b = tar::Builder::new(Vec::new());
        entry(&mut b, "pkg/ok", tar::EntryType::Regular, "", 0o644, b"ok");
        entry(&mut b, "pkg/node", kind, "", 0o666, b"");
        let ws = Workspace::new();
        let (code, err) = up(&ws, &b.into_inner().unwrap(), "tar", "");
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains(&format!(
                "refusing archive [WS]/evil.tar: entry `pkg/node` is {what}"
            )),
            "{err}"
        );
        assert!(
            err.contains("hint: kiln extracts files, directories and links only"),
            "{err}"
        );
        assert!(!ws.path().join("dest").exists());
        assert!(
            step_log(&ws).contains(&format!("entry `pkg/node` is {what}")),
            "the step log lacks the error: {}",
            step_log(&ws)
        );
    }
}

#[test]
fn a_compression_bomb_stops_at_max_size() {
    // 64 MiB of zeros compress to ~64 KiB of gzip.
    let zeros = vec![0u8; 64 << 20];
    let mut b = tar::Builder::new(Vec::new());
    entry(&mut b, "bomb", tar::EntryType::Regular, "", 0o644, &zeros);
    let gz = compress(&b.into_inner().unwrap(), "tar.gz");
    assert!(gz.len() < 1 << 20);
    let ws = Workspace::new();
    let (code, err) = up(&ws, &gz, "tar.gz", "max_size = \"16MiB\"");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(
            "refusing archive [WS]/evil.tar.gz: it unpacks to more than max_size = 16777216 bytes"
        ),
        "{err}"
    );
    assert!(err.contains("raise `max_size`"), "{err}");
    assert!(!ws.path().join("dest").exists());
    // A bad size is a located recipe error.
    let (code, err) = up(&ws, &gz, "tar.gz", "max_size = \"lots\"");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("r.toml:6:12"), "{err}");
}

#[test]
fn a_truncated_gzip_says_why_in_the_error_and_the_step_log() {
    let mut b = tar::Builder::new(Vec::new());
    entry(
        &mut b,
        "pkg/a",
        tar::EntryType::Regular,
        "",
        0o644,
        &vec![7u8; 200_000],
    );
    let mut gz = compress(&b.into_inner().unwrap(), "tar.gz");
    gz.truncate(gz.len() / 2);
    let ws = Workspace::new();
    let (code, err) = up(&ws, &gz, "tar.gz", "");
    assert_eq!(code, Some(1), "{err}");
    let first = err.lines().find(|l| l.starts_with("error: ")).unwrap();
    assert!(
        first.starts_with(
            "error: step `unpack` failed: cannot extract archive [WS]/evil.tar.gz into [WS]/"
        ) || first
            .starts_with("error: step `unpack` failed: cannot read archive [WS]/evil.tar.gz: "),
        "{err}"
    );
    let cause = "incomplete deflate stream";
    assert!(first.ends_with(cause), "{err}");
    let log = step_log(&ws);
    assert!(log.contains("error: ") && log.contains(cause), "{log}");
}

#[test]
fn an_entry_that_collides_with_a_file_names_the_os_cause() {
    let mut b = tar::Builder::new(Vec::new());
    entry(&mut b, "pkg/a", tar::EntryType::Regular, "", 0o644, b"file");
    entry(
        &mut b,
        "pkg/a/b",
        tar::EntryType::Regular,
        "",
        0o644,
        b"under a file",
    );
    let ws = Workspace::new();
    let (code, err) = up(&ws, &b.into_inner().unwrap(), "tar", "");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("File exists (os error 17)") || err.contains("Not a directory (os error 20)"),
        "{err}"
    );
    assert!(step_log(&ws).contains("os error"), "{}", step_log(&ws));
}
