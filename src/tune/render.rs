//! `kiln tune`'s outputs: the ranked table, a bar chart of tok/s per variant (SVG), and the
//! winner written as a servable profile file.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use std::collections::BTreeSet;

use super::evaluate::Loader;
use super::margin::Margin;
use super::{Entry, Method};
use crate::bench::plot::escape;
use crate::bench::wire::escape_controls;
use crate::columns;
use crate::error::Result;
use crate::pipeline;
use crate::recipe::{Profile, Recipe};

/// The most characters of a reason (a launch error may quote a whole `--vary` value) shown in
/// the table and the plot; the results file keeps it whole.
const REASON: usize = 300;

/// The ranked table: the winner first, then everyone else (the race's losers say why they are
/// out), disqualified last with the reason. Each row names the requests its figure is the median
/// of (runs x tokens) and the launch it came from.
pub(crate) fn table(entries: &[Entry]) -> String {
    let redactor = crate::redact::Redactor::from_env([]);
    let names: Vec<String> = entries
        .iter()
        .map(|e| e.variant.shown_by(&redactor))
        .collect();
    let width = columns::width(names.iter().map(String::as_str), 7);
    let mut s = format!(
        "{:<4} {:<width$} {:>10} {:>8} {:>6} {:>9} {:>6}  {}\n",
        "rank", "variant", "tok/s", "runs", "CV", "TTFT ms", "launch", "status"
    );
    let top = entries
        .first()
        .and_then(Entry::last)
        .map_or(0, |m| m.rung.max_tokens);
    let mut rank = 0;
    for (e, name) in entries.iter().zip(&names) {
        // The whole name is in the results file; the table shows a column's worth.
        let name = columns::cell(name, width);
        match (&e.disqualified, e.last()) {
            (None, Some(m)) => {
                rank += 1;
                let status = if rank == 1 {
                    "winner".to_string()
                } else if let Some(out) = &e.out {
                    format!("out: {}", columns::clip(&escape_controls(out), REASON))
                } else if m.rung.max_tokens < top {
                    format!(
                        "out after {} round(s) ({} tokens x {})",
                        e.measurements.len(),
                        m.rung.max_tokens,
                        m.rung.runs
                    )
                } else {
                    "finalist".to_string()
                };
                let f = Figure::of(e, m);
                let _ = writeln!(
                    s,
                    "{rank:<4} {name:<width$} {:>10.1} {:>8} {:>5.1}% {:>9.1} {:>6}  {status}",
                    f.tok_s, f.runs, f.cv_pct, f.ttft_ms, f.launch
                );
            }
            (reason, _) => {
                // A launch error can quote a `--vary` value: escaped like the name.
                let why = escape_controls(
                    reason
                        .as_deref()
                        .or(e.out.as_deref())
                        .unwrap_or("no measurement"),
                );
                let why = columns::clip(&why, REASON);
                let label = if reason.is_some() {
                    "disqualified"
                } else {
                    "out"
                };
                let _ = writeln!(
                    s,
                    "{:<4} {name:<width$} {:>10} {:>8} {:>6} {:>9} {:>6}  {label}: {why}",
                    "-", "-", "-", "-", "-", "-"
                );
            }
        }
    }
    s
}

/// A ranked row's figures: its last measurement's, or with several launches at its last rung
/// (`--launches N`), the median of theirs, the spread between them as the CV, and `xN` for the
/// launch (their ids are in the results file).
struct Figure {
    tok_s: f64,
    /// The requests the median is of (runs x tokens, launches x runs x tokens): a race's
    /// screening figure is never read as a full benchmark.
    runs: String,
    cv_pct: f64,
    ttft_ms: f64,
    launch: String,
}

impl Figure {
    fn of(e: &Entry, last: &super::Measurement) -> Figure {
        let per_launch = e.per_launch();
        let runs = format!("{}x{}", last.runs.len(), last.rung.max_tokens);
        if per_launch.len() < 2 {
            return Figure {
                tok_s: last.tok_s,
                runs,
                cv_pct: last.cv * 100.0,
                ttft_ms: last.ttft_ms,
                launch: last.launch.to_string(),
            };
        }
        let summary = |v: Vec<f64>| crate::bench::stats::summarize(&v).expect("two launches");
        let medians = summary(per_launch.iter().map(|m| m.tok_s).collect());
        Figure {
            tok_s: medians.median,
            runs: format!("{}x{runs}", per_launch.len()),
            cv_pct: medians.cv * 100.0,
            ttft_ms: summary(per_launch.iter().map(|m| m.ttft_ms).collect()).median,
            launch: format!("x{}", per_launch.len()),
        }
    }
}

/// Horizontal bars of each variant's last median tok/s; disqualified variants are grey and say why.
pub(crate) fn svg(title: &str, entries: &[Entry]) -> String {
    let row = 26.0_f64;
    let (left, right, top) = (260.0_f64, 140.0_f64, 48.0_f64);
    let w = 900.0_f64;
    let h = top + row * entries.len() as f64 + 30.0;
    let max = entries
        .iter()
        .filter_map(Entry::tok_s)
        .fold(1e-9_f64, f64::max);
    let bar_w = w - left - right;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"14\">{}</text>\n",
        w / 2.0,
        escape(title)
    );
    for (i, e) in entries.iter().enumerate() {
        let y = top + row * i as f64;
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left - 8.0,
            y + 16.0,
            escape(&columns::clip(&e.variant.shown(), 40))
        );
        match (&e.disqualified, e.last()) {
            (None, Some(m)) => {
                let f = Figure::of(e, m);
                let len = bar_w * f.tok_s / max;
                let fill = if i == 0 { "#2b8a3e" } else { "#4c6ef5" };
                let _ = writeln!(
                    s,
                    "<rect x=\"{left}\" y=\"{:.1}\" width=\"{len:.1}\" height=\"{}\" fill=\"{fill}\"/>\n\
                     <text x=\"{:.1}\" y=\"{:.1}\">{:.1} tok/s ({})</text>",
                    y + 4.0,
                    row - 8.0,
                    left + len + 6.0,
                    y + 16.0,
                    f.tok_s,
                    f.runs
                );
            }
            (reason, _) => {
                let _ = writeln!(
                    s,
                    "<text x=\"{left}\" y=\"{:.1}\" fill=\"#868e96\">disqualified: {}</text>",
                    y + 16.0,
                    escape(&columns::clip(
                        &escape_controls(reason.as_deref().unwrap_or("no measurement")),
                        100
                    ))
                );
            }
        }
    }
    s.push_str("</svg>\n");
    s
}

/// A small recipe holding the winner as `[profile.NAME]` (resolved: every variable expanded) and,
/// when there is one, the baseline it was compared with, so `kiln serve FILE --profile NAME` and
/// `kiln verify FILE --profile NAME` work on it directly.
pub(crate) struct WinnerFile<'a> {
    pub recipe: &'a str,
    pub name: &'a str,
    pub profile: &'a Profile,
    pub baseline: Option<(&'a str, &'a Profile)>,
    pub summary: String,
    pub method: Method,
}

impl WinnerFile<'_> {
    /// The file's tables: `[recipe]` and `[profile.*]`.
    fn document(&self) -> toml::Table {
        let mut profiles = toml::Table::new();
        if let Some((name, p)) = self.baseline {
            profiles.insert(name.to_string(), profile_table(p, None).into());
        }
        profiles.insert(
            self.name.to_string(),
            profile_table(self.profile, self.baseline.map(|(n, _)| n)).into(),
        );
        let mut recipe = toml::Table::new();
        recipe.insert("name".into(), format!("{}-tuned", self.recipe).into());
        recipe.insert(
            "description".into(),
            format!("kiln tune winner for {}", self.recipe).into(),
        );
        let mut doc = toml::Table::new();
        doc.insert("recipe".into(), recipe.into());
        doc.insert("profile".into(), profiles.into());
        doc
    }

    /// The file's text: the tables by the TOML serializer (every value inside its quotes), under
    /// a header comment whose user values are escaped to one line (a newline in a `--vary` value
    /// cannot end the comment). Read back and compared with the tables before it is returned.
    pub(crate) fn render(&self) -> Result<String> {
        let doc = self.document();
        let body = toml::to_string(&doc).map_err(|e| {
            crate::error::Error::other(format!("the winner file cannot be written: {e}"), None)
        })?;
        let text = format!(
            "# Written by `kiln tune` ({:?}): {}\n# Serve it: kiln serve THIS_FILE --profile {}\n{body}",
            self.method,
            escape_controls(&self.summary),
            escape_controls(self.name)
        );
        let back: std::result::Result<toml::Table, _> = toml::from_str(&text);
        if back.as_ref().ok() != Some(&doc) {
            return Err(crate::error::Error::other(
                "the winner file did not read back as written: nothing was published".to_string(),
                Some("report this with the `--vary` values you passed".into()),
            ));
        }
        Ok(text)
    }
}

/// The search's winner, to be written as a profile file.
pub(crate) struct Winner<'a> {
    pub recipe: &'a Recipe,
    pub name: &'a str,
    pub best: &'a Entry,
    pub against: Option<&'a str>,
    pub method: Method,
    pub request: &'a BTreeSet<String>,
    /// How far it is ahead of the runner-up, where one ran the same requests.
    pub margin: Option<&'a Margin>,
}

impl Winner<'_> {
    /// The winner as a servable profile file (per-request settings are named in its summary):
    /// where it was written, and the winner's tok/s.
    pub(crate) fn write(
        &self,
        load: &Loader,
        dir: &std::path::Path,
    ) -> Result<(std::path::PathBuf, f64)> {
        let (_, winner) =
            super::evaluate::resolve(load, self.name, self.request, &self.best.variant, None)?;
        let base = self
            .against
            .map(|b| {
                pipeline::Variant::pick(self.recipe, Some(b))
                    .map(|v| (v.name.to_string(), v.profile.clone()))
            })
            .transpose()?;
        let best_name = format!("{}-best", self.name);
        let tok_s = self.best.tok_s().expect("a ranked winner was measured");
        let per_request = self.best.variant.request(self.request);
        let mut summary = format!("{} at {tok_s:.1} tok/s", self.best.variant.name());
        if !per_request.is_empty() {
            let fields: Vec<String> = per_request
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            summary.push_str(&format!("; send {} with each request", fields.join(", ")));
        }
        if let Some(m) = self.margin {
            summary.push_str(&format!("; {}", m.line()));
        }
        let file = WinnerFile {
            recipe: &self.recipe.name,
            name: &best_name,
            profile: &winner,
            baseline: base.as_ref().map(|(n, p)| (n.as_str(), p)),
            summary,
            method: self.method,
        };
        let path = dir.join(format!("{best_name}.toml"));
        crate::fs::write_atomic(&path, file.render()?.as_bytes())?;
        Ok((path, tok_s))
    }
}

fn profile_table(p: &Profile, baseline: Option<&str>) -> toml::Table {
    let strings = |v: &[String]| toml::Value::Array(v.iter().cloned().map(Into::into).collect());
    let mut t = toml::Table::new();
    if let Some(d) = &p.description {
        t.insert("description".into(), d.clone().into());
    }
    t.insert("cmd".into(), strings(&p.cmd));
    t.insert("args".into(), strings(&p.args));
    if !p.evidence_args.is_empty() {
        t.insert("evidence_args".into(), strings(&p.evidence_args));
    }
    if let Some(crate::recipe::Ceiling::LlamaBench(path)) = &p.ceiling {
        let ceiling = [("llama_bench".to_string(), path.display().to_string().into())];
        t.insert(
            "ceiling".into(),
            toml::Value::Table(ceiling.into_iter().collect()),
        );
    }
    if !p.env.is_empty() {
        let env: BTreeMap<String, toml::Value> = p
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone().into()))
            .collect();
        t.insert("env".into(), toml::Value::Table(env.into_iter().collect()));
    }
    if let Some(port) = p.port {
        t.insert("port".into(), port.to_string().into());
    }
    if let Some(url) = &p.url {
        t.insert("url".into(), url.clone().into());
    }
    if let Some(api) = &p.api {
        t.insert("api".into(), api.name().into());
    }
    if let Some(ready) = &p.ready {
        t.insert("ready".into(), ready.clone().into());
    }
    if let Some(sig) = &p.signatures {
        // The winner file lives elsewhere: a set of the recipe's own is named by its full path.
        let located = crate::serve::signatures::Signatures::locate(sig, &p.dir);
        let spec = located.map_or_else(|| sig.clone(), |path| path.display().to_string());
        t.insert("signatures".into(), spec.into());
    }
    if let Some(timeout) = p.timeout {
        t.insert("timeout".into(), timeout.as_secs().to_string().into());
    }
    if !p.expect.is_empty() {
        t.insert("expect".into(), strings(&p.expect));
    }
    if let Some(b) = baseline {
        t.insert("baseline".into(), b.to_string().into());
    }
    t
}

#[cfg(test)]
mod tests {
    use super::{profile_table, table, WinnerFile};
    use crate::tune::{Entry, Variant};

    #[test]
    fn an_osc_or_csi_escape_in_a_vary_value_is_shown_not_obeyed() {
        // OSC 0 (retitle the terminal, BEL-terminated) and CSI 2J (clear the screen).
        let value = "a\u{1b}]0;pwned\u{7}b\u{1b}[2J";
        let mut e = Entry::new(Variant {
            settings: vec![("tag".into(), value.into())],
        });
        e.disqualified = Some(format!("launch failed: bad tag {value}"));
        let shown = table(&[e.clone()]);
        assert!(
            !shown.contains('\u{1b}') && !shown.contains('\u{7}'),
            "{shown:?}"
        );
        assert!(
            shown.contains("tag=a\\u{1b}]0;pwned\\u{7}b\\u{1b}[2J")
                && shown.contains("bad tag a\\u{1b}]0"),
            "{shown}"
        );
        let picture = super::svg("t", &[e]);
        assert!(!picture.contains('\u{1b}'), "{picture:?}");
    }
    /// The H200's fourth race (`tests/fixtures/gpu-h200-tune/session6/tune-race-4.*`): each row
    /// names the requests its median is of, the winner's full benchmark beside the screenings.
    #[test]
    fn each_row_names_the_runs_and_tokens_its_figure_is_the_median_of() {
        let json = include_str!("../../tests/fixtures/gpu-h200-tune/session6/tune-race-4.json");
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        let ranked: Vec<Entry> = serde_json::from_value(v["entries"].clone()).unwrap();
        let shown = table(&ranked);
        let lines: Vec<&str> = shown.lines().collect();
        assert!(lines[0].contains(" tok/s     runs     CV "), "{shown}");
        assert!(
            lines[1].contains(" 578.1   5x2048   3.3% ") && lines[1].ends_with("winner"),
            "{shown}"
        );
        assert!(lines[2].contains(" 396.6    3x256 "), "{shown}");
        assert!(lines[7].contains("-        -      -"), "{shown}");
    }

    /// `--launches 3`: a row's figure is the median of its launches' medians, its CV the
    /// spread between them, its runs `3x2x64` and its launch `x3`.
    #[test]
    fn a_relaunched_row_shows_its_launches_median_and_their_spread() {
        let mut e = Entry::new(Variant {
            settings: vec![("tag".into(), "a".into())],
        });
        for (launch, tok_s) in [(1, 90.0), (3, 110.0), (5, 100.0)] {
            e.measurements.push(crate::tune::Measurement {
                rung: crate::tune::Rung {
                    warmup: 0,
                    runs: 2,
                    max_tokens: 64,
                },
                tok_s,
                cv: 0.5,
                ttft_ms: launch as f64,
                runs: vec![tok_s, tok_s],
                launch,
                others_up: 0,
            });
        }
        let shown = table(&[e]);
        let row = shown.lines().nth(1).unwrap();
        // CV of 90, 110, 100: sample sd 10 over mean 100.
        assert_eq!(
            row.split_whitespace().collect::<Vec<_>>(),
            ["1", "tag=a", "100.0", "3x2x64", "10.0%", "3.0", "x3", "winner"],
            "{shown}"
        );
    }

    use crate::recipe::Profile;

    #[test]
    fn a_vary_value_of_70000_characters_is_clipped_in_the_table_never_a_panic() {
        // Rust's formatter panics on a width past 65,535 ("Formatting argument out of range").
        let long = "v".repeat(70_000);
        let mut e = Entry::new(Variant {
            settings: vec![("tag".into(), long.clone())],
        });
        e.disqualified = Some(format!("launch failed: bad tag {long}"));
        let shown = table(&[e.clone()]);
        let widest = shown.lines().map(|l| l.chars().count()).max().unwrap();
        assert!(widest < 1_000, "a line of {widest} characters");
        assert!(shown.contains("tag=vvvv") && shown.contains('…'), "{shown}");
        let picture = super::svg("t", &[e]);
        assert!(!picture.contains(&long), "the SVG carries the whole value");
    }

    #[test]
    fn a_vary_value_that_breaks_out_of_the_header_comment_stays_one_escaped_line() {
        // The issue's payload: `--vary "tag=$(printf 'x"y\n[env]\nLD_PRELOAD = "/tmp/evil.so"\n#')"`.
        let payload = "x\"y\n[env]\nLD_PRELOAD = \"/tmp/evil.so\"\n#";
        let p = Profile {
            cmd: vec!["server".into()],
            args: vec!["--tag".into(), payload.into()],
            ..Profile::default()
        };
        let file = WinnerFile {
            recipe: "r",
            name: "tuned-best",
            profile: &p,
            baseline: None,
            summary: format!("tag={payload} at 1.0 tok/s"),
            method: crate::tune::Method::Race,
        };
        let text = file.render().unwrap();
        let back: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(
            back.keys().collect::<Vec<_>>(),
            ["profile", "recipe"],
            "{text}"
        );
        let profile = &back["profile"]["tuned-best"];
        assert!(profile.get("env").is_none(), "{text}");
        assert_eq!(profile["args"][1].as_str(), Some(payload));
        // The header is two comment lines, the tables follow.
        assert_eq!(text.lines().nth(2), Some("[profile.tuned-best]"), "{text}");
    }

    #[test]
    fn a_winner_profile_keeps_its_timeout_evidence_args_and_ceiling_and_finds_the_recipes_own_signatures(
    ) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("signatures")).unwrap();
        std::fs::write(dir.path().join("signatures/mine.toml"), "").unwrap();
        let mut p = Profile {
            cmd: vec!["server".into()],
            signatures: Some("mine".into()),
            timeout: Some(std::time::Duration::from_secs(900)),
            evidence_args: vec!["-lv".into(), "5".into()],
            ceiling: Some(crate::recipe::Ceiling::LlamaBench(
                "/x/llama-bench.json".into(),
            )),
            dir: dir.path().to_path_buf(),
            ..Profile::default()
        };
        let t = profile_table(&p, None);
        // The winner still proves what it proved (its evidence-only args) and keeps its ceiling.
        assert_eq!(t["evidence_args"].as_array().map(Vec::len), Some(2));
        assert_eq!(
            t["ceiling"]["llama_bench"].as_str(),
            Some("/x/llama-bench.json")
        );
        let own = dir.path().join("signatures/mine.toml");
        assert_eq!(t["signatures"].as_str(), Some(own.to_str().unwrap()));
        assert_eq!(t["timeout"].as_str(), Some("900"));
        // A shipped set stays a name.
        p.signatures = Some("llama-cpp".into());
        assert_eq!(
            profile_table(&p, None)["signatures"].as_str(),
            Some("llama-cpp")
        );
    }
}
