#!/bin/sh
# Benchmark `kiln doctor` wall time: plain (target <= 1 s) and --deep (target <= 30 s).
# Plain is timed cold (interpreter-facts cache emptied) and warm (cache filled by the run before).
# Usage: bench/doctor.sh [KILN_BINARY] [RUNS] [--deep]
#   On a GPU host run it with the python that has torch first on PATH; --deep is only timed when
#   given (it runs GPU work: a matmul per GPU and the symmetric-memory probe, multicast disabled).
set -eu
kiln=${1:-target/release/kiln}
runs=${2:-5}
deep=${3:-}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
export KILN_HOME="$home"; unset KILN_CACHE_DIR

ms() { # wall milliseconds of one command
  s=$(date +%s%N); "$@" >/dev/null 2>&1 || true; e=$(date +%s%N); echo $(( (e - s) / 1000000 ))
}
stats() { # name, then values: prints "| name | n | min | median | max |"
  name=$1; shift
  printf '%s\n' "$@" | sort -n | awk -v name="$name" '{v[NR]=$1} END {
    printf "| %-28s | %3d | %7d | %7d | %7d |\n", name, NR, v[1], v[int((NR+1)/2)], v[NR] }'
}

cold=""; warm=""; deeps=""
for _ in $(seq "$runs"); do
  rm -rf "$home/cache/python-facts"
  cold="$cold $(ms "$kiln" doctor --json)"
  warm="$warm $(ms "$kiln" doctor --json)"
done
if [ "$deep" = "--deep" ]; then
  for _ in $(seq "$runs"); do deeps="$deeps $(ms "$kiln" doctor --deep --json)"; done
fi

echo "| kiln doctor                  |   n | min ms  | med ms  | max ms  |"
echo "|------------------------------|-----|---------|---------|---------|"
stats "plain, cold facts cache" $cold
stats "plain, warm facts cache" $warm
[ -n "$deeps" ] && stats "--deep (warm cache)" $deeps
exit 0
