#!/usr/bin/env bash
# Builds etcd, kube-apiserver and kubectl (the control plane), and
# kube-controller-manager, kube-scheduler, kubelet, kube-proxy and CoreDNS (the
# node, hack/node.sh) from the official Go modules (through the Go module
# proxy) into a cache folder outside the clone, keyed by version, so that a
# second run (CI's in a fresh clone included) costs nothing.
#
#   BLOODRAVEN_CACHE  cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/bloodraven)
#
# Prints the bin folder on its last line. The first build takes a long time on
# two cores (kube-apiserver is large); `make tools` starts it early. Builds run
# one at a time (each `go build` already uses both cores).
#
# CoreDNS is keyed by its own version: it is built into
# $cache/bin/coredns-<version>/ and linked into the bin folder as `coredns`, so
# a CoreDNS bump rebuilds CoreDNS only.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=/dev/null
. "$root/hack/tools/versions.env"
cache=${BLOODRAVEN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bloodraven}
bin="$cache/bin/k8s-${KUBERNETES_VERSION}-etcd-${ETCD_VERSION}"
mkdir -p "$bin"
log() { echo "build-k8s: $*" >&2; }

# Builds into a temporary name and renames, so an interrupted build never
# leaves a half-written binary that a later run would take as cached.
build() { # module-dir output-name package ldflags
  local dir=$1 name=$2 pkg=$3 ldflags=$4
  if [ -x "$bin/$name" ]; then return 0; fi
  log "building $name from $pkg (first time only; cached in $bin)"
  (cd "$root/hack/tools/$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin/.$name.tmp" "$pkg")
  mv "$bin/.$name.tmp" "$bin/$name"
}

minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
kver="-X k8s.io/component-base/version.gitVersion=${KUBERNETES_VERSION} \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor} \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z \
 -X k8s.io/client-go/pkg/version.gitVersion=${KUBERNETES_VERSION} \
 -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=${minor} \
 -s -w"

build etcd etcd go.etcd.io/etcd/server/v3 "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-${ETCD_VERSION}"
build kubernetes kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$kver"
build kubernetes kubectl k8s.io/kubernetes/cmd/kubectl "$kver"
build kubernetes kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$kver"
build kubernetes kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$kver"
build kubernetes kubelet k8s.io/kubernetes/cmd/kubelet "$kver"
build kubernetes kube-proxy k8s.io/kubernetes/cmd/kube-proxy "$kver"

dns="$cache/bin/coredns-${COREDNS_VERSION}"
if ! grep -q "github.com/coredns/coredns ${COREDNS_VERSION}\$" "$root/hack/tools/coredns/go.mod"; then
  log "hack/tools/coredns/go.mod does not require github.com/coredns/coredns ${COREDNS_VERSION} (versions.env)"; exit 1
fi
if ! [ -x "$dns/coredns" ]; then
  mkdir -p "$dns"
  log "building coredns ${COREDNS_VERSION} (first time only; cached in $dns)"
  (cd "$root/hack/tools/coredns" && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=module-${COREDNS_VERSION}" -o "$dns/.coredns.tmp" .)
  mv "$dns/.coredns.tmp" "$dns/coredns"
fi
if [ "$(readlink "$bin/coredns" 2>/dev/null)" != "$dns/coredns" ]; then ln -sfn "$dns/coredns" "$bin/coredns"; fi
echo "$bin"
