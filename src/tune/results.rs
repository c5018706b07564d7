//! The tune results file, `tune/<recipe>/<profile>.json` (with the SVG plot beside it): what a
//! search found, typed, for the next run's estimate and for a reader.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::evaluate::LaunchRecord;
use super::{Entry, Method, Rung};
use crate::error::Result;
use crate::fs::write_atomic;

#[derive(Debug, Serialize)]
pub(crate) struct Results<'a> {
    pub recipe: &'a str,
    pub profile: &'a str,
    pub method: Method,
    pub rungs: Vec<Rung>,
    pub launches: usize,
    /// Each launch's timings (ready, judged, measured, stopped).
    pub launch_records: &'a [LaunchRecord],
    pub wall_s: f64,
    pub estimated_wall_s: Option<f64>,
    pub per_request: &'a BTreeSet<String>,
    /// Ranked, the winner first.
    pub entries: &'a [Entry],
}

impl Results<'_> {
    /// `<profile>.json` and `<profile>.svg` in `dir`; both paths come back.
    pub(crate) fn write(&self, dir: &Path, svg: &str) -> Result<(PathBuf, PathBuf)> {
        let json = dir.join(format!("{}.json", self.profile));
        let text = serde_json::to_string_pretty(self).expect("tune results serialize");
        write_atomic(&json, text.as_bytes())?;
        let plot = dir.join(format!("{}.svg", self.profile));
        write_atomic(&plot, svg.as_bytes())?;
        Ok((json, plot))
    }
}
