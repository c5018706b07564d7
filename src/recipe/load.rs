//! Finding a recipe (path or shipped name), reading it and its imports, in merge order.
//!
//! Reading is bounded: recipe files are regular `.toml` files of at most [`MAX_FILE_BYTES`], the
//! import graph is at most [`MAX_IMPORT_DEPTH`] deep, and an import stays inside the recipe's tree
//! (see [`tree_of`]). A file that is not a `.toml` file never has a line echoed in an error.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use super::loaded::{LoadOptions, Loaded};
use super::{cache, shipped, validate, wire, Recipe};
use crate::diagnostic::Diagnostic;
use crate::error::{Error, Result};
use crate::paths::StatePaths;
use crate::source::{SourceFile, Sources};

/// The largest recipe (or imported) file kiln reads.
pub(super) const MAX_FILE_BYTES: u64 = 4 << 20;
/// How deep imports may nest (a imports b imports c ...).
pub(super) const MAX_IMPORT_DEPTH: usize = 32;

/// Where a file lives: on disk, or inside the binary.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Origin {
    Disk(PathBuf),
    Embedded(String),
}

/// Load a recipe by path or shipped name (`None`: the default recipe).
pub fn load(spec: Option<&str>, opts: &LoadOptions) -> Result<Recipe> {
    crate::redact::register_pairs(opts.overrides.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let origin = resolve(spec)?;
    let shipped_root = opts.paths.shipped();
    if matches!(origin, Origin::Embedded(_)) {
        shipped::materialize(&shipped_root)?;
    }
    let slot = cache::slot(spec, opts);
    if let Some(recipe) = slot.as_ref().and_then(|s| cache::lookup(s, opts)) {
        return Ok(recipe);
    }
    let mut loaded = Loaded {
        sources: Sources::default(),
        files: Vec::new(),
    };
    let mut seen = Vec::new();
    let tree = match &origin {
        Origin::Disk(path) => tree_of(path),
        Origin::Embedded(_) => None,
    };
    let roots = Roots {
        shipped: &shipped_root,
        tree: tree.as_ref(),
    };
    read_tree(
        &origin,
        None,
        &mut loaded,
        &mut Vec::new(),
        &mut seen,
        &roots,
    )?;
    let mut recipe = validate::build(&loaded, opts)?;
    if let Some(slot) = slot {
        cache::store(&slot, &loaded.sources, opts, &mut recipe);
    }
    cache::register_secrets(&recipe);
    Ok(recipe)
}

/// The name of the recipe `spec` names, from its files alone (no variable is expanded): what
/// `kiln serve --stop` needs, which must not ask for the recipe's required `--set` values.
pub fn name_of(spec: Option<&str>, paths: &StatePaths) -> Result<String> {
    let origin = resolve(spec)?;
    let shipped_root = paths.shipped();
    let tree = match &origin {
        Origin::Disk(path) => tree_of(path),
        Origin::Embedded(_) => None,
    };
    let roots = Roots {
        shipped: &shipped_root,
        tree: tree.as_ref(),
    };
    let mut loaded = Loaded {
        sources: Sources::default(),
        files: Vec::new(),
    };
    read_tree(
        &origin,
        None,
        &mut loaded,
        &mut Vec::new(),
        &mut Vec::new(),
        &roots,
    )?;
    let (root_id, root) = loaded.files.last().expect("the root file is always loaded");
    validate::recipe_name(&loaded.sources, *root_id, root.recipe.as_ref())
}

fn resolve(spec: Option<&str>) -> Result<Origin> {
    let Some(spec) = spec else {
        return Ok(Origin::Embedded(format!(
            "recipes/{}.toml",
            shipped::DEFAULT
        )));
    };
    let path = Path::new(spec);
    if path.exists() || spec.contains('/') || spec.ends_with(".toml") {
        return Ok(Origin::Disk(path.to_path_buf()));
    }
    let key = format!("recipes/{spec}.toml");
    if shipped::get(&key).is_some() {
        return Ok(Origin::Embedded(key));
    }
    Err(Error::RecipeNotFound {
        name: spec.to_string(),
        known: shipped::recipe_names(),
    })
}

/// The directories reading starts from.
struct Roots<'a> {
    /// Where the shipped files are materialized.
    shipped: &'a Path,
    /// Imports of an on-disk recipe must stay inside this tree.
    tree: Option<&'a Tree>,
}

/// Where the imports of a recipe named on the command line may come from: its directory, and
/// when that directory is called `recipes`, a `toolchains/` beside it (kiln's own layout). Only
/// that sibling: the parent itself may be a home directory full of other TOML files.
struct Tree {
    dir: PathBuf,
    toolchains: Option<PathBuf>,
}

fn tree_of(recipe: &Path) -> Option<Tree> {
    let dir = std::fs::canonicalize(recipe).ok()?.parent()?.to_path_buf();
    let toolchains = dir
        .file_name()
        .is_some_and(|n| n == "recipes")
        .then(|| dir.parent().map(|p| p.join("toolchains")))
        .flatten()
        .filter(|t| t.is_dir());
    Some(Tree { dir, toolchains })
}

impl Tree {
    fn holds(&self, real: &Path) -> bool {
        real.starts_with(&self.dir)
            || self
                .toolchains
                .as_ref()
                .is_some_and(|t| real.starts_with(t))
    }

    fn describe(&self) -> String {
        match &self.toolchains {
            Some(t) => format!("{} (and {})", self.dir.display(), t.display()),
            None => self.dir.display().to_string(),
        }
    }
}

fn read_tree(
    origin: &Origin,
    imported_at: Option<&(usize, std::ops::Range<usize>)>,
    loaded: &mut Loaded,
    stack: &mut Vec<Origin>,
    seen: &mut Vec<Origin>,
    roots: &Roots,
) -> Result<()> {
    let located = |loaded: &Loaded, message: String, hint: &str| -> Error {
        match imported_at {
            Some((file, span)) => loaded
                .sources
                .diag(loaded.sources.loc(*file, span.clone()), message)
                .with_hint(hint)
                .into(),
            None => Error::usage(message, Some(hint.to_string())),
        }
    };
    let identity = identity(origin);
    if stack.contains(&identity) {
        return Err(located(
            loaded,
            "import cycle: this file is already being imported".into(),
            "remove one of the imports that lead back here",
        ));
    }
    if seen.contains(&identity) {
        return Ok(());
    }
    if stack.len() >= MAX_IMPORT_DEPTH {
        return Err(located(
            loaded,
            format!("imports nest more than {MAX_IMPORT_DEPTH} files deep"),
            "flatten the chain: import the shared files from the recipe itself",
        ));
    }
    let file = source_file(
        origin,
        imported_at.is_some(),
        &identity,
        loaded,
        roots,
        &located,
    )?;
    let id = loaded.sources.add(file);
    let parsed: wire::File = loaded.sources.parse(id).map_err(|d| {
        if is_toml(&loaded.sources.files[id].path) {
            d
        } else {
            d.hide_line()
        }
    })?;
    stack.push(identity.clone());
    let imports: Vec<_> = parsed
        .recipe
        .as_ref()
        .map(|m| m.import.clone())
        .unwrap_or_default();
    for import in imports {
        let target = match origin {
            Origin::Disk(path) => Origin::Disk(
                path.parent()
                    .unwrap_or(Path::new(""))
                    .join(import.get_ref()),
            ),
            Origin::Embedded(key) => Origin::Embedded(normalize(
                &Path::new(key)
                    .parent()
                    .unwrap_or(Path::new(""))
                    .join(import.get_ref()),
            )),
        };
        read_tree(
            &target,
            Some(&(id, import.span())),
            loaded,
            stack,
            seen,
            roots,
        )?;
    }
    stack.pop();
    seen.push(identity);
    loaded.files.push((id, parsed));
    Ok(())
}

/// The text of `origin` (read from disk, or shipped), refused with `located` where an import may
/// not go or cannot be read.
fn source_file(
    origin: &Origin,
    imported: bool,
    identity: &Origin,
    loaded: &Loaded,
    roots: &Roots,
    located: &dyn Fn(&Loaded, String, &str) -> Error,
) -> Result<SourceFile> {
    Ok(match origin {
        Origin::Disk(path) => {
            if imported {
                if let Err((message, hint)) = import_allowed(path, identity, roots.tree) {
                    return Err(located(loaded, message, &hint));
                }
            }
            let text = match read_text(path) {
                Ok(text) => text,
                Err(ReadError::Utf8(d)) => return Err((*d).into()),
                Err(ReadError::Other(e)) => {
                    return Err(if imported {
                        located(
                            loaded,
                            format!("cannot read imported file {}: {e}", path.display()),
                            "imports are relative to the importing file",
                        )
                    } else {
                        Error::usage(
                            format!("cannot read recipe {}: {e}", path.display()),
                            Some(format!(
                                "shipped recipes: {}; or pass the path of a recipe file",
                                shipped::recipe_names().join(", ")
                            )),
                        )
                    })
                }
            };
            SourceFile {
                path: path.clone(),
                text,
                dir: Some(path.parent().map(Path::to_path_buf).unwrap_or_default()),
            }
        }
        Origin::Embedded(key) => {
            let text = shipped::get(key).ok_or_else(|| {
                located(
                    loaded,
                    format!("no shipped file `{key}`"),
                    "shipped recipes may import only other shipped files",
                )
            })?;
            SourceFile {
                path: PathBuf::from(format!("{}{key}", super::SHIPPED_ORIGIN)),
                text: text.to_string(),
                // Materialized copies of the shipped files: companion scripts resolve there.
                dir: roots.shipped.join(key).parent().map(Path::to_path_buf),
            }
        }
    })
}

fn is_toml(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "toml")
}

/// An import names a `.toml` file inside the recipe's tree (symlinks resolved).
fn import_allowed(
    path: &Path,
    identity: &Origin,
    tree: Option<&Tree>,
) -> std::result::Result<(), (String, String)> {
    if !is_toml(path) {
        return Err((
            format!("cannot import {}: not a .toml file", path.display()),
            "imports name recipe fragments (`.toml` files)".into(),
        ));
    }
    if let (Some(tree), Origin::Disk(real)) = (tree, identity) {
        if real.is_absolute() && !tree.holds(real) {
            return Err((
                format!(
                    "cannot import {}: it is outside the recipe's tree {}",
                    real.display(),
                    tree.describe()
                ),
                format!("imports stay under {}; copy the file there, or run a recipe that lives above both", tree.describe()),
            ));
        }
    }
    Ok(())
}

enum ReadError {
    Other(String),
    /// Not UTF-8: located at the first bad byte.
    Utf8(Box<Diagnostic>),
}

/// A recipe file's text: a regular file of at most [`MAX_FILE_BYTES`], valid UTF-8.
fn read_text(path: &Path) -> std::result::Result<String, ReadError> {
    let meta = std::fs::metadata(path).map_err(|e| ReadError::Other(e.to_string()))?;
    if !meta.is_file() {
        let what = if meta.is_dir() {
            "a directory"
        } else {
            "not a regular file (a device, FIFO or socket)"
        };
        return Err(ReadError::Other(format!("it is {what}")));
    }
    let too_big = || {
        ReadError::Other(format!(
            "it is larger than {} MiB, the limit for a recipe file",
            MAX_FILE_BYTES >> 20
        ))
    };
    if meta.len() > MAX_FILE_BYTES {
        return Err(too_big());
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| ReadError::Other(e.to_string()))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(too_big());
    }
    String::from_utf8(bytes).map_err(|e| ReadError::Utf8(Box::new(utf8_diag(path, &e))))
}

/// Where the first byte that is not UTF-8 is, as `file:line:col`.
fn utf8_diag(path: &Path, e: &std::string::FromUtf8Error) -> Diagnostic {
    let bytes = e.as_bytes();
    let good = e.utf8_error().valid_up_to();
    let valid = std::str::from_utf8(&bytes[..good]).expect("valid up to here");
    let binary = bytes.contains(&0);
    let d = Diagnostic::at(
        path,
        valid,
        good..good,
        format!("byte 0x{:02x} at offset {good} is not UTF-8", bytes[good]),
    )
    .with_hint(if binary {
        "this is not a text file; pass the path of a recipe (a UTF-8 .toml file)".to_string()
    } else {
        "recipes are UTF-8 text; convert the file, e.g. `iconv -f latin1 -t utf-8 FILE`".to_string()
    });
    if is_toml(path) && !binary {
        d
    } else {
        d.hide_line()
    }
}

/// What makes two origins the same file: `lib/../a.toml` and `a.toml` are one file.
fn identity(origin: &Origin) -> Origin {
    match origin {
        Origin::Disk(path) => {
            Origin::Disk(std::fs::canonicalize(path).unwrap_or_else(|_| path.clone()))
        }
        Origin::Embedded(_) => origin.clone(),
    }
}

/// `recipes/../toolchains/x.toml` → `toolchains/x.toml`.
fn normalize(path: &Path) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                parts.pop();
            }
            Component::Normal(s) => parts.push(s.to_str().unwrap_or_default()),
            _ => {}
        }
    }
    parts.join("/")
}
