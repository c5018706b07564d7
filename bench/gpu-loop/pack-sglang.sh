#!/usr/bin/env bash
# Pack what `kiln up sglang-cuda --set deps=listed` needs on the GPU machine, which has no network
# and takes at most 64 MiB of files a call, into CARRY/sgl-1 … CARRY/sgl-N (default .carry/,
# git-ignored), each under 54 MiB, so N calls carry it all (the tree itself is ~5 MiB):
# - the release kiln binary (its shipped recipes are embedded) and these scripts;
# - the Python 3.12 x86-64 wheels of SGLang ${sglang_version}, of sglang-kernel and of the
#   recipe's `listed` packages: what SGLang's server path imports that the machine's torch 2.11
#   image lacks. The list came from importing every module of the server path (launch_server,
#   http_server, engine, scheduler, tokenizer/detokenizer managers, model_runner, models.llama,
#   the Triton and FlashInfer attention backends, the STANDALONE and EAGLE workers, torch symmetric
#   memory, the sampler, the xgrammar backend) in a venv of the whole resolved install and mapping
#   each imported module to its distribution; subtracting the machine's `pip list`
#   (tests/fixtures/gpu/h200x2/pip-list.txt) leaves the `listed` ones; plus what that CPU trace
#   cannot see, SGLang's `if is_cuda():` imports (gpu_imports.py: nvidia-cutlass-dsl, sgl-deep-gemm);
# - sglang-kernel trimmed (trim_wheel.py) from 615 MB to ~17 MB: dropped `flash_ops.abi3.so`
#   (1.7 GB unpacked, FA3: only `--attention-backend fa3` loads it, and sgl_kernel's __init__ does
#   not import it), `flashmla_ops.abi3.so` (FlashMLA, DeepSeek-style MLA models only) and
#   `sm100/common_ops` (sgl_kernel loads `sm90/` on compute capability 9.0 and `sm100/` on every
#   other GPU: this pack serves Hopper). The FlashInfer cubin package (447 MB) is left out too:
#   flashinfer imports it only if present and JIT-compiles with nvcc otherwise.
# There: `bash .carry/sgl-1/gpu-loop/sglang-device.sh` (see that file).
# KILN=path reuses a built kiln.
set -euo pipefail
cd "$(dirname "$0")/../.."
carry=${1:-.carry}
recipe=recipes/sglang-cuda.toml
var() { sed -n "s/^$1 = \"\(.*\)\"$/\1/p" "$recipe"; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/wheels" "$work/raw"
download() {
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --abi abi3 --abi none --platform manylinux_2_34_x86_64 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d "$@"
}
# shellcheck disable=SC2046 # `listed` is a list of requirement specifiers
download "$work/wheels" "sglang==$(var sglang_version)" $(var listed)
download "$work/raw" "sglang-kernel==$(var sglang_kernel_version)"
python3 bench/gpu-loop/trim_wheel.py "$work"/raw/sglang_kernel-*.whl \
  "$work/wheels/$(basename "$work"/raw/sglang_kernel-*.whl)" \
  'sgl_kernel/flash_ops.*' 'sgl_kernel/flashmla_ops.*' 'sgl_kernel/sm100/*'
kiln=${KILN:-target/release/kiln}
[[ -x $kiln ]] || cargo build --locked --release
rm -rf "$carry"/sgl-*
# First-fit by size, largest first; chunk 1 also holds kiln and the scripts.
mkdir -p "$carry/sgl-1/gpu-loop" "$carry/sgl-1/wheels"
cp "$kiln" "$carry/sgl-1/kiln"
cp bench/gpu-loop/sglang-device.sh "$carry/sgl-1/gpu-loop/"
limit=$((54 * 1024 * 1024))
size() { du -sb "$1" | cut -f1; }
# The sums of what arrives whole: kiln and every wheel (a split one once its parts are joined).
{ (cd "$work" && sha256sum wheels/*.whl); echo "$(sha256sum <"$kiln" | cut -d' ' -f1)  kiln"; } \
  >"$work/sglang-pack.sha256"
# A wheel over the limit (nvidia-cutlass-dsl's libraries: 74 and 79 MB) travels as parts
# NAME.part-K-of-N of 50 MiB each; sglang-device.sh's gather joins them once all N arrived.
for w in "$work"/wheels/*.whl; do
  if (($(stat -c %s "$w") > limit)); then
    n=$(( ($(stat -c %s "$w") + 50 * 1024 * 1024 - 1) / (50 * 1024 * 1024) ))
    split -b 50M -d -a 2 --numeric-suffixes=1 --additional-suffix="-of-$(printf %02d "$n")" "$w" "$w.part-"
    rm "$w"
  fi
done
while read -r _ w; do
  n=1
  while [[ -d $carry/sgl-$n ]] && (($(size "$carry/sgl-$n") + $(stat -c %s "$w") > limit)); do
    n=$((n + 1))
  done
  mkdir -p "$carry/sgl-$n/wheels"
  cp "$w" "$carry/sgl-$n/wheels/"
done < <(for w in "$work"/wheels/*; do echo "$(stat -c %s "$w") $w"; done | sort -rn)
for d in "$carry"/sgl-*; do echo "$d: $(du -sh "$d" | cut -f1), $(ls "$d/wheels" | wc -l) files"; done
cp "$work/sglang-pack.sha256" "$carry/"
