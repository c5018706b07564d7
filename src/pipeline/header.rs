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
    /// The recipe as the user named it (its file), or a shipped recipe's copy (`shown_origin`).
    pub recipe_origin: String,
    pub profile: Option<String>,
    /// Every step of the recipe: id, kind, what its receipt says, its log relative to the page.
    pub steps: Vec<StepLine>,
}

#[derive(Debug, Clone)]
pub struct StepLine {
    pub id: String,
    pub kind: String,
    /// `done in 1.2s`, `done in 28m 35s`, `skipped (`when = "…"` is false on this host)`, or `not done`.
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
                    status: status(s, step, &state),
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
            recipe_origin: crate::recipe::shown_origin(&s.recipe.origin, &s.paths.shipped()),
            profile: profile.map(str::to_string),
            steps,
        }
    }
}

/// What the step's receipt says, or that its `when` (the plan's own evaluation) skips it.
fn status(
    s: Session,
    step: &crate::recipe::Step,
    state: &crate::engine::state::StateDir,
) -> String {
    if let Some(why) = crate::engine::plan::skipped_by_when(s.recipe, step, s.facts) {
        return format!("skipped ({why})");
    }
    state.receipt(&step.id).map_or("not done".into(), |r| {
        format!(
            "done in {}",
            crate::report::human::secs(std::time::Duration::from_millis(r.duration_ms))
        )
    })
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

/// A recipe whose `bench` step (writing `${prefix}/bench.json`) runs only with `--set
/// flag=on`, and a `tuned` profile with that file as its ceiling; loaded with `overrides`.
#[cfg(test)]
pub(super) fn opt_in_recipe(
    dir: &std::path::Path,
    overrides: &[(String, String)],
) -> (
    crate::recipe::Recipe,
    crate::paths::StatePaths,
    crate::host::Facts,
) {
    let file = dir.join("r.toml");
    std::fs::write(
        &file,
        "[recipe]\nname = \"opt-in\"\n[vars]\nflag = \"off\"\nprefix = \"${kiln.work_dir}\"\n\
         [[step]]\nid = \"build\"\nkind = \"run\"\ncmd = [\"true\"]\n\
         [[step]]\nid = \"bench\"\nkind = \"run\"\nneeds = [\"build\"]\nwhen = \"var.flag == on\"\n\
         cmd = [\"true\"]\ncheck = { paths = [\"${prefix}/bench.json\"] }\n\
         [profile.tuned]\ncmd = [\"true\"]\nceiling = { llama_bench = \"${prefix}/bench.json\" }\n",
    )
    .unwrap();
    let paths = crate::paths::StatePaths::new(dir.join("state"), None);
    let facts = crate::host::Facts::new();
    let opts = crate::recipe::LoadOptions {
        overrides,
        facts: &facts,
        paths: &paths,
    };
    let recipe = crate::recipe::load(Some(file.to_str().unwrap()), &opts).unwrap();
    (recipe, paths, facts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_its_when_skips_is_skipped_not_not_done() {
        let dir = tempfile::tempdir().unwrap();
        let statuses = |overrides: &[(String, String)]| {
            let (recipe, paths, facts) = opt_in_recipe(dir.path(), overrides);
            let s = Session {
                recipe: &recipe,
                paths: &paths,
                facts: &facts,
            };
            Header::of(s, None)
                .steps
                .into_iter()
                .map(|l| (l.id, l.status))
                .collect::<Vec<_>>()
        };
        let skipped = "skipped (`when = \"var.flag == on\"` is false on this host)";
        assert_eq!(
            statuses(&[]),
            [
                ("build".to_string(), "not done".to_string()),
                ("bench".to_string(), skipped.to_string())
            ]
        );
        // The same `when` with the variable set: the step should run, and did not.
        let on = [("flag".to_string(), "on".to_string())];
        assert_eq!(statuses(&on)[1].1, "not done");
    }

    #[test]
    fn log_links_are_relative_to_the_page() {
        let p = relative(
            std::path::Path::new("/s/reports/demo"),
            std::path::Path::new("/s/runs/demo/logs/a.log"),
        );
        assert_eq!(p.as_deref(), Some("../../runs/demo/logs/a.log"));
    }
}
