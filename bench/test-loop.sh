#!/usr/bin/env bash
# README's test command N times in a row (default 10), each in a bare Debian container
# (.ci/container-tests: the minbase image, the host's toolchain and Docker socket, CAP_SYS_ADMIN,
# loop devices, the host's network), with two busy loops loading the host's cores the whole
# time, and the test command's standard output going to a regular file (as `cargo test >log`).
# Every run tests the same commit, resolved once at the start (a HEAD that moves meanwhile does
# not change what the later runs test). Prints a table: run, exit status, wall seconds, the
# tests that failed; the same table grows in the logs directory as the runs end (table.md, with
# the commit), each run's failures in run-N.failed. Between runs only downloads and compiled code
# are kept: each run clones the commit afresh to one path (its files dated at the commit, so kiln
# compiles once, not once a run) and keeps Debian's .debs, which install-deps still installs into
# each new container. Exits 1 if any run failed, 2 on bad usage.
# Usage: bash bench/test-loop.sh [N] [COMMIT]     (logs under $KILN_TEST_CACHE/test-loop/)
# Record the table in BENCHMARKS.md with the command that made it.
set -euo pipefail
runs="${1:-10}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
if ! [[ "$runs" =~ ^[1-9][0-9]*$ ]]; then
  echo "test-loop: N must be a positive number of runs, not \`$runs\`" >&2
  exit 2
fi
if ! commit="$(git -C "$repo" rev-parse --verify --quiet "${2:-HEAD}^{commit}")"; then
  echo "test-loop: \`${2:-HEAD}\` is not a commit of $repo" >&2
  exit 2
fi
short="$(git -C "$repo" rev-parse --short "$commit")"
cache="${KILN_TEST_CACHE:-$HOME/.cache/kiln-test}"
mkdir -p "$cache"
cache="$(cd "$cache" && pwd)"
logs="$cache/test-loop/$(date -u +%Y%m%dT%H%M%SZ)-$short"
mkdir -p "$logs"
echo "$commit" >"$logs/commit"
table="$logs/table.md"

# Two busy loops: the load a shared CI host or a developer's build puts beside the tests.
busy=()
stop_busy() { for pid in "${busy[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap stop_busy EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
for _ in 1 2; do
  (while :; do :; done) &
  busy+=("$!")
done

{
  echo "README's test command, $runs runs in bare containers, two busy loops on the host, stdout to a file"
  echo "(bash bench/test-loop.sh $runs $short; commit $commit; logs: $logs)"
  echo
  echo "| run | exit | seconds | failed tests |"
  echo "|---|---|---|---|"
} >"$table"
echo "test-loop: $runs runs of $commit; logs and table in $logs" >&2

failed_runs=0
for ((i = 1; i <= runs; i++)); do
  out="$logs/run-$i.stdout"
  log="$logs/run-$i.log"
  : >"$out"
  start=$(date +%s)
  set +e
  KILN_TEST_CACHE="$cache" KILN_CI_STDOUT_FILE="$out" \
    KILN_CI_SRC="$cache/test-loop/src/kiln" KILN_CI_APT_CACHE="$cache/test-loop/apt" \
    bash "$repo/.ci/container-tests" "$commit" >"$log" 2>&1
  code=$?
  set -e
  secs=$(( $(date +%s) - start ))
  # libtest's line for each failed test; sorted, one a line, kept per run.
  sed -n 's/^test \(.*\) \.\.\. FAILED$/\1/p' "$out" | sort -u >"$logs/run-$i.failed"
  failed=$(paste -sd, - <"$logs/run-$i.failed")
  if [[ $code -ne 0 ]]; then
    failed_runs=$((failed_runs + 1))
    [[ -n "$failed" ]] || failed="(no test failed; see $log)"
  fi
  echo "| $i | $code | $secs | ${failed:--} |" >>"$table"
  echo "run $i: exit $code in $secs s${failed:+; failed: $failed}" >&2
done
{
  echo
  echo "$((runs - failed_runs)) of $runs green"
} >>"$table"
cat "$table"
[[ $failed_runs -eq 0 ]]
