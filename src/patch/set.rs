//! Patch-set files: the strict TOML mirror (unknown keys rejected, spans kept) and its
//! validation into domain types, with every error located at file:line:col.

use std::ops::Range as Span;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use super::op_table;
use super::ops::Edit;
use super::syntax;
use crate::diagnostic::{did_you_mean, Diagnostic};
use crate::embedded;
use crate::error::{Error, Result};
use crate::source::{SourceFile, Sources};
use crate::version::{Range, Version};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileWire {
    patchset: MetaWire,
    #[serde(rename = "patch")]
    patches: Vec<PatchWire>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MetaWire {
    name: Spanned<String>,
    description: Option<String>,
    package: Spanned<String>,
    versions: Spanned<String>,
    root: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PatchWire {
    id: Spanned<String>,
    file: Spanned<String>,
    rationale: String,
    upstream: Option<String>,
    fixed_in: Option<Spanned<String>>,
    #[serde(default)]
    experimental: bool,
    #[serde(default)]
    requires: Vec<Spanned<String>>,
    edits: Spanned<Vec<Spanned<EditWire>>>,
    post: Option<PostWire>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EditWire {
    op: Spanned<String>,
    dict: Option<Spanned<String>>,
    key: Option<Spanned<String>>,
    value: Option<Spanned<String>>,
    copy_from: Option<Spanned<String>>,
    function: Option<Spanned<String>>,
    name: Option<Spanned<String>>,
    after: Option<Spanned<String>>,
    module: Option<Spanned<String>>,
    target: Option<Spanned<String>>,
    code: Option<Spanned<String>>,
    call: Option<Spanned<String>>,
    kwarg: Option<Spanned<String>>,
    from: Option<Spanned<String>>,
    to: Option<Spanned<String>>,
    diff: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PostWire {
    #[serde(default)]
    contains: Vec<String>,
    #[serde(default)]
    absent: Vec<String>,
}

/// A validated patch set.
#[derive(Debug, Clone)]
pub struct PatchSet {
    pub name: String,
    pub description: Option<String>,
    /// The distribution name, as in its METADATA (`flashinfer-python`).
    pub package: String,
    pub versions: Range,
    /// The directory inside site-packages that patch files are relative to (`flashinfer`).
    pub root: String,
    pub patches: Vec<Patch>,
    /// Where the set came from, as shown to people (`<embedded>/recipes/patches/x.toml`).
    pub origin: PathBuf,
    /// The directory a `requires` on another set resolves paths against; `None` when embedded.
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct Patch {
    pub id: String,
    /// Relative to the package root.
    pub file: String,
    pub rationale: String,
    pub upstream: Option<String>,
    /// Upstream fixed it in this version: skip the patch when the installed version is at least this.
    pub fixed_in: Option<Version>,
    pub experimental: bool,
    pub requires: Vec<Requirement>,
    pub edits: Vec<Edit>,
    pub post: Post,
}

/// A patch that must be in effect for another to be applied: in this set, or in another one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    Local(String),
    Other { set: String, id: String },
}

/// Checks on a patched file beyond "it parses and every edit is present".
#[derive(Debug, Clone, Default)]
pub struct Post {
    pub contains: Vec<String>,
    pub absent: Vec<String>,
}

/// Load a patch set by path, or by the name of a shipped one.
pub fn load(spec: &str) -> Result<PatchSet> {
    let path = Path::new(spec);
    let file = if path.exists() || spec.contains('/') || spec.ends_with(".toml") {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io(format!("cannot read patch set {}", path.display()), e))?;
        SourceFile {
            path: path.to_path_buf(),
            text,
            dir: Some(path.parent().map(Path::to_path_buf).unwrap_or_default()),
        }
    } else if let Some(text) = embedded::named(embedded::PATCH_SETS, spec) {
        SourceFile {
            path: PathBuf::from(format!("<embedded>/recipes/patches/{spec}.toml")),
            text: text.to_string(),
            dir: None,
        }
    } else {
        let names = embedded::names_in(embedded::PATCH_SETS);
        let close = did_you_mean(spec, names.iter().copied())
            .map(|n| format!("did you mean `{n}`? "))
            .unwrap_or_default();
        return Err(Error::usage(
            format!("patch set `{spec}` not found"),
            Some(format!(
                "{close}pass a path to a patch-set file, or one of the shipped sets: {}",
                names.join(", ")
            )),
        ));
    };
    parse(file)
}

/// Parse and validate one patch-set file.
pub fn parse(file: SourceFile) -> Result<PatchSet> {
    let mut sources = Sources::default();
    let index = sources.add(file);
    let wire: FileWire = sources.parse(index).map_err(|d| {
        let hint = d
            .hint
            .clone()
            .filter(|h| !h.contains("docs/recipes.md"))
            .unwrap_or_else(|| "see docs/patches.md for the patch-set format".into());
        Error::from(d.with_hint(hint))
    })?;
    let source = &sources.files[index];
    Validator { file: source }.build(wire)
}

struct Validator<'a> {
    file: &'a SourceFile,
}

impl Validator<'_> {
    fn diag(
        &self,
        span: Span<usize>,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> Error {
        Diagnostic::at(&self.file.path, &self.file.text, span, message)
            .with_hint(hint)
            .into()
    }

    fn build(&self, wire: FileWire) -> Result<PatchSet> {
        let meta = wire.patchset;
        if meta.name.get_ref().trim().is_empty() {
            return Err(self.diag(
                meta.name.span(),
                "the patch set's name is empty",
                "name it, e.g. `sglang-0.5.9-sm120`",
            ));
        }
        let versions = Range::parse(meta.versions.get_ref()).map_err(|e| {
            self.diag(
                meta.versions.span(),
                format!("invalid version range: {e}"),
                "write e.g. `>=0.5.9, <0.6`",
            )
        })?;
        let root = match &meta.root {
            Some(r) => self.relative(r, "root")?,
            None => meta.package.get_ref().replace('-', "_"),
        };
        let mut patches: Vec<Patch> = Vec::new();
        for p in &wire.patches {
            if patches.iter().any(|q| q.id == *p.id.get_ref()) {
                return Err(self.diag(
                    p.id.span(),
                    format!("duplicate patch id `{}`", p.id.get_ref()),
                    "give every patch its own id",
                ));
            }
            patches.push(self.patch(p)?);
        }
        if patches.is_empty() {
            return Err(self.diag(
                meta.name.span(),
                "the patch set has no patches",
                "add a `[[patch]]` table",
            ));
        }
        let ids: Vec<&str> = wire
            .patches
            .iter()
            .map(|p| p.id.get_ref().as_str())
            .collect();
        for p in &wire.patches {
            for r in &p.requires {
                if !r.get_ref().contains(':') && !ids.contains(&r.get_ref().as_str()) {
                    let hint = match did_you_mean(r.get_ref(), ids.iter().copied()) {
                        Some(c) => format!("did you mean `{c}`?"),
                        None => "name a patch of this set, or `SET:ID` for a patch of another set"
                            .into(),
                    };
                    return Err(self.diag(
                        r.span(),
                        format!("`requires` names unknown patch `{}`", r.get_ref()),
                        hint,
                    ));
                }
                if r.get_ref() == p.id.get_ref() {
                    return Err(self.diag(
                        r.span(),
                        "a patch cannot require itself",
                        "remove this entry",
                    ));
                }
            }
        }
        Ok(PatchSet {
            name: meta.name.into_inner(),
            description: meta.description,
            package: meta.package.into_inner(),
            versions,
            root,
            patches,
            origin: self.file.path.clone(),
            dir: self.file.dir.clone(),
        })
    }

    /// A relative path that stays inside its base.
    fn relative(&self, value: &Spanned<String>, what: &str) -> Result<String> {
        let path = Path::new(value.get_ref());
        let inside = !value.get_ref().is_empty()
            && path.components().all(|c| matches!(c, Component::Normal(_)));
        if !inside {
            return Err(self.diag(
                value.span(),
                format!("`{what}` must be a relative path inside the package, without `..`"),
                "write it relative to the package directory, e.g. `srt/layers/communicator.py`",
            ));
        }
        Ok(value.get_ref().clone())
    }

    fn patch(&self, p: &PatchWire) -> Result<Patch> {
        let file = self.relative(&p.file, "file")?;
        let fixed_in = match &p.fixed_in {
            Some(v) => Some(Version::parse(v.get_ref()).ok_or_else(|| {
                self.diag(
                    v.span(),
                    format!("`{}` is not a version", v.get_ref()),
                    "write e.g. `fixed_in = \"0.5.14\"`",
                )
            })?),
            None => None,
        };
        let requires = p
            .requires
            .iter()
            .map(|r| match r.get_ref().split_once(':') {
                Some((set, id)) if !set.is_empty() && !id.is_empty() => Ok(Requirement::Other {
                    set: set.into(),
                    id: id.into(),
                }),
                Some(_) => Err(self.diag(
                    r.span(),
                    "write `SET:ID`",
                    "e.g. `flashinfer-0.6.3-sm120:S3b`",
                )),
                None => Ok(Requirement::Local(r.get_ref().clone())),
            })
            .collect::<Result<Vec<_>>>()?;
        if p.edits.get_ref().is_empty() {
            return Err(self.diag(
                p.edits.span(),
                "`edits` is empty",
                "give at least one edit, e.g. `{ op = \"diff\", diff = \"...\" }`",
            ));
        }
        let edits = p
            .edits
            .get_ref()
            .iter()
            .map(|e| self.edit(e))
            .collect::<Result<Vec<_>>>()?;
        let post = p
            .post
            .as_ref()
            .map(|w| Post {
                contains: w.contains.clone(),
                absent: w.absent.clone(),
            })
            .unwrap_or_default();
        Ok(Patch {
            id: p.id.get_ref().clone(),
            file,
            rationale: p.rationale.clone(),
            upstream: p.upstream.clone(),
            fixed_in,
            experimental: p.experimental,
            requires,
            edits,
            post,
        })
    }

    fn edit(&self, e: &Spanned<EditWire>) -> Result<Edit> {
        let span = e.span();
        let e = e.get_ref();
        let op = e.op.get_ref().as_str();
        let fields: [(&str, &Option<Spanned<String>>); 15] = [
            ("dict", &e.dict),
            ("key", &e.key),
            ("value", &e.value),
            ("copy_from", &e.copy_from),
            ("function", &e.function),
            ("name", &e.name),
            ("after", &e.after),
            ("module", &e.module),
            ("target", &e.target),
            ("code", &e.code),
            ("call", &e.call),
            ("kwarg", &e.kwarg),
            ("from", &e.from),
            ("to", &e.to),
            ("diff", &e.diff),
        ];
        let Some(spec) = op_table::op(op) else {
            let names: Vec<&str> = op_table::OPS.iter().map(|o| o.name).collect();
            let hint = match did_you_mean(op, names.iter().copied()) {
                Some(c) => format!("did you mean `{c}`?"),
                None => format!("operations: {}", names.join(", ")),
            };
            return Err(self.diag(e.op.span(), format!("unknown operation `{op}`"), hint));
        };
        let (required, optional) = (spec.required, spec.optional);
        for (name, value) in fields {
            if let Some(v) = value {
                if !required.contains(&name) && !optional.contains(&name) {
                    let mut valid: Vec<&str> = required.iter().chain(optional).copied().collect();
                    valid.insert(0, "op");
                    return Err(self.diag(
                        v.span(),
                        format!("`{name}` does not apply to operation `{op}`"),
                        format!("keys of `{op}`: {}", valid.join(", ")),
                    ));
                }
            }
        }
        let get = |name: &str| -> Option<&Spanned<String>> {
            fields
                .iter()
                .find(|(n, _)| *n == name)
                .and_then(|(_, v)| v.as_ref())
        };
        // Python fragments must parse on their own, so a typo is caught here and not in the file.
        for name in ["key", "value", "copy_from", "code", "from", "to"] {
            if let Some(v) = get(name) {
                if v.get_ref().trim().is_empty()
                    || syntax::first_error(&syntax::parse(v.get_ref())).is_some()
                {
                    return Err(self.diag(
                        v.span(),
                        format!("`{name}` is not valid Python: {}", v.get_ref()),
                        "write Python source text, e.g. `key = \"12\"` or `value = \"'text'\"`",
                    ));
                }
            }
        }
        let diag = |span, message: String, hint: String| self.diag(span, message, hint);
        (spec.build)(&op_table::Fields {
            op,
            span,
            values: &fields,
            diag: &diag,
        })
    }
}
