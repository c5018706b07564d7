//! report.html: one self-contained page (inline CSS, the bench plot as inline SVG, no scripts,
//! nothing fetched), readable offline and attachable to a ticket.

use std::fmt::Write;

use super::report::Served;
use super::Report;
use crate::bench::plot::escape;
use crate::serve::verdict::Status;

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
    outcome(&mut h, r);
    if let Some(s) = &r.served {
        served(&mut h, s);
    }
    h.push_str("</body>\n</html>\n");
    h
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
            let _ = write!(h, " &middot; failed at {}", escape(stage));
        }
        (None, None) => {}
    }
    h.push_str("</p>\n");
    if let Some(e) = &r.outcome.error {
        let _ = writeln!(h, "<p class=\"bad\">failed: {}</p>", escape(e));
    }
    if !r.outcome.warnings.is_empty() {
        h.push_str("<ul>\n");
        for w in &r.outcome.warnings {
            let _ = writeln!(h, "<li class=\"warn\">warning: {}</li>", escape(w));
        }
        h.push_str("</ul>\n");
    }
}

/// Verdicts, greedy A/B and bench of the served profile.
fn served(h: &mut String, r: &Served) {
    h.push_str("<h2>Tuning verdicts</h2>\n");
    if r.verdicts.is_empty() {
        h.push_str("<p>no tunings to judge (no flag of the profile has a signature)</p>\n");
    } else {
        h.push_str(
            "<table>\n<tr><th>feature</th><th>verdict</th><th>reason</th><th>evidence</th></tr>\n",
        );
        for v in &r.verdicts {
            let class = match v.status {
                Status::Active => "ok",
                Status::FellBack | Status::Unknown | Status::Configured => "warn",
                Status::Crashed | Status::Conflicting => "bad",
            };
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td class=\"{class}\">{}</td><td>{}</td><td>{}</td></tr>",
                escape(&v.feature),
                escape(v.status.label()),
                escape(&v.reason),
                escape(v.evidence.as_deref().unwrap_or(""))
            );
        }
        h.push_str("</table>\n");
    }
    if let (Some(c), Some(base)) = (&r.ab, &r.baseline) {
        let _ = write!(
            h,
            "<h2>Greedy A/B</h2>\n<pre>{}</pre>\n",
            escape(&c.render(base, &r.profile))
        );
    }
    if let Some(b) = &r.bench {
        let svg = crate::bench::plot::of_report(b);
        let _ = write!(
            h,
            "<h2>Benchmark</h2>\n<figure>{svg}</figure>\n<pre>{}</pre>\n",
            escape(&b.render())
        );
    }
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em auto;max-width:60em;color:#222}\
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}\
.ok{color:#1a7f37}.warn{color:#9a6700}.bad{color:#cf222e}.summary{font-weight:bold}\
pre{background:#f6f8fa;padding:1em;overflow-x:auto}figure{margin:0}";
