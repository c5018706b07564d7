//! How commands show the pipeline's results on the terminal: milestones on stderr, results on
//! stdout. Shared by `kiln up`, `kiln serve`, `kiln verify` and `kiln bench`.

use crate::pipeline::Launched;
use crate::serve::verdict::Verdict;

/// A milestone on stderr.
pub(super) fn say(s: &str) {
    eprintln!("kiln: {}", crate::redact::scrub(s));
}

fn verdicts_json(l: &Launched, verdicts: &[Verdict]) -> serde_json::Value {
    serde_json::json!({
        "profile": l.variant.name,
        "pid": l.running.record.pid,
        "url": l.running.record.url,
        "log": l.running.record.log,
        "ready_after_s": l.running.ready_after.as_secs_f64(),
        "verdicts": verdicts,
    })
}

/// A result block of `kiln up` as one line of its JSON event stream.
pub(super) fn event(shown: &crate::pipeline::Shown) {
    use crate::pipeline::Shown;
    let e = match shown {
        Shown::Ab(c, base, candidate) => serde_json::json!({
            "event": "greedy_ab", "baseline": base, "candidate": candidate, "comparison": c,
        }),
        Shown::Verdicts(l, v) => {
            let mut e = verdicts_json(l, v);
            e["event"] = "verdicts".into();
            e
        }
        Shown::Bench(b, history) => serde_json::json!({
            "event": "bench", "report": b, "history": history,
        }),
    };
    println!("{}", crate::redact::scrub(&e.to_string()));
}

/// The verdicts of a launched profile: a JSON object, or one line each.
pub(super) fn verdicts(l: &Launched, verdicts: &[Verdict], json: bool) {
    let running = &l.running;
    let name = l.variant.name;
    if json {
        let v = verdicts_json(l, verdicts);
        println!(
            "{}",
            serde_json::to_string_pretty(&v).expect("verdicts serialize")
        );
        return;
    }
    println!(
        "profile `{name}` ready after {:.1} s",
        running.ready_after.as_secs_f64()
    );
    if verdicts.is_empty() {
        println!("no tunings to judge (no flag of the profile has a signature)");
    }
    for v in verdicts {
        println!("{}", v.line());
    }
}

/// Verdicts judged from a captured log (`kiln serve --log`).
pub(super) fn captured_verdicts(
    name: &str,
    log: &std::path::Path,
    verdicts: &[Verdict],
    json: bool,
) {
    if json {
        let v = serde_json::json!({ "profile": name, "log": log, "verdicts": verdicts });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).expect("verdicts serialize")
        );
    } else {
        println!("profile `{name}` judged from {}", log.display());
        for v in verdicts {
            println!("{}", v.line());
        }
    }
}

/// A bench report: JSON, or its table; then where the history went.
pub(super) fn bench(report: &crate::bench::Report, history: &std::path::Path, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(report).expect("reports serialize")
        );
    } else {
        print!("{}", report.render());
    }
    eprintln!("kiln: appended to {}", history.display());
}
