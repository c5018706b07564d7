//! Log signatures as data (recipes/signatures/*.toml): how the server's logger writes a line,
//! readiness and phase milestones, early-exit causes, and per-feature evidence for tuning
//! verdicts. Patterns are regular expressions; feature patterns are anchored at the start of a
//! logger entry's message (docs/serve-bench.md, "Evidence rules").

use std::path::{Path, PathBuf};

use regex::Regex;
use serde::Deserialize;

use super::evidence::Logger;
use crate::embedded;
use crate::error::{Error, Result};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    name: String,
    #[serde(default)]
    ready: Vec<String>,
    info: Option<String>,
    metrics: Option<String>,
    logger: Option<WireLogger>,
    #[serde(default)]
    compilers: Vec<String>,
    #[serde(default)]
    fatal: Vec<String>,
    #[serde(default, rename = "milestone")]
    milestones: Vec<WireMilestone>,
    #[serde(default, rename = "cause")]
    causes: Vec<WireCause>,
    #[serde(default, rename = "feature")]
    features: Vec<WireFeature>,
}

/// How the server writes a logger line: the prefix before its message, whether entries can be
/// glued onto one line, and which messages carry user or model text (never evidence).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireLogger {
    prefix: String,
    #[serde(default)]
    glued: bool,
    #[serde(default)]
    user_text: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireMilestone {
    phase: String,
    #[serde(rename = "match")]
    pattern: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireCause {
    id: String,
    title: String,
    #[serde(rename = "match")]
    patterns: Vec<String>,
    hint: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireFeature {
    id: String,
    #[serde(default)]
    flags: Vec<String>,
    #[serde(default)]
    active: Vec<String>,
    #[serde(default)]
    crashed: Vec<String>,
    #[serde(default)]
    fell_back: Vec<WireEvidence>,
    /// The server echoing its resolved configuration (a `server_args=` dump): `configured`, not
    /// proof that it runs.
    #[serde(default)]
    configured: Vec<String>,
    ratio: Option<WireRatio>,
    level: Option<WireLevel>,
    #[serde(default, rename = "gate")]
    gates: Vec<WireGate>,
    /// Evidence appears only once the server has answered requests (CUDA graph reuse, draft
    /// acceptance): judge after traffic, not at readiness.
    #[serde(default)]
    needs_traffic: bool,
    absent: String,
    absent_reason: String,
}

/// A measured share: a pattern with two numeric groups (part, whole), summed over every matching
/// line, or two Prometheus counters of the server's metrics endpoint. At or above `min` the
/// feature is active; below, it fell back.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireRatio {
    #[serde(rename = "match")]
    pattern: String,
    #[serde(default)]
    metrics: Option<[String; 2]>,
    min: f64,
    what: String,
    /// Judge every matching line on its own (one per loaded model) instead of summing them.
    #[serde(default)]
    each: bool,
    /// One line per request (draft acceptance): the lines must be coherent with the requests
    /// (one per task id, after readiness, no more than were sent) and the counters win.
    #[serde(default)]
    per_request: bool,
    /// The feature's flag value is the part asked for (`-ngl 12`: 12 layers): a launch that gets
    /// what it asked for reached its ratio.
    #[serde(default)]
    part_from_flag: bool,
}

/// A measured level: a pattern with one numeric group, averaged over every matching entry; above
/// `above` the feature is active, at or below it fell back (SGLang's `accept len: 1.00`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireLevel {
    #[serde(rename = "match")]
    pattern: String,
    above: f64,
    what: String,
}

/// A condition the server's code checks before it turns the feature on, evaluated from the
/// launch itself: a flag's numeric value below `min` (`default` when the flag is not given), or
/// an environment variable set to one of `off`. A failed gate predicts "fell back".
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireGate {
    #[serde(default)]
    flags: Vec<String>,
    min: Option<f64>,
    default: Option<f64>,
    env: Option<String>,
    #[serde(default)]
    off: Vec<String>,
    reason: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireEvidence {
    #[serde(rename = "match")]
    pattern: String,
    reason: String,
}

/// A compiled signature set.
#[derive(Debug)]
pub struct Signatures {
    pub name: String,
    pub origin: String,
    pub ready: Vec<Regex>,
    /// Endpoint with the server's own view of its settings (`/server_info`, `/props`).
    pub info: Option<String>,
    /// Prometheus endpoint (`/metrics`) read for ratio counters.
    pub metrics: Option<String>,
    /// How the server's own log lines look (required for a set with features).
    pub logger: Option<Logger>,
    pub compilers: Vec<String>,
    pub fatal: Vec<Regex>,
    pub milestones: Vec<(String, Regex)>,
    pub causes: Vec<Cause>,
    pub features: Vec<Feature>,
}

#[derive(Debug)]
pub struct Cause {
    pub id: String,
    pub title: String,
    pub patterns: Vec<Regex>,
    pub hint: String,
}

#[derive(Debug)]
pub struct Feature {
    pub id: String,
    pub flags: Vec<String>,
    /// Patterns may hold `{value}`: the flag's value, matched literally. Anchored at the start
    /// of a message when judged.
    pub active: Vec<String>,
    /// Anchored at the start of a line: a crash counts only with crash context.
    pub crashed: Vec<Regex>,
    pub fell_back: Vec<(Regex, String)>,
    /// May hold `{value}` as `active` does.
    pub configured: Vec<String>,
    pub ratio: Option<Ratio>,
    pub level: Option<Level>,
    pub gates: Vec<Gate>,
    pub needs_traffic: bool,
    pub absent: String,
    pub absent_reason: String,
}

impl Feature {
    /// Whether the signatures make the server's own dump of its resolved settings the most
    /// there is to see of this tuning: a `configured` log pattern and nothing that could show it
    /// at work (no `active` line, ratio or level). SGLang 0.5.15's attention backend is one; its
    /// torch symmetric memory is not (no `configured` pattern: it disables itself silently, and
    /// an endpoint's `enable_…=true` proves nothing).
    pub fn settings_are_the_most_shown(&self) -> bool {
        !self.configured.is_empty()
            && self.active.is_empty()
            && self.ratio.is_none()
            && self.level.is_none()
    }
}

#[derive(Debug)]
pub struct Ratio {
    /// Two capture groups: the part and the whole.
    pub pattern: Regex,
    /// Counter names (part, whole) on the server's metrics endpoint.
    pub metrics: Option<[String; 2]>,
    pub min: f64,
    /// What is counted ("layers on the GPU", "draft tokens accepted").
    pub what: String,
    /// Every matching line must reach `min` on its own; the worst one is reported.
    pub each: bool,
    /// One line per request, checked for coherence (docs/serve-bench.md, "Per-request lines").
    pub per_request: bool,
    /// The capture groups of the part and the whole (the unnamed ones; `task` is named).
    pub groups: [usize; 2],
    /// The pattern names the request's task id (`(?P<task>...)`).
    pub task: bool,
    /// The flag's value is the part asked for: the expectation comes from the launch.
    pub part_from_flag: bool,
}

#[derive(Debug)]
pub struct Level {
    /// One capture group: the measured value.
    pub pattern: Regex,
    pub above: f64,
    pub what: String,
}

#[derive(Debug)]
pub struct Gate {
    pub flags: Vec<String>,
    pub min: Option<f64>,
    pub default: Option<f64>,
    pub env: Option<String>,
    pub off: Vec<String>,
    /// May hold `{value}`: the value the gate saw.
    pub reason: String,
}

/// `pattern` anchored at the start of what it is matched against.
pub fn anchored(pattern: &str) -> std::result::Result<Regex, regex::Error> {
    Regex::new(&format!("^(?:{pattern})"))
}

impl Signatures {
    /// `spec` is a shipped name, or a file (relative to `dir`); `dir/signatures/NAME.toml` wins
    /// over a shipped set of the same name.
    pub fn resolve(spec: &str, dir: &Path) -> Result<Signatures> {
        if let Some(path) = Signatures::locate(spec, dir) {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| Error::io(format!("cannot read signatures {}", path.display()), e))?;
            return Signatures::parse(&text, &path.display().to_string());
        }
        match embedded::named(embedded::SIGNATURES, spec) {
            Some(text) => Signatures::parse(text, &format!("shipped signatures `{spec}`")),
            None => Err(Error::usage(
                format!("no log signatures named `{spec}`"),
                Some(format!(
                    "shipped sets: {}; or give a path to a TOML file",
                    embedded::names_in(embedded::SIGNATURES).join(", ")
                )),
            )),
        }
    }

    /// The file a profile's `signatures = SPEC` names, relative to the recipe's `dir`: a path
    /// (`x.toml`, `a/b`), else `signatures/SPEC.toml` there; `None` when there is no such file
    /// (then SPEC names a shipped set).
    pub fn locate(spec: &str, dir: &Path) -> Option<PathBuf> {
        let path = if spec.ends_with(".toml") || spec.contains('/') {
            dir.join(spec)
        } else {
            dir.join("signatures").join(format!("{spec}.toml"))
        };
        path.is_file().then_some(path)
    }

    pub fn parse(text: &str, origin: &str) -> Result<Signatures> {
        // Read as recipes are: file:line:col, a did-you-mean for a misspelled key, exit 2.
        let mut sources = crate::source::Sources::default();
        let file = sources.add(crate::source::SourceFile {
            path: PathBuf::from(origin),
            text: text.to_string(),
            dir: None,
        });
        let wire: Wire = sources.parse(file).map_err(|mut d| {
            d.hint
                .get_or_insert_with(|| "see docs/serve-bench.md for the signature format".into());
            Error::from(d)
        })?;
        let re = |p: &str| {
            Regex::new(p).map_err(|e| {
                Error::other(
                    format!("invalid pattern `{p}` in {origin}: {e}"),
                    Some("patterns are regular expressions".into()),
                )
            })
        };
        let res = |ps: &[String]| ps.iter().map(|p| re(p)).collect::<Result<Vec<_>>>();
        let anchor = |p: &str| {
            anchored(p).map_err(|e| {
                Error::other(
                    format!("invalid pattern `{p}` in {origin}: {e}"),
                    Some("patterns are regular expressions".into()),
                )
            })
        };
        let anchors = |ps: &[String]| ps.iter().map(|p| anchor(p)).collect::<Result<Vec<_>>>();
        let logger = wire
            .logger
            .as_ref()
            .map(|l| {
                Ok::<_, Error>(Logger {
                    at_start: anchor(&l.prefix)?,
                    anywhere: l.glued.then(|| re(&l.prefix)).transpose()?,
                    user_text: anchors(&l.user_text)?,
                })
            })
            .transpose()?;
        if logger.is_none() && !wire.features.is_empty() {
            return Err(Error::other(
                format!("{origin} has features but no [logger] table"),
                Some("say how the server's own log lines start: `[logger] prefix = \"REGEX\"` (and `user_text` for its request logs); see docs/serve-bench.md".into()),
            ));
        }
        let mut features = Vec::new();
        for f in &wire.features {
            if !["fell back", "unknown"].contains(&f.absent.as_str()) {
                return Err(Error::other(
                    format!("feature `{}` in {origin}: `absent` must be \"fell back\" or \"unknown\"", f.id),
                    Some("absence is never activity: a feature is active only on a line the server logged".into()),
                ));
            }
            for p in f.active.iter().chain(&f.configured) {
                anchor(&p.replace("{value}", "x"))?;
            }
            features.push(Feature {
                id: f.id.clone(),
                flags: f.flags.clone(),
                active: f.active.clone(),
                crashed: anchors(&f.crashed)?,
                fell_back: f
                    .fell_back
                    .iter()
                    .map(|e| Ok((anchor(&e.pattern)?, e.reason.clone())))
                    .collect::<Result<_>>()?,
                configured: f.configured.clone(),
                level: f
                    .level
                    .as_ref()
                    .map(|l| level(l, &f.id, origin))
                    .transpose()?,
                gates: f
                    .gates
                    .iter()
                    .map(|g| gate(g, &f.id, origin))
                    .collect::<Result<_>>()?,
                ratio: f
                    .ratio
                    .as_ref()
                    .map(|r| ratio(r, &f.id, origin))
                    .transpose()?,
                needs_traffic: f.needs_traffic,
                absent: f.absent.clone(),
                absent_reason: f.absent_reason.clone(),
            });
        }
        Ok(Signatures {
            name: wire.name,
            origin: origin.to_string(),
            ready: res(&wire.ready)?,
            info: wire.info,
            metrics: wire.metrics,
            logger,
            compilers: wire.compilers,
            fatal: res(&wire.fatal)?,
            milestones: wire
                .milestones
                .iter()
                .map(|m| Ok((m.phase.clone(), re(&m.pattern)?)))
                .collect::<Result<_>>()?,
            causes: wire
                .causes
                .iter()
                .map(|c| {
                    Ok(Cause {
                        id: c.id.clone(),
                        title: c.title.clone(),
                        patterns: res(&c.patterns)?,
                        hint: c.hint.clone(),
                    })
                })
                .collect::<Result<_>>()?,
            features,
        })
    }

    /// Signatures that know nothing: readiness by endpoint only, no verdict evidence.
    pub fn empty() -> Signatures {
        Signatures {
            name: "none".into(),
            origin: "no signatures".into(),
            ready: vec![],
            info: None,
            metrics: None,
            logger: None,
            compilers: vec![],
            fatal: vec![],
            milestones: vec![],
            causes: vec![],
            features: vec![],
        }
    }

    /// The first cause (in file order) with a matching line, and that line.
    pub fn classify<'a>(&'a self, lines: &[String]) -> Option<(&'a Cause, String)> {
        self.causes.iter().find_map(|c| {
            lines
                .iter()
                .find(|l| c.patterns.iter().any(|p| p.is_match(l)))
                .map(|l| (c, crate::bench::wire::escape_controls(l.trim())))
        })
    }
}

fn ratio(r: &WireRatio, feature: &str, origin: &str) -> Result<Ratio> {
    let bad = |why: String| {
        Error::other(
            format!("feature `{feature}` in {origin}: {why}"),
            Some("a ratio is `{ match = \"(\\d+) of (\\d+)\", min = 0.5, what = \"...\" }`".into()),
        )
    };
    let pattern = anchored(&r.pattern).map_err(|e| bad(format!("invalid ratio pattern: {e}")))?;
    let names: Vec<Option<&str>> = pattern.capture_names().skip(1).collect();
    let unnamed: Vec<usize> = (1..=names.len())
        .filter(|&i| names[i - 1].is_none())
        .collect();
    let task = names.contains(&Some("task"));
    let other_names = names.iter().flatten().any(|n| *n != "task");
    let [part, whole] = unnamed[..] else {
        return Err(bad(
            "the ratio pattern needs exactly two unnamed capture groups (part, whole)".into(),
        ));
    };
    if other_names {
        return Err(bad(
            "the only named group a ratio pattern may hold is `(?P<task>...)`".into(),
        ));
    }
    if r.per_request && !task {
        return Err(bad(
            "a `per_request` ratio names the task id: add `(?P<task>\\d+)` to its pattern".into(),
        ));
    }
    if !(0.0..=1.0).contains(&r.min) {
        return Err(bad(format!(
            "ratio `min` must be within 0..=1, got {}",
            r.min
        )));
    }
    Ok(Ratio {
        pattern,
        metrics: r.metrics.clone(),
        min: r.min,
        what: r.what.clone(),
        each: r.each,
        per_request: r.per_request,
        groups: [part, whole],
        task,
        part_from_flag: r.part_from_flag,
    })
}

fn level(l: &WireLevel, feature: &str, origin: &str) -> Result<Level> {
    let bad = |why: String| {
        Error::other(
            format!("feature `{feature}` in {origin}: {why}"),
            Some(
                "a level is `{ match = \"accept len: ([0-9.]+)\", above = 1.0, what = \"...\" }`"
                    .into(),
            ),
        )
    };
    let pattern = anchored(&l.pattern).map_err(|e| bad(format!("invalid level pattern: {e}")))?;
    if pattern.captures_len() != 2 {
        return Err(bad(
            "the level pattern needs exactly one capture group".into()
        ));
    }
    if !l.above.is_finite() {
        return Err(bad("`above` must be a finite number".into()));
    }
    Ok(Level {
        pattern,
        above: l.above,
        what: l.what.clone(),
    })
}

fn gate(g: &WireGate, feature: &str, origin: &str) -> Result<Gate> {
    let by_flag = !g.flags.is_empty() && g.min.is_some();
    let by_env = g.env.is_some() && !g.off.is_empty();
    if by_flag == by_env {
        return Err(Error::other(
            format!("feature `{feature}` in {origin}: a gate is either `flags` with `min` (and `default`) or `env` with `off`"),
            Some("e.g. `{ flags = [\"--tp-size\"], min = 2, default = 1, reason = \"...\" }`".into()),
        ));
    }
    Ok(Gate {
        flags: g.flags.clone(),
        min: g.min,
        default: g.default,
        env: g.env.clone(),
        off: g.off.clone(),
        reason: g.reason.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_sets_parse() {
        for name in embedded::names_in(embedded::SIGNATURES) {
            let text = embedded::named(embedded::SIGNATURES, name).unwrap();
            let s = Signatures::parse(text, name).unwrap();
            assert_eq!(s.name, name);
        }
    }

    #[test]
    fn unknown_name_lists_shipped_sets() {
        let e = Signatures::resolve("sglang-9", Path::new("/nonexistent"))
            .unwrap_err()
            .render();
        assert!(
            e.contains("no log signatures named `sglang-9`") && e.contains("sglang-0.5.9"),
            "{e}"
        );
    }

    #[test]
    fn a_profile_names_a_file_by_path_or_under_signatures() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("signatures")).unwrap();
        std::fs::create_dir_all(d.join("a")).unwrap();
        for f in ["x.toml", "a/b", "signatures/mine.toml"] {
            std::fs::write(d.join(f), "").unwrap();
        }
        assert_eq!(Signatures::locate("x.toml", d), Some(d.join("x.toml")));
        assert_eq!(Signatures::locate("a/b", d), Some(d.join("a/b")));
        assert_eq!(
            Signatures::locate("mine", d),
            Some(d.join("signatures/mine.toml"))
        );
        assert_eq!(Signatures::locate("sglang-0.5.9", d), None);
    }

    #[test]
    fn the_first_cause_in_file_order_with_a_matching_line_wins() {
        let s = Signatures::resolve("sglang-0.5.9", Path::new("/nonexistent")).unwrap();
        let lines = [
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            "KeyError: 12",
        ]
        .map(String::from);
        let (cause, line) = s.classify(&lines).unwrap();
        assert_eq!(
            (cause.id.as_str(), line.as_str()),
            ("capability-table", "KeyError: 12")
        );
        let (cause, _) = s.classify(&lines[..1]).unwrap();
        assert_eq!(cause.id, "cuda-oom");
        assert!(s.classify(&["all fine".to_string()]).is_none());
    }

    #[test]
    fn a_gate_is_flags_with_min_or_env_with_off() {
        let text = embedded::named(embedded::SIGNATURES, "sglang-0.5.9").unwrap();
        for (cut, what) in [
            ("min = 2, default = 1, ", "flags without min"),
            (
                r#", off = ["1", "true", "TRUE", "True"]"#,
                "env without off",
            ),
        ] {
            assert!(text.contains(cut), "{what}");
            let e = Signatures::parse(&text.replacen(cut, "", 1), "s.toml")
                .err()
                .map(|e| e.render())
                .unwrap_or_default();
            assert!(
                e.contains("a gate is either `flags` with `min`"),
                "{what}: {e}"
            );
        }
    }
}
