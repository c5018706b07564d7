//! The shipped recipes (files in `crate::embedded`): the defaults, their names, and writing them
//! to disk for their companion files.

/// The recipe `kiln up` runs when none is named, on a host with an NVIDIA GPU.
pub const DEFAULT: &str = "glm5-nvfp4-sm120";

/// The recipe `kiln up` runs when none is named and no NVIDIA GPU is present: the whole loop on CPU.
pub const CPU_DEFAULTS: &[&str] = &["tiny-cpu", "demo"];

/// The default recipe for a host with `gpus` NVIDIA GPUs.
pub fn default_for(gpus: usize) -> &'static str {
    if gpus > 0 {
        return DEFAULT;
    }
    CPU_DEFAULTS
        .iter()
        .copied()
        .find(|n| get(&format!("recipes/{n}.toml")).is_some())
        .unwrap_or("demo")
}

/// The shipped file at `key` (its path in the repository: `recipes/demo.toml`).
pub fn get(key: &str) -> Option<&'static str> {
    crate::embedded::get(key)
}

/// Names of shipped recipes (`recipes/NAME.toml`).
pub fn recipe_names() -> Vec<String> {
    crate::embedded::names_in("recipes")
        .into_iter()
        .map(str::to_string)
        .collect()
}

/// Write the shipped files under `root` (only those that differ), so an embedded recipe's
/// companion files (scripts it runs, `inputs` it hashes) exist on disk: `root/recipes/...`.
pub fn materialize(root: &std::path::Path) -> crate::error::Result<()> {
    for (key, text) in crate::embedded::all() {
        let path = root.join(key);
        if std::fs::read(&path).ok().as_deref() != Some(text.as_bytes()) {
            crate::fs::write_atomic(&path, text.as_bytes())?;
        }
    }
    Ok(())
}
