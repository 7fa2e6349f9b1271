#!/usr/bin/env bash
# `make bench`: every benchmark docs/benchmarks.md records, in one run. Besides the benchmarks'
# output it prints what that page records about the run: the date, the commit, the machine and
# its load average (1 minute, sampled every 30 s), which moves absolute figures on a shared machine.
set -euo pipefail
go=${GO:-go}
timeout=${BENCH_TIMEOUT:-2h}
commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD || commit="$commit (with uncommitted changes)"
echo "bench: started $(date -u '+%F %H:%M UTC'), commit $commit, $(nproc) cores, $($go env GOVERSION)"

loads=$(mktemp)
if [ -r /proc/loadavg ]; then
  # Stops with this script, or within 30 s of its death however it comes.
  ( while kill -0 $$ 2>/dev/null; do cut -d' ' -f1 /proc/loadavg >>"$loads"; sleep 30; done ) &
  sampler=$!
fi
trap 'kill ${sampler:-} 2>/dev/null || true; rm -f "$loads"' EXIT

run() { echo "bench: $*"; "$@"; }
run $go test -run '^$' -bench . -benchmem -timeout "$timeout" ./pkg/...
run $go test -run '^$' -bench 'ScoreWriter|EndToEnd' -benchtime 1x -timeout "$timeout" ./test/...
run $go test -run '^$' -bench 'Fleet$/clusters=10000$' -benchtime 1x -timeout "$timeout" ./test/writer
run $go test -run '^$' -bench 'FleetMemory/clusters=1000$' -benchtime 1x -timeout "$timeout" ./test/writer
run $go test -run '^$' -bench 'FleetSteadyState' -benchtime 1x -timeout "$timeout" ./test/writer
run $go test -run '^$' -bench 'DSFAgentFleet/agents=10000$' -benchtime 1x -timeout "$timeout" ./test/agents
run $go test -run '^$' -bench 'GatewayUnderAttack' -benchtime 1x -timeout "$timeout" ./test/agents

echo "bench: ended $(date -u '+%F %H:%M UTC'); load average $(sort -n "$loads" |
  awk '{v[NR] = $1} END {if (NR) print v[1] "-" v[NR] ", median " v[int((NR + 1) / 2)]; else print "not sampled"}')"
