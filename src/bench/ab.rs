//! Greedy A/B: the same fixed prompts at temperature 0 against two servers; token-level
//! agreement and the first divergence per prompt.

use std::time::Duration;

use serde::Serialize;

use super::client::{self, Api, Request};
use crate::error::Result;

/// Fixed prompts: plain text, code, a list and numbers, so different kernels get exercised.
pub const PROMPTS: &[&str] = &[
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Here is a list of ten animals:\n1.",
    "Q: What is 17 * 23? Show your work.\nA:",
];

/// Greedy outputs (token ids or streamed pieces) for every prompt.
pub fn collect(base: &str, api: Api, max_tokens: u32) -> Result<Vec<Vec<String>>> {
    collect_with(base, api, max_tokens, &[])
}

/// [`collect`] with per-request fields in every request (`kiln tune`'s per-request knobs).
pub fn collect_with(
    base: &str,
    api: Api,
    max_tokens: u32,
    extra: &[(String, serde_json::Value)],
) -> Result<Vec<Vec<String>>> {
    PROMPTS
        .iter()
        .map(|p| {
            let req = Request {
                prompt: p,
                max_tokens,
                greedy: true,
                ignore_eos: true,
                timeout: Duration::from_secs(600),
            };
            client::generate_with(base, api, &req, extra).map(|g| g.pieces)
        })
        .collect()
}

#[derive(Debug, Clone, Serialize)]
pub struct PromptResult {
    pub prompt: String,
    /// Tokens equal before the first divergence.
    pub agree: usize,
    pub total: usize,
    /// (index, baseline token, candidate token) of the first divergence.
    pub first_divergence: Option<(usize, String, String)>,
    pub status: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub prompts: Vec<PromptResult>,
    /// Σ agreeing prefix / Σ tokens.
    pub agreement: f64,
    pub min_prefix: usize,
    pub verdict: &'static str,
}

/// Compare candidate outputs with the baseline's. A divergence before `min_prefix` tokens is
/// "wrong output"; a later one is "diverged late" (reduction-order noise is plausible there).
pub fn compare(
    baseline: &[Vec<String>],
    candidate: &[Vec<String>],
    min_prefix: usize,
) -> Comparison {
    let mut prompts = Vec::new();
    for (i, (a, b)) in baseline.iter().zip(candidate).enumerate() {
        let total = a.len().max(b.len());
        let agree = a.iter().zip(b).take_while(|(x, y)| x == y).count();
        let first = (agree < total).then(|| {
            (
                agree,
                a.get(agree).cloned().unwrap_or_else(|| "<end>".into()),
                b.get(agree).cloned().unwrap_or_else(|| "<end>".into()),
            )
        });
        let status = match first {
            None => "identical",
            Some(_) if agree >= min_prefix.min(total) => "diverged late",
            Some(_) => "wrong output",
        };
        prompts.push(PromptResult {
            prompt: PROMPTS
                .get(i)
                .map_or(String::new(), std::string::ToString::to_string),
            agree,
            total,
            first_divergence: first,
            status,
        });
    }
    let (agree, total) = prompts
        .iter()
        .fold((0, 0), |(a, t), p| (a + p.agree, t + p.total));
    let verdict = if prompts.iter().any(|p| p.status == "wrong output") {
        "wrong output"
    } else if prompts.iter().any(|p| p.status == "diverged late") {
        "diverged late"
    } else {
        "identical"
    };
    Comparison {
        prompts,
        agreement: if total > 0 {
            agree as f64 / total as f64
        } else {
            1.0
        },
        min_prefix,
        verdict,
    }
}

impl Comparison {
    pub fn exit_code(&self) -> u8 {
        match self.verdict {
            "identical" => 0,
            "diverged late" => 1,
            _ => 2,
        }
    }

    pub fn render(&self, baseline: &str, candidate: &str) -> String {
        let mut s = format!("greedy A/B: `{candidate}` against `{baseline}`\n");
        for p in &self.prompts {
            let head: String = p
                .prompt
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(40)
                .collect();
            s.push_str(&format!(
                "  {:<42} {:>4}/{:<4} {}",
                format!("{head:?}"),
                p.agree,
                p.total,
                p.status
            ));
            if let Some((i, a, b)) = &p.first_divergence {
                s.push_str(&format!(" (first divergence at token {i}: {a:?} vs {b:?})"));
            }
            s.push('\n');
        }
        s.push_str(&format!(
            "token agreement {:.1}% ; verdict: {}\n",
            self.agreement * 100.0,
            self.verdict
        ));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn identical_late_and_wrong() {
        let base = vec![toks("a b c d e f")];
        assert_eq!(
            compare(&base, &[toks("a b c d e f")], 3).verdict,
            "identical"
        );
        let late = compare(&base, &[toks("a b c d x y")], 3);
        assert_eq!((late.verdict, late.prompts[0].agree), ("diverged late", 4));
        assert_eq!(
            late.prompts[0].first_divergence,
            Some((4, "e".into(), "x".into()))
        );
        let wrong = compare(&base, &[toks("a x c d e f")], 3);
        assert_eq!((wrong.verdict, wrong.exit_code()), ("wrong output", 2));
        assert!((wrong.agreement - 1.0 / 6.0).abs() < 1e-9);
    }
}
