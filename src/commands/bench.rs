//! `kiln bench`: smoke-benchmark a running server, append to the history, gate on a baseline.

use std::time::Duration;

use super::Settings;
use crate::bench::{self, client::Api, Fingerprint, Options};
use crate::cli::BenchArgs;
use crate::error::{Error, Result};

pub fn run(settings: &Settings, args: &BenchArgs) -> Result<u8> {
    let api = Api::parse(&args.api)?;
    let prompt = match &args.prompt_file {
        Some(p) => std::fs::read_to_string(p)
            .map_err(|e| Error::io(format!("cannot read the prompt file {}", p.display()), e))?,
        None => bench::DEFAULT_PROMPT.to_string(),
    };
    let baseline = args
        .baseline
        .as_ref()
        .map(|p| bench::read_baseline(p))
        .transpose()?;
    let opts = Options {
        url: &args.url,
        api,
        max_tokens: args.max_tokens,
        runs: args.runs,
        warmup: args.warmup,
        prompt: &prompt,
        timeout: args.request_timeout.map_or_else(
            || bench::client::default_deadline(args.max_tokens),
            Duration::from_secs,
        ),
    };
    let report = measure(
        settings,
        &opts,
        args.json,
        baseline.as_ref().zip(args.baseline.as_deref()),
    )?;
    if let Some(plot) = &args.plot {
        let values: Vec<f64> = report
            .runs
            .iter()
            .map(|r| r.decode_tok_s.unwrap_or(r.e2e_tok_s))
            .collect();
        let title = format!("kiln bench {} ({})", args.url, report.fingerprint_id);
        let svg = bench::plot::svg(
            &title,
            &values,
            report.gate.as_ref().map(|g| g.baseline_median),
        );
        crate::engine::state::write_atomic(plot, svg.as_bytes())?;
        eprintln!("kiln: plot written to {}", plot.display());
    }
    Error::finding(report.exit_code(), || match &report.gate {
        Some(g) if !g.passed => (
            format!(
                "{} median {:.2} is {:.2}x the baseline's {:.2} (the gate is {:.2}x)",
                g.metric, g.median, g.ratio, g.baseline_median, g.threshold
            ),
            None,
        ),
        _ => (
            format!("bench warning: {}", report.warnings.join("; ")),
            Some("rerun on a quiet machine, or read the warnings as advisories".into()),
        ),
    })
}

/// Benchmark, gate, record: shared by `kiln bench` and `kiln up`.
pub(super) fn measure(
    settings: &Settings,
    opts: &Options,
    json: bool,
    baseline: Option<(&bench::Report, &std::path::Path)>,
) -> Result<bench::Report> {
    let fp = fingerprint(settings, opts.url, opts.api);
    eprintln!(
        "Benchmarking {} max_tokens={}, num_runs={}, warmup={}",
        opts.url, opts.max_tokens, opts.runs, opts.warmup
    );
    let mut say = |s: &str| eprintln!("{s}");
    let mut out = |s: &str| {
        if !json {
            println!("{s}");
        }
    };
    let mut report = bench::run(opts, fp, &mut say, &mut out)?;
    if let Some((base, path)) = baseline {
        report.gate_against(base, path)?;
    }
    let history = bench::append_history(&settings.state_dir, &report)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("reports serialize")
        );
    } else {
        print!("{}", report.render());
    }
    eprintln!("kiln: appended to {}", history.display());
    Ok(report)
}

/// What was measured on what: GPU and driver, server version, model and arguments.
pub(super) fn fingerprint(settings: &Settings, url: &str, api: Api) -> Fingerprint {
    let (server, model, server_args) = bench::server_fingerprint(url, api);
    Fingerprint {
        gpu: settings
            .facts
            .get("gpu.name")
            .unwrap_or_else(|| "no GPU".into()),
        driver: settings
            .facts
            .get("gpu.driver")
            .unwrap_or_else(|| "-".into()),
        server,
        model,
        server_args,
    }
}
