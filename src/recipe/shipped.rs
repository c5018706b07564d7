//! Recipes, toolchains and profiles shipped inside the binary.

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

/// Embedded files by their path in the repository.
pub const FILES: &[(&str, &str)] = &[
    ("recipes/demo.toml", include_str!("../../recipes/demo.toml")),
    (
        "recipes/glm5-nvfp4-sm120.toml",
        include_str!("../../recipes/glm5-nvfp4-sm120.toml"),
    ),
    (
        "recipes/llama-cuda.toml",
        include_str!("../../recipes/llama-cuda.toml"),
    ),
    (
        "recipes/tiny-cpu.toml",
        include_str!("../../recipes/tiny-cpu.toml"),
    ),
    (
        "recipes/tiny-cpu/make_tiny_gguf.py",
        include_str!("../../recipes/tiny-cpu/make_tiny_gguf.py"),
    ),
    (
        "toolchains/cuda-12.8.toml",
        include_str!("../../toolchains/cuda-12.8.toml"),
    ),
    (
        "toolchains/cuda-13.0.1.toml",
        include_str!("../../toolchains/cuda-13.0.1.toml"),
    ),
    (
        "toolchains/sglang-0.5.9-cu130.toml",
        include_str!("../../toolchains/sglang-0.5.9-cu130.toml"),
    ),
];

pub fn get(key: &str) -> Option<&'static str> {
    FILES.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

/// Names of shipped recipes (`recipes/NAME.toml`).
pub fn recipe_names() -> Vec<String> {
    FILES
        .iter()
        .filter_map(|(k, _)| k.strip_prefix("recipes/")?.strip_suffix(".toml"))
        .filter(|n| !n.contains('/'))
        .map(str::to_string)
        .collect()
}

/// Write the shipped files under `root` (only those that differ), so an embedded recipe's
/// companion files (scripts it runs, `inputs` it hashes) exist on disk: `root/recipes/...`.
pub fn materialize(root: &std::path::Path) -> crate::error::Result<()> {
    for (key, text) in FILES {
        let path = root.join(key);
        if std::fs::read(&path).ok().as_deref() != Some(text.as_bytes()) {
            crate::engine::state::write_atomic(&path, text.as_bytes())?;
        }
    }
    Ok(())
}
