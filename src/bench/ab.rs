//! Greedy A/B: the same fixed prompts at temperature 0 against two servers; agreement and the
//! first divergence per prompt. Outputs compare as sequences, never as chunks: token ids where
//! the API streams them (SGLang), else the concatenated text character by character, so the same
//! text streamed one or two tokens per chunk is identical. One output ending where the other
//! goes on is wrong output, however late.

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

/// One greedy output: the token ids where the API streams them, the text, the token count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    pub ids: Option<Vec<String>>,
    pub text: String,
    pub tokens: u64,
}

impl Output {
    /// An output of token ids (`text` their concatenation).
    pub fn of_ids(ids: &[&str]) -> Output {
        Output {
            ids: Some(ids.iter().map(|s| (*s).to_string()).collect()),
            text: ids.concat(),
            tokens: ids.len() as u64,
        }
    }

    /// An output known by its text and token count only (an OpenAI stream).
    pub fn of_text(text: &str, tokens: u64) -> Output {
        Output {
            ids: None,
            text: text.to_string(),
            tokens,
        }
    }
}

/// Greedy outputs for every prompt.
pub fn collect(base: &str, api: Api, max_tokens: u32) -> Result<Vec<Output>> {
    collect_with(base, api, max_tokens, &[])
}

/// [`collect`] with per-request fields in every request (`kiln tune`'s per-request knobs).
pub fn collect_with(
    base: &str,
    api: Api,
    max_tokens: u32,
    extra: &[(String, serde_json::Value)],
) -> Result<Vec<Output>> {
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
            client::generate_with(base, api, &req, extra).map(|g| Output {
                ids: (api == Api::Sglang && !g.pieces.is_empty()).then_some(g.pieces),
                text: g.text,
                tokens: g.tokens,
            })
        })
        .collect()
}

#[derive(Debug, Clone, Serialize)]
pub struct PromptResult {
    pub prompt: String,
    /// What `agree` and `total` count: `tokens` (ids compared) or `characters` (text compared).
    pub unit: &'static str,
    /// Units equal before the first divergence.
    pub agree: usize,
    pub total: usize,
    /// (index, baseline, candidate) at the first divergence: a token, or the next characters;
    /// `<end>` where one output ended.
    pub first_divergence: Option<(usize, String, String)>,
    pub status: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub prompts: Vec<PromptResult>,
    /// Σ agreeing prefix / Σ length, in `unit`.
    pub agreement: f64,
    /// What the agreement counts: `tokens`, `characters`, or `tokens and characters` when the
    /// prompts were compared differently (the per-prompt `unit` says which).
    pub unit: &'static str,
    pub min_prefix: usize,
    pub verdict: &'static str,
}

/// Compare candidate outputs with the baseline's. A divergence before `min_prefix` tokens is
/// "wrong output"; a later one is "diverged late" (reduction-order noise is plausible there). An
/// output that ends while the other goes on is "wrong output" wherever it ends. Text is compared
/// by characters; `min_prefix` is then converted with the baseline's characters per token.
pub fn compare(baseline: &[Output], candidate: &[Output], min_prefix: usize) -> Comparison {
    let mut prompts = Vec::new();
    for (i, (a, b)) in baseline.iter().zip(candidate).enumerate() {
        let (unit, x, y, min) = if let (Some(x), Some(y)) = (&a.ids, &b.ids) {
            ("tokens", x.clone(), y.clone(), min_prefix)
        } else {
            let chars = |s: &str| s.chars().map(String::from).collect::<Vec<_>>();
            let (x, y) = (chars(&a.text), chars(&b.text));
            let per_token = if a.tokens > 0 {
                x.len() as f64 / a.tokens as f64
            } else {
                1.0
            };
            let min = (min_prefix as f64 * per_token).ceil() as usize;
            ("characters", x, y, min)
        };
        let total = x.len().max(y.len());
        let agree = x.iter().zip(&y).take_while(|(p, q)| p == q).count();
        let ended = agree == x.len().min(y.len());
        let first = (agree < total).then(|| {
            let at = |v: &[String]| -> String {
                if agree >= v.len() {
                    "<end>".into()
                } else if unit == "tokens" {
                    // Escaped, and short: one streamed piece may be any length.
                    crate::columns::quoted(&v[agree])
                } else {
                    crate::columns::quoted(&v[agree..v.len().min(agree + 12)].concat())
                }
            };
            (agree, at(&x), at(&y))
        });
        let status = match first {
            None => "identical",
            Some(_) if ended => "wrong output",
            Some(_) if agree >= min.min(total) => "diverged late",
            Some(_) => "wrong output",
        };
        prompts.push(PromptResult {
            prompt: PROMPTS
                .get(i)
                .map_or(String::new(), std::string::ToString::to_string),
            unit,
            agree,
            total,
            first_divergence: first,
            status,
        });
    }
    if baseline.len() != candidate.len() {
        prompts.push(PromptResult {
            prompt: "(the number of outputs)".into(),
            unit: "outputs",
            agree: baseline.len().min(candidate.len()),
            total: baseline.len().max(candidate.len()),
            first_divergence: None,
            status: "wrong output",
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
    let unit = overall_unit(&prompts);
    Comparison {
        prompts,
        unit,
        agreement: if total > 0 {
            agree as f64 / total as f64
        } else {
            1.0
        },
        min_prefix,
        verdict,
    }
}

/// The unit of the prompts' comparisons (the count of outputs left aside).
fn overall_unit(prompts: &[PromptResult]) -> &'static str {
    let mut units = prompts.iter().map(|p| p.unit).filter(|u| *u != "outputs");
    match units.next() {
        None => "tokens",
        Some(first) if units.all(|u| u == first) => first,
        Some(_) => "tokens and characters",
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
                let unit = p.unit.trim_end_matches('s');
                // `a` and `b` are escaped already: quoted, not Debug-escaped twice.
                s.push_str(&format!(
                    " (first divergence at {unit} {i}: \"{a}\" vs \"{b}\")"
                ));
            }
            s.push('\n');
        }
        s.push_str(&format!(
            "agreement {:.1}% of {} ; verdict: {}\n",
            self.agreement * 100.0,
            self.unit,
            self.verdict
        ));
        s
    }
}

#[cfg(test)]
mod collect_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Output {
        Output::of_ids(&s.split(' ').collect::<Vec<_>>())
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

    /// A piece the server streamed 741 characters long is quoted short where the outputs part
    /// (#47, as verdict reasons): the A/B line and report carry at most 40 characters of it.
    #[test]
    fn a_huge_divergent_piece_is_quoted_short() {
        let huge = "9".repeat(741);
        let c = compare(&[toks("a b c")], &[toks(&format!("a {huge} c"))], 1);
        let (_, base, cand) = c.prompts[0].first_divergence.clone().unwrap();
        assert_eq!(base, "b");
        assert_eq!(cand.chars().count(), crate::columns::QUOTED, "{cand}");
        assert!(c.render("b", "t").lines().all(|l| l.len() < 200));
    }

    #[test]
    fn stopping_early_is_wrong_output_however_late() {
        let base = vec![toks("a b c d e f")];
        let short = compare(&base, &[toks("a b c d e")], 1);
        assert_eq!(short.verdict, "wrong output");
        assert_eq!(
            short.prompts[0].first_divergence,
            Some((5, "f".into(), "<end>".into()))
        );
        let longer = compare(&[toks("a b c")], &[toks("a b c d")], 1);
        assert_eq!(longer.verdict, "wrong output");
    }

    #[test]
    fn text_compares_independently_of_chunking() {
        let one = Output::of_text("Paris is the capital.", 5);
        let two = Output::of_text("Paris is the capital.", 5);
        assert_eq!(
            compare(std::slice::from_ref(&one), &[two], 2).verdict,
            "identical"
        );
        // 21 characters over 5 tokens: min_prefix 2 tokens is 9 characters.
        let early = compare(
            std::slice::from_ref(&one),
            &[Output::of_text("Paris was the capital.", 5)],
            2,
        );
        assert_eq!(
            (early.verdict, early.prompts[0].unit),
            ("wrong output", "characters")
        );
        let late = compare(&[one], &[Output::of_text("Paris is the capitol.", 5)], 2);
        assert_eq!(late.verdict, "diverged late");
    }

    #[test]
    fn text_min_prefix_is_scaled_by_characters_per_token_not_offset() {
        // 100 characters over 10 tokens: 10 characters a token, so a min_prefix of 8 tokens is
        // 80 characters and a divergence at character 40 is early (an offset, 8 + 10 = 18, would
        // call it late).
        let base = "a".repeat(100);
        let cand = format!("{}b{}", "a".repeat(40), "a".repeat(59));
        let ab = compare(
            &[Output::of_text(&base, 10)],
            &[Output::of_text(&cand, 10)],
            8,
        );
        assert_eq!(ab.prompts[0].agree, 40);
        assert_eq!((ab.verdict, ab.exit_code()), ("wrong output", 2));
    }

    #[test]
    fn text_divergence_shows_the_next_twelve_characters_and_a_tokenless_baseline_counts_one_per_character(
    ) {
        let base = "a".repeat(100);
        let cand = format!("{}b{}", "a".repeat(40), "a".repeat(59));
        let ab = compare(
            &[Output::of_text(&base, 10)],
            &[Output::of_text(&cand, 10)],
            8,
        );
        assert_eq!(
            ab.prompts[0].first_divergence,
            Some((40, "a".repeat(12), format!("b{}", "a".repeat(11))))
        );
        // A baseline that says 0 tokens: one character a token, so 2 tokens are 2 characters.
        let late = compare(
            &[Output::of_text("abcdef", 0)],
            &[Output::of_text("abcdxy", 0)],
            2,
        );
        assert_eq!((late.verdict, late.prompts[0].agree), ("diverged late", 4));
    }

    #[test]
    fn a_missing_output_is_wrong_output_and_no_outputs_agree_fully() {
        let ab = compare(&[toks("a b"), toks("c d")], &[toks("a b")], 1);
        assert_eq!(ab.verdict, "wrong output");
        let last = ab.prompts.last().unwrap();
        assert_eq!(
            (last.prompt.as_str(), last.unit, last.agree, last.total),
            ("(the number of outputs)", "outputs", 1, 2)
        );
        assert_eq!(ab.unit, "tokens");
        let same = compare(&[toks("a b")], &[toks("a b")], 1);
        assert_eq!(same.prompts.len(), 1);
        let none = compare(&[], &[], 1);
        assert_eq!((none.verdict, none.agreement), ("identical", 1.0));
    }

    #[test]
    fn each_verdict_has_its_own_exit_code() {
        let base = vec![toks("a b c d e f")];
        let code = |cand: &str| compare(&base, &[toks(cand)], 3).exit_code();
        assert_eq!(code("a b c d e f"), 0);
        assert_eq!(code("a b c d x y"), 1);
        assert_eq!(code("a x c d e f"), 2);
    }

    #[test]
    fn the_agreement_names_what_it_counts_in_every_output() {
        let text = |t: &str| Output::of_text(t, 5);
        let chars = compare(
            &[text("Paris is the capital.")],
            &[text("Paris was it.")],
            2,
        );
        assert_eq!(chars.unit, "characters");
        let shown = chars.render("base", "cand");
        assert!(shown.contains("agreement 28.6% of characters ;"), "{shown}");
        assert!(!shown.contains("token"), "{shown}");
        let json = serde_json::to_value(&chars).unwrap();
        assert_eq!(
            (json["unit"].clone(), json["prompts"][0]["unit"].clone()),
            ("characters".into(), "characters".into())
        );
        let ids = compare(&[toks("a b c")], &[toks("a b c")], 1);
        assert!(ids
            .render("b", "c")
            .contains("agreement 100.0% of tokens ;"));
        let mixed = compare(&[toks("a b"), text("xy")], &[toks("a b"), text("xy")], 1);
        assert_eq!(mixed.unit, "tokens and characters");
    }
}
