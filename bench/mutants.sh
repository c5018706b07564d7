#!/usr/bin/env bash
# Mutation score of kiln's proof and safety core: cargo-mutants on one file (or all of them), each
# against the unit tests of its module and the integration tests (tests/it) that pin it, then a
# table: file, caught, missed, unviable, timeout, score. Score = (caught + timeout) / (caught +
# missed + timeout): a timeout is a mutant that hangs the tests (caught in effect); an unviable
# mutant does not compile and is left out.
#
#   bench/mutants.sh --list                 the core, file by file, with each file's tests
#   bench/mutants.sh src/bench/ab.rs        one file (any path the list names)
#   bench/mutants.sh all                    every file, one after another (hours on 2 cores)
#   bench/mutants.sh FILE --shard 1/4       extra arguments go to cargo mutants (shards of a
#                                           large file: run 0/4 .. 3/4, one table row each)
#   bench/mutants.sh --table                the table of every finished run so far
#
# Each run builds in a copy of the tree (cargo-mutants' default, not --in-place), one job
# (-j 1), niced, with its own target dir (KILN_MUTANTS_TARGET, default target/mutants; seeded
# from target/debug so the dependencies are not rebuilt); results go to
# KILN_MUTANTS_OUT/<file>[-shard] (default target/mutants-out). Integration tests read
# KILN_TEST_CACHE like `cargo test` does.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out_root=${KILN_MUTANTS_OUT:-$root/target/mutants-out}
export CARGO_TARGET_DIR=${KILN_MUTANTS_TARGET:-$root/target/mutants}

# file | unit-test filters (space-separated) | integration-test filters (tests/it, space-separated)
# Unit filters are module paths of the library; integration filters are tests/it module paths
# (or whole test names). The two sets must not match each other's tests by accident.
CORE='
src/serve/verdict.rs|serve::verdict::|
src/serve/signatures.rs|serve::signatures:: serve::verdict::|
src/serve/evidence.rs|serve::evidence:: serve::verdict::|
src/serve/mod.rs|serve::tests::|spoof::live_the_launch_boundary serve::serving_a_recipe_whose_steps_have_not_run_says_to_run_them_first
src/bench/ab.rs|bench::ab:: pipeline::judge::|
src/bench/generation.rs|bench::|sglang_wire:: bench::
src/columns.rs|columns::|untrusted_text::
src/bench/protocol.rs|bench::protocol::|sglang_wire::
src/doctor/launch/mod.rs|doctor::launch::|launch_preflight::
src/pipeline/judge.rs|pipeline::judge::|
src/tune/evaluate.rs|tune::evaluate::|tune::
src/tune/margin.rs|tune::margin::|
src/tune/sweep.rs|tune::sweep:: tune::race:: tune::tests::|
src/process/identity.rs|process::|pid_safety::
src/process/watchdog.rs|process::watchdog::|pid_safety:: own_runs:: engine::sigkill_leaves_no_grandchildren_behind
src/patch/journal.rs|patch::journal::|patch_journal::
src/cache/steps.rs|cache::steps::|step_cache::
src/oci/auth.rs|oci::auth::|oci_auth::
src/redact.rs|redact::|secrets::
src/paths.rs|paths::|state_dir:: readme::the_state_dir_is_state_dir_then_kiln_home_then_xdg_then_home
'

list() {
    printf '%-28s %-44s %s\n' file unit-tests integration-tests
    while IFS='|' read -r file unit it; do
        [ -n "$file" ] && printf '%-28s %-44s %s\n' "$file" "$unit" "${it:--}"
    done <<<"$CORE"
}

row() { # the table row of one finished output dir
    local dir=$1/mutants.out name=$2 c m u t
    count() {
        local n
        n=$(grep -cs . "$dir/$1.txt" || true)
        echo "${n:-0}"
    }
    c=$(count caught) m=$(count missed) u=$(count unviable) t=$(count timeout)
    # A run continued with --iterate tests only what earlier runs did not catch; cargo-mutants
    # lists those it skipped (caught and unviable alike) in previously_caught.txt, and the
    # unviable ones among them are the ones every run of this dir found (unviable-all.txt).
    if [ -s "$dir/previously_caught.txt" ]; then
        local all=$1/unviable-all.txt pc pu
        [ -f "$all" ] || all=/dev/null
        pc=$(grep -cvxF -f "$all" "$dir/previously_caught.txt" || true)
        pu=$(grep -cxF -f "$all" "$dir/previously_caught.txt" || true)
        c=$((c + ${pc:-0})) u=$((u + ${pu:-0}))
    fi
    if [ $((c + m + t)) -eq 0 ]; then
        printf '| %s | %s | %s | %s | %s | - |\n' "$name" "$c" "$m" "$u" "$t"
    else
        printf '| %s | %s | %s | %s | %s | %s %% |\n' "$name" "$c" "$m" "$u" "$t" \
            "$(( (100 * (c + t)) / (c + m + t) ))"
    fi
}

keep_unviable() { # every unviable mutant any run of this dir found, for row after --iterate
    local d=$1
    [ -f "$d/mutants.out/unviable.txt" ] || return 0
    local files=("$d/mutants.out/unviable.txt")
    [ ! -f "$d/unviable-all.txt" ] || files+=("$d/unviable-all.txt")
    sort -u "${files[@]}" >"$d/unviable-all.tmp"
    mv "$d/unviable-all.tmp" "$d/unviable-all.txt"
}

table() {
    echo '| file | caught | missed | unviable | timeout | score |'
    echo '|---|---|---|---|---|---|'
    [ -d "$out_root" ] || return 0
    for d in "$out_root"/*/; do
        [ -d "$d/mutants.out" ] && row "${d%/}" "$(basename "$d" | tr '+' '/')"
    done
}

run_one() { # FILE [cargo-mutants args...]
    local file=$1 spec unit it name shard=''
    shift
    spec=$(grep -F "$file|" <<<"$CORE" | head -n1) || {
        echo "error: $file is not in the core (bench/mutants.sh --list names it)" >&2
        return 2
    }
    IFS='|' read -r _ unit it <<<"$spec"
    for a in "$@"; do [[ $a == */* && $a != -* ]] && shard=-${a/\//of}; done
    name=$(tr '/' '+' <<<"$file")$shard
    if [ ! -d "$CARGO_TARGET_DIR/debug" ] && [ -d "$root/target/debug" ]; then
        mkdir -p "$CARGO_TARGET_DIR"
        cp -a "$root/target/debug" "$CARGO_TARGET_DIR/debug"
    fi
    local targets=(--lib) filters
    read -ra filters <<<"$unit"
    if [ -n "$it" ]; then
        targets+=(--test it)
        read -ra more <<<"$it"
        filters+=("${more[@]}")
    fi
    mkdir -p "$out_root/$name"
    echo "== $file: cargo test ${targets[*]} -- ${filters[*]}" >&2
    local rc=0
    keep_unviable "$out_root/$name"
    nice -n 10 cargo mutants -f "$file" -j 1 -o "$out_root/$name" "$@" \
        -- "${targets[@]}" -- "${filters[@]}" || rc=$?
    keep_unviable "$out_root/$name"
    # 0: all caught; 2: some missed; 3: some timed out; anything else is a failed run.
    case $rc in 0 | 2 | 3) ;; *) echo "error: cargo mutants exited $rc on $file" >&2; return "$rc" ;; esac
    row "$out_root/$name" "$file$shard"
}

case ${1:-} in
--list) list ;;
--table) table ;;
all)
    shift
    # stdin from /dev/null: cargo must not read the rest of the list; a failed run is said and
    # the next file runs.
    while IFS='|' read -r file _; do
        [ -n "$file" ] || continue
        run_one "$file" "$@" </dev/null || echo "error: the run of $file failed; see above" >&2
    done <<<"$CORE"
    table
    ;;
'' | -h | --help) sed -n '2,20p' "$0" ;;
*) run_one "$@" ;;
esac
