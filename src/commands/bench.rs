//! `kiln bench`: smoke-benchmark a running server, append to the history, gate on a baseline.

use std::time::Duration;

use super::{show, Settings};
use crate::bench::{self, client::Api};
use crate::cli::BenchArgs;
use crate::error::{Error, Result};
use crate::pipeline::{self, BenchOptions};

pub(super) fn run(settings: &Settings, args: &BenchArgs) -> Result<u8> {
    crate::report::json_lines(args.json);
    if let Some(plot) = &args.plot {
        crate::output::check(plot, "the plot", true)?; // refused before minutes of benchmarking
    }
    let prompt = match &args.prompt_file {
        Some(p) => crate::bounded::read_text(p, "the prompt file", crate::bounded::PROMPT_CAP)?,
        None => bench::DEFAULT_PROMPT.to_string(),
    };
    let baseline = match &args.baseline {
        Some(p) => Some((
            bench::read_baseline(p, &mut |w| crate::report::current().warning(w))?,
            p.clone(),
        )),
        None => None,
    };
    let api = if let Some(a) = &args.api {
        Api::parse(a)?
    } else {
        let (api, how) = bench::client::detect(&args.url)?;
        show::say(&format!("API: {} ({how}; `--api` sets it)", api.name()));
        api
    };
    let opts = BenchOptions {
        max_tokens: args.max_tokens,
        runs: args.runs,
        warmup: args.warmup,
        prompt,
        timeout: args.request_timeout.map_or_else(
            || bench::client::default_deadline(args.max_tokens),
            Duration::from_secs,
        ),
        baseline,
        size_flags: "--runs N --max-tokens N",
    };
    let mut narration = show::narrator();
    let (report, history) = pipeline::measure(
        &settings.paths,
        &settings.facts,
        &args.url,
        api,
        &opts,
        &mut narration.narrator(),
    )?;
    show::bench(&report, &history);
    if let Some(plot) = &args.plot {
        let svg = bench::plot::of_report(&report);
        crate::output::write(plot, "the plot", svg.as_bytes())?;
        show::say(&format!("plot written to {}", plot.display()));
    }
    Error::finding(report.exit_code(args.strict), || match &report.gate {
        Some(g) if !g.passed => (
            format!(
                "{} median {:.2} is {:.2}x the baseline's {:.2} (the gate is {:.2}x)",
                g.metric, g.median, g.ratio, g.baseline_median, g.threshold
            ),
            None,
        ),
        _ => (
            format!("bench warning: {}", report.warnings.join("; ")),
            Some(
                "rerun on a quiet machine, or drop `--strict` to read the warnings as advisories"
                    .into(),
            ),
        ),
    })
}
