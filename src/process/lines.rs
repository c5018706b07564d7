//! A child's output as lines of bounded length. A line longer than a piece ([`Limits`]) is passed
//! on in pieces, each cut after an ASCII space, tab or carriage return that no secret spans: a
//! token or a URL holds no space, and a secret that does (a password) is kept on one side of
//! every cut, so each piece is still redacted whole. A piece is at most twice the piece size,
//! unless it holds a run without a space: a run as long as the run cap is not text (and a cut in
//! it could split a secret), so it is replaced by one note and dropped up to the next space or
//! line break. Memory stays under the run cap plus a piece.

use std::io::{BufRead, Read};

/// How long a piece of a line and a run without a space may be.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub piece: usize,
    pub run_cap: usize,
    /// The most output (bytes) kiln reads of the child: past it the child's group is ended
    /// ([`crate::process::Finished::over_cap`]). Steps have none (`u64::MAX`).
    pub total_cap: u64,
}

impl Limits {
    /// Step logs and what kiln reads of a child's output: 64 KiB pieces, 1 MiB runs.
    pub(crate) const LOG: Limits = Limits {
        piece: 64 * 1024,
        run_cap: 1024 * 1024,
        total_cap: u64::MAX,
    };
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r')
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .trim_end_matches(['\n', '\r'])
        .to_string()
}

/// Where to cut `buf`: after its last space that no occurrence of a `whole` secret spans, with
/// enough bytes after it that any occurrence spanning it lies in `buf` (so it is seen).
fn cut(buf: &[u8], whole: &[Vec<u8>]) -> Option<usize> {
    let longest = whole.iter().map(Vec::len).max().unwrap_or(1).max(1);
    let spans: Vec<(usize, usize)> = whole
        .iter()
        .flat_map(|s| {
            buf.windows(s.len())
                .enumerate()
                .filter(move |(_, w)| w == s)
                .map(move |(p, _)| (p, p + s.len()))
        })
        .collect();
    (1..=buf.len().saturating_sub(longest - 1))
        .rev()
        .filter(|&c| is_space(buf[c - 1]))
        .find(|&c| !spans.iter().any(|&(a, b)| a < c && c < b))
}

/// Read `r` to its end, calling `send` with each line or piece and whether it ends its line (a
/// cut piece and the note of a dropped run do not); stop early when `send` says so. `whole`:
/// secrets with a space in them, never cut.
pub(crate) fn split(
    mut r: impl BufRead,
    limits: Limits,
    whole: &[Vec<u8>],
    mut send: impl FnMut(String, bool) -> bool,
) {
    let Limits { piece, run_cap, .. } = limits;
    let mut buf: Vec<u8> = Vec::new();
    // Inside a dropped run: discard up to the next space or line break.
    let mut dropping = false;
    loop {
        // Up to a piece's worth in `buf`; a run without spaces grows a piece at a time.
        let want = if buf.len() < piece {
            piece - buf.len()
        } else {
            piece
        };
        // A read error ends the output as its end does.
        let n = r
            .by_ref()
            .take(want as u64)
            .read_until(b'\n', &mut buf)
            .unwrap_or_default();
        if n == 0 {
            if !buf.is_empty() && !dropping {
                send(text(&buf), true);
            }
            return;
        }
        if buf.last() == Some(&b'\n') {
            let line = std::mem::take(&mut buf);
            let keep = if std::mem::take(&mut dropping) {
                // The dropped run ends here: what follows its first space is kept, if anything.
                match line.iter().position(|b| is_space(*b)) {
                    Some(i) if !text(&line[i + 1..]).is_empty() => &line[i + 1..],
                    _ => continue,
                }
            } else {
                &line[..]
            };
            if !send(text(keep), true) {
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
        if let Some(c) = cut(&buf, whole) {
            let rest = buf.split_off(c);
            let piece = std::mem::replace(&mut buf, rest);
            if !send(text(&piece), false) {
                return;
            }
        } else if buf.len() >= run_cap {
            let note = format!(
                "[kiln: {} or more bytes without a line break or a space: not text, not logged]",
                buf.len()
            );
            buf.clear();
            dropping = true;
            if !send(note, false) {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIECE: usize = Limits::LOG.piece;
    const RUN_CAP: usize = Limits::LOG.run_cap;

    fn lines_keeping(input: &[u8], whole: &[&str]) -> Vec<String> {
        let whole: Vec<Vec<u8>> = whole.iter().map(|s| s.as_bytes().to_vec()).collect();
        let mut out = Vec::new();
        split(std::io::Cursor::new(input), Limits::LOG, &whole, |l, _| {
            out.push(l);
            true
        });
        out
    }

    fn lines(input: &[u8]) -> Vec<String> {
        lines_keeping(input, &[])
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
    fn a_secret_with_a_space_is_never_cut() {
        // The first piece's last space falls inside the secret: the cut moves before it.
        let filler = "ab ".repeat((PIECE - 5) / 3);
        let filler = format!("{filler}{}", "x".repeat(PIECE - 5 - filler.len()));
        let input = format!("{filler}pass word {}\n", "cd ".repeat(30_000));
        let got = lines_keeping(input.as_bytes(), &["pass word"]);
        assert!(got.len() > 2);
        assert!(
            got.iter().any(|p| p.contains("pass word")),
            "{:?}",
            &got[1][..20]
        );
        assert!(got.iter().all(|p| !p.ends_with("pass ")));
        assert!(
            got.concat() == input.trim_end_matches('\n'),
            "output lost or changed"
        );
        // Without the secret the same input is cut inside it.
        assert!(lines(input.as_bytes()).iter().any(|p| p.ends_with("pass ")));
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
