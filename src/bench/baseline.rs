//! `kiln bench --baseline FILE`: the result to gate against, from what `kiln bench --json`
//! wrote (JSON lines: its `bench` event), from the single JSON document that earlier kilns
//! wrote, or from the last whole record of a history file (`bench/history.jsonl`).

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::Report;
use crate::error::{Error, Result};

const HINT: &str = "record one with `kiln bench --json > FILE` (its `bench` event is read), or pass the state dir's bench/history.jsonl";

/// What llama-server's `/props` says that is drawn anew or changes state at every launch and
/// cannot change speed: the random multimodal `media_marker` (tools/server/server-common.cpp
/// `get_media_marker`: `<__media_` + random_string() + `__>` unless LLAMA_MEDIA_MARKER pins it)
/// and whether it is sleeping. Left out of the bench fingerprint so a baseline from an earlier
/// launch of the same settings still gates.
pub(super) const LLAMA_PROPS_PER_LAUNCH: &[&str] = &["media_marker", "is_sleeping"];

/// Launch flags that say where the server listens or which process it is, not how fast it is:
/// left out of the fingerprint's settings (kiln picks a free port per launch).
const PER_LAUNCH_FLAGS: &[&str] = &["--port", "--host", "--pid", "--log-file"];

/// Whether launch flag `flag` is per-launch (see [`PER_LAUNCH_FLAGS`]).
pub(super) fn is_per_launch_flag(flag: &str) -> bool {
    PER_LAUNCH_FLAGS.contains(&flag)
}

/// The slowest median a baseline may hold: 0.001 tok/s is one token in over 16 minutes, slower
/// than any request kiln waits for; below it the value was not measured (0, 1e-300, edited).
const MIN_MEDIAN: f64 = 1e-3;

/// The gate divides by the baseline's median: one that is not a finite speed of at least
/// [`MIN_MEDIAN`] (0, negative, 1e-300, subnormal, NaN, infinite) would let any result pass
/// or none.
pub(super) fn check_median(median: f64, metric: &str, path: &Path) -> Result<()> {
    if median.is_finite() && median >= MIN_MEDIAN {
        return Ok(());
    }
    Err(Error::usage(
        format!(
            "the baseline {} has a median {metric} of {median:e}, which no result can be compared with",
            path.display()
        ),
        Some(format!(
            "a baseline must hold a measured speed of at least {MIN_MEDIAN} tok/s; {HINT}"
        )),
    ))
}

/// Read a baseline (see the module). A line that is not whole (torn by a crash or a full disk)
/// is skipped and told to `warn` with its `file:line` (many: one warning with their count, the
/// first and the last); a file with no result is an error at `file:line:col`.
pub fn read_baseline(path: &Path, warn: &mut dyn FnMut(&str)) -> Result<Report> {
    let text = crate::bounded::read_text(path, "the baseline", crate::bounded::BASELINE_CAP)?;
    let whole = match serde_json::from_str::<Report>(&text) {
        Ok(report) => return Ok(report),
        Err(e) => e,
    };
    // One object per line: a JSON-lines stream of events, or a history of records.
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    match serde_json::from_str::<Value>(first) {
        Ok(Value::Object(o)) if o.contains_key("event") => from_stream(&text, path, warn),
        Ok(Value::Object(_)) => last_record(&text, path, warn),
        _ => Err(not_a_result(path, whole.line(), &whole)),
    }
}

/// The last `bench` event of a `kiln bench --json` stream.
fn from_stream(text: &str, path: &Path, warn: &mut dyn FnMut(&str)) -> Result<Report> {
    #[derive(Deserialize)]
    struct BenchEvent {
        report: Report,
    }
    let (mut bench, mut failed) = (None, None);
    let mut skipped = Torn::default();
    for (n, line) in numbered(text) {
        match serde_json::from_str::<Value>(line) {
            Ok(v) => match v.get("event").and_then(Value::as_str) {
                Some("bench") => bench = Some((n, line)),
                Some("error") => failed = v["message"].as_str().map(str::to_string),
                _ => {}
            },
            Err(e) => skipped.add(n, e),
        }
    }
    skipped.tell(path, warn);
    let Some((n, line)) = bench else {
        let why = match failed {
            Some(m) => format!(": the run that wrote it failed: {m}"),
            None => String::new(),
        };
        return Err(Error::usage(
            format!(
                "{} is a kiln JSON-lines stream without a `bench` event{why}",
                path.display()
            ),
            Some(HINT.into()),
        ));
    };
    serde_json::from_str::<BenchEvent>(line)
        .map(|b| b.report)
        .map_err(|e| not_a_result(path, n, &e))
}

/// The last line of a history that is a whole record; the torn ones after it are reported.
fn last_record(text: &str, path: &Path, warn: &mut dyn FnMut(&str)) -> Result<Report> {
    let mut skipped = Torn::default();
    let mut found = None;
    for (n, line) in numbered(text).collect::<Vec<_>>().into_iter().rev() {
        match serde_json::from_str::<Report>(line) {
            Ok(r) => {
                found = Some(r);
                break;
            }
            Err(e) => skipped.add(n, e),
        }
    }
    skipped.tell(path, warn);
    if let Some(r) = found {
        return Ok(r);
    }
    let (n, e) = skipped.last.expect("a history has a line");
    Err(not_a_result(path, n, &e))
}

/// The lines skipped as torn: how many, the first and the last, so that two million of them are
/// one warning.
#[derive(Default)]
struct Torn {
    count: usize,
    /// The lowest line number skipped, and why.
    first: Option<(usize, String)>,
    /// The highest line number skipped, and its error (where a history without a whole record
    /// is refused).
    last: Option<(usize, serde_json::Error)>,
}

impl Torn {
    /// Line `n` was skipped, for `e` (lines come in either order).
    fn add(&mut self, n: usize, e: serde_json::Error) {
        self.count += 1;
        if self.first.as_ref().is_none_or(|(f, _)| n < *f) {
            self.first = Some((n, message(&e)));
        }
        if self.last.as_ref().is_none_or(|(l, _)| n > *l) {
            self.last = Some((n, e));
        }
    }

    /// One warning for every line skipped (none when none was).
    fn tell(&self, path: &Path, warn: &mut dyn FnMut(&str)) {
        let (Some((first, why)), Some((last, _))) = (&self.first, &self.last) else {
            return;
        };
        let what = "(torn by a crash or a full disk?)";
        if self.count == 1 {
            warn(&format!(
                "{}:{first}: skipped a line that is not a whole JSON record {what}: {why}",
                path.display()
            ));
        } else {
            warn(&format!(
                "{}: skipped {} lines that are not whole JSON records {what}, the first at line {first}, the last at line {last}: {why}",
                path.display(),
                self.count
            ));
        }
    }
}

/// The non-empty lines of `text`, numbered from 1.
fn numbered(text: &str) -> impl Iterator<Item = (usize, &str)> {
    (1..)
        .zip(text.lines())
        .filter(|(_, l)| !l.trim().is_empty())
}

/// `e` (from a parse of the text at `line`, or of one line) at `file:line:col`.
fn not_a_result(path: &Path, line: usize, e: &serde_json::Error) -> Error {
    Error::usage(
        format!(
            "{}:{line}:{}: not a kiln bench result: {}",
            path.display(),
            e.column(),
            message(e)
        ),
        Some(HINT.into()),
    )
}

/// serde_json's message without its ` at line L column C` (the location is said before it).
fn message(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> (std::result::Result<Report, String>, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("base.json");
        std::fs::write(&path, text).unwrap();
        let mut warned = Vec::new();
        let got = read_baseline(&path, &mut |w| warned.push(w.to_string()));
        let shown = |s: String| s.replace(&path.display().to_string(), "FILE");
        let got = got.map_err(|e| shown(format!("{e} / hint: {}", e.hint().unwrap_or_default())));
        (got, warned.into_iter().map(shown).collect())
    }

    #[test]
    fn a_bad_document_is_located_by_line_and_column() {
        let (got, _) = read("{\n  \"url\": \"http://x\",\n  \"api\": 7\n}\n");
        let e = got.unwrap_err();
        assert!(e.starts_with("FILE:3:10: not a kiln bench result: "), "{e}");
        assert!(
            e.contains("hint: record one with `kiln bench --json > FILE`"),
            "{e}"
        );
    }

    #[test]
    fn a_stream_without_a_bench_event_says_why_the_run_failed() {
        let stream = concat!(
            r#"{"schema":1,"event":"note","text":"Benchmarking"}"#,
            "\n",
            r#"{"event":"error","message":"cannot reach http://127.0.0.1:9","causes":[],"hint":null,"exit_code":1}"#,
            "\n",
            r#"{"event":"outcome","ok":false,"exit_code":1}"#,
            "\n"
        );
        let e = read(stream).0.unwrap_err();
        assert!(
            e.starts_with("FILE is a kiln JSON-lines stream without a `bench` event: the run that wrote it failed: cannot reach http://127.0.0.1:9"),
            "{e}"
        );
    }

    #[test]
    fn a_bench_event_that_is_not_a_report_is_located_on_its_line() {
        let stream = "{\"schema\":1,\"event\":\"note\",\"text\":\"x\"}\n{\"event\":\"bench\",\"report\":{\"url\":1}}\n{\"ev";
        let (got, warned) = read(stream);
        let e = got.unwrap_err();
        assert!(e.starts_with("FILE:2:"), "{e}");
        assert!(e.contains(": not a kiln bench result: invalid type"), "{e}");
        assert_eq!(warned.len(), 1, "{warned:?}");
        assert!(
            warned[0].starts_with("FILE:3: skipped a line"),
            "{warned:?}"
        );
    }

    /// Two million torn lines are one warning, not two million (#47): how many, and where the
    /// first and the last are.
    #[test]
    fn many_torn_lines_are_one_warning_with_their_count_and_where() {
        let torn = "{\"url\": \"http://x\", \"ap\n".repeat(3000);
        let stream = format!("{{\"schema\":1,\"event\":\"note\",\"text\":\"x\"}}\n{torn}");
        let history = format!("{{\"url\": 1}}\n\n{torn}");
        for (text, count, first, last) in [(stream, 3000, 2, 3001), (history, 3001, 1, 3002)] {
            let (got, warned) = read(&text);
            assert!(got.is_err());
            assert_eq!(
                warned.len(),
                1,
                "{} warnings: {:?}",
                warned.len(),
                &warned[..2]
            );
            assert!(
                warned[0].starts_with(&format!(
                    "FILE: skipped {count} lines that are not whole JSON records (torn by a crash or a full disk?), the first at line {first}, the last at line {last}: "
                )),
                "{}",
                warned[0]
            );
        }
    }

    #[test]
    fn a_history_without_a_whole_record_names_its_last_line() {
        let e = read("{\"url\": 1}\n\n{\"url\": 2}\n").0.unwrap_err();
        assert!(e.starts_with("FILE:3:"), "{e}");
    }

    #[test]
    fn a_baseline_median_that_was_not_measured_is_refused() {
        let path = Path::new("base.json");
        for bad in [0.0, -0.0, -5.0, 1e-300, 5e-324, f64::NAN, f64::INFINITY] {
            let e = check_median(bad, "decode tok/s", path).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("the baseline base.json has a median decode tok/s of"),
                "{bad}: {e}"
            );
            assert!(
                e.hint()
                    .unwrap_or_default()
                    .contains("at least 0.001 tok/s"),
                "{bad}"
            );
        }
        for good in [MIN_MEDIAN, 0.5, 57.3, 1e6] {
            assert!(check_median(good, "e2e tok/s", path).is_ok(), "{good}");
        }
    }

    /// Two launches of the same llama-server settings, as /props answers them (tools/server/
    /// server-context.cpp get_res_props, trimmed): they differ only in what is per launch.
    fn props(marker: &str, sleeping: bool, n_ctx: u64, slots: u64) -> Value {
        serde_json::json!({
            "default_generation_settings": {"params": {"seed": 4_294_967_295_u64, "top_k": 40}, "n_ctx": n_ctx},
            "total_slots": slots,
            "model_alias": "tiny",
            "model_path": "/m/tiny.gguf",
            "media_marker": marker,
            "build_info": "b1-abc",
            "is_sleeping": sleeping,
        })
    }

    fn props_hash(v: Value) -> (String, std::collections::BTreeMap<String, String>) {
        let get = move |p: &str| (p == "/props").then(|| v.clone());
        let (_, _, hash, settings) =
            super::super::protocol::fingerprint(crate::bench::Api::Openai, &get);
        (hash, settings)
    }

    #[test]
    fn the_fingerprint_leaves_out_what_each_launch_draws_anew() {
        assert_eq!(LLAMA_PROPS_PER_LAUNCH, ["media_marker", "is_sleeping"]);
        let first = props_hash(props("<__media_a8Xq01__>", false, 4096, 1));
        let second = props_hash(props("<__media_Zt7Pw3__>", true, 4096, 1));
        assert_eq!(first, second, "media_marker and is_sleeping are per launch");
        assert_ne!(
            first.0,
            props_hash(props("<__media_a8Xq01__>", false, 8192, 1)).0,
            "n_ctx"
        );
        assert_ne!(
            first.0,
            props_hash(props("<__media_a8Xq01__>", false, 4096, 4)).0,
            "slots"
        );
    }

    #[test]
    fn launch_flags_that_say_where_it_listens_are_not_settings() {
        let argv = |port: &str, t: &str| -> Vec<String> {
            [
                "llama-server",
                "-m",
                "/m/tiny.gguf",
                "--host",
                "127.0.0.1",
                "--port",
                port,
                "-t",
                t,
            ]
            .iter()
            .map(ToString::to_string)
            .collect()
        };
        let kept = |a: Vec<String>| -> Vec<(String, String)> {
            super::super::launch_settings(&a)
                .into_iter()
                .filter(|(f, _)| !is_per_launch_flag(f))
                .collect()
        };
        for flag in ["--port", "--host", "--pid", "--log-file"] {
            assert!(is_per_launch_flag(flag), "{flag}");
        }
        assert!(!is_per_launch_flag("-t") && !is_per_launch_flag("-ngl"));
        assert_eq!(kept(argv("40123", "2")), kept(argv("40777", "2")));
        assert_ne!(kept(argv("40123", "2")), kept(argv("40123", "4")));
    }
}
