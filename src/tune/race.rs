//! The race, `kiln tune`'s default: every launch key is launched at most once, and each launch's
//! measurements are kept. A variant is screened with short runs; it then duels the leader on
//! the 95 % confidence interval of how much faster it is (Welch's interval of the difference of
//! mean decode tok/s, with the spread the runs show and a floor for timing noise). A challenger
//! that cannot beat the leader by [`WITHIN`] is out (so a duel its bounds decide leaves a winner
//! within that of the best); one that is faster beyond doubt takes the lead; in between both get
//! more runs, one measurement after the other (the challenger each round, the leader while it
//! has no more runs than the challenger), up to [`MAX_ROUNDS`] rounds, and then the lower mean
//! is out. The leader stays up, idle, while the next variant is launched and measured (two
//! servers at once, never two measurements at once); the last one standing gets the full
//! benchmark in its own, already warm, launch (so without the rung's warm-up requests; likewise
//! only a launch's first screening measurement has a warm-up: its greedy A/B has warmed it, and
//! each later one follows another). Without room for two servers ([`Evaluate::can_hold_two`]) a
//! new leader gets its full benchmark at once, before its launch ends.

use std::collections::BTreeSet;

use super::{rank, Entry, Evaluate, LaunchId, Rung, Variant};

/// More paired rounds of screening runs before a tie is broken by the mean. One: then a new
/// challenger has 6 requests and so has the leader where two servers are up (at least 6: it may
/// have more from earlier duels; alone, the leader keeps its 3), more than the 5 on which the grid
/// ranks each variant, and a further round buys a precision the grid does not have. On the H200 (per-request CV 4.6 %) two equal variants
/// still overlap the 2 % zone after 12 runs each, so the rounds bought nothing but time there
/// (`draft_max=2`'s tie: 14 s of a 74-s race, BENCHMARKS.md).
pub(crate) const MAX_ROUNDS: usize = 1;
/// The least relative spread a bound assumes: request timing on a quiet machine varies ~1 %.
pub(crate) const NOISE_FLOOR: f64 = 0.01;
/// How close is a tie: a challenger that cannot beat the leader by this much (relative) is not
/// measured further, so a duel its bounds decide leaves a winner within this of the better one
/// (at 95 %); a tie after [`MAX_ROUNDS`] goes to the higher mean.
pub(crate) const WITHIN: f64 = 0.02;

/// What an entry a stopped search never launched says (a time budget passed, or an interrupt).
pub(crate) const NOT_LAUNCHED: &str = "not launched: the search was stopped (budget or interrupt)";

/// A launch that failed: its variants are disqualified, failed, unless the search was
/// interrupted meanwhile (a start cut short says nothing of a variant): then not launched.
pub(crate) fn launch_failed(
    entries: &mut [Entry],
    group: &[usize],
    why: &str,
    eval: &mut dyn Evaluate,
) {
    let interrupted = eval.interrupted();
    for &i in group {
        if interrupted {
            entries[i].out = Some(NOT_LAUNCHED.into());
        } else {
            entries[i].disqualified = Some(format!("failed: {why}"));
        }
    }
    eval.checkpoint(entries);
}

/// The screening rung: one warm-up (none if the full rung has none), three runs of an eighth of
/// the full request (at least 64 tokens, at most the full request).
pub(crate) fn screen_rung(full: Rung) -> Rung {
    Rung {
        warmup: full.warmup.min(1),
        runs: 3,
        max_tokens: (full.max_tokens / 8).max(64).min(full.max_tokens),
    }
}

/// The entries of `among` grouped by launch key, in order of first appearance.
pub(crate) fn groups(
    entries: &[Entry],
    among: &[usize],
    request: &BTreeSet<String>,
) -> Vec<Vec<usize>> {
    // In the order each key first appears; found through a map (a list search is quadratic:
    // minutes for 100,000 variants).
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut at: std::collections::HashMap<Variant, usize> = std::collections::HashMap::new();
    for &i in among {
        let key = entries[i].variant.launch_key(request);
        let g = *at.entry(key).or_insert_with(|| {
            out.push(Vec::new());
            out.len() - 1
        });
        out[g].push(i);
    }
    out
}

/// How many launches `variants` need: one per launch key; `None` when `stop` said to stop.
pub(crate) fn launch_keys(
    variants: &[Variant],
    request: &BTreeSet<String>,
    stop: &dyn Fn() -> bool,
) -> Option<usize> {
    let mut keys = std::collections::HashSet::new();
    for (n, v) in variants.iter().enumerate() {
        if n % super::STOP_EVERY == 0 && stop() {
            return None;
        }
        keys.insert(v.launch_key(request));
    }
    Some(keys.len())
}

/// Two-sided 95 % Student t quantiles for 1..=10 degrees of freedom; 2.0 beyond.
fn t95(df: f64) -> f64 {
    const T: [f64; 10] = [12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23];
    // Welch's degrees of freedom are fractional: round down, the wider bound.
    let i = (df.floor().max(1.0) as usize).min(T.len() + 1);
    T.get(i - 1).copied().unwrap_or(2.0)
}

fn mean(runs: &[f64]) -> f64 {
    runs.iter().sum::<f64>() / runs.len().max(1) as f64
}

/// The sample variance of `runs`, at least that of a [`NOISE_FLOOR`] relative spread.
fn variance(runs: &[f64]) -> f64 {
    let (n, m) = (runs.len(), mean(runs));
    let var = if n > 1 {
        runs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64
    } else {
        0.0
    };
    var.max((NOISE_FLOOR * m).powi(2))
}

/// The 95 % confidence interval of how much faster `a` is than `b`, relative to `b`'s mean
/// (`0.03`: 3 % faster): Welch's interval of the difference of means, each spread at least
/// [`NOISE_FLOOR`]. Unbounded while either side has no runs.
pub(crate) fn advantage(a: &[f64], b: &[f64]) -> (f64, f64) {
    if a.is_empty() || b.is_empty() || mean(b) <= 0.0 {
        return (f64::NEG_INFINITY, f64::INFINITY);
    }
    let (va, vb) = (variance(a) / a.len() as f64, variance(b) / b.len() as f64);
    let df = (va + vb).powi(2)
        / (va.powi(2) / (a.len().max(2) - 1) as f64 + vb.powi(2) / (b.len().max(2) - 1) as f64);
    let half = t95(df) * (va + vb).sqrt();
    let d = mean(a) - mean(b);
    ((d - half) / mean(b), (d + half) / mean(b))
}

/// Launch each key once, screen, duel the leader, give the last one standing the full rung.
pub(crate) fn race(
    variants: Vec<Variant>,
    request: &BTreeSet<String>,
    full: Rung,
    eval: &mut dyn Evaluate,
) -> Vec<Entry> {
    let mut screen = Screen {
        rung: screen_rung(full),
        warm: BTreeSet::new(),
    };
    // Asked once the first server is up: the evaluator may measure what one server takes.
    let mut hold_two = None;
    let mut entries: Vec<Entry> = variants.into_iter().map(Entry::new).collect();
    let all: Vec<usize> = (0..entries.len()).collect();
    let mut leader: Option<(usize, LaunchId)> = None;
    let mut not_launched = Vec::new();
    for group in groups(&entries, &all, request) {
        if eval.interrupted() || eval.out_of_time() {
            not_launched.extend(group);
            continue;
        }
        let key = entries[group[0]].variant.launch_key(request);
        let launch = match eval.launch(&key) {
            Ok(l) => l,
            Err(why) => {
                launch_failed(&mut entries, &group, &why, eval);
                continue;
            }
        };
        let hold_two = *hold_two.get_or_insert_with(|| eval.can_hold_two());
        for &i in &group {
            if eval.interrupted() {
                break;
            }
            if !screened(&mut entries[i], launch, &mut screen, eval) {
                continue;
            }
            let won = match leader {
                None => true,
                Some((l, l_launch)) => {
                    let duel = Duel {
                        hold_two,
                        challenger: (i, launch),
                        leader: (l, l_launch),
                    };
                    let won = duel.run(&mut entries, &mut screen, eval) == i;
                    if won && l_launch != launch {
                        eval.stop(l_launch);
                    }
                    won
                }
            };
            if won {
                leader = Some((i, launch));
                if !hold_two {
                    finish(&mut entries[i], launch, full, eval);
                }
            }
        }
        if !hold_two || leader.is_none_or(|(_, l)| l != launch) {
            eval.stop(launch);
        }
        eval.checkpoint(&entries);
    }
    if let Some((l, launch)) = leader {
        if hold_two == Some(true) && !eval.interrupted() {
            overlap_check(&mut entries[l], launch, &mut screen, eval);
            finish(&mut entries[l], launch, full, eval);
        }
        eval.stop(launch);
    }
    if !not_launched.is_empty() {
        for i in not_launched {
            entries[i].out = Some(NOT_LAUNCHED.into());
        }
        eval.checkpoint(&entries);
    }
    rank(entries)
}

/// The screening rung, and the launches that have served a screening measurement: only a
/// launch's first has the rung's warm-up (each later one follows another measurement).
struct Screen {
    rung: Rung,
    warm: BTreeSet<LaunchId>,
}

impl Screen {
    /// One screening measurement of `e` on `launch`, kept on the entry.
    fn measure(
        &mut self,
        launch: LaunchId,
        e: &mut Entry,
        eval: &mut dyn Evaluate,
    ) -> Result<(), String> {
        let rung = if self.warm.contains(&launch) {
            Rung {
                warmup: 0,
                ..self.rung
            }
        } else {
            self.rung
        };
        let v = e.variant.clone();
        e.measurements.push(eval.measure(launch, &v, rung)?);
        self.warm.insert(launch);
        Ok(())
    }

    /// Every screening run of `e`, warm-ups aside.
    fn runs(&self, e: &Entry) -> Vec<f64> {
        e.runs_at(self.rung)
    }
}

/// Qualify (verdicts, greedy A/B), screen, and judge the verdicts again after the traffic.
/// Whether the entry is still in the race.
fn screened(e: &mut Entry, launch: LaunchId, screen: &mut Screen, eval: &mut dyn Evaluate) -> bool {
    let v = e.variant.clone();
    eval.qualify(launch, &v, false, e);
    if e.disqualified.is_some() {
        return false;
    }
    if let Err(why) = screen.measure(launch, e, eval) {
        e.disqualified = Some(format!("failed: {why}"));
        return false;
    }
    eval.qualify(launch, &v, true, e);
    e.disqualified.is_none()
}

/// The paired check of holding two servers: the leader, now alone, gets one more screening
/// measurement, compared with its screening runs measured while another server was up (idle).
/// The result is evidence on the entry: whether the overlap changed the figures, did not, or
/// whether its runs are too few to tell (at a few percent of per-request noise, as on the H200,
/// 3 runs against 3 to 12 cannot show a 2 % change either way; BENCHMARKS.md pools the record).
fn overlap_check(e: &mut Entry, launch: LaunchId, screen: &mut Screen, eval: &mut dyn Evaluate) {
    let beside: Vec<f64> = e
        .measurements
        .iter()
        .filter(|m| m.rung.same_requests(screen.rung) && m.others_up > 0)
        .flat_map(|m| m.runs.iter().copied())
        .collect();
    if beside.is_empty() || screen.measure(launch, e, eval).is_err() {
        return;
    }
    let alone = e.last().map(|m| m.runs.clone()).unwrap_or_default();
    let (lo, hi) = advantage(&alone, &beside);
    e.evidence.push(format!(
        "overlap check: alone vs beside another server {:+.1} % to {:+.1} % (95 %, {} and {} runs): {}",
        lo * 100.0,
        hi * 100.0,
        alone.len(),
        beside.len(),
        overlap_verdict(lo, hi)
    ));
}

/// What the overlap check's interval shows. The winner's own figure is always measured alone;
/// what an overlap could have changed is the duels, which ran beside an idle server.
fn overlap_verdict(lo: f64, hi: f64) -> &'static str {
    if lo > WITHIN || hi < -WITHIN {
        "the overlap changed the figures: the duels may have chosen wrongly (`--one-server` measures one server at a time)"
    } else if lo >= -WITHIN && hi <= WITHIN {
        "no change beyond 2 %"
    } else {
        "inconclusive: too few runs to show a 2 % change either way (the winner's figure is measured alone)"
    }
}

/// The full benchmark, in the entry's own (still running) launch. The launch has served the
/// screening runs, so the rung's warm-up requests would warm nothing.
fn finish(e: &mut Entry, launch: LaunchId, full: Rung, eval: &mut dyn Evaluate) {
    let v = e.variant.clone();
    match eval.measure(launch, &v, Rung { warmup: 0, ..full }) {
        Ok(m) => e.measurements.push(m),
        Err(why) => e.disqualified = Some(format!("failed: {why}")),
    }
}

/// A challenger against the leader, on screening runs.
struct Duel {
    hold_two: bool,
    challenger: (usize, LaunchId),
    leader: (usize, LaunchId),
}

impl Duel {
    /// The index of the one left standing; the other gets `out` (or `disqualified`).
    fn run(&self, entries: &mut [Entry], screen: &mut Screen, eval: &mut dyn Evaluate) -> usize {
        let ((c, c_launch), (l, l_launch)) = (self.challenger, self.leader);
        let name = |e: &Entry| e.variant.name();
        for round in 0..=MAX_ROUNDS {
            let (c_runs, l_runs) = (screen.runs(&entries[c]), screen.runs(&entries[l]));
            let (lo, hi) = advantage(&c_runs, &l_runs);
            let tokens = screen.rung.max_tokens;
            let pct = |x: f64| x * 100.0;
            if hi < WITHIN {
                entries[c].out = Some(format!(
                    "cannot beat `{}` by {:.0} %: at most {:+.1} % ({tokens}-token runs, {} and {})",
                    name(&entries[l]),
                    pct(WITHIN),
                    pct(hi),
                    c_runs.len(),
                    l_runs.len()
                ));
                return l;
            }
            if lo > 0.0 {
                entries[l].out = Some(format!(
                    "beaten by `{}`: it is at least {:+.1} % faster ({tokens}-token runs, {} and {})",
                    name(&entries[c]),
                    pct(lo),
                    c_runs.len(),
                    l_runs.len()
                ));
                return c;
            }
            if round == MAX_ROUNDS {
                let (cm, lm) = (mean(&c_runs), mean(&l_runs));
                let (lose, win, lo_m, hi_m) = if cm > lm {
                    (l, c, lm, cm)
                } else {
                    (c, l, cm, lm)
                };
                entries[lose].out = Some(format!(
                    "tied with `{}` within the noise ({} and {} runs); lower mean, {lo_m:.1} vs {hi_m:.1} tok/s",
                    name(&entries[win]),
                    c_runs.len(),
                    l_runs.len()
                ));
                return win;
            }
            if eval.interrupted() {
                return l;
            }
            // The bounds overlap: more runs, one measurement after the other (never at once):
            // the challenger's, and the leader's while it has no more runs than the challenger.
            if let Err(why) = screen.measure(c_launch, &mut entries[c], eval) {
                entries[c].disqualified = Some(format!("failed: {why}"));
                return l;
            }
            let (nc, nl) = (
                screen.runs(&entries[c]).len(),
                screen.runs(&entries[l]).len(),
            );
            if self.hold_two && nl <= nc {
                if let Err(why) = screen.measure(l_launch, &mut entries[l], eval) {
                    entries[l].disqualified = Some(format!("failed: {why}"));
                    return c;
                }
            }
        }
        unreachable!("the last round decides")
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::tune::{grid, search, Axis, Measurement, Method};

    /// A deterministic "server": tok/s is a function of the variant (the sum of its numeric
    /// settings), each run off by up to ±`noise` (relative, a fixed pseudo-random sequence); the
    /// variant summing to 17 falls back. It counts launches, tokens, servers up at once, and
    /// model seconds (5 s a launch, tokens at the true rate).
    pub(crate) struct Model {
        pub launches: usize,
        pub tokens: u64,
        pub seconds: f64,
        pub stop_after: Option<usize>,
        pub max_up: usize,
        pub keys: Vec<Variant>,
        pub hold_two: bool,
        /// How much slower (relative) a run is while another server is up.
        pub beside: f64,
        /// The launch of each greedy A/B and first verdicts (`qualify` before any traffic).
        pub judged: Vec<LaunchId>,
        /// How many times the verdicts were judged again after a measurement.
        pub rejudged: usize,
        /// The variant (by the sum of its settings) whose tuning falls back only once it has
        /// served (a draft acceptance read after traffic).
        pub falls_back_served: Option<f64>,
        noise: f64,
        up: BTreeSet<LaunchId>,
        seq: u64,
    }

    impl Model {
        pub(crate) fn new(noise: f64) -> Model {
            Model {
                launches: 0,
                tokens: 0,
                seconds: 0.0,
                stop_after: None,
                max_up: 0,
                keys: vec![],
                hold_two: true,
                beside: 0.0,
                judged: vec![],
                rejudged: 0,
                falls_back_served: None,
                noise,
                up: BTreeSet::new(),
                seq: 7,
            }
        }

        /// The launches not stopped yet.
        pub(crate) fn still_up(&self) -> usize {
            self.up.len()
        }

        fn x(v: &Variant) -> f64 {
            v.settings
                .iter()
                .map(|(_, v)| v.parse::<f64>().unwrap())
                .sum()
        }

        pub(crate) fn truth(v: &Variant) -> f64 {
            let x = Model::x(v);
            100.0 + 10.0 * x - x * x / 2.0
        }

        fn jitter(&mut self) -> f64 {
            self.seq = self
                .seq
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((self.seq >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        }
    }

    impl Evaluate for Model {
        fn launch(&mut self, key: &Variant) -> Result<LaunchId, String> {
            self.launches += 1;
            self.seconds += 5.0;
            self.keys.push(key.clone());
            self.up.insert(self.launches);
            self.max_up = self.max_up.max(self.up.len());
            Ok(self.launches)
        }

        fn qualify(&mut self, l: LaunchId, v: &Variant, served: bool, e: &mut Entry) {
            if served {
                self.rejudged += 1;
                if self
                    .falls_back_served
                    .is_some_and(|x| (Model::x(v) - x).abs() < f64::EPSILON)
                {
                    e.disqualified = Some("speculative fell back under traffic".into());
                }
            } else {
                self.judged.push(l);
            }
            if !served && (Model::x(v) - 17.0).abs() < f64::EPSILON {
                e.disqualified = Some("speculative fell back".into());
            }
        }

        fn measure(&mut self, l: LaunchId, v: &Variant, r: Rung) -> Result<Measurement, String> {
            assert!(self.up.contains(&l), "measured a stopped launch");
            let truth = Model::truth(v);
            let tokens = u64::from(r.runs * r.max_tokens + r.warmup * 64);
            self.tokens += tokens;
            self.seconds += tokens as f64 / truth;
            let slowed = if self.up.len() > 1 {
                1.0 - self.beside
            } else {
                1.0
            };
            let runs: Vec<f64> = (0..r.runs)
                .map(|_| truth * slowed * (1.0 + self.noise * self.jitter()))
                .collect();
            let s = crate::bench::stats::summarize(&runs).unwrap();
            Ok(Measurement {
                rung: r,
                tok_s: s.median,
                cv: s.cv,
                ttft_ms: 1.0,
                runs,
                launch: l,
                others_up: self.up.len() - 1,
            })
        }

        fn stop(&mut self, l: LaunchId) {
            self.up.remove(&l);
        }

        fn can_hold_two(&self) -> bool {
            self.hold_two
        }

        fn interrupted(&self) -> bool {
            self.stop_after.is_some_and(|n| self.launches >= n)
        }
    }

    fn axes() -> Vec<Axis> {
        vec![
            Axis::parse("draft_max=2,4,8,16").unwrap(),
            Axis::parse("ubatch=1,2").unwrap(),
        ]
    }

    fn full() -> Rung {
        Rung {
            warmup: 2,
            runs: 5,
            max_tokens: 2048,
        }
    }

    #[test]
    fn the_advantage_interval_is_welchs_with_a_noise_floor() {
        // Equal runs: the 1 % floor on each spread; df 4, t 2.78: ±2.78 * sqrt(2/3) %.
        let (lo, hi) = advantage(&[100.0; 3], &[100.0; 3]);
        assert!(
            (hi - 0.022_698).abs() < 1e-5 && (lo + hi).abs() < 1e-12,
            "{lo} {hi}"
        );
        // More runs narrow it; a faster side moves it; no runs leave it unbounded.
        let (lo6, hi6) = advantage(&[100.0; 6], &[100.0; 6]);
        assert!(hi6 < WITHIN && hi6 - lo6 < hi - lo, "{lo6} {hi6}");
        let (flo, fhi) = advantage(&[105.0, 106.0, 104.0], &[100.0, 101.0, 99.0]);
        assert!(flo > 0.0 && fhi < 0.1, "{flo} {fhi}");
        assert!(advantage(&[], &[1.0]).1.is_infinite());
        assert!(advantage(&[1.0], &[]).0.is_infinite());
    }

    #[test]
    fn the_overlap_check_says_changed_unchanged_or_too_few_runs_to_tell() {
        // Two H200 records (session6/): alone vs beside +0.5 % to +16.8 % (tune-race-3, 3 and 6
        // runs) and -21.1 % to +11.2 % (tune-race-1, 3 and 3): too few runs to tell. Then an
        // interval beyond 2 % either way, and one inside.
        assert!(overlap_verdict(0.005, 0.168).starts_with("inconclusive"));
        assert!(overlap_verdict(-0.211, 0.112).starts_with("inconclusive"));
        assert!(overlap_verdict(-0.06, -0.025).starts_with("the overlap changed the figures"));
        assert!(overlap_verdict(0.025, 0.06).starts_with("the overlap changed the figures"));
        assert_eq!(overlap_verdict(-0.013, 0.018), "no change beyond 2 %");
        // Through the race: quiet runs show no change; a server slowed 10 % beside another is
        // caught.
        let check = |beside: f64| {
            let mut m = Model::new(0.0);
            m.beside = beside;
            let ranked = search(
                Method::Race,
                grid(&axes()),
                &BTreeSet::new(),
                full(),
                &mut m,
            );
            ranked[0]
                .evidence
                .iter()
                .find(|l| l.starts_with("overlap check"))
                .cloned()
                .unwrap_or_default()
        };
        assert!(
            check(0.0).ends_with(": no change beyond 2 %"),
            "{}",
            check(0.0)
        );
        assert!(
            check(0.1).contains(": the overlap changed the figures"),
            "{}",
            check(0.1)
        );
    }

    #[test]
    fn a_tie_within_two_percent_is_settled_after_one_more_round() {
        let axes = vec![Axis::parse("a=1,1.0").unwrap()];
        let mut r = Model::new(0.0);
        let ranked = search(Method::Race, grid(&axes), &BTreeSet::new(), full(), &mut r);
        let screen = screen_rung(full());
        // The challenger: its screen and one more round (3 + 3 runs), never the full rung.
        let loser = &ranked[1];
        assert_eq!(loser.runs_at(screen).len(), 6, "{ranked:#?}");
        assert!(
            loser
                .out
                .as_deref()
                .is_some_and(|o| o.starts_with("cannot beat `a=1` by 2 %")),
            "{:?}",
            loser.out
        );
        assert_eq!(ranked[0].variant.name(), "a=1");
        // The winner: its screen, the round, and the overlap check's runs alone.
        assert_eq!(ranked[0].runs_at(screen).len(), 9);
    }

    #[test]
    fn the_race_launches_each_variant_once_and_finds_the_grids_winner_for_under_two_fifths_of_the_tokens(
    ) {
        let request = BTreeSet::new();
        let mut g = Model::new(0.02);
        let by_grid = search(Method::Grid, grid(&axes()), &request, full(), &mut g);
        let mut r = Model::new(0.02);
        let by_race = search(Method::Race, grid(&axes()), &request, full(), &mut r);
        assert_eq!(r.launches, 8, "one launch per variant");
        let mut keys: Vec<String> = r.keys.iter().map(Variant::name).collect();
        keys.dedup();
        assert_eq!(keys.len(), 8, "never relaunched");
        assert!(r.max_up <= 2, "{} servers at once", r.max_up);
        // The winner's paired check: alone (after the others stopped) vs beside another server.
        let check = by_race[0]
            .evidence
            .iter()
            .find(|l| l.starts_with("overlap check"));
        // At 2 % noise, 3 runs against 6 cannot show 2 % either way; no change is claimed.
        assert!(
            check.is_some_and(|l| l.contains("-2.2 % to +2.5 %") && l.contains("inconclusive")),
            "{:?}",
            by_race[0].evidence
        );
        assert!(by_race[0].measurements.iter().any(|m| m.others_up == 0));
        let best = Model::truth(&by_grid[0].variant);
        let chosen = &by_race[0];
        assert!(Model::truth(&chosen.variant) >= 0.98 * best);
        assert_eq!(
            chosen.last().unwrap().rung,
            Rung {
                warmup: 0,
                ..full()
            },
            "the winner's figure is a full run, in its warm launch"
        );
        // In this worst case (every new variant beats the leader) the race generates 36 % of
        // the grid's tokens; the launches, which both pay, are the rest of the cost.
        assert!(r.tokens * 5 <= g.tokens * 2, "{} vs {}", r.tokens, g.tokens);
        // Losers are out with a reason, never ranked above the winner; the fallen back is last.
        assert!(
            by_race[1..7].iter().all(|e| e.out.is_some()),
            "{by_race:#?}"
        );
        assert_eq!(
            by_race[7].disqualified.as_deref(),
            Some("speculative fell back")
        );
    }

    #[test]
    fn per_request_settings_share_their_launch() {
        let axes = vec![
            Axis::parse("ubatch=1,2").unwrap(),
            Axis::parse("top_k=3,4,5").unwrap(),
        ];
        let request: BTreeSet<String> = ["top_k".to_string()].into();
        let mut r = Model::new(0.0);
        let ranked = search(Method::Race, grid(&axes), &request, full(), &mut r);
        assert_eq!(r.launches, 2, "two launch keys");
        assert_eq!(ranked.len(), 6);
        assert_eq!(ranked[0].variant.name(), "ubatch=2 top_k=5");
    }

    #[test]
    fn without_room_for_two_servers_a_new_leader_is_finished_in_its_own_launch() {
        let mut r = Model::new(0.02);
        r.hold_two = false;
        let ranked = search(
            Method::Race,
            grid(&axes()),
            &BTreeSet::new(),
            full(),
            &mut r,
        );
        assert_eq!(r.launches, 8);
        assert_eq!(r.max_up, 1);
        assert_eq!(ranked[0].last().unwrap().rung.max_tokens, full().max_tokens);
    }

    #[test]
    fn an_interrupted_race_says_what_it_never_launched() {
        let mut r = Model::new(0.0);
        r.stop_after = Some(2);
        let ranked = search(
            Method::Race,
            grid(&axes()),
            &BTreeSet::new(),
            full(),
            &mut r,
        );
        assert_eq!(r.launches, 2);
        let never = ranked
            .iter()
            .filter(|e| {
                e.out
                    .as_deref()
                    .is_some_and(|o| o.starts_with("not launched"))
            })
            .count();
        assert_eq!(never, 6);
    }
}
