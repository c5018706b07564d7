//! `[profile.NAME]` tables → resolved profiles (through `extends`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use toml::Spanned;

use super::super::{wire, Api, Ceiling, Profile};
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
    evidence_args(r, file, p, &mut out.evidence_args)?;
    if let Some(c) = &p.ceiling {
        let path = r.expand(file, &c.get_ref().llama_bench)?;
        if !path.starts_with('/') {
            return Err(r
                .diag(
                    file,
                    c.get_ref().llama_bench.span(),
                    format!("`ceiling.llama_bench` must be an absolute path, got `{path}`"),
                )
                .with_hint(
                    "write e.g. `ceiling = { llama_bench = \"${prefix}/llama-bench.json\" }`",
                )
                .into());
        }
        out.ceiling = Some(Ceiling::LlamaBench(PathBuf::from(path)));
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

/// `evidence_args` (appended to an extended profile's): flags, each with at most one value.
fn evidence_args(
    r: &mut Resolver,
    file: usize,
    p: &wire::Profile,
    out: &mut Vec<String>,
) -> Result<()> {
    let own: Vec<String> = p
        .evidence_args
        .iter()
        .map(|a| r.expand(file, a))
        .collect::<Result<_>>()?;
    if let Err(i) = super::super::args::flag_pairs(&own) {
        return Err(r
            .diag(
                file,
                p.evidence_args[i].span(),
                format!(
                    "`evidence_args` word `{}` is not a flag, nor the one value of the flag before it",
                    own[i]
                ),
            )
            .with_hint("write flags, each with at most one value: `evidence_args = [\"-lv\", \"5\"]`")
            .into());
    }
    out.extend(own);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::host::Facts;
    use crate::paths::StatePaths;
    use crate::recipe::{load, Ceiling, LoadOptions, Recipe};

    fn load_text(text: &str) -> crate::error::Result<Recipe> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("r.toml");
        std::fs::write(&file, text).unwrap();
        let paths = StatePaths::new(dir.path().join("state"), None);
        let facts = Facts::new();
        let opts = LoadOptions {
            overrides: &[],
            facts: &facts,
            paths: &paths,
        };
        load(Some(file.to_str().unwrap()), &opts)
    }

    const BASE: &str = r#"
[recipe]
name = "r"
[vars]
prefix = "/opt/r"
[profile.base]
cmd = ["server"]
args = ["-lv", "4", "-t", "2"]
evidence_args = ["-lv", "5"]
ceiling = { llama_bench = "${prefix}/llama-bench.json" }
"#;

    #[test]
    fn evidence_args_and_the_ceiling_are_inherited_through_extends() {
        let r = load_text(&format!(
            "{BASE}[profile.spec]\nextends = \"base\"\nargs = [\"-md\", \"d.gguf\"]\nevidence_args = [\"--log-timestamps\"]\n"
        ))
        .unwrap();
        let spec = &r.profiles["spec"];
        assert_eq!(spec.args, ["-lv", "4", "-t", "2", "-md", "d.gguf"]);
        assert_eq!(spec.evidence_args, ["-lv", "5", "--log-timestamps"]);
        assert_eq!(
            spec.judged_args(),
            ["-lv", "5", "-t", "2", "-md", "d.gguf", "--log-timestamps"]
        );
        assert_eq!(
            spec.ceiling,
            Some(Ceiling::LlamaBench("/opt/r/llama-bench.json".into()))
        );
        assert_eq!(r.profiles["base"].evidence_args, ["-lv", "5"]);
    }

    #[test]
    fn evidence_args_and_the_ceiling_are_parsed_strictly_with_locations() {
        let typo = load_text(&BASE.replace("evidence_args", "evidence_arg"))
            .unwrap_err()
            .to_string();
        assert!(
            typo.contains("evidence_arg") && typo.contains("r.toml:9:"),
            "{typo}"
        );
        let stray = load_text(&BASE.replace(r#"["-lv", "5"]"#, r#"["5", "-lv"]"#))
            .unwrap_err()
            .to_string();
        assert!(
            stray.contains("word `5` is not a flag") && stray.contains("r.toml:9:"),
            "{stray}"
        );
        let key = load_text(&BASE.replace("llama_bench =", "llama_bnech ="))
            .unwrap_err()
            .to_string();
        assert!(
            key.contains("llama_bnech") && key.contains("r.toml:10:"),
            "{key}"
        );
        let relative = load_text(&BASE.replace("${prefix}/llama-bench.json", "lb.json"))
            .unwrap_err()
            .to_string();
        assert!(relative.contains("must be an absolute path"), "{relative}");
    }
}
