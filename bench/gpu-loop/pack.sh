#!/usr/bin/env bash
# Pack what the GPU machine needs for the llama-cuda loop into CARRY (default .carry/, git-ignored):
# the release kiln binary, the llama.cpp sources and the gguf wheel. The GPU machine has no network
# and takes at most 64 MiB of files, and llama-cpp-python's 76.6 MB sdist is over that, so the
# sources travel as a derived archive: the sdist verified against the sha256 pinned in
# recipes/llama-cuda.toml, minus what building llama-server never reads (docs/, media/, every
# vocabulary but LLaMA's SentencePiece one, benches/, gguf-py/, conversion/ and a 38 MB .git pack), repacked reproducibly
# (sorted names, mtime 0, uid 0, gzip -n) with the same layout, so `strip_components = 1` holds.
set -euo pipefail
cd "$(dirname "$0")/../.."
carry=${1:-.carry}
sdist_url=$(sed -n 's/^src_url = "\(.*\)"$/\1/p' recipes/llama-cuda.toml)
version=$(sed -n 's/^llama_cpp_python = "\(.*\)"$/\1/p' recipes/llama-cuda.toml)
sdist_url=${sdist_url//\$\{llama_cpp_python\}/$version}
sdist_sha=$(sed -n 's/^src_sha256 = "\(.*\)"$/\1/p' recipes/llama-cuda.toml)
mkdir -p "$carry"
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
[[ -x target/release/kiln ]] || cargo build --locked --release
cp target/release/kiln "$carry/kiln"
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$carry/wheels" gguf==0.19.0
(cd "$carry" && sha256sum llama-src.tar.gz kiln wheels/*)
du -sh "$carry"
