#!/usr/bin/env bash
# The nemesis suite (docs/nemesis.md): for each seed and flavor, a schedule
# of combined faults on the real stack (tests/src/bin/nemesis.rs), then the
# checker (nemesis/checker) over the run's history; one table at the end.
# Starts its own control plane under .e2e-nemesis/ (the API server is one of
# the things it restarts), so it never disturbs an e2e run's. Needs root
# (network namespaces, cgroups, nftables, tc).
#
#   hack/nemesis.sh                 # NEMESIS_SEEDS (default 1), NEMESIS_SECONDS (default 120)
#   NEMESIS_SEEDS="1 2 3" NEMESIS_SECONDS=600 E2E_FLAVORS=mariadb hack/nemesis.sh
#   NEMESIS_SEMI_SYNC=on|off        # semi-sync in every run (default: each seed's draw)
#   hack/nemesis.sh --replay DIR    # the checker again over DIR/history.jsonl
#
# Exit status: 0 when every run ended and the checker found no anomaly,
# 1 otherwise (each anomaly is printed with the excerpt of history that
# shows it; the run's whole history and logs stay in .e2e-nemesis/runs/).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
me=nemesis.sh
cache=${BLOODRAVEN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bloodraven}
target=${CARGO_TARGET_DIR:-$root/target}
dir="$root/.e2e-nemesis"
checker="$cache/tools/bin/nemesis-checker"

build_checker() {
  mkdir -p "$(dirname "$checker")"
  (cd "$root/nemesis/checker" && go build -o "$checker" .)
}

if [ "${1:-}" = "--replay" ]; then
  [ $# -eq 2 ] || { echo "$me: usage: hack/nemesis.sh --replay DIR" >&2; exit 2; }
  build_checker
  exec "$checker" "$2/history.jsonl"
fi

mkdir -p "$dir"
export BLOODRAVEN_E2E_DIR="$dir"
export BLOODRAVEN_REPO_ROOT="$root"
cleanup() {
  status=$?
  for flavor in mariadb mysql; do
    for d in "$dir/$flavor"/*/; do
      [ -d "$d" ] && "$root/hack/$flavor.sh" down "$d" >/dev/null 2>&1 || true
    done
  done
  "$root/hack/control-plane.sh" down "$dir/control-plane" >/dev/null 2>&1 || true
  exit "$status"
}
trap cleanup EXIT

cargo build --locked -p bloodraven-operator -p bloodraven-sidecar
cargo build --locked -p bloodraven-e2e --bin nemesis
mkdir -p "$dir/bin"
for b in bloodraven-operator bloodraven-sidecar nemesis; do cp -f "$target/debug/$b" "$dir/bin/$b"; done
export BLOODRAVEN_OPERATOR_BIN="$dir/bin/bloodraven-operator"
export BLOODRAVEN_SIDECAR_BIN="$dir/bin/bloodraven-sidecar"
build_checker

"$root/hack/control-plane.sh" down "$dir/control-plane" >/dev/null 2>&1 || true
rm -rf "$dir/control-plane/etcd" "$dir/logs"
"$root/hack/control-plane.sh" up "$dir/control-plane" >/dev/null

seeds=${NEMESIS_SEEDS:-1}
seconds=${NEMESIS_SECONDS:-120}
flavors=${E2E_FLAVORS:-mariadb mysql}
semi_sync=()
case "${NEMESIS_SEMI_SYNC:-}" in
  "") ;;
  on | off) semi_sync=(--semi-sync "$NEMESIS_SEMI_SYNC") ;;
  *) echo "$me: NEMESIS_SEMI_SYNC is on or off, not '$NEMESIS_SEMI_SYNC'" >&2; exit 2 ;;
esac
status=0
reports=()
for flavor in $flavors; do
  for seed in $seeds; do
    out="$dir/runs/$flavor-$seed"
    rm -rf "$out"
    mkdir -p "$out"
    echo "$me: seed $seed, $flavor, $seconds s of faults"
    # Up (again) before each run: a run that failed mid-fault may have left
    # the API server down (up is a no-op on a healthy control plane).
    "$root/hack/control-plane.sh" up "$dir/control-plane" >/dev/null
    if ! E2E_FLAVOR=$flavor "$dir/bin/nemesis" run --seed "$seed" --seconds "$seconds" "${semi_sync[@]}" --out "$out" 2>&1 | tee "$out/runner.log"; then
      echo "$me: the run of seed $seed ($flavor) failed; its logs are in $out" >&2
      status=1
      continue
    fi
    if ! "$checker" "$out/history.jsonl" | tee "$out/report.txt"; then
      status=1
    fi
    "$checker" --json "$out/history.jsonl" >"$out/report.json" || true
    reports+=("$out/report.json")
  done
done
if [ ${#reports[@]} -gt 0 ]; then
  echo
  echo "$me: seed, flavor, semi-sync, faults, operations, anomalies"
  jq -r '"  \(.seed)\t\(.flavor)\tsemi-sync \(if .semiSync then "on" else "off" end)\t\([.faults[]] | add // 0) faults\t\(.writes.ok + .writes.fail + .writes.unknown) writes, \(.leaseCalls) lease calls\t\(.anomalies | length) anomalies"' "${reports[@]}" || true
fi
exit "$status"
