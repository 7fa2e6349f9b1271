#!/usr/bin/env bash
# `make test`'s test step: every package once, and under the race detector those whose own code
# shares memory between goroutines: a package under pkg/ that imports sync or sync/atomic or
# starts a goroutine, and test/writer, which drives the score-writer's package against a real hub.
#
# Not everything under -race (docs/development.md has the figures): it doubles the step's time
# and a cold build's, mostly in CPU-bound pure code (the solver 33x, the contract 15x) where it
# can find nothing; it inflates memory past what functions/score-writer's pod-limit test allows;
# and test/deploy runs knative.dev/eventing's own Trigger filters, whose counters race upstream.
set -euo pipefail
go=${GO:-go}
timeout=${TEST_TIMEOUT:-30m}
module=$($go list -m)

race=("$module/test/writer")
plain=()
# shares reports whether the package in $1 (its Go files $2, imports $3) shares memory between goroutines.
shares() {
  [[ " $3 " == *" sync "* || " $3 " == *" sync/atomic "* ]] ||
    { [[ $2 != - ]] && (cd "$1" && grep -qE '^\s*go [A-Za-z_(]' ${2//,/ }); }
}
while read -r pkg dir files imports; do
  if [[ $pkg == "$module/pkg/"* ]] && shares "$dir" "$files" "$imports"; then
    race+=("$pkg")
  elif [[ $pkg != "$module/test/writer" ]]; then
    plain+=("$pkg")
  fi
done < <($go list -f '{{.ImportPath}} {{.Dir}} {{if .GoFiles}}{{join .GoFiles ","}}{{else}}-{{end}} {{join .Imports " "}}' ./...)

echo "test: with -race: ${race[*]#"$module/"}"
status=0
$go test -race -count=1 -timeout "$timeout" "${race[@]}" || status=1
$go test -count=1 -timeout "$timeout" "${plain[@]}" || status=1
exit $status
