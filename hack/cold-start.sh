#!/usr/bin/env bash
# Measures a newcomer's first `make run` or `make test`: a fresh clone of this repository's HEAD,
# an empty tools cache (SCOREFLOW_CACHE) and an empty Go build cache (GOCACHE), each in a new
# temporary directory. The Go module cache (GOMODCACHE) stays as it is: downloads are not measured.
#
# usage: hack/cold-start.sh run    # until the demo Placement's decision has moved, then Ctrl-C
#        hack/cold-start.sh test   # the whole make test
#
# `make run` is measured in its two parts, which it runs one after the other: the builds (`make
# tools/run build`, what a cold run spends its time on) and the start up to a moved decision (the
# same `make run`, which then finds everything built). Besides wall-clock times it prints the CPU
# time the builds and `make test` took (user + system, every child process included) and the
# machine's 1-minute load average, sampled every 30 s: on a shared machine the wall-clock figures
# are only as good as the load says, while the CPU time hardly depends on it. Everything it starts
# is stopped when it ends; the temporary directories are removed.
set -euo pipefail

what=${1:-}
case $what in run | test) ;; *) echo "usage: $0 run|test" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/scoreflow-cold-XXXXXX)
clone=$work/scoreflow
export SCOREFLOW_CACHE=$work/cache GOCACHE=$work/gocache
mkdir -p "$SCOREFLOW_CACHE" "$GOCACHE"
git clone --quiet "$root" "$clone"
# Tests read ../shared beside the clone (DSF's upstream samples), as they do beside any clone.
[ ! -d "$root/../shared" ] || ln -s "$(cd "$root/../shared" && pwd)" "$work/shared"
echo "cold-start: $what from a fresh clone of $(git -C "$root" rev-parse --short HEAD) in $clone"
echo "cold-start: empty SCOREFLOW_CACHE and GOCACHE; Go module cache $(go env GOMODCACHE) kept; $(nproc) cores"

loads=$work/loads
cut -d' ' -f1 /proc/loadavg >"$loads"
(while sleep 30; do cut -d' ' -f1 /proc/loadavg >>"$loads"; done) &
sampler=$!
pgid=
cleanup() {
  [ -z "$pgid" ] || kill -INT -- "-$pgid" 2>/dev/null || true
  kill "$sampler" 2>/dev/null || true
  [ -z "$pgid" ] || { sleep 5; kill -KILL -- "-$pgid" 2>/dev/null || true; }
  chmod -R u+w "$work" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

start=$(date +%s)
mark() { printf 'cold-start: %5ds  %s\n' "$(($(date +%s) - start))" "$1"; }

# timed runs make with args in its own process group, its output in log, and prints the CPU time
# it and all its children used ("times" of a shell that waited for it).
timed() {
  local log=$1
  shift
  setsid bash -c 'make "$@" >"$0" 2>&1; rc=$?; times >"$0.cpu"; exit $rc' "$log" -C "$clone" "$@" &
  pgid=$!
  local rc=0
  wait "$pgid" || rc=$?
  pgid=
  read -r u s < <(tail -1 "$log.cpu")
  mark "make $* exited $rc: CPU user $u, system $s"
  return $rc
}

status=0
if [ "$what" = test ]; then
  timed "$work/test.log" test || status=$?
  grep -E '^(ok|FAIL|---)' "$work/test.log" | sort -k3 | tail -60 || true
else
  timed "$work/build.log" tools/run build || status=$?
  grep -E 'tools: .*built in|ready in' "$work/build.log" || true
  if [ "$status" -eq 0 ]; then
    # A test or another run may hold the machine-wide lock of the local Knative: wait for it, and
    # report the wait apart (scoreflow run logs when it starts and stops waiting).
    log=$work/run.log
    setsid make -C "$clone" run RUN_ARGS=--lock-wait=90m >"$log" 2>&1 &
    pgid=$!
    declare -A seen=()
    moved=0
    while IFS= read -r line; do
      case $line in
        *"waiting for another local Knative"*) mark "waiting for the machine-wide lock of the local Knative" ;;
        *"took the machine-wide lock"*) mark "took the lock (${line##*waited=})" ;;
        "scoreflow is running"*) mark "$line" ;;
        ">>> placement "*)
          d=${line#*decides: }
          if [ "$d" != "(no cluster yet)" ] && [ -z "${seen[$d]:-}" ]; then
            seen[$d]=1
            mark "decision: $d"
            if [ "${#seen[@]}" -ge 2 ]; then
              mark "the decision moved: stopping (Ctrl-C)"
              moved=1
              kill -INT -- "-$pgid" 2>/dev/null || true
            fi
          fi
          ;;
      esac
    done < <(tail -n +1 -F "$log" --pid="$pgid" 2>/dev/null)
    wait "$pgid" || true
    pgid=
    [ "$moved" -eq 1 ] || { status=1; echo "cold-start: make run ended before the decision moved:"; tail -30 "$log"; }
  fi
fi
mark "done (status $status)"
sort -n "$loads" | awk '{ v[NR] = $1 } END { printf "cold-start: load average (1 min, every 30 s): min %s, median %s, max %s over %d samples\n", v[1], v[int((NR + 1) / 2)], v[NR], NR }'
for f in "$work"/*.log; do cp "$f" "/tmp/scoreflow-cold-$what-$(basename "$f")"; done
echo "cold-start: logs in /tmp/scoreflow-cold-$what-*.log"
exit "$status"
