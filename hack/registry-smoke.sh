#!/usr/bin/env bash
# Checks the registry path of docs/images.md for real: starts the CNCF
# distribution registry (built from its Go module, cached outside the clone
# like the cluster's binaries; Debian's docker-registry package would also
# install a system service on :5000) on a free loopback port with its
# storage in a temporary folder, pushes the project's images with
# `hack/images.sh push` (skopeo), pulls each back by tag into an OCI layout
# and checks that its files are the archive's and that it runs as 65532.
# Stops the registry and removes its storage on every path. Needs no node;
# skopeo comes from Debian (hack/deps.sh).
#
#   hack/registry-smoke.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
me=registry-smoke.sh
log() { echo "$me: $*" >&2; }
die() { echo "$me: error: $*" >&2; exit 1; }

DISTRIBUTION_VERSION=v3.0.0
cache=${BLOODRAVEN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bloodraven}
command -v skopeo >/dev/null || die "skopeo is missing (hack/deps.sh installs it)"
registry="$cache/bin/distribution-$DISTRIBUTION_VERSION/registry"
if [ ! -x "$registry" ]; then
  log "building the distribution registry $DISTRIBUTION_VERSION (first time only; cached in ${registry%/*})"
  mkdir -p "${registry%/*}"
  GOBIN="${registry%/*}.tmp" go install "github.com/distribution/distribution/v3/cmd/registry@$DISTRIBUTION_VERSION"
  mv "${registry%/*}.tmp/registry" "$registry"; rmdir "${registry%/*}.tmp"
fi

work=$(mktemp -d)
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$work/config.yml" <<YAML
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $work/storage}}
http: {addr: 127.0.0.1:$port}
YAML
"$registry" serve "$work/config.yml" >"$work/registry.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$port/v2/" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/registry.log" >&2; die "the registry did not start"; }
  sleep 0.1
done
log "registry on 127.0.0.1:$port"

pushed=$(SKOPEO_ARGS="--dest-tls-verify=false" "$root/hack/images.sh" push "127.0.0.1:$port/bloodraven")
[ -n "$pushed" ] || die "nothing was pushed"
built=$("$root/hack/images.sh" build)
for ref in $pushed; do
  name=${ref#127.0.0.1:"$port"/bloodraven/}
  archive=$(awk -v r="localhost/bloodraven/$name" '$1 == r { print $2 }' <<<"$built")
  [ -n "$archive" ] || die "no archive for $name"
  skopeo copy --quiet --src-tls-verify=false "docker://$ref" "oci:$work/pulled:${name%%:*}" >&2
  mkdir -p "$work/a-${name%%:*}" && tar -xf "$archive" -C "$work/a-${name%%:*}"
  umoci unpack --rootless --image "$work/pulled:${name%%:*}" "$work/p-${name%%:*}" >/dev/null
  umoci unpack --rootless --image "$work/a-${name%%:*}:${name#*:}" "$work/b-${name%%:*}" >/dev/null
  diff -r "$work/p-${name%%:*}/rootfs" "$work/b-${name%%:*}/rootfs" >/dev/null \
    || die "$ref: the pulled image's files differ from the archive's"
  user=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["process"]["user"]["uid"])' "$work/p-${name%%:*}/config.json")
  [ "$user" = 65532 ] || die "$ref runs as uid $user, not 65532"
  log "$ref: pushed, pulled back, same files, runs as 65532"
done
echo "registry-smoke: ok ($(wc -w <<<"$pushed") images)"
