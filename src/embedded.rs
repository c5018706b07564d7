//! Every file shipped inside the binary, by its path in the repository: recipes and their
//! companion files, toolchains, patch sets (`recipes/patches/`) and log signatures
//! (`recipes/signatures/`). The one registry: add a shipped file here and nowhere else.

/// (path in the repository, text).
const FILES: &[(&str, &str)] = &[
    ("recipes/demo.toml", include_str!("../recipes/demo.toml")),
    (
        "recipes/glm5-nvfp4-sm120.toml",
        include_str!("../recipes/glm5-nvfp4-sm120.toml"),
    ),
    (
        "recipes/llama-cuda.toml",
        include_str!("../recipes/llama-cuda.toml"),
    ),
    (
        "recipes/sglang-cuda.toml",
        include_str!("../recipes/sglang-cuda.toml"),
    ),
    (
        "recipes/sglang-cuda/make_tiny_hf.py",
        include_str!("../recipes/sglang-cuda/make_tiny_hf.py"),
    ),
    (
        "recipes/sm120-sass.toml",
        include_str!("../recipes/sm120-sass.toml"),
    ),
    (
        "recipes/sm120-sass/axpy.cu",
        include_str!("../recipes/sm120-sass/axpy.cu"),
    ),
    (
        "recipes/sm120-sass/axpy.ptx",
        include_str!("../recipes/sm120-sass/axpy.ptx"),
    ),
    (
        "recipes/tiny-cpu.toml",
        include_str!("../recipes/tiny-cpu.toml"),
    ),
    (
        "recipes/tiny-cpu/make_tiny_gguf.py",
        include_str!("../recipes/tiny-cpu/make_tiny_gguf.py"),
    ),
    (
        "toolchains/cuda-12.8.toml",
        include_str!("../toolchains/cuda-12.8.toml"),
    ),
    (
        "toolchains/cuda-13.0.1.toml",
        include_str!("../toolchains/cuda-13.0.1.toml"),
    ),
    (
        "toolchains/sglang-0.5.9-cu130.toml",
        include_str!("../toolchains/sglang-0.5.9-cu130.toml"),
    ),
    (
        "recipes/patches/sglang-0.5.9-sm120.toml",
        include_str!("../recipes/patches/sglang-0.5.9-sm120.toml"),
    ),
    (
        "recipes/patches/flashinfer-0.6.3-sm120.toml",
        include_str!("../recipes/patches/flashinfer-0.6.3-sm120.toml"),
    ),
    (
        "recipes/signatures/sglang-0.5.9.toml",
        include_str!("../recipes/signatures/sglang-0.5.9.toml"),
    ),
    (
        "recipes/signatures/sglang-0.5.15.toml",
        include_str!("../recipes/signatures/sglang-0.5.15.toml"),
    ),
    (
        "recipes/signatures/llama-server.toml",
        include_str!("../recipes/signatures/llama-server.toml"),
    ),
    (
        "recipes/signatures/torch-symm-mem-probe.toml",
        include_str!("../recipes/signatures/torch-symm-mem-probe.toml"),
    ),
];

/// Where shipped patch sets live.
pub(crate) const PATCH_SETS: &str = "recipes/patches";
/// Where shipped log-signature sets live.
pub(crate) const SIGNATURES: &str = "recipes/signatures";

/// The shipped file at `path` (as in the repository: `recipes/demo.toml`).
pub(crate) fn get(path: &str) -> Option<&'static str> {
    FILES.iter().find(|(k, _)| *k == path).map(|(_, v)| *v)
}

/// Every shipped file: (path, text).
pub(crate) fn all() -> impl Iterator<Item = (&'static str, &'static str)> {
    FILES.iter().copied()
}

/// The shipped `dir/NAME.toml` for `name`.
pub(crate) fn named(dir: &str, name: &str) -> Option<&'static str> {
    FILES
        .iter()
        .find(|(k, _)| {
            k.strip_prefix(dir)
                .and_then(|r| r.strip_prefix('/'))
                .and_then(|r| r.strip_suffix(".toml"))
                == Some(name)
        })
        .map(|(_, v)| *v)
}

/// The NAMEs of the shipped `dir/NAME.toml` files directly in `dir`, in registry order.
pub(crate) fn names_in(dir: &str) -> Vec<&'static str> {
    FILES
        .iter()
        .filter_map(|(k, _)| {
            k.strip_prefix(dir)?
                .strip_prefix('/')?
                .strip_suffix(".toml")
        })
        .filter(|n| !n.contains('/'))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registered_file_is_listed_once_and_found_by_name() {
        let mut paths: Vec<&str> = all().map(|(p, _)| p).collect();
        paths.sort_unstable();
        paths.dedup();
        assert_eq!(paths.len(), FILES.len());
        assert!(names_in(PATCH_SETS).contains(&"sglang-0.5.9-sm120"));
        assert_eq!(
            named(SIGNATURES, "llama-server"),
            get("recipes/signatures/llama-server.toml")
        );
        assert!(names_in("recipes").contains(&"demo"));
        assert!(!names_in("recipes").iter().any(|n| n.contains("patches")));
    }

    /// A file under recipes/patches or recipes/signatures that is not registered here would
    /// silently not ship: every one must be in the registry.
    #[test]
    fn every_patch_set_and_signature_file_in_the_repository_is_registered() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        for dir in [PATCH_SETS, SIGNATURES] {
            for entry in std::fs::read_dir(root.join(dir)).unwrap() {
                let name = entry.unwrap().file_name().to_string_lossy().into_owned();
                let path = format!("{dir}/{name}");
                assert!(get(&path).is_some(), "{path} is not in src/embedded.rs");
            }
        }
    }
}
