//! What differs between the generation APIs, one arm per API: the request body, how a streamed
//! chunk updates the measurement, and how the server describes itself. Adding an API: its row in
//! `recipe/api.rs` (name, endpoint, readiness path) and its arms here.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::client::{Request, Stream};
use super::wire::escape_controls;
use crate::hash::sha256_bytes;
use crate::recipe::Api;

/// The JSON body that asks `api` for a streamed completion, with `extra` fields set (they win).
pub(super) fn request(api: Api, req: &Request, extra: &[(String, Value)]) -> Value {
    let mut body = base_request(api, req);
    let target = match api {
        Api::Sglang => &mut body["sampling_params"],
        Api::Openai => &mut body,
    };
    for (k, v) in extra {
        target[k.as_str()] = v.clone();
    }
    body
}

fn base_request(api: Api, req: &Request) -> Value {
    let temperature = if req.greedy { 0.0 } else { 1.0 };
    match api {
        Api::Sglang => json!({
            "text": req.prompt,
            "stream": true,
            "sampling_params": {
                "max_new_tokens": req.max_tokens,
                "temperature": temperature,
                "ignore_eos": req.ignore_eos,
            },
        }),
        Api::Openai => json!({
            "prompt": req.prompt,
            "max_tokens": req.max_tokens,
            "temperature": temperature,
            "stream": true,
            "ignore_eos": req.ignore_eos,
            "stream_options": {"include_usage": true},
            "cache_prompt": false,
        }),
    }
}

/// Feed one streamed chunk of `api` into the measurement.
pub(super) fn chunk(api: Api, s: &mut Stream, v: &Value, now: f64) {
    match api {
        Api::Sglang => sglang_chunk(s, v, now),
        Api::Openai => openai_chunk(s, v, now),
    }
}

fn sglang_chunk(s: &mut Stream, v: &Value, now: f64) {
    let meta = &v["meta_info"];
    if let Some(ids) = v["output_ids"].as_array() {
        let ids: Vec<String> = ids.iter().map(std::string::ToString::to_string).collect();
        if cumulative(&s.pieces, &ids, meta["completion_tokens"].as_u64()) {
            s.pieces = ids;
        } else {
            s.pieces.extend(ids);
        }
    }
    if let Some(t) = v["text"].as_str() {
        s.text = t.to_string();
    }
    // Counted from the ids streamed; the server's `completion_tokens` is cross-checked at the end.
    let total = if v["output_ids"].is_array() {
        s.pieces.len() as u64
    } else {
        meta["completion_tokens"].as_u64().unwrap_or(0)
    };
    s.saw_tokens(now, total);
    s.server_tokens = meta["completion_tokens"].as_u64().or(s.server_tokens);
    s.prompt_tokens = meta["prompt_tokens"].as_u64().or(s.prompt_tokens);
    s.verify_ct = meta["spec_verify_ct"].as_u64().or(s.verify_ct);
    if let Some(f) = meta["finish_reason"].get("type").and_then(Value::as_str) {
        s.finish = Some(f.to_string());
    }
}

/// Whether a chunk's `ids` are every id so far (SGLang's default) rather than only the new ones
/// (`--stream-output`). SGLang 0.5.9 says which by `meta_info.completion_tokens`, the request's
/// count so far in every chunk either way (sglang/srt/managers/tokenizer_manager.py:1527-1531,
/// 1554-1560). Without a count that tells, ids that extend the ones so far are taken as
/// cumulative.
fn cumulative(so_far: &[String], ids: &[String], completion_tokens: Option<u64>) -> bool {
    match completion_tokens {
        Some(n) if n == ids.len() as u64 => true,
        Some(n) if n == (so_far.len() + ids.len()) as u64 => false,
        _ => ids.len() >= so_far.len() && ids.starts_with(so_far),
    }
}

fn openai_chunk(s: &mut Stream, v: &Value, now: f64) {
    if let Some(choice) = v["choices"].as_array().and_then(|c| c.first()) {
        if let Some(t) = choice["text"].as_str().filter(|t| !t.is_empty()) {
            s.pieces.push(t.to_string());
            s.text.push_str(t);
            let n = s.count() + 1;
            s.saw_tokens(now, n);
        }
        if let Some(f) = choice["finish_reason"].as_str() {
            s.finish = Some(f.to_string());
        }
    }
    if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
        s.server_tokens = u["completion_tokens"].as_u64();
        s.prompt_tokens = u["prompt_tokens"].as_u64();
    }
    if let Some(r) = v["timings"]["predicted_per_second"].as_f64() {
        s.server_rate = Some(r);
    }
}

/// What SGLang 0.5.9's `/server_info` says that is not a setting of the launch (sglang/srt/
/// entrypoints/http_server.py:596-609 merges these into the server args): the live per-DP state
/// (`internal_states`: last throughput, memory), the scheduler's ready report and its KV budget
/// (managers/scheduler.py:3141-3145, sized from free memory at start-up), the version (shown on
/// its own), the seed drawn anew for every launch without `--random-seed` (server_args.py:853-
/// 854), and where it listens (`host`, `port`): none changes how fast it generates.
const SGLANG_PER_LAUNCH: &[&str] = &[
    "internal_states",
    "status",
    "version",
    "max_total_num_tokens",
    "max_req_input_len",
    "random_seed",
    "host",
    "port",
];

/// (server, model, hash of its settings endpoint, key settings by name) from the settings
/// endpoint `get` reads.
pub(super) fn fingerprint(
    api: Api,
    get: &dyn Fn(&str) -> Option<Value>,
) -> (String, String, String, BTreeMap<String, String>) {
    let none = BTreeMap::new;
    let hash = |v: &serde_json::Value| sha256_bytes(v.to_string().as_bytes())[..16].to_string();
    match api {
        Api::Sglang => match get("/server_info").or_else(|| get("/get_server_info")) {
            Some(mut v) => {
                let version = format!("sglang {}", v["version"].as_str().unwrap_or("?"));
                let model = v["model_path"].as_str().unwrap_or("?").to_string();
                if let Some(o) = v.as_object_mut() {
                    for volatile in SGLANG_PER_LAUNCH {
                        o.remove(*volatile);
                    }
                }
                (
                    escape_controls(&version),
                    escape_controls(&model),
                    hash(&v),
                    none(),
                )
            }
            None => ("sglang ?".into(), "?".into(), "?".into(), none()),
        },
        Api::Openai => {
            if let Some(mut v) = get("/props") {
                let build = v["build_info"]
                    .as_str()
                    .map_or("openai-compatible".to_string(), |b| {
                        format!("llama.cpp {b}")
                    });
                let model = v["model_alias"]
                    .as_str()
                    .or(v["model_path"].as_str())
                    .unwrap_or("?")
                    .to_string();
                let mut settings = BTreeMap::new();
                for (name, value) in [
                    ("props.model_path", &v["model_path"]),
                    ("props.total_slots", &v["total_slots"]),
                    ("props.n_ctx", &v["default_generation_settings"]["n_ctx"]),
                ] {
                    if !value.is_null() {
                        settings.insert(name.to_string(), value.to_string());
                    }
                }
                // Everything /props says but the state it is in (sleeping or not).
                if let Some(o) = v.as_object_mut() {
                    o.remove("is_sleeping");
                }
                (
                    escape_controls(&build),
                    escape_controls(&model),
                    hash(&v),
                    settings,
                )
            } else {
                let model = get("/v1/models")
                    .and_then(|v| v["data"][0]["id"].as_str().map(String::from))
                    .unwrap_or_else(|| "?".into());
                (
                    "openai-compatible".into(),
                    escape_controls(&model),
                    "?".into(),
                    none(),
                )
            }
        }
    }
}
