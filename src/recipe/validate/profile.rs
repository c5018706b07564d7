//! `[profile.NAME]` tables → resolved profiles (through `extends`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use toml::Spanned;

use super::super::{wire, Api, Profile};
use super::vars::Resolver;
use crate::diagnostic::did_you_mean;
use crate::error::Result;
use crate::units;

pub(super) fn profile(
    r: &mut Resolver,
    all: &BTreeMap<String, (usize, &wire::Profile)>,
    name: &str,
    stack: &mut Vec<String>,
) -> Result<Profile> {
    let (file, p) = all[name];
    let mut out = match &p.extends {
        None => Profile::default(),
        Some(base) => {
            known_profile(r, all, file, base, "extends")?;
            if stack.iter().any(|s| s == base.get_ref()) || base.get_ref() == name {
                return Err(r
                    .diag(file, base.span(), "profile `extends` cycle")
                    .with_hint("a profile cannot extend itself")
                    .into());
            }
            stack.push(name.to_string());
            let b = profile(r, all, base.get_ref(), stack)?;
            stack.pop();
            b
        }
    };
    out.description = p.description.clone().or(out.description);
    if let Some(cmd) = &p.cmd {
        out.cmd = cmd
            .iter()
            .map(|a| r.expand(file, a))
            .collect::<Result<_>>()?;
    }
    for a in &p.args {
        out.args.push(r.expand(file, a)?);
    }
    for (k, v) in &p.env {
        out.env.insert(r.env_name(file, k)?, r.expand(file, v)?);
    }
    for e in &p.expect {
        out.expect.push(e.get_ref().clone());
    }
    if let Some(u) = &p.url {
        out.url = Some(r.expand(file, u)?);
    }
    if let Some(port) = &p.port {
        let text = r.expand(file, port)?;
        out.port = Some(text.trim().parse::<u16>().map_err(|_| {
            r.diag(
                file,
                port.span(),
                format!("`port` must be a TCP port number, got `{text}`"),
            )
            .with_hint("write e.g. `port = \"30000\"` or `port = \"${port}\"`")
        })?);
    }
    if let Some(api) = &p.api {
        let text = r.expand(file, api)?;
        let Some(known) = Api::named(&text) else {
            return Err(r
                .diag(file, api.span(), format!("unknown api `{text}`"))
                .with_hint(Api::hint_for(&text))
                .into());
        };
        out.api = Some(known);
    }
    if let Some(ready) = &p.ready {
        let text = r.expand(file, ready)?;
        if !text.starts_with('/') {
            return Err(r
                .diag(
                    file,
                    ready.span(),
                    format!("`ready` must be a path on the server, got `{text}`"),
                )
                .with_hint("write e.g. `ready = \"/health_generate\"`")
                .into());
        }
        out.ready = Some(text);
    }
    if let Some(sig) = &p.signatures {
        out.signatures = Some(r.expand(file, sig)?);
    }
    if let Some(base) = &p.baseline {
        known_profile(r, all, file, base, "baseline")?;
        out.baseline = Some(base.get_ref().clone());
    }
    if let Some(t) = &p.timeout {
        let text = r.expand(file, t)?;
        out.timeout = Some(units::parse_duration(&text).map_err(|e| {
            r.diag(file, t.span(), format!("bad `timeout`: {e}"))
                .with_hint("write e.g. `timeout = \"30m\"`")
        })?);
    }
    out.dir = PathBuf::from(&r.builtins["recipe.dir"]);
    Ok(out)
}

/// `key = "NAME"` must name another profile.
fn known_profile(
    r: &Resolver,
    all: &BTreeMap<String, (usize, &wire::Profile)>,
    file: usize,
    name: &Spanned<String>,
    key: &str,
) -> Result<()> {
    if all.contains_key(name.get_ref()) {
        return Ok(());
    }
    let hint = did_you_mean(name.get_ref(), all.keys().map(String::as_str))
        .map_or(format!("`{key}` names another [profile.NAME]"), |b| {
            format!("did you mean `{b}`?")
        });
    Err(r
        .diag(
            file,
            name.span(),
            format!("unknown profile `{}`", name.get_ref()),
        )
        .with_hint(hint)
        .into())
}
