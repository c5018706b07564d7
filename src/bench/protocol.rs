//! What differs between the generation APIs, one arm per API: the request body, how a streamed
//! chunk updates the measurement, and how the server describes itself. Adding an API: its row in
//! `recipe/api.rs` (name, endpoint, readiness path) and its arms here.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::generation::{Request, Stream};
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
                // Everything /props says but its per-launch values (see the list).
                if let Some(o) = v.as_object_mut() {
                    for volatile in super::baseline::LLAMA_PROPS_PER_LAUNCH {
                        o.remove(*volatile);
                    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn req(greedy: bool) -> Request<'static> {
        Request {
            prompt: "Hi",
            max_tokens: 48,
            greedy,
            ignore_eos: true,
            timeout: std::time::Duration::from_secs(1),
        }
    }

    #[test]
    fn requests_put_knobs_where_each_api_reads_them() {
        let extra = [("top_k".to_string(), json!(1))];
        let s = request(Api::Sglang, &req(true), &extra);
        assert_eq!(s["text"], "Hi");
        assert_eq!(s["stream"], true);
        let p = &s["sampling_params"];
        assert_eq!(
            (p["max_new_tokens"].clone(), p["temperature"].clone()),
            (json!(48), json!(0.0))
        );
        assert_eq!(
            (p["ignore_eos"].clone(), p["top_k"].clone()),
            (json!(true), json!(1))
        );
        let o = request(Api::Openai, &req(false), &extra);
        assert_eq!(
            (o["prompt"].clone(), o["max_tokens"].clone()),
            (json!("Hi"), json!(48))
        );
        assert_eq!(
            (o["temperature"].clone(), o["top_k"].clone()),
            (json!(1.0), json!(1))
        );
        assert_eq!(o["stream_options"]["include_usage"], true);
        assert!(o["sampling_params"].is_null());
    }

    fn ids(v: &[u64]) -> Vec<String> {
        v.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn the_completion_count_tells_cumulative_ids_from_new_ones() {
        let so_far = ids(&[7, 7]);
        // The count equals the ids: every id so far, even when they do not extend `so_far`.
        assert!(cumulative(&so_far, &ids(&[7, 8]), Some(2)));
        assert!(cumulative(&so_far, &ids(&[9, 9, 9]), Some(3)));
        // The count equals both together: only the new ones, even when they look like a prefix.
        assert!(!cumulative(&so_far, &ids(&[7, 7, 7]), Some(5)));
        assert!(!cumulative(&so_far, &ids(&[7]), Some(3)));
        // No count that tells: ids that extend the ones so far are cumulative.
        assert!(cumulative(&so_far, &ids(&[7, 7, 8]), None));
        assert!(cumulative(&so_far, &ids(&[7, 7]), Some(9)));
        assert!(!cumulative(&so_far, &ids(&[7]), None));
        assert!(!cumulative(&so_far, &ids(&[8, 7, 7]), None));
    }

    #[test]
    fn an_sglang_stream_counts_ids_and_reads_the_final_chunk() {
        let mut s = Stream::default();
        let out = |ids: &[u64], n: u64, fin: Value| {
            json!({"text": "t", "output_ids": ids, "meta_info": {
                "prompt_tokens": 5, "completion_tokens": n, "finish_reason": fin}})
        };
        chunk(Api::Sglang, &mut s, &out(&[3], 1, Value::Null), 0.1);
        chunk(Api::Sglang, &mut s, &out(&[3, 4, 5], 3, Value::Null), 0.2);
        assert_eq!((s.count(), s.pieces.clone()), (3, ids(&[3, 4, 5])));
        let mut last = out(&[3, 4, 5, 6], 4, json!({"type": "length", "length": 4}));
        last["meta_info"]["spec_verify_ct"] = json!(2);
        chunk(Api::Sglang, &mut s, &last, 0.3);
        assert_eq!(
            (s.count(), s.server_tokens, s.prompt_tokens),
            (4, Some(4), Some(5))
        );
        assert_eq!(
            (s.verify_ct, s.finish.as_deref()),
            (Some(2), Some("length"))
        );
        assert_eq!(s.text, "t");
        // Without ids, the server's count.
        let mut s = Stream::default();
        chunk(
            Api::Sglang,
            &mut s,
            &json!({"meta_info": {"completion_tokens": 6}}),
            0.1,
        );
        assert_eq!((s.count(), s.pieces.len()), (6, 0));
    }

    #[test]
    fn an_openai_stream_counts_pieces_and_reads_usage_and_timings() {
        let mut s = Stream::default();
        let c = |t: &str, fin: Value| json!({"choices": [{"text": t, "finish_reason": fin}], "usage": null});
        chunk(Api::Openai, &mut s, &c("a", Value::Null), 0.1);
        chunk(Api::Openai, &mut s, &c("", Value::Null), 0.15);
        chunk(Api::Openai, &mut s, &c("bc", json!("length")), 0.2);
        assert_eq!((s.count(), s.text.as_str(), s.pieces.len()), (2, "abc", 2));
        assert_eq!(
            (s.server_tokens, s.finish.as_deref()),
            (None, Some("length"))
        );
        let usage = json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2},
            "timings": {"predicted_per_second": 9.5}});
        chunk(Api::Openai, &mut s, &usage, 0.3);
        assert_eq!(
            (s.server_tokens, s.prompt_tokens, s.server_rate),
            (Some(2), Some(3), Some(9.5))
        );
    }

    /// A capture of the real SGLang 0.5.15.post1 (`tuned` of sglang-cuda, left running by
    /// `kiln up`; bench/gpu-loop/sglang-device.sh's `wire`) on the H100 and on the H200.
    fn captured(gpu: &str, name: &str) -> String {
        let path = format!(
            "{}/tests/fixtures/gpu-{gpu}-sglang/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// The real `/generate` stream (greedy, 16 new tokens): every chunk carries all ids so far,
    /// the last one the finish reason; read chunk by chunk, the ids are the last chunk's, once.
    #[test]
    fn the_real_sglang_streams_read_to_their_last_chunks_ids() {
        for gpu in ["h100", "h200"] {
            let chunks: Vec<Value> = captured(gpu, "wire-generate-stream.txt")
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .filter(|d| *d != "[DONE]")
                .map(|d| serde_json::from_str(d).unwrap())
                .collect();
            assert_eq!(chunks.len(), 16, "{gpu}");
            let mut s = Stream::default();
            for (i, c) in chunks.iter().enumerate() {
                chunk(Api::Sglang, &mut s, c, 0.01 * i as f64);
            }
            let last: Vec<String> = chunks[15]["output_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(ToString::to_string)
                .collect();
            assert_eq!((s.count(), &s.pieces), (16, &last), "{gpu}");
            assert_eq!(
                (s.server_tokens, s.prompt_tokens, s.finish.as_deref()),
                (Some(16), Some(14), Some("length")),
                "{gpu}"
            );
            assert_eq!(s.text, chunks[15]["text"].as_str().unwrap(), "{gpu}");
        }
    }

    /// The real `/server_info` of the same launch on two machines, sessions apart, differs in
    /// `random_seed`, `max_total_num_tokens` (the KV cache sized to each GPU's memory) and
    /// `internal_states`: per-launch values, left out, so the settings hash is the same; one
    /// setting changed, another hash.
    #[test]
    fn the_real_server_info_of_one_launch_on_two_gpus_has_one_settings_hash() {
        let of = |gpu: &str, change: Option<(&str, Value)>| {
            let mut v: Value =
                serde_json::from_str(&captured(gpu, "wire-server_info.txt")).unwrap();
            if let Some((key, value)) = change {
                v[key] = value;
            }
            fingerprint(Api::Sglang, &move |p: &str| {
                (p == "/server_info").then(|| v.clone())
            })
        };
        let (h100, h200) = (of("h100", None), of("h200", None));
        assert_eq!(h100.0, "sglang 0.5.15.post1");
        assert!(h100.1.ends_with("/model/target"), "{h100:?}");
        assert_eq!(h100, h200);
        let other = of("h200", Some(("mem_fraction_static", json!(0.7))));
        assert_ne!(other.2, h200.2);
    }

    fn server_info(seed: u64, port: u16, interval: u64) -> Value {
        json!({"model_path": "m/x", "version": "0.5.9", "random_seed": seed, "port": port,
            "host": "127.0.0.1", "stream_interval": interval, "status": "ready",
            "max_total_num_tokens": 4096, "max_req_input_len": 4090,
            "internal_states": [{"last_gen_throughput": seed}]})
    }

    #[test]
    fn the_sglang_fingerprint_leaves_out_per_launch_values_only() {
        let of = |v: Value, path: &'static str| {
            fingerprint(Api::Sglang, &move |p: &str| (p == path).then(|| v.clone()))
        };
        let a = of(server_info(1, 30000, 1), "/server_info");
        assert_eq!(
            (a.0.as_str(), a.1.as_str(), a.3.len()),
            ("sglang 0.5.9", "m/x", 0)
        );
        assert_eq!(a.2.len(), 16);
        // Another seed, port, live state: the same; the older endpoint name: the same.
        assert_eq!(of(server_info(2, 30001, 1), "/get_server_info"), a);
        // Another setting: another hash.
        assert_ne!(of(server_info(1, 30000, 4), "/server_info").2, a.2);
        let none = fingerprint(Api::Sglang, &|_: &str| None);
        assert_eq!(
            (none.0.as_str(), none.1.as_str(), none.2.as_str()),
            ("sglang ?", "?", "?")
        );
    }

    #[test]
    fn the_llama_fingerprint_reads_props_else_the_model_list() {
        let props = json!({"build_info": "b1-x", "model_alias": "tiny", "model_path": "/m.gguf",
            "total_slots": 1, "default_generation_settings": {"n_ctx": 4096}, "is_sleeping": false});
        let of = |v: Value| {
            fingerprint(Api::Openai, &move |p: &str| {
                (p == "/props").then(|| v.clone())
            })
        };
        let a = of(props.clone());
        assert_eq!((a.0.as_str(), a.1.as_str()), ("llama.cpp b1-x", "tiny"));
        assert_eq!(a.3["props.n_ctx"], "4096");
        assert_eq!(a.3["props.total_slots"], "1");
        assert_eq!(a.3["props.model_path"], "\"/m.gguf\"");
        let mut asleep = props.clone();
        asleep["is_sleeping"] = json!(true);
        assert_eq!(of(asleep), a);
        let mut other = props;
        other["total_slots"] = json!(2);
        assert_ne!(of(other).2, a.2);
        let models = json!({"data": [{"id": "served"}]});
        let b = fingerprint(Api::Openai, &move |p: &str| {
            (p == "/v1/models").then(|| models.clone())
        });
        assert_eq!(
            (b.0.as_str(), b.1.as_str(), b.2.as_str()),
            ("openai-compatible", "served", "?")
        );
    }
}
