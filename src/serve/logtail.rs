//! Follow a growing log file: hand back each complete new line once, keep a bounded history.

use std::collections::VecDeque;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Lines kept for triage and verdicts.
const KEEP: usize = 5000;

pub struct LogTail {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
    pub history: VecDeque<String>,
}

impl LogTail {
    /// Follow `path` from its current end (a log appended to by earlier runs is not re-read).
    pub fn from_end(path: &Path) -> LogTail {
        let offset = std::fs::metadata(path).map_or(0, |m| m.len());
        LogTail {
            path: path.to_path_buf(),
            offset,
            partial: Vec::new(),
            history: VecDeque::new(),
        }
    }

    /// New complete lines since the last call; with `flush`, a final unterminated line too.
    pub fn poll(&mut self, flush: bool) -> Vec<String> {
        let mut buf = Vec::new();
        if let Ok(mut f) = std::fs::File::open(&self.path) {
            if f.seek(SeekFrom::Start(self.offset)).is_ok() {
                if let Ok(n) = f.read_to_end(&mut buf) {
                    self.offset += n as u64;
                }
            }
        }
        self.partial.extend_from_slice(&buf);
        let mut lines = Vec::new();
        while let Some(i) = self.partial.iter().position(|&b| b == b'\n') {
            let raw: Vec<u8> = self.partial.drain(..=i).collect();
            lines.push(clean(&raw));
        }
        if flush && !self.partial.is_empty() {
            let raw = std::mem::take(&mut self.partial);
            lines.push(clean(&raw));
        }
        for l in &lines {
            if self.history.len() == KEEP {
                self.history.pop_front();
            }
            self.history.push_back(l.clone());
        }
        lines
    }

    pub fn lines(&self) -> Vec<String> {
        self.history.iter().cloned().collect()
    }
}

/// One log line as text: progress bars redraw with `\r`, keep the last frame.
fn clean(raw: &[u8]) -> String {
    let s = String::from_utf8_lossy(raw);
    let s = s.trim_end_matches(['\n', '\r']);
    s.rsplit('\r').next().unwrap_or(s).to_string()
}

/// The part of a log worth showing after a crash: from the last Python traceback (at most `max`
/// lines), else the last `max` lines; control characters escaped (they go to a terminal).
pub fn crash_tail(lines: &[String], max: usize) -> Vec<String> {
    let start = lines
        .iter()
        .rposition(|l| l.contains("Traceback (most recent call last)"));
    let from = match start {
        Some(i) if lines.len() - i <= max => i,
        _ => lines.len().saturating_sub(max),
    };
    lines[from..]
        .iter()
        .map(|l| crate::bench::wire::escape_controls(l))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_appends_and_partial_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        std::fs::write(&p, "old\n").unwrap();
        let mut t = LogTail::from_end(&p);
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        write!(f, "a\nb\rc\npart").unwrap();
        assert_eq!(t.poll(false), vec!["a", "c"]);
        writeln!(f, "ial").unwrap();
        assert_eq!(t.poll(false), vec!["partial"]);
        write!(f, "end").unwrap();
        assert_eq!(t.poll(true), vec!["end"]);
    }

    #[test]
    fn crash_tail_starts_at_the_last_traceback() {
        let lines: Vec<String> = [
            "x",
            "Traceback (most recent call last):",
            "  File",
            "KeyError: 12",
            "bye",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            crash_tail(&lines, 40)[0],
            "Traceback (most recent call last):"
        );
        assert_eq!(crash_tail(&lines, 2), vec!["KeyError: 12", "bye"]);
    }
}
