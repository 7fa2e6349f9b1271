#!/usr/bin/env bash
# `make unit`: the tests that need none of the servers `make tools` builds. A package qualifies when
# it is outside test/ (the integration and end-to-end suites) and its test binary does not link
# tools, the only way a test finds a built server. The tests run with SCOREFLOW_CACHE set
# to an empty directory, so a test that needs a server fails here, naming it, rather than passing
# only on a machine that happens to have built one.
set -euo pipefail
go=${GO:-go}
module=$($go list -m)
packages=$($go list -test -f '{{if .ForTest}}{{.ForTest}} {{join .Deps " "}}{{end}}' ./... |
  awk -v tools="$module/tools" -v suites="$module/test/" '
    index($1, suites) == 1 { next }
    { needs[$1] += 0; for (i = 2; i <= NF; i++) if ($i == tools) needs[$1] = 1 }
    END { for (p in needs) if (!needs[p]) print p }' | sort)
empty=$(mktemp -d)
trap 'rm -rf "$empty"' EXIT
SCOREFLOW_CACHE=$empty $go test -count=1 "$@" $packages
