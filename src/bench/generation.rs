//! One streamed generation request: what it asks ([`Request`]), what the stream has shown so far
//! ([`Stream`], fed by `protocol::chunk`) and what it measured ([`Generation`]), with the
//! cross-check of the server's token count against the stream. No I/O: `client` sends and reads.

use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::recipe::Api;

pub struct Request<'a> {
    pub prompt: &'a str,
    pub max_tokens: u32,
    /// Greedy (temperature 0).
    pub greedy: bool,
    pub ignore_eos: bool,
    /// The whole request, first byte to last.
    pub timeout: Duration,
}

/// What one streamed request measured.
#[derive(Debug, Clone, Serialize)]
pub struct Generation {
    /// Completion tokens: what was streamed (token ids, else pieces), or the server's own count
    /// where it is consistent with the stream (a piece can hold several tokens).
    pub tokens: u64,
    pub prompt_tokens: Option<u64>,
    /// Seconds from sending the request to the first token.
    pub ttft_s: f64,
    /// Seconds from sending the request to the last token.
    pub e2e_s: f64,
    /// (tokens after the first event) / (last token time − first token time).
    pub decode_tok_s: Option<f64>,
    /// The server's own decode rate where it reports one (llama.cpp `timings.predicted_per_second`).
    pub server_decode_tok_s: Option<f64>,
    pub spec_verify_ct: Option<u64>,
    /// completion_tokens / spec_verify_ct, per request.
    pub accept_length: Option<f64>,
    pub finish_reason: Option<String>,
    /// Where the server's own count disagreed with the stream.
    #[serde(skip)]
    pub warnings: Vec<String>,
    /// Token ids (SGLang) or streamed pieces (OpenAI).
    #[serde(skip)]
    pub pieces: Vec<String>,
    #[serde(skip)]
    pub text: String,
}

impl Generation {
    pub fn e2e_tok_s(&self) -> f64 {
        if self.e2e_s > 0.0 {
            self.tokens as f64 / self.e2e_s
        } else {
            0.0
        }
    }
}

/// What a streamed response has shown so far (`protocol::chunk` feeds it).
#[derive(Default)]
pub(super) struct Stream {
    first: Option<(f64, u64)>,
    last: f64,
    count: u64,
    pub(super) server_tokens: Option<u64>,
    pub(super) prompt_tokens: Option<u64>,
    pub(super) server_rate: Option<f64>,
    pub(super) verify_ct: Option<u64>,
    pub(super) finish: Option<String>,
    pub(super) pieces: Vec<String>,
    pub(super) text: String,
}

impl Stream {
    /// Tokens so far (`total`, cumulative) at `now` seconds.
    /// Tokens streamed so far.
    pub(super) fn count(&self) -> u64 {
        self.count
    }

    pub(super) fn saw_tokens(&mut self, now: f64, total: u64) {
        if total > self.count {
            self.first.get_or_insert((now, total));
            self.last = now;
            self.count = total;
        }
    }

    pub(super) fn finish(self, api: Api, max_tokens: u32) -> Result<Generation> {
        let Some((t_first, n_first)) = self.first else {
            return Err(Error::other(
                format!(
                    "the server streamed no tokens (finish reason: {})",
                    self.finish.as_deref().unwrap_or("none")
                ),
                Some(format!(
                    "check the prompt and max tokens; api `{}`",
                    api.name()
                )),
            ));
        };
        let (tokens, warnings) = self.cross_check(api, max_tokens)?;
        let span = self.last - t_first;
        let decode =
            (self.count > n_first && span > 0.0).then(|| (self.count - n_first) as f64 / span);
        let accept = self
            .verify_ct
            .filter(|&c| c > 0)
            .map(|c| tokens as f64 / c as f64);
        Ok(Generation {
            tokens,
            prompt_tokens: self.prompt_tokens,
            ttft_s: t_first,
            e2e_s: self.last,
            decode_tok_s: decode,
            server_decode_tok_s: self.server_rate,
            spec_verify_ct: self.verify_ct,
            accept_length: accept,
            finish_reason: self.finish,
            warnings,
            pieces: self.pieces,
            text: self.text,
        })
    }
}

impl Stream {
    /// The token count to report: what was streamed, or the server's count where the stream
    /// allows it (token ids: exactly; text pieces: at least one token each, at most one per byte
    /// of text plus a few that print nothing). A count above `max_tokens` is refused.
    fn cross_check(&self, api: Api, max_tokens: u32) -> Result<(u64, Vec<String>)> {
        let streamed = self.count;
        let mut warnings = Vec::new();
        for (what, n) in [
            ("streamed", streamed),
            ("the server's usage", self.server_tokens.unwrap_or(0)),
        ] {
            if n > u64::from(max_tokens) {
                return Err(Error::other(
                    format!("the server reported {n} completion tokens ({what}) for a request of at most {max_tokens}"),
                    Some("a server that returns more than it was asked cannot be measured; check --url and --api".into()),
                ));
            }
        }
        let Some(server) = self.server_tokens else {
            return Ok((streamed, warnings));
        };
        let (low, high) = match api {
            Api::Sglang if !self.pieces.is_empty() => (streamed, streamed),
            _ => (streamed, (self.text.len() as u64).max(streamed) + 4),
        };
        if (low..=high).contains(&server) {
            return Ok((server, warnings));
        }
        warnings.push(format!(
            "the server's usage says {server} completion tokens but the stream shows {streamed} ({} bytes of text): counted {streamed}",
            self.text.len()
        ));
        Ok((streamed, warnings))
    }
}

#[cfg(test)]
#[path = "generation_pins.rs"]
mod pins;
