//! The parsed-recipe cache: a validated [`Recipe`] kept in `<state>/recipe-cache/`, reused while
//! everything that went into it is the same, so a re-run skips parsing and validation.
//!
//! An entry is found by what the command line gives (the recipe argument, the working directory,
//! `--set` overrides, the state and cache directories, the kiln executable) and trusted only if
//! what the recipe itself pulled in still matches: the sha256 of the recipe and every import, the
//! value of every host fact the texts name (`host.KEY`), and the sha256 of every patch-set file a
//! `patch` step read. Anything else, or an unreadable or torn entry, is a miss: the recipe is
//! loaded as usual and the entry replaced. Invalid recipes are never cached, so errors and their
//! locations always come from a real load. `KILN_NO_RECIPE_CACHE=1` turns the cache off.
//!
//! Secrets are never stored: each secret value in the recipe (a secret-named variable, `--set`
//! value or env entry, a URL's password; see src/redact.rs) is stored as a placeholder naming its
//! sha256, and put back on lookup from the `--set` value with that digest. A recipe holding a
//! secret that no `--set` value gives (one written in the recipe itself) is not cached. The
//! cache directory is 0700.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{shipped, LoadOptions, Recipe, StepKind};
use crate::hash::FileVersion;
use crate::host::FACT_KEYS;
use crate::source::Sources;

/// Bumped when the entry format or the meaning of a cached recipe changes.
const FORMAT: &str = "kiln-recipe-cache 4";
/// Where embedded (shipped) files are named in `SourceFile::path`.
const EMBEDDED: &str = super::SHIPPED_ORIGIN;

/// An entry is a validated recipe as JSON: more than this is not one kiln wrote.
const ENTRY_CAP: u64 = 64 << 20;

/// Where the entry for one invocation lives.
pub(super) struct Slot {
    path: PathBuf,
    /// When the load began: a file settled before then is the version the load read.
    started: std::time::SystemTime,
}

/// Where a loaded recipe came from, for caches built on top of this one (the engine's fresh
/// record): the slot it was stored in and what it was built from.
#[derive(Debug, Clone)]
pub(crate) struct Provenance {
    /// The entry's path without its extension: a sibling cache adds its own.
    pub(crate) slot: PathBuf,
    pub(crate) inputs: Inputs,
}

/// What the cached recipe was built from, checked before it is used.
#[derive(Serialize, Deserialize, PartialEq, Debug, Clone)]
pub(crate) struct Inputs {
    format: String,
    /// (path as loaded, sha256 of its text, its version if settled before the load read it),
    /// the root and every import.
    files: Vec<(String, String, Option<FileVersion>)>,
    /// (fact, value) of every host fact the texts name.
    facts: Vec<(String, Option<String>)>,
    /// (patch set as named, sha256 of the file, or `None` when it named a shipped set).
    patch_sets: Vec<(String, Option<String>)>,
    /// sha256 of each secret value the stored recipe holds as a placeholder.
    secrets: Vec<String>,
    /// sha256 of the stored recipe text (as written, placeholders in): an entry whose recipe
    /// was edited or torn since is a miss, never run.
    recipe_sha256: String,
}

impl Inputs {
    /// Whether the recipe files, host facts and patch sets are still what they were.
    pub(crate) fn still_match(&self, opts: &LoadOptions) -> bool {
        self.format == FORMAT
            && self.files.iter().all(|(path, sha, version)| {
                // A shipped file is part of the executable, which is part of the slot's key.
                path.starts_with(EMBEDDED)
                    || (version.is_some() && FileVersion::read(Path::new(path)) == *version)
                    || file_sha256(path).as_ref() == Some(sha)
            })
            && self
                .facts
                .iter()
                .all(|(fact, value)| opts.facts.get(fact) == *value)
            && self
                .patch_sets
                .iter()
                .all(|(set, sha)| patch_set_sha256(set) == *sha)
    }
}

impl Inputs {
    /// These inputs with the version of each file that had none (it was changed just before
    /// the load) where the file is now settled and still has the text loaded: so that a cache
    /// built on these inputs does not hash that file on every use.
    pub(crate) fn settled(&self) -> Inputs {
        let now = std::time::SystemTime::now();
        let mut inputs = self.clone();
        for (path, sha, version) in &mut inputs.files {
            if version.is_some() || path.starts_with(EMBEDDED) {
                continue;
            }
            let before = FileVersion::read(Path::new(path));
            let same_text = file_sha256(path).as_ref() == Some(sha);
            if same_text
                && before.is_some_and(|v| v.settled_before(now))
                && FileVersion::read(Path::new(path)) == before
            {
                *version = before;
            }
        }
        inputs
    }
}

impl Slot {
    fn provenance(&self, inputs: Inputs) -> Provenance {
        Provenance {
            slot: self.path.with_extension(""),
            inputs,
        }
    }
}

/// The slot for loading `spec` with `opts`, or `None` when the cache is off.
pub(super) fn slot(spec: Option<&str>, opts: &LoadOptions) -> Option<Slot> {
    if std::env::var_os("KILN_NO_RECIPE_CACHE").is_some_and(|v| !v.is_empty() && v != "0") {
        return None;
    }
    let mut h = Sha256::new();
    let mut part = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    part(FORMAT.as_bytes());
    part(env!("CARGO_PKG_VERSION").as_bytes());
    // A rebuilt kiln may validate differently: the executable's identity is part of the key.
    let exe = std::env::current_exe().ok()?;
    let meta = std::fs::metadata(&exe).ok()?;
    {
        use std::os::unix::fs::MetadataExt;
        part(exe.as_os_str().as_encoded_bytes());
        part(&meta.len().to_le_bytes());
        part(&meta.mtime().to_le_bytes());
        part(&meta.mtime_nsec().to_le_bytes());
        part(&meta.ino().to_le_bytes());
    }
    part(spec.unwrap_or("").as_bytes());
    if let Some(spec) = spec {
        let canonical = std::fs::canonicalize(spec).unwrap_or_default();
        part(canonical.as_os_str().as_encoded_bytes());
    }
    let cwd = std::env::current_dir().unwrap_or_default();
    part(cwd.as_os_str().as_encoded_bytes());
    for (k, v) in opts.overrides {
        part(k.as_bytes());
        part(v.as_bytes());
    }
    part(opts.paths.root().as_os_str().as_encoded_bytes());
    part(opts.paths.cache().as_os_str().as_encoded_bytes());
    let key = crate::hash::hex(&h.finalize());
    Some(Slot {
        started: std::time::SystemTime::now(),
        path: opts
            .paths
            .recipe_cache()
            .join(format!("{}.json", &key[..32])),
    })
}

/// The path, without extension, of the slot for loading `spec` with `opts` (`None` when the
/// cache is off): where a sibling cache finds its entry without loading the recipe.
pub(crate) fn slot_base(spec: Option<&str>, opts: &LoadOptions) -> Option<PathBuf> {
    slot(spec, opts).map(|s| s.path.with_extension(""))
}

/// The cached recipe, if its inputs are unchanged.
pub(super) fn lookup(slot: &Slot, opts: &LoadOptions) -> Option<Recipe> {
    // Read without blocking (a FIFO planted in the cache) and capped.
    let bytes = crate::bounded::read_io(&slot.path, ENTRY_CAP).ok()?;
    let newline = bytes.iter().position(|&b| b == b'\n')?;
    let stored: Inputs = serde_json::from_slice(&bytes[..newline]).ok()?;
    let body = &bytes[newline + 1..];
    if crate::hash::sha256_bytes(body) != stored.recipe_sha256 || !stored.still_match(opts) {
        return None;
    }
    let mut text = String::from_utf8(body.to_vec()).ok()?;
    for digest in &stored.secrets {
        let value = opts
            .overrides
            .iter()
            .map(|(_, v)| v)
            .find(|v| crate::hash::sha256_bytes(v.as_bytes()) == *digest)?;
        text = text.replace(&placeholder(digest), &json_escaped(value));
    }
    let mut recipe: Recipe = serde_json::from_str(&text).ok()?;
    recipe.provenance = Some(slot.provenance(stored));
    register_secrets(&recipe);
    Some(recipe)
}

/// Keep `recipe`, loaded from `sources`, for the next load with the same slot (best effort),
/// and note where it is kept in the recipe.
pub(super) fn store(slot: &Slot, sources: &Sources, opts: &LoadOptions, recipe: &mut Recipe) {
    let files = sources
        .files
        .iter()
        .map(|f| {
            let version = FileVersion::read(&f.path).filter(|v| v.settled_before(slot.started));
            (
                f.path.display().to_string(),
                crate::hash::sha256_bytes(f.text.as_bytes()),
                version,
            )
        })
        .collect();
    let facts = FACT_KEYS
        .iter()
        .filter(|key| {
            let named = format!("host.{key}");
            sources.files.iter().any(|f| f.text.contains(&named))
                || opts.overrides.iter().any(|(_, v)| v.contains(&named))
        })
        .map(|key| (key.to_string(), opts.facts.get(key)))
        .collect();
    let patch_sets = recipe
        .steps
        .iter()
        .filter_map(|s| match &s.kind {
            StepKind::Patch { set, .. } => Some((set.clone(), patch_set_sha256(set))),
            _ => None,
        })
        .collect();
    let Ok(mut text) = serde_json::to_string(&*recipe) else {
        return;
    };
    let secrets = secret_values(recipe, &text);
    let mut digests = Vec::new();
    for secret in &secrets {
        // Only a secret a `--set` value gives can be put back on lookup.
        if secret.len() < crate::redact::MIN_SECRET_LEN
            || !opts.overrides.iter().any(|(_, v)| v == secret)
        {
            return;
        }
        let digest = crate::hash::sha256_bytes(secret.as_bytes());
        text = text.replace(&json_escaped(secret), &placeholder(&digest));
        digests.push(digest);
    }
    if secrets.iter().any(|s| text.contains(&json_escaped(s))) {
        return;
    }
    let inputs = Inputs {
        format: FORMAT.to_string(),
        files,
        facts,
        patch_sets,
        secrets: digests,
        recipe_sha256: crate::hash::sha256_bytes(text.as_bytes()),
    };
    let mut bytes = serde_json::to_vec(&inputs).expect("cache inputs serialize");
    bytes.push(b'\n');
    bytes.extend_from_slice(text.as_bytes());
    if let Some(dir) = slot.path.parent() {
        use std::os::unix::fs::PermissionsExt;
        if std::fs::create_dir_all(dir).is_err()
            || std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).is_err()
        {
            return;
        }
    }
    if crate::fs::replace_unsynced(&slot.path, &bytes).is_ok() {
        recipe.provenance = Some(slot.provenance(inputs));
    }
    if let Some(dir) = slot.path.parent() {
        evict(dir, &slot.path);
    }
}

/// Register the recipe's secrets with the redactor: secret-named variables and env entries,
/// and every URL password anywhere in it.
pub(super) fn register_secrets(recipe: &Recipe) {
    let text = serde_json::to_string(recipe).unwrap_or_default();
    crate::redact::register_pairs(named_values(recipe).chain(std::iter::once(("", text.as_str()))));
}

/// (name, value) of every variable and env entry of `recipe`.
fn named_values(recipe: &Recipe) -> impl Iterator<Item = (&str, &str)> {
    let vars = recipe.vars.iter();
    let steps = recipe.steps.iter().flat_map(|s| s.env.iter());
    let profiles = recipe.profiles.values().flat_map(|p| p.env.iter());
    vars.chain(steps)
        .chain(profiles)
        .map(|(k, v)| (k.as_str(), v.as_str()))
}

/// The secret values `recipe` (serialized as `text`) holds, longest first: the values of
/// secret-named variables and env entries, and URL passwords.
fn secret_values(recipe: &Recipe, text: &str) -> Vec<String> {
    let mut out: Vec<String> = named_values(recipe)
        .filter(|(k, v)| crate::redact::is_secret_name(k) && !v.is_empty())
        .map(|(_, v)| v.to_string())
        .collect();
    out.extend(crate::redact::url_passwords(text));
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out.dedup();
    out
}

/// How a secret stands in a stored recipe: its digest, never its value.
fn placeholder(digest: &str) -> String {
    format!("@@kiln-secret:sha256:{digest}@@")
}

/// `value` as it appears inside a JSON string.
fn json_escaped(value: &str) -> String {
    let quoted = serde_json::to_string(value).expect("strings serialize");
    quoted[1..quoted.len() - 1].to_string()
}

/// Slots kept: every rebuilt kiln, working directory or `--set` makes a new one.
const KEEP: usize = 16;

/// Remove all but the [`KEEP`] most recently written slots (each entry with its siblings of
/// the same stem, such as the engine's fresh record), never `current`'s.
fn evict(dir: &Path, current: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let files: Vec<std::fs::DirEntry> = entries.flatten().collect();
    let mut slots: Vec<(std::time::SystemTime, PathBuf)> = files
        .iter()
        .filter_map(|e| {
            let path = e.path();
            (path.extension()? == "json").then_some(())?;
            Some((e.metadata().ok()?.modified().ok()?, path))
        })
        .collect();
    if slots.len() <= KEEP {
        return;
    }
    slots.sort_by_key(|s| std::cmp::Reverse(s.0));
    let evicted: Vec<PathBuf> = slots
        .into_iter()
        .skip(KEEP)
        .map(|(_, p)| p.with_extension(""))
        .filter(|stem| *stem != current.with_extension(""))
        .collect();
    for e in &files {
        if evicted.contains(&e.path().with_extension("")) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// sha256 of a loaded file's text now: a recipe file on disk or a shipped one.
fn file_sha256(path: &str) -> Option<String> {
    match path.strip_prefix(EMBEDDED) {
        Some(key) => shipped::get(key).map(|t| crate::hash::sha256_bytes(t.as_bytes())),
        None => crate::bounded::read_io(Path::new(path), crate::bounded::STATE_CAP)
            .ok()
            .map(|b| crate::hash::sha256_bytes(&b)),
    }
}

/// What validation read for a patch set: the file's sha256 if the name is a file, else `None`
/// (a shipped set, which is part of the executable).
fn patch_set_sha256(set: &str) -> Option<String> {
    let path = Path::new(set);
    if !path.is_file() {
        return None;
    }
    crate::bounded::read_io(path, crate::bounded::STATE_CAP)
        .ok()
        .map(|b| crate::hash::sha256_bytes(&b))
}

#[cfg(test)]
mod tests {
    use crate::host::Facts;
    use crate::paths::StatePaths;
    use crate::recipe::{load, LoadOptions};

    /// Every recipe in the tree (and the shipped ones) comes back from the cache exactly as a
    /// full load builds it: requirements, conditions, profiles and all.
    #[test]
    fn a_cached_recipe_is_the_recipe_a_full_load_builds() {
        let state = tempfile::tempdir().unwrap();
        let paths = StatePaths::new(state.path().to_path_buf(), None);
        let facts = Facts::new();
        let overrides = Vec::new();
        let opts = LoadOptions {
            overrides: &overrides,
            facts: &facts,
            paths: &paths,
        };
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut specs: Vec<String> = crate::recipe::shipped::recipe_names();
        for dir in ["recipes", "toolchains"] {
            for e in std::fs::read_dir(root.join(dir)).unwrap().flatten() {
                if e.path().extension().is_some_and(|x| x == "toml") {
                    specs.push(e.path().display().to_string());
                }
            }
        }
        let mut hits = 0;
        for spec in &specs {
            let Ok(full) = load(Some(spec), &opts) else {
                continue; // fragments that are not recipes on their own
            };
            let slot = super::slot(Some(spec), &opts).unwrap();
            let cached = super::lookup(&slot, &opts).expect("stored by the full load");
            assert_eq!(format!("{cached:?}"), format!("{full:?}"), "{spec}");
            hits += 1;
        }
        assert!(hits >= 5, "only {hits} recipes loaded");
    }

    #[test]
    fn the_cache_keeps_the_most_recent_slots_only() {
        let dir = tempfile::tempdir().unwrap();
        let paths = StatePaths::new(dir.path().join("state"), None);
        let facts = Facts::new();
        let recipe = dir.path().join("r.toml");
        std::fs::write(
            &recipe,
            "[recipe]\nname = \"r\"\n\n[vars]\nn = \"0\"\n\n[[step]]\nid = \"a\"\nkind = \"run\"\ncmd = [\"true\"]\n",
        )
        .unwrap();
        let spec = recipe.display().to_string();
        let cache = paths.recipe_cache();
        for i in 0..super::KEEP + 3 {
            // Each `--set` value is a slot of its own.
            let overrides = vec![("n".to_string(), i.to_string())];
            let opts = LoadOptions {
                overrides: &overrides,
                facts: &facts,
                paths: &paths,
            };
            load(Some(&spec), &opts).unwrap();
            let slot = super::slot_base(Some(&spec), &opts).unwrap();
            std::fs::write(slot.with_extension("fresh"), "x").unwrap();
        }
        let count = |ext: &str| {
            std::fs::read_dir(&cache)
                .unwrap()
                .flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == ext))
                .count()
        };
        assert_eq!(count("json"), super::KEEP);
        // Each evicted entry took its sibling record along.
        assert_eq!(count("fresh"), super::KEEP);
    }

    #[test]
    fn an_edited_import_or_another_host_fact_is_a_miss() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let paths = StatePaths::new(state, None);
        std::fs::write(
            dir.path().join("r.toml"),
            "[recipe]\nname = \"r\"\nimport = [\"part.toml\"]\n\n[[step]]\nid = \"a\"\nkind = \"run\"\ncmd = [\"echo\", \"${host.cores}\", \"${v}\"]\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("part.toml"), "[vars]\nv = \"one\"\n").unwrap();
        let spec = dir.path().join("r.toml").display().to_string();
        let overrides = Vec::new();
        let one = Facts::new().with_override("cores", "1");
        let opts = LoadOptions {
            overrides: &overrides,
            facts: &one,
            paths: &paths,
        };
        load(Some(&spec), &opts).unwrap();
        let slot = super::slot(Some(&spec), &opts).unwrap();
        assert!(super::lookup(&slot, &opts).is_some());
        let two = Facts::new().with_override("cores", "2");
        let opts2 = LoadOptions {
            facts: &two,
            ..opts
        };
        assert!(super::lookup(&slot, &opts2).is_none(), "host.cores changed");
        std::fs::write(dir.path().join("part.toml"), "[vars]\nv = \"two\"\n").unwrap();
        assert!(super::lookup(&slot, &opts).is_none(), "the import changed");
        let again = load(Some(&spec), &opts).unwrap();
        assert!(format!("{:?}", again.steps[0].kind).contains("two"));
    }
}
