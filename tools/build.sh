#!/usr/bin/env bash
# Builds the real servers that tests and `make run` use (kube-apiserver, etcd, kube-controller-manager
# for its garbage collector, Prometheus (twice: with and without its Kubernetes discovery), the OCM
# placement controller and addon manager, the Knative Eventing processes, the governance policy
# propagator, Jaeger for traces) from pinned Go modules under tools/, into a
# cache outside the clone. A tool is rebuilt only when its tools/<name>/go.mod or go.sum, its ldflags
# or the Go version change.
#
# usage: tools/build.sh [tool ...]     (default: all; `make run` names only the ones it starts)
# env:   SCOREFLOW_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/scoreflow)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${SCOREFLOW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/scoreflow}
bin=$cache/bin
mkdir -p "$bin"

# The version a module is pinned at in tools/<dir>/go.mod.
pinned() { awk -v m="$2" '$1 == m { print $2; exit }' "$root/tools/$1/go.mod"; }

# name -> main packages, built inside tools/<name>. A tool with one package becomes $bin/<name>;
# a tool with several becomes the directory $bin/<name>/ holding one binary per package.
declare -A pkg=(
  [etcd]=go.etcd.io/etcd/server/v3
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [prometheus]=github.com/prometheus/prometheus/cmd/prometheus
  [prometheus-kubernetes-sd]=github.com/prometheus/prometheus/cmd/prometheus
  [placement]=open-cluster-management.io/ocm/cmd/placement
  [addon-manager]=open-cluster-management.io/ocm/cmd/addon
  [governance-policy-propagator]=open-cluster-management.io/governance-policy-propagator
  [knative]="$(printf 'knative.dev/eventing/cmd/%s ' apiserver_receive_adapter broker/filter broker/ingress \
    controller in_memory/channel_controller in_memory/channel_dispatcher mtchannel_broker mtping webhook)"
  # Jaeger's all-in-one (collector with its OTLP receiver, in-memory store, query API and UI): the
  # trace store of `scoreflow run --tracing` and of the tests that follow one event's trace.
  [jaeger]=github.com/jaegertracing/jaeger/cmd/all-in-one
)
# A tool built from another tool's module (default: tools/<name>). The addon manager comes from the
# same ocm module as the placement controller: one pinned version, and its build reuses the
# packages the placement build compiled (Go's build cache), so it costs only its own packages.
# kube-controller-manager (only its garbage collector runs) likewise comes from kube-apiserver's
# kubernetes module, so the two are one Kubernetes version.
declare -A moddir=(
  [prometheus-kubernetes-sd]=prometheus
  [addon-manager]=placement
  [kube-controller-manager]=kube-apiserver
)
# Knative's processes semver-parse the API server's /version and exit on the unstamped
# "v0.0.0-master+$Format:%H$", so kube-apiserver carries the version of the module it is built from;
# kube-controller-manager carries the same, as the version it reports is the one it was built at.
k8s=$(pinned kube-apiserver k8s.io/kubernetes)
k8s_minor=${k8s#v1.}; k8s_minor=${k8s_minor%%.*}
k8s_version="-X k8s.io/component-base/version.gitVersion=$k8s -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$k8s_minor"
declare -A ldflags=(
  [kube-apiserver]=$k8s_version
  [kube-controller-manager]=$k8s_version
)
# Build tags per tool. Prometheus 3.10 and later leave out every cloud service discovery (AWS, Azure,
# GCE, Kubernetes, ...) with remove_all_sd: scoreflow's Prometheus scrapes static targets and takes
# remote write, and the discoveries are most of its compile time. The second build adds back only
# the Kubernetes discovery (enable_kubernetes_sd), for the test that loads the scrape configuration
# the Prometheus Operator renders from monitoring/podmonitor.yaml; it reuses the first build's
# packages, so it costs the Kubernetes client's packages and a link, and make run does not wait for it.
declare -A tags=(
  [prometheus]=remove_all_sd
  [prometheus-kubernetes-sd]=remove_all_sd,enable_kubernetes_sd
)
order=(etcd kube-apiserver kube-controller-manager prometheus prometheus-kubernetes-sd placement addon-manager knative governance-policy-propagator jaeger)
want=("$@")
[ ${#want[@]} -gt 0 ] || want=("${order[@]}")

stamp_of() {
  local d=${moddir[$1]:-$1}
  (cat "$root/tools/$d/go.mod" "$root/tools/$d/go.sum"; echo "${pkg[$1]}" "${ldflags[$1]:-}" "${tags[$1]:-}"; go version) | sha256sum | cut -c1-16
}

build() {
  local name=$1 dir=$root/tools/${moddir[$1]:-$1} stamp start out pkgs
  [ -n "${pkg[$name]:-}" ] || { echo "unknown tool $name (known: ${order[*]})" >&2; exit 2; }
  read -r -a pkgs <<<"${pkg[$name]}"
  stamp=$(stamp_of "$name")
  if [ -e "$bin/$name" ] && [ "$(cat "$bin/.$name.stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "tools: [$step/${#want[@]}] $name up to date ($bin/$name)"
    return
  fi
  echo "tools: [$step/${#want[@]}] building $name (${#pkgs[@]} main package(s); cold: minutes; progress below)"
  start=$(date +%s)
  out=$bin/$name.tmp
  rm -rf "$out"
  [ ${#pkgs[@]} -eq 1 ] || { mkdir -p "$out"; out=$out/; }
  # go build -v names each package as it compiles it: print a running count, not thousands of lines.
  # No -trimpath: packages compiled with the same flags as `make build`, go vet and go test (and
  # at the same versions: tools/knative requires the main module's versions of the modules both
  # compile, tools checks it) come out of Go's build cache instead of compiling again.
  (cd "$dir" && go build -v -tags="${tags[$name]:-}" -ldflags="-s -w ${ldflags[$name]:-}" -o "$out" "${pkgs[@]}" 2>&1) |
    awk -v n="$name" -v t0="$start" '
      /^go: downloading/ { next }
      /^#|cannot|error:|undefined:/ { print; next }
      { c++; if (c % 100 == 0) { "date +%s" | getline now; close("date +%s"); printf "tools: %s: %d packages compiled (%ds)\n", n, c, now - t0; fflush() } }'
  [ "${PIPESTATUS[0]}" -eq 0 ] && [ -e "$bin/$name.tmp" ] || { echo "tools: building $name failed" >&2; exit 1; }
  rm -rf "$bin/$name"
  mv "$bin/$name.tmp" "$bin/$name"
  echo "$stamp" > "$bin/.$name.stamp"
  echo "tools: [$step/${#want[@]}] $name built in $(( $(date +%s) - start ))s -> $bin/$name"
}

t0=$(date +%s)
step=0
for t in "${want[@]}"; do step=$((step + 1)); build "$t"; done
echo "tools: ${want[*]}: ready in $(( $(date +%s) - t0 ))s"
