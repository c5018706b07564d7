//! The launch preflight's data: which servers kiln knows (their flags for parallelism, model,
//! draft, port, quantization), what each quantization needs of the GPU, and the flag lists of
//! pinned server versions. A new server, GPU generation or server version is a row here.

use super::super::Status;

/// How a server names the things the preflight reads from a command line.
pub(crate) struct Server {
    pub name: &'static str,
    pub tp: &'static [&'static str],
    pub dp: &'static [&'static str],
    pub pp: &'static [&'static str],
    pub nnodes: &'static [&'static str],
    /// With this flag, data parallelism runs inside the tensor-parallel group (no more GPUs).
    pub dp_inside_tp: &'static [&'static str],
    pub model: &'static [&'static str],
    pub draft: &'static [&'static str],
    pub port: &'static [&'static str],
    pub quantization: &'static [&'static str],
    /// Layers offloaded to GPUs (llama-server); None: the server always runs on GPUs.
    pub gpu_layers: &'static [&'static str],
    /// The checkpoint is a directory with `config.json` (else one file, e.g. GGUF).
    pub model_is_dir: bool,
    /// argparse accepts unambiguous prefixes of long options (`allow_abbrev`).
    pub abbreviations: bool,
    /// Kernels compiled at first launch (FlashInfer, Triton, torch inductor) into these caches.
    pub jit_caches: bool,
}

pub(crate) const SGLANG: Server = Server {
    name: "SGLang",
    tp: &["--tp-size", "--tensor-parallel-size"],
    dp: &["--dp-size", "--data-parallel-size"],
    pp: &["--pp-size", "--pipeline-parallel-size"],
    nnodes: &["--nnodes"],
    dp_inside_tp: &["--enable-dp-attention"],
    model: &["--model-path", "--model"],
    draft: &[
        "--speculative-draft-model-path",
        "--speculative-draft-model",
    ],
    port: &["--port"],
    quantization: &["--quantization"],
    gpu_layers: &[],
    model_is_dir: true,
    abbreviations: true,
    jit_caches: true,
};

pub(crate) const LLAMA_SERVER: Server = Server {
    name: "llama-server",
    tp: &[],
    dp: &[],
    pp: &[],
    nnodes: &[],
    dp_inside_tp: &[],
    model: &["-m", "--model"],
    draft: &["-md", "--model-draft"],
    port: &["--port"],
    quantization: &[],
    gpu_layers: &["-ngl", "--gpu-layers", "--n-gpu-layers"],
    model_is_dir: false,
    abbreviations: false,
    jit_caches: false,
};

/// The server a profile starts, from its `cmd`: `python -m sglang.launch_server`, `llama-server`.
pub(crate) fn server_of(cmd: &[String]) -> Option<&'static Server> {
    let base = |s: &String| s.rsplit('/').next().unwrap_or(s).to_string();
    if cmd
        .iter()
        .any(|c| c == "sglang.launch_server" || base(c) == "sglang")
    {
        return Some(&SGLANG);
    }
    cmd.first()
        .filter(|c| base(c) == "llama-server")
        .map(|_| &LLAMA_SERVER)
}

/// What a quantization method needs of the GPU: below `min_cc` the launch gets `status`.
pub(crate) struct QuantRow {
    /// Method names as `--quantization` takes them and as kiln normalizes a checkpoint's
    /// `quantization_config` (lowercase).
    pub methods: &'static [&'static str],
    pub min_cc: (u32, u32),
    pub status: Status,
    /// What happens below `min_cc`, and where that is known from.
    pub why: &'static str,
}

pub(crate) const QUANT: &[QuantRow] = &[
    QuantRow {
        methods: &["modelopt_fp4", "nvfp4", "w4a4_nvfp4", "fp4"],
        min_cc: (10, 0),
        status: Status::Fail,
        why: "NVFP4 needs FP4 tensor cores (Blackwell: cc 10.x or 12.x); SGLang 0.5.9's ModelOptFp4Config.get_min_capability() is 100",
    },
    QuantRow {
        methods: &["modelopt_fp8", "w8a8_fp8", "fbgemm_fp8"],
        min_cc: (8, 9),
        status: Status::Fail,
        why: "FP8 matmuls need FP8 tensor cores (cc ≥ 8.9: Ada, Hopper, Blackwell); SGLang 0.5.9's ModelOptFp8Config.get_min_capability() is 89",
    },
    QuantRow {
        methods: &["fp8"],
        min_cc: (8, 0),
        status: Status::Fail,
        why: "SGLang 0.5.9's Fp8Config.get_min_capability() is 80",
    },
    QuantRow {
        methods: &["fp8"],
        min_cc: (8, 9),
        status: Status::Warn,
        why: "FP8 tensor cores need cc ≥ 8.9; below, SGLang runs FP8 checkpoints through a weight-only Marlin kernel (slower)",
    },
];

/// The checkpoint's method, normalized to the names of [`QUANT`], from `config.json`'s
/// `quantization_config` (or `hf_quant_config.json`'s `quantization`): `quant_method`,
/// ModelOpt's `quant_algo`, compressed-tensors' `format`.
pub(crate) fn normalize(method: &str, algo: Option<&str>, format: Option<&str>) -> String {
    let method = method.to_ascii_lowercase();
    let algo = algo.map(str::to_ascii_lowercase);
    let format = format.map(str::to_ascii_lowercase);
    match (method.as_str(), algo.as_deref(), format.as_deref()) {
        ("modelopt", Some(a), _) if a.contains("fp4") => "modelopt_fp4".into(),
        ("modelopt", Some(a), _) if a.contains("fp8") => "modelopt_fp8".into(),
        ("compressed-tensors", _, Some(f)) if f.contains("nvfp4") => "nvfp4".into(),
        ("compressed-tensors", _, Some(f)) if f.contains("float") => "fp8".into(),
        _ => method,
    }
}

/// Flag lists of pinned server versions, generated from the real packages (see each file's
/// header): checked while the server is not installed yet.
pub(crate) fn pinned_flags(server: &Server, version: &str) -> Option<(String, Vec<String>)> {
    let (text, file) = match (server.name, version) {
        ("SGLang", "0.5.9") => (include_str!("sglang-0.5.9.flags"), "sglang-0.5.9.flags"),
        ("SGLang", "0.5.15.post1") => (
            include_str!("sglang-0.5.15.post1.flags"),
            "sglang-0.5.15.post1.flags",
        ),
        _ => return None,
    };
    let flags = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    let from =
        format!("the flag list kiln ships for it (src/doctor/launch/{file}, from the real wheel)");
    Some((from, flags))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_are_found_from_the_command() {
        let cmd = |v: &[&str]| v.iter().map(|s| (*s).to_string()).collect::<Vec<_>>();
        assert_eq!(
            server_of(&cmd(&["/v/bin/python", "-m", "sglang.launch_server"])).map(|s| s.name),
            Some("SGLang")
        );
        assert_eq!(
            server_of(&cmd(&["/p/bin/llama-server"])).map(|s| s.name),
            Some("llama-server")
        );
        assert!(server_of(&cmd(&["python3", "-m", "http.server"])).is_none());
    }

    #[test]
    fn checkpoint_methods_normalize_to_table_names() {
        assert_eq!(normalize("modelopt", Some("NVFP4"), None), "modelopt_fp4");
        assert_eq!(normalize("modelopt", Some("FP8"), None), "modelopt_fp8");
        assert_eq!(
            normalize("compressed-tensors", None, Some("nvfp4-pack-quantized")),
            "nvfp4"
        );
        assert_eq!(normalize("fp8", None, None), "fp8");
        assert!(QUANT.iter().any(|r| r.methods.contains(&"modelopt_fp4")));
    }

    #[test]
    fn the_pinned_sglang_list_has_its_flags() {
        let (_, flags) = pinned_flags(&SGLANG, "0.5.9").unwrap();
        assert!(flags.len() > 300);
        for f in ["--tp-size", "--model-path", "--enable-torch-symm-mem"] {
            assert!(flags.iter().any(|x| x == f), "{f}");
        }
    }
}
