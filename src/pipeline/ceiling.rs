//! The decode ceiling of a build: llama.cpp's `llama-bench -o json` output (a profile's
//! `ceiling = { llama_bench = "PATH" }`), side by side with the served decode figure. A missing
//! file is said plainly when the step that writes it should have run; when that step is off on
//! this host (its `when` is false: llama-bench is opt-in) the report notes it and the run's end
//! says nothing. A malformed file is an error that names the file, line and column.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The figure llama-bench measured for one test.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figure {
    /// `tg2048`: generation of `n_gen` tokens after no prompt.
    pub test: String,
    pub n_gen: u64,
    pub tok_s: f64,
    pub stddev_tok_s: f64,
}

/// The ceiling part of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Ceiling {
    pub source: &'static str,
    pub path: PathBuf,
    /// `None`: the file is not there.
    pub figure: Option<Figure>,
    /// The served decode tok/s (median) it is compared with, from the bench launch.
    pub served_decode_tok_s: Option<f64>,
    /// served / ceiling.
    pub ratio: Option<f64>,
    /// The file is not there because the step that writes it is off on this host:
    /// `step `llama-bench` is skipped (`when = "…"` is false on this host)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

impl Ceiling {
    /// The ceiling named by `c`, its test the one closest to `max_tokens` generated tokens.
    pub fn read(c: &crate::recipe::Ceiling, max_tokens: u32) -> Result<Ceiling> {
        let crate::recipe::Ceiling::LlamaBench(path) = c;
        Ok(Ceiling {
            source: "llama-bench",
            path: path.clone(),
            figure: read_llama_bench(path, max_tokens)?,
            served_decode_tok_s: None,
            ratio: None,
            skipped: None,
        })
    }

    /// Note why the file is missing when the recipe step that writes it (its `outputs` or
    /// `check.paths` name the file) is skipped by its `when`, the plan's own rule.
    pub(super) fn note_a_skipped_writer(&mut self, s: super::Session) {
        if self.figure.is_some() {
            return;
        }
        self.skipped = s
            .recipe
            .steps
            .iter()
            .filter(|step| writes(step, &self.path))
            .find_map(|step| {
                crate::engine::plan::skipped_by_when(s.recipe, step, s.facts)
                    .map(|why| format!("step `{}` is skipped ({why})", step.id))
            });
    }

    /// Whether the run's end says this line: not when the ceiling's step is off on this host.
    pub fn worth_saying(&self) -> bool {
        self.skipped.is_none()
    }

    /// Compare with the served decode figure.
    pub fn compare(&mut self, served: Option<f64>) {
        self.served_decode_tok_s = served;
        self.ratio = served
            .zip(self.figure.as_ref())
            .filter(|(_, f)| f.tok_s > 0.0)
            .map(|(s, f)| s / f.tok_s);
    }

    /// `served 779.5 tok/s (bench launch) · ceiling llama-bench tg2048 893.6 tok/s · 0.87×`.
    pub fn line(&self, served_from: &str) -> String {
        let Some(f) = &self.figure else {
            if let Some(why) = &self.skipped {
                return format!("no ceiling: {why}");
            }
            return format!(
                "no ceiling: {} is not there (the step that writes it did not run)",
                self.path.display()
            );
        };
        let ceiling = format!(
            "ceiling {} {} {:.1} tok/s (sd {:.1})",
            self.source, f.test, f.tok_s, f.stddev_tok_s
        );
        match (self.served_decode_tok_s, self.ratio) {
            (Some(s), Some(r)) => {
                format!("served {s:.1} tok/s ({served_from}) · {ceiling} · {r:.3}×")
            }
            _ => format!("no served decode figure to compare · {ceiling}"),
        }
    }
}

/// Whether `step` writes `path`: one of its outputs (which default to its `check.paths`).
fn writes(step: &crate::recipe::Step, path: &Path) -> bool {
    step.outputs.iter().any(|o| o == path)
        || matches!(&step.check, Some(crate::recipe::Check::Paths(p)) if p.iter().any(|o| o == path))
}

/// One entry of llama-bench's JSON array (other fields ignored).
#[derive(Deserialize)]
struct Entry {
    n_prompt: u64,
    n_gen: u64,
    #[serde(default)]
    n_depth: u64,
    avg_ts: f64,
    stddev_ts: f64,
}

/// The generation test (no prompt, no depth) whose `n_gen` is closest to `max_tokens`; `None`
/// when the file does not exist.
pub fn read_llama_bench(path: &Path, max_tokens: u32) -> Result<Option<Figure>> {
    if !path.exists() {
        return Ok(None);
    }
    let text = crate::bounded::read_text(path, "llama-bench's JSON", crate::bounded::METRICS_CAP)?;
    parse(&text, max_tokens).map(Some).map_err(|(what, hint)| {
        Error::other(format!("{}{what}", path.display()), Some(hint.into()))
    })
}

/// The figure from llama-bench's JSON text; `Err((": …", hint))` located by `:LINE:COL`.
fn parse(text: &str, max_tokens: u32) -> std::result::Result<Figure, (String, &'static str)> {
    let entries: Vec<Entry> = serde_json::from_str(text).map_err(|e| {
        (
            format!(":{}:{}: not llama-bench's JSON: {e}", e.line(), e.column()),
            "the ceiling file is llama-bench's `-o json` output: an array of tests with n_prompt, n_gen, avg_ts, stddev_ts",
        )
    })?;
    let best = entries
        .iter()
        .filter(|e| e.n_prompt == 0 && e.n_depth == 0 && e.n_gen > 0)
        .min_by_key(|e| e.n_gen.abs_diff(u64::from(max_tokens)))
        .ok_or((
            ": no generation test (n_prompt 0, n_gen > 0) among its entries".to_string(),
            "run llama-bench with `-p 0 -n N` (N near the bench's max_tokens)",
        ))?;
    if !best.avg_ts.is_finite() || best.avg_ts <= 0.0 {
        return Err((
            format!(
                ": test tg{} has avg_ts {}, not a rate",
                best.n_gen, best.avg_ts
            ),
            "re-run the llama-bench step",
        ));
    }
    Ok(Figure {
        test: format!("tg{}", best.n_gen),
        n_gen: best.n_gen,
        tok_s: best.avg_ts,
        stddev_tok_s: best.stddev_ts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const H200: &str = include_str!("../../tests/fixtures/gpu-h200-tune/llama-bench.json");

    #[test]
    fn the_h200_file_gives_the_test_closest_to_max_tokens() {
        let f = parse(H200, 2048).unwrap();
        assert_eq!(
            (f.test.as_str(), f.n_gen, f.tok_s, f.stddev_tok_s),
            ("tg2048", 2048, 893.574_581, 0.598_99)
        );
        assert_eq!(parse(H200, 100).unwrap().test, "tg128");
        let mut c = Ceiling {
            source: "llama-bench",
            path: "/x/llama-bench.json".into(),
            figure: Some(f),
            served_decode_tok_s: None,
            ratio: None,
            skipped: None,
        };
        c.compare(Some(752.2));
        assert_eq!(
            c.line("bench launch"),
            "served 752.2 tok/s (bench launch) · ceiling llama-bench tg2048 893.6 tok/s (sd 0.6) · 0.842×"
        );
    }

    #[test]
    fn a_missing_file_its_skipped_step_writes_is_noted_not_said() {
        let dir = tempfile::tempdir().unwrap();
        let ceiling_of = |overrides: &[(String, String)]| {
            let (recipe, paths, facts) = super::super::header::opt_in_recipe(dir.path(), overrides);
            let s = super::super::Session {
                recipe: &recipe,
                paths: &paths,
                facts: &facts,
            };
            let spec = recipe.profiles["tuned"].ceiling.clone().unwrap();
            let mut c = Ceiling::read(&spec, 2048).unwrap();
            c.note_a_skipped_writer(s);
            c
        };
        // Off by default: the report notes why, the run's end says nothing.
        let off = ceiling_of(&[]);
        assert!(!off.worth_saying());
        assert_eq!(
            off.line("bench launch"),
            "no ceiling: step `bench` is skipped (`when = \"var.flag == on\"` is false on this host)"
        );
        // Asked for and missing: said plainly.
        let on = ceiling_of(&[("flag".to_string(), "on".to_string())]);
        assert!(on.worth_saying());
        assert!(
            on.line("bench launch")
                .ends_with("bench.json is not there (the step that writes it did not run)"),
            "{}",
            on.line("bench launch")
        );
    }

    #[test]
    fn a_malformed_file_is_located_and_a_missing_one_is_none() {
        let (what, _) = parse("[{\"n_prompt\": 0,\n \"n_gen\": x}]", 2048).unwrap_err();
        assert!(what.starts_with(":2:"), "{what}");
        let (what, _) = parse(
            "[{\"n_prompt\": 512, \"n_gen\": 0, \"avg_ts\": 1.0, \"stddev_ts\": 0.0}]",
            2048,
        )
        .unwrap_err();
        assert!(what.contains("no generation test"), "{what}");
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            read_llama_bench(&dir.path().join("none.json"), 2048).unwrap(),
            None
        );
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "[{\"n_prompt\": 0,").unwrap();
        let e = read_llama_bench(&bad, 2048).unwrap_err().to_string();
        assert!(
            e.contains(&format!("{}:1:16: not llama-bench's JSON", bad.display())),
            "{e}"
        );
    }
}
