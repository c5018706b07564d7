//! What a sweep will cost, before it starts: launches and tokens from the search's plan, priced
//! with this recipe's own past figures (the launches and measurements of earlier `kiln tune`
//! runs, kept in `tune/<recipe>/*.json`, else the last `kiln up` report: ready time and bench).
//! `kiln tune --dry-run` prints it and stops; a real run prints it first. `--budget` takes a
//! number of variants or a time (`30m`).

use std::path::Path;
use std::time::Duration;

use super::{race, Method, Rung};
use crate::bench::ab;

/// `--budget`: at most this many variants, or stop launching once this much time has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Budget {
    Variants(usize),
    Time(Duration),
}

impl Budget {
    /// The variant count, when the budget is one.
    pub(crate) fn variants(self) -> Option<usize> {
        match self {
            Budget::Variants(n) => Some(n),
            Budget::Time(_) => None,
        }
    }

    /// `--budget`'s value, if given, as a usage error that says what to write.
    pub(crate) fn from_flag(b: Option<&str>) -> crate::error::Result<Option<Budget>> {
        b.map(|b| {
            Budget::parse(b).map_err(|e| {
                crate::error::Error::usage(
                    format!("`--budget {b}`: {e}"),
                    Some("write a count (`--budget 4`) or a time (`--budget 30m`)".into()),
                )
            })
        })
        .transpose()
    }

    pub(crate) fn parse(s: &str) -> std::result::Result<Budget, String> {
        if let Ok(n) = s.trim().parse::<usize>() {
            return if n == 0 {
                Err("a budget of 0 variants measures nothing".into())
            } else {
                Ok(Budget::Variants(n))
            };
        }
        crate::units::parse_duration(s)
            .map(Budget::Time)
            .map_err(|e| format!("{e}; or a number of variants"))
    }
}

/// This recipe's past figures: what a launch cost besides its measurements (start to ready and
/// its stop), what judging a variant cost (verdicts and greedy A/B), and decode tok/s.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct History {
    pub launch_s: Vec<f64>,
    /// Seconds judging one variant took; none from a `kiln up` report (then the A/B is priced as
    /// tokens).
    pub judge_s: Vec<f64>,
    /// Decode rates, each with the tokens it was measured over (the estimate's rate is their
    /// token-weighted harmonic mean: total tokens over total time).
    pub tok_s: Vec<(f64, f64)>,
    /// Where they came from, for the user.
    pub source: String,
    /// What was read back but not used: a file that is not kiln's JSON, figures out of range.
    pub warnings: Vec<String>,
    /// Figures refused so far (counted into one warning).
    dropped: usize,
}

/// One warning for the files that are not readable JSON (however many: a directory of two
/// million is one line), naming the first by name.
fn unreadable(mut paths: Vec<std::path::PathBuf>) -> Option<String> {
    paths.sort();
    let first = paths.first()?.display();
    Some(match paths.len() {
        1 => format!("{first} is not a readable JSON file: the estimate leaves it out"),
        n => format!(
            "{n} files are not readable JSON files (the first: {first}): the estimate leaves them out"
        ),
    })
}

impl History {
    /// Read this profile's last tune result in `tune_dir`, else every tune result there (the same
    /// recipe, other settings); what they still lack (launches, a rate) comes from `report`
    /// (`kiln up`'s JSON).
    pub(crate) fn read(tune_dir: &Path, profile: &str, report: &Path) -> History {
        let mut h = History::default();
        let warnings = std::cell::RefCell::new(Vec::new());
        let read = |path: &Path| {
            if !path.exists() {
                return None;
            }
            // Regular files only, bounded: a FIFO or /dev/zero here is refused, never waited on.
            let v = crate::bounded::read_io(path, crate::bounded::INDEX_CAP)
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
            if v.is_none() {
                warnings.borrow_mut().push(path.to_path_buf());
            }
            v
        };
        let complete = |h: &History| !h.launch_s.is_empty() && !h.tok_s.is_empty();
        let own = tune_dir.join(format!("{profile}.json"));
        if let Some(v) = read(&own) {
            h.add_tune_result(&v);
            if complete(&h) {
                h.source = format!(
                    "{} past launch(es) of `{profile}` in its last tune result",
                    h.launch_s.len()
                );
                h.warnings.extend(unreadable(warnings.take()));
                return h.with_dropped();
            }
        }
        let mut files = 0;
        for entry in std::fs::read_dir(tune_dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "json") || path == own {
                continue;
            }
            if let Some(v) = read(&path) {
                files += 1;
                h.add_tune_result(&v);
            }
        }
        if complete(&h) {
            h.source = format!(
                "{} past launch(es) in {files} tune result(s) of this recipe",
                h.launch_s.len()
            );
            h.warnings.extend(unreadable(warnings.take()));
            return h.with_dropped();
        }
        // What the tune results lack (a run whose every variant was disqualified measured no
        // rate), from the last `kiln up` report.
        let Some(v) = read(report) else {
            h.warnings.extend(unreadable(warnings.take()));
            return h.with_dropped();
        };
        let launches_known = !h.launch_s.is_empty();
        if !launches_known {
            // Its stop and a verdict request: ~0.5 s.
            h.launch_s
                .extend(seconds(&v["ready_after_s"]).map(|r| r + 0.5));
        }
        if h.tok_s.is_empty() {
            let bench = &v["bench"];
            let decode = bench["decode_tok_s"]["median"].as_f64();
            let rate = decode.or_else(|| bench["e2e_tok_s"]["median"].as_f64());
            let rate = rate.map(serde_json::Value::from).as_ref().and_then(rate_of);
            h.tok_s.extend(rate.map(|r| (1.0, r)));
        }
        if complete(&h) {
            h.source = if launches_known {
                format!(
                    "{} past launch(es) in this recipe's tune results, tok/s from the last `kiln up` report",
                    h.launch_s.len()
                )
            } else {
                format!("the last `kiln up` report ({})", report.display())
            };
        }
        if !launches_known
            && v["ready_after_s"].is_number()
            && seconds(&v["ready_after_s"]).is_none()
        {
            h.dropped += 1;
        }
        h.warnings.extend(unreadable(warnings.take()));
        h.with_dropped()
    }

    /// One warning for the figures [`seconds`] and [`rate_of`] refused.
    fn with_dropped(mut self) -> History {
        if self.dropped > 0 {
            self.warnings.push(format!(
                "{} figure(s) read back from past results are not finite, negative or out of range: the estimate leaves them out",
                self.dropped
            ));
        }
        self
    }

    /// A tune result's launches (what each cost besides its measurements), judging (its launches'
    /// judging over its variants) and measurements.
    fn add_tune_result(&mut self, v: &serde_json::Value) {
        let mut judged = 0.0;
        for l in v["launch_records"].as_array().into_iter().flatten() {
            let phases = ["ready_s", "qualify_s", "stop_s"].map(|k| seconds(&l[k]));
            self.dropped += ["ready_s", "qualify_s", "stop_s"]
                .iter()
                .filter(|k| l[**k].is_number() && seconds(&l[**k]).is_none())
                .count();
            if let [Some(ready), qualify, stop] = phases {
                self.launch_s.push(ready + stop.unwrap_or(0.0));
                judged += qualify.unwrap_or(0.0);
            }
        }
        let variants = v["entries"].as_array().map_or(0, Vec::len);
        if variants > 0 && judged > 0.0 {
            self.judge_s.push(judged / variants as f64);
        }
        for e in v["entries"].as_array().into_iter().flatten() {
            for m in e["measurements"].as_array().into_iter().flatten() {
                let tokens = m["rung"]["max_tokens"].as_f64().unwrap_or(1.0);
                let runs = m["runs"].as_array().into_iter().flatten();
                let runs: Vec<&serde_json::Value> = runs.collect();
                // A run that decoded nothing (0 tok/s) is no figure, but nothing wrong either.
                let refused =
                    |r: &&&serde_json::Value| r.as_f64() != Some(0.0) && rate_of(r).is_none();
                self.dropped += runs.iter().filter(refused).count();
                let rates = runs.into_iter().filter_map(rate_of);
                self.tok_s
                    .extend(rates.filter(|t| *t > 0.0).map(|t| (tokens, t)));
            }
        }
    }
}

/// A duration read back from a file kiln wrote earlier: finite, non-negative and under a week,
/// else not a figure (an edited or corrupt file must not price, or panic, the estimate).
fn seconds(v: &serde_json::Value) -> Option<f64> {
    v.as_f64()
        .filter(|s| s.is_finite() && (0.0..=7.0 * 86_400.0).contains(s))
}

/// A tok/s read back: finite, positive and under a billion.
fn rate_of(v: &serde_json::Value) -> Option<f64> {
    v.as_f64().filter(|r| r.is_finite() && *r > 0.0 && *r < 1e9)
}

/// Total tokens over total time.
fn rate(v: &[(f64, f64)]) -> Option<f64> {
    let tokens: f64 = v.iter().map(|(n, _)| n).sum();
    let seconds: f64 = v.iter().map(|(n, r)| n / r).sum();
    (seconds > 0.0).then(|| tokens / seconds)
}

fn median(v: &[f64]) -> Option<f64> {
    crate::bench::stats::summarize(v).map(|s| s.median)
}

/// The plan of a search, priced.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Estimate {
    pub variants: usize,
    /// Launches the plan makes at most (the race and the grid: one per launch key).
    pub launches: usize,
    /// Tokens generated: warm-ups and measured runs, and the A/B where no past judging prices it.
    pub tokens: u64,
    /// Seconds a launch costs besides its measurements: start, judging its variants, stop.
    pub launch_s: Option<f64>,
    pub tok_s: Option<f64>,
    pub source: String,
}

impl Estimate {
    /// The search's first lines: the priced estimate, a time budget it exceeds, the per-request
    /// knobs varied inside one launch.
    pub(crate) fn announcement(
        &self,
        what: &str,
        budget: Option<Budget>,
        api: crate::recipe::Api,
        request: &std::collections::BTreeSet<String>,
    ) -> Vec<String> {
        let mut lines = vec![format!("tune {what}: {}", self.line())];
        if let (Some(Budget::Time(b)), Some(w)) = (budget, self.wall()) {
            if w > b {
                lines.push(format!(
                    "the estimate is over --budget {}: no launch starts after it",
                    human_duration(b)
                ));
            }
        }
        if !request.is_empty() {
            let keys: Vec<String> = request
                .iter()
                .filter_map(|k| super::knobs::find(api, k))
                .map(|k| format!("{} ({})", k.key, k.what))
                .collect();
            lines.push(format!(
                "per request, inside one launch: {}",
                keys.join(", ")
            ));
        }
        lines
    }

    /// `keys` launch keys over `variants` variants (per-request knobs share a launch).
    pub(crate) fn plan(
        method: Method,
        variants: usize,
        keys: usize,
        full: Rung,
        ab_tokens: u32,
        history: &History,
    ) -> Estimate {
        let per_run = |r: Rung| u64::from(r.runs * r.max_tokens + r.warmup * r.max_tokens.min(64));
        // Judging priced by the past seconds it took, else the A/B's tokens.
        let judge_s = median(&history.judge_s);
        let ab = if judge_s.is_some() {
            0
        } else {
            u64::from(ab_tokens) * ab::PROMPTS.len() as u64
        };
        let n = variants as u64;
        let (launches, tokens) = match method {
            Method::Grid => (keys, n * (ab + per_run(full))),
            Method::Race => {
                let screen = race::screen_rung(full);
                // Each challenger: its screen, and a paired round with the leader (two more
                // screens, `race::MAX_ROUNDS`) in about half the duels (18 of 35 in the H200's
                // seven recorded races, under these rules); the winner: the overlap check's
                // screen and the full rung.
                let finish = per_run(screen) + per_run(Rung { warmup: 0, ..full });
                (keys, n * (ab + 2 * per_run(screen)) + finish)
            }
            Method::Halving => {
                let mut left = variants;
                let mut launches = 0;
                let mut tokens = n * ab;
                for r in super::rungs(Method::Halving, variants, full) {
                    launches += left;
                    tokens += left as u64 * per_run(r);
                    left = left.div_ceil(2).max(1);
                }
                (launches, tokens)
            }
        };
        Estimate {
            variants,
            launches,
            tokens,
            // A launch's price: its start and stop, and judging the variants it serves.
            launch_s: median(&history.launch_s)
                .map(|l| l + judge_s.unwrap_or(0.0) * variants as f64 / launches.max(1) as f64),
            tok_s: rate(&history.tok_s),
            source: history.source.clone(),
        }
    }

    /// The grid's plan with every launch key launched `n` times (`--launches N`): as many
    /// launches and tokens again each round; a launch's price (its start, stop and the judging
    /// of its variants) is the same.
    pub(crate) fn relaunched(self, n: u32) -> Estimate {
        Estimate {
            launches: self.launches * n as usize,
            tokens: self.tokens * u64::from(n),
            ..self
        }
    }

    /// The expected wall time, when there is a past figure to price it with.
    pub(crate) fn wall(&self) -> Option<Duration> {
        let (launch, tok_s) = (self.launch_s?, self.tok_s?);
        let s = self.launches as f64 * launch + self.tokens as f64 / tok_s.max(1e-3);
        // Saturates: no figure, however large, panics the conversion.
        Some(Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX))
    }

    /// "8 variants, 8 launches × ~5.1 s + ~41k tokens at ~550 tok/s ≈ 2.3 min (from ...)".
    pub(crate) fn line(&self) -> String {
        let head = format!("{} variant(s), {} launch(es)", self.variants, self.launches);
        match (self.launch_s, self.tok_s, self.wall()) {
            (Some(r), Some(t), Some(w)) => format!(
                "{head} × ~{r:.1} s + ~{} tokens at ~{t:.0} tok/s ≈ {} (from {})",
                human_tokens(self.tokens),
                human_range(w),
                self.source
            ),
            _ => format!(
                "{head} + ~{} tokens; no past launch of this recipe to time them (`kiln up` it once)",
                human_tokens(self.tokens)
            ),
        }
    }
}

/// What the walls of searches the estimate was not fitted to came to, as a multiple of the
/// estimate printed before each: 0.80× to 1.54× over the nine H200 runs in BENCHMARKS.md
/// ("The estimate out of sample"), rounded outward to 0.05. The printed range is the estimate
/// times these.
pub(crate) const OUT_OF_SAMPLE: (f64, f64) = (0.80, 1.55);

/// "about 40–78 s": the estimate `w` widened by [`OUT_OF_SAMPLE`]; one unit when both ends share it.
pub(crate) fn human_range(w: Duration) -> String {
    let scale = |k: f64| Duration::try_from_secs_f64(w.as_secs_f64() * k).unwrap_or(Duration::MAX);
    let (lo, hi) = (
        human_duration(scale(OUT_OF_SAMPLE.0)),
        human_duration(scale(OUT_OF_SAMPLE.1)),
    );
    match (lo.split_once(' '), hi.split_once(' ')) {
        (Some((a, unit_a)), Some((b, unit_b))) if unit_a == unit_b => {
            format!("about {a}–{b} {unit_b}")
        }
        _ => format!("about {lo}–{hi}"),
    }
}

fn human_tokens(t: u64) -> String {
    if t >= 10_000 {
        format!("{}k", (t + 500) / 1000)
    } else {
        t.to_string()
    }
}

pub(crate) fn human_duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.1} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> Rung {
        Rung {
            warmup: 2,
            runs: 5,
            max_tokens: 2048,
        }
    }

    #[test]
    fn budgets_are_counts_or_times() {
        assert_eq!(Budget::parse("4"), Ok(Budget::Variants(4)));
        assert_eq!(
            Budget::parse("30m"),
            Ok(Budget::Time(Duration::from_secs(1800)))
        );
        assert!(Budget::parse("0").is_err());
        assert!(Budget::parse("soon").is_err());
    }

    #[test]
    fn a_profiles_own_tune_result_prices_it_before_the_other_profiles_and_the_report() {
        let dir = tempfile::tempdir().unwrap();
        let result = |ready: f64, tok_s: f64| {
            serde_json::json!({
                "launch_records": [{"ready_s": ready, "qualify_s": 1.5, "stop_s": 0.5}],
                "entries": [{"measurements": [
                    {"rung": {"max_tokens": 256}, "runs": [tok_s, tok_s / 2.0]}
                ]}],
            })
            .to_string()
        };
        let tune = dir.path().join("tune");
        std::fs::create_dir(&tune).unwrap();
        std::fs::write(tune.join("spec.json"), result(8.0, 450.0)).unwrap();
        std::fs::write(tune.join("tuned.json"), result(2.0, 750.0)).unwrap();
        let report = dir.path().join("report.json");
        std::fs::write(
            &report,
            r#"{"ready_after_s": 4.0, "bench": {"decode_tok_s": {"median": 700.0}}}"#,
        )
        .unwrap();
        let own = History::read(&tune, "spec", &report);
        assert_eq!(
            (&own.launch_s, &own.judge_s, &own.tok_s),
            (
                &vec![8.5],
                &vec![1.5],
                &vec![(256.0, 450.0), (256.0, 225.0)]
            )
        );
        // The rate is tokens over time: 512 tokens in 1.7 s, not the median run.
        assert!((rate(&own.tok_s).unwrap() - 300.0).abs() < 1e-9);
        assert_eq!(
            own.source,
            "1 past launch(es) of `spec` in its last tune result"
        );
        let others = History::read(&tune, "baseline", &report);
        assert_eq!(others.launch_s.len(), 2);
        assert!(others
            .source
            .ends_with("in 2 tune result(s) of this recipe"));
        // Judging is priced by its past seconds, not again as A/B tokens.
        let priced = Estimate::plan(Method::Grid, 2, 2, full(), 64, &own);
        let unjudged = History {
            judge_s: vec![],
            ..own.clone()
        };
        let by_tokens = Estimate::plan(Method::Grid, 2, 2, full(), 64, &unjudged);
        assert_eq!(
            by_tokens.tokens - priced.tokens,
            2 * 64 * ab::PROMPTS.len() as u64
        );
        assert_eq!(priced.launch_s, Some(10.0));
        // A result whose every variant was disqualified has no rate: the others give it.
        let eagle = r#"{"launch_records": [{"ready_s": 3.0}], "entries": [{}]}"#;
        std::fs::write(tune.join("eagle.json"), eagle).unwrap();
        let no_rate = History::read(&tune, "eagle", &dir.path().join("none.json"));
        assert_eq!(
            (no_rate.launch_s.len(), no_rate.tok_s.len()),
            (3, 4),
            "{no_rate:?}"
        );
        let none = History::read(&dir.path().join("none"), "spec", &report);
        assert_eq!((none.launch_s, none.tok_s), (vec![4.5], vec![(1.0, 700.0)]));
    }

    #[test]
    fn figures_read_back_out_of_range_are_ignored_and_never_panic_the_estimate() {
        let dir = tempfile::tempdir().unwrap();
        let bad = serde_json::json!({
            "launch_records": [{"ready_s": -1e6}, {"ready_s": 1e308}],
            "entries": [{"measurements": [{"rung": {"max_tokens": 256}, "runs": [-5.0, 1e300]}]}],
        })
        .to_string();
        std::fs::write(dir.path().join("p.json"), bad).unwrap();
        let report = dir.path().join("report.json");
        std::fs::write(
            &report,
            r#"{"ready_after_s": -3.0, "bench": {"decode_tok_s": {"median": -1.0}}}"#,
        )
        .unwrap();
        std::fs::write(dir.path().join("junk.json"), "not json").unwrap();
        let h = History::read(dir.path(), "p", &report);
        assert!(h.launch_s.is_empty() && h.tok_s.is_empty(), "{h:?}");
        // Dropped, and said: two ready_s, two runs, the report's ready_after_s; the junk file.
        assert!(
            h.warnings
                .iter()
                .any(|w| w.starts_with("5 figure(s) read back"))
                && h.warnings.iter().any(|w| w.ends_with(
                    "junk.json is not a readable JSON file: the estimate leaves it out"
                )),
            "{:?}",
            h.warnings
        );
        let huge = History {
            launch_s: vec![6e5],
            judge_s: vec![],
            tok_s: vec![(1.0, 1e-300)],
            source: "x".into(),
            ..History::default()
        };
        let e = Estimate::plan(Method::Grid, 8, 8, full(), 64, &huge);
        assert!(e.wall().is_some());
        e.line();
    }

    /// A tune directory of 3,000 files that are not JSON is one warning with their count (#47,
    /// the torn-lines class): not 3,000 lines before the estimate.
    #[test]
    fn many_unreadable_results_are_one_warning() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..3000 {
            std::fs::write(dir.path().join(format!("junk-{i:04}.json")), "{\"torn").unwrap();
        }
        let h = History::read(dir.path(), "p", &dir.path().join("report.json"));
        assert_eq!(h.warnings.len(), 1, "{:?}", &h.warnings[..2]);
        assert!(
            h.warnings[0].starts_with("3000 files are not readable JSON files (the first: ")
                && h.warnings[0].ends_with("junk-0000.json): the estimate leaves them out"),
            "{}",
            h.warnings[0]
        );
    }

    #[test]
    fn the_estimate_is_a_range_as_wide_as_its_measured_out_of_sample_error() {
        // The issue's H200 runs: a race estimated at 50 s took 70.1 s, a grid at 3.3 min 4.2 min.
        let race = human_range(Duration::from_secs(50));
        assert_eq!(race, "about 40–78 s");
        assert!(70.1 >= 50.0 * OUT_OF_SAMPLE.0 && 70.1 <= 50.0 * OUT_OF_SAMPLE.1);
        assert_eq!(human_range(Duration::from_secs(198)), "about 2.6–5.1 min");
        assert_eq!(human_range(Duration::from_secs(100)), "about 80 s–2.6 min");
        // Saturates, no panic.
        human_range(Duration::MAX);
    }

    #[test]
    fn the_seeds_stack_is_priced_by_its_launches() {
        // The issue's example: ~9 minutes a launch, 8 variants.
        let h = History {
            launch_s: vec![540.0],
            judge_s: vec![],
            tok_s: vec![(1.0, 90.0)],
            source: "a test".into(),
            ..History::default()
        };
        let grid = Estimate::plan(Method::Grid, 8, 8, full(), 64, &h);
        let race = Estimate::plan(Method::Race, 8, 8, full(), 64, &h);
        assert_eq!((grid.launches, race.launches), (8, 8));
        assert!(race.tokens * 2 < grid.tokens);
        let line = grid.line();
        assert!(
            line.starts_with("8 variant(s), 8 launch(es) × ~540.0 s + ~85k tokens at ~90 tok/s ≈ "),
            "{line}"
        );
        assert!(
            line.ends_with(" h (from a test)") || line.contains(" min "),
            "{line}"
        );
        // `--launches 3`: three times the launches and tokens, each launch priced the same.
        let thrice = grid.clone().relaunched(3);
        assert_eq!(
            (thrice.launches, thrice.tokens, thrice.launch_s),
            (24, 3 * grid.tokens, grid.launch_s)
        );
        let (one, three) = (grid.wall().unwrap(), thrice.wall().unwrap());
        assert!((three.as_secs_f64() - 3.0 * one.as_secs_f64()).abs() < 1e-6);
        let halving = Estimate::plan(Method::Halving, 8, 8, full(), 64, &h);
        assert_eq!(halving.launches, 8 + 4 + 2 + 1);
        let none = Estimate::plan(Method::Race, 2, 1, full(), 64, &History::default());
        assert!(none.line().contains("no past launch"), "{}", none.line());
    }
}
