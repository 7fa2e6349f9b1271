#!/usr/bin/env bash
# Runs every fuzz target of the packages given, one after another, for the budget FUZZTIME.
#
# The budget is a count of executions (50000x) by default: Go's fuzz coordinator before 1.27 can
# fail a time-bounded run (-fuzztime 5s) at its deadline with a bare "context deadline exceeded"
# and no input (golang/go#75804), while a count has no deadline, so the step fails only on a
# finding. A duration still works for a long run by hand (FUZZTIME=5m).
#
# On a finding it prints go test's output and the failing input, which go test also writes to the
# package's testdata/fuzz/<target>/, where every later `go test` replays it: commit it with the fix.
set -euo pipefail
budget=${FUZZTIME:?set FUZZTIME, e.g. 50000x or 5m}
go=${GO:-go}
log=$(mktemp)
trap 'rm -f "$log"' EXIT

for pkg in "$@"; do
  dir=$($go list -f '{{.Dir}}' "$pkg")
  for target in $($go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    echo "fuzz: $pkg $target ($budget)"
    if ! $go test -run '^$' -fuzz "^$target\$" -fuzztime "$budget" "$pkg" >"$log" 2>&1; then
      cat "$log"
      for input in $(sed -n 's#.*Failing input written to \(testdata/fuzz/[^ ]*\).*#\1#p' "$log"); do
        echo "--- reproducer $pkg $input (go test -run '$target/${input##*/}' $pkg):"
        cat "$dir/$input"
      done
      exit 1
    fi
  done
done
