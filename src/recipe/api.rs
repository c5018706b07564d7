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

/// One API: its name, the endpoint it streams from, and the path that answers 200 once the
/// server is up (a profile's `ready` overrides it).
#[derive(Debug)]
pub struct ApiSpec {
    pub name: &'static str,
    pub api: Api,
    pub endpoint: &'static str,
    pub ready: &'static str,
}

/// Every API.
pub const APIS: &[ApiSpec] = &[
    ApiSpec {
        name: "sglang",
        api: Api::Sglang,
        endpoint: "/generate",
        ready: "/health_generate",
    },
    ApiSpec {
        name: "openai",
        api: Api::Openai,
        endpoint: "/v1/completions",
        ready: "/health",
    },
];

impl Api {
    /// The API called `name`, if there is one.
    pub fn named(name: &str) -> Option<Api> {
        APIS.iter().find(|s| s.name == name).map(|s| s.api)
    }

    /// Like [`Api::named`], with an error that names the choices.
    pub fn parse(name: &str) -> Result<Api> {
        Api::named(name)
            .ok_or_else(|| Error::usage(format!("unknown api `{name}`"), Some(Api::hint_for(name))))
    }

    /// "did you mean `openai`?", else every API with its endpoint.
    pub fn hint_for(name: &str) -> String {
        did_you_mean(name, APIS.iter().map(|s| s.name)).map_or_else(
            || {
                let all: Vec<String> = APIS
                    .iter()
                    .map(|s| format!("`{}` ({})", s.name, s.endpoint))
                    .collect();
                format!("`api` is {}", all.join(" or "))
            },
            |b| format!("did you mean `{b}`?"),
        )
    }

    /// Its row of [`APIS`].
    pub fn spec(self) -> &'static ApiSpec {
        APIS.iter()
            .find(|s| s.api == self)
            .expect("every Api has its row in APIS")
    }

    pub fn name(self) -> &'static str {
        self.spec().name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_errors() {
        for spec in APIS {
            assert_eq!(Api::named(spec.name), Some(spec.api));
            assert_eq!(spec.api.name(), spec.name);
        }
        let e = Api::parse("opneai").unwrap_err().render();
        assert!(
            e.contains("unknown api `opneai`") && e.contains("did you mean `openai`?"),
            "{e}"
        );
        assert!(Api::hint_for("zzz").contains("`sglang` (/generate) or `openai` (/v1/completions)"));
    }
}
