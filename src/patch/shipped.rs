//! Patch sets shipped inside the binary (`recipes/patches/NAME.toml`).

/// (name, file text).
const SETS: &[(&str, &str)] = &[
    (
        "sglang-0.5.9-sm120",
        include_str!("../../recipes/patches/sglang-0.5.9-sm120.toml"),
    ),
    (
        "flashinfer-0.6.3-sm120",
        include_str!("../../recipes/patches/flashinfer-0.6.3-sm120.toml"),
    ),
];

pub fn get(name: &str) -> Option<&'static str> {
    SETS.iter().find(|(n, _)| *n == name).map(|(_, text)| *text)
}

pub fn names() -> Vec<&'static str> {
    SETS.iter().map(|(n, _)| *n).collect()
}
