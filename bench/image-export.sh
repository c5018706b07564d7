#!/bin/sh
# Benchmark `kiln image export` on a 2 GiB prefix against `tar -c | sha256sum` of the same tree:
# throughput (target >= 0.8x the tar pipeline) and kiln's peak RSS (target < 100 MB).
# Usage: bench/image-export.sh [KILN_BINARY] [SIZE_MIB]   (default: target/release/kiln, 2048)
set -eu
kiln=${1:-target/release/kiln}
size_mib=${2:-2048}
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-bench-export.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix="$work/opt/kiln/bench"
mkdir -p "$prefix/big" "$prefix/small"
# Half the bytes in 64 MiB files, half in 256 KiB files (a venv is many small files).
big=$((size_mib / 2 / 64))
i=0; while [ $i -lt $big ]; do head -c 64M /dev/urandom > "$prefix/big/f$i"; i=$((i + 1)); done
small=$((size_mib / 2 * 4))
i=0; while [ $i -lt $small ]; do
  d="$prefix/small/d$((i / 256))"; mkdir -p "$d"; head -c 256K /dev/urandom > "$d/f$i"; i=$((i + 1))
done
bytes=$(du -sb "$prefix" | cut -f1)
# Warm the page cache for both contenders the same way.
tar -c -C / "${prefix#/}" > /dev/null

now() { date +%s.%N; }
best_tar=999999; best_kiln=999999; rss=0
for run in 1 2 3; do
  t0=$(now); tar -c -C / "${prefix#/}" | sha256sum > /dev/null; t1=$(now)
  best_tar=$(echo "$t1 - $t0" | bc -l | awk -v b="$best_tar" '{print ($1 < b) ? $1 : b}')
  rm -f "$work/out.tar"
  t0=$(now)
  /usr/bin/time -f %M -o "$work/rss" "$kiln" image export --prefix "$prefix" -o "$work/out.tar" > /dev/null 2>&1
  t1=$(now)
  best_kiln=$(echo "$t1 - $t0" | bc -l | awk -v b="$best_kiln" '{print ($1 < b) ? $1 : b}')
  r=$(cat "$work/rss"); [ "$r" -gt "$rss" ] && rss=$r
done
mib=$(echo "$bytes / 1048576" | bc -l)
printf '%-28s %10s %12s %12s\n' "contender ($(printf %.0f "$mib") MiB tree)" "best s" "MiB/s" "peak RSS"
printf '%-28s %10.2f %12.0f %12s\n' "tar -c | sha256sum" "$best_tar" "$(echo "$mib / $best_tar" | bc -l)" "-"
printf '%-28s %10.2f %12.0f %9.1f MB\n' "kiln image export" "$best_kiln" "$(echo "$mib / $best_kiln" | bc -l)" "$(echo "$rss / 1000" | bc -l)"
printf 'ratio kiln/tar throughput: %.2f (target >= 0.80)\n' "$(echo "$best_tar / $best_kiln" | bc -l)"
