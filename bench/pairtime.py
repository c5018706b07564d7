#!/usr/bin/env python3
"""Time commands in interleaved rounds (A B A B ...) so a busy machine slows all of them alike.

Usage: bench/pairtime.py [-r ROUNDS] [-w WARMUP] [--before SH] [--json] -- CMD1 -- CMD2 [-- ...]
Each CMD is one shell word list (split by shlex); stdout/stderr go to /dev/null; a command that
fails aborts the benchmark. --before runs a shell command, untimed, before every timed one (e.g.
`rm -f out.tar; sync`: start each from the same disk state). Prints, per command: median wall ms, median user+sys CPU ms, min wall.
With --json prints a JSON list of {"cmd", "wall_ms", "cpu_ms", "min_ms", "max_rss_kib"}.
"""

import json
import os
import shlex
import statistics
import subprocess
import sys
import time


def run(argv, before=None):
    if before:
        subprocess.run(before, shell=True, check=True)
    devnull = os.open(os.devnull, os.O_RDWR)
    t0 = time.perf_counter()
    pid = os.posix_spawnp(argv[0], argv, os.environ,
                          file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1),
                                        (os.POSIX_SPAWN_DUP2, devnull, 2)])
    _, status, ru = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    os.close(devnull)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"pairtime: failed (status {status}): {shlex.join(argv)}")
    return wall * 1000, (ru.ru_utime + ru.ru_stime) * 1000, ru.ru_maxrss


def main():
    args = sys.argv[1:]
    rounds, warmup, as_json, before = 20, 2, False, None
    while args and args[0] != "--":
        flag = args.pop(0)
        if flag == "-r":
            rounds = int(args.pop(0))
        elif flag == "-w":
            warmup = int(args.pop(0))
        elif flag == "--before":
            before = args.pop(0)
        elif flag == "--json":
            as_json = True
        else:
            sys.exit(__doc__)
    cmds, cur = [], None
    for a in args:
        if a == "--":
            cur = []
            cmds.append(cur)
        else:
            cur.append(a)
    cmds = [shlex.split(c[0]) if len(c) == 1 else c for c in cmds if c]
    if not cmds:
        sys.exit(__doc__)
    for _ in range(warmup):
        for c in cmds:
            run(c, before)
    samples = [[] for _ in cmds]
    for _ in range(rounds):
        for i, c in enumerate(cmds):
            samples[i].append(run(c, before))
    out = []
    for c, s in zip(cmds, samples):
        out.append({
            "cmd": shlex.join(c),
            "wall_ms": statistics.median(x[0] for x in s),
            "cpu_ms": statistics.median(x[1] for x in s),
            "min_ms": min(x[0] for x in s),
            "max_rss_kib": max(x[2] for x in s),
        })
    if as_json:
        print(json.dumps(out))
    else:
        for o in out:
            print(f"{o['wall_ms']:9.2f} ms wall  {o['cpu_ms']:9.2f} ms cpu  min {o['min_ms']:8.2f}  {o['cmd']}")


if __name__ == "__main__":
    main()
