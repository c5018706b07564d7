#!/usr/bin/env bash
# How long README's test command takes, cold or warm, and which tests take that time: prints the
# total and the 15 slowest tests, and keeps the logs.
#   cold  an empty cargo target dir and an empty test cache (fresh directories under the logs
#         dir), `bash .ci/install-deps` timed first, as a newcomer's first run meets them
#   warm  this checkout's target/ and $KILN_TEST_CACHE as they are (a second run)
# Per-test times need a runner that reports them: libtest on stable Rust prints none
# (`--report-time` and `--format json` are unstable, `-Z unstable-options`), so the suite runs
# under cargo-nextest (stable; `cargo install --locked cargo-nextest`), which times each test in its
# own process. That is the same tests as `cargo test --locked` (unit and integration; doc-tests are
# run after it by `cargo test --doc`, timed as one line). The tests that serve the CPU demo still
# share one llama-server build: a file lock, across processes as across threads.
# Usage: bash bench/test-time.sh cold|warm [NEXTEST-FILTER...]   e.g. `warm -E 'binary(it)'`
# Logs under $KILN_TEST_CACHE/test-time/ (default target/test-cache). Record the printed table in
# BENCHMARKS.md with the command that made it.
set -euo pipefail
mode="${1:-}"
shift || true
if [[ "$mode" != cold && "$mode" != warm ]]; then
  echo "test-time: say \`cold\` or \`warm\` (usage: bash bench/test-time.sh cold|warm [FILTER...])" >&2
  exit 2
fi
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "test-time: needs cargo-nextest for per-test times" >&2
  echo "hint: cargo install --locked cargo-nextest" >&2
  exit 2
fi
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
cache="${KILN_TEST_CACHE:-$repo/target/test-cache}"
mkdir -p "$cache"
logs="$cache/test-time/$(date -u +%Y%m%dT%H%M%SZ)-$mode-$(git rev-parse --short HEAD)"
mkdir -p "$logs"
now() { date +%s; }
if [[ "$mode" == cold ]]; then
  export CARGO_TARGET_DIR="$logs/target" KILN_TEST_CACHE="$logs/test-cache"
  mkdir -p "$KILN_TEST_CACHE"
  t=$(now)
  bash .ci/install-deps >"$logs/install-deps.log" 2>&1
  echo "install-deps: $(($(now) - t)) s" | tee "$logs/summary.txt"
else
  export KILN_TEST_CACHE="$cache"
  : >"$logs/summary.txt"
fi
t=$(now)
set +e
cargo nextest run --locked --no-fail-fast "$@" >"$logs/nextest.log" 2>&1
rc=$?
set -e
tests_s=$(($(now) - t))
doc_s=-
if [[ $# -eq 0 ]]; then
  t=$(now)
  cargo test --locked --doc >"$logs/doctest.log" 2>&1 || rc=$?
  doc_s=$(($(now) - t))
fi
{
  echo "nextest (compile + tests): ${tests_s} s, exit $rc; doc-tests: ${doc_s} s"
  grep -E '^ +Summary ' "$logs/nextest.log" || true
  echo "slowest 15 (seconds, test):"
  # nextest's result lines: `        PASS [  12.345s] (3/300) kiln::it module::test`.
  sed -nE 's/^ *(PASS|FAIL|SIGKILL|SIGSEGV|TIMEOUT|LEAK) \[ *([0-9.]+)s\] (\([0-9/ ]+\) )?(.*)$/\2 \1 \4/p' \
    "$logs/nextest.log" | sort -rn | sed -n 1,15p # reads all: head would end sort by SIGPIPE (exit 141)
} | tee -a "$logs/summary.txt"
echo "logs: $logs"
exit "$rc"
