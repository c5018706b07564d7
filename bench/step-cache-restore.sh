#!/usr/bin/env bash
# The step cache's restore of a many-file output (issue 46): a step writes N small files (default
# 10,000) into its output directory; state A runs and stores it, fresh state B (same
# KILN_CACHE_DIR) restores it. Prints the seconds of A's run+store and of B's restore (the whole
# `kiln up`), best of R runs (default 3), each on a fresh cache and fresh states.
# Usage: bash bench/step-cache-restore.sh [KILN_BINARY] [N] [R]
#        (default: target/release/kiln of this checkout, built if missing)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
kiln="${1:-$repo/target/release/kiln}"
n="${2:-10000}"
runs="${3:-3}"
if [[ ! -x "$kiln" ]]; then (cd "$repo" && cargo build --release -q); fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cat > "$work/r.toml" <<TOML
[recipe]
name = "many-files"

[[step]]
id = "write"
kind = "run"
cmd = ["python3", "-c", "import os,sys; d=sys.argv[1]; os.makedirs(d, exist_ok=True); [open(os.path.join(d, 'f%05d.txt' % i), 'w').write('file %d\\\\n' % i) for i in range($n)]", "\${kiln.work_dir}/out"]
outputs = ["\${kiln.work_dir}/out"]
check = { paths = ["\${kiln.work_dir}/out/f00000.txt"] }
TOML
secs() { python3 -c 'import sys,time; print("%.2f" % (time.time() - float(sys.argv[1])))' "$1"; }
best_store="" best_restore=""
for i in $(seq 1 "$runs"); do
  rm -rf "$work/cache" "$work/A" "$work/B"
  sync
  export KILN_CACHE_DIR="$work/cache" KILN_NO_PROGRESS=1 KILN_CACHE_SIGNING_KEY=
  t=$(date +%s.%N); KILN_HOME="$work/A" "$kiln" up "$work/r.toml" > "$work/a.log" 2>&1; a=$(secs "$t")
  sync
  t=$(date +%s.%N)
  KILN_HOME="$work/B" KILN_CACHE_REQUIRE_SIGS=false "$kiln" up "$work/r.toml" > "$work/b.log" 2>&1
  b=$(secs "$t")
  grep -q "restored from cache" "$work/b.log" || { cat "$work/b.log"; echo "B did not restore" >&2; exit 1; }
  [[ $(ls "$work/B/work/many-files/out" | wc -l) == "$n" ]] || { echo "B restored a wrong count" >&2; exit 1; }
  echo "run $i: A run+store ${a}s, B restore ${b}s"
  if [[ -z "$best_store" ]] || python3 -c "import sys; sys.exit(not $a < $best_store)"; then best_store=$a; fi
  if [[ -z "$best_restore" ]] || python3 -c "import sys; sys.exit(not $b < $best_restore)"; then best_restore=$b; fi
done
printf '%-10s %8s %18s %16s\n' files runs "A run+store (s)" "B restore (s)"
printf '%-10s %8s %18s %16s\n' "$n" "$runs" "$best_store" "$best_restore"
