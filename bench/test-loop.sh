#!/usr/bin/env bash
# README's test command N times in a row (default 10), each in a bare Debian container
# (.ci/container-tests: the minbase image, the host's toolchain and Docker socket, CAP_SYS_ADMIN,
# loop devices, the host's network), with two busy loops loading the host's cores the whole
# time, and the test command's standard output going to a regular file (as `cargo test >log`).
# Prints a table: run, exit status, wall seconds, the tests that failed. Exits 1 if any run failed.
# Usage: bash bench/test-loop.sh [N] [COMMIT]     (logs under $KILN_TEST_CACHE/test-loop/)
# Record the table in BENCHMARKS.md with the command that made it.
set -euo pipefail
runs="${1:-10}"
commit="${2:-HEAD}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
cache="${KILN_TEST_CACHE:-$HOME/.cache/kiln-test}"
mkdir -p "$cache"
cache="$(cd "$cache" && pwd)"
logs="$cache/test-loop/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$logs"

# Two busy loops: the load a shared CI host or a developer's build puts beside the tests.
busy=()
for _ in 1 2; do
  (while :; do :; done) &
  busy+=("$!")
done
stop_busy() { for pid in "${busy[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap stop_busy EXIT

rows=()
failed_runs=0
for ((i = 1; i <= runs; i++)); do
  out="$logs/run-$i.stdout"
  log="$logs/run-$i.log"
  : >"$out"
  start=$(date +%s)
  set +e
  KILN_TEST_CACHE="$cache" KILN_CI_STDOUT_FILE="$out" \
    bash "$repo/.ci/container-tests" "$commit" >"$log" 2>&1
  code=$?
  set -e
  secs=$(( $(date +%s) - start ))
  failed=$(sed -n 's/^test \(.*\) \.\.\. FAILED$/\1/p' "$out" | sort -u | paste -sd, -)
  if [[ $code -ne 0 ]]; then
    failed_runs=$((failed_runs + 1))
    [[ -n "$failed" ]] || failed="(no test failed; see $log)"
  fi
  rows+=("| $i | $code | $secs | ${failed:--} |")
  echo "run $i: exit $code in $secs s${failed:+; failed: $failed}" >&2
done

echo "README's test command, $runs runs in bare containers, two busy loops on the host, stdout to a file"
echo "(bash bench/test-loop.sh $runs $(git -C "$repo" rev-parse --short "$commit"); logs: $logs)"
echo
echo "| run | exit | seconds | failed tests |"
echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo "$((runs - failed_runs)) of $runs green"
[[ $failed_runs -eq 0 ]]
