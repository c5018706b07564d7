//! How many generation requests this process has sent to each server, by base URL: what a
//! launch's per-request log lines are checked against (more lines than requests is
//! `conflicting`). Counted in the one function that sends a generation request
//! ([`super::client::generate_watched`]: the readiness generation, the traffic request, the
//! greedy A/B, bench warm-ups and runs all go through it), so no caller can forget one.

use std::collections::BTreeMap;
use std::sync::Mutex;

static SENT: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());

fn key(base: &str) -> &str {
    base.trim_end_matches('/')
}

fn counts() -> std::sync::MutexGuard<'static, BTreeMap<String, usize>> {
    SENT.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One more generation request to `base`, counted before it is sent (one that fails on the way
/// may still have reached the server: counting it keeps the bound an upper bound).
pub(super) fn one_more(base: &str) {
    *counts().entry(key(base).to_string()).or_default() += 1;
}

/// The generation requests sent to `base` so far.
fn to(base: &str) -> usize {
    counts().get(key(base)).copied().unwrap_or(0)
}

/// The counts at one moment (a launch's start): what was sent to a server since then is that
/// launch's, whichever server had the URL before.
#[derive(Debug, Clone, Default)]
pub struct Mark(BTreeMap<String, usize>);

impl Mark {
    pub fn now() -> Mark {
        Mark(counts().clone())
    }

    /// The generation requests sent to `base` since the mark.
    pub fn since(&self, base: &str) -> usize {
        to(base).saturating_sub(self.0.get(key(base)).copied().unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_counts_only_the_requests_after_it_to_that_url() {
        let (a, b) = ("http://127.0.0.1:1/", "http://127.0.0.1:2");
        one_more(a);
        let mark = Mark::now();
        assert_eq!(mark.since(a), 0);
        one_more("http://127.0.0.1:1");
        one_more(a);
        one_more(b);
        assert_eq!(mark.since("http://127.0.0.1:1"), 2);
        assert_eq!(mark.since(b), 1);
        assert_eq!(mark.since("http://127.0.0.1:3"), 0);
    }
}
