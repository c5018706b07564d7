//! Pins of what one streamed request measures (issue 48's mutation run): the rates, the
//! acceptance length, and the cross-check of the server's token count against the stream.

use super::*;

fn stream(events: &[(f64, u64)]) -> Stream {
    let mut s = Stream::default();
    for &(now, total) in events {
        s.saw_tokens(now, total);
    }
    s
}

fn measured(s: Stream, api: Api) -> Generation {
    s.finish(api, 100).unwrap()
}

#[test]
fn the_end_to_end_rate_is_tokens_over_seconds_and_zero_without_time() {
    let mut g = measured(stream(&[(0.5, 1), (2.0, 10)]), Api::Openai);
    assert_eq!((g.tokens, g.e2e_s), (10, 2.0));
    assert!((g.e2e_tok_s() - 5.0).abs() < 1e-12, "{}", g.e2e_tok_s());
    g.e2e_s = 0.0;
    assert_eq!(
        g.e2e_tok_s().to_bits(),
        0.0_f64.to_bits(),
        "exactly 0, not inf"
    );
}

#[test]
fn the_decode_rate_counts_tokens_after_the_first_event_over_the_time_since() {
    // 4 tokens after the first event, in the 2 s since it.
    let g = measured(stream(&[(0.5, 1), (1.0, 2), (2.5, 5)]), Api::Openai);
    assert_eq!((g.ttft_s, g.e2e_s), (0.5, 2.5));
    assert_eq!(g.decode_tok_s, Some(2.0));
    // A count that does not grow is no event: the last token's time stays put.
    let g = measured(stream(&[(0.5, 1), (2.5, 5), (3.0, 5)]), Api::Openai);
    assert_eq!((g.e2e_s, g.decode_tok_s), (2.5, Some(2.0)));
    // Everything in the first event, or every event at one instant: no decode rate.
    assert_eq!(
        measured(stream(&[(0.5, 7)]), Api::Openai).decode_tok_s,
        None
    );
    assert_eq!(
        measured(stream(&[(0.5, 1), (0.5, 3)]), Api::Openai).decode_tok_s,
        None
    );
}

#[test]
fn the_acceptance_length_is_tokens_per_verify_step_and_none_without_steps() {
    let mut s = stream(&[(0.5, 2), (1.0, 8)]);
    s.verify_ct = Some(4);
    assert_eq!(measured(s, Api::Sglang).accept_length, Some(2.0));
    let mut s = stream(&[(0.5, 2), (1.0, 8)]);
    s.verify_ct = Some(0);
    assert_eq!(measured(s, Api::Sglang).accept_length, None);
}

#[test]
fn a_stream_of_exactly_max_tokens_is_measured_one_more_is_refused() {
    let s = stream(&[(0.5, 1), (1.0, 5)]);
    assert_eq!(s.finish(Api::Openai, 5).unwrap().tokens, 5);
    let s = stream(&[(0.5, 1), (1.0, 6)]);
    let e = s.finish(Api::Openai, 5).err().unwrap().render();
    assert!(e.contains("6 completion tokens (streamed)"), "{e}");
}

/// A text stream of `pieces` pieces holding `text`, whose usage says `server`.
fn text_stream(api: Api, text: &str, pieces: u64, server: u64) -> Generation {
    let mut s = stream(&[(0.5, 1), (1.0, pieces)]);
    s.text = text.to_string();
    s.server_tokens = Some(server);
    measured(s, api)
}

#[test]
fn a_text_streams_usage_counts_up_to_one_token_per_byte_plus_four() {
    // 6 bytes in 2 pieces: 2..=10 tokens are possible.
    let g = text_stream(Api::Openai, "abcdef", 2, 10);
    assert_eq!((g.tokens, g.warnings.len()), (10, 0));
    let g = text_stream(Api::Openai, "abcdef", 2, 11);
    assert_eq!(g.tokens, 2);
    assert!(g.warnings[0].contains("usage says 11"), "{:?}", g.warnings);
    // SGLang without ids streamed (text only): the same range.
    let g = text_stream(Api::Sglang, "abcdef", 2, 3);
    assert_eq!((g.tokens, g.warnings.len()), (3, 0));
    // SGLang with ids: exactly the ids streamed.
    let mut s = stream(&[(0.5, 1), (1.0, 2)]);
    s.pieces = vec!["1".into(), "2".into()];
    s.text = "abcdef".into();
    s.server_tokens = Some(3);
    let g = measured(s, Api::Sglang);
    assert_eq!((g.tokens, g.warnings.len()), (2, 1));
}
