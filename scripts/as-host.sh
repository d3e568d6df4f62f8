#!/usr/bin/env bash
# Runs a command as another host kind runs it (scripts/host-kinds.txt): the kind's kernel path
# (SINKQ_ISA) and OpenBLAS kernel set (OPENBLAS_CORETYPE) in its environment. A result's bits then
# equal that kind's (docs/architecture.md "Reproducibility"), e.g.
#   bash scripts/as-host.sh avx2-zen build/src/cli/sinkq ppl -m MODEL -f TEXT
#   bash scripts/as-host.sh --list        # the kinds, and which this CPU can act as
# A kind needs its kernel path's instructions: an AVX2-only CPU cannot act as an AVX-512 kind (an
# error). The kinds' OpenBLAS kernel sets need no more than their path does (Cooperlake's sgemm is
# AVX-512 F code, which every AVX-512 CPU runs).
set -euo pipefail
kinds_file="$(dirname "$0")/host-kinds.txt"
cpu_has() { grep -qw "$1" /proc/cpuinfo; }
can_act_as() {  # ISA of the kind
  case "$1" in
    avx512) cpu_has avx512f && cpu_has avx512bw && cpu_has avx512vl ;;
    avx2) cpu_has avx2 && cpu_has fma && cpu_has f16c ;;
    scalar) true ;;
    *) false ;;
  esac
}
if [ "${1:-}" = "--list" ] || [ "${1:-}" = "--list-usable" ]; then
  while read -r kind isa core rest; do
    case "$kind" in ''|\#*) continue ;; esac
    if can_act_as "$isa"; then ok=yes; else ok=no; fi
    if [ "$1" = "--list-usable" ]; then [ "$ok" = yes ] && echo "$kind"; continue; fi
    printf '%-17s SINKQ_ISA=%-7s OPENBLAS_CORETYPE=%-9s this CPU can act as it: %s\n' "$kind" "$isa" "$core" "$ok"
  done <"$kinds_file"
  exit 0
fi
if [ $# -lt 2 ]; then
  echo "usage: as-host.sh KIND COMMAND [ARGS...] | --list | --list-usable   (kinds: scripts/host-kinds.txt)" >&2
  exit 2
fi
want="$1"
shift
line="$(awk -v k="$want" '!/^#/ && $1 == k { print $2, $3 }' "$kinds_file")"
if [ -z "$line" ]; then
  echo "as-host.sh: unknown host kind '$want'; the kinds: $(awk '!/^#/ && NF { printf "%s ", $1 }' "$kinds_file")" >&2
  exit 2
fi
read -r isa core <<<"$line"
if ! can_act_as "$isa"; then
  echo "as-host.sh: this CPU cannot act as '$want': it lacks the $isa instructions that kind runs" >&2
  exit 2
fi
export SINKQ_ISA="$isa" OPENBLAS_CORETYPE="$core"
exec "$@"
