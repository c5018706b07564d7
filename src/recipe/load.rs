//! Finding a recipe (path or shipped name), reading it and its imports, in merge order.

use std::path::{Component, Path, PathBuf};

use super::{shipped, validate, wire, Recipe};
use crate::error::{Error, Result};
use crate::host::Facts;
use crate::paths::StatePaths;
use crate::source::{SourceFile, Sources};

pub struct LoadOptions<'a> {
    /// `--set key=value`, in order.
    pub overrides: &'a [(String, String)],
    pub facts: &'a Facts,
    /// The state directory (and its cache) the recipe's `${kiln.*}` paths point into.
    pub paths: &'a StatePaths,
}

/// Where a file lives: on disk, or inside the binary.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Origin {
    Disk(PathBuf),
    Embedded(String),
}

pub(super) struct Loaded {
    pub sources: Sources,
    /// Parsed files, imports before the files that import them; the root is last.
    pub files: Vec<(usize, wire::File)>,
}

/// Load a recipe by path or shipped name (`None`: the default recipe).
pub fn load(spec: Option<&str>, opts: &LoadOptions) -> Result<Recipe> {
    let origin = resolve(spec)?;
    let shipped_root = opts.paths.shipped();
    if matches!(origin, Origin::Embedded(_)) {
        shipped::materialize(&shipped_root)?;
    }
    let mut loaded = Loaded {
        sources: Sources::default(),
        files: Vec::new(),
    };
    let mut seen = Vec::new();
    read_tree(
        &origin,
        None,
        &mut loaded,
        &mut Vec::new(),
        &mut seen,
        &shipped_root,
    )?;
    validate::build(&loaded, opts)
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

fn read_tree(
    origin: &Origin,
    imported_at: Option<&(usize, std::ops::Range<usize>)>,
    loaded: &mut Loaded,
    stack: &mut Vec<Origin>,
    seen: &mut Vec<Origin>,
    shipped_root: &Path,
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
    let file = match origin {
        Origin::Disk(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| match imported_at {
                Some(_) => located(
                    loaded,
                    format!("cannot read imported file {}: {e}", path.display()),
                    "imports are relative to the importing file",
                ),
                None => Error::usage(
                    format!("cannot read recipe {}: {e}", path.display()),
                    Some(format!(
                        "shipped recipes: {}; or pass the path of a recipe file",
                        shipped::recipe_names().join(", ")
                    )),
                ),
            })?;
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
                path: PathBuf::from(format!("<kiln>/{key}")),
                text: text.to_string(),
                // Materialized copies of the shipped files: companion scripts resolve there.
                dir: shipped_root.join(key).parent().map(Path::to_path_buf),
            }
        }
    };
    let id = loaded.sources.add(file);
    let parsed: wire::File = loaded.sources.parse(id)?;
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
            shipped_root,
        )?;
    }
    stack.pop();
    seen.push(identity);
    loaded.files.push((id, parsed));
    Ok(())
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
