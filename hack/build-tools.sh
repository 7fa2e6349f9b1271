#!/usr/bin/env bash
# Builds the real servers that tests and `make run` use (kube-apiserver, etcd, Prometheus, the OCM
# placement controller) from pinned Go modules under tools/, into a cache outside the clone.
# A tool is rebuilt only when its tools/<name>/go.mod or go.sum (or the Go version) changes.
#
# usage: hack/build-tools.sh [tool ...]     (default: all)
# env:   SCOREFLOW_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/scoreflow)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${SCOREFLOW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/scoreflow}
bin=$cache/bin
mkdir -p "$bin"

# name -> main package, built inside tools/<name>.
declare -A pkg=(
  [etcd]=go.etcd.io/etcd/server/v3
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [prometheus]=github.com/prometheus/prometheus/cmd/prometheus
  [placement]=open-cluster-management.io/ocm/cmd/placement
)
order=(etcd kube-apiserver prometheus placement)
want=("$@")
[ ${#want[@]} -gt 0 ] || want=("${order[@]}")

stamp_of() {
  (cat "$root/tools/$1/go.mod" "$root/tools/$1/go.sum"; go version) | sha256sum | cut -c1-16
}

build() {
  local name=$1 dir=$root/tools/$1 stamp start
  [ -n "${pkg[$name]:-}" ] || { echo "unknown tool $name (known: ${order[*]})" >&2; exit 2; }
  stamp=$(stamp_of "$name")
  if [ -x "$bin/$name" ] && [ "$(cat "$bin/.$name.stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "tools: $name up to date ($bin/$name)"
    return
  fi
  echo "tools: building $name from ${pkg[$name]} (cold: minutes; progress below)"
  start=$(date +%s)
  # go build -v names each package as it compiles it: print a running count, not thousands of lines.
  (cd "$dir" && go build -v -trimpath -ldflags='-s -w' -o "$bin/$name.tmp" "${pkg[$name]}" 2>&1) |
    awk -v n="$name" -v t0="$start" '
      /^#|: |cannot|error|undefined/ { print; next }
      { c++; if (c % 100 == 0) { "date +%s" | getline now; close("date +%s"); printf "tools: %s: %d packages compiled (%ds)\n", n, c, now - t0; fflush() } }'
  [ "${PIPESTATUS[0]}" -eq 0 ] && [ -x "$bin/$name.tmp" ] || { echo "tools: building $name failed" >&2; exit 1; }
  mv "$bin/$name.tmp" "$bin/$name"
  echo "$stamp" > "$bin/.$name.stamp"
  echo "tools: $name built in $(( $(date +%s) - start ))s -> $bin/$name"
}

for t in "${want[@]}"; do build "$t"; done
