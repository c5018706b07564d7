#!/usr/bin/env bash
# The race replayed on the H200's record (issue 23): the recorded grid and race of
# tests/fixtures/gpu-h200-tune/session{4,6}/ beside the race's current rules served the same
# recorded measurements, priced at what each launch and measurement cost on the machine. The
# four races of session6/ ran under these rules: the replay must reproduce their decisions word
# for word. Prints a markdown table and each variant's fate on stdout. A projection on real
# data, not a GPU measurement. Then the winner's margin over the runner-up on each recorded grid
# (src/tune/margin.rs), and the top two variants' medians across those grids' launches; then the
# H200's SGLang grid of session 22, each variant launched twice (tests/fixtures/gpu-h200-sglang/).
#
# Usage: bench/tune-replay.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(cargo test --quiet --lib -- tune::replay tune::margin::tests::on_the_h200s --nocapture --test-threads 1 2>&1) || {
    printf '%s\n' "$out" >&2
    printf '%s\n' "bench: error: the replay test failed (its output is above)" >&2
    exit 1
}
printf '%s\n' "$out" | sed 's/^\.//' | grep -E '^(\||- )'
