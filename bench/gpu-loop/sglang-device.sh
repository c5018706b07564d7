#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with the chunks of bench/gpu-loop/pack-sglang.sh
# under CARRY (default .carry/). Modes, any subset, in this order:
#   gather   copy every chunk that arrived (CARRY/sgl-*) into /root/sglpack (kept while the machine
#            is held) and say which wheels are there against CARRY/sglang-pack.sha256
#   facts    the machine: GPU, driver, python, torch, its pip list
#   up       `kiln up sglang-cuda --set deps=listed --profile tuned` from an empty state: install,
#            model, serve, verdicts, greedy A/B against `baseline`, bench
#   wire     the raw HTTP of the server `up` left running: /server_info, /get_model_info, and a
#            streamed /generate (greedy, 16 tokens) byte for byte, for the wire fixtures
#   doctor   `kiln doctor --recipe sglang-cuda --deep -v` on the environment `up` built (its gates read
#            from this SGLang's source, a matmul and the symmetric-memory probe on the GPU)
#   profiles `kiln serve` of PROFILES (default `spec spec-mismatch symm-mem`), `kiln bench` on spec*
#   bad      a launch with a bad flag value, through crash triage
#   ceiling  SGLang's own bench_one_batch on the same model (decode tok/s at batch 1, 2048 tokens as
#            kiln's bench; CEILING_OUTPUT_LEN to change): not a ceiling for the served path, which
#            overlaps scheduling with the GPU (1.25x it on the H200), but SGLang's own figure
#   again    the same `kiln up` a second time: nothing rebuilt, served again (timed)
#   tune     `kiln tune sglang-cuda --profile tuned --one-server` by grid, then by race, over
#            TUNE_VARY (default: attention=triton,flashinfer × --num-continuous-decode-steps=1,4);
#            TUNE_LAUNCHES=N gives the grid `--launches N` (each variant served N times)
# Each long command is cut at BUDGET seconds into the call (default 560) so that the results still
# come back. Everything lands in $OUT: summary.txt and sglang-results.tar.gz (reports, server logs, step logs).
set -uo pipefail
modes=" ${*:-gather} "
root=$PWD
carry=${CARRY:-$root/.carry}
OUT=${OUT:-$root/out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export KILN_HOME=/root/kiln-sglang PIP_NO_INDEX=1 PIP_FIND_LINKS=/root/sglpack/wheels KILN_NO_UV=1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
pack=/root/sglpack
res=/root/sglang-results
mkdir -p "$pack/wheels" "$res" "$KILN_HOME"
summary=$OUT/summary.txt
say() { echo "== $(date +%T) $*" | tee -a "$summary"; }
# The seconds this call has left (BUDGET, default 560: a call may run 600 s) for a `timeout`, so
# that a slow mode is cut short and the results are still collected and sent back.
left() { local s=$((${BUDGET:-560} - SECONDS)); echo $((s > 5 ? s : 5)); }
kiln=$pack/kiln

collect() {
  cp -r "$KILN_HOME/reports" "$KILN_HOME/tune" "$res/" 2>/dev/null
  mkdir -p "$res/serve-logs" "$res/step-logs"
  cp "$KILN_HOME"/serve/*.log "$res/serve-logs/" 2>/dev/null
  cp "$KILN_HOME"/runs/*/logs/*.log "$res/step-logs/" 2>/dev/null
  tar -czf "$OUT/sglang-results.tar.gz" -C "$res" . 2>/dev/null
}
trap collect EXIT

if [[ $modes == *" gather "* ]]; then
  for d in "$carry"/sgl-*; do
    [[ -d $d ]] || continue
    cp -n "$d"/wheels/* "$pack/wheels/" 2>/dev/null
    [[ -f $d/kiln ]] && cp "$d/kiln" "$kiln" && chmod +x "$kiln"
    [[ -d $d/gpu-loop ]] && cp "$d"/gpu-loop/* "$pack/"
  done
  [[ -f $carry/sglang-pack.sha256 ]] && cp "$carry/sglang-pack.sha256" "$pack/"
  # A wheel split by pack-sglang.sh (NAME.part-K-of-N) is joined once all N parts are here.
  for first in "$pack"/wheels/*.part-01-of-*; do
    [[ -e $first ]] || continue
    whole=${first%.part-01-of-*} n=${first##*-of-}
    parts=("$whole".part-*-of-"$n")
    if ((${#parts[@]} == 10#$n)); then
      cat "${parts[@]}" >"$whole.joining" && mv "$whole.joining" "$whole" && rm -f "${parts[@]}"
    fi
  done
  say "gathered: $(ls "$pack/wheels" | grep -c '\.whl$') wheels, $(ls "$pack/wheels" | grep -c '\.part-') parts waiting, kiln $([[ -x $kiln ]] && echo yes || echo no)"
  if [[ -f $pack/sglang-pack.sha256 ]]; then
    want=$(grep -c wheels/ "$pack/sglang-pack.sha256")
    say "expected $want wheels; missing: $(cd "$pack/wheels" && for w in $(sed -n 's#.*wheels/##p' ../sglang-pack.sha256); do [[ -f $w ]] || printf '%s ' "$w"; done)"
    (cd "$pack" && sha256sum --check --quiet --ignore-missing sglang-pack.sha256) 2>&1 | tee -a "$summary"
  fi
fi

if [[ $modes == *" facts "* ]]; then
  say "facts"
  { nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader
    python3 --version; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
    nproc; free -g | sed -n 2p; df -h /root | tail -1; } 2>&1 | tee -a "$summary"
  python3 -m pip list --format=freeze >"$res/pip-list.txt" 2>&1
fi

if [[ $modes == *" up "* ]]; then
  say "kiln up sglang-cuda --profile tuned (deps=listed) from an empty state"
  start=$SECONDS
  timeout "$(left)" "$kiln" up sglang-cuda --set deps=listed --profile tuned 2>&1 | tee "$res/up.log" | tail -80
  say "kiln up exit ${PIPESTATUS[0]} in $((SECONDS - start)) s"
  tail -60 "$res/up.log" >>"$summary"
fi

if [[ $modes == *" wire "* ]]; then
  say "raw HTTP of the running server"
  python3 - "$res" <<'PY'
import json, sys, urllib.request
res, base = sys.argv[1], "http://127.0.0.1:30100"
for path in ("/server_info", "/get_model_info", "/health"):
    try:
        body = urllib.request.urlopen(base + path, timeout=30).read()
    except Exception as e:
        body = repr(e).encode()
    open(f"{res}/wire{path.replace('/', '-')}.txt", "wb").write(body)
req = {"text": "The capital of France is", "stream": True,
       "sampling_params": {"max_new_tokens": 16, "temperature": 0}}
r = urllib.request.Request(base + "/generate", json.dumps(req).encode(), {"Content-Type": "application/json"})
open(f"{res}/wire-generate-stream.txt", "wb").write(urllib.request.urlopen(r, timeout=60).read())
PY
  head -c 600 "$res/wire-generate-stream.txt" | tee -a "$summary"; echo | tee -a "$summary"
fi

if [[ $modes == *" doctor "* ]]; then
  say "kiln doctor --recipe sglang-cuda --deep -v"
  start=$SECONDS
  timeout "$(left)" "$kiln" doctor --recipe sglang-cuda --set deps=listed --deep -v --no-progress >"$res/doctor.log" 2>&1
  say "doctor exit $? in $((SECONDS - start)) s"
  tail -40 "$res/doctor.log" | tee -a "$summary"
fi

if [[ $modes == *" profiles "* ]]; then
  for p in ${PROFILES:-spec spec-mismatch symm-mem}; do
    say "kiln serve sglang-cuda --profile $p"
    start=$SECONDS
    # `kiln serve` stays in the foreground while the server runs: wait for its verdicts (or its
    # error), then end it with Ctrl-C's signal once what follows has used the server.
    "$kiln" serve sglang-cuda --profile "$p" >"$res/serve-$p.log" 2>&1 &
    serving=$!
    for _ in $(seq 1 $(($(left) / 2))); do
      grep -q "Ctrl-C stops it\|^error" "$res/serve-$p.log" && break
      kill -0 "$serving" 2>/dev/null || break
      sleep 2
    done
    grep -v '^kiln:   \[' "$res/serve-$p.log" | tail -30
    say "serve $p: $(grep -c 'Ctrl-C stops it' "$res/serve-$p.log") ready line(s) after $((SECONDS - start)) s"
    if [[ $p == spec* ]]; then
      timeout "$(left)" "$kiln" bench --url http://127.0.0.1:30100 --runs 3 --warmup 1 --max-tokens 256 2>&1 |
        tee "$res/bench-$p.log" | tail -15
    fi
    kill -INT "$serving" 2>/dev/null; wait "$serving"
    "$kiln" serve sglang-cuda --stop >/dev/null 2>&1
  done
fi

if [[ $modes == *" bad "* ]]; then
  say "a bad flag value through crash triage"
  timeout "$(left)" "$kiln" serve sglang-cuda --profile baseline --set mem_fraction=1.7 2>&1 | tee "$res/serve-bad.log" | tail -25
fi

if [[ $modes == *" ceiling "* ]]; then
  say "SGLang's bench_one_batch"
  "$kiln" serve sglang-cuda --stop >/dev/null 2>&1 # the GPU to itself, as `up`'s bench had it
  work=$KILN_HOME/work/sglang-cuda
  # bench_one_batch's measured runs read kiln bench's prompt from a file; its warm-up draws random
  # ids below 10,000 whatever the prompt (sglang/benchmark/one_batch.py), which failed a gather
  # with a device assert on sessions 17-20's 9,285-row vocabulary (with and without CUDA graphs):
  # make_tiny_hf.py pads the model to 10,240 rows since (ran on the H200, session 22).
  # CEILING_EXTRA adds flags (e.g. --disable-cuda-graph).
  prompt="$(grep -o 'DEFAULT_PROMPT: &str = "[^"]*"' "$root/src/bench/mod.rs" | cut -d'"' -f2)"
  echo "$prompt" >"$res/ceiling-prompt.txt"
  timeout "$(left)" "$work/venv/bin/python" -m sglang.bench_one_batch --model-path "$work/model/target" \
    --batch-size 1 --input-len 128 --output-len "${CEILING_OUTPUT_LEN:-2048}" --prompt-filename "$res/ceiling-prompt.txt" \
    --attention-backend triton --sampling-backend pytorch \
    --mem-fraction-static 0.6 ${CEILING_EXTRA:-} 2>&1 | tee "$res/bench-one-batch.log" | tail -15
fi
if [[ $modes == *" again "* ]]; then
  "$kiln" serve sglang-cuda --stop >/dev/null 2>&1
  say "kiln up sglang-cuda --profile tuned again (nothing to rebuild)"
  start=$SECONDS
  timeout "$(left)" "$kiln" up sglang-cuda --set deps=listed --profile tuned >"$res/up-again.log" 2>&1
  say "kiln up (again) exit $? in $((SECONDS - start)) s; $(grep -c '✓ ran' "$res/up-again.log") step(s) ran"
  grep -E "^kiln: (done|served|proved|bench)|fresh|median" "$res/up-again.log" | tail -12 | tee -a "$summary"
fi

if [[ $modes == *" tune "* ]]; then
  "$kiln" serve sglang-cuda --stop >/dev/null 2>&1
  read -r -a vary <<<"${TUNE_VARY:---vary attention=triton,flashinfer --vary=--num-continuous-decode-steps=1,4}"
  for method in ${TUNE_METHODS:-grid race}; do
    launches=()
    [[ $method == grid ]] && launches=(--launches "${TUNE_LAUNCHES:-1}")
    say "kiln tune sglang-cuda --profile tuned --method $method ${launches[*]} ${vary[*]}"
    start=$SECONDS
    timeout "$(left)" "$kiln" tune sglang-cuda --set deps=listed --profile tuned --method "$method" --one-server \
      "${launches[@]}" "${vary[@]}" --max-tokens "${TUNE_MAX_TOKENS:-512}" >"$res/tune-$method.out" 2>"$res/tune-$method.err"
    say "tune $method: exit $? in $((SECONDS - start)) s"
    tee -a "$summary" <"$res/tune-$method.out"
    grep "tune \`tuned\`" "$res/tune-$method.err" | tee -a "$summary"
    cp "$KILN_HOME/tune/sglang-cuda/tuned.json" "$res/tune-$method.json" 2>/dev/null
    "$kiln" serve sglang-cuda --stop >/dev/null 2>&1
  done
fi
say "done"
