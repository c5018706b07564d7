//! The typed report of `kiln up`: what was served, the tuning verdicts, the greedy A/B and the
//! bench, rendered as JSON (report.json: the field names consumers read), Markdown (report.md)
//! and a self-contained HTML page with the bench plot inline (report.html).

use std::path::PathBuf;

use serde::Serialize;

use super::Launched;
use crate::bench::{self, ab::Comparison};
use crate::error::Result;
use crate::fs::write_atomic;
use crate::paths::StatePaths;
use crate::recipe::Recipe;
use crate::serve::verdict::{Status, Verdict};

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub recipe: String,
    pub profile: String,
    pub url: Option<String>,
    pub pid: u32,
    pub ready_after_s: f64,
    pub verdicts: Vec<Verdict>,
    /// The profile the A/B compared against (`ab` is set with it).
    pub baseline: Option<String>,
    pub ab: Option<Comparison>,
    pub bench: Option<bench::Report>,
    pub exit_code: u8,
}

/// Where [`Report::write`] put the report.
#[derive(Debug, Clone)]
pub struct ReportFiles {
    pub json: PathBuf,
    pub markdown: PathBuf,
    pub html: PathBuf,
}

/// 0 when every tuning is active, 1 when one fell back or is unknown, 2 when one crashed.
pub fn verdict_code(verdicts: &[Verdict]) -> u8 {
    verdicts
        .iter()
        .map(|v| match v.status {
            Status::Active => 0,
            Status::FellBack | Status::Unknown => 1,
            Status::Crashed => 2,
        })
        .max()
        .unwrap_or(0)
}

impl Report {
    pub fn new(
        recipe: &Recipe,
        launched: &Launched,
        verdicts: Vec<Verdict>,
        ab: Option<(String, Comparison)>,
        bench: Option<bench::Report>,
    ) -> Report {
        let exit_code = [
            verdict_code(&verdicts),
            ab.as_ref().map_or(0, |(_, c)| c.exit_code()),
            bench.as_ref().map_or(0, bench::Report::exit_code),
        ]
        .into_iter()
        .max()
        .unwrap_or(0);
        let record = &launched.running.record;
        let (baseline, ab) = ab.unzip();
        Report {
            recipe: recipe.name.clone(),
            profile: launched.variant.name.to_string(),
            url: record.url.clone(),
            pid: record.pid,
            ready_after_s: launched.running.ready_after.as_secs_f64(),
            verdicts,
            baseline,
            ab,
            bench,
            exit_code,
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("reports serialize")
    }

    pub fn to_markdown(&self) -> String {
        let mut md = format!(
            "# kiln up: {} (profile `{}`)\n\nready after {:.1} s at {}\n\n## Tuning verdicts\n\n| feature | verdict | reason | evidence |\n|---|---|---|---|\n",
            self.recipe,
            self.profile,
            self.ready_after_s,
            self.url.as_deref().unwrap_or("-")
        );
        for v in &self.verdicts {
            md.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                v.feature,
                v.status.label(),
                v.reason,
                v.evidence.as_deref().unwrap_or("").replace('|', "\\|")
            ));
        }
        if let (Some(c), Some(base)) = (&self.ab, &self.baseline) {
            md.push_str(&format!(
                "\n## Greedy A/B\n\n```\n{}```\n",
                c.render(base, &self.profile)
            ));
        }
        if let Some(b) = &self.bench {
            md.push_str(&format!("\n## Benchmark\n\n```\n{}```\n", b.render()));
        }
        md
    }

    pub fn to_html(&self) -> String {
        super::html::page(self)
    }

    /// report.json, report.md and report.html under `StatePaths::reports`.
    pub fn write(&self, paths: &StatePaths) -> Result<ReportFiles> {
        let dir = paths.reports(&self.recipe);
        let files = ReportFiles {
            json: dir.join("report.json"),
            markdown: dir.join("report.md"),
            html: dir.join("report.html"),
        };
        write_atomic(&files.json, self.to_json().as_bytes())?;
        write_atomic(&files.markdown, self.to_markdown().as_bytes())?;
        write_atomic(&files.html, self.to_html().as_bytes())?;
        Ok(files)
    }
}
