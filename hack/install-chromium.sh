#!/usr/bin/env bash
# Installs Debian's Chromium when it is missing: the scores page's test (functions/scores-page)
# drives it headless. `make test` runs this first (target `browser`); it does nothing when
# chromium is already on PATH.
set -euo pipefail

if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-chromium: no apt-get here: install Chromium with your package manager (the scores page's browser test needs a chromium on PATH)" >&2
  exit 1
fi
sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "install-chromium: run as root or install sudo: apt-get install -y chromium" >&2
    exit 1
  fi
  sudo=(sudo)
fi
echo "install-chromium: installing Debian's chromium for the scores page's browser test"
export DEBIAN_FRONTEND=noninteractive
# A fresh machine may have no package lists yet: update once if the first try cannot find it.
"${sudo[@]}" apt-get install -y chromium ||
  { "${sudo[@]}" apt-get update && "${sudo[@]}" apt-get install -y chromium; }
