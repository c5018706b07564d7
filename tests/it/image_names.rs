//! `kiln image export` keeps names exactly: a non-UTF-8 file name stays those bytes, a hard
//! link stays a hard link (tar's link entry) and a path past PATH_MAX stays whole, read back
//! from the layer with real `tar`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::process::Command;

use crate::common::Workspace;

#[test]
fn a_non_utf8_name_and_a_hard_link_come_back_exactly() {
    let ws = Workspace::new();
    let prefix = ws.path().join("opt/names");
    std::fs::create_dir_all(&prefix).unwrap();
    let latin1 = OsStr::from_bytes(b"caf\xe9.txt");
    std::fs::write(prefix.join(latin1), "latin-1\n").unwrap();
    std::fs::write(prefix.join("a-first"), "shared\n").unwrap();
    std::fs::hard_link(prefix.join("a-first"), prefix.join("b-second")).unwrap();
    let out = ws
        .kiln()
        .args(["image", "export", "--json", "--prefix"])
        .arg(&prefix)
        .args(["-o", "names.tar"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let done = crate::reporter::json_event(&String::from_utf8_lossy(&out.stdout), "image_exported");
    let digest = done["layers"][0]["digest"].as_str().unwrap();
    let blob = format!("blobs/sha256/{}", &digest["sha256:".len()..]);
    // Extract the archive, then its one layer, with the system's tar.
    let image = ws.path().join("image");
    let root = ws.path().join("root");
    std::fs::create_dir_all(&image).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    let tar = |archive: &std::path::Path, into: &std::path::Path| {
        let o = Command::new("tar")
            .arg("-xf")
            .arg(archive)
            .arg("-C")
            .arg(into)
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
    };
    tar(&ws.path().join("names.tar"), &image);
    tar(&image.join(&blob), &root);
    let back = root.join(prefix.strip_prefix("/").unwrap());
    assert_eq!(
        std::fs::read_to_string(back.join(latin1)).unwrap(),
        "latin-1\n"
    );
    let first = std::fs::metadata(back.join("a-first")).unwrap();
    let second = std::fs::metadata(back.join("b-second")).unwrap();
    assert_eq!(
        first.ino(),
        second.ino(),
        "b-second is no longer a hard link"
    );
    assert_eq!(first.nlink(), 2);
    assert_eq!(
        std::fs::read_to_string(back.join("b-second")).unwrap(),
        "shared\n"
    );
    // The link is a link entry in the layer, not a second copy of the bytes.
    let listing = Command::new("tar")
        .arg("-tvf")
        .arg(image.join(&blob))
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with('h') && l.ends_with("a-first")),
        "{listing}"
    );
}

/// A path of PATH_MAX bytes or more exports like any other (#47): the tree is walked through
/// directory handles, and the layer names the file in full (tar's GNU long-name entry), read
/// back with the system's tar.
#[test]
fn a_path_deeper_than_path_max_is_exported_whole() {
    let ws = Workspace::new();
    let (_deep_root, prefix) = deep_prefix();
    let out = ws
        .kiln()
        .args(["image", "export", "--json", "--prefix"])
        .arg(&prefix)
        .args(["-o", "deep.tar"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let done = crate::reporter::json_event(&String::from_utf8_lossy(&out.stdout), "image_exported");
    let digest = done["layers"][0]["digest"].as_str().unwrap();
    let image = ws.path().join("image");
    std::fs::create_dir_all(&image).unwrap();
    let o = Command::new("tar")
        .arg("-xf")
        .arg(ws.path().join("deep.tar"))
        .arg("-C")
        .arg(&image)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let layer = image.join(format!("blobs/sha256/{}", &digest["sha256:".len()..]));
    let inside = prefix.strip_prefix("/").unwrap();
    let dirs = (0..25)
        .map(|_| "d".repeat(200))
        .collect::<Vec<_>>()
        .join("/");
    let leaf = inside.join(dirs).join("leaf");
    assert!(leaf.as_os_str().len() > 4096);
    for (name, want) in [(inside.join("shallow"), "kept\n"), (leaf, "x\n")] {
        let read = Command::new("tar")
            .arg("-xOf")
            .arg(&layer)
            .arg(&name)
            .output()
            .unwrap();
        assert!(read.status.success(), "{}: {read:?}", name.display());
        assert_eq!(String::from_utf8_lossy(&read.stdout), want);
    }
}

/// A prefix `opt/deep` holding a file `shallow` and a file 25 directories of 200 bytes down
/// (over PATH_MAX), made one `cd` at a time (no single call sees the whole path), in the first
/// directory whose file system allows it: `$TMPDIR`, then /dev/shm, then the cargo target
/// directory. A FUSE file system (fuse-overlayfs, rootless Docker's storage driver, so a
/// container's /tmp) resolves whole paths and refuses the deep mkdir (`File name too long`);
/// the test then says past the capture where it built the tree instead. The temp dir is returned
/// to keep it alive.
fn deep_prefix() -> (tempfile::TempDir, std::path::PathBuf) {
    use std::io::Write;
    let script = "set -e; for i in $(seq 25); do n=$(printf 'd%.0s' $(seq 200)); mkdir $n; cd $n; done; echo x > leaf";
    let target = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
    let candidates = [std::env::temp_dir(), "/dev/shm".into(), target];
    let mut refused = Vec::new();
    for dir in &candidates {
        let Ok(root) = tempfile::Builder::new()
            .prefix("kiln-deep-")
            .tempdir_in(dir)
        else {
            refused.push(format!("{}: cannot make a temp dir there", dir.display()));
            continue;
        };
        let prefix = root.path().join("opt/deep");
        std::fs::create_dir_all(&prefix).unwrap();
        std::fs::write(prefix.join("shallow"), "kept\n").unwrap();
        let made = Command::new("bash")
            .args(["-c", script])
            .current_dir(&prefix)
            .output()
            .unwrap();
        if made.status.success() {
            if !refused.is_empty() {
                let _ = writeln!(
                    std::io::stderr(),
                    "tests: image_names: the deep tree is under {} ({})",
                    dir.display(),
                    refused.join("; ")
                );
            }
            return (root, prefix);
        }
        refused.push(format!(
            "{} refuses a path over PATH_MAX: {}",
            dir.display(),
            // mkdir's last words: `File name too long` (not the 200-byte name before it).
            String::from_utf8_lossy(&made.stderr)
                .trim()
                .rsplit(": ")
                .next()
                .unwrap_or("")
        ));
    }
    panic!(
        "no directory here allows a path over PATH_MAX:\n{}\nhint: point TMPDIR at a directory on ext4, xfs or tmpfs",
        refused.join("\n")
    );
}
