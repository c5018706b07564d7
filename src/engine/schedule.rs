//! The ready queue of a run: in-degree counts over the step DAG, so a completion costs the
//! finished step's dependents, not a rescan of every step (linear in steps + edges overall).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::recipe::Step;

/// Where a step of the run stands.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum State {
    Pending,
    Running,
    Done,
    Failed,
    /// Left out by `--only` and never completed: fatal only to selected steps that need it.
    Missing,
}

/// Steps (by index, in dependency order) whose dependencies are all done, lowest index first so
/// a run starts steps in the recipe's order; the rest wait on a count of unfinished dependencies.
pub(super) struct Scheduler {
    pub(super) states: Vec<State>,
    /// Indices of each step's `needs`.
    deps: Vec<Vec<usize>>,
    /// Indices of the steps that need each step.
    dependents: Vec<Vec<usize>>,
    /// Unfinished dependencies of each pending step.
    waiting: Vec<usize>,
    ready: BinaryHeap<Reverse<usize>>,
}

impl Scheduler {
    /// `states` are the plan's verdicts: `Pending` for stale steps, `Done` for fresh or skipped
    /// ones, `Missing` for unselected steps that never completed.
    pub(super) fn new(steps: &[Step], states: Vec<State>) -> Scheduler {
        let index: HashMap<&str, usize> = steps
            .iter()
            .enumerate()
            .map(|(i, s)| (s.id.as_str(), i))
            .collect();
        let deps: Vec<Vec<usize>> = steps
            .iter()
            .map(|s| {
                s.needs
                    .iter()
                    .filter_map(|d| index.get(d.as_str()).copied())
                    .collect()
            })
            .collect();
        let mut dependents = vec![Vec::new(); steps.len()];
        for (i, ds) in deps.iter().enumerate() {
            for &d in ds {
                dependents[d].push(i);
            }
        }
        let waiting: Vec<usize> = deps
            .iter()
            .map(|ds| ds.iter().filter(|&&d| states[d] != State::Done).count())
            .collect();
        let ready = (0..steps.len())
            .filter(|&i| states[i] == State::Pending && waiting[i] == 0)
            .map(Reverse)
            .collect();
        Scheduler {
            states,
            deps,
            dependents,
            waiting,
            ready,
        }
    }

    /// Indices of the dependencies of step `i`.
    pub(super) fn deps(&self, i: usize) -> &[usize] {
        &self.deps[i]
    }

    /// The lowest ready step that `fits` (e.g. within the memory budget), now `Running`.
    pub(super) fn next(&mut self, mut fits: impl FnMut(usize) -> bool) -> Option<usize> {
        let mut passed = Vec::new();
        let found = loop {
            match self.ready.pop() {
                None => break None,
                Some(Reverse(i)) if self.states[i] != State::Pending => {}
                Some(Reverse(i)) if fits(i) => break Some(i),
                Some(r) => passed.push(r),
            }
        };
        self.ready.extend(passed);
        if let Some(i) = found {
            self.states[i] = State::Running;
        }
        found
    }

    /// Step `i` succeeded: its dependents with nothing else to wait for become ready.
    pub(super) fn done(&mut self, i: usize) {
        self.states[i] = State::Done;
        for &d in &self.dependents[i] {
            if self.states[d] == State::Pending {
                self.waiting[d] -= 1;
                if self.waiting[d] == 0 {
                    self.ready.push(Reverse(d));
                }
            }
        }
    }

    /// Steps `roots` failed (or are missing): every pending step downstream of them will never
    /// run. Returns those steps, now `Failed`, in recipe order, each with the first of its needs
    /// that failed or is missing.
    pub(super) fn fail(&mut self, roots: &[usize]) -> Vec<(usize, usize)> {
        let mut stack = Vec::new();
        for &r in roots {
            if self.states[r] != State::Missing {
                self.states[r] = State::Failed;
            }
            stack.push(r);
        }
        let mut failed = Vec::new();
        while let Some(i) = stack.pop() {
            for &d in &self.dependents[i] {
                if self.states[d] == State::Pending {
                    self.states[d] = State::Failed;
                    failed.push(d);
                    stack.push(d);
                }
            }
        }
        failed.sort_unstable();
        failed
            .into_iter()
            .map(|i| {
                let dep = self.deps[i]
                    .iter()
                    .copied()
                    .find(|&d| matches!(self.states[d], State::Failed | State::Missing))
                    .expect("a failed step has a failed or missing dependency");
                (i, dep)
            })
            .collect()
    }

    /// Whether some step failed or could not run.
    pub(super) fn any_failed(&self) -> bool {
        self.states.contains(&State::Failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(needs: &[&[&str]]) -> Vec<Step> {
        needs
            .iter()
            .enumerate()
            .map(|(i, n)| Step {
                id: format!("s{i}"),
                description: None,
                kind: crate::recipe::StepKind::Run {
                    cmd: crate::recipe::Cmd::Argv(vec!["true".into()]),
                    sass: None,
                },
                needs: n.iter().map(std::string::ToString::to_string).collect(),
                env: std::collections::BTreeMap::default(),
                cwd: "/".into(),
                inputs: Vec::new(),
                check: None,
                when: None,
                timeout: None,
                retries: 0,
                mem_per_job: None,
                requires: Vec::new(),
                outputs: Vec::new(),
                cache: true,
            })
            .collect()
    }

    #[test]
    fn releases_dependents_in_order_and_fails_downstream() {
        // s0 → s1 → s3, s0 → s2 → s3, s4 alone.
        let s = steps(&[&[], &["s0"], &["s0"], &["s1", "s2"], &[]]);
        let mut q = Scheduler::new(&s, vec![State::Pending; 5]);
        assert_eq!(q.next(|_| true), Some(0));
        assert_eq!(q.next(|_| true), Some(4));
        assert_eq!(q.next(|_| true), None);
        q.done(0);
        // s1 does not fit (memory): s2 starts first, s1 stays ready.
        assert_eq!(q.next(|i| i != 1), Some(2));
        assert_eq!(q.next(|_| true), Some(1));
        q.done(2);
        assert_eq!(q.fail(&[1]), vec![(3, 1)]);
        assert_eq!(q.states[3], State::Failed);
        assert_eq!(q.next(|_| true), None);
        assert!(q.any_failed());
    }

    #[test]
    fn a_missing_dependency_fails_what_needs_it() {
        let s = steps(&[&[], &["s0"], &["s1"]]);
        let mut q = Scheduler::new(&s, vec![State::Missing, State::Pending, State::Pending]);
        assert_eq!(q.next(|_| true), None);
        assert_eq!(q.fail(&[0]), vec![(1, 0), (2, 1)]);
    }
}
