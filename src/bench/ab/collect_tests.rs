//! [`collect`] and [`collect_with`] against a real loopback server: one greedy request per fixed
//! prompt, in order, with the per-request fields; token ids kept where SGLang streams them, the
//! text (and its token count) where an OpenAI server streams text.

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::mpsc::Receiver;

use super::{collect, collect_with, Output, PROMPTS};
use crate::recipe::Api;

/// A server on 127.0.0.1 answering each of `n` requests with `stream` as an event stream; each
/// request's path and body come back on the channel, in order.
fn stream_server(
    n: usize,
    stream: &'static str,
) -> (String, Receiver<(String, serde_json::Value)>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming().take(n) {
            let mut conn = conn.unwrap();
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut request_line = String::new();
            reader.read_line(&mut request_line).unwrap();
            let path = request_line.split(' ').nth(1).unwrap_or("").to_string();
            let mut len = 0;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
                if line == "\r\n" || line.is_empty() {
                    break;
                }
            }
            let mut body = vec![0; len];
            reader.read_exact(&mut body).unwrap();
            tx.send((path, serde_json::from_slice(&body).unwrap()))
                .unwrap();
            write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n{stream}"
            )
            .unwrap();
        }
    });
    (url, rx)
}

#[test]
fn greedy_outputs_are_token_ids_over_sglang_in_prompt_order() {
    let stream = "data: {\"text\":\"ab\",\"output_ids\":[7,8],\"meta_info\":{\"prompt_tokens\":3,\
                  \"completion_tokens\":2,\"finish_reason\":{\"type\":\"length\",\"length\":2}}}\n\n\
                  data: [DONE]\n\n";
    let (url, requests) = stream_server(PROMPTS.len(), stream);
    let extra = [("top_k".to_string(), serde_json::json!(1))];
    let got = collect_with(&url, Api::Sglang, 2, &extra).unwrap();
    let ids = Output {
        ids: Some(vec!["7".into(), "8".into()]),
        text: "ab".into(),
        tokens: 2,
    };
    assert_eq!(got, vec![ids; PROMPTS.len()]);
    for prompt in PROMPTS {
        let (path, body) = requests.recv().unwrap();
        assert_eq!(path, "/generate");
        assert_eq!(body["text"], *prompt, "{body}");
        let sampling = &body["sampling_params"];
        assert_eq!(
            (&sampling["temperature"], &sampling["top_k"]),
            (&serde_json::json!(0.0), &serde_json::json!(1)),
            "{body}"
        );
        assert_eq!(sampling["ignore_eos"], true, "{body}");
    }
}

#[test]
fn greedy_outputs_are_text_over_openai_in_prompt_order() {
    let stream = "data: {\"choices\":[{\"text\":\"a\",\"finish_reason\":null}]}\n\n\
                  data: {\"choices\":[{\"text\":\"b\",\"finish_reason\":\"length\"}]}\n\n\
                  data: [DONE]\n\n";
    let (url, requests) = stream_server(PROMPTS.len(), stream);
    let got = collect(&url, Api::Openai, 2).unwrap();
    assert_eq!(got, vec![Output::of_text("ab", 2); PROMPTS.len()]);
    for prompt in PROMPTS {
        let (path, body) = requests.recv().unwrap();
        assert_eq!(path, "/v1/completions");
        assert_eq!(body["prompt"], *prompt, "{body}");
        assert_eq!(body["temperature"], 0.0, "{body}");
    }
}
