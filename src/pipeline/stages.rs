//! The stages, one function each: pick a variant, launch it, judge its tunings, greedy A/B two
//! variants, bench a running server.

use std::path::PathBuf;
use std::time::Duration;

use super::{Narrator, Session};
use crate::bench::{self, ab, client::Api, Fingerprint};
use crate::diagnostic::did_you_mean;
use crate::error::{Error, Result};
use crate::host::Facts;
use crate::paths::StatePaths;
use crate::recipe::{Profile, Recipe};
use crate::serve::signatures::Signatures;
use crate::serve::verdict::{self, Verdict};
use crate::serve::{self, Launch, Running};

/// A profile to serve under a name: one of the recipe's, or a variant a caller built from one
/// (a tuner's candidate flags).
#[derive(Debug, Clone, Copy)]
pub struct Variant<'p> {
    pub name: &'p str,
    pub profile: &'p Profile,
}

impl<'r> Variant<'r> {
    /// The profile named `name`, else `tuned`, else the only one.
    pub fn pick(recipe: &'r Recipe, name: Option<&str>) -> Result<Variant<'r>> {
        let names: Vec<&str> = recipe.profiles.keys().map(String::as_str).collect();
        let chosen = match name {
            Some(n) => n,
            None if recipe.profiles.contains_key("tuned") => "tuned",
            None if names.len() == 1 => names[0],
            None if names.is_empty() => {
                return Err(Error::usage(
                    format!("recipe `{}` has no server profile", recipe.name),
                    Some("add a [profile.NAME] table with `cmd`, `args` and `port`".into()),
                ))
            }
            None => {
                return Err(Error::usage(
                    format!("recipe `{}` has several profiles; pick one", recipe.name),
                    Some(format!("pass --profile NAME: {}", names.join(", "))),
                ))
            }
        };
        if let Some((name, profile)) = recipe.profiles.get_key_value(chosen) {
            Ok(Variant { name, profile })
        } else {
            let hint = if names.is_empty() {
                format!(
                    "recipe `{}` has no profiles: add a [profile.{chosen}] table with `cmd`, `args` and `port`",
                    recipe.name
                )
            } else {
                did_you_mean(chosen, names.iter().copied()).map_or(
                    format!("profiles of `{}`: {}", recipe.name, names.join(", ")),
                    |b| format!("did you mean `{b}`?"),
                )
            };
            Err(Error::usage(
                format!("recipe `{}` has no profile `{chosen}`", recipe.name),
                Some(hint),
            ))
        }
    }

    /// The log signatures the profile names (none: no milestones, no verdicts).
    pub fn signatures(&self) -> Result<Signatures> {
        match &self.profile.signatures {
            Some(s) => Signatures::resolve(s, &self.profile.dir),
            None => Ok(Signatures::empty()),
        }
    }

    /// The readiness timeout: `timeout`, else the profile's, else the default.
    pub fn timeout(&self, timeout: Option<Duration>) -> Duration {
        timeout
            .or(self.profile.timeout)
            .unwrap_or(serve::DEFAULT_TIMEOUT)
    }
}

/// A variant that came up (or a batch job that finished).
pub struct Launched<'p> {
    pub variant: Variant<'p>,
    pub sigs: Signatures,
    pub running: Running,
    /// Launched with the profile's `evidence_args` (a judged launch); `false`: a bench launch.
    pub evidence: bool,
    /// The generation requests counted before the launch began: what kiln sent to its URL
    /// since (the readiness generation included) is this launch's.
    pub sent: bench::sent::Mark,
}

impl Launched<'_> {
    /// End the server's process group and forget its record.
    pub fn stop(self, s: Session) {
        self.running.stop(s.paths);
    }

    /// Leave the server running after kiln exits.
    pub fn leave_running(self) {
        self.running.leave_running();
    }

    /// This launch's lines of the server log (the file holds earlier launches too), read now
    /// from the offset kiln recorded; the lines kiln's own tail read since the launch where the
    /// file no longer holds that launch's header.
    pub fn log_lines(&self) -> Vec<String> {
        serve::launch_lines(&self.running.record).unwrap_or_else(|| self.running.log.clone())
    }
}

/// Start `v` with its evidence-only args (a judged launch: what proves its tunings) and wait
/// until it is ready. `detach`: it outlives kiln.
pub fn launch<'p>(
    s: Session,
    v: Variant<'p>,
    detach: bool,
    timeout: Option<Duration>,
    say: &mut dyn FnMut(&str),
) -> Result<Launched<'p>> {
    start(s, v, true, detach, timeout, say)
}

/// Start `v` without its evidence-only args (a bench launch: what is measured) and wait until
/// it is ready. The same as [`launch`] for a profile without `evidence_args`.
pub fn launch_bench<'p>(
    s: Session,
    v: Variant<'p>,
    detach: bool,
    timeout: Option<Duration>,
    say: &mut dyn FnMut(&str),
) -> Result<Launched<'p>> {
    start(s, v, false, detach, timeout, say)
}

fn start<'p>(
    s: Session,
    v: Variant<'p>,
    evidence: bool,
    detach: bool,
    timeout: Option<Duration>,
    say: &mut dyn FnMut(&str),
) -> Result<Launched<'p>> {
    let sigs = v.signatures()?;
    let launch = Launch {
        recipe: &s.recipe.name,
        profile_name: v.name,
        profile: v.profile,
        sigs: &sigs,
        paths: s.paths,
        detach,
        timeout: v.timeout(timeout),
        evidence,
    };
    let sent = bench::sent::Mark::now();
    let running = serve::start(&launch, say)?;
    Ok(Launched {
        variant: v,
        sigs,
        running,
        evidence,
        sent,
    })
}

/// Wait (up to 10 s) until nothing accepts connections on 127.0.0.1:`port` any more: a stopped
/// server's socket can outlive its process group by a moment, and the next launch on the port
/// would take it for a stranger's.
pub(super) fn wait_port_free(port: Option<u16>) {
    let Some(port) = port else { return };
    let taken = || {
        std::net::TcpStream::connect_timeout(
            &([127, 0, 0, 1], port).into(),
            Duration::from_millis(300),
        )
        .is_ok()
    };
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while taken() && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The launch description of a running variant (for triaging a later exit).
pub fn launch_of<'a>(s: Session<'a>, l: &'a Launched, timeout: Option<Duration>) -> Launch<'a> {
    Launch {
        recipe: &s.recipe.name,
        profile_name: l.variant.name,
        profile: l.variant.profile,
        sigs: &l.sigs,
        paths: s.paths,
        detach: false,
        timeout: l.variant.timeout(timeout),
        evidence: l.evidence,
    }
}

/// Tuning verdicts from the log, the server's metrics and its own settings endpoint. A feature
/// whose evidence shows only under traffic gets one short greedy request first, unless `served`
/// says the server has answered requests already (after a benchmark).
pub fn verdicts(l: &Launched, served: bool) -> Vec<Verdict> {
    let running = &l.running;
    let url = running.record.url.as_deref();
    let mut after_traffic = served;
    let mut traffic_error = None;
    if let (false, true, Some(url)) = (
        served,
        verdict::needs_traffic(&l.sigs, l.variant.profile),
        url,
    ) {
        let req = bench::client::Request {
            prompt: ab::PROMPTS[0],
            max_tokens: 32,
            greedy: true,
            ignore_eos: true,
            timeout: Duration::from_secs(120),
        };
        match bench::client::generate(url, running.api, &req) {
            Ok(_) => after_traffic = true,
            Err(e) => traffic_error = Some(e.to_string()),
        }
    }
    let log = l.log_lines();
    // A profile without a URL is a job that has finished: its process has exited.
    let exited = url.is_none();
    let metrics = url
        .zip(l.sigs.metrics.as_deref())
        .and_then(|(u, path)| serve::fetch_text(&format!("{}{path}", u.trim_end_matches('/'))));
    let ev = verdict::Evidence {
        log: &log,
        metrics: metrics.as_deref(),
        after_traffic,
        traffic_error,
        exited,
        // Every generation kiln sent this launch by now: the readiness one, the traffic request
        // above, and (judged after them) the greedy A/B's and the benchmark's.
        requests: url.map(|u| l.sent.since(u)),
    };
    let mut verdicts = verdict::judge(&l.sigs, l.variant.profile, &ev);
    let info = url.and_then(|u| serve::server_info(&l.sigs, u));
    if let Some(info) = info {
        for v in &mut verdicts {
            let key = v.feature.replace('-', "_");
            let value = info.get(format!("enable_{key}")).or_else(|| info.get(&key));
            if let Some(value) = value {
                let from = l.sigs.info.as_deref().unwrap_or("info");
                let note = format!(
                    "{from}: {}={value}",
                    if info.get(&key).is_some() {
                        key.clone()
                    } else {
                        format!("enable_{key}")
                    }
                );
                let note = crate::bench::wire::escape_controls(&note);
                // A resolved-configuration echo is `configured`, never proof it runs.
                if v.status == verdict::Status::Unknown && value == &serde_json::Value::Bool(true) {
                    v.status = verdict::Status::Configured;
                    v.reason = format!(
                        "{from} says it is enabled; no line shows it at work ({})",
                        v.reason
                    );
                }
                v.evidence = Some(match v.evidence.take() {
                    Some(e) => format!("{e}; {note}"),
                    None => note,
                });
            }
        }
    }
    verdicts
}

/// Verdicts of `v` from a log captured earlier and the metrics page captured after its
/// requests: nothing is launched; the server is taken to have answered requests. The file is
/// judged as one launch: a boundary kiln did not record cannot be proven from the text (a line
/// of server output can look like kiln's header).
pub fn verdicts_from_capture(
    v: Variant,
    log: &std::path::Path,
    metrics: Option<&std::path::Path>,
) -> Result<Vec<Verdict>> {
    let sigs = v.signatures()?;
    let lines: Vec<String> =
        crate::bounded::read_text(log, "the server log", crate::bounded::LOG_CAP)?
            .lines()
            .map(String::from)
            .collect();
    let metrics = metrics
        .map(|p| crate::bounded::read_text(p, "the metrics page", crate::bounded::METRICS_CAP))
        .transpose()?;
    let ev = verdict::Evidence {
        log: &lines,
        metrics: metrics.as_deref(),
        after_traffic: true,
        traffic_error: None,
        exited: false,
        requests: None,
    };
    Ok(verdict::judge(&sigs, v.profile, &ev))
}

/// Greedy A/B settings.
#[derive(Debug, Clone, Copy)]
pub struct AbOptions {
    pub max_tokens: u32,
    /// Agreement on at least this many leading tokens counts as a late divergence, not a failure.
    pub min_prefix: usize,
}

impl Default for AbOptions {
    fn default() -> Self {
        AbOptions {
            max_tokens: 64,
            min_prefix: 32,
        }
    }
}

/// Serve `baseline`, collect greedy outputs, stop it; the same for `candidate`; compare.
pub fn greedy_ab(
    s: Session,
    baseline: Variant,
    candidate: Variant,
    opts: &AbOptions,
    say: &mut dyn FnMut(&str),
) -> Result<ab::Comparison> {
    let base = greedy_outputs(s, baseline, opts.max_tokens, say)?;
    let cand = greedy_outputs(s, candidate, opts.max_tokens, say)?;
    Ok(ab::compare(&base, &cand, opts.min_prefix))
}

/// Serve `v`, collect its greedy outputs for the A/B prompts (`max_tokens` each), stop it.
pub fn greedy_outputs(
    s: Session,
    v: Variant,
    max_tokens: u32,
    say: &mut dyn FnMut(&str),
) -> Result<Vec<ab::Output>> {
    let launched = launch(s, v, false, None, say)?;
    let Some(url) = launched.running.record.url.clone() else {
        launched.stop(s);
        return Err(Error::usage(
            format!("profile `{}` has no port or url to query", v.name),
            None,
        ));
    };
    let got = ab::collect(&url, launched.running.api, max_tokens);
    launched.stop(s);
    std::thread::sleep(Duration::from_millis(200));
    got
}

/// Smoke-bench settings.
pub struct BenchOptions {
    pub max_tokens: u32,
    pub runs: u32,
    pub warmup: u32,
    pub prompt: String,
    pub timeout: Duration,
    /// Gate against this earlier report (and the path it was read from).
    pub baseline: Option<(bench::Report, PathBuf)>,
    /// The command's flags that set the bench's size, named in its noise warning
    /// (`--runs N --max-tokens N` for `kiln bench`).
    pub size_flags: &'static str,
}

impl BenchOptions {
    /// `kiln up`'s smoke bench: `runs` × `max_tokens` (the defaults when not given).
    pub fn sized(runs: Option<u32>, max_tokens: Option<u32>) -> BenchOptions {
        let d = BenchOptions::default();
        let max_tokens = max_tokens.unwrap_or(d.max_tokens);
        BenchOptions {
            max_tokens,
            runs: runs.unwrap_or(d.runs),
            timeout: bench::client::default_deadline(max_tokens),
            ..d
        }
    }
}

impl Default for BenchOptions {
    fn default() -> Self {
        let max_tokens = 2048;
        BenchOptions {
            max_tokens,
            runs: 5,
            warmup: 2,
            prompt: bench::DEFAULT_PROMPT.to_string(),
            timeout: bench::client::default_deadline(max_tokens),
            baseline: None,
            size_flags: "--bench-runs N --bench-max-tokens N",
        }
    }
}

/// What identifies a bench setup: this host's GPU and driver, the server, model and arguments
/// (its settings endpoint; its launch command where kiln knows it).
pub fn bench_fingerprint(facts: &Facts, url: &str, api: Api) -> Fingerprint {
    fingerprint_of(facts, url, api, None)
}

fn fingerprint_of(facts: &Facts, url: &str, api: Api, launch: Option<&[String]>) -> Fingerprint {
    let (server, model, server_args, settings) = bench::server_fingerprint(url, api, launch);
    Fingerprint {
        gpu: facts.get("gpu.name").unwrap_or_else(|| "no GPU".into()),
        driver: facts.get("gpu.driver").unwrap_or_else(|| "-".into()),
        server,
        model,
        server_args,
        settings,
    }
}

/// Benchmark the server at `url`, gate against the baseline, append to the history under
/// `paths` (whose path comes back with the report). Needs no recipe: `kiln bench` measures any
/// server.
pub fn measure(
    paths: &StatePaths,
    facts: &Facts,
    url: &str,
    api: Api,
    opts: &BenchOptions,
    narrate: &mut Narrator,
) -> Result<(bench::Report, PathBuf)> {
    let launch = serve::recorded_argv(paths, url);
    let fp = fingerprint_of(facts, url, api, launch.as_deref());
    (narrate.progress)(&format!(
        "Benchmarking {url} max_tokens={}, num_runs={}, warmup={}",
        opts.max_tokens, opts.runs, opts.warmup
    ));
    let run = bench::Options {
        url,
        api,
        max_tokens: opts.max_tokens,
        runs: opts.runs,
        warmup: opts.warmup,
        prompt: &opts.prompt,
        timeout: opts.timeout,
        extra: &[],
    };
    let mut report = bench::run(&run, fp, narrate.progress, narrate.line)?;
    // A noisy bench says how big it was and how to change that: on a busy box a smaller one
    // ends sooner, more runs average the noise out.
    for w in report
        .warnings
        .iter_mut()
        .filter(|w| w.starts_with("noisy:"))
    {
        w.push_str(&format!(
            " (this bench: {} runs of {} tokens, {} warm-up; `{}` sets its size)",
            opts.runs, opts.max_tokens, opts.warmup, opts.size_flags
        ));
    }
    if let Some((base, path)) = &opts.baseline {
        report.gate_against(base, path)?;
    }
    let history = bench::append_history(paths, &report)?;
    Ok((report, history))
}
