#!/usr/bin/env bash
# Runs the e2e suite against real components: builds the operator, starts
# etcd + kube-apiserver (hack/control-plane.sh) and one real node
# (hack/node.sh: kubelet, containerd, kube-proxy, CoreDNS, the controller
# manager and scheduler) under .e2e/, builds the project's images
# (hack/images.sh) into the node, runs the bloodraven-e2e tests (each starts
# its own MariaDB sites and operator processes, or Pods), and always stops
# everything it started, pass or fail. Needs root (the node).
#
# The suite also needs schemathesis (tests/tests/deploy_fuzz.rs), which
# hack/schemathesis.sh installs from PyPI into a venv cached outside the clone.
#
#   hack/e2e.sh [ARGS]           run the suite; ARGS go to each test binary (libtest's flags and filters)
#   hack/e2e.sh --figures        instead print the scale figures (tests/src/bin/scale-figures.rs)
#   hack/e2e.sh --bench          instead run the deploy-API renewal benchmark (tests/src/bin/deploy-bench.rs)
#   hack/e2e.sh --bench-failover instead run the failover benchmark (tests/src/bin/failover-bench.rs)
#   hack/e2e.sh --bench-sidecar  instead run the sidecar benchmark (tests/src/bin/sidecar-bench.rs)
#   hack/e2e.sh --bench-webhook  instead run the webhook benchmark (tests/src/bin/webhook-bench.rs)
#   hack/e2e.sh --bench-migrate  instead run the migration-runner benchmark (tests/src/bin/migrate-bench.rs;
#                                MariaDB only: no control plane, no node)
#   E2E_TEST_THREADS             tests at once within a test file (default 3)
#   E2E_FILES                    test files at once (default 2; GNU parallel)
#   E2E_OPERATOR_LOG             the operators' RUST_LOG (default: info, and debug
#                                for the request engines' steps), e.g. "debug"
#   E2E_TEST                     run these test files only (tests/tests/NAME.rs), e.g. E2E_TEST=listeners
#                                or E2E_TEST="listeners health"
#
# Argo CD (tests/src/argocd.rs) takes 13 minutes of a 2-core machine to
# build the first time (hack/build-argocd.sh, cached after that). When a
# selected test file's header says `//! Argo CD:`, the build starts in the
# background as this script starts, at the lowest CPU priority, and those
# files run last among the shared ones, each waiting for the build
# (hack/lib/with-argocd.sh): the suite's other files spend most of their
# time waiting on timers, which leaves the build most of a core.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
dir="$root/.e2e"
mkdir -p "$dir"
export BLOODRAVEN_E2E_DIR="$dir"
# The checkout the tests run against (test binaries may come from a target
# folder shared with other clones; see tests/src/lib.rs repo_root).
export BLOODRAVEN_REPO_ROOT="$root"
target=${CARGO_TARGET_DIR:-$root/target}
export BLOODRAVEN_OPERATOR_BIN="$target/debug/bloodraven-operator"
export BLOODRAVEN_SIDECAR_BIN="$target/debug/bloodraven-sidecar"
export BLOODRAVEN_WEBHOOK_BIN="$target/debug/bloodraven-webhook"
export BLOODRAVEN_MIGRATE_BIN="$target/debug/bloodraven-migrate"
export BLOODRAVEN_KUBECTL_BIN="$target/debug/kubectl-bloodraven"

if [ "${1:-}" = "--bench-migrate" ]; then
  # Sites only (both flavors): nothing of the cluster is started, so nothing
  # of it is stopped either (its cleanup is not this mode's).
  trap 'for f in mariadb mysql; do for d in "$dir/$f"/*/; do [ -d "$d" ] && "$root/hack/$f.sh" down "$d" >/dev/null 2>&1 || true; done; done' EXIT
  cargo build --locked --release -p bloodraven-migrate
  mkdir -p "$dir/bin"
  cp -f "$target/release/bloodraven-migrate" "$dir/bin/bloodraven-migrate"
  export BLOODRAVEN_MIGRATE_BIN="$dir/bin/bloodraven-migrate"
  cargo run --locked --release -p bloodraven-e2e --bin migrate-bench
  exit 0
fi

cleanup() {
  status=$?
  # An unfinished Argo CD build leaves nothing a later run takes as built.
  [ -z "$argocd_build" ] || kill -- -"$argocd_build" >/dev/null 2>&1 || true
  for flavor in mariadb mysql; do
    for d in "$dir/$flavor"/*/; do
      [ -d "$d" ] && "$root/hack/$flavor.sh" down "$d" >/dev/null 2>&1 || true
    done
  done
  # The node first (its Pods, mounts, bridge and chains), then the control plane.
  "$root/hack/node.sh" down "$dir/control-plane" >/dev/null 2>&1 || true
  "$root/hack/control-plane.sh" down "$dir/control-plane" >/dev/null 2>&1 || true
  if [ "$status" -ne 0 ]; then
    echo "e2e: failed; operator logs are in $dir/logs, control-plane logs in $dir/control-plane/logs" >&2
  fi
  exit "$status"
}
argocd_build=""
trap cleanup EXIT

bench=""
case "${1:-}" in --figures | --bench | --bench-failover | --bench-sidecar | --bench-webhook) bench=$1 ;; esac
# The Argo CD build, in the background (see above), in a process group of
# its own, when a selected file needs it. Its output and exit status go to
# $BLOODRAVEN_ARGOCD_BUILD.{log,status}, which hack/lib/with-argocd.sh reads.
export BLOODRAVEN_ARGOCD_BUILD="$dir/argocd-build"
rm -f "$BLOODRAVEN_ARGOCD_BUILD.status"
if [ -z "$bench" ]; then
  for f in $(cd "$root/tests" && grep -l '^//! Argo CD:' tests/*.rs || true); do
    name=$(basename "$f" .rs)
    if [ -z "${E2E_TEST:-}" ] || grep -q -w -F "$name" <<<"${E2E_TEST:-}"; then
      setsid bash -c 'status=0; "$1" >"$2.log" 2>&1 || status=$?; echo "$status" >"$2.status"' \
        build-argocd "$root/hack/build-argocd.sh" "$BLOODRAVEN_ARGOCD_BUILD" &
      argocd_build=$!
      break
    fi
  done
fi
if [ -n "$bench" ]; then
  # Figures are of the release build users run.
  cargo build --locked --release -p bloodraven-operator
  cargo build --locked --profile release-sidecar -p bloodraven-sidecar
  cargo build --locked --release -p bloodraven-webhook
  export BLOODRAVEN_OPERATOR_BIN="$target/release/bloodraven-operator"
  export BLOODRAVEN_SIDECAR_BIN="$target/release-sidecar/bloodraven-sidecar"
  export BLOODRAVEN_WEBHOOK_BIN="$target/release/bloodraven-webhook"
else
  cargo build --locked -p bloodraven-operator -p bloodraven-sidecar -p bloodraven-webhook -p bloodraven-migrate \
    -p bloodraven-kubectl
fi
# The tests run a private copy: with a target folder shared between
# checkouts, another checkout's build would otherwise replace the binary
# under a running suite.
mkdir -p "$dir/bin"
cp -f "$BLOODRAVEN_OPERATOR_BIN" "$dir/bin/bloodraven-operator"
cp -f "$BLOODRAVEN_SIDECAR_BIN" "$dir/bin/bloodraven-sidecar"
cp -f "$BLOODRAVEN_WEBHOOK_BIN" "$dir/bin/bloodraven-webhook"
if [ -z "$bench" ]; then
  cp -f "$BLOODRAVEN_MIGRATE_BIN" "$dir/bin/bloodraven-migrate"
  export BLOODRAVEN_MIGRATE_BIN="$dir/bin/bloodraven-migrate"
  cp -f "$BLOODRAVEN_KUBECTL_BIN" "$dir/bin/kubectl-bloodraven"
  export BLOODRAVEN_KUBECTL_BIN="$dir/bin/kubectl-bloodraven"
fi
export BLOODRAVEN_OPERATOR_BIN="$dir/bin/bloodraven-operator"
export BLOODRAVEN_SIDECAR_BIN="$dir/bin/bloodraven-sidecar"
export BLOODRAVEN_WEBHOOK_BIN="$dir/bin/bloodraven-webhook"
# Every run starts from an empty etcd: no test reads what an earlier run
# left, and namespaces of earlier runs would otherwise pile up until their
# Services exhaust the /24 Service range ("failed to allocate a serviceIP").
"$root/hack/node.sh" down "$dir/control-plane" >/dev/null 2>&1 || true
"$root/hack/control-plane.sh" down "$dir/control-plane" >/dev/null 2>&1 || true
rm -rf "$dir/control-plane/etcd"
if [ -n "$bench" ]; then
  # Figures measure the operator process against the control plane alone.
  "$root/hack/control-plane.sh" up "$dir/control-plane" >/dev/null
else
  # One real node for the whole run (tests keep their own namespaces), and
  # the project's images built here and imported into it.
  started=$(date +%s)
  "$root/hack/node.sh" up "$dir/control-plane" >/dev/null
  "$root/hack/images.sh" import "$dir/control-plane" >/dev/null
  echo "e2e: node up and images imported in $(( $(date +%s) - started )) s"
  # The registry path users take (docs/images.md): push, pull back, compare.
  "$root/hack/registry-smoke.sh"
  BLOODRAVEN_SCHEMATHESIS=$("$root/hack/schemathesis.sh" | tail -n 1)
  export BLOODRAVEN_SCHEMATHESIS
  # helm for the chart's install test (tests/tests/helm_install.rs).
  BLOODRAVEN_HELM=$("$root/hack/build-helm.sh" | tail -n 1)
  export BLOODRAVEN_HELM
  # cert-manager for the chart's cert-manager path (tests/tests/helm_cert_manager.rs).
  BLOODRAVEN_CERT_MANAGER_BIN_DIR=$("$root/hack/build-cert-manager.sh" | tail -n 1)
  export BLOODRAVEN_CERT_MANAGER_BIN_DIR
  set -a
  # shellcheck source=/dev/null
  . "$dir/control-plane/env"
  # shellcheck source=/dev/null
  . "$dir/control-plane/images.env"
  set +a
fi
rm -rf "$dir/logs"
if [ "${1:-}" = "--figures" ]; then
  # 1,000 groups probe the one pair (2 sites x 1,000 / 5 s = 400 connections
  # a second, bursts of concurrent ones while groups bootstrap).
  export BLOODRAVEN_MARIADB_MAX_CONNECTIONS=${BLOODRAVEN_MARIADB_MAX_CONNECTIONS:-2000}
  cargo run --locked --release -p bloodraven-e2e --bin scale-figures
elif [ "${1:-}" = "--bench" ]; then
  cargo run --locked --release -p bloodraven-e2e --bin deploy-bench
elif [ "${1:-}" = "--bench-failover" ]; then
  cargo run --locked --release -p bloodraven-e2e --bin failover-bench
elif [ "${1:-}" = "--bench-sidecar" ]; then
  cargo run --locked --release -p bloodraven-e2e --bin sidecar-bench
elif [ "${1:-}" = "--bench-webhook" ]; then
  cargo run --locked --release -p bloodraven-e2e --bin webhook-bench
else
  only=()
  for t in ${E2E_TEST:-}; do only+=(--test "$t"); done
  # Test files run E2E_FILES at a time (GNU parallel), each with
  # E2E_TEST_THREADS tests at once: `cargo test` runs one file after another,
  # and most files hold one or two tests that spend their time waiting on
  # timers (failure detection, lease TTLs), so the suite took 20 minutes of a
  # CI run one file at a time. Every test keeps its own namespaces, sites,
  # processes and ports (tests/src/lib.rs), so files share the cluster as
  # tests within a file always did. --keep-order --group prints each file's
  # whole output, in file order, as `cargo test` did; every file runs even
  # when one fails, and the exit status counts the failed files.
  cargo test --locked --no-run -p bloodraven-e2e "${only[@]}" --message-format=json-render-diagnostics \
    | jq -r --arg dir "$root/tests/" 'select(.reason == "compiler-artifact" and .profile.test and .executable != null)
        | "\(.target.src_path | ltrimstr($dir))\t\(.executable)"' \
    | sort >"$dir/test-files"
  extra=""
  [ $# -eq 0 ] || extra=$(printf ' %q' "$@")
  # A file whose header says `//! Runs alone:` changes what every test
  # shares (the installed CRDs' schema, say), so it runs after the others,
  # by itself: a CRD loosened under a parallel file turned that file's
  # server-side apply into a conflict on a list the strict schema keys.
  alone=$(cd "$root/tests" && cut -f1 "$dir/test-files" | xargs -r grep -l '^//! Runs alone:' || true)
  # A file whose header says `//! Both flavors:` touches SQL, and runs once
  # per flavor of E2E_FLAVORS (default: mariadb mysql; the tests read
  # E2E_FLAVOR, tests/src/sites.rs); every other file runs once, on the
  # first of them.
  both=$(cd "$root/tests" && cut -f1 "$dir/test-files" | xargs -r grep -l '^//! Both flavors:' || true)
  flavors=${E2E_FLAVORS:-mariadb mysql}
  for f in $flavors; do
    case $f in mariadb | mysql) ;; *) echo "e2e: E2E_FLAVORS: unknown flavor '$f' (mariadb, mysql)" >&2; exit 2 ;; esac
  done
  with_flavors() { # LIST: one line per file and flavor (FILE, BINARY, FLAVOR)
    while IFS=$'\t' read -r file exe; do
      if grep -q -x -F "$file" <<<"$both"; then
        for f in $flavors; do printf '%s\t%s\t%s\n' "$file" "$exe" "$f"; done
      else
        printf '%s\t%s\t%s\n' "$file" "$exe" "${flavors%% *}"
      fi
    done <"$1"
  }
  # The shared files, the ones that need Argo CD last, behind
  # hack/lib/with-argocd.sh (the other files' wrapper is `env`).
  argocd=$(cd "$root/tests" && cut -f1 "$dir/test-files" | xargs -r grep -l '^//! Argo CD:' || true)
  grep -v -F -f <(printf '%s\n' "$alone" | sed '/^$/d;s/$/\t/') "$dir/test-files" |
    grep -v -F -f <(printf '%s\n' "$argocd" | sed '/^$/d;s/$/\t/') | with_flavors /dev/stdin |
    sed 's/$/\tenv/' >"$dir/test-files.shared" || true
  grep -F -f <(printf '%s\n' "$argocd" | sed '/^$/d;s/$/\t/') "$dir/test-files" | with_flavors /dev/stdin |
    sed "s|\$|\t$root/hack/lib/with-argocd.sh|" >>"$dir/test-files.shared" || true
  grep -F -f <(printf '%s\n' "$alone" | sed '/^$/d;s/$/\t/') "$dir/test-files" | with_flavors /dev/stdin |
    sed 's/$/\tenv/' >"$dir/test-files.alone" || true
  run_files() { # LIST JOBS LOG
    # cargo test runs test binaries in the package's folder.
    (cd "$root/tests" && parallel --will-cite --keep-order --group --colsep '\t' --jobs "$2" --joblog "$3" \
      "echo '     Running {1} on {3} ({2})'; E2E_FLAVOR={3} {4} {2} --test-threads=${E2E_TEST_THREADS:-3}$extra" <"$1")
  }
  status=0
  # The whole output is also kept, so that the failures can be repeated at
  # the end: a CI log that keeps only its head and tail still shows them.
  run_files "$dir/test-files.shared" "${E2E_FILES:-2}" "$dir/test-files.log" | tee "$dir/test-output" || status=1
  run_files "$dir/test-files.alone" 1 "$dir/test-files-alone.log" | tee -a "$dir/test-output" || status=1
  if [ "$status" -ne 0 ]; then
    echo "e2e: the failures, again (whole output in $dir/test-output):" >&2
    grep -E -A3 '^(thread .* panicked at|---- .* stdout ----)' "$dir/test-output" | grep -v -E '^ +[0-9]+: |^ +at ' | head -n 80 >&2 || true
    failed=$(awk -F'\t' 'NR > 1 && ($7 != 0 || $8 != 0) && match($9, /Running [^ ]+ on [^ ]+/) { print substr($9, RSTART + 8, RLENGTH - 8) }' \
      "$dir/test-files.log" "$dir/test-files-alone.log")
    echo "error: $(wc -l <<<"$failed") test files failed:" >&2
    sed 's/^/    /' <<<"$failed" >&2
    exit 101
  fi
fi
