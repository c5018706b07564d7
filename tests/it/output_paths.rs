//! Output paths are written, not replaced: `bench --plot`, `cache export FILE` and
//! `image export -o` refuse a device node, a FIFO, a symlink or a directory where the output
//! goes, and a missing parent directory; `/dev/stdout` streams where the command can; an image
//! export never packs its own temp file or output when `-o` is inside the exported prefix, and
//! says which sparse files it packs in full.

use std::path::Path;

use crate::common::Workspace;

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo on a valid C string path the test owns.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// The hostile outputs, each with the words its refusal must hold.
fn hostile(ws: &Workspace) -> Vec<(std::path::PathBuf, &'static str)> {
    let fifo = ws.path().join("out.fifo");
    mkfifo(&fifo);
    let link = ws.path().join("link.out");
    let victim = ws.path().join("victim");
    std::fs::write(&victim, "keep me").unwrap();
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let dir = ws.path().join("a-dir");
    std::fs::create_dir(&dir).unwrap();
    vec![
        ("/dev/full".into(), "it exists and is a character device"),
        (fifo, "it exists and is a FIFO"),
        (link, "it exists and is a symlink"),
        (dir, "it exists and is a directory"),
        (
            ws.path().join("no/such/dir/out"),
            "/no/such/dir does not exist",
        ),
    ]
}

fn refused(cmd: &mut assert_cmd::Command, why: &str) {
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(why) && stderr.contains("hint:"),
        "{why}:\n{stderr}"
    );
}

fn assert_untouched(ws: &Workspace) {
    assert_eq!(
        std::fs::read_to_string(ws.path().join("victim")).unwrap(),
        "keep me"
    );
    assert!(!ws.path().join("no").exists(), "no directory was created");
    let meta = std::fs::symlink_metadata("/dev/full").unwrap();
    use std::os::unix::fs::FileTypeExt;
    assert!(meta.file_type().is_char_device());
    assert!(std::fs::symlink_metadata(ws.path().join("link.out"))
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn bench_plot_refuses_non_regular_outputs_before_benchmarking() {
    let ws = Workspace::new();
    for (path, why) in hostile(&ws) {
        // Nothing listens on port 1: the refusal comes before any request.
        refused(
            ws.kiln()
                .args(["bench", "--url", "http://127.0.0.1:1", "--plot"])
                .arg(&path),
            why,
        );
    }
    assert_untouched(&ws);
}

#[test]
fn cache_export_refuses_non_regular_outputs_and_streams_to_stdout() {
    let ws = Workspace::new();
    for (path, why) in hostile(&ws) {
        refused(ws.kiln().args(["cache", "export"]).arg(&path), why);
    }
    assert_untouched(&ws);
    let out = ws
        .kiln()
        .args(["cache", "export", "/dev/stdout"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut archive = tar::Archive::new(out.stdout.as_slice());
    let names: Vec<String> = archive
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
    assert_eq!(names, ["manifest.json"], "stdout carries the archive alone");
    // A regular file is replaced whole.
    let file = ws.path().join("cache.tar");
    std::fs::write(&file, "old").unwrap();
    ws.kiln()
        .args(["cache", "export"])
        .arg(&file)
        .assert()
        .success();
    assert!(std::fs::read(&file).unwrap().len() >= 512);
}

#[test]
fn image_export_refuses_non_regular_outputs() {
    let ws = Workspace::new();
    let prefix = ws.path().join("opt/demo");
    std::fs::create_dir_all(&prefix).unwrap();
    std::fs::write(prefix.join("f"), "x").unwrap();
    for (path, why) in hostile(&ws) {
        refused(
            ws.kiln()
                .args(["image", "export", "--prefix"])
                .arg(&prefix)
                .arg("-o")
                .arg(&path),
            why,
        );
    }
    assert_untouched(&ws);
}

/// The names in the first layer of an OCI archive.
fn layer_names(archive: &Path) -> Vec<String> {
    let mut outer = tar::Archive::new(std::fs::File::open(archive).unwrap());
    let mut blobs = std::collections::BTreeMap::new();
    for entry in outer.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().display().to_string();
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut bytes).unwrap();
        blobs.insert(name, bytes);
    }
    let index: serde_json::Value = serde_json::from_slice(&blobs["index.json"]).unwrap();
    let blob = |digest: &str| &blobs[&format!("blobs/sha256/{}", &digest[7..])];
    let manifest: serde_json::Value =
        serde_json::from_slice(blob(index["manifests"][0]["digest"].as_str().unwrap())).unwrap();
    let layer = blob(manifest["layers"][0]["digest"].as_str().unwrap());
    tar::Archive::new(layer.as_slice())
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect()
}

#[test]
fn an_export_inside_its_prefix_packs_neither_its_temp_file_nor_its_output() {
    let ws = Workspace::new();
    let prefix = ws.path().join("opt/demo");
    std::fs::create_dir_all(&prefix).unwrap();
    std::fs::write(prefix.join("data"), vec![7u8; 200_000]).unwrap();
    // A sparse file: 64 MiB long, nothing allocated.
    std::fs::File::create(prefix.join("holes"))
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let output = prefix.join("image.tar");
    for _ in 0..2 {
        let out = ws
            .kiln()
            .args(["image", "export", "--prefix"])
            .arg(&prefix)
            .arg("-o")
            .arg(&output)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(
            stderr.contains("holes is sparse (0 B allocated of 64.0 MiB): packed in full"),
            "{stderr}"
        );
    }
    let names = layer_names(&output);
    let rel = prefix.strip_prefix("/").unwrap().display().to_string();
    assert!(names.contains(&format!("{rel}/data")), "{names:?}");
    assert!(
        names.iter().all(|n| !n.contains("image.tar")),
        "the export packed itself: {names:?}"
    );
}

#[test]
fn cache_import_refuses_links_to_files_outside_the_archive() {
    for (kind, name) in [
        (tar::EntryType::Symlink, "symlink"),
        (tar::EntryType::Link, "hard link"),
    ] {
        let ws = Workspace::new();
        let secret = ws.path().join("outside.txt");
        std::fs::write(&secret, "outside the archive").unwrap();
        let sha = kiln::hash::sha256_bytes(b"outside the archive");
        let id = "a".repeat(64);
        let member = format!("wheels/{id}/demo-1.0-py3-none-any.whl");
        let manifest = serde_json::json!({
            "format": "kiln-wheel-cache-v1",
            "files": { member.clone(): sha },
        });
        let manifest = serde_json::to_vec(&manifest).unwrap();
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(manifest.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, "manifest.json", manifest.as_slice())
            .unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(0);
        h.set_mode(0o644);
        b.append_link(&mut h, &member, &secret).unwrap();
        let archive = ws.path().join("evil.tar");
        std::fs::write(&archive, b.into_inner().unwrap()).unwrap();
        let out = ws
            .kiln()
            .args(["cache", "import"])
            .arg(&archive)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "is a {name}, and a cache archive holds only regular files"
            )),
            "{stderr}"
        );
        let wheels = ws.state().join("cache/wheels");
        let left: Vec<_> = std::fs::read_dir(&wheels)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(left.is_empty(), "nothing entered the cache: {left:?}");
    }
}
