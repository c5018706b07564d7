//! `kiln verify`: greedy A/B between two profiles of a recipe, served one after the other.

use super::Settings;
use crate::cli::VerifyArgs;
use crate::error::{Error, Result};
use crate::pipeline::{self, AbOptions, Variant};

pub(super) fn run(settings: &Settings, args: &VerifyArgs) -> Result<u8> {
    crate::report::json_lines(args.json);
    let recipe = settings.load_recipe(&args.recipe)?;
    let s = settings.session(&recipe);
    crate::process::catch_interrupts();
    let candidate = Variant::pick(&recipe, args.profile.as_deref())?;
    let against = match (&args.against, &candidate.profile.baseline) {
        (Some(a), _) | (None, Some(a)) => a.clone(),
        (None, None) => {
            return Err(Error::usage(
                format!(
                    "profile `{}` names no baseline to compare with",
                    candidate.name
                ),
                Some("pass --against PROFILE, or set `baseline = \"NAME\"` in the profile".into()),
            ))
        }
    };
    let baseline = Variant::pick(&recipe, Some(&against))?;
    super::preflight::launch(
        settings,
        &args.recipe,
        &recipe,
        &[Some(candidate.name), Some(baseline.name)],
    )?;
    let opts = AbOptions {
        max_tokens: args.max_tokens,
        min_prefix: args.min_prefix,
    };
    let cmp = pipeline::greedy_ab(s, baseline, candidate, &opts, &mut super::show::say)?;
    super::show::ab(&cmp, baseline.name, candidate.name);
    Error::finding(cmp.exit_code(), || {
        (
            format!(
                "greedy A/B `{}` against `{against}`: {} ({:.1}% agreement)",
                candidate.name,
                cmp.verdict,
                cmp.agreement * 100.0
            ),
            Some(if args.json {
                "the `greedy_ab` event shows where each prompt diverged".into()
            } else {
                "the table above shows where each prompt diverged".into()
            }),
        )
    })
}
