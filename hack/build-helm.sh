#!/usr/bin/env bash
# Builds helm (v3, HELM_VERSION in hack/tools/versions.env) from its Go module
# through the Go module proxy (`go install helm.sh/helm/v3/cmd/helm@VERSION`)
# into a cache folder outside the clone, keyed by version, like the cluster's
# binaries (hack/build-k8s.sh). Prints the helm binary's path on its last line.
#
#   BLOODRAVEN_CACHE  cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/bloodraven)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=/dev/null
. "$root/hack/tools/versions.env"
cache=${BLOODRAVEN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bloodraven}
dir="$cache/bin/helm-${HELM_VERSION}"
if ! [ -x "$dir/helm" ]; then
  echo "build-helm: building helm ${HELM_VERSION} from helm.sh/helm/v3 (first time only; cached in $dir)" >&2
  # Into a temporary folder and renamed: an interrupted build leaves nothing
  # a later run would take as cached.
  rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
  GOBIN="$dir.tmp" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w \
    -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION} \
    -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
    "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
  mkdir -p "$dir"; mv "$dir.tmp/helm" "$dir/helm"; rmdir "$dir.tmp"
fi
echo "$dir/helm"
