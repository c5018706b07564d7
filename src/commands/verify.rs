//! `kiln verify`: greedy A/B between two profiles of a recipe, served one after the other.

use std::time::Duration;

use super::serve::{launch, pick_profile, signatures_for};
use super::Settings;
use crate::bench::ab;
use crate::cli::VerifyArgs;
use crate::error::{Error, Result};
use crate::recipe::Recipe;
use crate::serve;

pub fn run(settings: &Settings, args: &VerifyArgs) -> Result<u8> {
    let recipe = settings.load_recipe(&args.recipe)?;
    crate::process::catch_interrupts();
    let (candidate, profile) = pick_profile(&recipe, args.profile.as_deref())?;
    let against = match (&args.against, &profile.baseline) {
        (Some(a), _) | (None, Some(a)) => a.clone(),
        (None, None) => {
            return Err(Error::usage(
                format!("profile `{candidate}` names no baseline to compare with"),
                Some("pass --against PROFILE, or set `baseline = \"NAME\"` in the profile".into()),
            ))
        }
    };
    let cmp = compare(
        settings,
        &recipe,
        &against,
        &candidate,
        args.max_tokens,
        args.min_prefix,
    )?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&cmp).expect("comparisons serialize")
        );
    } else {
        print!("{}", cmp.render(&against, &candidate));
    }
    Error::finding(cmp.exit_code(), || {
        (
            format!(
                "greedy A/B `{candidate}` against `{against}`: {} ({:.1}% agreement)",
                cmp.verdict,
                cmp.agreement * 100.0
            ),
            Some("the table above shows where each prompt diverged".into()),
        )
    })
}

/// Serve `against`, collect greedy outputs, stop it; the same for `candidate`; compare.
pub(super) fn compare(
    settings: &Settings,
    recipe: &Recipe,
    against: &str,
    candidate: &str,
    max_tokens: u32,
    min_prefix: usize,
) -> Result<ab::Comparison> {
    let mut outputs = Vec::new();
    for name in [against, candidate] {
        let (name, profile) = pick_profile(recipe, Some(name))?;
        let sigs = signatures_for(profile)?;
        let timeout = profile.timeout.unwrap_or(serve::DEFAULT_TIMEOUT);
        let running = launch(settings, recipe, &name, profile, &sigs, false, timeout)?;
        let Some(url) = running.record.url.clone() else {
            running.stop(&settings.state_dir);
            return Err(Error::usage(
                format!("profile `{name}` has no port or url to query"),
                None,
            ));
        };
        let got = ab::collect(&url, running.api, max_tokens);
        running.stop(&settings.state_dir);
        outputs.push(got?);
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(ab::compare(&outputs[0], &outputs[1], min_prefix))
}
