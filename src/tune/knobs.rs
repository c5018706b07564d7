//! The settings a server takes per request, by API: `kiln tune --vary top_k=1,40` varies them
//! inside one launch (sent with every request of that variant's A/B and benchmark) instead of
//! relaunching. Only fields the server reads from the request body belong here; each row names
//! where that is documented.
//!
//! llama.cpp's server README lists `speculative.n_max`, `speculative.n_min` and
//! `speculative.p_min` as `/completion` fields, but the pinned llama.cpp (llama-cpp-python
//! 0.3.36) compiles them out (`tools/server/server-schema.cpp`: "to keep things simple, we disable
//! speculative parameter adjustments for now", inside `#if 0`): a request carrying them decodes
//! with the launch's draft settings. They are left out, so `draft_max` stays a launch setting
//! (a recipe variable) rather than a knob that silently changes nothing.

use std::collections::BTreeSet;

use super::Axis;
use crate::error::{Error, Result};
use crate::recipe::{Api, Recipe};

/// One per-request field.
pub(crate) struct Knob {
    pub key: &'static str,
    pub api: Api,
    pub what: &'static str,
}

const fn k(api: Api, key: &'static str, what: &'static str) -> Knob {
    Knob { key, api, what }
}

/// llama.cpp `tools/server/server-schema.cpp` (the OpenAI-compatible endpoints read the same
/// fields); SGLang's `sampling_params` (`srt/sampling/sampling_params.py`).
pub(crate) const KNOBS: &[Knob] = &[
    k(Api::Openai, "temperature", "sampling temperature"),
    k(Api::Openai, "top_k", "top-k sampling"),
    k(Api::Openai, "top_p", "nucleus sampling"),
    k(Api::Openai, "min_p", "min-p sampling"),
    k(Api::Openai, "typical_p", "locally typical sampling"),
    k(Api::Openai, "repeat_penalty", "repetition penalty"),
    k(
        Api::Openai,
        "repeat_last_n",
        "tokens the repetition penalty looks back",
    ),
    k(Api::Openai, "presence_penalty", "presence penalty"),
    k(Api::Openai, "frequency_penalty", "frequency penalty"),
    k(
        Api::Openai,
        "n_probs",
        "top-N probabilities returned per token",
    ),
    k(Api::Openai, "seed", "sampler seed"),
    k(Api::Sglang, "temperature", "sampling temperature"),
    k(Api::Sglang, "top_k", "top-k sampling"),
    k(Api::Sglang, "top_p", "nucleus sampling"),
    k(Api::Sglang, "min_p", "min-p sampling"),
    k(Api::Sglang, "repetition_penalty", "repetition penalty"),
    k(Api::Sglang, "presence_penalty", "presence penalty"),
    k(Api::Sglang, "frequency_penalty", "frequency penalty"),
];

/// Each axis is a server flag, a recipe variable, or a per-request knob of the profile's API
/// (a typo would silently change nothing). The per-request keys come back.
pub(crate) fn classify(recipe: &Recipe, api: Api, axes: &[Axis]) -> Result<BTreeSet<String>> {
    let mut request = BTreeSet::new();
    for a in axes.iter().filter(|a| !a.is_flag()) {
        if recipe.vars.contains_key(&a.key) {
            continue;
        }
        if find(api, &a.key).is_some() {
            request.insert(a.key.clone());
            continue;
        }
        let known = recipe.vars.keys().map(String::as_str).chain(names(api));
        let hint = crate::diagnostic::did_you_mean(&a.key, known).map_or(
            format!(
                "name a variable of the recipe, a server flag (`--vary=-ub=256,1024`) or a per-request field ({})",
                names(api).join(", ")
            ),
            |b| format!("did you mean `{b}`?"),
        );
        return Err(Error::usage(
            format!(
                "`--vary {}`: recipe `{}` has no variable `{}`, and it is no per-request field of the {} API",
                a.key,
                recipe.name,
                a.key,
                api.name()
            ),
            Some(hint),
        ));
    }
    Ok(request)
}

/// The knob `key` of `api`, if requests carry it.
pub(crate) fn find(api: Api, key: &str) -> Option<&'static Knob> {
    KNOBS.iter().find(|k| k.api == api && k.key == key)
}

/// The per-request keys of `api`, for a hint.
pub(crate) fn names(api: Api) -> Vec<&'static str> {
    KNOBS
        .iter()
        .filter(|k| k.api == api)
        .map(|k| k.key)
        .collect()
}

/// A request value as JSON: a number when it parses as one, else a string.
pub(crate) fn value(v: &str) -> serde_json::Value {
    if let Ok(i) = v.parse::<i64>() {
        return i.into();
    }
    v.parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or_else(|| v.into(), serde_json::Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knobs_are_per_api_and_the_compiled_out_draft_fields_are_not_knobs() {
        assert!(find(Api::Openai, "top_k").is_some());
        assert!(find(Api::Sglang, "repeat_penalty").is_none());
        assert!(find(Api::Openai, "speculative.n_max").is_none());
        assert_eq!(value("40"), serde_json::json!(40));
        assert_eq!(value("0.5"), serde_json::json!(0.5));
        assert_eq!(value("abc"), serde_json::json!("abc"));
    }
}
