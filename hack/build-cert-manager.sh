#!/usr/bin/env bash
# Builds cert-manager's controller and cainjector (CERT_MANAGER_VERSION in
# hack/tools/versions.env) from the github.com/cert-manager/cert-manager Go
# module through the Go module proxy, into a cache folder outside the clone,
# keyed by version (and by the wrapper's sources), like helm
# (hack/build-helm.sh), and copies the module's CRDs beside them. Prints the
# folder on its last line: controller, cainjector, crds.yaml.
#
# Upstream's cmd/controller and cmd/cainjector are separate modules that a
# module proxy cannot serve (`go install .../cmd/controller@VERSION`: "does
# not contain package"), so hack/tools/cert-manager holds a main of our own
# for each that runs the main module's control loops (see its
# controller/main.go). The CRDs are the module's deploy/crds/*.yaml, whose
# specs are those of the upstream chart's crd-*.yaml templates.
#
#   BLOODRAVEN_CACHE  cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/bloodraven)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=/dev/null
. "$root/hack/tools/versions.env"
cache=${BLOODRAVEN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bloodraven}
src="$root/hack/tools/cert-manager"
if ! grep -q "github.com/cert-manager/cert-manager ${CERT_MANAGER_VERSION}\$" "$src/go.mod"; then
  echo "build-cert-manager: hack/tools/cert-manager/go.mod does not require github.com/cert-manager/cert-manager ${CERT_MANAGER_VERSION} (versions.env)" >&2
  exit 1
fi
# A change to the wrapper rebuilds it, as a version bump does.
sources=$(cd "$src" && cat go.mod go.sum controller/main.go cainjector/main.go | sha256sum | cut -c1-12)
dir="$cache/bin/cert-manager-${CERT_MANAGER_VERSION}-${sources}"
if ! [ -x "$dir/controller" ] || ! [ -x "$dir/cainjector" ] || ! [ -s "$dir/crds.yaml" ]; then
  echo "build-cert-manager: building cert-manager ${CERT_MANAGER_VERSION} controller and cainjector (first time only; cached in $dir)" >&2
  # Into a temporary folder and renamed: an interrupted build leaves nothing
  # a later run would take as cached.
  rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
  (cd "$src" && CGO_ENABLED=0 nice -n 19 go build -trimpath -ldflags "-s -w \
    -X github.com/cert-manager/cert-manager/pkg/util.AppVersion=${CERT_MANAGER_VERSION} \
    -X github.com/cert-manager/cert-manager/pkg/util.AppGitState=clean" \
    -o "$dir.tmp/" ./controller ./cainjector)
  module=$(cd "$src" && go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)
  for f in "$module"/deploy/crds/*.yaml; do
    case $(basename "$f") in *_*.yaml) ;; *) continue ;; esac
    printf -- '---\n# %s from github.com/cert-manager/cert-manager@%s\n' "${f#"$module"/}" "${CERT_MANAGER_VERSION}"
    sed '/^---$/d' "$f"
  done >"$dir.tmp/crds.yaml"
  rm -rf "$dir"; mv "$dir.tmp" "$dir"
fi
echo "$dir"
