#!/usr/bin/env bash
# The core benchmarks of issue 2, in one command: build kiln (release), generate the inputs under a
# temp dir, measure with hyperfine (median of several runs) and /usr/bin/time (peak RSS), print a
# markdown table on stdout (progress on stderr), delete everything generated.
#
# Usage: bench/run.sh
# Env:   KILN_BIN=path   use this binary instead of building target/release/kiln
#        RUNS=N          hyperfine runs per fast measurement (default 30; slow ones use RUNS_SLOW=5)
#        SHA_GIB=N       size of the hashed file in GiB (default 4)
#        DAG_SMALL=N DAG_LARGE=N   step counts (default 1000 and 10000)
#        ONLY="noop plan sha"      the sections to run (default: all three)
# Needs: cargo, hyperfine, make, python3, sha256sum, strace, GNU time (/usr/bin/time).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
runs=${RUNS:-30}
runs_slow=${RUNS_SLOW:-5}
sha_gib=${SHA_GIB:-4}
small=${DAG_SMALL:-1000}
large=${DAG_LARGE:-10000}

say() { printf '%s\n' "bench: $*" >&2; }
die() { printf '%s\n' "bench: error: $*" >&2; exit 1; }

for tool in hyperfine make python3 sha256sum strace /usr/bin/time; do
    command -v "$tool" >/dev/null || die "$tool is missing (Debian: apt-get install hyperfine make python3 coreutils strace time)"
done

if [ -n "${KILN_BIN:-}" ]; then
    kiln=$(realpath "$KILN_BIN")
else
    say "cargo build --release"
    (cd "$root" && cargo build --release --quiet --bin kiln) || die "the release build failed"
    kiln="$root/target/release/kiln"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
export KILN_NO_PROGRESS=1
unset KILN_CACHE_DIR

# median wall seconds / mean user+system seconds of result N of a hyperfine export
median() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"][int(sys.argv[2])]["median"])' "$1" "${2:-0}"; }
cpu() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][int(sys.argv[2])]; print(r["user"] + r["system"])' "$1" "${2:-0}"; }
# median peak RSS in MiB of N runs of a command
rss_mib() {
    local n=$1; shift
    for _ in $(seq "$n"); do /usr/bin/time -f %M "$@" 2>&1 >/dev/null | tail -1; done |
        python3 -c 'import sys,statistics; print("%.1f" % (statistics.median(int(l) for l in sys.stdin) / 1024))'
}
ms() { python3 -c 'import sys; print("%.1f ms" % (float(sys.argv[1]) * 1000))' "$1"; }
ratio() { python3 -c 'import sys; print("%.2f" % (float(sys.argv[1]) / float(sys.argv[2])))' "$1" "$2"; }
verdict() { python3 -c 'import sys; print("met" if eval(sys.argv[1]) else "**missed**")' "$1"; }
# wall seconds of one run of a command that must succeed
timed() {
    local t0; t0=$(date +%s.%N)
    "$@" >/dev/null 2>&1 || die "failed: $*"
    python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$t0" "$(date +%s.%N)"
}
rows=()
# measurement | kiln: wall median | kiln: CPU | reference | target | result | verdict
row() { rows+=("| $1 | $2 | $3 | $4 | $5 | $6 | $7 |"); }

want() { case " ${ONLY:-noop plan sha} " in *" $1 "*) return 0;; esac; return 1; }
full=0

# ---- 1. no-op re-run of a DAG: kiln vs make with stamp files --------------------------------
if want noop; then
d="$work/dag$small"
python3 "$root/bench/gen_dag.py" "$small" "$d"
export KILN_HOME="$d/state"
say "first full run of $small steps (kiln up, then make)"
"$kiln" up "$d/recipe.toml" >/dev/null 2>&1 || die "kiln up of the generated DAG failed"
make -r -s -C "$d/make" -f ../Makefile >/dev/null
"$kiln" up "$d/recipe.toml" >"$d/noop.txt" 2>&1 && grep -q " 0 of $small steps to run" "$d/noop.txt" || die "the kiln re-run is not a no-op"
make -r -q -C "$d/make" -f ../Makefile || die "the make re-run is not a no-op"
say "no-op re-runs ($runs runs each)"
hyperfine -N -w 3 -r "$runs" --export-json "$d/noop.json" \
    "$kiln up $d/recipe.toml" "make -r -s -C $d/make -f ../Makefile" >&2
k=$(median "$d/noop.json" 0); m=$(median "$d/noop.json" 1); r=$(ratio "$k" "$m")
kc=$(cpu "$d/noop.json" 0); mc=$(cpu "$d/noop.json" 1)
row "no-op \`kiln up\`, $small-step DAG" "$(ms "$k")" "$(ms "$kc")" "make -r: $(ms "$m") wall, $(ms "$mc") CPU" \
    "≤ 1.5× make" "${r}× wall, $(ratio "$kc" "$mc")× CPU" "$(verdict "$r <= 1.5")"
fi

# ---- 2. plan of a large DAG, without and with receipts -----------------------------------------
if want plan; then
d="$work/dag$large"
python3 "$root/bench/gen_dag.py" "$large" "$d"
export KILN_HOME="$d/state"
plan_row() {
    hyperfine -N -w 1 -r "$runs_slow" --export-json "$d/plan-$1.json" "$kiln plan $d/recipe.toml" >&2
    local t rss
    t=$(median "$d/plan-$1.json")
    rss=$(rss_mib "$runs_slow" "$kiln" plan "$d/recipe.toml")
    row "\`kiln plan\`, $large steps, $2" "$(ms "$t")" "$(ms "$(cpu "$d/plan-$1.json")")" "—" \
        "< 500 ms, < 100 MB" "$(ms "$t"), ${rss} MiB peak RSS" "$(verdict "$t < 0.5 and $rss * 1.048576 < 100")"
}
say "plan of $large steps, no receipts"
plan_row none "no receipts"
say "full run of $large steps to write every receipt (slow: one process per step)"
full=$(timed "$kiln" up "$d/recipe.toml")
"$kiln" plan "$d/recipe.toml" >"$d/plan.txt" && grep -q ": 0 stale, $large fresh" "$d/plan.txt" || die "receipts are not all fresh"
say "plan of $large steps, all receipts present"
plan_row all "all receipts present"
rm -rf "$d"
fi

# ---- 3. sha256 of a large file, and the stat-based memo ------------------------------------------
if want sha; then
d="$work/sha"; mkdir -p "$d"
big="$d/big.bin"
say "writing ${sha_gib} GiB of random bytes"
head -c "${sha_gib}G" /dev/urandom >"$big"
cat "$big" >/dev/null # page cache warm for both contenders
sum=$(sha256sum "$big" | cut -d' ' -f1)
cat >"$d/hash.toml" <<EOF
[recipe]
name = "bench-hash"
[[step]]
id = "hash"
kind = "run"
inputs = ["$big"]
cmd = ["true"]
[[step]]
id = "big"
kind = "fetch"
url = "file://$big"
sha256 = "$sum"
EOF
export KILN_HOME="$d/state"
memo="$KILN_HOME/hashmemo.json"
say "sha256 of ${sha_gib} GiB: sha256sum and openssl vs kiln (plan with a cold hash memo)"
others=("sha256sum $big")
command -v openssl >/dev/null && others+=("openssl sha256 $big")
hyperfine -N -w 1 -r "$runs_slow" --export-json "$d/sha.json" --prepare "rm -f $memo" \
    "$kiln plan $d/hash.toml" "${others[@]}" >&2
rm -f "$memo"; "$kiln" plan "$d/hash.toml" >/dev/null
grep -q "$sum" "$memo" || die "kiln's digest differs from sha256sum's"
gibs() { python3 -c 'import sys; print("%.2f GiB/s" % (float(sys.argv[1]) / float(sys.argv[2])))' "$sha_gib" "$1"; }
k=$(median "$d/sha.json" 0); s=$(median "$d/sha.json" 1); kc=$(cpu "$d/sha.json" 0); sc=$(cpu "$d/sha.json" 1)
ref="sha256sum: $(gibs "$s") wall, $(gibs "$sc") CPU"
[ ${#others[@]} -gt 1 ] && ref="$ref; openssl: $(gibs "$(median "$d/sha.json" 2)") wall, $(gibs "$(cpu "$d/sha.json" 2)") CPU"
r=$(ratio "$s" "$k")
row "sha256 of ${sha_gib} GiB in the page cache (\`inputs\`, cold memo)" "$(gibs "$k")" "$(gibs "$kc")" "$ref" \
    "≥ 0.9× sha256sum" "${r}× wall, $(ratio "$sc" "$kc")× CPU" "$(verdict "$r >= 0.9")"

say "plan again: the memo must answer without reading the file"
hyperfine -N -w 1 -r "$runs" --export-json "$d/memo.json" "$kiln plan $d/hash.toml" >&2
opens=$(strace -f -e trace=openat,open "$kiln" plan "$d/hash.toml" 2>&1 >/dev/null | grep -c "big.bin" || true)
t=$(median "$d/memo.json")
row "\`kiln plan\` again, ${sha_gib} GiB input unchanged" "$(ms "$t")" "$(ms "$(cpu "$d/memo.json")")" "cold: $(ms "$k")" \
    "not re-hashed" "file opened $opens times" "$(verdict "$opens == 0 and $t < 0.1")"

say "fetch (file://): first run copies and verifies; re-runs find it in the cache"
first=$(timed "$kiln" up "$d/hash.toml")
again=$(timed "$kiln" up "$d/hash.toml" --force big)
hyperfine -N -r "$runs_slow" --export-json "$d/fetch.json" "$kiln up $d/hash.toml --force big" >&2
f=$(median "$d/fetch.json")
row "\`kiln up --force\` of a fetch step, ${sha_gib} GiB already cached" "$(ms "$f")" "$(ms "$(cpu "$d/fetch.json")")" \
    "download: $(python3 -c "print('%.1f s' % $first)"); 1st forced re-run: $(python3 -c "print('%.2f s' % $again)")" \
    "not re-hashed" "$(ms "$f")" "$(verdict "$f < 0.1")"

fi

cat <<EOF
| measurement | kiln wall (median) | kiln CPU (user+sys, mean) | reference | target | result | verdict |
|---|---|---|---|---|---|---|
$(printf '%s\n' "${rows[@]}")

$(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)$(want plan && python3 -c "print('; full run of the %s-step DAG (writes every receipt): %.0f s' % ('$large', $full))").
EOF
