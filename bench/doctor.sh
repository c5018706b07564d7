#!/bin/sh
# Benchmark `kiln doctor` wall time: plain (target <= 1 s cold) and --deep (target <= 30 s).
# Plain is timed cold (interpreter-facts cache emptied) and warm (cache filled by the run before).
# Usage: bench/doctor.sh [KILN_BINARY] [RUNS] [--deep | --stand-in]
#   On a GPU host run it with the python that has torch first on PATH; --deep is only timed when
#   given (it runs GPU work: a matmul per GPU and the symmetric-memory probe, multicast disabled).
#   --stand-in (a box without torch): PATH's python3 gets a stand-in torch 2.9.1+cu130 on
#   PYTHONPATH whose `import torch` sleeps 4 s (plain doctor must not pay it), with version.py,
#   its dist-info and, when the test cache's PyPI nvcc 13.0 is there, a real libtorch_cuda.so
#   nvcc builds for sm_90 and sm_120 (doctor reads torch's arch list from it).
set -eu
kiln=${1:-target/release/kiln}
runs=${2:-5}
mode=${3:-}
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

imports=""
if [ "$mode" = "--stand-in" ]; then
  site="$home/stand-in"
  mkdir -p "$site/torch/lib" "$site/torch-2.9.1+cu130.dist-info"
  printf 'import time\ntime.sleep(4)  # what a real import torch costs on a GPU host\n' >"$site/torch/__init__.py"
  printf "__version__ = '2.9.1+cu130'\ncuda = '13.0'\n" >"$site/torch/version.py"
  printf 'Metadata-Version: 2.1\nName: torch\nVersion: 2.9.1+cu130\n' >"$site/torch-2.9.1+cu130.dist-info/METADATA"
  nvcc="${KILN_TEST_CACHE:-$HOME/.cache/kiln-test}/cuda-pypi/13.0.1/bin/nvcc"
  if [ -x "$nvcc" ]; then
    printf '__global__ void k(float *a) { a[threadIdx.x] += 1.0f; }\n' >"$home/k.cu"
    (cd "$home" && "$nvcc" -shared -Xcompiler=-fPIC k.cu -o "$site/torch/lib/libtorch_cuda.so" \
      -L"$(dirname "$(dirname "$nvcc")")/lib" -gencode=arch=compute_90,code=sm_90 \
      -gencode=arch=compute_120,code=sm_120 >/dev/null)
  else
    echo "(no PyPI nvcc at $nvcc: the stand-in torch has no CUDA library to read)"
  fi
  export PYTHONPATH="$site"
  for _ in $(seq 2); do imports="$imports $(ms python3 -c 'import torch')"; done
  KILN_FACT_GPU_CC=9.0 "$kiln" doctor python.torch torch.arch -v 2>/dev/null | sed -n '3,8p' || true
fi

cold=""; warm=""; deeps=""
for _ in $(seq "$runs"); do
  rm -rf "$home/cache/python-facts"
  cold="$cold $(ms "$kiln" doctor --json)"
  warm="$warm $(ms "$kiln" doctor --json)"
done
if [ "$mode" = "--deep" ]; then
  for _ in $(seq "$runs"); do deeps="$deeps $(ms "$kiln" doctor --deep --json)"; done
fi

echo "| kiln doctor                  |   n | min ms  | med ms  | max ms  |"
echo "|------------------------------|-----|---------|---------|---------|"
[ -n "$imports" ] && stats "python3 -c 'import torch'" $imports
stats "plain, cold facts cache" $cold
stats "plain, warm facts cache" $warm
[ -n "$deeps" ] && stats "--deep (warm cache)" $deeps
exit 0
