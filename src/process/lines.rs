//! A child's output as lines of bounded length. A line longer than [`PIECE`] is passed on in
//! pieces of at most that, each cut after an ASCII space, tab or carriage return: a secret or a
//! URL never spans one, so each piece is still redacted whole. Only a run without such a space
//! may be longer; one of [`RUN_CAP`] bytes is not text (and a cut in it could split a secret): it
//! is replaced by one note and dropped up to the next space or line break. Memory stays under
//! `RUN_CAP + PIECE`.

use std::io::{BufRead, Read};

/// The longest piece of a line passed on at once (cut after a space where it is longer).
pub(crate) const PIECE: usize = 64 * 1024;
/// The longest run without a line break or a space that is kept.
pub(crate) const RUN_CAP: usize = 1024 * 1024;

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r')
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .trim_end_matches(['\n', '\r'])
        .to_string()
}

/// Read `r` to its end, calling `send` with each line or piece; stop early when `send` says so.
pub(crate) fn split(mut r: impl BufRead, mut send: impl FnMut(String) -> bool) {
    let mut buf: Vec<u8> = Vec::new();
    // Inside a dropped run: discard up to the next space or line break.
    let mut dropping = false;
    loop {
        // Up to a piece's worth in `buf`; a run without spaces grows a piece at a time.
        let want = if buf.len() < PIECE {
            PIECE - buf.len()
        } else {
            PIECE
        };
        // A read error ends the output as its end does.
        let n = r
            .by_ref()
            .take(want as u64)
            .read_until(b'\n', &mut buf)
            .unwrap_or_default();
        if n == 0 {
            if !buf.is_empty() && !dropping {
                send(text(&buf));
            }
            return;
        }
        if buf.last() == Some(&b'\n') {
            let line = std::mem::take(&mut buf);
            let keep = if std::mem::take(&mut dropping) {
                // The dropped run ends here: what follows its first space is kept, if anything.
                match line.iter().position(|b| is_space(*b)) {
                    Some(i) if line.len() > i + 2 => &line[i + 1..],
                    _ => continue,
                }
            } else {
                &line[..]
            };
            if !send(text(keep)) {
                return;
            }
            continue;
        }
        if dropping {
            match buf.iter().position(|b| is_space(*b)) {
                Some(i) => {
                    buf.drain(..=i);
                    dropping = false;
                }
                None => buf.clear(),
            }
            continue;
        }
        if let Some(i) = buf.iter().rposition(|b| is_space(*b)) {
            let rest = buf.split_off(i + 1);
            let piece = std::mem::replace(&mut buf, rest);
            if !send(text(&piece)) {
                return;
            }
        } else if buf.len() >= RUN_CAP {
            let note = format!(
                "[kiln: {} or more bytes without a line break or a space: not text, not logged]",
                buf.len()
            );
            buf.clear();
            dropping = true;
            if !send(note) {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        split(std::io::Cursor::new(input), |l| {
            out.push(l);
            true
        });
        out
    }

    #[test]
    fn short_lines_pass_whole_and_a_last_line_without_a_newline_too() {
        assert_eq!(lines(b"a\r\nb\n\nc"), ["a", "b", "", "c"]);
    }

    #[test]
    fn a_long_line_comes_in_pieces_cut_after_a_space() {
        let words = "word ".repeat(40_000); // 200,000 bytes, one line
        let got = lines(format!("{words}end\nnext\n").as_bytes());
        assert!(got.len() > 3, "{}", got.len());
        assert!(got.iter().all(|p| p.len() <= PIECE));
        let (last, pieces) = got.split_last().unwrap();
        assert_eq!(last, "next");
        assert_eq!(pieces.concat(), format!("{words}end"));
        // Every cut is after a space: no word is split.
        assert!(pieces[..pieces.len() - 1].iter().all(|p| p.ends_with(' ')));
    }

    #[test]
    fn a_childs_endless_line_is_logged_in_pieces_and_its_secret_never_reaches_the_log() {
        // A real child: a long line of words with the token in it, then a 3 MiB run without a
        // space or line break, then the token once more, all without a newline at the end.
        let secret = "hf_kilnTestSecretValue0123456789";
        let script = "import os, sys; t = os.environ['HF_TOKEN']; \
            sys.stdout.write(('word ' * 50000) + t + ' ' + 'x' * (3 << 20) + ' ' + t)";
        let mut spec = crate::process::CommandSpec::new("python3", ["-c", script]);
        spec.env.insert("HF_TOKEN".into(), secret.into());
        let mut log = Vec::new();
        let mut longest = 0;
        let done = crate::process::run_logged(&spec, &mut log, None, &mut |l| {
            longest = longest.max(l.len());
        })
        .unwrap();
        assert!(done.success());
        let log = String::from_utf8(log).unwrap();
        assert!(!log.contains(secret), "the token reached the log");
        assert_eq!(log.matches("***").count(), 2, "both tokens redacted");
        assert!(log.contains("not text, not logged"));
        assert!(longest <= PIECE, "{longest}");
    }

    #[test]
    fn a_run_without_spaces_past_the_cap_is_replaced_by_a_note_and_the_rest_is_kept() {
        let run = "x".repeat(RUN_CAP + PIECE + 5);
        let got = lines(format!("before {run} after\nnext\n").as_bytes());
        assert_eq!(got[0], "before ");
        assert!(
            got[1].starts_with("[kiln: ") && got[1].contains("not logged"),
            "{}",
            got[1]
        );
        assert_eq!(&got[2..], ["after", "next"]);
        assert!(got.iter().all(|l| l.len() <= PIECE));
    }
}
