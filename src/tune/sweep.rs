//! The grid and successive halving, kept beside the race for comparison. Both go through the
//! same [`Evaluate`] calls. The grid launches each launch key once and benchmarks every variant
//! in full; successive halving (Jamieson & Talwalkar) measures everyone cheaply, keeps the faster
//! half for a rung twice as long, and relaunches its survivors for each rung.

use std::collections::BTreeSet;

use super::{race, rank, speed, Entry, Evaluate, Method, Rung, Variant};

/// The rungs of a search over `n` variants. Grid and race end at `full` (the race screens at
/// [`race::screen_rung`] first). Halving halves the field each round until one is left, doubling
/// the tokens per request each round (two runs each, starting at 1/16 of `full`'s tokens for 8
/// variants), then gives that one the `full` benchmark.
pub(crate) fn rungs(method: Method, n: usize, full: Rung) -> Vec<Rung> {
    match method {
        Method::Grid => return vec![full],
        Method::Race => return vec![race::screen_rung(full), full],
        Method::Halving => {}
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

/// Run the search; entries come back ranked (the winner first, disqualified last). `request`:
/// the per-request keys (variants differing only in those share a launch, except in halving's
/// later rounds, which relaunch). One launch per key: the tests' and the replay's entry point.
#[cfg(test)]
pub(crate) fn search(
    method: Method,
    variants: Vec<Variant>,
    request: &BTreeSet<String>,
    full: Rung,
    eval: &mut dyn Evaluate,
) -> Vec<Entry> {
    search_launching(method, variants, request, full, 1, eval)
}

/// Run the search (as `search`), the grid launching every launch key `launches` times
/// (`--launches N`): round after round, each launch judged (verdicts, greedy A/B) and
/// benchmarked on its own, so a variant's figure is the median of its launches' and the spread
/// between launches is measured. The race and halving launch each key once per rung.
pub(crate) fn search_launching(
    method: Method,
    variants: Vec<Variant>,
    request: &BTreeSet<String>,
    full: Rung,
    launches: u32,
    eval: &mut dyn Evaluate,
) -> Vec<Entry> {
    if method == Method::Race {
        return race::race(variants, request, full, eval);
    }
    let mut entries: Vec<Entry> = variants.into_iter().map(Entry::new).collect();
    let plan = match method {
        Method::Grid => vec![full; launches.max(1) as usize],
        _ => rungs(method, entries.len(), full),
    };
    let mut alive: Vec<usize> = (0..entries.len()).collect();
    for (round, rung) in plan.iter().enumerate() {
        let groups = race::groups(&entries, &alive, request);
        for (g, group) in groups.iter().enumerate() {
            if eval.interrupted() || eval.out_of_time() {
                // Those never measured say so; a survivor of an earlier round keeps its figures.
                for &i in groups[g..].iter().flatten() {
                    if entries[i].last().is_none() {
                        entries[i].out = Some(race::NOT_LAUNCHED.into());
                    }
                }
                eval.checkpoint(&entries);
                return rank(entries);
            }
            let key = entries[group[0]].variant.launch_key(request);
            let launch = match eval.launch(&key) {
                Ok(l) => l,
                Err(why) => {
                    race::launch_failed(&mut entries, group, &why, eval);
                    continue;
                }
            };
            // Halving judges a variant in its first round; the grid judges each of its launches.
            let judged = round == 0 || method == Method::Grid;
            for &i in group {
                if eval.interrupted() {
                    break;
                }
                let v = entries[i].variant.clone();
                if judged {
                    eval.qualify(launch, &v, false, &mut entries[i]);
                    if entries[i].disqualified.is_some() {
                        continue;
                    }
                }
                match eval.measure(launch, &v, *rung) {
                    Ok(m) => entries[i].measurements.push(m),
                    Err(why) => entries[i].disqualified = Some(format!("failed: {why}")),
                }
                if judged && entries[i].disqualified.is_none() {
                    eval.qualify(launch, &v, true, &mut entries[i]);
                }
            }
            eval.stop(launch);
            eval.checkpoint(&entries);
        }
        alive.retain(|&i| entries[i].disqualified.is_none() && entries[i].last().is_some());
        if method == Method::Halving {
            // The faster half goes on (after the last round, none does).
            alive.sort_by(|&a, &b| speed(&entries[b]).total_cmp(&speed(&entries[a])));
            alive.truncate(alive.len().div_ceil(2));
        } else {
            // The grid's next round launches in the reverse order (A B C, C B A, A B C): a
            // machine that drifts over the search weighs on every variant alike.
            alive.reverse();
        }
    }
    rank(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::race::tests::Model;
    use crate::tune::{grid, Axis};

    fn axes() -> Vec<Axis> {
        vec![
            Axis::parse("draft_max=2,4,8,16").unwrap(),
            Axis::parse("-ub=1,2").unwrap(),
        ]
    }

    /// `search_launching` over [`axes`]' grid at [`full`], no per-request keys.
    fn sweep(method: Method, launches: u32, eval: &mut Model) -> Vec<Entry> {
        search_launching(
            method,
            grid(&axes()),
            &BTreeSet::new(),
            full(),
            launches,
            eval,
        )
    }

    fn full() -> Rung {
        Rung {
            warmup: 2,
            runs: 5,
            max_tokens: 2048,
        }
    }

    #[test]
    fn halving_rungs_grow_and_end_at_full() {
        let r = rungs(Method::Halving, 8, full());
        let tokens: Vec<u32> = r.iter().map(|r| r.max_tokens).collect();
        assert_eq!(tokens, [128, 256, 512, 2048]);
        assert_eq!(rungs(Method::Grid, 8, full()), [full()]);
        assert_eq!(rungs(Method::Halving, 1, full()), [full()]);
        assert_eq!(rungs(Method::Halving, 2, full()).len(), 2);
        assert_eq!(rungs(Method::Race, 8, full())[1], full());
    }

    #[test]
    fn an_interrupted_search_launches_nothing_more() {
        let mut eval = Model::new(0.0);
        eval.stop_after = Some(3);
        let ranked = search(
            Method::Halving,
            grid(&axes()),
            &BTreeSet::new(),
            full(),
            &mut eval,
        );
        assert_eq!(eval.launches, 3);
        assert_eq!(ranked.len(), 8, "every variant is still listed");
    }

    #[test]
    fn a_grid_stopped_early_says_what_it_never_launched() {
        let mut eval = Model::new(0.0);
        eval.stop_after = Some(3);
        let ranked = search(
            Method::Grid,
            grid(&axes()),
            &BTreeSet::new(),
            full(),
            &mut eval,
        );
        // Three launched (the third interrupted before its measurement), five never.
        assert_eq!(eval.launches, 3);
        let never: Vec<_> = ranked
            .iter()
            .filter(|e| e.out.as_deref() == Some(race::NOT_LAUNCHED))
            .collect();
        assert_eq!(never.len(), 5);
        assert!(never.iter().all(|e| e.last().is_none()));
    }

    /// Every method stops each launch it made, finished or interrupted at any launch: the
    /// evaluator's `Drop` (stopping what is still up) is only a net for a panic.
    #[test]
    fn every_search_stops_every_launch_it_made() {
        for method in [Method::Race, Method::Grid, Method::Halving] {
            for stop_after in [None, Some(1), Some(2), Some(3), Some(5)] {
                for hold_two in [true, false] {
                    let mut eval = Model::new(0.02);
                    eval.stop_after = stop_after;
                    eval.hold_two = hold_two;
                    search(method, grid(&axes()), &BTreeSet::new(), full(), &mut eval);
                    assert_eq!(
                        eval.still_up(),
                        0,
                        "{method:?}, interrupted after {stop_after:?} launches, two: {hold_two}"
                    );
                }
            }
        }
    }

    /// `--launches 3`: every key launched three times, round after round (each round in the
    /// reverse order of the one before), each launch judged on its own; a variant's figure is
    /// the median of its launches'.
    #[test]
    fn the_grid_relaunches_each_key_round_after_round_and_judges_every_launch() {
        let mut eval = Model::new(0.02);
        let ranked = sweep(Method::Grid, 3, &mut eval);
        // Eight keys, then the seven that qualified, twice.
        assert_eq!(eval.launches, 8 + 7 + 7);
        let qualified: Vec<&Variant> = eval.keys[..8]
            .iter()
            .filter(|k| k.name() != "draft_max=16 -ub=1")
            .collect();
        let reversed: Vec<&Variant> = qualified.iter().rev().copied().collect();
        assert_eq!(eval.keys[8..15].iter().collect::<Vec<_>>(), reversed);
        assert_eq!(eval.keys[15..].iter().collect::<Vec<_>>(), qualified);
        assert_eq!(eval.judged, (1..=22).collect::<Vec<_>>());
        // Judged again after each measurement, but never the one that fell back at once.
        assert_eq!(eval.rejudged, 21);
        assert_eq!(eval.still_up(), 0);
        assert_eq!(ranked[0].variant.name(), "draft_max=8 -ub=2");
        for e in ranked.iter().filter(|e| e.disqualified.is_none()) {
            let launches: Vec<usize> = e.per_launch().iter().map(|m| m.launch).collect();
            assert_eq!(launches.len(), 3, "{}", e.variant.name());
            assert!(
                launches[0] <= 8 && (9..=15).contains(&launches[1]) && launches[2] >= 16,
                "one launch a round: {launches:?}"
            );
            let mut medians: Vec<f64> = e.per_launch().iter().map(|m| m.tok_s).collect();
            medians.sort_by(f64::total_cmp);
            assert_eq!(e.tok_s(), Some(medians[1]));
        }
        // The variant that fell back was judged on its first launch only: never relaunched.
        let fell = ranked.last().unwrap();
        assert_eq!(fell.disqualified.as_deref(), Some("speculative fell back"));
        assert_eq!(
            eval.keys
                .iter()
                .filter(|k| k.name() == fell.variant.name())
                .count(),
            1
        );
    }

    /// Stopped in its second round, a relaunching grid keeps every figure it measured, says
    /// nothing was "not launched" (each variant had its first launch), and ranks the variants
    /// with two launches first.
    #[test]
    fn a_relaunching_grid_stopped_in_its_second_round_keeps_the_first() {
        let mut eval = Model::new(0.0);
        eval.stop_after = Some(11);
        let ranked = sweep(Method::Grid, 2, &mut eval);
        assert_eq!(eval.launches, 11);
        assert!(ranked.iter().all(|e| e.out.is_none()));
        let launches: Vec<usize> = ranked.iter().map(|e| e.measurements.len()).collect();
        // The second round (in reverse) measured two before the third launch was interrupted.
        assert_eq!(launches, [2, 2, 1, 1, 1, 1, 1, 0], "{ranked:#?}");
        assert_eq!(eval.still_up(), 0);
    }

    /// A variant whose tuning falls back only once it has served is out after its first
    /// launch: the grid does not relaunch it, halving does not promote it.
    #[test]
    fn a_variant_that_falls_back_under_traffic_is_never_launched_again() {
        for method in [Method::Grid, Method::Halving] {
            let mut eval = Model::new(0.0);
            // draft_max=8 -ub=2, the fastest.
            eval.falls_back_served = Some(10.0);
            let ranked = sweep(method, 2, &mut eval);
            let launched = eval
                .keys
                .iter()
                .filter(|k| k.name() == "draft_max=8 -ub=2")
                .count();
            assert_eq!(launched, 1, "{method:?}");
            assert_ne!(ranked[0].variant.name(), "draft_max=8 -ub=2", "{method:?}");
        }
    }

    #[test]
    fn halving_relaunches_its_survivors_and_the_grid_launches_each_variant_once() {
        let mut g = Model::new(0.0);
        let grid_ranked = search(
            Method::Grid,
            grid(&axes()),
            &BTreeSet::new(),
            full(),
            &mut g,
        );
        assert_eq!(g.launches, 8);
        let mut h = Model::new(0.0);
        search(
            Method::Halving,
            grid(&axes()),
            &BTreeSet::new(),
            full(),
            &mut h,
        );
        // 8 judged (one falls back), then the faster half of 7 (4), of 4 (2), the last (1).
        assert_eq!(h.launches, 8 + 4 + 2 + 1);
        assert_eq!(h.judged, (1..=8).collect::<Vec<_>>());
        assert_eq!(h.rejudged, 7);
        let speeds: Vec<f64> = h.keys[8..12].iter().map(Model::truth).collect();
        let mut all: Vec<f64> = h.keys[..8].iter().map(Model::truth).collect();
        all.sort_by(|a, b| b.total_cmp(a));
        assert_eq!(speeds, all[..4], "the four fastest go on");
        assert_eq!(grid_ranked[0].variant.name(), "draft_max=8 -ub=2");
        let last = grid_ranked.last().unwrap();
        assert_eq!(last.disqualified.as_deref(), Some("speculative fell back"));
    }
}
