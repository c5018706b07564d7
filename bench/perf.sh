#!/usr/bin/env bash
# Issue 14's ratios (no-op vs make, full run vs make -j2, plan time/RSS, export vs tar|openssl)
# in one paired run. Usage: bench/perf.sh [--smoke]   (KILN_BIN=path skips the release build)
# Needs: cargo, make, python3, tar, openssl.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
for tool in make python3 tar openssl; do
    command -v "$tool" >/dev/null || { echo "bench: $tool is missing" >&2; exit 1; }
done
if [ -n "${KILN_BIN:-}" ]; then
    kiln=$KILN_BIN
else
    (cd "$root" && cargo build --release --quiet --bin kiln)
    kiln="$root/target/release/kiln"
fi
exec python3 "$root/bench/perf.py" "$kiln" "$@"
