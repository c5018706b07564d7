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
    /// `false` while the search runs (the file is rewritten as each launch ends) and when it was
    /// cut short: the entries are the search so far, and no winner was named from them.
    pub complete: bool,
    pub recipe: &'a str,
    pub profile: &'a str,
    pub method: Method,
    pub rungs: Vec<Rung>,
    pub launches: usize,
    /// How many times the grid launched each launch key (`--launches N`; 1 for the race and
    /// halving).
    pub launches_each: u32,
    /// Each launch's timings (ready, judged, measured, stopped).
    pub launch_records: &'a [LaunchRecord],
    pub wall_s: f64,
    pub estimated_wall_s: Option<f64>,
    pub per_request: &'a BTreeSet<String>,
    /// Ranked, the winner first.
    pub entries: &'a [Entry],
}

/// What a results file says beside the search's entries, the same mid-search and at its end.
pub(crate) struct Search<'a> {
    pub recipe: &'a str,
    pub profile: &'a str,
    pub method: Method,
    pub rungs: Vec<Rung>,
    pub launches_each: u32,
    pub estimated_wall_s: Option<f64>,
    pub per_request: &'a BTreeSet<String>,
    pub started: std::time::Instant,
}

impl Search<'_> {
    /// The results of `entries` (ranked) and the launches of `records`; `complete`: the search
    /// ran to its end.
    pub(crate) fn results<'b>(
        &'b self,
        complete: bool,
        records: &'b [LaunchRecord],
        entries: &'b [Entry],
    ) -> Results<'b> {
        Results {
            complete,
            recipe: self.recipe,
            profile: self.profile,
            method: self.method,
            rungs: self.rungs.clone(),
            launches: records.len(),
            launches_each: self.launches_each,
            launch_records: records,
            wall_s: self.started.elapsed().as_secs_f64(),
            estimated_wall_s: self.estimated_wall_s,
            per_request: self.per_request,
            entries,
        }
    }
}

impl Results<'_> {
    /// `<profile>.json` and `<profile>.svg` in `dir`; both paths come back.
    pub(crate) fn write(&self, dir: &Path, svg: &str) -> Result<(PathBuf, PathBuf)> {
        file_stem(self.profile)?;
        let json = dir.join(format!("{}.json", self.profile));
        // Files people share: a `--vary` value's URL password or a known secret never reaches them.
        let text = serde_json::to_string_pretty(self).expect("tune results serialize");
        write_atomic(&json, crate::redact::scrub(&text).as_bytes())?;
        let plot = dir.join(format!("{}.svg", self.profile));
        write_atomic(&plot, crate::redact::scrub(svg).as_bytes())?;
        Ok((json, plot))
    }
}

/// A profile name as a file name in the tune directory: no path separator, no `..`, no leading
/// dot, no control character, so the results never land outside the state dir.
pub(crate) fn file_stem(name: &str) -> Result<&str> {
    let bad = name.is_empty()
        || name.starts_with('.')
        || name.contains("..")
        || name
            .chars()
            .any(|c| c == '/' || c == '\\' || c.is_control());
    if bad {
        return Err(crate::error::Error::usage(
            format!(
                "profile `{}` cannot name a results file",
                crate::bench::wire::escape_controls(name)
            ),
            Some(
                "name the profile with letters, digits, `-` and `_` (no `/`, `..` or leading `.`)"
                    .into(),
            ),
        ));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    #[test]
    fn profile_names_that_are_paths_cannot_name_a_results_file() {
        for bad in ["../../../x", "a/b", "..", ".hidden", "a\\b", "x\ny", ""] {
            assert!(super::file_stem(bad).is_err(), "{bad:?}");
        }
        assert!(super::file_stem("tuned-best_2").is_ok());
    }

    #[test]
    fn a_vary_values_url_password_reaches_neither_results_file() {
        use crate::tune::{Entry, Method, Variant};
        let secret = "CANARY-TUNE-PASS-51c0";
        let value = format!("http://alice:{secret}@mirror.example/simple");
        let entries = [Entry::new(Variant {
            settings: vec![("index".into(), value.clone())],
        })];
        let request = std::collections::BTreeSet::new();
        let results = super::Results {
            complete: true,
            recipe: "r",
            profile: "p",
            method: Method::Race,
            rungs: Vec::new(),
            launches: 0,
            launches_each: 1,
            launch_records: &[],
            wall_s: 0.0,
            estimated_wall_s: None,
            per_request: &request,
            entries: &entries,
        };
        let dir = tempfile::tempdir().unwrap();
        let svg = crate::tune::render::svg("t", &entries);
        let (json, plot) = results.write(dir.path(), &svg).unwrap();
        for path in [json, plot] {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(!text.contains(&secret[..12]), "{}:\n{text}", path.display());
            assert!(
                text.contains("mirror.example"),
                "{}:\n{text}",
                path.display()
            );
        }
    }
}
