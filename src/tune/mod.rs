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
pub(crate) mod race;
pub(crate) mod render;
#[cfg(test)]
mod replay;
pub(crate) mod results;
mod sweep;

use std::collections::BTreeSet;

pub(crate) use sweep::{rungs, search};

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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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

    pub(crate) fn name(&self) -> String {
        self.settings
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Every combination, the first axis varying slowest.
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

/// At most `budget` variants, spread evenly over the grid (first and last included).
pub(crate) fn sample(variants: Vec<Variant>, budget: Option<usize>) -> Vec<Variant> {
    let n = variants.len();
    match budget {
        Some(b) if b >= 1 && b < n => {
            let picks: Vec<usize> = if b == 1 {
                vec![0]
            } else {
                (0..b).map(|i| i * (n - 1) / (b - 1)).collect()
            };
            picks.into_iter().map(|i| variants[i].clone()).collect()
        }
        _ => variants,
    }
}

/// How long one measurement is: warm-up requests, measured runs, tokens per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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
}

fn speed(e: &Entry) -> f64 {
    e.last().map_or(0.0, |m| m.tok_s)
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
        let s = sample(g.clone(), Some(3));
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
}
