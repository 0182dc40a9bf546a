#!/usr/bin/env bash
# Builds Argo CD's application controller and repo server (ARGOCD_VERSION in
# hack/tools/versions.env) from the github.com/argoproj/argo-cd/v3 Go module
# through the Go module proxy, into a cache folder outside the clone, keyed
# by version and by the wrappers' sources, like cert-manager
# (hack/build-cert-manager.sh), and copies the module's CRDs beside them.
# Prints the folder on its last line: controller, repo-server, crds.yaml.
#
# hack/tools/argocd holds a main of our own for each (see its
# controller/main.go: upstream's single binary carries every component).
#
#   BLOODRAVEN_CACHE  cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/bloodraven)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=/dev/null
. "$root/hack/tools/versions.env"
cache=${BLOODRAVEN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bloodraven}
src="$root/hack/tools/argocd"
if ! grep -q "github.com/argoproj/argo-cd/v3 ${ARGOCD_VERSION}\$" "$src/go.mod"; then
  echo "build-argocd: hack/tools/argocd/go.mod does not require github.com/argoproj/argo-cd/v3 ${ARGOCD_VERSION} (versions.env)" >&2
  exit 1
fi
# A change to the wrappers rebuilds them, as a version bump does.
sources=$(cd "$src" && cat go.mod go.sum controller/main.go reposerver/main.go | sha256sum | cut -c1-12)
dir="$cache/bin/argocd-${ARGOCD_VERSION}-${sources}"
if ! [ -x "$dir/controller" ] || ! [ -x "$dir/repo-server" ] || ! [ -s "$dir/crds.yaml" ]; then
  echo "build-argocd: building Argo CD ${ARGOCD_VERSION} application controller and repo server (first time only; cached in $dir)" >&2
  # Into a temporary folder and renamed: an interrupted build leaves nothing
  # a later run would take as cached.
  rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
  version="-X github.com/argoproj/argo-cd/v3/common.version=${ARGOCD_VERSION#v}"
  (cd "$src" && CGO_ENABLED=0 nice -n 19 go build -trimpath -ldflags "-s -w $version" -o "$dir.tmp/controller" ./controller)
  (cd "$src" && CGO_ENABLED=0 nice -n 19 go build -trimpath -ldflags "-s -w $version" -o "$dir.tmp/repo-server" ./reposerver)
  module=$(cd "$src" && go list -m -f '{{.Dir}}' github.com/argoproj/argo-cd/v3)
  for f in application-crd.yaml appproject-crd.yaml; do
    printf -- '---\n# manifests/crds/%s from github.com/argoproj/argo-cd/v3@%s\n' "$f" "${ARGOCD_VERSION}"
    sed '/^---$/d' "$module/manifests/crds/$f"
  done >"$dir.tmp/crds.yaml"
  rm -rf "$dir"; mv "$dir.tmp" "$dir"
fi
echo "$dir"
