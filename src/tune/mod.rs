//! `kiln tune`'s search, free of I/O: the variant space, the rungs of successive halving, and the
//! ranking. The caller supplies an evaluator that launches, judges, compares and benchmarks.
//!
//! Successive halving (Jamieson & Talwalkar): every qualified variant is measured cheaply (short
//! requests, two runs), the faster half goes on to a rung twice as long, until one is left; it gets
//! the full benchmark (the seed's format), which is what the table reports for it. A variant whose tuning fell back or whose greedy
//! output is wrong is disqualified at its first launch and never ranked.

pub(crate) mod render;

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

/// One point of the space: a value per axis, in axis order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Variant {
    pub settings: Vec<(String, String)>,
}

impl Variant {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Method {
    /// Every variant gets the full benchmark.
    Grid,
    /// Successive halving down to two, which get the full benchmark.
    Halving,
}

/// The rungs of a search over `n` variants. Grid measures everyone at `full`. Halving halves the
/// field each round until one is left, doubling the tokens per request each round (two runs each,
/// starting at 1/16 of `full`'s tokens for 8 variants), then gives that one the `full` benchmark.
pub(crate) fn rungs(method: Method, n: usize, full: Rung) -> Vec<Rung> {
    if method == Method::Grid || n <= 1 {
        return vec![full];
    }
    let mut rounds = 0;
    let mut left = n;
    while left > 1 {
        left = left.div_ceil(2);
        rounds += 1;
    }
    let mut out: Vec<Rung> = (0..rounds)
        .map(|i| Rung {
            warmup: 1,
            runs: 2,
            max_tokens: (full.max_tokens >> (rounds + 1 - i).min(31)).max(64),
        })
        .collect();
    out.push(full);
    out
}

/// What one launch of a variant found.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Measurement {
    pub rung: Rung,
    /// Median decode tok/s (end-to-end where the server streams no per-token timing).
    pub tok_s: f64,
    pub cv: f64,
    pub ttft_ms: f64,
}

/// A variant's record through the search.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Entry {
    pub variant: Variant,
    /// Why it cannot win: a tuning fell back or crashed, wrong greedy output, a failed launch.
    pub disqualified: Option<String>,
    /// Verdict lines and the A/B summary of its first launch.
    pub evidence: Vec<String>,
    pub measurements: Vec<Measurement>,
}

impl Entry {
    pub(crate) fn last(&self) -> Option<&Measurement> {
        self.measurements.last()
    }
}

/// What the evaluator does for one launch: on the first (`qualify`), judge the tunings and
/// compare greedy output; always, benchmark at `rung`.
pub(crate) trait Evaluate {
    fn evaluate(&mut self, variant: &Variant, rung: Rung, qualify: bool, entry: &mut Entry);

    /// Whether the search must stop now (the user interrupted it): no further launch.
    fn stopped(&self) -> bool {
        false
    }
}

/// Run the search; entries come back ranked (the winner first, disqualified last).
pub(crate) fn search(
    method: Method,
    variants: Vec<Variant>,
    full: Rung,
    eval: &mut dyn Evaluate,
) -> Vec<Entry> {
    let mut entries: Vec<Entry> = variants
        .into_iter()
        .map(|variant| Entry {
            variant,
            disqualified: None,
            evidence: vec![],
            measurements: vec![],
        })
        .collect();
    let plan = rungs(method, entries.len(), full);
    let mut alive: Vec<usize> = (0..entries.len()).collect();
    for (round, rung) in plan.iter().enumerate() {
        for &i in &alive {
            if eval.stopped() {
                return rank(entries);
            }
            let variant = entries[i].variant.clone();
            eval.evaluate(&variant, *rung, round == 0, &mut entries[i]);
        }
        alive.retain(|&i| entries[i].disqualified.is_none() && entries[i].last().is_some());
        alive.sort_by(|&a, &b| speed(&entries[b]).total_cmp(&speed(&entries[a])));
        if round + 1 < plan.len() {
            alive.truncate(alive.len().div_ceil(2));
        }
    }
    rank(entries)
}

fn speed(e: &Entry) -> f64 {
    e.last().map_or(0.0, |m| m.tok_s)
}

/// Qualified entries first, by how far they got (later rungs first), then by speed.
pub(crate) fn rank(mut entries: Vec<Entry>) -> Vec<Entry> {
    entries.sort_by(|a, b| {
        let key = |e: &Entry| (e.disqualified.is_none(), e.measurements.len());
        key(b)
            .cmp(&key(a))
            .then_with(|| speed(b).total_cmp(&speed(a)))
    });
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic "server": tok/s is a function of the variant, measured with noise that
    /// shrinks with the tokens measured; one variant's tuning falls back.
    struct Model {
        launches: usize,
        tokens: u64,
    }

    impl Evaluate for Model {
        fn evaluate(&mut self, v: &Variant, rung: Rung, qualify: bool, e: &mut Entry) {
            self.launches += 1;
            self.tokens += u64::from(rung.runs * rung.max_tokens);
            let x: f64 = v
                .settings
                .iter()
                .map(|(_, v)| v.parse::<f64>().unwrap())
                .sum();
            if qualify && (x - 17.0).abs() < f64::EPSILON {
                e.disqualified = Some("speculative fell back".into());
                return;
            }
            let noise = if rung.max_tokens >= 2048 {
                0.0
            } else {
                3.0 * (x % 2.0)
            };
            e.measurements.push(Measurement {
                rung,
                tok_s: 100.0 + 10.0 * x - x * x / 2.0 + noise,
                cv: 0.0,
                ttft_ms: 1.0,
            });
        }
    }

    fn axes() -> Vec<Axis> {
        vec![
            Axis::parse("draft_max=2,4,8,16").unwrap(),
            Axis::parse("-ub=1,2").unwrap(),
        ]
    }

    #[test]
    fn axes_parse_and_reject_nonsense() {
        assert!(Axis::parse("-ub=256,1024").unwrap().is_flag());
        for bad in ["nokey", "=1,2", "a=1,,2", "a=1,1", "a b=1"] {
            assert!(Axis::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn grid_is_the_product_in_order() {
        let g = grid(&axes());
        assert_eq!(g.len(), 8);
        assert_eq!(g[0].name(), "draft_max=2 -ub=1");
        assert_eq!(g[7].name(), "draft_max=16 -ub=2");
        let s = sample(g, Some(3));
        let names: Vec<String> = s.iter().map(Variant::name).collect();
        assert_eq!(
            names,
            [
                "draft_max=2 -ub=1",
                "draft_max=4 -ub=2",
                "draft_max=16 -ub=2"
            ]
        );
    }

    #[test]
    fn halving_rungs_grow_and_end_at_full() {
        let full = Rung {
            warmup: 2,
            runs: 5,
            max_tokens: 2048,
        };
        let r = rungs(Method::Halving, 8, full);
        let tokens: Vec<u32> = r.iter().map(|r| r.max_tokens).collect();
        assert_eq!(tokens, [128, 256, 512, 2048]);
        assert_eq!(rungs(Method::Grid, 8, full), [full]);
        assert_eq!(rungs(Method::Halving, 1, full), [full]);
        assert_eq!(rungs(Method::Halving, 2, full).len(), 2);
    }

    /// The model, interrupted once it has launched `stop_after` times.
    struct Interrupted {
        model: Model,
        stop_after: usize,
    }

    impl Evaluate for Interrupted {
        fn evaluate(&mut self, v: &Variant, rung: Rung, qualify: bool, e: &mut Entry) {
            self.model.evaluate(v, rung, qualify, e);
        }

        fn stopped(&self) -> bool {
            self.model.launches >= self.stop_after
        }
    }

    #[test]
    fn an_interrupted_search_launches_nothing_more() {
        let full = Rung {
            warmup: 2,
            runs: 5,
            max_tokens: 2048,
        };
        let mut eval = Interrupted {
            model: Model {
                launches: 0,
                tokens: 0,
            },
            stop_after: 3,
        };
        let ranked = search(Method::Halving, grid(&axes()), full, &mut eval);
        assert_eq!(eval.model.launches, 3);
        assert_eq!(ranked.len(), 8, "every variant is still listed");
    }

    #[test]
    fn halving_is_within_two_percent_of_the_grid_for_a_third_and_never_ranks_the_disqualified() {
        let full = Rung {
            warmup: 2,
            runs: 5,
            max_tokens: 2048,
        };
        let mut g = Model {
            launches: 0,
            tokens: 0,
        };
        let grid_ranked = search(Method::Grid, grid(&axes()), full, &mut g);
        let mut h = Model {
            launches: 0,
            tokens: 0,
        };
        let halving_ranked = search(Method::Halving, grid(&axes()), full, &mut h);
        // Short rungs favour an odd sum by +3 tok/s: halving's finalist is the runner-up, 0.3 %
        // below the grid's best at the full rung.
        assert_eq!(grid_ranked[0].variant.name(), "draft_max=8 -ub=2");
        let best = grid_ranked[0].last().unwrap().tok_s;
        let chosen = halving_ranked[0].last().unwrap();
        assert_eq!(chosen.rung, full);
        assert!(chosen.tok_s >= 0.98 * best, "{} vs {best}", chosen.tok_s);
        assert!(h.tokens * 3 <= g.tokens, "{} vs {}", h.tokens, g.tokens);
        let last = halving_ranked.last().unwrap();
        assert_eq!(last.disqualified.as_deref(), Some("speculative fell back"));
        assert_eq!(last.variant.name(), "draft_max=16 -ub=1");
    }
}
