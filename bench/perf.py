#!/usr/bin/env python3
"""Issue 14's performance ratios in one paired run, printed as a markdown table.

Usage: bench/perf.py KILN_BINARY [--smoke]
  default: no-op at N=1000 and N=10000, full run of 10000 `true` steps, plan at N=10000,
           export of a 512 MiB tree (about 5-10 minutes on a 2-core box)
  --smoke: N=200 / 1000, full run of 300 steps, plan at 1000, 32 MiB export (under a minute);
           exits 1 if a ratio is more than twice its documented value (DOCUMENTED below; a
           binary under */debug/, or PERF_BUILD=debug, is held to the debug build's values).
Env: ROUNDS (paired rounds for fast commands, default 15), KEEP=1 keeps the temp dir.
Every kiln-vs-reference pair is timed interleaved (A B A B ...) by bench/pairtime.py; ratios
use medians of user+system CPU (steady on a shared box) and of wall time.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

# Ratios documented in BENCHMARKS.md (issue 14), per mode: the smoke fails past 2x these.
DOCUMENTED = {
    "smoke": {
        "noop_small_cpu": 1.6,
        "noop_large_cpu": 1.35,
        # 300 steps, each round after `rm -rf` of the last one's state: on ext4 without a
        # journal, creating a step's two files (log, receipt) next to just-deleted inodes is a
        # scan; make creates none. The single 10,000-step round of the full mode is 1.3.
        "full_cpu": 4.1,
        "plan_time": 0.04,
        "plan_rss": 0.51,
        "export_wall": 0.9,
    },
    # The same with the debug build `cargo test` leaves behind (what CI runs: a release build
    # from scratch does not fit its time limit). Unoptimized parsing and hashing dominate.
    "smoke-debug": {
        "noop_small_cpu": 3.4,
        "noop_large_cpu": 3.2,
        "full_cpu": 4.5,
        # Measured 0.1 (10 ms); an absolute time on whatever box CI runs on, so held to 0.2
        # (gated on CPU time).
        "plan_time": 0.2,
        "plan_rss": 0.53,
        "export_wall": 15.7,
    },
}


def pair(cmds, rounds, env, warmup=2, before=None):
    argv = [sys.executable, os.path.join(HERE, "pairtime.py"), "-r", str(rounds), "-w", str(warmup), "--json"]
    if before:
        argv += ["--before", before]
    for c in cmds:
        argv += ["--", c]
    out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def gen(n, d, true=False):
    args = [sys.executable, os.path.join(HERE, "gen_dag.py")] + (["--true"] if true else []) + [str(n), d]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)


def run(cmd, env):
    subprocess.run(cmd, shell=True, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    kiln = os.path.abspath(sys.argv[1])
    smoke = "--smoke" in sys.argv[2:]
    mode = "smoke" if smoke else "full"
    if smoke and (os.environ.get("PERF_BUILD") == "debug" or "/debug/" in kiln):
        mode = "smoke-debug"
    rounds = int(os.environ.get("ROUNDS", "15"))
    small, large = (200, 1000) if smoke else (1000, 10000)
    full_n = 300 if smoke else 10000
    export_mib = 32 if smoke else 512
    work = tempfile.mkdtemp(prefix="kiln-perf.")
    env = dict(os.environ, KILN_NO_PROGRESS="1")
    env.pop("KILN_CACHE_DIR", None)
    env.pop("KILN_NO_RECIPE_CACHE", None)
    rows, ratios = [], {}

    def row(name, kiln_v, ref_v, ratio, target, key):
        ratios[key] = ratio
        rows.append((name, kiln_v, ref_v, ratio, target, key))

    try:
        # 1. no-op re-runs against make -r on the same DAG (stamp files, same stats).
        for n, key in ((small, "noop_small_cpu"), (large, "noop_large_cpu")):
            d = os.path.join(work, f"dag{n}")
            gen(n, d)
            e = dict(env, KILN_HOME=os.path.join(d, "state"))
            run(f"{kiln} up {d}/recipe.toml", e)
            run(f"make -r -s -C {d}/make -f ../Makefile", e)
            run(f"sleep 0.2; {kiln} plan {d}/recipe.toml", e)  # writes the receipts index
            r = pair([f"{kiln} up {d}/recipe.toml", f"make -r -s -C {d}/make -f ../Makefile"],
                     rounds if n <= 1000 else max(5, rounds // 2), e)
            k, m = r
            target = "<= 1.5" if n == small else "<= 2.0"
            row(f"no-op `kiln up` vs `make -r`, N={n} (CPU; wall)",
                f"{k['cpu_ms']:.1f} ms; {k['wall_ms']:.1f} ms", f"{m['cpu_ms']:.1f} ms; {m['wall_ms']:.1f} ms",
                k["cpu_ms"] / m["cpu_ms"], f"{target} (wall {k['wall_ms'] / m['wall_ms']:.2f})", key)
        # 2. a full run of `true` steps against make -j2 (one paired round: it is long).
        d = os.path.join(work, f"true{full_n}")
        gen(full_n, d, true=True)
        state = os.path.join(d, "state")
        r = pair([f"sh -c 'rm -rf {state}; KILN_HOME={state} {kiln} up {d}/recipe.toml'",
                  f"make -r -s -j2 -C {d}/make -f ../Makefile"], 1 if not smoke else 3, env, warmup=0)
        k, m = r
        row(f"full run of {full_n} `true` steps vs `make -r -j2` (wall; CPU)",
            f"{k['wall_ms'] / 1000:.2f} s; {k['cpu_ms'] / 1000:.2f} s",
            f"{m['wall_ms'] / 1000:.2f} s; {m['cpu_ms'] / 1000:.2f} s", k["wall_ms"] / m["wall_ms"],
            f"<= 3.0 (CPU {k['cpu_ms'] / m['cpu_ms']:.2f})", "full_wall")
        # The smoke gates on CPU: a serial chain of hand-offs (kiln, step thread, child) suffers
        # more from a busy box than make's single process; wall ratios of 1.9-6.0 were seen.
        ratios["full_cpu"] = k["cpu_ms"] / m["cpu_ms"]
        # 3. plan at N=large, all receipts present, recipe cache warm: time and RSS vs the targets.
        d = os.path.join(work, f"dag{large}")
        e = dict(env, KILN_HOME=os.path.join(d, "state"))
        (p,) = pair([f"{kiln} plan {d}/recipe.toml"], max(5, rounds // 2), e)
        row(f"`kiln plan`, N={large}, receipts present (wall vs 100 ms; CPU)",
            f"{p['wall_ms']:.1f} ms; {p['cpu_ms']:.1f} ms", "100 ms", p["wall_ms"] / 100, "<= 1.0", "plan_time")
        # The smoke gates on CPU: an absolute wall time doubles on a busy box (41 ms at load 14,
        # 10 ms idle; the CPU time there was 17 ms), which is the box, not kiln.
        ratios["plan_time"] = p["cpu_ms"] / 100
        rss_mb = p["max_rss_kib"] * 1024 / 1e6
        row(f"`kiln plan`, N={large}: peak RSS (vs 30 MB)", f"{rss_mb:.1f} MB", "30 MB", rss_mb / 30, "<= 1.0",
            "plan_rss")
        # 4. image export against tar | openssl dgst -sha256 of the same tree.
        tree = os.path.join(work, "opt", "tree")
        os.makedirs(os.path.join(tree, "big"))
        half = export_mib // 2
        for i in range(max(1, half // 64)):
            with open(os.path.join(tree, "big", f"f{i}"), "wb") as f:
                f.write(os.urandom(min(64, half) << 20))
        for i in range(half * 4):
            sub = os.path.join(tree, "small", f"d{i // 256}")
            os.makedirs(sub, exist_ok=True)
            with open(os.path.join(sub, f"f{i}"), "wb") as f:
                f.write(os.urandom(256 << 10))
        out = os.path.join(work, "image.tar")
        # Each command starts from the same disk state: the last round's output removed (freeing
        # its blocks is the file system's work, paid by any tool that replaces that file) and
        # written back (so one round's writeback does not land in the next one's time).
        r = pair([f"sh -c 'tar -c -C / {tree[1:]} | openssl dgst -sha256'",
                  f"{kiln} image export --prefix {tree} -o {out}"], 3 if not smoke else 5, env, warmup=1,
                 before=f"rm -f {out}; sync")
        t, k = r
        row(f"`kiln image export` of {export_mib} MiB vs `tar | openssl dgst -sha256` (wall; CPU)",
            f"{k['wall_ms'] / 1000:.2f} s; {k['cpu_ms'] / 1000:.2f} s",
            f"{t['wall_ms'] / 1000:.2f} s; {t['cpu_ms'] / 1000:.2f} s",
            k["wall_ms"] / t["wall_ms"], "<= 1.0 (time ratio)", "export_wall")
    finally:
        if os.environ.get("KEEP") != "1":
            shutil.rmtree(work, ignore_errors=True)

    print(f"| measurement ({mode}) | kiln | reference | ratio | target | documented |")
    print("|---|---|---|---|---|---|")
    doc = DOCUMENTED.get(mode, {})
    failed = []
    for name, kv, rv, ratio, target, key in rows:
        d = doc.get(key, doc.get(key.replace("_wall", "_cpu")) if key == "full_wall" else None)
        print(f"| {name} | {kv} | {rv} | {ratio:.2f} | {target} | {'' if d is None else d} |")
    for key, d in doc.items():
        if smoke and key in ratios and ratios[key] > 2 * d:
            failed.append(f"{key}: {ratios[key]:.2f} > 2 x {d}")
    if failed:
        print("perf smoke: regressed past twice the documented ratio: " + "; ".join(failed), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
