#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with .carry/ from bench/gpu-loop/pack.sh:
#   bash bench/gpu-loop/device-run.sh up tune  # doctor --deep, kiln up llama-cuda for the tuned,
#                                             # spec and spec-mismatch profiles, then kiln tune:
#                                             # exhaustive grid vs successive halving
# Everything it proves lands in $OUT: results.tar.gz (reports, server logs, /metrics, step logs,
# tune tables) and summary.txt.
set -uo pipefail
modes=" ${*:-up} "
root=$PWD
carry=$root/.carry
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
  mkdir -p "$res/serve-logs"
  find "$KILN_HOME" -name '*.log' -path '*serve*' -exec cp {} "$res/serve-logs/" \; 2>/dev/null
  mkdir -p "$res/step-logs"
  find "$KILN_HOME/runs" -name '*.log' -exec cp {} "$res/step-logs/" \; 2>/dev/null
  tar -C /root -czf "$OUT/results.tar.gz" gpu-loop-results
}

if [[ $modes == *" up "* ]]; then
  say "machine"
  { nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader; nvcc --version | tail -1; cmake --version | head -1; nproc; } 2>&1 | tee -a "$summary"
  say "kiln doctor --deep"
  /usr/bin/time -f "doctor --deep wall %e s" "$kiln" doctor --deep --json >"$res/doctor-deep.json" 2>"$res/doctor-deep.err"
  echo "exit $?" | tee -a "$summary"; tail -1 "$res/doctor-deep.err" | tee -a "$summary"
  for profile in tuned spec spec-mismatch; do
    say "kiln up llama-cuda --profile $profile"
    /usr/bin/time -f "wall %e s" "$kiln" up llama-cuda --profile "$profile" "${src[@]}" >"$res/up-$profile.out" 2>"$res/up-$profile.err"
    echo "exit $?" | tee -a "$summary"
    tail -4 "$res/up-$profile.err" | tee -a "$summary"
    metrics "$profile"
    stop_server
    cp "$KILN_HOME/reports/llama-cuda/report.json" "$res/report-$profile.json" 2>/dev/null
    cp "$KILN_HOME/reports/llama-cuda/report.md" "$res/report-$profile.md" 2>/dev/null
    collect
  done
fi

# `prebuilt`: a llama-server built by an earlier machine (.carry/llama-server.gz) and the models
# written as the recipe's model steps write them; for a short device lease that cannot rebuild.
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
  say "kiln verify llama-cuda --profile spec (greedy A/B against baseline)"
  "$kiln" verify llama-cuda --profile spec >"$res/verify-spec.out" 2>"$res/verify-spec.err"
  echo "exit $?" | tee -a "$summary"; cat "$res/verify-spec.out" | tee -a "$summary"
fi

if [[ $modes == *" tune "* ]]; then
  for method in grid halving; do
    say "kiln tune llama-cuda --method $method"
    /usr/bin/time -f "wall %e s" "$kiln" tune llama-cuda --profile spec --method "$method" \
      --vary draft_max=2,4,8,16 --vary ubatch=256,1024 --max-tokens "${TUNE_MAX_TOKENS:-2048}" \
      >"$res/tune-$method.out" 2>"$res/tune-$method.err"
    echo "exit $?" | tee -a "$summary"
    tail -14 "$res/tune-$method.out" | tee -a "$summary"
    tail -2 "$res/tune-$method.err" | tee -a "$summary"
    stop_server
    collect
  done
fi
collect
