//! Progress of a long compile, read from the step's own output: ninja's `[k/N]` status lines
//! (what cmake's Ninja generator and torch's extension builds under pip print), turned into
//! objects done of total, elapsed, and an ETA from the last run of the same step (its receipt's
//! duration), else from the rate so far. The full output still goes to the step log.

use std::time::{Duration, Instant};

use crate::report::BuildProgress as Progress;

/// Follows one step's output lines.
pub(crate) struct CompileProgress {
    started: Instant,
    /// How long the step took the last time it completed.
    last_run: Option<Duration>,
    /// (done, total) last reported.
    at: Option<(u64, u64)>,
    /// When the current `[k/N]` sequence started (a second ninja run starts another).
    sequence_started: Instant,
    /// The lowest rate-based ETA of this sequence so far: a later one well above it grew.
    lowest_eta: Option<Duration>,
}

/// How far a rate-based ETA may rise above its lowest before it is said to have grown: a
/// quarter, and at least a minute (small wobbles are noise).
fn grew(eta: Duration, lowest: Duration) -> bool {
    eta > lowest + lowest / 4 && eta > lowest + Duration::from_secs(60)
}

impl CompileProgress {
    pub(crate) fn new(last_run: Option<Duration>) -> Self {
        let now = Instant::now();
        CompileProgress {
            started: now,
            last_run,
            at: None,
            sequence_started: now,
            lowest_eta: None,
        }
    }

    /// The progress a line reports, when it moves it.
    pub(crate) fn line(&mut self, line: &str) -> Option<Progress> {
        self.line_at(line, Instant::now())
    }

    fn line_at(&mut self, line: &str, now: Instant) -> Option<Progress> {
        let (done, total) = ninja_status(line)?;
        match self.at {
            Some((d, t)) if t == total && d >= done => return None,
            Some((_, t)) if t == total => {}
            _ => {
                self.sequence_started = now;
                self.lowest_eta = None;
            }
        }
        self.at = Some((done, total));
        let elapsed = now.duration_since(self.started);
        let eta = match self.last_run {
            Some(last) => last.checked_sub(elapsed),
            // No time gone yet in this sequence (its first line): no rate, so no ETA (not 0 s).
            None if done > 0 && now > self.sequence_started => {
                let so_far = now.duration_since(self.sequence_started).as_secs_f64();
                #[allow(clippy::cast_precision_loss)] // object counts are small
                let per = so_far / done as f64;
                #[allow(clippy::cast_precision_loss)]
                Some(Duration::from_secs_f64(per * (total - done) as f64))
            }
            None => None,
        };
        let mut grew_from = None;
        if let (None, Some(eta)) = (self.last_run, eta) {
            match self.lowest_eta {
                Some(low) if grew(eta, low) => grew_from = Some(low),
                Some(low) if eta >= low => {}
                _ => self.lowest_eta = Some(eta),
            }
        }
        Some(Progress {
            done,
            total,
            elapsed,
            eta,
            last_run: self.last_run,
            grew_from,
        })
    }
}

/// `[12/206] Building CXX object …` → (12, 206): ninja's status line, at the start of a line.
pub(crate) fn ninja_status(line: &str) -> Option<(u64, u64)> {
    let rest = line.trim_start().strip_prefix('[')?;
    let (inside, after) = rest.split_once(']')?;
    if !after.starts_with(' ') {
        return None;
    }
    let (done, total) = inside.split_once('/')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(done) || !digits(total) {
        return None;
    }
    let (done, total) = (done.parse().ok()?, total.parse().ok()?);
    (done <= total && total > 0).then_some((done, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU demo's real llama-server build log (cmake -G Ninja).
    const LLAMA_SERVER: &str = include_str!("../../tests/fixtures/build/llama-server-ninja.log");

    #[test]
    fn ninja_status_lines_and_nothing_else() {
        assert_eq!(
            ninja_status("[12/206] Building CXX object ggml/src/ggml.cpp.o"),
            Some((12, 206))
        );
        assert_eq!(ninja_status("[ 45%] Building C object x.o"), None);
        assert_eq!(ninja_status("-- Configuring done (1.0s)"), None);
        assert_eq!(ninja_status("[7/3] nonsense"), None);
        assert_eq!(ninja_status("[1/2]glued"), None);
        assert_eq!(ninja_status("x [1/2] not at the start"), None);
    }

    #[test]
    fn the_llama_server_build_counts_every_object_once_in_order() {
        let t0 = Instant::now();
        let mut p = CompileProgress::new(None);
        let mut seen = Vec::new();
        for (i, line) in LLAMA_SERVER.lines().enumerate() {
            // One second per output line: the rate-based ETA is then exact arithmetic.
            if let Some(pr) = p.line_at(line, t0 + Duration::from_secs(i as u64)) {
                seen.push(pr);
            }
        }
        assert_eq!(seen.len(), 206);
        assert!(seen
            .iter()
            .enumerate()
            .all(|(i, s)| s.done == i as u64 + 1 && s.total == 206));
        let last = seen.last().unwrap();
        assert_eq!(last.eta, Some(Duration::ZERO));
        // Compiler warnings between status lines neither move nor reset the count.
        assert!(LLAMA_SERVER.contains("warning: ‘__Y’ is used uninitialized"));
    }

    #[test]
    fn the_eta_comes_from_the_last_run_when_there_is_one() {
        let t0 = Instant::now();
        let mut p = CompileProgress::new(Some(Duration::from_secs(930)));
        p.started = t0;
        let pr = p
            .line_at(
                "[103/206] Building CXX object x.o",
                t0 + Duration::from_secs(400),
            )
            .unwrap();
        assert_eq!(pr.eta, Some(Duration::from_secs(530)));
        assert_eq!(pr.last_run, Some(Duration::from_secs(930)));
        // Past the last run's duration: no ETA rather than a negative one.
        let pr = p
            .line_at("[200/206] Linking x", t0 + Duration::from_secs(1000))
            .unwrap();
        assert_eq!(pr.eta, None);
        // A repeated or older count reports nothing new.
        assert!(p
            .line_at("[150/206] y", t0 + Duration::from_secs(1001))
            .is_none());
    }

    #[test]
    fn a_rate_based_eta_that_grows_says_from_what() {
        let t0 = Instant::now();
        let mut p = CompileProgress::new(None);
        p.started = t0;
        p.sequence_started = t0;
        let at = |p: &mut CompileProgress, done: u64, secs: u64| {
            p.line_at(&format!("[{done}/200] x.o"), t0 + Duration::from_secs(secs))
                .unwrap()
        };
        // The sequence starts at its first status line (no rate yet, no ETA to speak of).
        at(&mut p, 1, 0);
        // 10 s an object: 1900 s to go; then quicker: the ETA falls, nothing grew.
        assert_eq!(at(&mut p, 10, 100).eta, Some(Duration::from_secs(1900)));
        let quick = at(&mut p, 40, 200);
        assert_eq!(
            (quick.eta, quick.grew_from),
            (Some(Duration::from_secs(800)), None)
        );
        // A slow stretch (a busy box): 20 s an object so far, the ETA above its lowest by more
        // than a quarter and a minute, said with the lowest it was.
        let slow = at(&mut p, 50, 1000);
        assert_eq!(slow.eta, Some(Duration::from_secs(3000)));
        assert_eq!(slow.grew_from, Some(Duration::from_secs(800)));
        // From the last run: counts down, never "grew".
        let mut q = CompileProgress::new(Some(Duration::from_secs(100)));
        q.started = t0;
        assert_eq!(
            q.line_at("[1/2] x", t0 + Duration::from_secs(10))
                .unwrap()
                .grew_from,
            None
        );
    }
}
