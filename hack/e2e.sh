#!/usr/bin/env bash
# Runs the e2e suite against real components: builds the operator, starts
# etcd + kube-apiserver (hack/control-plane.sh) under .e2e/, runs the
# bloodraven-e2e tests (each starts its own MariaDB sites and operator
# processes), and always stops everything it started, pass or fail.
#
#   E2E_TEST_THREADS  parallel tests (default 3)
#   extra arguments   passed to `cargo test` after `--` (e.g. a test name)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
dir="$root/.e2e"
mkdir -p "$dir"
export BLOODRAVEN_E2E_DIR="$dir"
target=${CARGO_TARGET_DIR:-$root/target}
export BLOODRAVEN_OPERATOR_BIN="$target/debug/bloodraven-operator"

cleanup() {
  status=$?
  for d in "$dir"/mariadb/*/; do
    [ -d "$d" ] && "$root/hack/mariadb.sh" down "$d" >/dev/null 2>&1 || true
  done
  "$root/hack/control-plane.sh" down "$dir/control-plane" >/dev/null 2>&1 || true
  if [ "$status" -ne 0 ]; then
    echo "e2e: failed; operator logs are in $dir/logs, control-plane logs in $dir/control-plane/logs" >&2
  fi
  exit "$status"
}
trap cleanup EXIT

cargo build --locked -p bloodraven-operator
"$root/hack/control-plane.sh" up "$dir/control-plane" >/dev/null
rm -rf "$dir/logs"
cargo test --locked -p bloodraven-e2e -- --test-threads="${E2E_TEST_THREADS:-3}" "$@"
