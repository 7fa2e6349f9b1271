#!/usr/bin/env bash
# Measures a newcomer's first `make run` or `make test`: a fresh clone of this repository's HEAD,
# an empty tools cache (SCOREFLOW_CACHE) and an empty Go build cache (GOCACHE), each in a new
# temporary directory. The Go module cache (GOMODCACHE) stays as it is: downloads are not measured.
#
# usage: hack/cold-start.sh run    # until the demo Placement's decision has moved, then Ctrl-C
#        hack/cold-start.sh test   # the whole make test
#
# It prints each phase's end in seconds from the start and the machine's 1-minute load average,
# sampled every 30 s (min, median, max): on a shared machine the figures are only as good as the
# load says. Everything it starts is stopped when it ends; the temporary directories are removed.
set -euo pipefail

what=${1:-}
case $what in run | test) ;; *) echo "usage: $0 run|test" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/scoreflow-cold-XXXXXX)
clone=$work/scoreflow
export SCOREFLOW_CACHE=$work/cache GOCACHE=$work/gocache
mkdir -p "$SCOREFLOW_CACHE" "$GOCACHE"
git clone --quiet "$root" "$clone"
echo "cold-start: $what from a fresh clone of $(git -C "$root" rev-parse --short HEAD) in $clone"
echo "cold-start: empty SCOREFLOW_CACHE and GOCACHE; Go module cache $(go env GOMODCACHE) kept; $(nproc) cores"

loads=$work/loads
(while sleep 30; do cut -d' ' -f1 /proc/loadavg >>"$loads"; done) &
sampler=$!
pgid=
cleanup() {
  [ -z "$pgid" ] || kill -INT -- "-$pgid" 2>/dev/null || true
  kill "$sampler" 2>/dev/null || true
  [ -z "$pgid" ] || { sleep 5; kill -KILL -- "-$pgid" 2>/dev/null || true; }
  chmod -R u+w "$work" 2>/dev/null || true # the module cache is read-only; GOCACHE may hold such files too
  rm -rf "$work"
}
trap cleanup EXIT

start=$(date +%s)
log=$work/$what.log
cut -d' ' -f1 /proc/loadavg >"$loads"
if [ "$what" = run ]; then
  # A test or another run may hold the machine-wide lock of the local Knative: wait for it, and
  # report the wait apart (scoreflow run logs when it starts and stops waiting).
  setsid make -C "$clone" run RUN_ARGS=--lock-wait=90m >"$log" 2>&1 &
else
  setsid make -C "$clone" test >"$log" 2>&1 &
fi
pid=$!
pgid=$pid

mark() { printf 'cold-start: %5ds  %s\n' "$(($(date +%s) - start))" "$1"; }
declare -A seen=()
decisions=()
status=0
tail -n +1 -F "$log" 2>/dev/null --pid="$pid" | while IFS= read -r line; do
  case $line in
    *"tools: "*": ready in "*) mark "tools built (${line#*ready in })" ;;
    "built: "*) mark "functions and CLI built" ;;
    *"waiting for another local Knative"*) mark "waiting for the machine-wide lock" ;;
    *"took the machine-wide lock"*) mark "took the lock ($line)" ;;
    "scoreflow is running"*) mark "$line" ;;
    ">>> placement "*)
      d=${line#*decides: }
      if [ "$d" != "(no cluster yet)" ] && [ -z "${seen[$d]:-}" ]; then
        seen[$d]=1
        decisions+=("$d")
        mark "decision: $d"
        if [ "${#decisions[@]}" -ge 2 ] && [ "$what" = run ]; then
          mark "the decision moved: stopping (Ctrl-C)"
          kill -INT -- "-$pgid" 2>/dev/null || true
        fi
      fi
      ;;
    "ok "* | "FAIL"* | "--- FAIL"*) [ "$what" = test ] && mark "$line" ;;
  esac
done || true
wait "$pid" || status=$?
pgid=
mark "make $what exited $status"
sort -n "$loads" | awk '{ v[NR] = $1 } END { printf "cold-start: load average (1 min, every 30 s): min %s, median %s, max %s over %d samples\n", v[1], v[int((NR + 1) / 2)], v[NR], NR }'
[ "$status" -eq 0 ] || [ "$what" = run ] || { echo "cold-start: make test failed; its log:"; tail -50 "$log"; }
cp "$log" "/tmp/scoreflow-cold-$what.log" && echo "cold-start: full log in /tmp/scoreflow-cold-$what.log"
