//! `kiln image export` reading a prefix someone else can write (issue 46's classes): a name
//! with escape sequences reaches the terminal escaped, never raw.

use crate::common::Workspace;

#[test]
fn a_name_with_escape_sequences_in_the_prefix_reaches_the_terminal_escaped() {
    let ws = Workspace::new();
    let prefix = ws.path().join("prefix");
    std::fs::create_dir(&prefix).unwrap();
    // A FIFO is left out with a note naming it; its name sets the terminal's title.
    let fifo = prefix.join("x\u{1b}]0;pwned\u{7}");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo on a valid C string path the test owns.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let out = ws
        .kiln()
        .args(["image", "export", "--prefix"])
        .arg(&prefix)
        .arg("-o")
        .arg(ws.path().join("out.tar"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("left out"), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "a raw escape: {stderr:?}");
    assert!(stderr.contains(r"x\u{1b}]0;pwned\u{7}"), "{stderr}");
}
