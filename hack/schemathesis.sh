#!/usr/bin/env bash
# Installs schemathesis (the schema-driven API fuzzer the e2e suite runs
# against the deploy API: tests/tests/deploy_fuzz.rs) from PyPI into a
# virtualenv cached outside the clone, keyed by version, so that a second run
# (CI's in a fresh clone included) installs nothing. Prints the path of its
# `st` executable on the last line.
#
#   BLOODRAVEN_CACHE  cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/bloodraven)
#   PYTHON            interpreter for the venv (default python3; needs the venv
#                     module, Debian's python3-venv: hack/deps.sh installs it)
set -euo pipefail
# Pinned: checks and their defaults change between releases, and the e2e
# test asserts zero findings.
version=4.32.5
cache=${BLOODRAVEN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bloodraven}
venv="$cache/venv-schemathesis-$version"
# The stamp is written last: an interrupted install is redone, never taken as complete.
if ! [ -f "$venv/.installed" ]; then
  echo "schemathesis.sh: installing schemathesis $version into $venv (first time only)" >&2
  rm -rf "$venv"
  mkdir -p "$cache"
  "${PYTHON:-python3}" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$version" >&2
  touch "$venv/.installed"
fi
echo "$venv/bin/st"
