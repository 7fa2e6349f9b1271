#!/usr/bin/env bash
# Installs Debian's COIN-OR CBC when it is missing: pkg/optimizer/solver's tests use it as an independent
# oracle (the solver's proven optima must equal CBC's) and its benchmark times the solver beside
# it. `make test` and `make bench` run this first (target `cbc`); it does nothing when cbc is
# already on PATH.
set -euo pipefail

if command -v cbc >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-cbc: no apt-get here: install COIN-OR CBC with your package manager (pkg/optimizer/solver's oracle tests need cbc on PATH)" >&2
  exit 1
fi
sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "install-cbc: run as root or install sudo: apt-get install -y coinor-cbc" >&2
    exit 1
  fi
  sudo=(sudo)
fi
echo "install-cbc: installing Debian's coinor-cbc for pkg/optimizer/solver's oracle tests"
export DEBIAN_FRONTEND=noninteractive
# A fresh machine may have no package lists yet: update once if the first try cannot find it.
"${sudo[@]}" apt-get install -y coinor-cbc ||
  { "${sudo[@]}" apt-get update && "${sudo[@]}" apt-get install -y coinor-cbc; }
