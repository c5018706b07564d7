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
