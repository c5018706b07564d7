//! report.html: one self-contained page (inline CSS, the bench plot as inline SVG, no scripts,
//! nothing fetched), readable offline and attachable to a ticket. A header says when, with
//! which kiln, on which host and GPUs, from which recipe file and profile; then the outcome, a
//! step summary linking each step's log, the verdicts (Markdown code spans as `<code>`), the
//! greedy A/B and the bench as tables, and the bench plot; then the ceiling, the bench launch's
//! verdicts and the launches (which launch each figure came from; each heading names it too).

use std::fmt::Write;

use super::ceiling::Ceiling;
use super::header::Header;
use super::report::Served;
use super::Report;
use crate::bench::plot;
use crate::serve::verdict::Status;

/// `s` as HTML text: secrets redacted first (once `<` is `&lt;`, a secret holding it no longer
/// matches the redactor report.html passes through as a whole), then escaped.
fn escape(s: &str) -> String {
    plot::escape(&crate::redact::scrub(s))
}

/// `YYYY-MM-DD HH:MM UTC` of a Unix time.
fn utc(unix: u64) -> String {
    // One date conversion in the crate: the image's, `YYYY-MM-DDTHH:MM:SSZ`.
    let iso = crate::image::archive::rfc3339(unix);
    format!("{} {} UTC", &iso[..10], &iso[11..16])
}

/// Escaped text with Markdown code spans (`like this`) as `<code>`.
fn prose(text: &str) -> String {
    // Only paired backticks make spans; an unpaired last one stays a backtick.
    let paired = text.matches('`').count() / 2 * 2;
    let mut out = String::new();
    for (i, part) in text.split('`').enumerate() {
        if i % 2 == 1 && i <= paired {
            let _ = write!(out, "<code>{}</code>", escape(part));
        } else {
            if i > paired {
                out.push('`');
            }
            out.push_str(&escape(part));
        }
    }
    out
}

pub(super) fn page(r: &Report) -> String {
    let mut h = String::new();
    let title = match &r.served {
        Some(s) => format!("kiln up: {} (profile {})", r.recipe, s.profile),
        None => format!("kiln up: {}", r.recipe),
    };
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>\n",
        escape(&title),
        escape(&title),
    );
    if let Some(head) = &r.header {
        header(&mut h, head);
    }
    outcome(&mut h, r);
    if let Some(head) = &r.header {
        steps(&mut h, head);
    }
    if let Some(s) = &r.served {
        served(&mut h, s);
    }
    h.push_str("</body>\n</html>\n");
    h
}

/// When, which kiln, which host and GPUs, which recipe and profile.
fn header(h: &mut String, head: &Header) {
    let gpus = if head.gpus.is_empty() {
        "no NVIDIA GPU".to_string()
    } else {
        head.gpus.join("; ")
    };
    let rows = [
        ("date", utc(head.unix_time)),
        ("kiln", head.kiln_version.clone()),
        ("host", head.host.clone()),
        ("GPUs", gpus),
        ("recipe", head.recipe_origin.clone()),
        (
            "profile",
            head.profile
                .clone()
                .unwrap_or_else(|| "none (not served)".into()),
        ),
    ];
    h.push_str("<table class=\"meta\">\n");
    for (k, v) in rows {
        let _ = writeln!(h, "<tr><th>{k}</th><td>{}</td></tr>", prose(&v));
    }
    h.push_str("</table>\n");
}

/// The summary line: exit code, ready time, the error and the warnings.
fn outcome(h: &mut String, r: &Report) {
    let class = if r.exit_code == 0 { "ok" } else { "bad" };
    let _ = write!(h, "<p class=\"summary {class}\">exit code {}", r.exit_code);
    match (&r.served, &r.stage) {
        (Some(s), _) => {
            let _ = write!(
                h,
                " &middot; ready after {:.1} s at {}",
                s.ready_after_s,
                escape(s.url.as_deref().unwrap_or("-"))
            );
        }
        (None, Some(stage)) => {
            let _ = write!(h, " &middot; failed at {}", prose(stage));
        }
        (None, None) => {}
    }
    h.push_str("</p>\n");
    if let Some(e) = &r.outcome.error {
        let _ = writeln!(h, "<p class=\"bad\">failed: {}</p>", prose(e));
    }
    if !r.outcome.warnings.is_empty() {
        h.push_str("<ul>\n");
        for w in &r.outcome.warnings {
            let _ = writeln!(h, "<li class=\"warn\">warning: {}</li>", prose(w));
        }
        h.push_str("</ul>\n");
    }
}

/// Every step, what its receipt says, and a link to its log.
fn steps(h: &mut String, head: &Header) {
    if head.steps.is_empty() {
        return;
    }
    h.push_str(
        "<h2>Steps</h2>\n<table>\n<tr><th>step</th><th>kind</th><th>status</th><th>log</th></tr>\n",
    );
    for s in &head.steps {
        let class = if s.status.starts_with("done") {
            "ok"
        } else {
            "warn"
        };
        let log = s.log.as_ref().map_or(String::new(), |l| {
            format!("<a href=\"{}\">log</a>", escape(l))
        });
        let _ = writeln!(
            h,
            "<tr><td><code>{}</code></td><td>{}</td><td class=\"{class}\">{}</td><td>{log}</td></tr>",
            escape(&s.id),
            escape(&s.kind),
            prose(&s.status)
        );
    }
    h.push_str("</table>\n");
}

/// Which launch a figure came from: ` (judged launch, pid 42)`.
fn from(r: &Served, figure: &str) -> String {
    r.from_launch(figure).map_or(String::new(), |l| {
        format!(" ({}, pid {})", l.launch.label(), l.pid)
    })
}

fn verdict_table(h: &mut String, verdicts: &[crate::serve::verdict::Verdict]) {
    if verdicts.is_empty() {
        h.push_str("<p>no tunings to judge (no flag of the profile has a signature)</p>\n");
        return;
    }
    h.push_str(
        "<table>\n<tr><th>feature</th><th>verdict</th><th>reason</th><th>evidence</th></tr>\n",
    );
    for v in verdicts {
        let class = match v.status {
            Status::Active => "ok",
            Status::FellBack | Status::Unknown | Status::Configured => "warn",
            Status::Crashed | Status::Conflicting => "bad",
        };
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"{class}\">{}</td><td>{}</td><td><code>{}</code></td></tr>",
            prose(&v.feature),
            escape(v.status.label()),
            prose(&v.reason),
            escape(v.evidence.as_deref().unwrap_or(""))
        );
    }
    h.push_str("</table>\n");
}

/// The launches the figures came from.
fn launches(h: &mut String, r: &Served) {
    if r.launches.is_empty() {
        return;
    }
    h.push_str("<h2>Launches</h2>\n<table>\n<tr><th>launch</th><th>pid</th><th>log (from byte)</th><th>args difference</th><th>figures</th></tr>\n");
    for l in &r.launches {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"num\">{}</td><td><code>{}</code> ({})</td><td><code>{}</code></td><td>{}</td></tr>",
            escape(l.launch.label()),
            l.pid,
            escape(&l.log.display().to_string()),
            l.log_offset,
            escape(&super::report::args_difference(l)),
            escape(&l.figures.join(", "))
        );
    }
    h.push_str("</table>\n");
}

/// Verdicts, greedy A/B and bench of the served profile.
fn served(h: &mut String, r: &Served) {
    let _ = writeln!(
        h,
        "<h2>Tuning verdicts{}</h2>",
        escape(&from(r, "verdicts"))
    );
    verdict_table(h, &r.verdicts);
    if let (Some(c), Some(base)) = (&r.ab, &r.baseline) {
        let _ = writeln!(
            h,
            "<h2>Greedy A/B{}</h2>\n<p><code>{}</code> against <code>{}</code>: agreement {:.1}% of {}, verdict <span class=\"{}\">{}</span></p>",
            escape(&from(r, "greedy_ab")),
            escape(&r.profile),
            escape(base),
            c.agreement * 100.0,
            c.unit,
            match c.verdict {
                "identical" => "ok",
                "diverged late" => "warn",
                _ => "bad",
            },
            escape(c.verdict)
        );
        let _ = writeln!(h, "<table>\n<tr><th>prompt</th><th>agreeing {}</th><th>status</th><th>first divergence</th></tr>", c.unit);
        for p in &c.prompts {
            let head: String = p
                .prompt
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(60)
                .collect();
            let div = p
                .first_divergence
                .as_ref()
                .map_or(String::new(), |(i, a, b)| {
                    format!(
                        "token {i}: <code>{}</code> vs <code>{}</code>",
                        escape(&format!("{a:?}")),
                        escape(&format!("{b:?}"))
                    )
                });
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td class=\"num\">{}/{}</td><td>{}</td><td>{div}</td></tr>",
                escape(&head),
                p.agree,
                p.total,
                prose(p.status)
            );
        }
        h.push_str("</table>\n");
    }
    if let Some(b) = &r.bench {
        bench(h, b, &from(r, "bench"), r.ceiling.as_ref());
    }
    if let Some(c) = &r.ceiling {
        let _ = writeln!(
            h,
            "<h2>Ceiling</h2>\n<p class=\"summary\">{}</p>",
            prose(&r.ceiling_line(c))
        );
    }
    if let Some(l) = r
        .launches
        .iter()
        .find(|l| l.launch == super::launches::Role::Bench)
    {
        let _ = writeln!(h, "<h2>Verdicts of the bench launch (pid {})</h2>", l.pid);
        verdict_table(h, &l.verdicts);
    }
    launches(h, r);
}

/// The bench section; its plot draws the ceiling (llama-bench's figure) when there is one.
fn bench(h: &mut String, b: &crate::bench::Report, from: &str, ceiling: Option<&Ceiling>) {
    let figure = ceiling.and_then(|c| c.figure.as_ref().map(|f| (c.source, f)));
    let label = figure.map(|(source, f)| format!("{source} {}", f.test));
    let line = figure
        .zip(label.as_deref())
        .map(|((_, f), label)| plot::Ceiling {
            label,
            tok_s: f.tok_s,
        });
    let svg = plot::of_report_with(b, line.as_ref());
    let _ = writeln!(
        h,
        "<h2>Benchmark{}</h2>\n<p><code>{}</code>, {} tokens per run, {} runs</p>\n<figure>{svg}</figure>",
        escape(from),
        escape(&b.url),
        b.max_tokens,
        b.runs.len()
    );
    h.push_str("<table>\n<tr><th>metric</th><th>median</th><th>mean</th><th>min</th><th>max</th><th>CV</th></tr>\n");
    let mut row = |name: &str, s: &crate::bench::stats::Summary| {
        let _ = writeln!(
            h,
            "<tr><td>{name}</td><td class=\"num\">{:.2}</td><td class=\"num\">{:.2}</td><td class=\"num\">{:.2}</td><td class=\"num\">{:.2}</td><td class=\"num\">{:.1}%</td></tr>",
            s.median, s.mean, s.min, s.max, s.cv * 100.0
        );
    };
    if let Some(d) = &b.decode_tok_s {
        row("decode tok/s", d);
    }
    row("end-to-end tok/s", &b.e2e_tok_s);
    row("time to first token (ms)", &b.ttft_ms);
    if let Some(a) = &b.accept_length {
        row("accept length", a);
    }
    h.push_str("</table>\n");
    h.push_str("<table>\n<tr><th>run</th><th>tokens</th><th>TTFT (ms)</th><th>end-to-end tok/s</th><th>decode tok/s</th></tr>\n");
    for (i, run) in b.runs.iter().enumerate() {
        let _ = writeln!(
            h,
            "<tr><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{:.1}</td><td class=\"num\">{:.2}</td><td class=\"num\">{}</td></tr>",
            i + 1,
            run.tokens,
            run.ttft_s * 1000.0,
            run.e2e_tok_s,
            run.decode_tok_s.map_or("-".into(), |d| format!("{d:.2}"))
        );
    }
    h.push_str("</table>\n");
    if let Some(g) = &b.gate {
        let class = if g.passed { "ok" } else { "bad" };
        let _ = writeln!(
            h,
            "<p class=\"{class}\">gate: {} median {:.2} is {:.2}x the baseline's {:.2} (threshold {:.2}x)</p>",
            escape(&g.metric), g.median, g.ratio, g.baseline_median, g.threshold
        );
    }
    for w in &b.warnings {
        let _ = writeln!(h, "<p class=\"warn\">warning: {}</p>", prose(w));
    }
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em auto;max-width:60em;color:#222}\
table{border-collapse:collapse;margin:.5em 0 1em}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}\
th{background:#f6f8fa}.meta th{width:6em}td.num{text-align:right;font-variant-numeric:tabular-nums}\
.ok{color:#1a7f37}.warn{color:#9a6700}.bad{color:#cf222e}.summary{font-weight:bold}\
code{background:#f6f8fa;padding:0 .2em;border-radius:3px;font-size:90%}\
pre{background:#f6f8fa;padding:1em;overflow-x:auto}figure{margin:0}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_spans_become_code_and_text_is_escaped() {
        assert_eq!(
            prose("flag `--x <y>` fell back; a <b>"),
            "flag <code>--x &lt;y&gt;</code> fell back; a &lt;b&gt;"
        );
        // An unpaired backtick stays a backtick.
        assert_eq!(prose("a ` b"), "a ` b");
    }

    #[test]
    fn dates_are_utc_civil_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc(1_764_600_000), "2025-12-01 14:40 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00 UTC");
    }
}
