#!/usr/bin/env bash
# What the proof's evidence-only settings cost: `tuned`'s own llama-server command (the binary
# and model `kiln up llama-cuda` built) started by hand with and without `-lv 5` (CUDA graph reuse
# logged per token: the only evidence of CUDA graphs) and `--metrics` (the acceptance counters),
# in a balanced order (A B C D D C B A: drift cancels), each benchmarked by `kiln bench` in the
# seed's format (2 warm-ups, 5 x 2048 tokens, greedy). Also: what the warm-up costs (its seconds),
# and a TTFT probe (requests with no warm-up, llama-server's own timings beside the client's).
# Usage (on the GPU machine, after `kiln up llama-cuda`): evidence-ab.sh KILN OUTDIR
# BENCH="--runs 1 --max-tokens 8" PROBE="1 8" make it short (a rehearsal on the CPU demo's server).
set -uo pipefail
read -ra bench <<<"${BENCH:---runs 5 --warmup 2 --max-tokens 2048}"
read -r probe_n probe_tokens <<<"${PROBE:-5 2048}"
kiln=$1 out=$2
mkdir -p "$out"
w=${KILN_HOME:?}/work/llama-cuda
bin=$w/bin/llama-server model=$w/model/target.gguf port=${PORT:-30190}
base=(-m "$model" --host 127.0.0.1 --port "$port" -c 4096 -np 1 --alias random-llama-1b
  -ngl 999 -fa on -ub "${UBATCH:-1024}")
declare -A cfg=(
  [lv5-metrics]="-lv 5 --metrics"
  [lv5]="-lv 5"
  [metrics]="--metrics"
  [plain]=""
)
start() { # name extra...
  local name=$1
  shift
  "$bin" "${base[@]}" "$@" >>"$out/server-$name.log" 2>&1 &
  pid=$!
  python3 - "$port" <<'PY' && return 0
import sys, time, urllib.request
for _ in range(600):
    try:
        if urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=1).status == 200:
            sys.exit(0)
    except Exception:
        time.sleep(0.1)
sys.exit(1)
PY
  echo "server $name did not come up" >&2
  return 1
}
stop() {
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  sleep 0.5
}
i=0
for name in lv5-metrics lv5 metrics plain plain metrics lv5 lv5-metrics; do
  i=$((i + 1))
  # shellcheck disable=SC2086 # the flags are words
  start "$name" ${cfg[$name]} || continue
  "$kiln" bench --url "http://127.0.0.1:$port" --api openai --json "${bench[@]}" \
    >"$out/bench-$i-$name.json" 2>"$out/bench-$i-$name.err"
  python3 - "$out/bench-$i-$name.json" "$name" "$i" <<'EOF' | tee -a "$out/evidence-ab.txt"
import json, sys
r = json.load(open(sys.argv[1]))
d = r.get("decode_tok_s") or r["e2e_tok_s"]
srv = [x["server_decode_tok_s"] for x in r["runs"] if x.get("server_decode_tok_s")]
ttft = [round(x["ttft_s"] * 1000, 1) for x in r["runs"]]
print(f"{sys.argv[3]} {sys.argv[2]:<12} decode median {d['median']:.1f} tok/s (CV {d['cv']*100:.1f}%), "
      f"server predicted_per_second median {sorted(srv)[len(srv)//2] if srv else 0:.1f}, TTFT ms {ttft}")
EOF
  stop
done
# The TTFT probe (llama-server's own prompt_ms beside the client's TTFT, with log timestamps):
# on the shipped flags and on none, with no warm-up, then kiln's way (two 64-token warm-ups).
for name in lv5-metrics plain; do
  # shellcheck disable=SC2086
  start "probe-$name" ${cfg[$name]} --log-timestamps || continue
  python3 "$(dirname "$0")/ttft-probe.py" "http://127.0.0.1:$port" "$probe_n" "$probe_tokens" 0 | tee "$out/ttft-$name.txt"
  python3 "$(dirname "$0")/ttft-probe.py" "http://127.0.0.1:$port" "$probe_n" "$probe_tokens" 2 | tee -a "$out/ttft-$name.txt"
  stop
done
# What -lv 5 writes: lines and bytes per server log (each holds two launches of 7 requests).
wc -lc "$out"/server-*.log >"$out/log-sizes.txt" 2>/dev/null
# Keep the logs small: the first and last 300 lines of each.
for f in "$out"/server-*.log; do
  { head -300 "$f"; echo "... ($(wc -l <"$f") lines in all)"; tail -300 "$f"; } >"$f.trim" && mv "$f.trim" "$f"
done
