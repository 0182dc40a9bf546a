#!/usr/bin/env bash
# Runs a test binary that needs Argo CD once hack/build-argocd.sh, which
# hack/e2e.sh started in the background, has ended: waits for
# $BLOODRAVEN_ARGOCD_BUILD.status (its exit status), then runs COMMAND with
# BLOODRAVEN_ARGOCD_BIN_DIR set to the folder the build printed last in
# $BLOODRAVEN_ARGOCD_BUILD.log. A failed build fails the test file, with the
# build's last lines; so does a build that has not ended within an hour.
# With BLOODRAVEN_ARGOCD_BIN_DIR already set, runs COMMAND at once.
#
#   hack/lib/with-argocd.sh COMMAND [ARGS...]
set -euo pipefail
if [ -n "${BLOODRAVEN_ARGOCD_BIN_DIR:-}" ]; then exec "$@"; fi
prefix=${BLOODRAVEN_ARGOCD_BUILD:?hack/e2e.sh sets it}
started=$SECONDS
until [ -s "$prefix.status" ]; do
  if [ $((SECONDS - started)) -gt 3600 ]; then
    echo "with-argocd: hack/build-argocd.sh has not ended after an hour (or was never started); the end of $prefix.log:" >&2
    tail -n 20 "$prefix.log" >&2 || true
    exit 1
  fi
  sleep 2
done
if [ "$(cat "$prefix.status")" != 0 ]; then
  echo "with-argocd: hack/build-argocd.sh failed (exit $(cat "$prefix.status")); the end of $prefix.log:" >&2
  tail -n 40 "$prefix.log" >&2
  exit 1
fi
BLOODRAVEN_ARGOCD_BIN_DIR=$(tail -n 1 "$prefix.log")
export BLOODRAVEN_ARGOCD_BIN_DIR
echo "with-argocd: Argo CD in $BLOODRAVEN_ARGOCD_BIN_DIR (waited $((SECONDS - started)) s for its build)"
exec "$@"
