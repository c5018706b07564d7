#!/usr/bin/env bash
# The fuzz targets' time budget, out of the test suite (a timed assertion would be flaky on a
# loaded 2-core debug build): every case of tests/it/fuzz.rs must finish within the budget, in a
# release build. Usage: bench/fuzz-budget.sh [BUDGET_MS, default 1000] [extra cargo test args]
set -euo pipefail
cd "$(dirname "$0")/.."
budget="${1:-1000}"
shift || true
KILN_FUZZ_SLOW_MS="$budget" cargo test --locked --release --test it fuzz:: "$@" -- --nocapture
