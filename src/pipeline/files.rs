//! The report's files: report.json, report.md and report.html under `StatePaths::reports`,
//! keeping the last good report beside a failed one.

use std::path::PathBuf;

use super::html;
use super::report::Report;
use crate::error::Result;
use crate::fs::write_atomic;
use crate::paths::StatePaths;

/// Where [`Report::write`] put the report.
#[derive(Debug, Clone)]
pub struct ReportFiles {
    pub json: PathBuf,
    pub markdown: PathBuf,
    pub html: PathBuf,
    /// The last good report before this one, when there is one: report.prev.json (and .md,
    /// .html). Writing over a good report keeps it there first, so a failed run never loses it.
    pub previous: Option<PathBuf>,
}

impl Report {
    /// report.json, report.md and report.html under `StatePaths::reports`.
    pub fn write(&self, paths: &StatePaths) -> Result<ReportFiles> {
        let dir = paths.reports(&self.recipe);
        let mut files = ReportFiles {
            json: dir.join("report.json"),
            markdown: dir.join("report.md"),
            html: dir.join("report.html"),
            previous: None,
        };
        if was_ok(&files.json) {
            for ext in ["json", "md", "html"] {
                let (from, to) = (
                    dir.join(format!("report.{ext}")),
                    dir.join(format!("report.prev.{ext}")),
                );
                if let Ok(bytes) = std::fs::read(&from) {
                    write_atomic(&to, &bytes)?;
                }
            }
        }
        let prev = dir.join("report.prev.json");
        files.previous = was_ok(&prev).then_some(prev);
        let scrub = |text: String| crate::redact::scrub(&text);
        write_atomic(&files.json, scrub(self.to_json()).as_bytes())?;
        write_atomic(&files.markdown, scrub(self.to_markdown()).as_bytes())?;
        write_atomic(&files.html, scrub(html::page(self)).as_bytes())?;
        Ok(files)
    }
}

/// Whether the report at `path` says its run was ok.
pub(super) fn was_ok(path: &std::path::Path) -> bool {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .is_some_and(|r| r["outcome"]["ok"] == true)
}
