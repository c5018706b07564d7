//! The real evaluator of `kiln tune`: each launch is the pipeline's (`pipeline::launch`), judged
//! with its verdicts, compared with the reference's greedy output, and benchmarked with
//! `bench::run` (per-request knobs in every request). Variants are measured, not recorded: they
//! stay out of the bench history.
//!
//! Each launch gets its own server log (`serve/<recipe>-<profile>.tuneN.log`) and, when the
//! recipe has a `port` variable and two servers are allowed, its own free port: the race keeps
//! its leader up while it measures the next variant, where the GPUs' memory holds two (what the
//! first server took, measured by `nvidia-smi` before and after it came up).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::{knobs, Entry, Evaluate, LaunchId, Measurement, Rung, Variant};
use crate::bench::wire::escape_controls;
use crate::bench::{self, ab};
use crate::error::{Error, Result};
use crate::host::gpu::Gpu;
use crate::host::Facts;
use crate::paths::StatePaths;
use crate::pipeline::{self, Launched, Session};
use crate::recipe::args::set_flag;
use crate::recipe::{Profile, Recipe};

/// Loads the recipe with extra `KEY=VALUE` overrides (the variant's variables).
pub(crate) type Loader<'a> = dyn Fn(&[String]) -> Result<Recipe> + 'a;

/// What a launch of the search took, for the cost estimate of the next one.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct LaunchRecord {
    pub launch: usize,
    pub variant: String,
    /// Start to ready, seconds.
    pub ready_s: f64,
    /// Start to stop, seconds.
    pub held_s: f64,
    /// Of that: judging it (verdicts, greedy A/B), benchmarking it, and stopping it.
    pub qualify_s: f64,
    pub measure_s: f64,
    pub stop_s: f64,
    pub log: std::path::PathBuf,
}

/// What the evaluator calls as each launch's variants are done with (see `on_checkpoint`).
pub(crate) type Checkpoint<'a> = dyn FnMut(&[Entry], &[LaunchRecord]) + 'a;

pub(crate) struct Evaluator<'a> {
    pub load: &'a Loader<'a>,
    pub paths: &'a StatePaths,
    pub facts: &'a Facts,
    pub profile: &'a str,
    pub reference: Option<&'a [ab::Output]>,
    pub ab_tokens: u32,
    /// The per-request keys (sent in the body, not set at launch).
    pub request: BTreeSet<String>,
    /// Two servers may be up at once: the recipe has a `port` variable to give each its own,
    /// and `--one-server` was not passed. The caller sets it (default: no).
    pub allow_two: bool,
    pub deadline: Option<Instant>,
    pub say: &'a mut dyn FnMut(&str),
    launched: BTreeMap<LaunchId, (Launched<'static>, &'static Recipe, Instant)>,
    pub records: Vec<LaunchRecord>,
    /// GPU memory (MiB) the first server took and what it left free, from `nvidia-smi` before
    /// and after it came up; none without GPUs.
    room: Option<Room>,
    /// Called as each launch's variants are done with: the search so far and every launch's
    /// record (the caller writes the results file).
    pub on_checkpoint: Option<&'a mut Checkpoint<'a>>,
}

impl<'a> Evaluator<'a> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        load: &'a Loader<'a>,
        paths: &'a StatePaths,
        facts: &'a Facts,
        profile: &'a str,
        reference: Option<&'a [ab::Output]>,
        ab_tokens: u32,
        request: BTreeSet<String>,
        say: &'a mut dyn FnMut(&str),
    ) -> Evaluator<'a> {
        Evaluator {
            load,
            paths,
            facts,
            profile,
            reference,
            ab_tokens,
            request,
            allow_two: false,
            deadline: None,
            say,
            launched: BTreeMap::new(),
            records: Vec::new(),
            room: None,
            on_checkpoint: None,
        }
    }

    pub(crate) fn launches(&self) -> usize {
        self.records.len()
    }

    /// The launch's record, to add the time a phase took.
    fn record(&mut self, launch: LaunchId) -> Option<&mut LaunchRecord> {
        self.records.iter_mut().find(|r| r.launch == launch)
    }

    pub(crate) fn resolve(&self, v: &Variant, port: Option<u16>) -> Result<(Recipe, Profile)> {
        resolve(self.load, self.profile, &self.request, v, port)
    }

    fn extra(&self, v: &Variant) -> Vec<(String, serde_json::Value)> {
        v.request(&self.request)
            .into_iter()
            .map(|(k, val)| {
                let json = knobs::value(&val);
                (k, json)
            })
            .collect()
    }

    /// A milestone on its way to the terminal: a `--vary` value or a launch error carrying one
    /// cannot move the cursor or retitle the terminal (OSC/CSI escapes are escaped).
    fn tell(&mut self, s: &str) {
        (self.say)(&escape_controls(s));
    }

    fn url(&self, l: &Launched) -> std::result::Result<String, String> {
        l.running
            .record
            .url
            .clone()
            .ok_or_else(|| format!("profile `{}` has no port or url to query", self.profile))
    }

    fn try_launch(&mut self, key: &Variant) -> Result<LaunchId> {
        let id = self.records.len() + 1;
        let port = self.can_hold_two().then(free_port).flatten();
        let (recipe, p) = self.resolve(key, port)?;
        // A launch borrows its recipe and profile for as long as it is up, and the race keeps
        // launches across calls: they live for the rest of this (short-lived) process.
        let recipe: &'static Recipe = Box::leak(Box::new(recipe));
        let profile: &'static Profile = Box::leak(Box::new(p));
        let name: &'static str = Box::leak(format!("{}.tune{id}", self.profile).into_boxed_str());
        let s = Session {
            recipe,
            paths: self.paths,
            facts: self.facts,
        };
        self.tell(&format!("tune: launch {id}: `{}`", key.name()));
        let before = (id == 1 && self.allow_two)
            .then(crate::host::gpu::query_gpus)
            .flatten();
        let started = Instant::now();
        let variant = pipeline::Variant { name, profile };
        let launched = pipeline::launch(s, variant, false, None, &mut |_| {})?;
        if let Some(before) = before {
            self.measure_room(&before);
        }
        self.records.push(LaunchRecord {
            launch: id,
            variant: key.name(),
            ready_s: launched.running.ready_after.as_secs_f64(),
            held_s: 0.0,
            qualify_s: 0.0,
            measure_s: 0.0,
            stop_s: 0.0,
            log: launched.running.record.log.clone(),
        });
        self.launched.insert(id, (launched, recipe, started));
        Ok(id)
    }

    /// What the first server took of the GPUs' memory and whether a second one fits: said once,
    /// and read by [`Evaluate::can_hold_two`].
    fn measure_room(&mut self, before: &[Gpu]) {
        let Some(after) = crate::host::gpu::query_gpus() else {
            return;
        };
        let Some(room) = Room::between(before, &after) else {
            return;
        };
        self.room = Some(room);
        self.tell(&format!(
            "tune: one server takes {} MiB of GPU memory and {} MiB are free: {}",
            room.one_mib,
            room.free_mib,
            if room.fits_another() {
                "the leader stays up while the next variant is measured"
            } else {
                "one server at a time"
            }
        ));
    }

    fn verdicts(&self, launch: LaunchId, served: bool, e: &mut Entry) {
        let Some((l, _, _)) = self.launched.get(&launch) else {
            return;
        };
        let verdicts = pipeline::verdicts(l, served);
        record_verdicts(e, &verdicts, &unprovable(&l.sigs));
    }

    fn greedy_ab(&self, launch: LaunchId, v: &Variant, e: &mut Entry) -> Result<()> {
        let (Some(reference), Some((l, _, _))) = (self.reference, self.launched.get(&launch))
        else {
            return Ok(());
        };
        let url = self.url(l).map_err(|m| Error::other(m, None))?;
        let extra = greedy_extra(self.extra(v));
        let got = ab::collect_with(&url, l.running.api, self.ab_tokens, &extra)?;
        let cmp = ab::compare(reference, &got, (self.ab_tokens / 2) as usize);
        e.evidence.push(format!(
            "greedy A/B: {} ({:.1}% tokens agree)",
            cmp.verdict,
            cmp.agreement * 100.0
        ));
        if cmp.verdict == "wrong output" {
            e.disqualified = Some(format!(
                "wrong greedy output ({:.1}% tokens agree with the baseline)",
                cmp.agreement * 100.0
            ));
        }
        Ok(())
    }

    fn try_measure(&mut self, launch: LaunchId, v: &Variant, rung: Rung) -> Result<Measurement> {
        let others_up = self.launched.len().saturating_sub(1);
        let (l, _, _) = self
            .launched
            .get(&launch)
            .ok_or_else(|| Error::other(format!("launch {launch} is not up"), None))?;
        let url = self.url(l).map_err(|m| Error::other(m, None))?;
        let extra = self.extra(v);
        let run = bench::Options {
            url: &url,
            api: l.running.api,
            max_tokens: rung.max_tokens,
            runs: rung.runs,
            warmup: rung.warmup,
            prompt: bench::DEFAULT_PROMPT,
            timeout: bench::client::default_deadline(rung.max_tokens),
            extra: &extra,
        };
        let fp = pipeline::bench_fingerprint(self.facts, &url, l.running.api);
        let report = bench::run(&run, fp, &mut |_| {}, &mut |_| {})?;
        let (_, headline) = report.headline();
        let runs = report
            .runs
            .iter()
            .map(|r| r.decode_tok_s.unwrap_or(r.e2e_tok_s))
            .collect();
        self.tell(&format!(
            "tune: `{}` (launch {launch}): {:.1} tok/s, CV {:.1}% ({} x {} tokens)",
            v.name(),
            headline.median,
            headline.cv * 100.0,
            rung.runs,
            rung.max_tokens
        ));
        Ok(Measurement {
            rung,
            tok_s: headline.median,
            cv: headline.cv,
            ttft_ms: report.ttft_ms.median,
            runs,
            launch,
            others_up,
        })
    }
}

impl Evaluate for Evaluator<'_> {
    fn launch(&mut self, key: &Variant) -> std::result::Result<LaunchId, String> {
        self.try_launch(key).map_err(|e| {
            let msg = e.to_string();
            self.tell(&format!("tune: `{}` failed: {msg}", key.name()));
            msg.lines().next().unwrap_or("").to_string()
        })
    }

    fn qualify(&mut self, launch: LaunchId, v: &Variant, served: bool, e: &mut Entry) {
        let t0 = Instant::now();
        self.verdicts(launch, served, e);
        if !served && e.disqualified.is_none() {
            if let Err(err) = self.greedy_ab(launch, v, e) {
                e.disqualified = Some(format!(
                    "failed: {}",
                    err.to_string().lines().next().unwrap_or("")
                ));
            }
        }
        if let Some(r) = self.record(launch) {
            r.qualify_s += t0.elapsed().as_secs_f64();
        }
    }

    fn measure(
        &mut self,
        launch: LaunchId,
        v: &Variant,
        rung: Rung,
    ) -> std::result::Result<Measurement, String> {
        let t0 = Instant::now();
        let got = self.try_measure(launch, v, rung);
        if let Some(r) = self.record(launch) {
            r.measure_s += t0.elapsed().as_secs_f64();
        }
        got.map_err(|e| {
            let msg = e.to_string();
            self.tell(&format!("tune: `{}` failed: {msg}", v.name()));
            msg.lines().next().unwrap_or("").to_string()
        })
    }

    fn stop(&mut self, launch: LaunchId) {
        if let Some((l, recipe, started)) = self.launched.remove(&launch) {
            let s = Session {
                recipe,
                paths: self.paths,
                facts: self.facts,
            };
            let t0 = Instant::now();
            l.stop(s);
            if let Some(r) = self.record(launch) {
                r.held_s = started.elapsed().as_secs_f64();
                r.stop_s = t0.elapsed().as_secs_f64();
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn can_hold_two(&self) -> bool {
        self.allow_two && self.room.is_none_or(Room::fits_another)
    }

    fn interrupted(&self) -> bool {
        crate::process::interrupted()
    }

    fn out_of_time(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    fn checkpoint(&mut self, entries: &[Entry]) {
        if let Some(write) = self.on_checkpoint.as_mut() {
            write(entries, &self.records);
        }
    }
}

impl Drop for Evaluator<'_> {
    fn drop(&mut self) {
        let up: Vec<LaunchId> = self.launched.keys().copied().collect();
        for id in up {
            self.stop(id);
        }
    }
}

/// The recipe with the variant's variables set (and `port`, when given), and `profile` with the
/// variant's flags added. Per-request keys (`request`) are part of neither.
pub(crate) fn resolve(
    load: &Loader,
    profile: &str,
    request: &BTreeSet<String>,
    v: &Variant,
    port: Option<u16>,
) -> Result<(Recipe, Profile)> {
    let mut sets: Vec<String> = v
        .settings
        .iter()
        .filter(|(k, _)| !k.starts_with('-') && !request.contains(k))
        .map(|(k, val)| format!("{k}={val}"))
        .collect();
    if let Some(p) = port {
        sets.push(format!("port={p}"));
    }
    let recipe = load(&sets)?;
    let mut p = pipeline::Variant::pick(&recipe, Some(profile))?
        .profile
        .clone();
    for (k, val) in v.settings.iter().filter(|(k, _)| k.starts_with('-')) {
        set_flag(&mut p.args, k, val);
    }
    Ok((recipe, p))
}

/// The GPU memory one server took (used after it came up minus before, on each GPU) and whether
/// each GPU it used has that much again free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Room {
    /// Over all GPUs.
    one_mib: u64,
    /// Free on the tightest GPU the server used.
    free_mib: u64,
    fits: bool,
}

impl Room {
    /// `None` where the driver does not report used memory or the GPUs changed.
    fn between(before: &[Gpu], after: &[Gpu]) -> Option<Room> {
        if before.len() != after.len() {
            return None;
        }
        let mut room = Room {
            one_mib: 0,
            free_mib: u64::MAX,
            fits: true,
        };
        for (b, a) in before.iter().zip(after) {
            let (u0, u1) = (b.memory_used_mib?, a.memory_used_mib?);
            let (one, free) = (u1.saturating_sub(u0), a.memory_mib.saturating_sub(u1));
            room.one_mib += one;
            if one > 0 {
                room.free_mib = room.free_mib.min(free);
                room.fits &= free >= one + one / 10;
            }
        }
        if room.free_mib == u64::MAX {
            room.free_mib = after
                .iter()
                .map(|g| g.memory_mib.saturating_sub(g.memory_used_mib.unwrap_or(0)))
                .min()
                .unwrap_or(0);
        }
        Some(room)
    }

    /// A second server fits, with a tenth to spare.
    fn fits_another(self) -> bool {
        self.fits
    }
}

/// A port nothing listens on now (the OS picks it).
fn free_port() -> Option<u16> {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .ok()
}

/// The tunings whose signatures make the server's settings dump the most there is to see
/// (SGLang 0.5.15's attention backend: only that dump, and the lines of a fallback, name it).
fn unprovable(sigs: &crate::serve::signatures::Signatures) -> Vec<String> {
    sigs.features
        .iter()
        .filter(|f| f.settings_are_the_most_shown())
        .map(|f| f.id.clone())
        .collect()
}

/// A variant's verdicts into its entry: each one an evidence line; the first that is not proven
/// active disqualifies it. Each verdict already judges by what the variant's own launch asked
/// for (`serve::verdict`: `-ngl 12` getting 12 of 17 layers is active, as asked). A tuning in
/// `unprovable` (nothing the server shows can prove it) that reads `configured` is the most its
/// launch can show: it does not disqualify (a fallback line still does), and its evidence line
/// says so.
fn record_verdicts(
    e: &mut Entry,
    verdicts: &[crate::serve::verdict::Verdict],
    unprovable: &[String],
) {
    use crate::serve::verdict::Status;
    let best_shown = |v: &crate::serve::verdict::Verdict| {
        v.status == Status::Configured && unprovable.contains(&v.feature)
    };
    e.evidence.retain(|line| !line.starts_with("verdict "));
    for v in verdicts {
        e.evidence.push(format!(
            "verdict {}: {}: {}{}",
            v.feature,
            v.status.label(),
            v.reason,
            if best_shown(v) {
                " (the server shows no more than its settings for this tuning)"
            } else {
                ""
            }
        ));
    }
    if let Some(bad) = verdicts
        .iter()
        .find(|v| !v.status.proven_active() && !best_shown(v))
    {
        e.disqualified = Some(format!(
            "{} {}: {}",
            bad.feature,
            bad.status.label(),
            bad.reason
        ));
    }
}

/// The A/B compares greedy outputs, so its requests decode greedily whatever the variant sets:
/// the variant's `temperature` and `top_k` give way to 0 and 1 (its other knobs stay; with one
/// candidate token they cannot change the pick).
fn greedy_extra(extra: Vec<(String, serde_json::Value)>) -> Vec<(String, serde_json::Value)> {
    let mut out: Vec<_> = extra
        .into_iter()
        .filter(|(k, _)| k != "temperature" && k != "top_k")
        .collect();
    out.push(("temperature".to_string(), serde_json::json!(0)));
    out.push(("top_k".to_string(), serde_json::json!(1)));
    out
}

#[cfg(test)]
mod tests {
    use super::{greedy_extra, record_verdicts, Room};
    use crate::tune::{Entry, Variant};

    /// `kiln tune llama-cuda --profile tuned --vary=-ngl=999,12`, judged on the real H200
    /// llama-server log (`llama-cuda-baseline.log`, launched with `-ngl 999`), its offload lines
    /// as llama.cpp prints them for what each variant got.
    fn judged(ngl: &str, got: &str) -> Entry {
        use crate::serve::signatures::Signatures;
        use crate::serve::verdict::{judge, Evidence};
        let capture =
            include_str!("../../tests/fixtures/gpu-llama/h200-run2/llama-cuda-baseline.log");
        let log: Vec<String> = capture
            .lines()
            .skip(1) // kiln's `=== kiln serve ...` header
            .map(|l| {
                l.replace(
                    "offloaded 17/17 layers",
                    &format!("offloaded {got}/17 layers"),
                )
            })
            .collect();
        let sigs =
            Signatures::resolve("llama-server", std::path::Path::new("/nonexistent")).unwrap();
        let profile = crate::recipe::Profile {
            cmd: vec!["llama-server".into()],
            args: ["-m", "target.gguf", "-ngl", ngl, "-fa", "off"]
                .map(String::from)
                .to_vec(),
            ..crate::recipe::Profile::default()
        };
        let ev = Evidence {
            log: &log,
            after_traffic: true,
            ..Evidence::default()
        };
        let mut e = Entry::new(Variant {
            settings: vec![("-ngl".into(), ngl.into())],
        });
        record_verdicts(
            &mut e,
            &judge(&sigs, &profile, &ev),
            &super::unprovable(&sigs),
        );
        e
    }

    #[test]
    fn a_variant_that_asks_for_12_layers_and_gets_12_is_benchmarked_not_disqualified() {
        let asked_12 = judged("12", "12");
        assert!(asked_12.disqualified.is_none(), "{asked_12:?}");
        assert!(
            asked_12
                .evidence
                .iter()
                .any(|l| l.contains("offload") && l.contains("as asked (12 asked)")),
            "{:?}",
            asked_12.evidence
        );
        // The same 12 layers under `-ngl 999` fell back; 17 of 17 under it is active.
        let fell = judged("999", "12");
        assert!(
            fell.disqualified
                .as_deref()
                .is_some_and(|d| d.starts_with("offload ")),
            "{fell:?}"
        );
        assert!(judged("999", "17").disqualified.is_none());
        // Fewer than asked is still a fallback.
        assert!(judged("12", "11").disqualified.is_some());
    }

    #[test]
    fn only_a_proven_active_tuning_qualifies_a_variant() {
        use crate::serve::verdict::{Status, Verdict};
        let verdict = |feature: &str, status: Status| Verdict {
            feature: feature.into(),
            status,
            reason: format!("why {feature}"),
            evidence: None,
        };
        let entry = |verdicts: &[Verdict]| {
            let mut e = Entry::new(Variant { settings: vec![] });
            e.evidence
                .push("verdict old: active: an earlier launch".into());
            record_verdicts(&mut e, verdicts, &[]);
            e
        };
        let active = entry(&[verdict("flash-attn", Status::Active)]);
        assert!(active.disqualified.is_none(), "{active:?}");
        // The earlier launch's verdicts are replaced, not added to.
        assert_eq!(
            active.evidence,
            ["verdict flash-attn: active: why flash-attn"]
        );
        // Configured (a settings echo) and unknown prove nothing: the variant is not qualified.
        for status in [
            Status::Configured,
            Status::Unknown,
            Status::FellBack,
            Status::Crashed,
            Status::Conflicting,
        ] {
            let e = entry(&[
                verdict("graphs", Status::Active),
                verdict("spec", status),
                verdict("later", status),
            ]);
            assert_eq!(
                e.disqualified,
                Some(format!("spec {}: why spec", status.label())),
                "{status:?}"
            );
            assert_eq!(e.evidence.len(), 3, "{e:?}");
        }
    }

    /// SGLang 0.5.15's `tuned` launch on an H100 (session 17's capture): its attention backend
    /// shows only in the settings dump, its CUDA graphs in capture lines.
    fn sglang_tuned(extra_line: Option<&str>, unprovable: bool) -> Entry {
        use crate::serve::signatures::Signatures;
        use crate::serve::verdict::{judge, Evidence};
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/gpu-h100-sglang/sglang-cuda-tuned.log");
        let mut log: Vec<String> = std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .skip(1) // kiln's `=== kiln serve ...` header
            .map(String::from)
            .collect();
        // Where SGLang logs its overrides: before the model loads.
        if let Some(line) = extra_line {
            let at = log
                .iter()
                .position(|l| l.contains("Init torch distributed begin"))
                .unwrap();
            log.insert(at, line.to_string());
        }
        let sigs =
            Signatures::resolve("sglang-0.5.15", std::path::Path::new("/nonexistent")).unwrap();
        let profile = crate::recipe::Profile {
            cmd: vec!["python".into()],
            args: ["--attention-backend", "triton", "--cuda-graph-max-bs", "8"]
                .map(String::from)
                .to_vec(),
            expect: vec!["attention-backend".into(), "cuda-graphs".into()],
            ..crate::recipe::Profile::default()
        };
        let ev = Evidence {
            log: &log,
            after_traffic: true,
            ..Evidence::default()
        };
        let mut e = Entry::new(Variant { settings: vec![] });
        let unprovable = if unprovable {
            super::unprovable(&sigs)
        } else {
            Vec::new()
        };
        record_verdicts(&mut e, &judge(&sigs, &profile, &ev), &unprovable);
        e
    }

    #[test]
    fn a_tuning_the_server_cannot_prove_qualifies_as_configured_and_a_fallback_line_still_disqualifies(
    ) {
        // The real SGLang 0.5.15 launch: attention-backend can only read `configured` (no line
        // of that version shows a backend at work), CUDA graphs are active.
        let e = sglang_tuned(None, true);
        assert!(e.disqualified.is_none(), "{e:?}");
        assert!(
            e.evidence
                .iter()
                .any(|l| l.starts_with("verdict attention-backend: configured:")
                    && l.ends_with("(the server shows no more than its settings for this tuning)")),
            "{e:?}"
        );
        assert!(
            e.evidence
                .iter()
                .any(|l| l.starts_with("verdict cuda-graphs: active:")),
            "{e:?}"
        );
        // Only a tuning nothing can prove is let through as configured.
        let strict = sglang_tuned(None, false);
        assert!(
            strict
                .disqualified
                .as_deref()
                .is_some_and(|d| d.starts_with("attention-backend configured")),
            "{strict:?}"
        );
        // SGLang's own fallback line for it still disqualifies.
        let overridden = sglang_tuned(
            Some("[2026-12-05 15:13:16] Overriding --attention-backend to flashinfer"),
            true,
        );
        assert!(
            overridden
                .disqualified
                .as_deref()
                .is_some_and(|d| d.starts_with("attention-backend fell back")),
            "{overridden:?}"
        );
        // In every shipped set, the attention backend is the one such tuning: never torch
        // symmetric memory (the seed's silent fallback) or anything a line can prove.
        for set in ["sglang-0.5.15", "sglang-0.5.9", "llama-server"] {
            let sigs = crate::serve::signatures::Signatures::resolve(
                set,
                std::path::Path::new("/nonexistent"),
            )
            .unwrap();
            let want: &[&str] = if set == "llama-server" {
                &[]
            } else {
                &["attention-backend"]
            };
            assert_eq!(super::unprovable(&sigs), want, "{set}");
        }
    }

    use serde_json::json;

    #[test]
    fn the_greedy_ab_decodes_greedily_whatever_the_variant_samples_with() {
        // A `--vary temperature=1.5 --vary top_k=40 --vary top_p=0.9` variant's request fields.
        let variant = vec![
            ("temperature".to_string(), json!(1.5)),
            ("top_k".to_string(), json!(40)),
            ("top_p".to_string(), json!(0.9)),
        ];
        let got = greedy_extra(variant);
        assert_eq!(
            got,
            vec![
                ("top_p".to_string(), json!(0.9)),
                ("temperature".to_string(), json!(0)),
                ("top_k".to_string(), json!(1)),
            ]
        );
        // A variant that sets neither still asks for top_k 1 (temperature 0 alone leaves
        // llama.cpp's sampler chain in place).
        assert_eq!(greedy_extra(vec![]).len(), 2);
    }
    use crate::host::gpu::parse_csv;

    #[test]
    fn a_second_server_fits_where_the_first_left_room_for_it() {
        // The real 2x H200 capture (after its `$ nvidia-smi ...` line), before any server...
        let capture = include_str!("../../tests/fixtures/gpu/h200x2/nvidia-smi-query.txt");
        let before = parse_csv(capture.split_once('\n').unwrap().1);
        assert!(!before.is_empty() && before[0].memory_used_mib.is_some());
        let with = |used: u64| {
            let mut g = before.clone();
            g[0].memory_used_mib = Some(before[0].memory_used_mib.unwrap() + used);
            g
        };
        // ...and after a 2.3 GiB server (the 1B llama-cuda model) or a 100 GiB one.
        let small = Room::between(&before, &with(2_303)).unwrap();
        assert_eq!(small.one_mib, 2_303);
        assert!(small.fits_another());
        let big = Room::between(&before, &with(100_000)).unwrap();
        assert!(!big.fits_another(), "{big:?}");
        let mut unknown = before.clone();
        unknown[0].memory_used_mib = None;
        assert_eq!(Room::between(&before, &unknown), None);
    }
}

#[cfg(test)]
#[path = "evaluate_pins.rs"]
mod pins;
