#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with the carry from bench/gpu-loop/pack.sh
# (CARRY, default .carry/). Modes, run in this order, any subset:
#   doctor      plain `kiln doctor` on the machine's python (torch never imported): the first call
#               of the lease (empty facts cache, torch's libraries not yet in the page cache), then
#               warm; what it read of torch; then the seed recipe's preflight, `kiln up
#               glm5-nvfp4-sm120 --dry-run` (the hint that would run; FlashInfer's 9.0a target)
#   up          machine facts, `kiln up llama-cuda --profile tuned --set llama_bench=on`: build,
#               serve, prove, bench, and llama.cpp's own llama-bench (the ceiling) from the same tree
#   ensure      `kiln up llama-cuda --no-serve`: a no-op on a warm machine, the build on a fresh one
#   cache       the step cache: state A (KILN_HOME) `kiln up llama-cuda` from empty (build, serve,
#               prove, bench) -> `kiln cache export` -> fresh state B with an empty cache, `kiln
#               cache import` -> `kiln up llama-cuda` timed (target <= 60 s against the 383 s cold
#               run), its "restored from cache" lines
#   fleet       the seed recipe's flashinfer + flashinfer-warmup steps as two machines would run
#               them: host A from empty (FlashInfer compiles its kernels), `kiln cache export`;
#               host B (another state, the same cache path emptied) `kiln cache import`, the same
#               steps: the warm-up is restored from the step cache and nothing compiles
#   evidence    evidence-ab.sh: `-lv 5` / `--metrics` on and off, paired; the TTFT probe
#   flashinfer  the seed recipe's flashinfer + flashinfer-warmup steps against the machine's torch
#               and CUDA (stack=system, JIT), twice: a fresh state, then another fresh state that
#               shares the cache (the second must compile nothing)
#   tune        `kiln tune llama-cuda --profile spec` over draft_max x ubatch, by grid then by race
#               (TUNE_METHODS="race" or "grid race race" picks the methods and their order)
#   noise       `spec` (draft_max 8) served once and benchmarked 10 times in a row with the race's
#               screening rung (1 warm-up, 3 x 256 tokens): the spread between measurements of one
#               launch against the spread inside each
#   prebuilt    a llama-server built earlier (CARRY/llama-server.gz) instead of the build
#   ngl         `kiln tune llama-cuda --profile tuned --vary=-ngl=999,12`: a variant that asks for 12
#               of 17 layers on the GPU and gets 12 is as asked, and is benchmarked (issue 30)
# Everything lands in $OUT: summary.txt and results.tar.gz (reports, logs, tune tables, figures).
set -uo pipefail
modes=" ${*:-up} "
root=$PWD
carry=${CARRY:-$root/.carry}
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$root/out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export KILN_HOME=/root/kiln-state PIP_NO_INDEX=1 PIP_FIND_LINKS=$carry/wheels KILN_NO_UV=1
export PYTHONUNBUFFERED=1
res=/root/gpu-loop-results
mkdir -p "$res" "$KILN_HOME"
kiln=$carry/kiln
chmod +x "$kiln"
summary=$OUT/summary.txt
say() { echo "== $(date +%T) $*" | tee -a "$summary"; }
src=()
[[ -f $carry/llama-src.tar.gz ]] &&
  src=(--set "src_url=file://$carry/llama-src.tar.gz" --set "src_sha256=$(sha256sum "$carry/llama-src.tar.gz" | cut -d' ' -f1)")

stop_server() { "$kiln" serve llama-cuda --stop >/dev/null 2>&1 || true; }
metrics() { python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:30090/metrics',timeout=10).read().decode())" >"$res/metrics-$1.txt" 2>&1 || true; }
collect() {
  cp -r "$KILN_HOME/reports" "$KILN_HOME/tune" "$res/" 2>/dev/null
  mkdir -p "$res/serve-logs" "$res/step-logs"
  # Server logs at -lv 5 hold a line per token: keep the first and last 400 lines of each.
  for f in "$KILN_HOME"/serve/*.log; do
    [[ -f $f ]] || continue
    { head -400 "$f"; echo "... ($(wc -l <"$f") lines in all)"; tail -400 "$f"; } >"$res/serve-logs/$(basename "$f")"
  done
  find "$KILN_HOME/runs" -name '*.log' -exec cp {} "$res/step-logs/" \; 2>/dev/null
  tar -C /root -czf "$OUT/results.tar.gz" gpu-loop-results
}
timed() { # label cmd...: runs it, says its exit status and wall time
  local label=$1 t0 rc
  shift
  t0=$(date +%s%N)
  "$@"
  rc=$?
  local ms=$((($(date +%s%N) - t0) / 1000000))
  echo "$label: exit $rc, wall $((ms / 1000)).$(printf %03d $((ms % 1000))) s" | tee -a "$summary"
  return $rc
}

if [[ $modes == *" doctor "* ]]; then
  say "doctor: plain, cold (first call, empty facts cache) then warm; python3 = $(command -v python3)"
  dh=/root/kiln-doctor-state
  rm -rf "$dh"
  timed "doctor cold" env KILN_HOME=$dh "$kiln" doctor >"$res/doctor-cold.out" 2>"$res/doctor-cold.err"
  for i in 1 2 3; do
    timed "doctor warm $i" env KILN_HOME=$dh "$kiln" doctor >"$res/doctor-warm.out" 2>"$res/doctor-warm.err"
  done
  rm -rf "$dh/cache/python-facts"
  timed "doctor cold facts cache, warm page cache" env KILN_HOME=$dh "$kiln" doctor >/dev/null 2>&1
  env KILN_HOME=$dh "$kiln" doctor python.torch torch.arch sass.packages -v 2>&1 | tee -a "$summary"
  say "the seed recipe's preflight: kiln up glm5-nvfp4-sm120 --dry-run"
  timed "up --dry-run glm5-nvfp4-sm120" env KILN_HOME=/root/kiln-dry-state "$kiln" up glm5-nvfp4-sm120 --dry-run \
    --set prefix=/root/kiln-dry-opt >"$res/dry-run.out" 2>"$res/dry-run.err"
  grep -E "warning|launch.gpus|launch.quantization|hint|error" "$res/dry-run.err" | tee -a "$summary"
  env KILN_HOME=/root/kiln-dry-state "$kiln" doctor --recipe glm5-nvfp4-sm120 toolchain.arch -v 2>&1 | tee -a "$summary"
  collect
fi

if [[ $modes == *" up "* ]]; then
  say "machine"
  { nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader; nvcc --version | tail -1; cmake --version | head -1; nproc; } 2>&1 | tee -a "$summary"
  say "kiln up llama-cuda --profile tuned --set llama_bench=on"
  timed "up tuned" "$kiln" up llama-cuda --profile tuned --set llama_bench=on "${src[@]}" >"$res/up-tuned.out" 2>"$res/up-tuned.err"
  tail -6 "$res/up-tuned.err" | tee -a "$summary"
  metrics tuned
  stop_server
  cp "$KILN_HOME/reports/llama-cuda/report.json" "$res/report-tuned.json" 2>/dev/null
  cp "$KILN_HOME/reports/llama-cuda/report.md" "$res/report-tuned.md" 2>/dev/null
  cp "$KILN_HOME/work/llama-cuda/llama-bench.json" "$res/" 2>/dev/null
  python3 - "$res/llama-bench.json" "$res/report-tuned.json" <<'PY' | tee -a "$summary"
import json, sys
try:
    for r in json.load(open(sys.argv[1])):
        print(f"llama-bench tg{r['n_gen']}: {r['avg_ts']:.1f} tok/s (sd {r['stddev_ts']:.1f}), fa {r.get('flash_attn')}, ub {r.get('n_ubatch')}")
    rep = json.load(open(sys.argv[2]))
    b = rep["bench"]
    print(f"served (kiln up, tuned): decode median {b['decode_tok_s']['median']:.1f} tok/s, TTFT ms {[round(x['ttft_s']*1000,1) for x in b['runs']]}")
    for l in rep.get("launches", []):
        print("launch:", json.dumps({k: l.get(k) for k in ("launch", "pid", "args_difference", "figures", "ready_after_s")}))
        for v in l.get("verdicts", []):
            print(f"   {v.get('feature')}: {v.get('status')}: {str(v.get('reason'))[:120]}")
    print("ceiling:", json.dumps(rep.get("ceiling")))
except Exception as e:
    print("no llama-bench figure:", e)
PY
  collect
fi

if [[ $modes == *" prebuilt "* ]]; then
  say "installing the prebuilt llama-server and writing the models"
  w=$KILN_HOME/work/llama-cuda
  mkdir -p "$w/bin" "$w/model"
  gzip -dc "$carry/llama-server.gz" >"$w/bin/llama-server" && chmod +x "$w/bin/llama-server"
  python3 -m pip install -q --no-index --no-deps --target /tmp/site "$carry"/wheels/gguf-*.whl
  gen() { PYTHONPATH=/tmp/site python3 recipes/tiny-cpu/make_tiny_gguf.py --vocab "$carry/vocab.gguf" \
    --logit-std 40 --residual-scale 0.05 "$@"; }
  gen --out "$w/model/target.gguf" --embd 2048 --layers 16 --ff 5632 --heads 16 --seed 1234 | tee -a "$summary"
  gen --out "$w/model/draft-mismatch.gguf" --seed 99 | tee -a "$summary"
fi

# A machine that went back between calls is bare: build again (a no-op when warm).
warm=yes
if [[ $modes == *" ensure "* ]]; then
  [[ -x $KILN_HOME/work/llama-cuda/bin/llama-server ]] || warm=no
  say "ensure the llama-cuda build (machine warm: $warm)"
  timed "ensure" "$kiln" up llama-cuda --no-serve --no-doctor "${src[@]}" >"$res/ensure.out" 2>"$res/ensure.err"
fi

if [[ $modes == *" flashinfer "* ]]; then
  venv=$(python3 -c 'import sys; print(sys.prefix)')
  cuda=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
  say "flashinfer: glm5-nvfp4-sm120's flashinfer steps, stack=system (venv $venv, CUDA $cuda), JIT, sm_90a"
  export KILN_CACHE_DIR=/root/kiln-cache-flashinfer
  for pass in cold warm; do
    # PIP_NO_DEPS: only the carried wheels (flashinfer-python, apache-tvm-ffi) are installed;
    # cudnn-frontend and cutlass-dsl are imported lazily, by kernels the warm-up does not use.
    timed "flashinfer $pass (fresh state, shared cache)" timeout 280 env KILN_HOME=/root/fi-state-$pass PIP_NO_DEPS=1 \
      "$kiln" up glm5-nvfp4-sm120 --set stack=system --set "venv=$venv" --set "cuda_link=$cuda" \
      --set arch=9.0 --set flashinfer_arch=9.0a --set flashinfer_kernels=jit \
      --set model=/nonexistent --set draft_model=/nonexistent \
      --only system-torch --only flashinfer --only flashinfer-warmup --no-serve --no-doctor \
      >"$res/flashinfer-$pass.out" 2>"$res/flashinfer-$pass.err"
    mkdir -p "$res/flashinfer-$pass"
    find "/root/fi-state-$pass/runs" -name '*.log' -exec cp {} "$res/flashinfer-$pass/" \; 2>/dev/null
    grep -h "MLA paged\|ragged prefill\|compiled\|JIT cache\|flashinfer 0" "$res/flashinfer-$pass"/*warmup*.log 2>/dev/null | tee -a "$summary"
    tail -3 "$res/flashinfer-$pass.err" | tee -a "$summary"
  done
  du -sh "$KILN_CACHE_DIR/flashinfer" 2>&1 | tee -a "$summary"
  unset KILN_CACHE_DIR
  collect
fi

if [[ $modes == *" cache "* ]]; then
  say "step cache: state A up from empty, export; fresh state B import, up (signatures on, issue 46)"
  # A signs with a fleet key; B holds no key and trusts only its public half.
  rm -f /root/kiln-fleet.key
  public=$("$kiln" cache key generate fleet --out /root/kiln-fleet.key | sed -n 's/^public key: //p')
  export KILN_CACHE_SIGNING_KEY=/root/kiln-fleet.key
  timed "cache: state A up (cold, 383 s before)" "$kiln" up llama-cuda "${src[@]}" >"$res/cache-a.out" 2>"$res/cache-a.err"
  tail -4 "$res/cache-a.err" | tee -a "$summary"
  stop_server
  archive=/root/kiln-step-cache.tar
  rm -f "$archive"
  timed "cache: export" "$kiln" cache export "$archive" 2>&1 | tee -a "$summary"
  ls -l "$archive" | tee -a "$summary"
  sb=/root/kiln-state-b
  rm -rf "$sb"
  mkdir -p "$sb"
  unset KILN_CACHE_SIGNING_KEY
  timed "cache: import" env KILN_HOME=$sb KILN_CACHE_TRUSTED_KEYS="$public" "$kiln" cache import "$archive" 2>&1 | tee -a "$summary"
  timed "cache: state B up (target <= 60 s, cold 383 s)" env KILN_HOME=$sb KILN_CACHE_TRUSTED_KEYS="$public" "$kiln" up llama-cuda "${src[@]}" \
    >"$res/cache-b.out" 2>"$res/cache-b.err"
  grep -E "restored from cache|ran |not cached|refused|tok/s|error" "$res/cache-b.err" "$res/cache-b.out" | tee -a "$summary"
  env KILN_HOME=$sb "$kiln" serve llama-cuda --stop >/dev/null 2>&1 || true
  mkdir -p "$res/cache-b"
  cp -r "$sb/reports" "$res/cache-b/" 2>/dev/null
  find "$sb/runs" -name '*.log' -exec cp {} "$res/cache-b/" \; 2>/dev/null
  collect
fi

if [[ $modes == *" fleet "* ]]; then
  venv=$(python3 -c 'import sys; print(sys.prefix)')
  cuda=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
  say "fleet: glm5-nvfp4-sm120's flashinfer steps on host A, then host B from A's exported cache (venv $venv, CUDA $cuda, JIT, sm_90a)"
  # One cache path on both hosts (the default's role); B's starts empty, as a new machine's.
  export KILN_CACHE_DIR=/root/kiln-cache-fleet
  # Both hosts are the fleet's builders: they sign with, and so trust, one key (issue 46).
  rm -f /root/kiln-fleet-builders.key
  "$kiln" cache key generate fleet --out /root/kiln-fleet-builders.key >/dev/null
  export KILN_CACHE_SIGNING_KEY=/root/kiln-fleet-builders.key
  fi_up() { # host
    env KILN_HOME=/root/fleet-$1 PIP_NO_DEPS=1 timeout 280 \
      "$kiln" up glm5-nvfp4-sm120 --set stack=system --set "venv=$venv" --set "cuda_link=$cuda" \
      --set arch=9.0 --set flashinfer_arch=9.0a --set flashinfer_kernels=jit \
      --set model=/nonexistent --set draft_model=/nonexistent \
      --only system-torch --only flashinfer --only flashinfer-warmup --no-serve --no-doctor \
      >"$res/fleet-$1.out" 2>"$res/fleet-$1.err"
  }
  rm -rf "$KILN_CACHE_DIR" /root/fleet-a /root/fleet-b
  timed "fleet: host A (empty cache)" fi_up a
  tail -5 "$res/fleet-a.err" | tee -a "$summary"
  find "$KILN_CACHE_DIR/flashinfer" -name '*.so' | wc -l | sed 's/^/fleet: host A kernels (.so) in the JIT cache: /' | tee -a "$summary"
  archive=/root/kiln-fleet-cache.tar
  rm -f "$archive"
  timed "fleet: host A export" "$kiln" cache export "$archive" 2>&1 | tee -a "$summary"
  ls -l "$archive" | tee -a "$summary"
  rm -rf "$KILN_CACHE_DIR"
  timed "fleet: host B import" env KILN_HOME=/root/fleet-b "$kiln" cache import "$archive" 2>&1 | tee -a "$summary"
  timed "fleet: host B (A's cache imported)" fi_up b
  tail -5 "$res/fleet-b.err" | tee -a "$summary"
  grep -E "restored from cache|ran " "$res/fleet-b.err" | tee -a "$summary"
  find "$KILN_CACHE_DIR/flashinfer" -name '*.so' | wc -l | sed 's/^/fleet: host B kernels (.so) after its run: /' | tee -a "$summary"
  for h in a b; do
    mkdir -p "$res/fleet-$h-logs"
    find "/root/fleet-$h/runs" -name '*.log' -exec cp {} "$res/fleet-$h-logs/" \; 2>/dev/null
  done
  grep -h "MLA paged\|ragged prefill\|compiled\|JIT cache\|flashinfer 0" "$res"/fleet-*-logs/*warmup*.log 2>/dev/null | tee -a "$summary"
  unset KILN_CACHE_DIR
  collect
fi

if [[ $modes == *" evidence "* ]]; then
  if [[ -x $KILN_HOME/work/llama-cuda/bin/llama-server ]]; then
    say "evidence A/B on tuned's flags (-lv 5, --metrics), then the TTFT probe"
    timed "evidence" bash "$here/evidence-ab.sh" "$kiln" "$res/evidence" 2>&1 | tail -20 | tee -a "$summary"
  else
    say "evidence skipped: no llama-server build on this machine"
  fi
  collect
fi

if [[ $modes == *" noise "* ]]; then
  say "noise: spec (draft_max=8) served once, 10 screening measurements in a row"
  "$kiln" serve llama-cuda --profile spec --set draft_max=8 --detach >"$res/noise-serve.out" 2>"$res/noise-serve.err"
  for i in $(seq 1 10); do
    "$kiln" bench --url http://127.0.0.1:30090 --api openai --warmup 1 --runs 3 --max-tokens 256 --json \
      >"$res/noise-$i.json" 2>/dev/null
  done
  stop_server
  python3 - "$res" <<'PY' | tee -a "$summary"
import json, statistics as st, sys, glob
def runs(path):
    text = open(path).read()
    docs = []
    try:
        docs = [json.loads(text)]
    except ValueError:
        docs = [json.loads(l) for l in text.splitlines() if l.strip()]
    for d in docs:
        stack = [d]
        while stack:
            x = stack.pop()
            if isinstance(x, dict):
                if isinstance(x.get("runs"), list) and x["runs"] and "decode_tok_s" in x["runs"][0]:
                    return [r["decode_tok_s"] for r in x["runs"]]
                stack.extend(x.values())
    return []
meds = []
for i in range(1, 11):
    r = runs(f"{sys.argv[1]}/noise-{i}.json")
    if r:
        meds.append(st.median(r))
        print(f"measurement {i}: " + ", ".join(f"{x:.1f}" for x in r) + f" (CV {st.pstdev(r)/st.mean(r)*100:.2f} %)")
if len(meds) > 1:
    print(f"between measurements: mean {st.mean(meds):.1f}, CV {st.stdev(meds)/st.mean(meds)*100:.2f} %, range {min(meds):.1f}-{max(meds):.1f}")
PY
  collect
fi

if [[ $modes == *" ngl "* ]]; then
  say "kiln tune llama-cuda --profile tuned --vary=-ngl=999,12"
  "$kiln" tune llama-cuda --profile tuned --vary=-ngl=999,12 --dry-run 2>&1 | head -3 | tee -a "$summary"
  timed "tune ngl" "$kiln" tune llama-cuda --profile tuned --vary=-ngl=999,12 --max-tokens 256 \
    "${src[@]}" >"$res/tune-ngl.out" 2>"$res/tune-ngl.err"
  cat "$res/tune-ngl.out" | tee -a "$summary"
  grep -iE "offload|layers|disqualif|fell back|as asked|tok/s" "$res/tune-ngl.err" | tail -20 | tee -a "$summary"
  "$kiln" tune llama-cuda --profile tuned --vary=-ngl=999,12 --json --dry-run >"$res/tune-ngl-dry.jsonl" 2>&1
  stop_server
  cp "$KILN_HOME/tune/llama-cuda/tuned.json" "$res/tune-ngl.json" 2>/dev/null
  # The build, for a later call's `prebuilt` mode (CARRY/llama-server.gz).
  gzip -9c "$KILN_HOME/work/llama-cuda/bin/llama-server" >"$OUT/llama-server.gz" 2>/dev/null
  collect
fi

if [[ $modes == *" tune "* ]]; then
  for method in ${TUNE_METHODS:-grid race}; do
    say "kiln tune llama-cuda --profile spec --method $method"
    "$kiln" tune llama-cuda --profile spec --method "$method" --vary draft_max=2,4,8,16 \
      --vary ubatch=256,1024 --dry-run 2>&1 | tail -1 | tee -a "$summary"
    timed "tune $method" "$kiln" tune llama-cuda --profile spec --method "$method" \
      --vary draft_max=2,4,8,16 --vary ubatch=256,1024 --max-tokens "${TUNE_MAX_TOKENS:-2048}" \
      >"$res/tune-$method.out" 2>"$res/tune-$method.err"
    cat "$res/tune-$method.out" | tee -a "$summary"
    grep "tune \`spec\`" "$res/tune-$method.err" | tee -a "$summary"
    stop_server
    n=$(ls "$res"/tune-"$method"*.json 2>/dev/null | wc -l)
    cp "$KILN_HOME/tune/llama-cuda/spec.json" "$res/tune-$method-$((n + 1)).json" 2>/dev/null
    cp "$res/tune-$method.out" "$res/tune-$method-$((n + 1)).out"; cp "$res/tune-$method.err" "$res/tune-$method-$((n + 1)).err"
    collect
  done
fi
collect
