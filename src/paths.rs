//! The state directory's layout, owned in one place. Every path kiln keeps state under is built
//! here; nothing else joins a literal directory name onto the state or cache root.
//!
//! ```text
//! <state>/runs/<recipe>/{receipts,logs}/   one recipe's receipts and step logs (`origin`: the
//!                                          file that claimed the name; another recipe of that
//!                                          name gets runs/<recipe>@<digest>/)
//! <state>/hashmemo.json, <state>/lock      the file-hash memo and the run lock
//! <state>/clock-granularity                its file system's timestamp granularity
//! <state>/work/<recipe>/                   a recipe's default working directory
//! <state>/shipped/                         embedded recipes written out for their companions
//! <state>/serve/<recipe>.json, <recipe>-<profile>.log   a recorded server, its log
//! <state>/reports/<recipe>/                report.{json,md,html} of the last `kiln up`
//! <state>/bench/                           bench history
//! <state>/tune/<recipe>/                   `kiln tune` results and winner profiles
//! <state>/patches/                         originals of patched files (for revert)
//! <state>/running/                         process groups the watchdog ends with kiln
//! <cache>/{downloads,wheels,steps,tools,python-facts}/   $KILN_CACHE_DIR, else <state>/cache
//! ```

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Paths under one state directory and its cache directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatePaths {
    root: PathBuf,
    cache: PathBuf,
}

impl StatePaths {
    /// The state directory `root`, with its cache at `cache` (default: `<root>/cache`).
    pub fn new(root: PathBuf, cache: Option<PathBuf>) -> StatePaths {
        let cache = cache.unwrap_or_else(|| root.join("cache"));
        StatePaths { root, cache }
    }

    /// The layout of the state directory `state_dir` (`--state-dir`; else `$KILN_HOME`,
    /// `$XDG_STATE_HOME/kiln`, `~/.local/state/kiln`), relative to the current directory, with
    /// its cache at `$KILN_CACHE_DIR` when set.
    pub fn from_env(state_dir: Option<&Path>) -> Result<StatePaths> {
        let root = match state_dir {
            Some(d) => d.to_path_buf(),
            None => default_root()?,
        };
        let root = if root.is_absolute() {
            root
        } else {
            std::env::current_dir()
                .map_err(|e| Error::io("cannot read the current directory", e))?
                .join(root)
        };
        let cache = std::env::var_os("KILN_CACHE_DIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        for (what, path) in [
            ("state directory", Some(&root)),
            ("cache directory", cache.as_ref()),
        ] {
            if let Some(path) = path.filter(|p| p.to_str().is_none()) {
                return Err(Error::usage(
                    format!(
                        "the {what} {} is not valid UTF-8: kiln writes the paths under it into \
                         its JSON receipts, logs and reports, which hold text only",
                        path.display()
                    ),
                    Some(
                        "choose a directory whose path is UTF-8 (--state-dir DIR, KILN_HOME, \
                         KILN_CACHE_DIR)"
                            .to_string(),
                    ),
                ));
            }
        }
        Ok(StatePaths::new(root, cache))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Downloads and compiled wheels.
    pub fn cache(&self) -> &Path {
        &self.cache
    }

    /// Every recipe's run directory.
    pub fn runs(&self) -> PathBuf {
        self.root.join("runs")
    }

    /// One recipe's run: `receipts/` and `logs/`. `recipe` is its run key ([`Self::run_key`]).
    pub fn run_dir(&self, recipe: &str) -> PathBuf {
        self.runs().join(recipe)
    }

    /// The run directory's name for the recipe `name` loaded from `origin`: `name`, unless
    /// another recipe file of that name claimed `runs/<name>/` first (its `origin` file), then
    /// `name@<digest of origin>`, so that two recipes of one name never share receipts. An
    /// unclaimed directory (new, or kept by a kiln before this rule) is claimed here.
    pub fn run_key(&self, name: &str, origin: &str) -> String {
        let origin = std::fs::canonicalize(origin)
            .map_or_else(|_| origin.to_string(), |p| p.display().to_string());
        let marker = self.run_dir(name).join("origin");
        let claimed =
            |marker: &Path| crate::bounded::read_state(marker, crate::bounded::STATE_CAP).ok();
        let owner = claimed(&marker).or_else(|| {
            use std::io::Write;
            let _ = std::fs::create_dir_all(self.run_dir(name));
            // First claim wins (O_EXCL); a concurrent claimer reads the winner's.
            if let Ok(mut f) = std::fs::File::options()
                .write(true)
                .create_new(true)
                .open(&marker)
            {
                let _ = f.write_all(origin.as_bytes());
            }
            claimed(&marker)
        });
        match owner {
            Some(o) if o != origin => format!(
                "{name}@{}",
                &crate::hash::sha256_bytes(origin.as_bytes())[..12]
            ),
            _ => name.to_string(),
        }
    }

    pub fn receipts(&self, recipe: &str) -> PathBuf {
        self.run_dir(recipe).join("receipts")
    }

    pub fn receipt(&self, recipe: &str, step: &str) -> PathBuf {
        self.receipts(recipe).join(format!("{step}.json"))
    }

    /// The receipts index: a cache of `receipts/` (engine::index).
    pub fn receipts_index(&self, recipe: &str) -> PathBuf {
        self.run_dir(recipe).join("receipts.idx")
    }

    /// Parsed and validated recipes, reused while their inputs are unchanged (recipe::cache).
    pub fn recipe_cache(&self) -> PathBuf {
        self.root.join("recipe-cache")
    }

    pub fn step_log(&self, recipe: &str, step: &str) -> PathBuf {
        self.run_dir(recipe)
            .join("logs")
            .join(format!("{step}.log"))
    }

    pub fn hash_memo(&self) -> PathBuf {
        self.root.join("hashmemo.json")
    }

    pub fn lock(&self) -> PathBuf {
        self.root.join("lock")
    }

    /// The state directory's measured timestamp granularity (see `fs::timestamp_granularity`).
    pub fn clock_granularity(&self) -> PathBuf {
        self.root.join("clock-granularity")
    }

    /// A recipe's default working directory (`${kiln.work_dir}`).
    pub fn work(&self, recipe: &str) -> PathBuf {
        self.root.join("work").join(recipe)
    }

    /// Where embedded recipes and their companion files are written out.
    pub fn shipped(&self) -> PathBuf {
        self.root.join("shipped")
    }

    /// Recorded servers and their logs.
    pub fn serve_dir(&self) -> PathBuf {
        self.root.join("serve")
    }

    /// The record of the server `kiln serve` left running for `recipe`.
    pub fn serve_record(&self, recipe: &str) -> PathBuf {
        self.serve_dir().join(format!("{recipe}.json"))
    }

    /// The log of `profile` of `recipe` served by kiln.
    pub fn serve_log(&self, recipe: &str, profile: &str) -> PathBuf {
        self.serve_dir().join(format!("{recipe}-{profile}.log"))
    }

    /// report.json, report.md and report.html of the last `kiln up` of `recipe`.
    pub fn reports(&self, recipe: &str) -> PathBuf {
        self.root.join("reports").join(recipe)
    }

    /// The records of the step- and wheel-cache entries this state stored (`cache::trust`: an
    /// unsigned entry of a shared cache is used only where it is this state's own).
    pub fn cache_own(&self) -> PathBuf {
        self.root.join("cache-own")
    }

    /// `kiln tune`'s results for `recipe`: the ranked table, the plot, the winner profile.
    pub fn tune(&self, recipe: &str) -> PathBuf {
        self.root.join("tune").join(recipe)
    }

    pub fn bench(&self) -> PathBuf {
        self.root.join("bench")
    }

    /// Originals of the files patch sets changed.
    pub fn patches(&self) -> PathBuf {
        self.root.join("patches")
    }

    /// Process groups the watchdog ends when kiln dies.
    pub fn running(&self) -> PathBuf {
        self.root.join("running")
    }

    /// Verified downloads (and the partial ones of killed runs).
    pub fn downloads(&self) -> PathBuf {
        self.cache.join("downloads")
    }

    /// A verified download, by its sha256.
    pub fn download(&self, sha256: &str) -> PathBuf {
        self.downloads().join(sha256.to_lowercase())
    }

    /// The compiled-wheel cache.
    pub fn wheels(&self) -> PathBuf {
        self.cache.join("wheels")
    }

    /// The step cache (a step's outputs by its cache key).
    pub fn steps(&self) -> PathBuf {
        self.cache.join("steps")
    }

    /// Tools kiln installs for itself (`uv`).
    pub fn tool(&self, name: &str) -> PathBuf {
        self.cache.join("tools").join(name)
    }

    /// Facts of Python interpreters, cached while they are unchanged.
    pub fn python_facts(&self) -> PathBuf {
        self.cache.join("python-facts")
    }
}

/// Why a directory is not private to kiln's user, if it is not: owned by another user, or
/// writable by its group or by everyone (ssh's rule for `~/.ssh`). The superuser's directories
/// are trusted as owners, as ssh trusts them.
pub(crate) fn not_private(meta: &std::fs::Metadata) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    not_private_to(me, meta.uid(), meta.mode() & 0o7777)
}

/// [`not_private`] for user `me` of a directory owned by `uid` with permission bits `mode`.
fn not_private_to(me: u32, uid: u32, mode: u32) -> Option<String> {
    if uid != me && uid != 0 {
        return Some(format!("it is owned by uid {uid}, not by you (uid {me})"));
    }
    let who = match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (_, true) => "everyone",
        (true, false) => "its group",
        (false, false) => return None,
    };
    Some(format!("it is writable by {who} (mode {mode:04o})"))
}

impl StatePaths {
    /// Refuse a state or cache directory that another user could write: kiln keeps there the
    /// pids it signals, the backups it restores and the receipts it trusts. One that does not
    /// exist yet is created now, private (0700), so that a permissive umask cannot make it
    /// refusable later.
    pub fn ensure_private(&self) -> Result<()> {
        for (what, dir) in [("state", &self.root), ("cache", &self.cache)] {
            let meta = match std::fs::metadata(dir) {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    if let Ok(target) = std::fs::read_link(dir) {
                        return Err(Error::usage(
                            format!(
                                "the {what} directory {} is a link to {}, which does not exist",
                                dir.display(),
                                target.display()
                            ),
                            Some("create the link's target (kiln does not follow a link to make one), or point KILN_HOME (or --state-dir, KILN_CACHE_DIR) at a directory".into()),
                        ));
                    }
                    create_private(dir)?;
                    continue;
                }
                Err(e) => {
                    return Err(Error::io(
                        format!("cannot read the {what} directory {}", dir.display()),
                        e,
                    ))
                }
            };
            if !meta.is_dir() {
                return Err(Error::usage(
                    format!("the {what} directory {} is not a directory", dir.display()),
                    Some("point KILN_HOME (or --state-dir, KILN_CACHE_DIR) at a directory".into()),
                ));
            }
            if let Some(why) = not_private(&meta) {
                return Err(Error::usage(
                    format!(
                        "refusing the {what} directory {}: {why}",
                        dir.display()
                    ),
                    Some(format!(
                        "kiln keeps the pids it signals, the patch backups it restores and the receipts it trusts there: make it yours alone (`chmod go-w {0}`, `chown $(id -u) {0}`), or use another (--state-dir, KILN_HOME, KILN_CACHE_DIR)",
                        dir.display()
                    )),
                ));
            }
        }
        Ok(())
    }
}

/// Create `dir` (its missing parents as usual) with mode 0700.
fn create_private(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| Error::io(format!("cannot create {}", parent.display()), e))?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            Err(Error::io(format!("cannot create {}", dir.display()), e))
        }
        _ => Ok(()),
    }
}

/// The state directory when no `--state-dir` names one.
fn default_root() -> Result<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(home) = var("KILN_HOME") {
        return Ok(home);
    }
    if let Some(xdg) = var("XDG_STATE_HOME") {
        return Ok(xdg.join("kiln"));
    }
    match var("HOME") {
        Some(home) => Ok(home.join(".local/state/kiln")),
        None => Err(Error::usage(
            "cannot pick a state directory: neither KILN_HOME, XDG_STATE_HOME nor HOME is set",
            Some("pass --state-dir DIR".to_string()),
        )),
    }
}

#[cfg(test)]
mod pins;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_the_documented_one() {
        let p = StatePaths::new(PathBuf::from("/s"), None);
        assert_eq!(p.cache(), Path::new("/s/cache"));
        assert_eq!(p.receipt("r", "a"), Path::new("/s/runs/r/receipts/a.json"));
        assert_eq!(p.step_log("r", "a"), Path::new("/s/runs/r/logs/a.log"));
        assert_eq!(p.serve_record("r"), Path::new("/s/serve/r.json"));
        assert_eq!(p.reports("r"), Path::new("/s/reports/r"));
        assert_eq!(p.download("AB"), Path::new("/s/cache/downloads/ab"));
        let moved = StatePaths::new(PathBuf::from("/s"), Some(PathBuf::from("/c")));
        assert_eq!(moved.wheels(), Path::new("/c/wheels"));
    }
}
