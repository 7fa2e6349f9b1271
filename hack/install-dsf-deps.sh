#!/usr/bin/env bash
# Installs the Debian packages the Dynamic Scoring Framework's own sample scorers run with (FastAPI,
# uvicorn, pydantic, Jinja2, requests; no PyPI): the DSF tests run DSF's sample, static and LLM
# forecast scorers unmodified from ../shared/dsf-upstream (or $DSF_UPSTREAM). `make test` runs this
# first (target `dsf-deps`); it does nothing when Debian's python3 already imports them.
set -euo pipefail

packages=(python3-fastapi python3-uvicorn python3-pydantic python3-jinja2 python3-requests)
# Debian's interpreter, not another python3 on PATH: only it sees Debian's packages.
py=/usr/bin/python3
if [ -x "$py" ] && "$py" -c 'import fastapi, uvicorn, pydantic, jinja2, requests' >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-dsf-deps: no apt-get here: install ${packages[*]} (or their equivalents for $py) by hand; the DSF tests run DSF's FastAPI scorers" >&2
  exit 1
fi
sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "install-dsf-deps: run as root or install sudo: apt-get install -y --no-install-recommends ${packages[*]}" >&2
    exit 1
  fi
  sudo=(sudo)
fi
echo "install-dsf-deps: installing Debian's ${packages[*]} for the DSF scorers' tests"
export DEBIAN_FRONTEND=noninteractive
# A fresh machine may have no package lists yet: update once if the first try cannot find them.
"${sudo[@]}" apt-get install -y --no-install-recommends "${packages[@]}" ||
  { "${sudo[@]}" apt-get update && "${sudo[@]}" apt-get install -y --no-install-recommends "${packages[@]}"; }
