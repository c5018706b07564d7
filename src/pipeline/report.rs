//! The typed report of `kiln up`: what was served, the tuning verdicts, the greedy A/B and the
//! bench, rendered as JSON (report.json: the field names consumers read), Markdown (report.md)
//! and a self-contained HTML page with the bench plot inline (report.html).

use std::fmt::Write;

use serde::Serialize;

use super::ceiling::Ceiling;
use super::judge::{judge, Outcome};
use super::launches::{LaunchSummary, Role};
use super::Launched;
use crate::bench::wire::escape_controls;
use crate::bench::{self, ab::Comparison};
use crate::error::Error;
use crate::recipe::Recipe;
use crate::serve::verdict::{Status, Verdict};

/// The report of one `kiln up`. A run that failed before it served (preflight, a step, the
/// launch) has a `stage` and no `served` part, so that no report of an earlier run passes for it.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub recipe: String,
    /// Where a run that failed before serving stopped: `preflight`, `steps` or `serve`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// What was served and found (its fields sit at the top level of report.json).
    #[serde(flatten)]
    pub served: Option<Served>,
    /// Whether advisories failed the run (`kiln up --strict`).
    pub strict: bool,
    pub outcome: Outcome,
    /// `kiln up`'s exit status: 0, or 1 for a failure (2 for bad input).
    pub exit_code: u8,
    /// When, where and from what the run was (report.html's header and step summary).
    #[serde(skip)]
    pub header: Option<super::header::Header>,
}

/// The served part of a [`Report`]: the profile, its verdicts, the greedy A/B and the bench.
#[derive(Debug, Clone, Serialize)]
pub struct Served {
    pub profile: String,
    pub url: Option<String>,
    pub pid: u32,
    pub ready_after_s: f64,
    pub verdicts: Vec<Verdict>,
    /// The profile the A/B compared against (`ab` is set with it).
    pub baseline: Option<String>,
    pub ab: Option<Comparison>,
    pub bench: Option<bench::Report>,
    /// The launches the figures came from (one, or judged then bench): see
    /// [`super::launches`]. `pid`, `url` and `ready_after_s` above are the last one's, the
    /// server left running; `verdicts` are the judged launch's.
    pub launches: Vec<LaunchSummary>,
    /// The served decode figure against the build's own llama-bench (the profile's `ceiling`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ceiling: Option<Ceiling>,
}

/// What [`Report::new`] judges: the verdicts (of the judged launch), the A/B against the named
/// baseline, the bench, every launch, and failures found across launches.
pub struct Findings {
    pub verdicts: Vec<Verdict>,
    pub ab: Option<(String, Comparison)>,
    pub bench: Option<bench::Report>,
    pub launches: Vec<LaunchSummary>,
    /// A tuning active in the judged launch that the bench launch shows fell back (or crashed).
    pub conflicts: Vec<String>,
    pub ceiling: Option<Ceiling>,
}

/// 0 when every tuning is active, 1 when one fell back or is unknown (or only configured), 2 when
/// one crashed or its evidence conflicts.
pub fn verdict_code(verdicts: &[Verdict]) -> u8 {
    verdicts
        .iter()
        .map(|v| match v.status {
            Status::Active => 0,
            Status::FellBack | Status::Unknown | Status::Configured => 1,
            Status::Crashed | Status::Conflicting => 2,
        })
        .max()
        .unwrap_or(0)
}

/// Text kiln did not write (a server's reason and evidence, an error, a path) as inert Markdown:
/// control characters escaped (so it is one line), `<`, `>` and `&` as HTML entities (no raw
/// HTML: `<script>`, `<img onerror>`), and the characters of inline Markdown backslash-escaped
/// (no link, image, emphasis or code span; `|` stays in its table cell). Secrets are redacted
/// before anything is escaped.
fn md_text(s: &str) -> String {
    // Redacted first: once escaped (`p\_ss`), a secret no longer matches the redactor that
    // report.md passes through as a whole.
    let text: Vec<char> = escape_controls(&crate::redact::scrub(s)).chars().collect();
    let mut out = String::with_capacity(s.len());
    for (i, &c) in text.iter().enumerate() {
        // `_` inside a word (`n_threads`) makes no emphasis: left as written.
        let in_word = |j: Option<usize>| {
            j.and_then(|j| text.get(j))
                .is_some_and(|c| c.is_alphanumeric())
        };
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '_' if in_word(i.checked_sub(1)) && in_word(Some(i + 1)) => out.push(c),
            '\\' | '`' | '*' | '_' | '[' | ']' | '|' | '~' | '!' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// `text` as one Markdown code span (`tuned`): shown as written, HTML included; its delimiter is
/// longer than any run of backticks inside.
fn code_span(text: &str) -> String {
    let text = escape_controls(&crate::redact::scrub(text));
    let tick = "`".repeat(longest_backticks(&text) + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{tick}{pad}{text}{pad}{tick}")
}

/// The longest run of backticks in `text`.
fn longest_backticks(text: &str) -> usize {
    text.split(|c| c != '`').map(str::len).max().unwrap_or(0)
}

/// `text` (lines kiln rendered around server text: the A/B, the bench) in a fenced code block
/// whose fence is longer than any run of backticks inside, so no text ends it early; a code
/// block shows HTML as text.
fn fenced(text: &str) -> String {
    let body: String = crate::redact::scrub(text)
        .lines()
        .map(|l| escape_controls(l) + "\n")
        .collect();
    let fence = "`".repeat(longest_backticks(&body).max(2) + 1);
    format!("{fence}\n{body}{fence}\n")
}

impl Report {
    /// The report of a served profile, judged (see [`super::judge()`]); `launched` is the launch
    /// left running.
    pub fn new(recipe: &Recipe, launched: &Launched, found: Findings, strict: bool) -> Report {
        let profile = launched.variant.name;
        let Findings {
            verdicts,
            ab,
            bench,
            launches,
            conflicts,
            ceiling,
        } = found;
        let mut j = judge(
            profile,
            &verdicts,
            ab.as_ref().map(|(base, c)| (c, base.as_str())),
            bench.as_ref(),
        );
        j.failures.extend(conflicts);
        let outcome = Outcome::of(j, strict);
        let record = &launched.running.record;
        let (baseline, ab) = ab.unzip();
        Report {
            recipe: recipe.name.clone(),
            stage: None,
            served: Some(Served {
                profile: profile.to_string(),
                url: record.url.clone(),
                pid: record.pid,
                ready_after_s: launched.running.ready_after.as_secs_f64(),
                verdicts,
                baseline,
                ab,
                bench,
                launches,
                ceiling,
            }),
            strict,
            exit_code: u8::from(!outcome.ok),
            outcome,
            header: None,
        }
    }

    /// The report of a run that failed at `stage` with `err`, before anything was served.
    pub fn failed(recipe: &str, stage: &str, err: &Error, strict: bool) -> Report {
        Report {
            recipe: recipe.to_string(),
            stage: Some(stage.to_string()),
            served: None,
            strict,
            outcome: Outcome::failed(err.to_string()),
            exit_code: err.exit_code(),
            header: None,
        }
    }

    /// A run of steps only that succeeded (`--no-serve`, `--only`, a recipe without profiles):
    /// nothing served, so no verdict, A/B or bench; it still replaces the last run's report.
    pub fn steps_only(recipe: &str, strict: bool) -> Report {
        Report {
            recipe: recipe.to_string(),
            stage: None,
            served: None,
            strict,
            outcome: Outcome {
                ok: true,
                error: None,
                warnings: Vec::new(),
                hint: None,
            },
            exit_code: 0,
            header: None,
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("reports serialize")
    }

    pub fn to_markdown(&self) -> String {
        let Some(served) = &self.served else {
            if self.outcome.ok {
                return format!(
                    "# kiln up: {}\n\n## Outcome\n\nok: the steps ran; nothing was served (`--no-serve`, `--only`, or a recipe without profiles)\n",
                    md_text(&self.recipe)
                );
            }
            return format!(
                "# kiln up: {}\n\n## Outcome\n\nfailed ({}): {}\n",
                md_text(&self.recipe),
                md_text(self.stage.as_deref().unwrap_or("-")),
                md_text(self.outcome.error.as_deref().unwrap_or("-"))
            );
        };
        let mut md = format!(
            "# kiln up: {} (profile {})\n\nready after {:.1} s at {}\n\n## Outcome\n\n{}\n",
            md_text(&self.recipe),
            code_span(&served.profile),
            served.ready_after_s,
            md_text(served.url.as_deref().unwrap_or("-")),
            match &self.outcome.error {
                Some(e) => format!("failed: {}", md_text(e)),
                None => "ok".to_string(),
            }
        );
        for w in &self.outcome.warnings {
            let _ = write!(md, "\n- warning: {}", md_text(w));
        }
        let from = |figure: &str| {
            served.from_launch(figure).map_or(String::new(), |l| {
                format!(" ({}, pid {})", l.launch.label(), l.pid)
            })
        };
        let _ = write!(md, "\n\n## Tuning verdicts{}\n\n", from("verdicts"));
        verdict_table(&mut md, &served.verdicts);
        if let (Some(c), Some(base)) = (&served.ab, &served.baseline) {
            let _ = write!(
                md,
                "\n## Greedy A/B{}\n\n{}",
                from("greedy_ab"),
                fenced(&c.render(base, &served.profile))
            );
        }
        if let Some(b) = &served.bench {
            let _ = write!(
                md,
                "\n## Benchmark{}\n\n{}",
                from("bench"),
                fenced(&b.render())
            );
        }
        if let Some(c) = &served.ceiling {
            let _ = write!(md, "\n## Ceiling\n\n{}\n", md_text(&served.ceiling_line(c)));
        }
        if let Some(l) = served.launches.iter().find(|l| l.launch == Role::Bench) {
            let _ = write!(md, "\n## Verdicts of the bench launch (pid {})\n\n", l.pid);
            verdict_table(&mut md, &l.verdicts);
        }
        if !served.launches.is_empty() {
            md.push_str("\n## Launches\n\n| launch | pid | log (from byte) | args difference | figures |\n|---|---|---|---|---|\n");
            for l in &served.launches {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} ({}) | {} | {} |",
                    l.launch.label(),
                    l.pid,
                    md_text(&l.log.display().to_string()),
                    l.log_offset,
                    md_text(&args_difference(l)),
                    l.figures.join(", ")
                );
            }
        }
        md
    }
}

/// A Markdown table of verdicts.
fn verdict_table(md: &mut String, verdicts: &[Verdict]) {
    md.push_str("| feature | verdict | reason | evidence |\n|---|---|---|---|\n");
    for v in verdicts {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            md_text(&v.feature),
            v.status.label(),
            md_text(&v.reason),
            md_text(v.evidence.as_deref().unwrap_or(""))
        );
    }
}

/// A launch's args difference in words: `-lv 5 (was -lv 4)`, or what it left off.
pub(super) fn args_difference(l: &LaunchSummary) -> String {
    match (l.launch, l.args_difference.is_empty()) {
        (Role::Bench, _) => "the profile's args only (no evidence-only args)".to_string(),
        (_, true) => "the profile's args".to_string(),
        (_, false) => format!("+ {}", l.args_difference.join(", ")),
    }
}

impl Served {
    /// The launch a figure (`verdicts`, `greedy_ab`, `bench`, `ceiling_ratio`) came from.
    pub fn from_launch(&self, figure: &str) -> Option<&LaunchSummary> {
        self.launches.iter().find(|l| l.figures.contains(&figure))
    }

    /// The ceiling line, saying which launch the served figure came from.
    pub fn ceiling_line(&self, c: &Ceiling) -> String {
        let from = self.from_launch("bench").map_or("served".to_string(), |l| {
            format!("{}, pid {}", l.launch.label(), l.pid)
        });
        c.line(&from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::judge::Outcome;

    #[test]
    fn wire_text_reaches_report_md_and_json_escaped() {
        let report = Report {
            recipe: "r".into(),
            stage: None,
            served: Some(Served {
                profile: "p".into(),
                url: None,
                pid: 1,
                ready_after_s: 0.0,
                verdicts: vec![Verdict {
                    feature: "threads".into(),
                    status: Status::FellBack,
                    reason: "a | b\u{1b}[2J".into(),
                    evidence: Some("n_threads = 1 \u{1b}]0;owned\u{7}".into()),
                }],
                baseline: None,
                ab: None,
                bench: None,
                launches: Vec::new(),
                ceiling: None,
            }),
            strict: false,
            outcome: Outcome {
                ok: false,
                error: None,
                warnings: vec!["bench: \u{1b}[31mred".into()],
                hint: None,
            },
            exit_code: 1,
            header: None,
        };
        let md = report.to_markdown();
        assert!(!md.contains('\u{1b}') && !md.contains('\u{7}'), "{md:?}");
        assert!(
            md.contains(
                "| threads | fell back | a \\| b\\\\u{1b}\\[2J | n_threads = 1 \\\\u{1b}\\]0;owned\\\\u{7} |"
            ) && md.contains("- warning: bench: \\\\u{1b}\\[31mred"),
            "{md}"
        );
        // Verdicts escape their evidence when they are made (serve::verdict), so report.json's
        // strings hold the escaped text too; serde escapes whatever else as \u001b.
        assert!(!report.to_json().contains('\u{1b}'));
    }

    /// Server text quoted into report.md cannot become HTML, a link or a fence's end there, nor
    /// markup in report.html (#47): a renderer shows it as the text it was.
    #[test]
    fn server_text_in_report_md_and_html_is_inert() {
        let script = "<script>alert(1)</script>";
        let img = "<img src=x onerror=alert(1)>";
        let link = "[docs](javascript:alert(1)) & *bold* `code` ~x~ _u_ \\";
        let mut r = report(true);
        r.outcome.warnings = vec![format!("bench: {script}")];
        r.served = Some(Served {
            profile: "p".into(),
            url: Some(format!("http://h/{img}")),
            pid: 1,
            ready_after_s: 0.0,
            verdicts: vec![Verdict {
                feature: "threads".into(),
                status: Status::FellBack,
                reason: format!("{script} {link}"),
                evidence: Some(img.into()),
            }],
            baseline: None,
            ab: None,
            bench: None,
            launches: Vec::new(),
            ceiling: None,
        });
        let md = r.to_markdown();
        for raw in [
            "<script", "<img", "[docs](", "*bold*", "`code`", "~x~", "_u_",
        ] {
            assert!(!md.contains(raw), "{raw} is live in report.md:\n{md}");
        }
        assert!(
            md.contains("&lt;script&gt;alert(1)&lt;/script&gt;")
                && md.contains("&lt;img src=x onerror=alert(1)&gt;")
                && md.contains("\\[docs\\](javascript:alert(1)) &amp; \\*bold\\* \\`code\\` \\~x\\~ \\_u\\_ \\\\"),
            "{md}"
        );
        let mut failed = report(false);
        failed.outcome.error = Some(format!("POST /generate answered HTTP 500: {script}"));
        assert!(
            !failed.to_markdown().contains("<script"),
            "{}",
            failed.to_markdown()
        );
        let html = super::super::html::page(&r);
        assert!(
            !html.contains("<script") && !html.contains("<img"),
            "{html}"
        );
        // A fence holds any text: it is longer than every run of backticks inside.
        let fenced = fenced("a\n```\n<script>x</script>\n````\n");
        assert!(
            fenced.starts_with("`````\n") && fenced.ends_with("\n`````\n"),
            "{fenced}"
        );
        assert_eq!(super::fenced("plain\n"), "```\nplain\n```\n");
    }

    /// Escaping for Markdown must not hide a secret from the redactor: a password with `_`,
    /// `*` and `<` in it reaches report.md as `***`, not as `p\_ss\*...` (#47).
    #[test]
    fn a_secret_in_server_text_is_redacted_before_it_is_escaped() {
        let secret = "kiln_test_p_ss*w<rd\"_4f1c";
        crate::redact::register_pairs([("KILN_TEST_MD_TOKEN", secret)]);
        let mut r = report(true);
        r.outcome.warnings = vec![format!("bench: the server echoed {secret}")];
        r.served = Some(Served {
            profile: "p".into(),
            url: None,
            pid: 1,
            ready_after_s: 0.0,
            verdicts: vec![Verdict {
                feature: "f".into(),
                status: Status::Unknown,
                reason: format!("token {secret}"),
                evidence: Some(format!("L {secret}")),
            }],
            baseline: None,
            ab: None,
            bench: None,
            launches: Vec::new(),
            ceiling: None,
        });
        let dir = tempfile::tempdir().unwrap();
        let paths = crate::paths::StatePaths::new(dir.path().to_path_buf(), None);
        let files = r.write(&paths).unwrap();
        let md = std::fs::read_to_string(&files.markdown).unwrap();
        for leak in ["4f1c", "w<rd", "w&lt;rd", "ss\\*w"] {
            assert!(!md.contains(leak), "{leak} in report.md:\n{md}");
        }
        assert_eq!(md.matches("\\*\\*\\*").count(), 3, "{md}");
        // report.html escapes `<` and `"`: redacted before that.
        let html = std::fs::read_to_string(&files.html).unwrap();
        assert!(!html.contains("4f1c"), "{html}");
        // report.json writes the `"` as `\"`: that form is redacted too.
        let json = std::fs::read_to_string(&files.json).unwrap();
        assert!(!json.contains("4f1c"), "{json}");
        assert_eq!(json.matches("***").count(), 3, "{json}");
    }

    #[test]
    fn each_figure_names_its_launch_and_the_ceiling_its_ratio() {
        let v = |status| Verdict {
            feature: "cuda-graphs".into(),
            status,
            reason: "r".into(),
            evidence: None,
        };
        let launch = |launch, pid, diff: &[&str], figures, verdicts| LaunchSummary {
            launch,
            pid,
            log: "/s/serve/r-tuned.log".into(),
            log_offset: 10,
            launch_id: "ab".into(),
            ready_after_s: 1.0,
            args_difference: diff.iter().map(|d| (*d).to_string()).collect(),
            figures,
            verdicts,
        };
        let mut ceiling = Ceiling {
            source: "llama-bench",
            path: "/p/llama-bench.json".into(),
            figure: Some(super::super::Figure {
                test: "tg2048".into(),
                n_gen: 2048,
                tok_s: 893.6,
                stddev_tok_s: 0.6,
            }),
            served_decode_tok_s: None,
            ratio: None,
            skipped: None,
        };
        ceiling.compare(Some(779.5));
        let mut r = report(true);
        r.served = Some(Served {
            profile: "tuned".into(),
            url: None,
            pid: 8,
            ready_after_s: 1.0,
            verdicts: vec![v(Status::Active)],
            baseline: None,
            ab: None,
            bench: None,
            launches: vec![
                launch(
                    Role::Judged,
                    7,
                    &["-lv 5 (was -lv 4)"],
                    vec!["verdicts"],
                    vec![v(Status::Active)],
                ),
                launch(
                    Role::Bench,
                    8,
                    &[],
                    vec!["bench_launch_verdicts", "bench", "ceiling_ratio"],
                    vec![v(Status::Unknown)],
                ),
            ],
            ceiling: Some(ceiling),
        });
        let md = r.to_markdown();
        for want in [
            "| judged launch | 7 | /s/serve/r-tuned.log (10) | + -lv 5 (was -lv 4) | verdicts |",
            "| bench launch | 8 | /s/serve/r-tuned.log (10) | the profile's args only (no evidence-only args) | bench_launch_verdicts, bench, ceiling_ratio |",
            "## Tuning verdicts (judged launch, pid 7)",
            "## Verdicts of the bench launch (pid 8)\n\n| feature | verdict | reason | evidence |\n|---|---|---|---|\n| cuda-graphs | unknown |",
            "served 779.5 tok/s (bench launch, pid 8) · ceiling llama-bench tg2048 893.6 tok/s (sd 0.6) · 0.872×",
        ] {
            assert!(md.contains(want), "{want}\n{md}");
        }
        let html = super::super::html::page(&r);
        assert!(
            html.contains("<h2>Tuning verdicts (judged launch, pid 7)</h2>"),
            "{html}"
        );
        assert!(html.contains("· 0.872×</p>"), "{html}");
        let json = r.to_json();
        assert!(
            json.contains("\"launch\": \"judged\"") && json.contains("\"ratio\": 0.87"),
            "{json}"
        );
    }

    fn report(ok: bool) -> Report {
        let mut r = Report::failed("r", "serve", &Error::other("it failed", None), false);
        if ok {
            r.stage = None;
            r.outcome = Outcome {
                ok: true,
                error: None,
                warnings: Vec::new(),
                hint: None,
            };
            r.exit_code = 0;
        }
        r
    }

    #[test]
    fn a_failed_run_keeps_the_last_good_report_beside_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let paths = crate::paths::StatePaths::new(dir.path().to_path_buf(), None);
        assert_eq!(report(true).write(&paths).unwrap().previous, None);
        let good = std::fs::read(paths.reports("r").join("report.json")).unwrap();
        for _ in 0..2 {
            let files = report(false).write(&paths).unwrap();
            let prev = files.previous.expect("the good report is kept");
            assert_eq!(std::fs::read(&prev).unwrap(), good);
            assert!(paths.reports("r").join("report.prev.html").exists());
            assert!(!super::super::files::was_ok(&files.json));
        }
    }
}
