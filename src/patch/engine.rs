//! Evaluating a patch set against a site-packages directory, and apply / check / revert on top.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::journal::{self, Intent, Journal};
use super::ops::{self, Drift};
use super::package::{self, Installed};
use super::set::{self, Patch, PatchSet, Requirement};
use super::store::{self, FileRecord, Record, Store};
use super::syntax;
use super::{Action, Options, PatchReport, Report, Status};
use crate::error::{Error, Result};
use crate::hash::sha256_bytes;
use crate::paths::StatePaths;

/// A file's text before the set and after every patch of it that can be applied.
struct Working {
    original: String,
    current: String,
    patches: Vec<String>,
}

/// Per-patch statuses plus the new content of each file (keyed by path relative to site).
struct Evaluation {
    installed: Installed,
    patches: Vec<PatchReport>,
    files: BTreeMap<String, Working>,
}

fn site_relative(set: &PatchSet, patch: &Patch) -> String {
    format!("{}/{}", set.root, patch.file)
}

fn located(rel: &str, source: &str, drift: &Drift) -> String {
    match drift.at {
        Some(at) => {
            let line = syntax::line_of(source, at);
            let line_start = source[..at].rfind('\n').map_or(0, |i| i + 1);
            format!(
                "{} ({rel}:{line}:{})",
                drift.message,
                source[line_start..at].chars().count() + 1
            )
        }
        None => format!("{} ({rel})", drift.message),
    }
}

fn evaluate(set: &PatchSet, site: &Path, opts: Options) -> Result<Evaluation> {
    let installed = package::find(site, &set.package)?;
    let mut files: BTreeMap<String, Working> = BTreeMap::new();
    let mut reports = Vec::new();
    for patch in &set.patches {
        let rel = site_relative(set, patch);
        let report = |status: Status, detail: Option<String>| PatchReport {
            id: patch.id.clone(),
            file: rel.clone(),
            status,
            experimental: patch.experimental,
            changed: false,
            detail,
        };
        if opts.skip_experimental && patch.experimental {
            reports.push(report(
                Status::Skipped,
                Some("experimental; left out by --skip-experimental".into()),
            ));
            continue;
        }
        if let Some(fixed) = patch.fixed_in.as_ref().filter(|f| installed.version >= **f) {
            reports.push(report(
                Status::Obsolete,
                Some(format!(
                    "fixed upstream in {fixed}; {} is installed",
                    installed.version
                )),
            ));
            continue;
        }
        if !files.contains_key(&rel) {
            let path = site.join(&rel);
            match crate::bounded::read_io(&path, crate::bounded::SOURCE_CAP) {
                Ok(bytes) => {
                    if let Ok(text) = String::from_utf8(bytes) {
                        files.insert(
                            rel.clone(),
                            Working {
                                original: text.clone(),
                                current: text,
                                patches: vec![],
                            },
                        );
                    } else {
                        reports.push(report(
                            Status::Drifted,
                            Some(format!("{rel} is not UTF-8 text")),
                        ));
                        continue;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    reports.push(report(
                        Status::Drifted,
                        Some(format!("file not found: {rel}")),
                    ));
                    continue;
                }
                Err(e) => return Err(Error::io(format!("cannot read {}", path.display()), e)),
            }
        }
        let working = files.get_mut(&rel).expect("inserted above");
        let mut text = working.current.clone();
        let (mut present, mut drift) = (0, None);
        for (i, edit) in patch.edits.iter().enumerate() {
            match ops::locate(edit, &text) {
                Ok(splices) if splices.is_empty() => present += 1,
                Ok(splices) => text = ops::splice(&text, &splices),
                Err(d) => {
                    drift = Some(format!(
                        "edit {} ({}): {}",
                        i + 1,
                        edit.describe(),
                        located(&rel, &text, &d)
                    ));
                    break;
                }
            }
        }
        let drift = drift.or_else(|| {
            post_condition(patch, &text)
                .err()
                .map(|m| format!("post-condition failed: {m} ({rel})"))
        });
        if let Some(detail) = drift {
            reports.push(report(Status::Drifted, Some(detail)));
            continue;
        }
        let edits = patch.edits.len();
        let status = if present == edits {
            Status::Applied
        } else {
            Status::NotApplied
        };
        let detail =
            (present > 0 && present < edits).then(|| format!("{present} of {edits} edits present"));
        working.current = text;
        working.patches.push(patch.id.clone());
        reports.push(report(status, detail));
    }
    Ok(Evaluation {
        installed,
        patches: reports,
        files,
    })
}

/// After the edits: the file parses, every edit finds its result present, and the set's own checks hold.
fn post_condition(patch: &Patch, text: &str) -> std::result::Result<(), String> {
    if let Some(at) = syntax::first_error(&syntax::parse(text)) {
        return Err(format!(
            "the result does not parse as Python at line {}",
            syntax::line_of(text, at)
        ));
    }
    for edit in &patch.edits {
        if !ops::locate(edit, text).is_ok_and(|s| s.is_empty()) {
            return Err(format!(
                "{} is not in effect after applying",
                edit.describe()
            ));
        }
    }
    if let Some(missing) = patch
        .post
        .contains
        .iter()
        .find(|c| !text.contains(c.as_str()))
    {
        return Err(format!("the file does not contain `{missing}`"));
    }
    if let Some(present) = patch.post.absent.iter().find(|c| text.contains(c.as_str())) {
        return Err(format!("the file still contains `{present}`"));
    }
    Ok(())
}

/// Requirements of the patches that are (or are about to be) in effect; each unmet one is
/// returned as (patch id, why).
fn unmet_requirements(
    set: &PatchSet,
    site: &Path,
    reports: &[PatchReport],
) -> Result<Vec<(String, String)>> {
    let mut unmet = Vec::new();
    let mut others: BTreeMap<String, Vec<PatchReport>> = BTreeMap::new();
    for patch in &set.patches {
        let active = reports
            .iter()
            .any(|r| r.id == patch.id && matches!(r.status, Status::Applied | Status::NotApplied));
        if !active {
            continue;
        }
        for requirement in &patch.requires {
            let (label, status) = match requirement {
                Requirement::Local(id) => (
                    id.clone(),
                    reports
                        .iter()
                        .find(|r| r.id == *id)
                        .map(|r| r.status)
                        .expect("validated at load"),
                ),
                Requirement::Other { set: other, id } => {
                    if !others.contains_key(other) {
                        let spec = match &set.dir {
                            Some(dir) if dir.join(format!("{other}.toml")).exists() => {
                                dir.join(format!("{other}.toml")).display().to_string()
                            }
                            _ => other.clone(),
                        };
                        let other_set = set::load(&spec)?;
                        let evaluation = evaluate(&other_set, site, Options::default())?;
                        others.insert(other.clone(), evaluation.patches);
                    }
                    let status = others[other].iter().find(|r| r.id == *id).map(|r| r.status).ok_or_else(|| {
                        Error::other(
                            format!("patch {} requires `{other}:{id}`, but patch set `{other}` has no patch `{id}`", patch.id),
                            Some(format!("fix `requires` in {}", set.origin.display())),
                        )
                    })?;
                    (format!("{other}:{id}"), status)
                }
            };
            let in_effect = match requirement {
                Requirement::Local(_) => matches!(
                    status,
                    Status::Applied | Status::NotApplied | Status::Obsolete
                ),
                Requirement::Other { .. } => matches!(status, Status::Applied | Status::Obsolete),
            };
            if !in_effect {
                unmet.push((
                    patch.id.clone(),
                    format!("requires {label}, which is {}", status.label()),
                ));
            }
        }
    }
    Ok(unmet)
}

fn report_of(action: Action, set: &PatchSet, site: &Path, evaluation: &Evaluation) -> Report {
    Report {
        action,
        set: set.name.clone(),
        package: set.package.clone(),
        version: evaluation.installed.version.to_string(),
        versions: set.versions.to_string(),
        in_range: set.versions.contains(&evaluation.installed.version),
        site_packages: site.to_path_buf(),
        patches: evaluation.patches.clone(),
        changed_files: vec![],
        pycache_removed: 0,
        diff: None,
        effective: false,
        interrupted: None,
        undone: vec![],
    }
}

fn effective(patches: &[PatchReport]) -> bool {
    patches.iter().all(|p| {
        matches!(
            p.status,
            Status::Applied | Status::Obsolete | Status::Skipped
        )
    })
}

/// `paths`: the state directory whose journal tells of an interrupted apply (`None`: not looked
/// at, as right after an apply of this process).
pub(super) fn check(
    set: &PatchSet,
    site: &Path,
    paths: Option<&StatePaths>,
    opts: Options,
) -> Result<Report> {
    let interrupted = match paths {
        Some(p) => journal::pending(&Store::new(p), &set.name, site)?,
        None => None,
    };
    let evaluation = evaluate(set, site, opts)?;
    let mut report = report_of(Action::Check, set, site, &evaluation);
    let unmet = unmet_requirements(set, site, &report.patches)?;
    report.effective = effective(&report.patches) && unmet.is_empty() && interrupted.is_none();
    report.interrupted = interrupted.as_ref().map(journal::describe);
    for (id, why) in unmet {
        let p = report
            .patches
            .iter_mut()
            .find(|p| p.id == id)
            .expect("unmet ids come from the set");
        p.detail = Some(match p.detail.take() {
            Some(d) => format!("{d}; {why}"),
            None => why,
        });
    }
    Ok(report)
}

/// The writer seam: production writes atomically; tests can fail on purpose.
pub type WriteFile<'a> = &'a mut dyn FnMut(&Path, &[u8]) -> Result<()>;

pub(super) fn apply(
    set: &PatchSet,
    site: &Path,
    paths: &StatePaths,
    opts: Options,
    write: WriteFile<'_>,
) -> Result<Report> {
    let store = Store::new(paths);
    let undone = finish_interrupted(&store, set, site, opts)?;
    let evaluation = evaluate(set, site, opts)?;
    let installed = &evaluation.installed;
    if !set.versions.contains(&installed.version) && !opts.force {
        return Err(Error::other(
            format!(
                "{} {} is outside the versions patch set `{}` was written for ({})",
                set.package, installed.version, set.name, set.versions
            ),
            Some("`kiln patch check` shows what would happen; --force applies it anyway (drifted anchors still stop it)".into()),
        ));
    }
    let drifted: Vec<String> = evaluation
        .patches
        .iter()
        .filter(|p| p.status == Status::Drifted)
        .map(|p| format!("{}: {}", p.id, p.detail.as_deref().unwrap_or("drifted")))
        .collect();
    if !drifted.is_empty() {
        return Err(Error::other(
            format!("patch set `{}` does not fit {} {}; nothing was changed:\n  {}", set.name, set.package, installed.version, drifted.join("\n  ")),
            Some("the code these patches anchor on has changed: check whether upstream fixed it (`fixed_in`), or update the patch set".into()),
        ));
    }
    let unmet = unmet_requirements(set, site, &evaluation.patches)?;
    if !unmet.is_empty() {
        let lines: Vec<String> = unmet
            .iter()
            .map(|(id, why)| format!("{id} {why}"))
            .collect();
        return Err(Error::other(
            format!("patch set `{}` cannot be applied; nothing was changed:\n  {}", set.name, lines.join("\n  ")),
            Some(format!(
                "apply the required set first (`{}`), or leave experimental patches out with --skip-experimental",
                apply_required(set, &unmet, site)
            )),
        ));
    }
    let mut report = report_of(Action::Apply, set, site, &evaluation);
    report.undone = undone;
    let changed: Vec<(&String, &Working)> = evaluation
        .files
        .iter()
        .filter(|(_, w)| w.current != w.original)
        .collect();
    (report.patches.iter_mut()).for_each(|p| p.changed = p.status == Status::NotApplied);
    report.changed_files = changed.iter().map(|(rel, _)| (*rel).clone()).collect();
    report.effective = true;
    if opts.dry_run {
        report.diff = Some(
            changed
                .iter()
                .map(|(rel, w)| super::diff::render(rel, &w.original, &w.current))
                .collect(),
        );
        return Ok(report);
    }
    if changed.is_empty() {
        return Ok(report);
    }
    refuse_symlinks(site, changed.iter().map(|(rel, _)| rel.as_str()))?;
    let previous = store.load(&set.name, site)?;
    let mut record = Record {
        set: set.name.clone(),
        site_packages: site.to_path_buf(),
        package: set.package.clone(),
        version: installed.version.to_string(),
        files: previous
            .as_ref()
            .map(|r| r.files.clone())
            .unwrap_or_default(),
        applied_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        kiln_version: env!("CARGO_PKG_VERSION").to_string(),
    };
    for (rel, working) in &changed {
        let current_sha = sha256_bytes(working.original.as_bytes());
        let backup_sha = store.backup(working.original.as_bytes())?;
        let entry = FileRecord {
            path: (*rel).clone(),
            original_sha256: backup_sha,
            patched_sha256: sha256_bytes(working.current.as_bytes()),
            patches: working.patches.clone(),
        };
        match record.files.iter_mut().find(|f| f.path == **rel) {
            // Patched further by this run: the file's true original is the one recorded before.
            Some(old) if old.patched_sha256 == current_sha => {
                old.patched_sha256 = entry.patched_sha256;
                old.patches = entry.patches;
            }
            Some(old) => *old = entry,
            None => record.files.push(entry),
        }
    }
    let targets: Vec<(PathBuf, &[u8], &[u8])> = changed
        .iter()
        .map(|(rel, w)| (site.join(rel), w.original.as_bytes(), w.current.as_bytes()))
        .collect();
    let intent = Journal {
        set: set.name.clone(),
        site_packages: site.to_path_buf(),
        pid: std::process::id(),
        files: changed
            .iter()
            .map(|(rel, w)| Intent {
                path: (*rel).clone(),
                original_sha256: sha256_bytes(w.original.as_bytes()),
                patched_sha256: sha256_bytes(w.current.as_bytes()),
            })
            .collect(),
        previous,
    };
    commit(&store, &intent, &targets, &record, write)?;
    for (path, _, _) in &targets {
        report.pycache_removed += store::remove_pycache(path)?;
    }
    Ok(report)
}

/// Write the files and the record under the journal `intent`: the journal is durable before the
/// first file is touched (the backups already are), and removed once the record is written; a
/// failure puts the originals back (or leaves the journal for the next run to).
fn commit(
    store: &Store,
    intent: &Journal,
    targets: &[(PathBuf, &[u8], &[u8])],
    record: &Record,
    write: WriteFile<'_>,
) -> Result<()> {
    journal::begin(store, intent)?;
    let written = write_all_or_nothing(targets, write).and_then(|()| store.save(record));
    if let Err(e) = written {
        return Err(match journal::undo(store, intent) {
            Ok(_) => e,
            Err(undo) => Error::other(
                format!("{e}; putting the original files back also failed: {undo}"),
                Some("the next `kiln patch revert` or `apply` of this set finishes putting them back (the journal is kept)".into()),
            ),
        });
    }
    journal::finish(store, intent)
}

/// The commands that apply the sets the `unmet` patches require, one set each.
fn apply_required(set: &PatchSet, unmet: &[(String, String)], site: &Path) -> String {
    let site = crate::shell::quote(&site.display().to_string());
    required_sets(set, unmet)
        .iter()
        .map(|name| {
            format!(
                "kiln patch apply {} --site-packages {site}",
                crate::shell::quote(name)
            )
        })
        .collect::<Vec<_>>()
        .join(" && ")
}

/// The other sets named by the requirements of the `unmet` patches, each once (`SET` if none).
fn required_sets<'s>(set: &'s PatchSet, unmet: &[(String, String)]) -> Vec<&'s str> {
    let mut names: Vec<&str> = Vec::new();
    let required = set
        .patches
        .iter()
        .filter(|p| unmet.iter().any(|(id, _)| *id == p.id))
        .flat_map(|p| &p.requires)
        .filter_map(|r| match r {
            Requirement::Other { set, .. } => Some(set.as_str()),
            Requirement::Local(_) => None,
        });
    for name in required {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    if names.is_empty() {
        names.push("SET");
    }
    names
}

/// Write each (path, old, new); if one write fails, put back the ones already written.
fn write_all_or_nothing(targets: &[(PathBuf, &[u8], &[u8])], write: WriteFile<'_>) -> Result<()> {
    for (done, (path, _, new)) in targets.iter().enumerate() {
        if let Err(e) = write(path, new) {
            let mut failed_restores = Vec::new();
            for (path, old, _) in &targets[..done] {
                if store::write_preserving(path, old).is_err() {
                    failed_restores.push(path.display().to_string());
                }
            }
            if !failed_restores.is_empty() {
                return Err(Error::other(
                    format!(
                        "{}; restoring the files already written also failed: {}",
                        e,
                        failed_restores.join(", ")
                    ),
                    Some("reinstall the package to get consistent files back".into()),
                ));
            }
            return Err(e);
        }
    }
    Ok(())
}

/// A file to patch that is a symbolic link (a development install linking a checkout) would be
/// replaced by a regular file, and revert could not bring the link back: refused, before any
/// write.
fn refuse_symlinks<'a>(site: &Path, files: impl Iterator<Item = &'a str>) -> Result<()> {
    for rel in files {
        let path = site.join(rel);
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
            let target = std::fs::read_link(&path).unwrap_or_default();
            return Err(Error::other(
                format!(
                    "{} is a symbolic link (to {}); kiln patches regular files only: nothing was changed",
                    path.display(),
                    target.display()
                ),
                Some("patch an installed copy (`pip install --no-deps --force-reinstall` the package in a venv of its own), or edit the linked checkout yourself".into()),
            ));
        }
    }
    Ok(())
}

/// Undo an apply of `set` on `site` that a kill interrupted (see [`journal`]), unless this is a
/// dry run; returns the files put back.
fn finish_interrupted(
    store: &Store,
    set: &PatchSet,
    site: &Path,
    opts: Options,
) -> Result<Vec<String>> {
    if !opts.dry_run {
        // A revert has no journal: a kill mid-write leaves only its temp file, beside a file
        // this run may not write again (already at its bytes).
        for patch in &set.patches {
            store::remove_dead_temps(&site.join(site_relative(set, patch)));
        }
    }
    match journal::pending(store, &set.name, site)? {
        Some(j) if !opts.dry_run => journal::undo(store, &j),
        Some(j) => Err(Error::other(
            format!("patch set `{}`: {}", set.name, journal::describe(&j)),
            Some("run it without --dry-run to put the original files back first".into()),
        )),
        None => Ok(vec![]),
    }
}

pub(super) fn revert(
    set: &PatchSet,
    site: &Path,
    paths: &StatePaths,
    opts: Options,
) -> Result<Report> {
    let store = Store::new(paths);
    let undone = finish_interrupted(&store, set, site, opts)?;
    let evaluation = evaluate(
        set,
        site,
        Options {
            skip_experimental: false,
            ..opts
        },
    )?;
    let mut report = report_of(Action::Revert, set, site, &evaluation);
    report.undone = undone;
    let Some(record) = store.load(&set.name, site)? else {
        // Nothing recorded, yet the edits are there: saying "reverted" would leave the tree
        // patched behind an exit 0.
        let applied: Vec<&str> = evaluation
            .patches
            .iter()
            .filter(|p| p.status == Status::Applied)
            .map(|p| p.id.as_str())
            .collect();
        if !applied.is_empty() && !opts.dry_run {
            return Err(Error::other(
                format!(
                    "patch set `{}` is applied in {} ({}), but kiln has no record of applying it there: nothing was reverted",
                    set.name,
                    site.display(),
                    applied.join(", ")
                ),
                Some(format!(
                    "without the record kiln does not know the original files; reinstall the package to get them back (`pip install --force-reinstall --no-deps {}=={}`)",
                    set.package, evaluation.installed.version
                )),
            ));
        }
        report.effective = true;
        return Ok(report);
    };
    let mut restores: Vec<(PathBuf, Vec<u8>, Vec<u8>)> = Vec::new();
    let mut conflicts = Vec::new();
    for file in &record.files {
        let path = site.join(&file.path);
        let current = crate::bounded::read_io(&path, crate::bounded::SOURCE_CAP)
            .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
        let current_sha = sha256_bytes(&current);
        if current_sha == file.original_sha256 {
            continue;
        }
        if current_sha != file.patched_sha256 && !opts.force {
            conflicts.push(file.path.clone());
            continue;
        }
        let original = store.read_backup(&file.original_sha256)?;
        restores.push((path, current, original));
    }
    if !conflicts.is_empty() {
        return Err(Error::other(
            format!("cannot revert patch set `{}`: changed since kiln applied it: {}; nothing was changed", set.name, conflicts.join(", ")),
            Some("--force restores the originals anyway, discarding those changes".into()),
        ));
    }
    report.changed_files = record
        .files
        .iter()
        .map(|f| f.path.clone())
        .filter(|p| restores.iter().any(|(path, _, _)| path == &site.join(p)))
        .collect();
    report.effective = true;
    if opts.dry_run {
        report.diff = Some(
            restores
                .iter()
                .map(|(path, current, original)| {
                    let rel = path
                        .strip_prefix(site)
                        .unwrap_or(path)
                        .display()
                        .to_string();
                    super::diff::render(
                        &rel,
                        &String::from_utf8_lossy(current),
                        &String::from_utf8_lossy(original),
                    )
                })
                .collect(),
        );
        return Ok(report);
    }
    let targets: Vec<(PathBuf, &[u8], &[u8])> = restores
        .iter()
        .map(|(p, cur, orig)| (p.clone(), cur.as_slice(), orig.as_slice()))
        .collect();
    let rels: Vec<String> = targets
        .iter()
        .map(|(p, _, _)| {
            p.strip_prefix(site)
                .unwrap_or(p)
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    refuse_symlinks(site, rels.iter().map(String::as_str))?;
    write_all_or_nothing(&targets, &mut |p, b| store::write_preserving(p, b))?;
    for (path, _, _) in &targets {
        report.pycache_removed += store::remove_pycache(path)?;
    }
    store.remove(&set.name, site)?;
    let after = evaluate(set, site, Options::default())?;
    report.patches = after.patches;
    Ok(report)
}
