//! The race replayed on the H200's own record (`tests/fixtures/gpu-h200-tune/session{4,6}/`): an
//! evaluator that serves each variant its recorded measurements, in the order they were taken,
//! and prices each call with what it cost on the machine (a launch's recorded ready, judging and
//! stop; a measurement's tokens at its recorded per-run rates and time to first token). It shows
//! what a change of the race's rules decides on real data, and what it would have cost; the
//! figure of record stays the next run on the GPU. `bash bench/tune-replay.sh` prints the table.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::Value;

use super::{search, Entry, Evaluate, LaunchId, Measurement, Method, Rung, Variant};

/// The races on the H200, each with the grid of its machine and whether it ran under the
/// rules of this tree: the three of the second pass (the first two ran before the 3-s stop was
/// fixed, as did their grid; BENCHMARKS.md, "Issue 23, second pass") and the four of the fourth,
/// on two machines ("Issue 23, fourth pass"), which a replay must reproduce measurement for
/// measurement.
const RECORDS: [(&str, &str, &str, bool); 7] = [
    (
        "race 1",
        include_str!("../../tests/fixtures/gpu-h200-tune/session4/tune-race-1.json"),
        GRID_1,
        false,
    ),
    (
        "race 2",
        include_str!("../../tests/fixtures/gpu-h200-tune/session4/tune-race-2.json"),
        GRID_1,
        false,
    ),
    (
        "race 3",
        include_str!("../../tests/fixtures/gpu-h200-tune/session4/tune-race-3.json"),
        GRID_2,
        false,
    ),
    (
        "race 4",
        include_str!("../../tests/fixtures/gpu-h200-tune/session6/tune-race-1.json"),
        GRID_3,
        true,
    ),
    (
        "race 5",
        include_str!("../../tests/fixtures/gpu-h200-tune/session6/tune-race-2.json"),
        GRID_3,
        true,
    ),
    (
        "race 6",
        include_str!("../../tests/fixtures/gpu-h200-tune/session6/tune-race-3.json"),
        GRID_4,
        true,
    ),
    (
        "race 7",
        include_str!("../../tests/fixtures/gpu-h200-tune/session6/tune-race-4.json"),
        GRID_4,
        true,
    ),
];
const GRID_1: &str = include_str!("../../tests/fixtures/gpu-h200-tune/session4/tune-grid-1.json");
const GRID_2: &str = include_str!("../../tests/fixtures/gpu-h200-tune/session4/tune-grid-2.json");
const GRID_3: &str = include_str!("../../tests/fixtures/gpu-h200-tune/session6/tune-grid-1.json");
const GRID_4: &str = include_str!("../../tests/fixtures/gpu-h200-tune/session6/tune-grid-2.json");

/// One recorded measurement: its tokens per request, time to first token and per-run tok/s.
#[derive(Debug, Clone)]
struct Recorded {
    max_tokens: u32,
    ttft_s: f64,
    runs: Vec<f64>,
}

impl Recorded {
    /// What it cost with `warmup` warm-up requests (of at most 64 tokens, at the median rate).
    fn seconds(&self, warmup: u32) -> f64 {
        let runs: f64 = self
            .runs
            .iter()
            .map(|r| f64::from(self.max_tokens) / r + self.ttft_s)
            .sum();
        let median = crate::bench::stats::summarize(&self.runs).map_or(1.0, |s| s.median);
        runs + f64::from(warmup) * (f64::from(self.max_tokens.min(64)) / median + self.ttft_s)
    }
}

/// A search's tune JSON, as the replay needs it.
struct Record {
    wall_s: f64,
    /// By variant name, in the order they were taken.
    measurements: BTreeMap<String, Vec<(u32, Recorded)>>,
    disqualified: BTreeMap<String, String>,
    /// By variant name: why it was out (none for the winner and the disqualified).
    out: BTreeMap<String, Option<String>>,
    /// By variant name: ready + judging + stop, and the seconds measured.
    launches: BTreeMap<String, (f64, f64)>,
    winner: String,
}

fn name(settings: &Value) -> String {
    settings
        .as_array()
        .into_iter()
        .flatten()
        .map(|kv| format!("{}={}", kv[0].as_str().unwrap(), kv[1].as_str().unwrap()))
        .collect::<Vec<_>>()
        .join(" ")
}

impl Record {
    fn parse(json: &str) -> Record {
        let v: Value = serde_json::from_str(json).unwrap();
        let mut r = Record {
            wall_s: v["wall_s"].as_f64().unwrap(),
            measurements: BTreeMap::new(),
            disqualified: BTreeMap::new(),
            out: BTreeMap::new(),
            launches: BTreeMap::new(),
            winner: name(&v["entries"][0]["variant"]["settings"]),
        };
        for e in v["entries"].as_array().unwrap() {
            let n = name(&e["variant"]["settings"]);
            r.out
                .insert(n.clone(), e["out"].as_str().map(str::to_string));
            if let Some(why) = e["disqualified"].as_str() {
                r.disqualified.insert(n.clone(), why.to_string());
            }
            for m in e["measurements"].as_array().unwrap() {
                let rec = Recorded {
                    max_tokens: m["rung"]["max_tokens"].as_u64().unwrap() as u32,
                    ttft_s: m["ttft_ms"].as_f64().unwrap() / 1000.0,
                    runs: m["runs"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|x| x.as_f64().unwrap())
                        .collect(),
                };
                let warmup = m["rung"]["warmup"].as_u64().unwrap() as u32;
                r.measurements
                    .entry(n.clone())
                    .or_default()
                    .push((warmup, rec));
            }
        }
        for l in v["launch_records"].as_array().unwrap() {
            let cost = ["ready_s", "qualify_s", "stop_s"]
                .iter()
                .map(|k| l[k].as_f64().unwrap())
                .sum();
            let n = l["variant"].as_str().unwrap().to_string();
            r.launches
                .insert(n, (cost, l["measure_s"].as_f64().unwrap()));
        }
        r
    }

    /// What the record's measurements cost by [`Recorded::seconds`]: the replay's price list,
    /// checked against the seconds the machine measured.
    fn priced(&self) -> f64 {
        self.measurements
            .values()
            .flatten()
            .map(|(w, m)| m.seconds(*w))
            .sum()
    }

    fn count(&self) -> usize {
        self.measurements.values().map(Vec::len).sum()
    }

    /// Wall time outside the launches: the greedy reference's launch, writing the results.
    fn outside_s(&self) -> f64 {
        self.wall_s
            - self
                .launches
                .values()
                .map(|(cost, measured)| cost + measured)
                .sum::<f64>()
    }
}

/// The evaluator: each variant gets its recorded measurements of the asked length, in order.
struct Replay<'a> {
    record: &'a Record,
    left: BTreeMap<String, VecDeque<Recorded>>,
    up: BTreeSet<LaunchId>,
    launches: usize,
    measurements: usize,
    seconds: f64,
    /// Measurements asked for that the record does not hold.
    past_record: Vec<String>,
}

impl<'a> Replay<'a> {
    fn new(record: &'a Record) -> Replay<'a> {
        let left = record
            .measurements
            .iter()
            .map(|(n, ms)| (n.clone(), ms.iter().map(|(_, m)| m.clone()).collect()))
            .collect();
        Replay {
            record,
            left,
            up: BTreeSet::new(),
            launches: 0,
            measurements: 0,
            seconds: record.outside_s(),
            past_record: vec![],
        }
    }
}

impl Evaluate for Replay<'_> {
    fn launch(&mut self, key: &Variant) -> Result<LaunchId, String> {
        self.launches += 1;
        self.seconds += self.record.launches[&key.name()].0;
        self.up.insert(self.launches);
        Ok(self.launches)
    }

    fn qualify(&mut self, _: LaunchId, v: &Variant, served: bool, e: &mut Entry) {
        if !served {
            e.disqualified = self.record.disqualified.get(&v.name()).cloned();
        }
    }

    fn measure(&mut self, l: LaunchId, v: &Variant, r: Rung) -> Result<Measurement, String> {
        let left = self.left.entry(v.name()).or_default();
        let Some(at) = left.iter().position(|m| m.max_tokens == r.max_tokens) else {
            self.past_record.push(v.name());
            return Err("not in the record".into());
        };
        let m = left.remove(at).unwrap();
        assert_eq!(m.runs.len(), r.runs as usize, "{}", v.name());
        self.measurements += 1;
        self.seconds += m.seconds(r.warmup);
        let s = crate::bench::stats::summarize(&m.runs).unwrap();
        Ok(Measurement {
            rung: r,
            tok_s: s.median,
            cv: s.cv,
            ttft_ms: m.ttft_s * 1000.0,
            runs: m.runs,
            launch: l,
            others_up: self.up.len() - 1,
        })
    }

    fn stop(&mut self, l: LaunchId) {
        self.up.remove(&l);
    }
}

impl Record {
    /// The variant's figure in this record (its last measurement's median).
    fn figure(&self, variant: &str) -> f64 {
        let (_, m) = self.measurements[variant].last().unwrap();
        crate::bench::stats::summarize(&m.runs).unwrap().median
    }
}

#[test]
#[allow(clippy::print_stdout)] // the table `bench/tune-replay.sh` prints
fn on_the_h200s_records_the_race_decides_as_the_machine_did_launching_each_variant_once() {
    let axes = [
        super::Axis::parse("draft_max=2,4,8,16").unwrap(),
        super::Axis::parse("ubatch=256,1024").unwrap(),
    ];
    let full = Rung {
        warmup: 2,
        runs: 5,
        max_tokens: 2048,
    };
    println!("| record | search | launches | measurements | wall | of the grid's | winner (its grid figure) |");
    println!("|---|---|---|---|---|---|---|");
    for (what, race, grid, these_rules) in RECORDS {
        let (race, grid) = (Record::parse(race), Record::parse(grid));
        // The price list: the recorded measurements priced at their recorded rates come to what
        // the machine timed (warm-ups and HTTP make the small rest).
        let measured: f64 = race.launches.values().map(|(_, m)| m).sum();
        assert!(
            (race.priced() - measured).abs() < 0.02 * measured,
            "{what}: {} vs {measured}",
            race.priced()
        );
        let mut replay = Replay::new(&race);
        let ranked = search(
            Method::Race,
            super::grid(&axes),
            &BTreeSet::new(),
            full,
            &mut replay,
        );
        assert!(
            replay.past_record.is_empty(),
            "{what}: {:?}",
            replay.past_record
        );
        assert_eq!(replay.launches, 8, "{what}: one launch per variant");
        let winner = ranked[0].variant.name();
        // Fewer rounds decide as the recorded race did (which in race 2 was `draft_max=8
        // ubatch=1024`, 2.05 % under the grid's winner by the grid's one measurement of each,
        // a tie at the grid's own 4-7 % CV).
        assert_eq!(winner, race.winner, "{what}");
        if these_rules {
            assert_eq!(replay.measurements, race.count(), "{what}");
            // The machine's own decisions, word for word.
            for e in &ranked {
                assert_eq!(e.out, race.out[&e.variant.name()], "{what}");
            }
        } else {
            assert!(replay.measurements < race.count(), "{what}");
        }
        for (search, n, wall, won) in [
            ("grid, recorded", grid.count(), grid.wall_s, &grid.winner),
            ("race, recorded", race.count(), race.wall_s, &race.winner),
            (
                "race, these rules, replayed",
                replay.measurements,
                replay.seconds,
                &winner,
            ),
        ] {
            println!(
                "| {what} | {search} | 8 | {n} | {wall:.1} s | {:.3}× | `{won}` ({:.1}) |",
                wall / grid.wall_s,
                grid.figure(won)
            );
        }
        for e in &ranked {
            let fate = e.disqualified.as_deref().or(e.out.as_deref());
            println!(
                "- {what}: `{}`: {}",
                e.variant.name(),
                fate.unwrap_or("the winner")
            );
        }
    }
}
