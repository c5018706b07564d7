//! `kiln cache ls|gc|export|import|push|pull`: the compiled-wheel cache and the step cache,
//! moved together. Each subcommand's result is one typed event (`cache`, `cache_gc`,
//! `cache_exported`, `cache_imported`, `cache_pushed`, `cache_pulled`) for `--json`, a line for
//! a human.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::Settings;
use crate::cache::{
    archive, printable, remote,
    steps::{short, StepCache},
    wheels::{Entry, WheelCache},
    PullSummary, PushSummary,
};
use crate::cli::{CacheArgs, CacheCommand};
use crate::error::{Error, Result};
use crate::oci::reference::Reference;
use crate::report::Block;
use crate::units::{format_size, parse_duration};

pub(super) fn run(settings: &Settings, args: &CacheArgs) -> Result<u8> {
    crate::report::json_lines(args.json);
    let (cache, steps) = match &args.command {
        CacheCommand::Ls | CacheCommand::Gc { .. } | CacheCommand::Key { .. } => (
            WheelCache::new(&settings.paths.wheels()),
            StepCache::new(&settings.paths.steps()),
        ),
        _ => {
            let trust = || crate::cache::trust::Trust::from_env(&settings.paths.cache_own());
            (
                WheelCache::with_trust(&settings.paths.wheels(), trust()?),
                StepCache::with_trust(&settings.paths.steps(), trust()?),
            )
        }
    };
    let block = match &args.command {
        CacheCommand::Key {
            command: crate::cli::CacheKeyCommand::Generate { name, out },
        } => {
            let public = crate::cache::trust::generate(name, out)?;
            let text = format!(
                "wrote the secret key {} (keep it on the machines that build)\npublic key: {public}\n\
                 sign with: export {}={}\ntrust with: export {}=\"{public}\"",
                out.display(),
                crate::cache::trust::ENV_SIGNING_KEY,
                out.display(),
                crate::cache::trust::ENV_TRUSTED_KEYS,
            );
            Block::new(
                "cache_key",
                text,
                &serde_json::json!({"secret_key_file": out, "public_key": public}),
            )
        }
        CacheCommand::Ls => {
            crate::cache::perms::check_tree(&cache.root)?;
            crate::cache::perms::check_tree(&steps.root)?;
            list(&cache, &steps)
        }
        CacheCommand::Gc { older_than } => gc(&cache, &steps, older_than.as_deref())?,
        CacheCommand::Export { file } => {
            // A stream on stdout carries the archive: nothing else may be said there.
            let streamed = crate::output::check(file, "the cache archive", true)?
                == crate::output::Output::Stream;
            if streamed && args.json {
                return Err(Error::usage(
                    "`kiln cache export --json` writes its events on stdout, so the archive cannot go there",
                    Some("name a file: `kiln cache export --json cache.tar`".into()),
                ));
            }
            let n = archive::export(&cache, &steps, file)?;
            let text = format!(
                "exported {} to {}",
                counted(n.wheels, n.steps),
                file.display()
            );
            let block = Block::new("cache_exported", text, &Moved::of(file, &n));
            if streamed {
                block.milestone()
            } else {
                block
            }
        }
        CacheCommand::Import { file } => {
            let n = archive::import(&cache, &steps, file)?;
            let text = format!(
                "imported {} from {}",
                counted(n.wheels, n.steps),
                file.display()
            );
            Block::new("cache_imported", text, &Moved::of(file, &n))
        }
        CacheCommand::Push { reference } => {
            let reference = Reference::parse(reference)?;
            let p = remote::push_all(&cache, &steps, &reference, &super::show::say)?;
            let text = format!(
                "pushed {} wheel(s) to {reference} ({} already there, {} in the tag); {} step entr{} ({} already there, {} in the tag)",
                p.wheels.uploaded,
                p.wheels.already_there,
                p.wheels.total,
                p.steps.uploaded,
                ies(p.steps.uploaded),
                p.steps.already_there,
                p.steps.total,
            );
            let event = Pushed {
                reference: reference.to_string(),
                wheels: (&p.wheels).into(),
                steps: (&p.steps).into(),
            };
            Block::new("cache_pushed", text, &event)
        }
        CacheCommand::Pull { reference } => {
            let reference = Reference::parse(reference)?;
            let w = cache.pull(&reference, &super::show::say)?;
            let s = steps.pull(&reference, None, &super::show::say)?;
            let text = format!(
                "pulled {} wheel(s) from {reference} ({} already cached, {}); {} step entr{} ({} already cached, {})",
                w.fetched,
                w.already_cached,
                format_size(w.bytes),
                s.fetched,
                ies(s.fetched),
                s.already_cached,
                format_size(s.bytes)
            );
            let event = Pulled {
                reference: reference.to_string(),
                wheels: (&w).into(),
                steps: (&s).into(),
            };
            Block::new("cache_pulled", text, &event)
        }
    };
    crate::report::current().result(&block);
    Ok(0)
}

fn ies(n: usize) -> &'static str {
    if n == 1 {
        "y"
    } else {
        "ies"
    }
}

fn counted(wheels: usize, steps: usize) -> String {
    format!("{wheels} wheel(s) and {steps} step entr{}", ies(steps))
}

/// `cache_exported` / `cache_imported`: the archive and what moved.
#[derive(Serialize)]
struct Moved<'a> {
    file: &'a Path,
    wheels: usize,
    step_entries: usize,
}

impl<'a> Moved<'a> {
    fn of(file: &'a Path, n: &archive::Counts) -> Self {
        Moved {
            file,
            wheels: n.wheels,
            step_entries: n.steps,
        }
    }
}

/// One kind's part of a push.
#[derive(Serialize)]
struct PushCounts {
    uploaded: usize,
    already_there: usize,
    /// Entries of this kind in the tag after the push.
    in_tag: usize,
}

impl From<&PushSummary> for PushCounts {
    fn from(s: &PushSummary) -> Self {
        PushCounts {
            uploaded: s.uploaded,
            already_there: s.already_there,
            in_tag: s.total,
        }
    }
}

#[derive(Serialize)]
struct Pushed {
    reference: String,
    wheels: PushCounts,
    steps: PushCounts,
}

/// One kind's part of a pull.
#[derive(Serialize)]
struct PullCounts {
    fetched: usize,
    already_cached: usize,
    bytes: u64,
}

impl From<&PullSummary> for PullCounts {
    fn from(s: &PullSummary) -> Self {
        PullCounts {
            fetched: s.fetched,
            already_cached: s.already_cached,
            bytes: s.bytes,
        }
    }
}

#[derive(Serialize)]
struct Pulled {
    reference: String,
    wheels: PullCounts,
    steps: PullCounts,
}

/// `cache_gc`: each removed entry with its kind and why.
#[derive(Serialize)]
struct Removed {
    kind: &'static str,
    id: String,
    reason: String,
}

#[derive(Serialize)]
struct GcEvent {
    removed: Vec<Removed>,
}

fn gc(cache: &WheelCache, steps: &StepCache, older_than: Option<&str>) -> Result<Block> {
    let max_age = older_than
        .map(|a| {
            parse_duration(a).map_err(|m| {
                Error::usage(
                    format!("--older-than {a}: {m}"),
                    Some("e.g. `--older-than 30d`".into()),
                )
            })
        })
        .transpose()?
        .map(|d| d.as_secs());
    let mut removed: Vec<Removed> = Vec::new();
    for (kind, list) in [("wheel", cache.gc(max_age)?), ("step", steps.gc(max_age)?)] {
        removed.extend(
            list.into_iter()
                .map(|(id, reason)| Removed { kind, id, reason }),
        );
    }
    let mut text = String::new();
    for r in &removed {
        let _ = writeln!(
            text,
            "removed {} {}: {}",
            r.kind,
            r.id.chars().take(24).collect::<String>(),
            r.reason
        );
    }
    let _ = writeln!(text, "{} entr{} removed", removed.len(), ies(removed.len()));
    Ok(Block::new("cache_gc", text, &GcEvent { removed }))
}

/// The cached wheels and step entries: a line each for a human, one `cache` event (roots and
/// entries) in JSON lines.
fn list(cache: &WheelCache, steps: &StepCache) -> Block {
    #[derive(Serialize)]
    struct Listed<'a> {
        id: &'a str,
        entry: &'a Entry,
        path: PathBuf,
        /// Why the wheel on disk is not the one its entry records (null: it is).
        problem: Option<String>,
    }
    #[derive(Serialize)]
    struct ListedStep {
        id: String,
        recipe: String,
        step: String,
        outputs: Vec<String>,
        size: u64,
        created_unix: u64,
    }
    #[derive(Serialize)]
    struct CacheEvent<'a> {
        root: &'a Path,
        entries: Vec<Listed<'a>>,
        steps_root: &'a Path,
        step_entries: Vec<ListedStep>,
    }
    let entries = cache.list();
    let problems: Vec<Option<String>> = entries
        .iter()
        .map(|(id, e)| wheel_problem(&cache.wheel_path(id, e), e))
        .collect();
    // What the cache holds first: the step entries, then the wheels; "no ..." lines last.
    let mut wheels = String::new();
    for ((id, e), problem) in entries.iter().zip(&problems) {
        let k = &e.key;
        let _ = write!(
            wheels,
            "{}  {} {}  {}  torch {}  cuda {}  {}  {}",
            printable(id.get(..12).unwrap_or(id)),
            printable(&k.package),
            printable(&k.version),
            printable(&k.python_tag),
            printable(k.torch.as_deref().unwrap_or("-")),
            printable(k.cuda.as_deref().unwrap_or("-")),
            printable(k.arch_list.as_deref().unwrap_or("-")),
            format_size(e.size),
        );
        match problem {
            Some(why) => {
                let _ = writeln!(wheels, "  CORRUPT: {}", printable(why));
            }
            None => wheels.push('\n'),
        }
    }
    let corrupt = problems.iter().flatten().count();
    if corrupt > 0 {
        let _ = writeln!(
            wheels,
            "{corrupt} wheel(s) on disk are not what their entry records: `kiln cache gc` removes them, and the next build or `kiln cache pull` brings them back"
        );
    }
    let step_entries: Vec<ListedStep> = steps
        .list()
        .into_iter()
        .filter_map(|id| {
            let e = crate::cache::steps::read_entry(&steps.entry_dir(&id))?;
            Some(ListedStep {
                id,
                recipe: e.recipe,
                step: e.step,
                outputs: e.outputs,
                size: e.size,
                created_unix: e.created_unix,
            })
        })
        .collect();
    let mut text = String::new();
    for s in &step_entries {
        let _ = writeln!(
            text,
            "{}  step {}/{}  {}  {}",
            short(&s.id),
            printable(&s.recipe),
            printable(&s.step),
            printable(&s.outputs.join(" ")),
            format_size(s.size)
        );
    }
    text.push_str(&wheels);
    if step_entries.is_empty() {
        let _ = writeln!(text, "no step entries in {}", steps.root.display());
    }
    if entries.is_empty() {
        let _ = writeln!(text, "no compiled wheels in {}", cache.root.display());
    }
    let event = CacheEvent {
        root: &cache.root,
        entries: entries
            .iter()
            .zip(problems)
            .map(|((id, entry), problem)| Listed {
                id,
                entry,
                path: cache.wheel_path(id, entry),
                problem,
            })
            .collect(),
        steps_root: &steps.root,
        step_entries,
    };
    Block::new("cache", text, &event)
}

/// Why the wheel at `path` is not the one `entry` records (missing, not a regular file, another
/// size or sha256), or `None` when it is: a listed wheel is a wheel a build could use. Each
/// wheel is read whole (sha256).
fn wheel_problem(path: &Path, entry: &Entry) -> Option<String> {
    let (file, size) = match crate::cache::open_regular(path) {
        Ok(opened) => opened,
        Err(e) => return Some(format!("{}: {e}", path.display())),
    };
    if size != entry.size {
        return Some(format!("{size} bytes, recorded {}", entry.size));
    }
    match crate::hash::sha256_reader(file) {
        Ok((sha, _)) if sha == entry.sha256 => None,
        Ok((sha, _)) => Some(format!(
            "sha256 {}…, recorded {}…",
            short(&sha),
            short(&entry.sha256)
        )),
        Err(e) => Some(format!("{}: {e}", path.display())),
    }
}
