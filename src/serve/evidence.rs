//! What in a server log may count as evidence: the entries of the server's own logger (a line
//! that starts with the logger's prefix; entries glued onto one line are split on that prefix),
//! minus the entries that carry user or model text (request and response logs) and whatever
//! follows them on their line. Lines without the prefix (continuations, raw output) never count.
//! Crash evidence is the exception: a Python traceback is not a logger line, so a crash line
//! counts only as the end of a traceback block (see [`ends_traceback`]). docs/serve-bench.md
//! ("Evidence rules").

use regex::Regex;

/// How a signature set's server writes its log lines.
#[derive(Debug)]
pub struct Logger {
    /// The prefix of a logger line, anchored at the line start (`^(?:PREFIX)`).
    pub at_start: Regex,
    /// The same prefix anywhere, to split glued entries (`None`: no splitting).
    pub anywhere: Option<Regex>,
    /// Messages (the part after the prefix) that carry user or model text, anchored.
    pub user_text: Vec<Regex>,
}

/// One entry of the server's own logger: its physical line and its message (after the prefix).
#[derive(Debug, Clone)]
pub struct Entry {
    pub line: usize,
    /// The entry as written, prefix included (what a verdict shows as evidence).
    pub text: String,
    pub message: String,
    /// Whether the server had said it was ready before this entry (set by the verdict, which
    /// knows the readiness patterns; `false` as read).
    pub after_ready: bool,
}

impl Logger {
    /// The entries of `lines` that count as the server's own statements.
    pub fn entries(&self, lines: &[String]) -> Vec<Entry> {
        let mut out = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let Some(first) = self.at_start.find(line) else {
                continue;
            };
            if first.start() != 0 {
                continue;
            }
            // Segment starts: the line start, then every glued prefix after the first one.
            let mut starts = vec![(0, first.end())];
            if let Some(any) = &self.anywhere {
                let mut from = first.end();
                while let Some(m) = any.find_at(line, from) {
                    if m.end() == m.start() {
                        break;
                    }
                    starts.push((m.start(), m.end()));
                    from = m.end();
                }
            }
            for (k, &(start, body)) in starts.iter().enumerate() {
                let end = starts.get(k + 1).map_or(line.len(), |s| s.0);
                let message = line[body..end].trim_end();
                // User text runs to the end of its physical line: nothing after it counts.
                if self.user_text.iter().any(|u| u.is_match(message)) {
                    break;
                }
                out.push(Entry {
                    line: i,
                    text: line[start..end].trim().to_string(),
                    message: message.to_string(),
                    after_ready: false,
                });
            }
        }
        out
    }
}

/// Whether line `i` ends a Python traceback: the lines right above it are the indented frames
/// of a block (at least one `File "…", line N` frame) that a `Traceback (most recent call
/// last):` line opens. A lone exception line (`KeyError: 12` typed into a prompt) does not.
pub fn ends_traceback(lines: &[String], i: usize) -> bool {
    let mut frames = 0;
    for l in lines[..i].iter().rev() {
        let t = l.trim_start();
        if l.len() != t.len() && !t.is_empty() {
            if t.starts_with("File \"") && t.contains("\", line ") {
                frames += 1;
            }
            continue;
        }
        return frames > 0 && l.trim_end().ends_with("Traceback (most recent call last):");
    }
    false
}

/// `s` with control characters escaped (`\u{1b}`), tabs kept: text from a server's log or an
/// HTTP body shown on a terminal or written into a report.
pub fn escape_controls(s: &str) -> String {
    crate::bench::wire::escape_controls(s)
}

#[cfg(test)]
#[path = "evidence_pins.rs"]
mod pins;

#[cfg(test)]
mod tests {
    use super::*;

    fn llama() -> Logger {
        let p = r"\d+\.\d{2}\.\d{3}\.\d{3} [IWED] ";
        Logger {
            at_start: Regex::new(&format!("^(?:{p})")).unwrap(),
            anywhere: Some(Regex::new(p).unwrap()),
            user_text: vec![Regex::new(r"^(?:srv +\S+: (request|response):)").unwrap()],
        }
    }

    fn lines(s: &[&str]) -> Vec<String> {
        s.iter().map(|l| (*l).to_string()).collect()
    }

    #[test]
    fn glued_entries_are_split_and_user_text_taints_the_rest_of_its_line() {
        let log = lines(&[
            "0.00.001.000 I llama_context: flash_attn = 0",
            "1.07.920.927 D No parser definition detected, assuming pure content parser.1.07.920.934 I slot print_timing: id  0 | task 1 | draft acceptance",
            "0.00.002.000 D srv  log_server_r: request:  {\"prompt\":\"0.00.003.000 I llama_context: flash_attn = 1\"}",
            "0.00.003.000 I llama_context: flash_attn = 1 (raw model output without the prefix follows)",
            "flash_attn = 1",
        ]);
        let e = llama().entries(&log);
        let msgs: Vec<&str> = e.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(
            msgs,
            [
                "llama_context: flash_attn = 0",
                "No parser definition detected, assuming pure content parser.",
                "slot print_timing: id  0 | task 1 | draft acceptance",
                "llama_context: flash_attn = 1 (raw model output without the prefix follows)",
            ]
        );
        assert_eq!(e[2].line, 1);
        assert_eq!(
            e[2].text,
            "1.07.920.934 I slot print_timing: id  0 | task 1 | draft acceptance"
        );
    }

    #[test]
    fn a_crash_line_counts_only_at_the_end_of_a_traceback() {
        let log = lines(&[
            "[2026-01-01 00:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
            "  File \"/x/torch_symm_mem.py\", line 83, in __init__",
            "    not in TABLE[cap]",
            "KeyError: 12",
            "KeyError: 12",
            "Traceback (most recent call last):",
            "KeyError: 12",
        ]);
        assert!(ends_traceback(&log, 3));
        assert!(!ends_traceback(&log, 4), "a second, lone line");
        assert!(!ends_traceback(&log, 6), "no frame");
        assert!(!ends_traceback(&log, 0));
    }
}
