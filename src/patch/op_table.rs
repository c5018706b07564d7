//! Patch-set operations, declared once: each operation's name, its required and optional keys,
//! and how its keys become an [`Edit`]. Applying an edit is `ops`' match on `Edit`, which the
//! compiler keeps exhaustive. Adding an operation: a row here, its `Edit` variant and its splice.

use std::ops::Range;

use toml::Spanned;

use super::diff::UnifiedDiff;
use super::ops::{DictValue, Edit};
use crate::error::{Error, Result};

pub(super) struct Op {
    pub name: &'static str,
    pub required: &'static [&'static str],
    pub optional: &'static [&'static str],
    pub build: fn(&Fields) -> Result<Edit>,
}

/// An edit's keys as written, and how to report a problem in them.
pub(super) struct Fields<'a> {
    pub op: &'a str,
    /// The whole edit table.
    pub span: Range<usize>,
    pub values: &'a [(&'static str, &'a Option<Spanned<String>>)],
    pub diag: &'a dyn Fn(Range<usize>, String, String) -> Error,
}

impl Fields<'_> {
    pub(super) fn get(&self, name: &str) -> Option<&Spanned<String>> {
        self.values
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.as_ref())
    }

    fn text(&self, name: &str) -> Option<String> {
        self.get(name).map(|v| v.get_ref().clone())
    }

    fn need(&self, name: &str) -> Result<String> {
        self.text(name).ok_or_else(|| {
            (self.diag)(
                self.span.clone(),
                format!("operation `{}` needs `{name}`", self.op),
                format!("add `{name} = \"...\"` to this edit"),
            )
        })
    }
}

pub(super) const OPS: &[Op] = &[
    Op {
        name: "dict-add-key",
        required: &["dict", "key"],
        optional: &["value", "copy_from"],
        build: dict_add_key,
    },
    Op {
        name: "or-chain-add-name",
        required: &["function", "name"],
        optional: &["after"],
        build: |f| {
            Ok(Edit::OrChainAddName {
                function: f.need("function")?,
                name: f.need("name")?,
                after: f.text("after"),
            })
        },
    },
    Op {
        name: "import-add-name",
        required: &["module", "name"],
        optional: &["after"],
        build: |f| {
            Ok(Edit::ImportAddName {
                module: f.need("module")?,
                name: f.need("name")?,
                after: f.text("after"),
            })
        },
    },
    Op {
        name: "insert-after-assignment",
        required: &["target", "code"],
        optional: &[],
        build: |f| {
            Ok(Edit::InsertAfterAssignment {
                target: f.need("target")?,
                code: f.need("code")?,
            })
        },
    },
    Op {
        name: "replace-call-kwarg-list",
        required: &["call", "kwarg", "to"],
        optional: &["function", "from"],
        build: |f| {
            Ok(Edit::ReplaceCallKwargList {
                function: f.text("function"),
                call: f.need("call")?,
                kwarg: f.need("kwarg")?,
                from: f.text("from"),
                to: f.need("to")?,
            })
        },
    },
    Op {
        name: "diff",
        required: &["diff"],
        optional: &[],
        build: diff,
    },
];

/// The operation called `name`.
pub(super) fn op(name: &str) -> Option<&'static Op> {
    OPS.iter().find(|o| o.name == name)
}

fn dict_add_key(f: &Fields) -> Result<Edit> {
    let value = match (f.get("value"), f.get("copy_from")) {
        (Some(v), None) => DictValue::Given(v.get_ref().clone()),
        (None, Some(c)) => DictValue::CopyFrom(c.get_ref().clone()),
        _ => {
            return Err((f.diag)(
                f.span.clone(),
                "`dict-add-key` needs exactly one of `value` and `copy_from`".into(),
                "give the value as Python text, or the key to copy it from".into(),
            ))
        }
    };
    Ok(Edit::DictAddKey {
        dict: f.need("dict")?,
        key: f.need("key")?,
        value,
    })
}

fn diff(f: &Fields) -> Result<Edit> {
    let text = f.get("diff").ok_or_else(|| f.need("diff").unwrap_err())?;
    let diff = UnifiedDiff::parse(text.get_ref()).map_err(|m| {
        (f.diag)(
            text.span(),
            format!("invalid unified diff: {m}"),
            "write the output of `diff -u` or `git diff` for this one file".into(),
        )
    })?;
    Ok(Edit::Diff(diff))
}
