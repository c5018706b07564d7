#!/usr/bin/env bash
# What an unreachable remote step cache adds to a whole run (issue 46: at most 10 s). A recipe of
# S cached steps (default 10) runs on a fresh state and an empty local cache, so every step
# misses and would ask the remote (`KILN_REMOTE_CACHE`), once per remote kind:
#   none        no remote: the baseline
#   refused     a port nothing listens on (the connection is refused at once)
#   silent      a server that accepts and never answers (the first-byte deadline)
#   unreachable a port whose connections never complete (a listener with a full accept queue
#               drops each SYN, as a firewalled or dead host does: the connect deadline)
# Prints one row per kind: the run's seconds (best of R, default 2), the added seconds, how many
# times kiln said the remote is unavailable (once per run is the design) and the steps it ran.
# Usage: bash bench/remote-unreachable.sh [KILN_BINARY] [S] [R]
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
kiln="${1:-$repo/target/release/kiln}"
steps="${2:-10}"
runs="${3:-2}"
if [[ ! -x "$kiln" ]]; then (cd "$repo" && cargo build --release -q); fi
work="$(mktemp -d)"
silent_pid=""
trap '[[ -n $silent_pid ]] && kill "$silent_pid" 2>/dev/null; rm -rf "$work"' EXIT
{
  printf '[recipe]\nname = "remote-miss"\n'
  for i in $(seq 1 "$steps"); do
    printf '\n[[step]]\nid = "s%s"\nkind = "run"\n' "$i"
    printf 'cmd = ["sh", "-c", "mkdir -p \\"$1\\" && echo %s > \\"$1/f\\"", "sh", "${kiln.work_dir}/s%s"]\n' "$i" "$i"
    printf 'outputs = ["${kiln.work_dir}/s%s"]\n' "$i"
  done
} >"$work/r.toml"
# The silent server accepts every connection and holds it open without a byte; the unreachable
# one never accepts, and its one-place queue is filled at once, so every later SYN is dropped.
python3 - "$work/silent.port" "$work/unreachable.port" <<'PY' &
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(64)
u = socket.socket(); u.bind(("127.0.0.1", 0)); u.listen(0)
filler = socket.create_connection(u.getsockname())
open(sys.argv[2], "w").write(str(u.getsockname()[1]))
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
held = []
while True:
    held.append(s.accept())
PY
silent_pid=$!
for _ in $(seq 1 50); do [[ -s $work/silent.port ]] && break; sleep 0.1; done
refused_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
declare -A remote=(
  [none]=""
  [refused]="127.0.0.1:$refused_port/kiln/cache:t"
  [silent]="127.0.0.1:$(cat "$work/silent.port")/kiln/cache:t"
  [unreachable]="127.0.0.1:$(cat "$work/unreachable.port")/kiln/cache:t"
)
secs() { python3 -c 'import sys,time; print("%.2f" % (time.time() - float(sys.argv[1])))' "$1"; }
printf '| remote | run (s, best of %s) | added (s) | "unavailable" said | steps ran |\n|---|---|---|---|---|\n' "$runs"
base=""
for kind in none refused silent unreachable; do
  best=""
  for i in $(seq 1 "$runs"); do
    rm -rf "$work/state" "$work/cache"
    t=$(date +%s.%N)
    KILN_HOME="$work/state" KILN_CACHE_DIR="$work/cache" KILN_NO_PROGRESS=1 \
      KILN_REMOTE_CACHE="${remote[$kind]}" "$kiln" up "$work/r.toml" >"$work/$kind.log" 2>&1 ||
      { cat "$work/$kind.log"; echo "remote-unreachable: kiln up failed with remote $kind" >&2; exit 1; }
    s=$(secs "$t")
    if [[ -z $best ]] || python3 -c "import sys; sys.exit(not $s < $best)"; then best=$s; fi
  done
  [[ $kind == none ]] && base=$best
  said=$(grep -c "the remote cache is unavailable" "$work/$kind.log" || true)
  ran=$(grep -c "✓ ran" "$work/$kind.log" || true)
  printf '| %s | %s | %s | %s | %s |\n' "$kind" "$best" "$(python3 -c "print('%.2f' % ($best - $base))")" "$said" "$ran"
done
