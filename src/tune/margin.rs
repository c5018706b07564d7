//! How far `kiln tune`'s winner is ahead of the runner-up measured on the same requests: the
//! race's 95 % interval of the difference of means ([`race::advantage`]), said beside the winner.
//! On the H200's five recorded grids the top two were never separated (BENCHMARKS.md, "the
//! winner's margin"): a flat "winner" there claimed more than the runs showed.

use serde::Serialize;

use super::{race, Entry};

/// The winner against the runner-up, on the winner's last (the full) benchmark's requests.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Margin {
    /// The runner-up's name, as the table shows it.
    pub runner_up: String,
    /// The 95 % interval of how much faster the winner is, in percent of the runner-up's mean.
    pub low_pct: f64,
    pub high_pct: f64,
    /// Measured runs of the winner and of the runner-up.
    pub runs: (usize, usize),
    /// The launches behind each figure. With more than one each (`--launches N`) the interval
    /// is over the launches' medians, so it holds how far a relaunch moves a figure; with one,
    /// over the runs of that launch.
    pub launches: (usize, usize),
    pub max_tokens: u32,
    /// Whether both figures came from one server (variants of per-request settings).
    pub same_launch: bool,
}

impl Margin {
    /// The winner is faster beyond the noise of its runs (or of its launches).
    pub(crate) fn separated(&self) -> bool {
        self.low_pct > 0.0
    }

    /// Whether the interval is over the launches' medians.
    fn over_launches(&self) -> bool {
        self.launches.0 > 1 && self.launches.1 > 1
    }

    /// One line for the terminal and the report.
    pub(crate) fn line(&self) -> String {
        let over = if self.over_launches() {
            format!(
                "95 % over {} and {} launches' medians, {} and {} runs of {} tokens",
                self.launches.0, self.launches.1, self.runs.0, self.runs.1, self.max_tokens
            )
        } else {
            format!(
                "95 % over {} and {} runs of {} tokens, {}",
                self.runs.0,
                self.runs.1,
                self.max_tokens,
                if self.same_launch {
                    "on one launch"
                } else {
                    "one launch each"
                }
            )
        };
        let interval = format!("{:+.1} % to {:+.1} % ({over})", self.low_pct, self.high_pct);
        if self.separated() {
            format!("ahead of `{}` by {interval}", self.runner_up)
        } else {
            format!(
                "not separated from `{}`: {interval}; the higher median won, either may win another launch",
                self.runner_up
            )
        }
    }
}

/// The winner (`ranked[0]`) against the best-ranked other variant that qualified, was never
/// ruled out, and ran the winner's last requests: the grid's runner-up. The race and halving have
/// none (their losers were ruled out on shorter runs, each with its reason). Where both were
/// launched more than once, their launches' medians are compared, else their runs.
pub(crate) fn margin(ranked: &[Entry]) -> Option<Margin> {
    let (winner, rest) = ranked.split_first()?;
    let last = winner.last()?;
    let mine = winner.runs_at(last.rung);
    let my_launches = winner.launch_medians_at(last.rung);
    rest.iter()
        .filter(|e| e.disqualified.is_none() && e.out.is_none())
        .find_map(|e| {
            let theirs = e.runs_at(last.rung);
            if theirs.is_empty() || mine.is_empty() {
                return None;
            }
            let their_launches = e.launch_medians_at(last.rung);
            let (lo, hi) = if my_launches.len() > 1 && their_launches.len() > 1 {
                race::advantage(&my_launches, &their_launches)
            } else {
                race::advantage(&mine, &theirs)
            };
            Some(Margin {
                runner_up: e.variant.shown(),
                low_pct: lo * 100.0,
                high_pct: hi * 100.0,
                runs: (mine.len(), theirs.len()),
                launches: (my_launches.len(), their_launches.len()),
                max_tokens: last.rung.max_tokens,
                same_launch: e.last().is_some_and(|m| m.launch == last.launch),
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::{Measurement, Rung, Variant};

    fn entry(name: &str, runs: &[f64], launch: usize) -> Entry {
        let mut e = Entry::new(Variant {
            settings: vec![("draft_max".into(), name.into())],
        });
        e.measurements.push(Measurement {
            rung: Rung {
                warmup: 2,
                runs: runs.len() as u32,
                max_tokens: 2048,
            },
            tok_s: runs[runs.len() / 2],
            cv: 0.0,
            ttft_ms: 10.0,
            runs: runs.to_vec(),
            launch,
            others_up: 0,
        });
        e
    }

    /// The five grids the H200 ran (`tests/fixtures/gpu-h200-tune/`): the runner-up is never
    /// behind beyond the noise, and one grid's top two swapped places with another's. Printed
    /// (`bash bench/tune-replay.sh`): each grid's margin, and each of the top two variants'
    /// medians over the five grids (one launch each, on three machines).
    #[test]
    #[allow(clippy::print_stdout)] // the tables `bench/tune-replay.sh` prints
    fn on_the_h200s_grids_the_winner_is_never_separated_from_the_runner_up() {
        let grids = [
            (
                "issue 23, 1st pass",
                include_str!("../../tests/fixtures/gpu-h200-tune/tune-grid.json"),
            ),
            (
                "session 4, grid 1",
                include_str!("../../tests/fixtures/gpu-h200-tune/session4/tune-grid-1.json"),
            ),
            (
                "session 4, grid 2",
                include_str!("../../tests/fixtures/gpu-h200-tune/session4/tune-grid-2.json"),
            ),
            (
                "session 6, grid 1",
                include_str!("../../tests/fixtures/gpu-h200-tune/session6/tune-grid-1.json"),
            ),
            (
                "session 6, grid 2",
                include_str!("../../tests/fixtures/gpu-h200-tune/session6/tune-grid-2.json"),
            ),
        ];
        println!("| grid | winner | its margin |");
        println!("|---|---|---|");
        let mut winners = std::collections::BTreeSet::new();
        let mut medians = std::collections::BTreeMap::<String, Vec<f64>>::new();
        for (grid, json) in grids {
            let v: serde_json::Value = serde_json::from_str(json).unwrap();
            let ranked: Vec<Entry> = serde_json::from_value(v["entries"].clone()).unwrap();
            let m = margin(&ranked).expect("a grid has a runner-up");
            println!(
                "| {grid} | `{}` | {} |",
                ranked[0].variant.shown(),
                m.line()
            );
            assert!(!m.separated(), "{}", m.line());
            assert!(m.high_pct > 5.0 && m.low_pct < -1.0, "{}", m.line());
            assert_eq!((m.runs, m.max_tokens, m.same_launch), ((5, 5), 2048, false));
            winners.insert(ranked[0].variant.shown());
            for e in &ranked[..2] {
                let tok_s = e.last().unwrap().tok_s;
                medians.entry(e.variant.shown()).or_default().push(tok_s);
            }
        }
        assert_eq!(winners.len(), 2, "{winners:?}");
        println!("| variant | its median on each grid's launch | CV across launches |");
        println!("|---|---|---|");
        for (name, tok_s) in &medians {
            let s = crate::bench::stats::summarize(tok_s).unwrap();
            let shown: Vec<String> = tok_s.iter().map(|x| format!("{x:.1}")).collect();
            println!(
                "| `{name}` | {} | {:.1} % |",
                shown.join(", "),
                s.cv * 100.0
            );
            assert_eq!(tok_s.len(), 5, "{name}: in the top two of every grid");
        }
    }

    /// The H200's SGLang grid, each variant launched twice in alternating order
    /// (`tests/fixtures/gpu-h200-sglang/tune-grid.json`, session 22): each variant's two launches
    /// agree within 0.4 % (on the H100, sessions 19-20, one configuration moved ~6-10 % from
    /// launch to launch), the two variants within 0.2 %, and two launches each separate nothing.
    #[test]
    #[allow(clippy::print_stdout)] // the table `bench/tune-replay.sh` prints
    fn on_the_h200s_sglang_grid_two_launches_each_agree_and_separate_nothing() {
        let v: serde_json::Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/gpu-h200-sglang/tune-grid.json"
        ))
        .unwrap();
        assert_eq!(v["launches_each"], 2);
        let ranked: Vec<Entry> = serde_json::from_value(v["entries"].clone()).unwrap();
        let m = margin(&ranked).expect("a grid has a runner-up");
        println!("\n| grid (SGLang, each variant launched twice) | winner | its margin |");
        println!("|---|---|---|");
        println!(
            "| H200, session 22 | `{}` | {} |",
            ranked[0].variant.shown(),
            m.line()
        );
        assert!(!m.separated(), "{}", m.line());
        assert_eq!((m.launches, m.runs, m.max_tokens), ((2, 2), (10, 10), 256));
        for e in &ranked[..2] {
            let medians = e.launch_medians_at(e.last().unwrap().rung);
            let (lo, hi) = (medians[0].min(medians[1]), medians[0].max(medians[1]));
            assert!(hi / lo < 1.004, "{}: {medians:?}", e.variant.shown());
        }
        let top: Vec<f64> = ranked[..2].iter().map(|e| e.tok_s().unwrap()).collect();
        assert!(top[0] / top[1] < 1.002, "{top:?}");
    }

    #[test]
    fn a_runner_up_behind_beyond_the_noise_is_said_so_and_the_shared_launch_named() {
        let ranked = vec![
            entry("8", &[600.0, 610.0, 605.0, 598.0, 603.0], 2),
            entry("4", &[500.0, 505.0, 498.0, 502.0, 501.0], 2),
        ];
        let m = margin(&ranked).unwrap();
        assert!(m.separated() && m.same_launch, "{m:?}");
        // Welch's interval, df 7.7 (t 2.36): means 603.2 and 501.2.
        assert_eq!(
            m.line().split(" (").next().unwrap(),
            "ahead of `draft_max=4` by +18.7 % to +22.0 %"
        );
        assert!(
            m.line().starts_with("ahead of `draft_max=4` by +")
                && m.line()
                    .ends_with("(95 % over 5 and 5 runs of 2048 tokens, on one launch)"),
            "{}",
            m.line()
        );
    }

    /// Three launches each, every launch's five runs within ±1 tok/s of its median: the runs
    /// pooled would show the winner ahead (+0.1 % to +3.3 %), but its launches moved 620, 580,
    /// 600 against the runner-up's 585, 595, 590, and over the launches' medians it is not.
    #[test]
    fn relaunched_variants_are_compared_by_their_launches_medians() {
        let launched = |name: &str, medians: [f64; 3], first: usize| {
            let mut e = entry(name, &[0.0], first);
            e.measurements.clear();
            for (k, m) in medians.into_iter().enumerate() {
                let runs = [m - 1.0, m - 0.5, m, m + 0.5, m + 1.0];
                e.measurements
                    .push(entry(name, &runs, first + 2 * k).measurements[0].clone());
            }
            e
        };
        let ranked = [
            launched("8", [620.0, 580.0, 600.0], 1),
            launched("4", [585.0, 595.0, 590.0], 2),
        ];
        assert_eq!(ranked[0].tok_s(), Some(600.0));
        let m = margin(&ranked).unwrap();
        assert_eq!(
            (m.runs, m.launches, m.same_launch),
            ((15, 15), (3, 3), false)
        );
        assert_eq!(
            m.line(),
            "not separated from `draft_max=4`: -7.1 % to +10.5 % (95 % over 3 and 3 launches' \
             medians, 15 and 15 runs of 2048 tokens); the higher median won, either may win \
             another launch"
        );
    }

    #[test]
    fn a_lower_bound_of_exactly_zero_is_not_ahead() {
        let m = Margin {
            runner_up: "b".into(),
            low_pct: 0.0,
            high_pct: 4.0,
            runs: (5, 5),
            launches: (1, 1),
            max_tokens: 256,
            same_launch: false,
        };
        assert!(!m.separated());
        assert_eq!(
            m.line(),
            "not separated from `b`: +0.0 % to +4.0 % (95 % over 5 and 5 runs of 256 tokens, one \
             launch each); the higher median won, either may win another launch"
        );
    }

    /// A runner-up a time budget left with one launch against a winner with three: their runs
    /// are compared (one median cannot be spread), and the line says runs.
    #[test]
    fn a_runner_up_with_one_launch_is_compared_by_runs() {
        let mut winner = entry("8", &[600.0, 601.0], 1);
        for launch in [3, 5] {
            let again = entry("8", &[640.0, 641.0], launch);
            winner.measurements.push(again.measurements[0].clone());
        }
        let ranked = [winner, entry("4", &[500.0, 501.0], 2)];
        let m = margin(&ranked).unwrap();
        assert_eq!((m.runs, m.launches), ((6, 2), (3, 1)));
        // Over the runs: +20.6..+30.0 % (over the medians 601, 641, 641 and 501 it would be
        // +13.1..+37.5 %).
        assert_eq!(
            (m.low_pct.round(), m.high_pct.round()),
            (21.0, 30.0),
            "{m:?}"
        );
        assert!(
            m.line()
                .ends_with("(95 % over 6 and 2 runs of 2048 tokens, one launch each)"),
            "{}",
            m.line()
        );
        // And the other way round: one launch of the winner against three of the runner-up.
        let flipped = [ranked[1].clone(), ranked[0].clone()];
        let m = margin(&flipped).unwrap();
        assert_eq!((m.runs, m.launches), ((2, 6), (1, 3)));
        assert_eq!(
            (m.low_pct.round(), m.high_pct.round()),
            (-24.0, -16.0),
            "{m:?}"
        );
        assert!(m.line().contains("over 2 and 6 runs"), "{}", m.line());
        for launches in [(3, 1), (1, 3), (1, 1)] {
            let m = Margin {
                launches,
                ..m.clone()
            };
            assert!(
                m.line().contains(" runs of 2048 tokens, one launch each)"),
                "{launches:?}"
            );
        }
    }

    #[test]
    fn ruled_out_disqualified_or_other_requests_are_no_runner_up() {
        let winner = entry("8", &[600.0, 610.0, 605.0], 1);
        let mut out = entry("4", &[590.0, 600.0, 595.0], 2);
        out.out = Some("beaten".into());
        let mut bad = entry("2", &[590.0, 600.0, 595.0], 3);
        bad.disqualified = Some("wrong greedy output".into());
        let mut shorter = entry("1", &[590.0, 600.0, 595.0], 4);
        shorter.measurements[0].rung.max_tokens = 256;
        let ranked = vec![winner.clone(), out, bad, shorter];
        assert!(margin(&ranked).is_none());
        assert!(margin(&ranked[..1]).is_none());
        let tied = entry("16", &[605.0, 598.0, 612.0], 5);
        let m = margin(&[ranked, vec![tied]].concat()).unwrap();
        assert_eq!(m.runner_up, "draft_max=16");
        assert!(
            !m.separated() && m.line().contains("either may win another launch"),
            "{}",
            m.line()
        );
    }
}
