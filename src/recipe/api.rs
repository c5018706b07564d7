//! The generation APIs a server profile speaks, declared once: their names (in recipes and on
//! `kiln bench --api`), and the endpoint each streams from. The client (`bench::client`) and the
//! recipe validator both read this table.

use serde::Serialize;

use crate::diagnostic::did_you_mean;
use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    Sglang,
    Openai,
}

/// Every API: (name, value, the endpoint it streams from).
pub const APIS: &[(&str, Api, &str)] = &[
    ("sglang", Api::Sglang, "/generate"),
    ("openai", Api::Openai, "/v1/completions"),
];

impl Api {
    /// The API called `name`, if there is one.
    pub fn named(name: &str) -> Option<Api> {
        APIS.iter().find(|(n, ..)| *n == name).map(|(_, a, _)| *a)
    }

    /// Like [`Api::named`], with an error that names the choices.
    pub fn parse(name: &str) -> Result<Api> {
        Api::named(name)
            .ok_or_else(|| Error::usage(format!("unknown api `{name}`"), Some(Api::hint_for(name))))
    }

    /// "did you mean `openai`?", else every API with its endpoint.
    pub fn hint_for(name: &str) -> String {
        did_you_mean(name, APIS.iter().map(|(n, ..)| *n)).map_or_else(
            || {
                let all: Vec<String> = APIS
                    .iter()
                    .map(|(n, _, endpoint)| format!("`{n}` ({endpoint})"))
                    .collect();
                format!("`api` is {}", all.join(" or "))
            },
            |b| format!("did you mean `{b}`?"),
        )
    }

    pub fn name(self) -> &'static str {
        APIS.iter()
            .find(|(_, a, _)| *a == self)
            .map_or("openai", |(n, ..)| n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_errors() {
        for (name, api, _) in APIS {
            assert_eq!(Api::named(name), Some(*api));
            assert_eq!(api.name(), *name);
        }
        let e = Api::parse("opneai").unwrap_err().render();
        assert!(
            e.contains("unknown api `opneai`") && e.contains("did you mean `openai`?"),
            "{e}"
        );
        assert!(Api::hint_for("zzz").contains("`sglang` (/generate) or `openai` (/v1/completions)"));
    }
}
