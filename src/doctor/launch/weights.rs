//! A checkpoint's own files: the size of its weights and its quantization, read without loading
//! anything (an index's `metadata.total_size`, safetensors headers, file sizes, `config.json`).

use std::io::Read;
use std::path::Path;

/// The largest safetensors header kiln reads (real ones are a few MiB at most).
const MAX_HEADER: u64 = 100 << 20;
/// The largest JSON file (config, index) kiln reads.
const MAX_JSON: u64 = 64 << 20;

/// Bytes of weights, and how they were learned.
pub(crate) struct Size {
    pub bytes: u64,
    pub from: String,
}

fn read_json(path: &Path) -> Option<serde_json::Value> {
    // Non-blocking and regular files only: a FIFO in a model directory is refused, not read.
    let text = crate::bounded::read_state(path, MAX_JSON).ok()?;
    serde_json::from_str(&text).ok()
}

/// The weights' size: `model.safetensors.index.json`'s `metadata.total_size`, else the sum of
/// the tensors in every `*.safetensors` header, else the sizes of the weight files (a single
/// file, e.g. GGUF, is its size).
pub(crate) fn size(model: &Path) -> Option<Size> {
    if model.is_file() {
        let bytes = std::fs::metadata(model).ok()?.len();
        return Some(Size {
            bytes,
            from: format!("the size of {}", model.display()),
        });
    }
    let index = model.join("model.safetensors.index.json");
    if let Some(total) = read_json(&index)
        .as_ref()
        .and_then(|v| v["metadata"]["total_size"].as_u64())
    {
        return Some(Size {
            bytes: total,
            from: format!("{}'s metadata.total_size", index.display()),
        });
    }
    let files: Vec<_> = std::fs::read_dir(model)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    let shards: Vec<_> = files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    if !shards.is_empty() {
        let sums: Option<u64> = shards.iter().map(|p| header_bytes(p)).sum();
        if let Some(bytes) = sums {
            return Some(Size {
                bytes,
                from: format!("the headers of {} safetensors file(s)", shards.len()),
            });
        }
    }
    let weights: Vec<_> = files
        .iter()
        .filter(|p| {
            p.extension().is_some_and(|e| {
                ["safetensors", "bin", "pt", "pth", "gguf"]
                    .iter()
                    .any(|w| e == *w)
            })
        })
        .collect();
    if weights.is_empty() {
        return None;
    }
    let bytes = weights
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    Some(Size {
        bytes,
        from: format!("the sizes of {} weight file(s)", weights.len()),
    })
}

/// Tensor bytes in one safetensors file: its header (8-byte little-endian length, then JSON
/// whose entries carry `data_offsets`), the largest end offset.
fn header_bytes(path: &Path) -> Option<u64> {
    let mut f = std::fs::File::open(path).ok()?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len).ok()?;
    let n = u64::from_le_bytes(len);
    if n > MAX_HEADER {
        return None;
    }
    let mut header = Vec::new();
    f.take(n).read_to_end(&mut header).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&header).ok()?;
    v.as_object()?
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .map(|(_, t)| t["data_offsets"][1].as_u64())
        .try_fold(0u64, |max, end| end.map(|e| max.max(e)))
}

/// What `config.json` (or ModelOpt's `hf_quant_config.json`) says of the quantization:
/// (method, algo, format, the file it came from).
pub(crate) fn quantization(
    model: &Path,
) -> Option<(String, Option<String>, Option<String>, String)> {
    let config = model.join("config.json");
    if let Some(q) = read_json(&config).map(|v| v["quantization_config"].clone()) {
        if let Some(method) = q["quant_method"].as_str() {
            let format = q["format"].as_str().map(str::to_string).or_else(|| {
                q["config_groups"]
                    .as_object()
                    .and_then(|g| g.values().find_map(|c| c["format"].as_str()))
                    .map(str::to_string)
            });
            return Some((
                method.to_string(),
                q["quant_algo"].as_str().map(str::to_string),
                format,
                format!("{} quantization_config", config.display()),
            ));
        }
    }
    let hf = model.join("hf_quant_config.json");
    let v = read_json(&hf)?;
    let algo = v["quantization"]["quant_algo"].as_str()?;
    Some((
        "modelopt".into(),
        Some(algo.to_string()),
        None,
        format!("{} quantization.quant_algo", hf.display()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safetensors_headers_give_the_tensor_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let header = br#"{"__metadata__":{"format":"pt"},"a":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]},"b":{"dtype":"F16","shape":[4],"data_offsets":[8,16]}}"#;
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(header);
        file.extend_from_slice(&[0u8; 16]);
        std::fs::write(dir.path().join("model.safetensors"), file).unwrap();
        let s = size(dir.path()).unwrap();
        assert_eq!(s.bytes, 16);
        assert!(s.from.contains("headers of 1"), "{}", s.from);
        std::fs::write(
            dir.path().join("model.safetensors.index.json"),
            r#"{"metadata":{"total_size":123},"weight_map":{}}"#,
        )
        .unwrap();
        assert_eq!(size(dir.path()).unwrap().bytes, 123);
    }

    #[test]
    fn config_json_names_the_quantization() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"quantization_config":{"quant_method":"modelopt","quant_algo":"NVFP4"}}"#,
        )
        .unwrap();
        let (m, a, _, _) = quantization(dir.path()).unwrap();
        assert_eq!((m.as_str(), a.as_deref()), ("modelopt", Some("NVFP4")));
    }
}
