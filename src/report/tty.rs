//! The terminal: an overall bar that ticks steadily, a spinner per running step (a byte bar with
//! rate and ETA once the step moves bytes), bars for transfers, live lines, colour.

// The reporter is how kiln talks to the user: it prints.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::{human, Block, Outcome, Reporter};

const TICK: Duration = Duration::from_millis(120);

pub(super) struct TtyReporter {
    multi: MultiProgress,
    overall: Mutex<Option<ProgressBar>>,
    /// Spinners of running steps, transfer bars and live lines, by key.
    bars: Mutex<BTreeMap<String, ProgressBar>>,
    /// Keys whose bar already shows bytes.
    byte_bars: Mutex<BTreeSet<String>>,
}

impl Default for TtyReporter {
    fn default() -> Self {
        TtyReporter {
            multi: MultiProgress::with_draw_target(ProgressDrawTarget::stderr()),
            overall: Mutex::new(None),
            bars: Mutex::new(BTreeMap::new()),
            byte_bars: Mutex::new(BTreeSet::new()),
        }
    }
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template)
        .expect("valid template")
        .progress_chars("=> ")
}

/// A bar in bytes: done of total, rate and ETA (or done and rate without a total).
fn byte_style(indent: &str, total: Option<u64>) -> ProgressStyle {
    match total {
        Some(_) => style(&format!(
            "{indent}{{spinner}} {{prefix}} [{{bar:24}}] {{binary_bytes}}/{{binary_total_bytes}}, {{binary_bytes_per_sec}}, ETA {{eta}}"
        )),
        None => style(&format!(
            "{indent}{{spinner}} {{prefix}} {{binary_bytes}}, {{binary_bytes_per_sec}}"
        )),
    }
}

impl TtyReporter {
    fn println(&self, line: &str) {
        let _ = self.multi.println(crate::redact::scrub(line));
    }

    fn take(&self, key: &str) -> Option<ProgressBar> {
        self.byte_bars.lock().expect("reporter lock").remove(key);
        let bar = self.bars.lock().expect("reporter lock").remove(key)?;
        bar.finish_and_clear();
        self.multi.remove(&bar);
        Some(bar)
    }

    /// Show `done` of `total` bytes on the bar `key` (made with `prefix` if there is none).
    fn bytes(&self, key: &str, prefix: &str, indent: &str, done: u64, total: Option<u64>) {
        let mut bars = self.bars.lock().expect("reporter lock");
        let bar = bars.entry(key.to_string()).or_insert_with(|| {
            let b = self.multi.add(ProgressBar::new_spinner());
            b.set_prefix(prefix.to_string());
            b.enable_steady_tick(TICK);
            b
        });
        let mut byte_bars = self.byte_bars.lock().expect("reporter lock");
        if byte_bars.insert(key.to_string()) || bar.length() != total {
            bar.set_style(byte_style(indent, total));
            match total {
                Some(t) => bar.set_length(t),
                None => bar.unset_length(),
            }
            bar.reset_eta();
        }
        bar.set_position(done);
    }
}

impl Reporter for TtyReporter {
    fn run_started(&self, recipe: &str, to_run: usize, total: usize) {
        let bar = self.multi.add(ProgressBar::new(to_run as u64));
        bar.set_style(style(
            "{prefix:.bold} [{bar:30}] {pos}/{len} done, {elapsed}",
        ));
        // The same words as the plain header: what the bar's length counts.
        bar.set_prefix(human::run_header(recipe, to_run, total));
        // The elapsed time moves between step completions too.
        bar.enable_steady_tick(Duration::from_secs(1));
        *self.overall.lock().expect("reporter lock") = Some(bar);
    }
    fn step_started(&self, id: &str, kind: &str, attempt: u32) {
        let sp = self.multi.add(ProgressBar::new_spinner());
        sp.set_style(style("  {spinner} {prefix} {elapsed} {wide_msg:.dim}"));
        sp.set_prefix(format!("{id} [{kind}]{}", human::attempt(attempt)));
        sp.enable_steady_tick(TICK);
        if let Some(old) = self
            .bars
            .lock()
            .expect("reporter lock")
            .insert(id.to_string(), sp)
        {
            old.finish_and_clear();
            self.multi.remove(&old);
        }
        self.byte_bars.lock().expect("reporter lock").remove(id);
    }
    fn step_output(&self, id: &str, line: &str) {
        if self.byte_bars.lock().expect("reporter lock").contains(id) {
            return;
        }
        if let Some(sp) = self.bars.lock().expect("reporter lock").get(id) {
            // A child's line (a compiler's, a script printing a GPU name): its control
            // characters escaped, so no escape sequence in it steers the terminal.
            let shown: String = line.chars().take(100).collect();
            sp.set_message(crate::columns::escape_controls(&shown));
        }
    }
    fn step_bytes(&self, id: &str, done: u64, total: Option<u64>) {
        self.bytes(id, id, "  ", done, total);
    }
    fn step_progress(&self, id: &str, p: &super::BuildProgress) {
        let Some(sp) = self.bars.lock().expect("reporter lock").get(id).cloned() else {
            return;
        };
        if sp.length().is_none() {
            // The spinner becomes a bar at the first `[k/N]`.
            sp.set_style(style(
                "  {prefix} [{bar:24}] {pos}/{len} objects, {elapsed} {msg:.dim}",
            ));
        }
        sp.set_length(p.total);
        sp.set_position(p.done);
        sp.set_message(human::eta(p));
    }
    fn step_finished(&self, id: &str, outcome: &Outcome, elapsed: Duration) {
        let started = self.take(id).is_some();
        self.println(&human::outcome_line(id, outcome, elapsed));
        if started || matches!(outcome, Outcome::NotRun(_)) {
            if let Some(bar) = &*self.overall.lock().expect("reporter lock") {
                bar.inc(1);
            }
        }
    }
    fn run_finished(&self, ok: bool, elapsed: Duration) {
        if let Some(bar) = self.overall.lock().expect("reporter lock").take() {
            bar.finish_and_clear();
            self.multi.remove(&bar);
        }
        self.println(&human::run_end(ok, elapsed));
    }
    fn note(&self, text: &str) {
        self.println(&format!("kiln: {text}"));
    }
    fn warning(&self, text: &str) {
        self.println(&human::warning(text));
    }
    fn transfer(&self, what: &str, done: u64, total: Option<u64>) {
        self.bytes(&format!("transfer:{what}"), what, "", done, total);
    }
    fn transfer_finished(&self, what: &str) {
        self.take(&format!("transfer:{what}"));
    }
    fn live(&self, what: &str, text: Option<&str>) {
        let key = format!("live:{what}");
        match text {
            None => {
                self.take(&key);
            }
            Some(text) => {
                let mut bars = self.bars.lock().expect("reporter lock");
                let bar = bars.entry(key).or_insert_with(|| {
                    let b = self.multi.add(ProgressBar::new_spinner());
                    b.set_style(style("  {spinner} {prefix} {wide_msg}"));
                    b.set_prefix(what.to_string());
                    b.enable_steady_tick(TICK);
                    b
                });
                bar.set_message(text.to_string());
            }
        }
    }
    fn result(&self, block: &Block) {
        self.multi.suspend(|| super::plain::show(block, false));
    }
    fn finished(&self, _exit_code: u8, error: Option<&crate::error::Error>) {
        let keys: Vec<String> = self
            .bars
            .lock()
            .expect("reporter lock")
            .keys()
            .cloned()
            .collect();
        for key in keys {
            self.take(&key);
        }
        if let Some(e) = error {
            self.multi
                .suspend(|| eprintln!("{}", super::style::labels(&e.render())));
        }
    }
}
