//! Container images from recipes: a generated Dockerfile (`kiln image dockerfile`) and a
//! reproducible OCI image-layout archive written straight from prefix directories
//! (`kiln image export`).

pub(crate) mod archive;
pub(crate) mod dockerfile;
pub(crate) mod layer;
mod stream;

use std::collections::BTreeMap;

use crate::recipe::Recipe;

/// The environment every step of a recipe shares (its `[env]` table, in effect), minus anything
/// that looks like a secret: that is what an image bakes in. Secrets never enter an image.
pub(crate) fn shared_env(recipe: &Recipe) -> BTreeMap<String, String> {
    let mut steps = recipe.steps.iter();
    let Some(first) = steps.next() else {
        return BTreeMap::new();
    };
    let mut env = first.env.clone();
    for step in steps {
        env.retain(|k, v| step.env.get(k) == Some(v));
    }
    env.retain(|k, _| !crate::redact::is_secret_name(k));
    env
}
