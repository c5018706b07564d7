#!/usr/bin/env bash
# The step cache measured on fresh machines (issue 32): README's main job (`kiln up`, the CPU
# demo) in a bare bookworm container with an empty state ("cold"), whose cache is exported;
# then in a second bare container that only imports that cache ("warm-from-import"). Each run's
# compilers (cc, c++, gcc, g++) are counting wrappers first on PATH that log their arguments, so
# "no compile" is a count, not a guess. kiln itself is built before the wrappers go on PATH (its link runs cc).
#
# Same containers as .ci/fresh-machine: `kiln-test-base:bookworm` (.ci/base-image), the host's
# Rust mounted read-only, cargo's caches under $KILN_TEST_CACHE/fresh-cargo.
# Usage: bash bench/step-cache.sh [COMMIT]   (default HEAD). Prints a table; ~20 min on 2 cores.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
commit="${1:-HEAD}"
base="kiln-test-base:bookworm"
cache="${KILN_TEST_CACHE:-$repo/target/test-cache}"
rustup_home="${RUSTUP_HOME:-$HOME/.rustup}"
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
fresh_cargo="${KILN_TEST_CACHE:-$HOME/.cache/kiln-test}/fresh-cargo"
mkdir -p "$fresh_cargo/registry" "$fresh_cargo/git" "$fresh_cargo/target"
KILN_TEST_CACHE="$cache" bash "$repo/.ci/base-image"

work="$(mktemp -d)"
cleanup() { docker rm -f "kiln-stepcache-cold-$$" "kiln-stepcache-warm-$$" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
git clone --quiet --no-local "$repo" "$work/kiln"
git -C "$work/kiln" checkout --quiet --detach "$(git -C "$repo" rev-parse "$commit")"
mkdir -p "$work/out"

# $1: cold | warm. Builds kiln, puts the counting compilers on PATH, then (warm) imports
# /out/cache.tar, times `kiln up`, and (cold) exports the cache to /out/cache.tar.
inner='set -eu
mode="$1"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends python3 python3-venv g++ ca-certificates >/dev/null
cd /src
cargo build --locked --release -q
kiln=/cargo-target/release/kiln
mkdir -p /opt/count/bin
for c in cc c++ gcc g++; do
  printf "#!/bin/sh\necho %s \"\$*\" >> /out/%s-compilers\nexec /usr/bin/%s \"\$@\"\n" "$c" "$mode" "$c" > /opt/count/bin/$c
  chmod +x /opt/count/bin/$c
done
: > "/out/$mode-compilers"
export PATH="/opt/count/bin:$PATH"
if [ "$mode" = warm ]; then "$kiln" cache import /out/cache.tar; fi
start=$(date +%s)
"$kiln" up 2>&1 | tee "/out/$mode.log"
echo $(( $(date +%s) - start )) > "/out/$mode-seconds"
if [ "$mode" = cold ]; then "$kiln" cache export /out/cache.tar; fi
chown -R "$HOST_UID:$HOST_GID" /out /root/.cargo/registry /root/.cargo/git "$CARGO_TARGET_DIR" || true'

trust=()
if [[ -n "${SSL_CERT_FILE:-}" && -f "$SSL_CERT_FILE" ]]; then
  ca=/etc/kiln-host-ca.pem
  trust=(-v "$SSL_CERT_FILE:$ca:ro" -e "SSL_CERT_FILE=$ca" -e "CARGO_HTTP_CAINFO=$ca"
    -e "PIP_CERT=$ca" -e "REQUESTS_CA_BUNDLE=$ca" -e "CURL_CA_BUNDLE=$ca")
fi
for mode in cold warm; do
  echo "== $mode: kiln up in a fresh $base container"
  docker run --name "kiln-stepcache-$mode-$$" --rm "${trust[@]}" \
    -v "$work/kiln:/src" -v "$work/out:/out" \
    -v "$rustup_home:/opt/rustup:ro" -v "$cargo_home/bin:/opt/cargo/bin:ro" \
    -v "$fresh_cargo/registry:/root/.cargo/registry" -v "$fresh_cargo/git:/root/.cargo/git" \
    -v "$fresh_cargo/target:/cargo-target" \
    -e CARGO_TARGET_DIR=/cargo-target -e HOST_UID="$(id -u)" -e HOST_GID="$(id -g)" \
    -e RUSTUP_HOME=/opt/rustup -e CARGO_HOME=/root/.cargo -e HOME=/root \
    -e PATH=/opt/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    -e CARGO_TERM_COLOR=never \
    "$base" bash -c "$inner" inner "$mode"
done
# A compile is a compiler run that is not a version query (`--version`, `-dumpversion`, …: what
# kiln's cache key and llama.cpp's CMake ask of a compiler without compiling anything).
queries='(^| )(--version|-v|-dumpversion|-dumpfullversion|-dumpmachine)( |$)'
printf '%-18s %8s %15s %10s\n' run seconds "compiler runs" compiles
for mode in cold warm; do
  printf '%-18s %8s %15s %10s\n' "$([ $mode = cold ] && echo cold || echo warm-from-import)" \
    "$(cat "$work/out/$mode-seconds")" "$(wc -l < "$work/out/$mode-compilers")" \
    "$(grep -Evc "$queries" "$work/out/$mode-compilers" || true)"
done
grep -c "restored from cache" "$work/out/warm.log" | sed 's/^/steps restored from cache (warm): /'
echo "compiler runs of the warm run (compiler, arguments):"
sed 's/^/  /' "$work/out/warm-compilers"
