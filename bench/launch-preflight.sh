#!/bin/sh
# Benchmark the launch preflight (issue 21): wall time of the commands that stop at it, never
# asserted by a test. Stand-in GPU hosts replay real nvidia-smi captures (tests/fixtures/gpu).
#   1. plain `kiln up` on a 1x H200 stand-in: the default recipe is refused before any step
#   2. `kiln doctor --recipe glm5-nvfp4-sm120 --profile eagle3` on the 8x RTX PRO 6000 stand-in
#      with a fitting stand-in checkpoint: every launch check (flags from the shipped 0.5.9 list)
#   3. the same with SGLang 0.5.9's real server_args.py installed (read by syntax)  [needs SITE]
#   4. `kiln doctor --recipe tiny-cpu --profile tuned launch.flags` on the CPU demo's build:
#      llama-server's own --help                                                [needs PREFIX]
# Usage: bench/launch-preflight.sh [KILN_BINARY] [RUNS]
#   SITE=<site-packages holding sglang 0.5.9> PREFIX=<tiny-cpu prefix> for cases 3 and 4.
set -eu
kiln=$(realpath "${1:-target/release/kiln}")
runs=${2:-10}
repo=$(cd "$(dirname "$0")/.." && pwd)
ws=$(mktemp -d)
trap 'rm -rf "$ws"' EXIT
export KILN_HOME="$ws/state" HOME="$ws" KILN_NO_PROGRESS=1
unset CUDA_VISIBLE_DEVICES KILN_CACHE_DIR
fake="$repo/tests/fixtures/gpu"
PATH="$fake/bin:$PATH"
export PATH

ms() { # wall milliseconds of one command
  s=$(date +%s%N); "$@" >/dev/null 2>&1 || true; e=$(date +%s%N); echo $(( (e - s) / 1000000 ))
}
stats() { # name, then values: prints "| name | n | min | median | max |"
  name=$1; shift
  printf '%s\n' "$@" | sort -n | awk -v name="$name" '{v[NR]=$1} END {
    printf "| %-44s | %3d | %6d | %6d | %6d |\n", name, NR, v[1], v[int((NR+1)/2)], v[NR] }'
}
ckpt() { # a stand-in checkpoint of $2 GiB (config.json + safetensors index)
  mkdir -p "$1"
  printf '{"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}' >"$1/config.json"
  printf '{"metadata": {"total_size": %s}, "weight_map": {}}' "$(( $2 << 30 ))" >"$1/model.safetensors.index.json"
}
ckpt "$ws/glm5" 400
ckpt "$ws/draft" 5

echo "| command (wall ms)                            |   n |    min |    med |    max |"
echo "|----------------------------------------------|-----|--------|--------|--------|"
t=""
for _ in $(seq "$runs"); do
  t="$t $(FAKE_NVIDIA_SMI_SCENARIO="$fake/derived-h200x1" ms "$kiln" up --set "prefix=$ws/opt")"
done
stats "kiln up, default recipe, 1x H200: refused" $t
t=""
for _ in $(seq "$runs"); do
  t="$t $(FAKE_NVIDIA_SMI_SCENARIO="$fake/derived-8x-rtx-pro-6000-pcie" ms "$kiln" doctor --recipe glm5-nvfp4-sm120 \
    --profile eagle3 --set "model=$ws/glm5" --set "draft_model=$ws/draft" --json \
    launch.gpus launch.quantization launch.model launch.draft-model launch.weights launch.flags launch.port)"
done
stats "doctor launch.*, 8x RTX PRO 6000, pinned flags" $t
if [ -n "${SITE:-}" ]; then
  mkdir -p "$ws/venv/bin" "$ws/venv/lib/python3.12"
  ln -sf "$SITE" "$ws/venv/lib/python3.12/site-packages"
  t=""
  for _ in $(seq "$runs"); do
    t="$t $(FAKE_NVIDIA_SMI_SCENARIO="$fake/derived-8x-rtx-pro-6000-pcie" ms "$kiln" doctor --recipe glm5-nvfp4-sm120 \
      --profile eagle3 --set "model=$ws/glm5" --set "draft_model=$ws/draft" --set "venv=$ws/venv" --json launch.flags)"
  done
  stats "doctor launch.flags, installed server_args.py" $t
fi
if [ -n "${PREFIX:-}" ]; then
  t=""
  for _ in $(seq "$runs"); do
    t="$t $(FAKE_NVIDIA_SMI_SCENARIO=/nonexistent ms "$kiln" doctor --recipe "$repo/recipes/tiny-cpu.toml" \
      --set "prefix=$PREFIX" --profile tuned --json launch.flags launch.model launch.weights launch.port)"
  done
  stats "doctor launch.*, tiny-cpu, llama-server --help" $t
fi
exit 0
