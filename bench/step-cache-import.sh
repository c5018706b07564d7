#!/usr/bin/env bash
# Issue 46's fresh-state figure on CPU, signatures on: state A builds the shipped `tiny-cpu`
# recipe cold (its own cache, signing with a fleet key made by `kiln cache key generate`), serves
# and benches it, and exports its cache; then each run is a fresh state B with an empty cache
# that trusts only the fleet's public key (KILN_CACHE_TRUSTED_KEYS, signatures required, no
# signing key): it imports the archive and runs `kiln up tiny-cpu` to a served, benched server.
# The figure is B's import + up, wall-clock. Both ups bench 3 runs of 256 tokens (as the CPU
# demo's e2e test), on a free port; each server is stopped after its run.
#
# Usage: bash bench/step-cache-import.sh KILN_B [RUNS] [KILN_A]
#   KILN_B: the kiln whose import + up is timed (a release build); KILN_A: the one that builds
#   cold (default KILN_B). WORK=DIR keeps the work directory (default: a fresh temp dir);
#   an existing $WORK/cache.tar and $WORK/key.txt skip the cold build.
set -euo pipefail
kiln_b="$(realpath "${1:?usage: bench/step-cache-import.sh KILN_B [RUNS] [KILN_A]}")"
runs="${2:-3}"
kiln_a="$(realpath "${3:-$kiln_b}")"
work="${WORK:-$(mktemp -d)}"
mkdir -p "$work"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
args=(tiny-cpu --set "port=$port" --bench-runs 3 --bench-max-tokens 256)
now() { date +%s.%N; }
unset KILN_CACHE_SIGNING_KEY KILN_CACHE_TRUSTED_KEYS KILN_CACHE_REQUIRE_SIGS KILN_REMOTE_CACHE
export KILN_NO_PROGRESS=1

if [[ ! -f "$work/cache.tar" || ! -f "$work/key.txt" ]]; then
  rm -f "$work/fleet.key"
  KILN_HOME="$work/keys" "$kiln_a" cache key generate fleet --out "$work/fleet.key" > "$work/key.txt"
  echo "== cold: state A builds tiny-cpu, signing with the fleet key" >&2
  a=(env KILN_HOME="$work/A" KILN_CACHE_DIR="$work/A-cache" KILN_CACHE_SIGNING_KEY="$work/fleet.key")
  start=$(now)
  "${a[@]}" "$kiln_a" up "${args[@]}" > "$work/A.log" 2>&1 || { tail -30 "$work/A.log" >&2; exit 1; }
  echo "cold up: $(echo "$(now) - $start" | bc) s" > "$work/A-seconds"
  "${a[@]}" "$kiln_a" serve --stop tiny-cpu > /dev/null 2>&1 || true
  "${a[@]}" "$kiln_a" cache export "$work/cache.tar" >&2
fi
public="$(sed -n 's/^public key: //p' "$work/key.txt")"
cat "$work/A-seconds" 2>/dev/null >&2 || true
printf '%-4s %9s %9s %9s %9s %6s %s\n' run import_s up_s total_s restored ran exit
for r in $(seq 1 "$runs"); do
  rm -rf "$work/B$r" "$work/B$r-cache"
  b=(env KILN_HOME="$work/B$r" KILN_CACHE_DIR="$work/B$r-cache" KILN_CACHE_TRUSTED_KEYS="$public")
  t0=$(now)
  "${b[@]}" "$kiln_b" cache import "$work/cache.tar" > "$work/B$r-import.log" 2>&1
  t1=$(now)
  code=0
  "${b[@]}" "$kiln_b" up "${args[@]}" > "$work/B$r.log" 2>&1 || code=$?
  t2=$(now)
  "${b[@]}" "$kiln_b" serve --stop tiny-cpu > /dev/null 2>&1 || true
  printf '%-4s %9.2f %9.2f %9.2f %9s %6s %s\n' "$r" "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)" \
    "$(echo "$t2 - $t0" | bc)" "$(grep -c 'restored from cache' "$work/B$r.log" || true)" \
    "$(grep -cE 'ran +[a-z]' "$work/B$r.log" || true)" "$code"
done
echo "logs: $work" >&2
