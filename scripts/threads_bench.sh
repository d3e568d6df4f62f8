#!/usr/bin/env bash
# Thread wait policy on a shared machine (issue 11): `sinkq ppl` on mixtext-2.5M with 1 and 2
# threads, idle and beside one busy competing process, for each OpenMP wait policy given.
# Prints medians of REPS runs (wall seconds) and the ratio 2-thread / 1-thread.
# Usage: bash scripts/threads_bench.sh [REPS] [POLICY...]   (POLICY: default | passive | spin=N)
set -euo pipefail
cd "$(dirname "$0")/.."
S=build/src/cli/sinkq
M=../shared/models/mixtext-2.5M
F=../shared/data/wikitext-2/wikitext2_test_joined.txt
REPS=${1:-5}; shift || true
POLICIES=("$@"); [ ${#POLICIES[@]} -eq 0 ] && POLICIES=(default passive)
run() {  # $1 policy, $2 threads -> median wall seconds
  local env=()
  case "$1" in
    default) env=(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT SINKQ_OMP_DEFAULT=1) ;;
    passive) env=(env OMP_WAIT_POLICY=passive) ;;
    spin=*) env=(env -u OMP_WAIT_POLICY GOMP_SPINCOUNT="${1#spin=}") ;;
  esac
  local ts=()
  for _ in $(seq "$REPS"); do
    local t0 t1
    t0=$(date +%s.%N)
    "${env[@]}" "$S" ppl -m "$M" -f "$F" --ctx 256 --max-windows 400 --threads "$2" >/dev/null 2>&1
    t1=$(date +%s.%N)
    ts+=("$(echo "$t1 - $t0" | bc -l)")
  done
  printf '%s\n' "${ts[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.3f", a[int((NR+1)/2)]}'
}
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, ISA $(grep -q avx512f /proc/cpuinfo && echo AVX-512 || echo AVX2), $(date -u +%FT%TZ)"
echo "| policy | load | 1 thread (s) | 2 threads (s) | 2t / 1t |"
echo "|---|---|---|---|---|"
for pol in "${POLICIES[@]}"; do
  for load in idle busy; do
    pid=""
    if [ "$load" = busy ]; then (while :; do :; done) & pid=$!; fi
    t1=$(run "$pol" 1); t2=$(run "$pol" 2)
    [ -n "$pid" ] && kill "$pid" && wait "$pid" 2>/dev/null || true
    echo "| $pol | $load | $t1 | $t2 | $(echo "$t2 / $t1" | bc -l | xargs printf '%.2f') |"
  done
done
