//! `kiln tune`'s search: the variant space, the methods (the race, the grid, successive halving),
//! the ranking, and the [`Evaluate`] trait through which a search launches, judges and measures.
//! The searches are free of I/O; `evaluate` is the real evaluator (the pipeline's stages),
//! `estimate` the cost forecast from this recipe's past launches, `knobs` the table of settings a
//! server takes per request (varied inside one launch).
//!
//! The default, the race (`race.rs`), launches each variant at most once. Grid and successive
//! halving are kept for comparison: halving relaunches its survivors.

pub(crate) mod estimate;
pub(crate) mod evaluate;
pub(crate) mod knobs;
pub(crate) mod margin;
pub(crate) mod race;
pub(crate) mod render;
#[cfg(test)]
mod replay;
pub(crate) mod results;
mod sweep;

use std::collections::BTreeSet;

#[cfg(test)]
pub(crate) use sweep::search;
pub(crate) use sweep::{rungs, search_launching};

use serde::Serialize;

use crate::error::{Error, Result};

/// One setting to vary: a recipe variable (`ubatch`) or a server flag (`-ub`, `--flash-attn`).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Axis {
    pub key: String,
    pub values: Vec<String>,
}

impl Axis {
    /// `KEY=v1,v2,...`
    pub(crate) fn parse(spec: &str) -> Result<Axis> {
        let bad = |why: &str| {
            Error::usage(
                format!("`--vary {spec}`: {why}"),
                Some("write KEY=v1,v2,... (a recipe variable, or a server flag such as `--vary=-ub=256,1024`)".into()),
            )
        };
        let (key, values) = spec.split_once('=').ok_or_else(|| bad("no `=`"))?;
        let key = key.trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(bad("the key is empty or has spaces"));
        }
        let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).collect();
        if values.iter().any(String::is_empty) {
            return Err(bad("an empty value"));
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(dup) = values.iter().find(|v| !seen.insert(v.as_str())) {
            return Err(bad(&format!("`{dup}` is listed twice")));
        }
        Ok(Axis {
            key: key.to_string(),
            values,
        })
    }

    /// Whether the key is a server flag (added to the profile's arguments) rather than a variable.
    pub(crate) fn is_flag(&self) -> bool {
        self.key.starts_with('-')
    }
}

/// Every `--vary`, each key once: `--vary tag=a,b --vary tag=c` is refused, not read as two
/// values of one key in one variant.
pub(crate) fn parse_axes(specs: &[String]) -> Result<Vec<Axis>> {
    let mut axes: Vec<Axis> = Vec::new();
    for spec in specs {
        let axis = Axis::parse(spec)?;
        if axes.iter().any(|a| a.key == axis.key) {
            return Err(Error::usage(
                format!(
                    "`--vary {}`: the key `{}` is varied twice",
                    crate::bench::wire::escape_controls(spec),
                    axis.key
                ),
                Some(format!(
                    "list every value once: `--vary {}=V1,V2,...`",
                    axis.key
                )),
            ));
        }
        axes.push(axis);
    }
    Ok(axes)
}

/// One point of the space: a value per axis, in axis order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(test, derive(serde::Deserialize))]
pub(crate) struct Variant {
    pub settings: Vec<(String, String)>,
}

impl Variant {
    /// The settings that need a launch of their own: every one but the per-request `request`
    /// keys. Variants with the same launch key share one server.
    pub(crate) fn launch_key(&self, request: &BTreeSet<String>) -> Variant {
        Variant {
            settings: self
                .settings
                .iter()
                .filter(|(k, _)| !request.contains(k))
                .cloned()
                .collect(),
        }
    }

    /// The per-request settings (`request` keys) with their values.
    pub(crate) fn request(&self, request: &BTreeSet<String>) -> Vec<(String, String)> {
        self.settings
            .iter()
            .filter(|(k, _)| request.contains(k))
            .cloned()
            .collect()
    }

    /// [`Variant::name`] for a terminal or a picture: control characters escaped, so an
    /// OSC/CSI sequence in a `--vary` value is shown, not obeyed, and secrets (a URL's password)
    /// redacted before anything clips it (a clipped URL would no longer be found to redact).
    pub(crate) fn shown(&self) -> String {
        self.shown_by(&crate::redact::Redactor::from_env([]))
    }

    /// [`Variant::shown`] with `redactor` (built once for many variants: building one reads
    /// the whole environment).
    pub(crate) fn shown_by(&self, redactor: &crate::redact::Redactor) -> String {
        crate::bench::wire::escape_controls(&redactor.redact(&self.name()))
    }

    pub(crate) fn name(&self) -> String {
        self.settings
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Every combination, the first axis varying slowest, built axis by axis: the tests' cross-check
/// of [`sample`]'s index decoding.
#[cfg(test)]
pub(crate) fn grid(axes: &[Axis]) -> Vec<Variant> {
    let mut out = vec![Variant { settings: vec![] }];
    for axis in axes {
        out = out
            .into_iter()
            .flat_map(|v| {
                axis.values.iter().map(move |value| {
                    let mut s = v.settings.clone();
                    s.push((axis.key.clone(), value.clone()));
                    Variant { settings: s }
                })
            })
            .collect();
    }
    out
}

/// How many variants `axes` make (saturating: 60 values on each of 11 axes do not overflow).
pub(crate) fn grid_len(axes: &[Axis]) -> u128 {
    axes.iter()
        .fold(1u128, |n, a| n.saturating_mul(a.values.len() as u128))
}

/// The `index`th variant of the grid (the first axis varying slowest), decoded in mixed radix:
/// no other variant is built.
fn grid_nth(axes: &[Axis], mut index: u128) -> Variant {
    let mut settings = vec![(String::new(), String::new()); axes.len()];
    for (slot, axis) in settings.iter_mut().zip(axes).rev() {
        let radix = (axis.values.len() as u128).max(1);
        let digit = (index % radix) as usize;
        index /= radix;
        if let Some(value) = axis.values.get(digit) {
            *slot = (axis.key.clone(), value.clone());
        }
    }
    Variant { settings }
}

/// [`sample_until`] that never stops (the tests' way to pick variants).
#[cfg(test)]
pub(crate) fn sample(axes: &[Axis], budget: Option<usize>) -> Result<Vec<Variant>> {
    sample_until(axes, budget, &|| false)
}

/// At most `budget` variants, spread evenly over the grid (first and last included), picked by
/// index so that `--budget 3` over 5 axes of 60 values builds 3 variants, not 777 million.
/// Without a budget the whole grid, refused past [`MAX_GRID`] with a hint to set one.
/// `stop` is asked as the variants are built: an interrupt is an error.
fn sample_until(
    axes: &[Axis],
    budget: Option<usize>,
    stop: &dyn Fn() -> bool,
) -> Result<Vec<Variant>> {
    let n = grid_len(axes);
    let picks: Vec<u128> = match budget {
        Some(b) if b as u128 > MAX_GRID && (b as u128) < n => {
            return Err(Error::usage(
                format!(
                "`--budget {b}` asks for more than the {MAX_GRID} variants kiln tunes in one run"
            ),
                Some(format!("set `--budget` to at most {MAX_GRID}")),
            ))
        }
        Some(b) if b >= 1 && (b as u128) < n => {
            let b = b as u128;
            if b == 1 {
                vec![0]
            } else {
                // i * (n - 1) / (b - 1), split so that it cannot overflow.
                (0..b).map(|i| spread(i, n - 1, b - 1)).collect()
            }
        }
        _ if n > MAX_GRID => {
            return Err(Error::usage(
                format!(
                    "the --vary axes make {n} variants, more than {MAX_GRID} kiln tunes in one run"
                ),
                Some("set `--budget N` to sample N of them evenly, or vary fewer values".into()),
            ))
        }
        _ => (0..n).collect(),
    };
    let mut variants = Vec::with_capacity(picks.len());
    for (n, i) in picks.into_iter().enumerate() {
        if n % STOP_EVERY == 0 && stop() {
            return Err(interrupted());
        }
        variants.push(grid_nth(axes, i));
    }
    Ok(variants)
}

/// How many variants a plan builds or counts between two looks at the interrupt flag.
pub(crate) const STOP_EVERY: usize = 1024;

/// `kiln tune`'s plan before anything launches: the variants [`sample_until`] picks and how many
/// launches they need (one per launch key, `race::launch_keys`). `stop` (the interrupt flag) is
/// asked as it goes: Ctrl-C or SIGTERM ends a plan of 100,000 variants now, not when it is done.
pub(crate) fn plan(
    axes: &[Axis],
    budget: Option<usize>,
    request: &BTreeSet<String>,
    stop: &dyn Fn() -> bool,
) -> Result<(Vec<Variant>, usize)> {
    let variants = sample_until(axes, budget, stop)?;
    let launches = race::launch_keys(&variants, request, stop).ok_or_else(interrupted)?;
    Ok((variants, launches))
}

/// Every variant's [`Variant::shown`] name (a dry run lists them), with one redactor for all
/// of them (a redactor per name took 18 s for 100,000); `stop` is asked as it goes.
pub(crate) fn shown_all(variants: &[Variant], stop: &dyn Fn() -> bool) -> Result<Vec<String>> {
    let redactor = crate::redact::Redactor::from_env([]);
    let mut names = Vec::with_capacity(variants.len());
    for (n, v) in variants.iter().enumerate() {
        if n % STOP_EVERY == 0 && stop() {
            return Err(interrupted());
        }
        names.push(v.shown_by(&redactor));
    }
    Ok(names)
}

/// The error of a plan cut short by the user.
fn interrupted() -> Error {
    Error::other(
        "`kiln tune` interrupted while planning",
        Some("nothing was launched; run it again to plan from the start".into()),
    )
}

/// The most variants tuned without `--budget N`.
pub(crate) const MAX_GRID: u128 = 100_000;

/// `i * last / steps`, floored, for `i <= steps`, without overflowing.
fn spread(i: u128, last: u128, steps: u128) -> u128 {
    (last / steps) * i + (last % steps) * i / steps
}

/// How long one measurement is: warm-up requests, measured runs, tokens per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(test, derive(serde::Deserialize))]
pub(crate) struct Rung {
    pub warmup: u32,
    pub runs: u32,
    pub max_tokens: u32,
}

impl Rung {
    /// The same measured requests (runs of as many tokens), whatever the warm-up before them.
    pub(crate) fn same_requests(self, other: Rung) -> bool {
        (self.runs, self.max_tokens) == (other.runs, other.max_tokens)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Method {
    /// One launch per variant: short screening runs, stop a variant once its confidence bound
    /// says it cannot win, the full benchmark for the last one standing.
    Race,
    /// Every variant gets the full benchmark.
    Grid,
    /// Successive halving down to one, which gets the full benchmark (relaunches survivors).
    Halving,
}

impl Method {
    pub(crate) fn parse(s: &str) -> Method {
        match s {
            "grid" => Method::Grid,
            "halving" => Method::Halving,
            _ => Method::Race,
        }
    }
}

/// What one measurement of a variant found (one call of [`Evaluate::measure`]).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(test, derive(serde::Deserialize))]
pub(crate) struct Measurement {
    pub rung: Rung,
    /// Median decode tok/s (end-to-end where the server streams no per-token timing).
    pub tok_s: f64,
    pub cv: f64,
    pub ttft_ms: f64,
    /// Each measured run's tok/s (the race's confidence bounds pool them).
    pub runs: Vec<f64>,
    /// The launch (1-based, in launch order) that served it: which server each figure came from.
    pub launch: usize,
    /// Other servers kiln held up (idle) while this was measured: the race keeps its leader.
    pub others_up: usize,
}

/// A variant's record through the search.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(test, derive(serde::Deserialize))]
pub(crate) struct Entry {
    pub variant: Variant,
    /// Why it cannot win: a tuning fell back or crashed, wrong greedy output, a failed launch.
    pub disqualified: Option<String>,
    /// Why the race stopped measuring it (it qualified but the data say it cannot win).
    pub out: Option<String>,
    /// Verdict lines and the A/B summary of its launch.
    pub evidence: Vec<String>,
    pub measurements: Vec<Measurement>,
}

impl Entry {
    pub(crate) fn new(variant: Variant) -> Entry {
        Entry {
            variant,
            disqualified: None,
            out: None,
            evidence: vec![],
            measurements: vec![],
        }
    }

    pub(crate) fn last(&self) -> Option<&Measurement> {
        self.measurements.last()
    }

    /// Each launch's last measurement at the entry's last rung, in launch order: one, unless
    /// the grid relaunched it (`--launches N`).
    pub(crate) fn per_launch(&self) -> Vec<&Measurement> {
        self.last()
            .map_or_else(Vec::new, |last| self.per_launch_at(last.rung))
    }

    /// Each launch's last measurement at `rung`, in launch order.
    pub(crate) fn per_launch_at(&self, rung: Rung) -> Vec<&Measurement> {
        let mut out: Vec<&Measurement> = Vec::new();
        for m in self
            .measurements
            .iter()
            .filter(|m| m.rung.same_requests(rung))
        {
            match out.iter_mut().find(|o| o.launch == m.launch) {
                Some(o) => *o = m,
                None => out.push(m),
            }
        }
        out
    }

    /// Each launch's median tok/s at `rung`, in launch order ([`Entry::per_launch_at`]).
    pub(crate) fn launch_medians_at(&self, rung: Rung) -> Vec<f64> {
        self.per_launch_at(rung).iter().map(|m| m.tok_s).collect()
    }

    /// The entry's figure: its last measurement's median tok/s, or, measured on several
    /// launches, the median of those launches' medians.
    pub(crate) fn tok_s(&self) -> Option<f64> {
        let last = self.last()?;
        crate::bench::stats::summarize(&self.launch_medians_at(last.rung)).map(|s| s.median)
    }

    /// Every run measured at `rung` (warm-ups aside), pooled over its measurements.
    pub(crate) fn runs_at(&self, rung: Rung) -> Vec<f64> {
        self.measurements
            .iter()
            .filter(|m| m.rung.same_requests(rung))
            .flat_map(|m| m.runs.iter().copied())
            .collect()
    }
}

/// A running server of the search, as the evaluator numbers them.
pub(crate) type LaunchId = usize;

/// What a search asks of the world: launch a variant's server, judge it, measure it, stop it.
/// `commands/tune.rs` hands the search the real one ([`evaluate::Evaluator`]); tests hand it a
/// model.
pub(crate) trait Evaluate {
    /// Start a server with `key`'s launch-time settings. `Err`: why it did not come up.
    fn launch(&mut self, key: &Variant) -> std::result::Result<LaunchId, String>;

    /// Judge the tunings of `launch` and, before traffic (`served` false), compare `variant`'s
    /// greedy output with the reference; problems go to `entry.disqualified`. After the benchmark
    /// (`served`), the verdicts are judged again: counters such as draft acceptance need traffic.
    fn qualify(&mut self, launch: LaunchId, variant: &Variant, served: bool, entry: &mut Entry);

    /// Benchmark `variant` (its per-request settings in every request) on `launch` at `rung`.
    fn measure(
        &mut self,
        launch: LaunchId,
        variant: &Variant,
        rung: Rung,
    ) -> std::result::Result<Measurement, String>;

    fn stop(&mut self, launch: LaunchId);

    /// Whether two servers may be up at once (the race keeps its leader up while it measures the
    /// next variant; without it the leader gets its full benchmark in its own launch at once).
    /// The race asks once its first server is up, so the answer may rest on what that one takes.
    fn can_hold_two(&self) -> bool {
        true
    }

    /// The user interrupted the search: no further launch, no measurement.
    fn interrupted(&self) -> bool {
        false
    }

    /// The time budget is spent: no further launch (what is up is still finished).
    fn out_of_time(&self) -> bool {
        false
    }

    /// A launch's variants are done with for now: `entries` is the search so far (unranked).
    /// The real evaluator writes the results file: no later failure loses launches paid for.
    fn checkpoint(&mut self, _entries: &[Entry]) {}
}

fn speed(e: &Entry) -> f64 {
    e.tok_s().unwrap_or(0.0)
}

/// Qualified entries first, by how far they got (later rungs first, then more measurements),
/// then by speed; the ones the race ruled out after those it finished.
pub(crate) fn rank(mut entries: Vec<Entry>) -> Vec<Entry> {
    entries.sort_by(|a, b| {
        let key = |e: &Entry| {
            (
                e.disqualified.is_none() && e.last().is_some(),
                e.out.is_none(),
                e.last().map_or(0, |m| m.rung.max_tokens),
                e.measurements.len(),
            )
        };
        key(b)
            .cmp(&key(a))
            .then_with(|| speed(b).total_cmp(&speed(a)))
    });
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A race's duel measures one launch several times: its figure is the last of them. The
    /// grid's `--launches 3` measures three: the median of theirs (not of every run).
    #[test]
    fn a_figure_is_the_last_measurement_of_one_launch_or_the_median_of_several_launches() {
        let rung = Rung {
            warmup: 0,
            runs: 2,
            max_tokens: 64,
        };
        let m = |launch: usize, tok_s: f64| Measurement {
            rung,
            tok_s,
            cv: 0.0,
            ttft_ms: 1.0,
            runs: vec![tok_s, tok_s],
            launch,
            others_up: 0,
        };
        let mut e = Entry::new(Variant { settings: vec![] });
        assert_eq!(e.tok_s(), None);
        e.measurements = vec![m(4, 300.0), m(4, 100.0)];
        assert_eq!((e.tok_s(), e.per_launch().len()), (Some(100.0), 1));
        e.measurements = vec![m(1, 100.0), m(5, 130.0), m(5, 90.0), m(9, 110.0)];
        assert_eq!((e.tok_s(), e.per_launch().len()), (Some(100.0), 3));
        // Another rung's measurements are not among them.
        e.measurements.push(Measurement {
            rung: Rung {
                max_tokens: 8,
                ..rung
            },
            ..m(9, 1.0)
        });
        assert_eq!(e.tok_s(), Some(1.0));
        assert_eq!(e.per_launch_at(rung).len(), 3);
    }

    #[test]
    fn axes_parse_and_reject_nonsense() {
        assert!(Axis::parse("-ub=256,1024").unwrap().is_flag());
        for bad in ["nokey", "=1,2", "a=1,,2", "a=1,1", "a b=1"] {
            assert!(Axis::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_key_varied_twice_is_refused() {
        let specs = |v: &[&str]| v.iter().map(ToString::to_string).collect::<Vec<_>>();
        let err = parse_axes(&specs(&["tag=a,b", "tag=c"])).unwrap_err();
        assert!(err.to_string().contains("`tag` is varied twice"), "{err}");
        assert_eq!(parse_axes(&specs(&["tag=a,b", "-ub=1"])).unwrap().len(), 2);
    }

    #[test]
    fn grid_is_the_product_in_order_and_the_launch_key_drops_request_settings() {
        let axes = vec![
            Axis::parse("draft_max=2,4,8,16").unwrap(),
            Axis::parse("-ub=1,2").unwrap(),
        ];
        let g = grid(&axes);
        assert_eq!(g.len(), 8);
        assert_eq!(g[0].name(), "draft_max=2 -ub=1");
        assert_eq!(g[7].name(), "draft_max=16 -ub=2");
        let s = sample(&axes, Some(3)).unwrap();
        assert_eq!(sample(&axes, None).unwrap(), g);
        let names: Vec<String> = s.iter().map(Variant::name).collect();
        assert_eq!(
            names,
            [
                "draft_max=2 -ub=1",
                "draft_max=4 -ub=2",
                "draft_max=16 -ub=2"
            ]
        );
        let request: BTreeSet<String> = ["-ub".to_string()].into();
        assert_eq!(g[1].launch_key(&request).name(), "draft_max=2");
        assert_eq!(g[1].request(&request), [("-ub".into(), "2".into())]);
    }

    /// Ctrl-C or SIGTERM while `kiln tune` plans stops the plan (#47): `stop` is asked while
    /// the variants are built and while their launch keys are counted.
    #[test]
    fn a_plan_stops_when_interrupted() {
        let values = (0..40).map(|v| v.to_string()).collect::<Vec<_>>().join(",");
        let axes = parse_axes(&[format!("a={values}"), format!("-b={values}")]).unwrap();
        let request: BTreeSet<String> = ["-b".to_string()].into();
        let (variants, launches) = plan(&axes, None, &request, &|| false).unwrap();
        assert_eq!((variants.len(), launches), (1600, 40));
        let asked = std::cell::Cell::new(0);
        let err = plan(&axes, None, &request, &|| {
            asked.set(asked.get() + 1);
            true
        })
        .expect_err("an interrupted plan is an error");
        assert_eq!(err.to_string(), "`kiln tune` interrupted while planning");
        assert_eq!(asked.get(), 1, "the first ask stops it");
        // Interrupted once the variants are built: the launch keys are not all counted.
        let variants = sample(&axes, None).unwrap();
        assert_eq!(race::launch_keys(&variants, &request, &|| true), None);
        assert_eq!(race::launch_keys(&variants, &request, &|| false), Some(40));
        // And while a dry run names them.
        assert!(shown_all(&variants, &|| true).is_err());
        let shown = shown_all(&variants, &|| false).unwrap();
        assert_eq!(shown[1], variants[1].shown());
    }

    /// `--budget 100000000` over a bigger grid would build 100 million variants: refused like a
    /// grid past [`MAX_GRID`], before any is built.
    #[test]
    fn a_budget_past_the_most_variants_is_refused() {
        let values = (0..60).map(|v| v.to_string()).collect::<Vec<_>>().join(",");
        let axes: Vec<Axis> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|k| Axis::parse(&format!("{k}={values}")).unwrap())
            .collect();
        let err = sample(&axes, Some(100_000_000)).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("`--budget 100000000` asks for more than the 100000 variants"),
            "{err}"
        );
        assert_eq!(sample(&axes, Some(100_000)).unwrap().len(), 100_000);
    }

    #[test]
    fn a_budget_picks_variants_by_index_and_never_builds_the_product() {
        // 5 axes × 60 values: 777,600,000 variants, tens of GB if they were built.
        let values = (0..60).map(|v| v.to_string()).collect::<Vec<_>>().join(",");
        let axes: Vec<Axis> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|k| Axis::parse(&format!("{k}={values}")).unwrap())
            .collect();
        assert_eq!(grid_len(&axes), 60u128.pow(5));
        let s = sample(&axes, Some(3)).unwrap();
        let names: Vec<String> = s.iter().map(Variant::name).collect();
        assert_eq!(
            names,
            [
                "a=0 b=0 c=0 d=0 e=0",
                // index (60^5 - 1) / 2 = 388,799,999 in base 60: 29 59 59 59 59
                "a=29 b=59 c=59 d=59 e=59",
                "a=59 b=59 c=59 d=59 e=59"
            ]
        );
        // Without a budget such a grid is refused, not enumerated.
        let err = sample(&axes, None).unwrap_err();
        assert!(err.to_string().contains("777600000 variants"), "{err}");
        // The index arithmetic does not overflow where i * (n - 1) would.
        assert_eq!(spread(3, u128::MAX, 3), u128::MAX);
    }
}
