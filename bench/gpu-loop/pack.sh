#!/usr/bin/env bash
# Pack what the GPU machine needs into CARRY (default .carry/, git-ignored): the release kiln
# binary (its shipped recipes are embedded), this tree's bench/gpu-loop scripts, the llama.cpp
# sources and the wheels. The GPU machine has no network and takes at most 64 MiB of files, and
# llama-cpp-python's 76.6 MB sdist is over that, so the sources travel as a derived archive: the
# sdist verified against the sha256 pinned in recipes/llama-cuda.toml, minus what building
# llama-server and llama-bench never reads (docs/, media/, every vocabulary but LLaMA's
# SentencePiece one, benches/, gguf-py/, conversion/ and a 38 MB .git pack), repacked
# reproducibly (sorted names, mtime 0, uid 0, gzip -n) with the same layout, so
# `strip_components = 1` holds.
# Wheels (Python 3.12, x86-64): gguf for the model writer; flashinfer-python 0.6.3 and
# apache-tvm-ffi for the seed recipe's flashinfer steps (installed without dependencies: the
# attention warm-up imports nothing else that the machine's image lacks).
# KILN=path reuses a built kiln; SDIST=path a downloaded sdist.
set -euo pipefail
cd "$(dirname "$0")/../.."
carry=${1:-.carry}
sdist_url=$(sed -n 's/^src_url = "\(.*\)"$/\1/p' recipes/llama-cuda.toml)
version=$(sed -n 's/^llama_cpp_python = "\(.*\)"$/\1/p' recipes/llama-cuda.toml)
sdist_url=${sdist_url//\$\{llama_cpp_python\}/$version}
sdist_sha=$(sed -n 's/^src_sha256 = "\(.*\)"$/\1/p' recipes/llama-cuda.toml)
mkdir -p "$carry/wheels" "$carry/gpu-loop"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sdist="${SDIST:-$work/sdist.tar.gz}"
[[ -f $sdist ]] || curl -fsSL -o "$sdist" "$sdist_url"
echo "$sdist_sha  $sdist" | sha256sum -c --quiet
tar -xzf "$sdist" -C "$work"
top="llama_cpp_python-$version"
l="$work/$top/vendor/llama.cpp"
rm -rf "$work/$top/.git" "$l/docs" "$l/media" "$l/benches" "$l/gguf-py" "$l/conversion" "$l/pocs"
find "$l/models" -type f ! -name ggml-vocab-llama-spm.gguf -delete
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work" -cf - "$top" |
  gzip -n -9 >"$carry/llama-src.tar.gz"
kiln=${KILN:-target/release/kiln}
[[ -x $kiln ]] || cargo build --locked --release
cp "$kiln" "$carry/kiln"
cp bench/gpu-loop/*.sh bench/gpu-loop/*.py "$carry/gpu-loop/"
wheel() {
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$carry/wheels" "$@"
}
wheel gguf==0.19.0 flashinfer-python==0.6.3 'apache-tvm-ffi>=0.1.11,<0.2'
(cd "$carry" && sha256sum llama-src.tar.gz kiln wheels/*)
du -sh "$carry"
