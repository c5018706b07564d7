//! Pins of the evidence rules that the module's own tests leave open (issue 48's mutation run):
//! what counts as a traceback frame.

use super::*;

fn lines(s: &[&str]) -> Vec<String> {
    s.iter().map(|l| (*l).to_string()).collect()
}

#[test]
fn an_indented_block_without_a_file_frame_is_no_traceback() {
    // A prompt can put an indented block under a `Traceback` line; only a `File "…", line N`
    // frame makes it one (both halves of the frame test are needed).
    for frame in [
        "    not a frame",
        "  File \"x.py\" is not a frame",
        "  at \", line 3",
    ] {
        let log = lines(&["Traceback (most recent call last):", frame, "KeyError: 12"]);
        assert!(!ends_traceback(&log, 2), "{frame}");
    }
    let log = lines(&[
        "Traceback (most recent call last):",
        "  File \"x.py\", line 3, in f",
        "KeyError: 12",
    ]);
    assert!(ends_traceback(&log, 2));
}

#[test]
fn the_public_escape_escapes_controls_and_keeps_tabs_and_text() {
    // `kiln::serve::evidence::escape_controls` is the library's name for the one escape
    // (bench::wire's); nothing inside kiln calls it by this path.
    assert_eq!(
        escape_controls("a\u{1b}[2Jb\tc\u{202e}"),
        "a\\u{1b}[2Jb\tc\\u{202e}"
    );
    assert_eq!(escape_controls("plain"), "plain");
}
