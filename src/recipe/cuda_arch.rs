//! What a recipe's CUDA toolkits are, and where its arch lists disagree with them: the family
//! target (`12.0f`, `sm_120f`) needs nvcc ≥ 12.9, so an arch list with it under a 12.8 toolkit
//! fails at build time. `kiln plan` (and the doctor) say so before anything is built.

use std::collections::BTreeSet;

use super::{CudaSource, Recipe, StepKind};
use crate::version::Version;

/// The oldest CUDA whose nvcc knows the family targets (`sm_120f`).
pub const FAMILY_MIN: &str = "12.9";

/// One line per `cuda` step: its id, version, source and what it must offer.
pub fn toolkits(recipe: &Recipe) -> Vec<String> {
    let choice = if recipe.vars.contains_key("cuda_source") {
        "; `--set cuda_source=runfile|pypi` chooses"
    } else {
        ""
    };
    recipe
        .steps
        .iter()
        .filter_map(|s| match &s.kind {
            StepKind::Cuda(c) => {
                let source = match &c.source {
                    CudaSource::Runfile { .. } => {
                        "NVIDIA's runfile (source = \"runfile\")".to_string()
                    }
                    CudaSource::Pypi { wheels } => {
                        format!("{} PyPI wheels (source = \"pypi\")", wheels.len())
                    }
                };
                Some(format!(
                    "{}  CUDA {} from {source}{choice}; needs {} in {}",
                    s.id,
                    c.version,
                    c.tools.join(", "),
                    c.install_path.display()
                ))
            }
            _ => None,
        })
        .collect()
}

/// `kiln plan`'s CUDA section: the toolkits and every disagreement (empty without `cuda` steps).
pub fn render(recipe: &Recipe) -> String {
    let lines = toolkits(recipe);
    if lines.is_empty() {
        return String::new();
    }
    let mut out = String::from("cuda (the toolkits the recipe provisions):\n");
    for l in lines {
        out.push_str(&format!("  {l}\n"));
    }
    for w in family_conflicts(recipe) {
        out.push_str(&format!("  warning: {w}\n"));
    }
    out
}

/// Arch lists in step environments that ask for a family target a toolkit the step builds
/// with cannot compile: "step `flashinfer`: FLASHINFER_CUDA_ARCH_LIST=12.0f needs …".
pub fn family_conflicts(recipe: &Recipe) -> Vec<String> {
    let cudas: Vec<(usize, &str)> = recipe
        .steps
        .iter()
        .enumerate()
        .filter_map(|(i, s)| match &s.kind {
            StepKind::Cuda(c) => Some((i, c.version.as_str())),
            _ => None,
        })
        .collect();
    if cudas.is_empty() {
        return Vec::new();
    }
    let min = Version::parse(FAMILY_MIN).expect("a version");
    let mut out = Vec::new();
    for (i, step) in recipe.steps.iter().enumerate() {
        let family: Vec<(&String, &String)> = step
            .env
            .iter()
            .filter(|(_, v)| has_family_target(v))
            .collect();
        if family.is_empty() {
            continue;
        }
        for (k, v) in &family {
            out.extend(pre_family(&step.id, k, v));
        }
        // The toolkits this step depends on; none named: every toolkit of the recipe.
        let deps = ancestors(recipe, i);
        let mine: Vec<&(usize, &str)> = cudas.iter().filter(|(c, _)| deps.contains(c)).collect();
        let chosen: Vec<&(usize, &str)> = if mine.is_empty() {
            cudas.iter().collect()
        } else {
            mine
        };
        for (c, version) in chosen {
            if Version::parse(version).is_some_and(|v| v < min) {
                for (k, v) in &family {
                    out.push(format!(
                        "step `{}`: {k}={v} asks for a family target (`f`), which needs nvcc ≥ {FAMILY_MIN}; step `{}` provisions CUDA {version}: drop the `f` (e.g. `cuda_arch_suffix = \"\"`) or take CUDA ≥ {FAMILY_MIN}",
                        step.id, recipe.steps[*c].id
                    ));
                }
            }
        }
    }
    out
}

/// Whether an arch list names a family target: `12.0f`, `sm_120f`, `compute_120f`.
fn has_family_target(value: &str) -> bool {
    !family_targets(value).is_empty()
}

/// The family targets of an arch list, as written (`12.0f`, `sm_120f`), with their major
/// compute capability (12 for both).
fn family_targets(value: &str) -> Vec<(&str, u32)> {
    value
        .split(|c: char| c.is_whitespace() || c == ',' || c == ';' || c == '=')
        .filter_map(|tok| {
            let t = tok
                .strip_prefix("sm_")
                .or_else(|| tok.strip_prefix("compute_"))
                .unwrap_or(tok);
            let n = t.strip_suffix('f')?;
            let ok = !n.is_empty()
                && n.chars().all(|c| c.is_ascii_digit() || c == '.')
                && n.chars().next().is_some_and(|c| c.is_ascii_digit());
            // `12.0` is major 12; `120` (sm_ form) is major 12 too.
            let major = match n.split_once('.') {
                Some((m, _)) => m.parse().ok()?,
                None => n.parse::<u32>().ok()? / 10,
            };
            ok.then_some((tok, major))
        })
        .collect()
}

/// The first compute capability with family targets: there is no `sm_90f` (Hopper's
/// arch-specific target is `9.0a`).
const FAMILY_FIRST_MAJOR: u32 = 10;

/// An arch list's targets as nvcc takes them (the `target` filter: `${x|target}`): a family
/// target of a generation that has none (`9.0f`, `sm_90f`) becomes the arch-specific one
/// (`9.0a`, `sm_90a`); every other token is kept as written (`12.0f`, `8.9`).
pub fn target(list: &str) -> String {
    let mut out = String::with_capacity(list.len() + 1);
    let mut token = String::new();
    let flush = |token: &mut String, out: &mut String| {
        let pre = family_targets(token)
            .first()
            .is_some_and(|(_, major)| *major < FAMILY_FIRST_MAJOR);
        if pre {
            token.pop();
            token.push('a');
        }
        out.push_str(token);
        token.clear();
    };
    for c in list.chars() {
        if c.is_whitespace() || c == ',' || c == ';' || c == '=' {
            flush(&mut token, &mut out);
            out.push(c);
        } else {
            token.push(c);
        }
    }
    flush(&mut token, &mut out);
    out
}

/// Family targets named for a GPU generation that has none (`9.0f`): "… use `9.0a`".
fn pre_family(step: &str, key: &str, value: &str) -> Vec<String> {
    family_targets(value)
        .into_iter()
        .filter(|(_, major)| *major < FAMILY_FIRST_MAJOR)
        .map(|(tok, _)| {
            let specific = format!("{}a", tok.trim_end_matches('f'));
            format!(
                "step `{step}`: {key}={value} names `{tok}`, but family targets begin at sm_100 (compute capability {FAMILY_FIRST_MAJOR}.0): use the arch-specific `{specific}` instead (`${{VAR|target}}` picks it)"
            )
        })
        .collect()
}

/// Indexes of every step `i` needs, directly or not.
fn ancestors(recipe: &Recipe, i: usize) -> BTreeSet<usize> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![i];
    while let Some(j) = stack.pop() {
        for n in &recipe.steps[j].needs {
            if let Some(k) = recipe.steps.iter().position(|s| &s.id == n) {
                if seen.insert(k) {
                    stack.push(k);
                }
            }
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::has_family_target;

    #[test]
    fn family_targets_are_found_in_arch_lists() {
        assert!(has_family_target("12.0f"));
        assert!(has_family_target("9.0;12.0f"));
        assert!(has_family_target("-arch=sm_120f"));
        assert!(!has_family_target("12.0"));
        assert!(!has_family_target("12.0a"));
        assert!(!has_family_target("sm_120"));
        assert!(!has_family_target("half"));
        assert!(!has_family_target("f"));
    }

    #[test]
    fn the_target_filter_takes_the_arch_specific_suffix_where_no_family_exists() {
        assert_eq!(super::target("9.0f"), "9.0a");
        assert_eq!(super::target("12.0f"), "12.0f");
        assert_eq!(
            super::target("8.9;9.0f 10.0f,sm_90f"),
            "8.9;9.0a 10.0f,sm_90a"
        );
        assert_eq!(super::target("9.0"), "9.0");
        assert_eq!(super::target("half"), "half");
    }

    #[test]
    fn a_family_target_below_sm_100_is_named_with_its_arch_specific_spelling() {
        let w = super::pre_family("flashinfer", "FLASHINFER_CUDA_ARCH_LIST", "9.0f");
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains("names `9.0f`") && w[0].contains("`9.0a`"),
            "{w:?}"
        );
        assert!(super::pre_family("f", "K", "sm_90f")[0].contains("`sm_90a`"));
        assert!(super::pre_family("f", "K", "12.0f;10.0f").is_empty());
    }
}
