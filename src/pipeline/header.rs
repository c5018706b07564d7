//! What report.html says about the run besides the report: when, with which kiln, on which
//! host and GPUs, from which recipe, and every step with its log. Filled by `kiln up`.

use super::Session;

/// What the page says about the run besides the report: filled by the caller that knows the
/// session (`kiln up`), absent in reports built elsewhere.
#[derive(Debug, Clone, Default)]
pub struct Header {
    /// Seconds since the epoch when the report was written.
    pub unix_time: u64,
    pub kiln_version: String,
    pub host: String,
    /// One entry per GPU: `NVIDIA H200 (cc 9.0, driver 570.1)`.
    pub gpus: Vec<String>,
    /// The recipe as the user named it (its file, or `shipped:NAME`).
    pub recipe_origin: String,
    pub profile: Option<String>,
    /// Every step of the recipe: id, kind, what its receipt says, its log relative to the page.
    pub steps: Vec<StepLine>,
}

#[derive(Debug, Clone)]
pub struct StepLine {
    pub id: String,
    pub kind: String,
    /// `done in 1.2 s`, or `not done`.
    pub status: String,
    /// The log, relative to report.html's directory, when there is one.
    pub log: Option<String>,
}

impl Header {
    /// The header of a report on `s`'s recipe, served with `profile` (none: it stopped before).
    pub fn of(s: Session, profile: Option<&str>) -> Header {
        let state = crate::engine::state::StateDir::new(s.paths, &s.recipe.name);
        let page_dir = s.paths.reports(&s.recipe.name);
        let steps = s
            .recipe
            .steps
            .iter()
            .map(|step| {
                let log = state.log_path(&step.id);
                StepLine {
                    id: step.id.clone(),
                    kind: step.kind.name().to_string(),
                    status: state.receipt(&step.id).map_or("not done".into(), |r| {
                        format!("done in {:.1} s", r.duration_ms as f64 / 1000.0)
                    }),
                    log: log.is_file().then(|| relative(&page_dir, &log)).flatten(),
                }
            })
            .collect();
        let gpus = s
            .facts
            .gpus()
            .iter()
            .map(|g| format!("{} (cc {}, driver {})", g.name, g.compute_cap, g.driver))
            .collect();
        Header {
            unix_time: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            kiln_version: env!("CARGO_PKG_VERSION").to_string(),
            host: hostname(),
            gpus,
            recipe_origin: s.recipe.origin.clone(),
            profile: profile.map(str::to_string),
            steps,
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_or_else(|_| "unknown host".into(), |h| h.trim().to_string())
}

/// `to` relative to the directory `from` (both absolute), for a link that survives moving the
/// state directory.
fn relative(from: &std::path::Path, to: &std::path::Path) -> Option<String> {
    let from: Vec<_> = from.components().collect();
    let to_parts: Vec<_> = to.components().collect();
    let common = from
        .iter()
        .zip(&to_parts)
        .take_while(|(a, b)| a == b)
        .count();
    if common == 0 {
        return None;
    }
    let mut parts: Vec<String> =
        std::iter::repeat_n("..".to_string(), from.len() - common).collect();
    parts.extend(
        to_parts[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    Some(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_links_are_relative_to_the_page() {
        let p = relative(
            std::path::Path::new("/s/reports/demo"),
            std::path::Path::new("/s/runs/demo/logs/a.log"),
        );
        assert_eq!(p.as_deref(), Some("../../runs/demo/logs/a.log"));
    }
}
