//! `kiln cache ls|gc|export|import|push|pull`: the compiled-wheel cache (export, import and gc
//! carry the step cache's entries too).

use std::fmt::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::Settings;
use crate::cache::{
    archive,
    wheels::{Entry, WheelCache},
};
use crate::cli::{CacheArgs, CacheCommand};
use crate::error::{Error, Result};
use crate::oci::reference::Reference;
use crate::report::Block;
use crate::units::{format_size, parse_duration};

pub(super) fn run(settings: &Settings, args: &CacheArgs) -> Result<u8> {
    let cache = WheelCache::new(&settings.paths.wheels());
    let steps = crate::cache::steps::StepCache::new(&settings.paths.steps());
    match &args.command {
        CacheCommand::Ls { json } => {
            crate::report::json_lines(*json);
            list(&cache);
            Ok(0)
        }
        CacheCommand::Gc { older_than } => {
            let max_age = older_than
                .as_deref()
                .map(|a| {
                    parse_duration(a).map_err(|m| {
                        Error::usage(
                            format!("--older-than {a}: {m}"),
                            Some("e.g. `--older-than 30d`".into()),
                        )
                    })
                })
                .transpose()?;
            let mut removed = cache.gc(max_age.map(|d| d.as_secs()))?;
            removed.extend(steps.gc(max_age.map(|d| d.as_secs()))?);
            for (id, why) in &removed {
                println!("removed {}: {why}", id.chars().take(24).collect::<String>());
            }
            println!(
                "{} entr{} removed",
                removed.len(),
                if removed.len() == 1 { "y" } else { "ies" }
            );
            Ok(0)
        }
        CacheCommand::Export { file } => {
            let n = archive::export(&cache, &steps, file)?;
            let n = format!(
                "{} wheel(s) and {} step entr{}",
                n.wheels,
                n.steps,
                if n.steps == 1 { "y" } else { "ies" }
            );
            // A stream on stdout carries the archive: the count goes to stderr then.
            let streamed = crate::output::check(file, "the cache archive", true)?
                == crate::output::Output::Stream;
            if streamed {
                eprintln!("exported {n} to {}", file.display());
            } else {
                println!("exported {n} to {}", file.display());
            }
            Ok(0)
        }
        CacheCommand::Import { file } => {
            let n = archive::import(&cache, &steps, file)?;
            println!(
                "imported {} wheel(s) and {} step entr{} from {}",
                n.wheels,
                n.steps,
                if n.steps == 1 { "y" } else { "ies" },
                file.display()
            );
            Ok(0)
        }
        CacheCommand::Push { reference } => {
            let reference = Reference::parse(reference)?;
            let s = cache.push(&reference, &super::show::say)?;
            println!(
                "pushed {} wheel(s) to {reference} ({} already there, {} in the tag)",
                s.uploaded, s.already_there, s.total
            );
            Ok(0)
        }
        CacheCommand::Pull { reference } => {
            let reference = Reference::parse(reference)?;
            let s = cache.pull(&reference, &super::show::say)?;
            println!(
                "pulled {} wheel(s) from {reference} ({} already cached, {})",
                s.fetched,
                s.already_cached,
                format_size(s.bytes)
            );
            Ok(0)
        }
    }
}

/// The cached wheels: a line each for a human, one `cache` event (root and entries) in JSON lines.
fn list(cache: &WheelCache) {
    #[derive(Serialize)]
    struct Listed<'a> {
        id: &'a str,
        entry: &'a Entry,
        path: PathBuf,
    }
    #[derive(Serialize)]
    struct CacheEvent<'a> {
        root: &'a Path,
        entries: Vec<Listed<'a>>,
    }
    let entries = cache.list();
    let mut text = String::new();
    if entries.is_empty() {
        text = format!("no compiled wheels in {}\n", cache.root.display());
    }
    for (id, e) in &entries {
        let k = &e.key;
        let _ = writeln!(
            text,
            "{}  {} {}  {}  torch {}  cuda {}  {}  {}",
            &id[..12],
            k.package,
            k.version,
            k.python_tag,
            k.torch.as_deref().unwrap_or("-"),
            k.cuda.as_deref().unwrap_or("-"),
            k.arch_list.as_deref().unwrap_or("-"),
            format_size(e.size),
        );
    }
    let event = CacheEvent {
        root: &cache.root,
        entries: entries
            .iter()
            .map(|(id, entry)| Listed {
                id,
                entry,
                path: cache.wheel_path(id, entry),
            })
            .collect(),
    };
    crate::report::current().result(&Block::new("cache", text, &event));
}
