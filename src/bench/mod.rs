//! `bench`: a smoke benchmark with the seed's per-run line, summary statistics, a fingerprint of
//! what was measured, a history in the state dir, and a baseline gate.

pub mod ab;
mod baseline;
pub mod client;
mod generation;
pub mod plot;
mod protocol;
pub mod sent;
pub mod stats;
pub mod wire;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::hash::sha256_bytes;
use crate::paths::StatePaths;
use client::{Api, Generation, Request};
use stats::Summary;

pub use baseline::read_baseline;

/// Below this fraction of the baseline median, the gate fails.
pub const GATE: f64 = 0.9;
/// Above this coefficient of variation, the result is flagged noisy.
pub const MAX_CV: f64 = 0.05;
pub const DEFAULT_PROMPT: &str = "Write a long, detailed story about a lighthouse keeper who discovers a hidden message in the fog.";

pub struct Options<'a> {
    pub url: &'a str,
    pub api: Api,
    pub max_tokens: u32,
    pub runs: u32,
    pub warmup: u32,
    pub prompt: &'a str,
    pub timeout: Duration,
    /// Per-request fields sent with every request (`kiln tune`'s per-request knobs).
    pub extra: &'a [(String, serde_json::Value)],
}

/// Who and what was measured; two results compare only when their fingerprints match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    pub gpu: String,
    pub driver: String,
    pub server: String,
    pub model: String,
    /// A hash of everything below and of the server's settings endpoint.
    pub server_args: String,
    /// The server's settings by name: its launch command's flags (secret values redacted) and
    /// the settings endpoint's key fields; the gate names the ones that differ.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, String>,
}

impl Fingerprint {
    pub fn id(&self) -> String {
        sha256_bytes(
            serde_json::to_string(self)
                .expect("fingerprints serialize")
                .as_bytes(),
        )[..16]
            .to_string()
    }

    /// The fields where `self` and `other` differ.
    pub fn differences(&self, other: &Fingerprint) -> Vec<String> {
        let pairs = [
            ("gpu", &self.gpu, &other.gpu),
            ("driver", &self.driver, &other.driver),
            ("server", &self.server, &other.server),
            ("model", &self.model, &other.model),
            ("server_args", &self.server_args, &other.server_args),
        ];
        pairs
            .iter()
            .filter(|(_, a, b)| a != b)
            .map(|(k, a, b)| {
                if *k == "server_args" && !(self.settings.is_empty() && other.settings.is_empty()) {
                    format!(
                        "server arguments: {}",
                        setting_changes(&other.settings, &self.settings)
                    )
                } else {
                    format!("{k}: {b} → {a}")
                }
            })
            .collect()
    }
}

/// "-t 1 → 2, -fa (not set) → on": the settings that differ from `then` to `now`.
fn setting_changes(then: &BTreeMap<String, String>, now: &BTreeMap<String, String>) -> String {
    let shown = |v: Option<&String>| match v {
        None => "(not set)".to_string(),
        Some(v) if v.is_empty() => "(set)".to_string(),
        Some(v) => wire::escape_controls(v),
    };
    let changed: Vec<String> = then
        .keys()
        .chain(now.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|k| then.get(*k) != now.get(*k))
        .map(|k| format!("{k} {} → {}", shown(then.get(k)), shown(now.get(k))))
        .collect();
    if changed.is_empty() {
        "the settings endpoint differs (same launch flags)".into()
    } else {
        changed.join(", ")
    }
}

/// A launch command's settings by flag (`-t 2`, `--flash-attn=on`, a bare switch as ""), the
/// program and positional words under `argv[N]`; values of flags that name a secret redacted.
pub fn launch_settings(argv: &[String]) -> BTreeMap<String, String> {
    let secret = |flag: &str| {
        let f = flag.to_ascii_lowercase();
        ["key", "token", "secret", "password", "auth"]
            .iter()
            .any(|w| f.contains(w))
    };
    let mut out = BTreeMap::new();
    let mut i = 0;
    while i < argv.len() {
        let a = &argv[i];
        let is_flag = a.starts_with('-') && a.parse::<f64>().is_err() && a.len() > 1;
        if !is_flag {
            out.insert(format!("argv[{i}]"), a.clone());
            i += 1;
            continue;
        }
        let (flag, value) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), v.to_string()),
            _ => match argv.get(i + 1) {
                Some(n) if !n.starts_with('-') || n.parse::<f64>().is_ok() => {
                    i += 1;
                    (a.clone(), n.clone())
                }
                _ => (a.clone(), String::new()),
            },
        };
        let value = if secret(&flag) && !value.is_empty() {
            "(redacted)".into()
        } else {
            value
        };
        out.insert(flag, value);
        i += 1;
    }
    out
}

/// The server part of a fingerprint, from its settings endpoint (SGLang `/server_info`,
/// llama.cpp `/props`) and, where kiln started it, its launch command: (server, model, hash of
/// the arguments, the settings by name).
pub fn server_fingerprint(
    base: &str,
    api: Api,
    launch: Option<&[String]>,
) -> (String, String, String, BTreeMap<String, String>) {
    let base = base.trim_end_matches('/');
    let get = |p: &str| {
        client::get(&format!("{base}{p}"), Duration::from_secs(10))
            .filter(|(c, _)| *c == 200)
            .and_then(|(_, b)| serde_json::from_str::<serde_json::Value>(&b).ok())
    };
    let (server, model, endpoint_hash, mut settings) = protocol::fingerprint(api, &get);
    if let Some(argv) = launch {
        settings.extend(
            launch_settings(argv)
                .into_iter()
                .filter(|(flag, _)| !baseline::is_per_launch_flag(flag)),
        );
    }
    let hash = if settings.is_empty() {
        endpoint_hash
    } else {
        let all = serde_json::json!({ "endpoint": endpoint_hash, "settings": settings });
        sha256_bytes(all.to_string().as_bytes())[..16].to_string()
    };
    (server, model, hash, settings)
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Run {
    pub tokens: u64,
    pub prompt_tokens: Option<u64>,
    pub ttft_s: f64,
    pub e2e_s: f64,
    pub e2e_tok_s: f64,
    pub decode_tok_s: Option<f64>,
    pub server_decode_tok_s: Option<f64>,
    pub accept_length: Option<f64>,
}

impl Run {
    fn from(g: &Generation) -> Run {
        Run {
            tokens: g.tokens,
            prompt_tokens: g.prompt_tokens,
            ttft_s: g.ttft_s,
            e2e_s: g.e2e_s,
            e2e_tok_s: g.e2e_tok_s(),
            decode_tok_s: g.decode_tok_s,
            server_decode_tok_s: g.server_decode_tok_s,
            accept_length: g.accept_length,
        }
    }

    /// The seed's line: "N tokens in T s = X tok/s (prompt: P toks)".
    pub fn line(&self, i: u32, of: u32) -> String {
        let prompt = self.prompt_tokens.map_or("?".into(), |p| p.to_string());
        let mut s = format!(
            "Run {i}/{of}: {} tokens in {:.2}s = {:.1} tok/s (prompt: {prompt} toks)",
            self.tokens, self.e2e_s, self.e2e_tok_s
        );
        if let Some(d) = self.decode_tok_s {
            s.push_str(&format!(
                ", decode {d:.1} tok/s, TTFT {:.1} ms",
                self.ttft_s * 1000.0
            ));
        }
        if let Some(a) = self.accept_length {
            s.push_str(&format!(", accept length {a:.2}"));
        }
        s
    }
}

/// One measured run as it finishes: the `bench_run` event (its fields typed; the prose is
/// [`Run::line`]).
pub struct RunLine<'a> {
    pub run: u32,
    pub of: u32,
    pub measured: &'a Run,
}

impl Serialize for RunLine<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let r = self.measured;
        let mut m = s.serialize_struct("bench_run", 10)?;
        m.serialize_field("run", &self.run)?;
        m.serialize_field("of", &self.of)?;
        m.serialize_field("tokens", &r.tokens)?;
        m.serialize_field("prompt_tokens", &r.prompt_tokens)?;
        m.serialize_field("seconds", &r.e2e_s)?;
        m.serialize_field("e2e_tok_s", &r.e2e_tok_s)?;
        m.serialize_field("decode_tok_s", &r.decode_tok_s)?;
        m.serialize_field("server_decode_tok_s", &r.server_decode_tok_s)?;
        m.serialize_field("ttft_ms", &(r.ttft_s * 1000.0))?;
        m.serialize_field("accept_length", &r.accept_length)?;
        m.end()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Gate {
    pub baseline_median: f64,
    pub median: f64,
    pub ratio: f64,
    pub threshold: f64,
    pub metric: String,
    pub passed: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub url: String,
    pub api: Api,
    pub max_tokens: u32,
    pub unix_time: u64,
    pub fingerprint: Fingerprint,
    pub fingerprint_id: String,
    pub runs: Vec<Run>,
    pub e2e_tok_s: Summary,
    pub decode_tok_s: Option<Summary>,
    pub ttft_ms: Summary,
    pub accept_length: Option<Summary>,
    pub warnings: Vec<String>,
    pub gate: Option<Gate>,
}

impl<'de> Deserialize<'de> for Api {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Api, D::Error> {
        let s = String::deserialize(d)?;
        Api::parse(&s).map_err(|e| serde::de::Error::custom(e.to_string()))
    }
}

/// Warm up, run, summarize. `say` gets progress lines, `out` the per-run lines.
pub fn run(
    o: &Options,
    fp: Fingerprint,
    say: &mut dyn FnMut(&str),
    out: &mut dyn FnMut(&RunLine),
) -> Result<Report> {
    if o.runs == 0 {
        return Err(Error::usage("`--runs` must be at least 1", None));
    }
    let req = Request {
        prompt: o.prompt,
        max_tokens: o.max_tokens,
        greedy: true,
        ignore_eos: true,
        timeout: o.timeout,
    };
    for i in 1..=o.warmup {
        // With two warm-ups or more the first is full-length: llama-server saves a finished
        // slot's KV state to its host-RAM prompt cache (`--cache-ram`) when the next request
        // arrives, and the first time that state is a long one it costs ~150 ms on the H200
        // (the "second request TTFT" outlier); the second warm-up absorbs it.
        let max_tokens = if i == 1 && o.warmup >= 2 {
            o.max_tokens
        } else {
            o.max_tokens.min(64)
        };
        let g = client::generate_with(o.url, o.api, &Request { max_tokens, ..req }, o.extra)?;
        say(&format!(
            "Warmup {i}/{} done ({} tokens)",
            o.warmup, g.tokens
        ));
    }
    let mut runs = Vec::new();
    let mut counted = Vec::new();
    for i in 1..=o.runs {
        // A live line while the run streams (on a terminal): tokens so far and their rate.
        let live = crate::report::current();
        let g = client::generate_watched(o.url, o.api, &req, o.extra, &mut |tokens, secs| {
            let rate = if secs > 0.0 {
                tokens as f64 / secs
            } else {
                0.0
            };
            let text = format!("run {i}/{}: {tokens} tokens, {rate:.1} tok/s", o.runs);
            live.live("bench", Some(&text));
        });
        live.live("bench", None);
        let g = g?;
        counted.extend(g.warnings.iter().map(|w| format!("run {i}: {w}")));
        let r = Run::from(&g);
        out(&RunLine {
            run: i,
            of: o.runs,
            measured: &r,
        });
        runs.push(r);
    }
    let e2e = stats::summarize(&runs.iter().map(|r| r.e2e_tok_s).collect::<Vec<_>>())
        .expect("at least one run");
    let decode_values: Vec<f64> = runs.iter().filter_map(|r| r.decode_tok_s).collect();
    let decode = (decode_values.len() == runs.len())
        .then(|| stats::summarize(&decode_values))
        .flatten();
    let ttft = stats::summarize(&runs.iter().map(|r| r.ttft_s * 1000.0).collect::<Vec<_>>())
        .expect("at least one run");
    let accept_values: Vec<f64> = runs.iter().filter_map(|r| r.accept_length).collect();
    let accept = stats::summarize(&accept_values);
    let mut warnings = counted;
    let short: Vec<String> = runs
        .iter()
        .enumerate()
        .filter(|(_, r)| r.tokens < u64::from(o.max_tokens))
        .map(|(i, r)| {
            format!(
                "run {} returned {} of {} tokens",
                i + 1,
                r.tokens,
                o.max_tokens
            )
        })
        .collect();
    if !short.is_empty() {
        warnings.push(format!(
            "{} (its tok/s is not comparable)",
            short.join(", ")
        ));
    }
    let headline = decode.unwrap_or(e2e);
    if headline.cv > MAX_CV {
        warnings.push(format!(
            "noisy: CV {:.1}% > {:.0}% across runs; is something else using the machine?",
            headline.cv * 100.0,
            MAX_CV * 100.0
        ));
    }
    Ok(Report {
        url: o.url.to_string(),
        api: o.api,
        max_tokens: o.max_tokens,
        unix_time: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        fingerprint_id: fp.id(),
        fingerprint: fp,
        runs,
        e2e_tok_s: e2e,
        decode_tok_s: decode,
        ttft_ms: ttft,
        accept_length: accept,
        warnings,
        gate: None,
    })
}

impl Report {
    /// The headline metric: decode tok/s when every run had one, else end-to-end tok/s.
    pub fn headline(&self) -> (&'static str, Summary) {
        match self.decode_tok_s {
            Some(d) => ("decode tok/s", d),
            None => ("e2e tok/s", self.e2e_tok_s),
        }
    }

    /// Compare against a baseline report; a fingerprint mismatch is an error.
    pub fn gate_against(&mut self, base: &Report, base_path: &Path) -> Result<()> {
        let diffs = self.fingerprint.differences(&base.fingerprint);
        if !diffs.is_empty() {
            return Err(Error::usage(
                format!("the baseline {} was measured on a different setup: {}", base_path.display(), diffs.join("; ")),
                Some("gate only against a baseline of the same GPU, driver, server build, model and server args; record one with `kiln bench --json > FILE`".into()),
            ));
        }
        let (metric, now) = self.headline();
        let then = match metric {
            "decode tok/s" => base.decode_tok_s.unwrap_or(base.e2e_tok_s),
            _ => base.e2e_tok_s,
        };
        baseline::check_median(then.median, metric, base_path)?;
        let ratio = now.median / then.median;
        self.gate = Some(Gate {
            baseline_median: then.median,
            median: now.median,
            ratio,
            threshold: GATE,
            metric: metric.to_string(),
            passed: ratio >= GATE,
        });
        Ok(())
    }

    /// 0 ok, 2 gate failed; warnings (noise, short runs) are advisories like `kiln up`'s:
    /// exit 1 only when `strict`.
    pub fn exit_code(&self, strict: bool) -> u8 {
        match (&self.gate, self.warnings.is_empty()) {
            (Some(g), _) if !g.passed => 2,
            (_, false) if strict => 1,
            _ => 0,
        }
    }

    /// The human summary with its warnings (the markdown report).
    pub fn render(&self) -> String {
        let mut s = self.table();
        for w in &self.warnings {
            s.push_str(&format!("warning: {w}\n"));
        }
        s
    }

    /// The human summary without the warnings (`kiln bench` prints those as warning events).
    pub fn table(&self) -> String {
        let mut s = String::from("========== Results ==========\n");
        s.push_str(&format!(
            "{:<16}{:>10}{:>10}{:>10}{:>10}{:>8}\n",
            "", "median", "mean", "min", "max", "CV"
        ));
        let row = |name: &str, x: &Summary| {
            format!(
                "{name:<16}{:>10.2}{:>10.2}{:>10.2}{:>10.2}{:>7.1}%\n",
                x.median,
                x.mean,
                x.min,
                x.max,
                x.cv * 100.0
            )
        };
        s.push_str(&row("e2e tok/s", &self.e2e_tok_s));
        if let Some(d) = &self.decode_tok_s {
            s.push_str(&row("decode tok/s", d));
        }
        s.push_str(&row("TTFT ms", &self.ttft_ms));
        if let Some(a) = &self.accept_length {
            s.push_str(&row("accept length", a));
        }
        let f = &self.fingerprint;
        s.push_str(&format!(
            "fingerprint {}: {} (driver {}), {}, model {}, args {}\n",
            self.fingerprint_id, f.gpu, f.driver, f.server, f.model, f.server_args
        ));
        if let Some(g) = &self.gate {
            s.push_str(&format!(
                "baseline: median {} {:.2} vs {:.2} = {:.3}x (gate {:.2}x): {}\n",
                g.metric,
                g.median,
                g.baseline_median,
                g.ratio,
                g.threshold,
                if g.passed { "pass" } else { "FAIL" }
            ));
        }
        s
    }
}

/// Append a report to `<state>/bench/history.jsonl`: one whole line or nothing (see
/// [`crate::fs::append_line`]), so a full disk leaves no torn record for the next to glue onto.
pub fn append_history(paths: &StatePaths, report: &Report) -> Result<std::path::PathBuf> {
    let dir = paths.bench();
    crate::fs::create_dir(&dir)?;
    let path = dir.join("history.jsonl");
    let line = crate::redact::scrub(&serde_json::to_string(report).expect("reports serialize"));
    crate::fs::append_line(&path, line.as_bytes())
        .map_err(|e| Error::io(format!("cannot append to {}", path.display()), e))?;
    Ok(path)
}
