//! `requires = [...]` (recipe and step): each entry parsed strictly, errors at the entry's bytes.

use toml::Spanned;

use super::super::wire;
use crate::error::Result;
use crate::requires::{self, Requirement};
use crate::source::Sources;

/// The entries of one `requires` list, in order; a repeated tool keeps its highest minimum.
pub(super) fn entries(
    sources: &Sources,
    file: usize,
    list: &[Spanned<String>],
) -> Result<Vec<Requirement>> {
    let mut out: Vec<Requirement> = Vec::new();
    for entry in list {
        let req = requires::parse(entry.get_ref()).map_err(|e| {
            let loc = sources.within(sources.loc(file, entry.span()), e.offset, e.len);
            sources.diag(loc, e.message).with_hint(e.hint)
        })?;
        merge(&mut out, req);
    }
    Ok(out)
}

/// `[recipe] requires` of every loaded file (imports first), merged.
pub(super) fn of_recipe(
    sources: &Sources,
    files: &[(usize, wire::File)],
) -> Result<Vec<Requirement>> {
    let mut out = Vec::new();
    for (file, f) in files {
        if let Some(meta) = &f.recipe {
            for req in entries(sources, *file, &meta.requires)? {
                merge(&mut out, req);
            }
        }
    }
    Ok(out)
}

fn merge(out: &mut Vec<Requirement>, req: Requirement) {
    match out.iter_mut().find(|r| r.tool == req.tool) {
        Some(have) => have.raise_min(&req),
        None => out.push(req),
    }
}
