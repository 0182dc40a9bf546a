#!/usr/bin/env bash
# The kubectl plugin as a release artifact, and its krew manifest.
#
#   hack/release.sh build [DIR]   the static kubectl-bloodraven (the same build as the images'),
#                                 packed as DIR/kubectl-bloodraven_vVERSION_linux_amd64.tar.gz with
#                                 LICENSE, its .sha256, and DIR/bloodraven.yaml: krew/bloodraven.yaml
#                                 with the version, address and SHA-256 filled in (DIR: dist/)
#   hack/release.sh check         build into a temporary folder, validate the manifest with krew's
#                                 validate-krew-manifest, install it with krew itself (--archive, into
#                                 a temporary KREW_ROOT) and run `kubectl bloodraven --version` through
#                                 kubectl's plugin discovery
#
# RELEASE_URL: where the archive will be downloaded from (the manifest's uri is
# RELEASE_URL/ARCHIVE); default: the repository's release address for the version.
# krew v0.4.3 (the newest the Go module proxy serves) is built from the Go
# module proxy and cached in ${BLOODRAVEN_CACHE:-~/.cache/bloodraven}/bin/krew-v0.4.3.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${BLOODRAVEN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bloodraven}
target=${CARGO_TARGET_DIR:-$root/target}
triple=x86_64-unknown-linux-gnu
krew_version=v0.4.3
me=release.sh
log() { echo "$me: $*" >&2; }
die() { echo "$me: error: $*" >&2; exit 1; }

version() {
  awk -F'"' '/^\[workspace.package\]/ { p = 1 } p && /^version/ { print $2; exit }' "$root/Cargo.toml"
}

cmd_build() { # dir
  local dir=$1 version archive sha url work
  version=$(version)
  [ -n "$version" ] || die "no workspace version in Cargo.toml"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  # The images' build (hack/images.sh): one cargo invocation for the three
  # release binaries, so features unify the same way and nothing is built twice.
  log "building kubectl-bloodraven $version (release, static)"
  (cd "$root" && RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --quiet --locked --release --target "$triple" -p bloodraven-operator -p bloodraven-webhook \
      -p bloodraven-kubectl) || die "cargo build of the static kubectl plugin failed"
  local bin="$target/$triple/release/kubectl-bloodraven"
  ldd "$bin" 2>&1 | grep -E 'statically linked|not a dynamic executable' >/dev/null || die "$bin is not static"
  work=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" RETURN
  strip -o "$work/kubectl-bloodraven" "$bin"
  cp "$root/LICENSE" "$work/LICENSE"
  archive="kubectl-bloodraven_v${version}_linux_amd64.tar.gz"
  # Reproducible: fixed order, owner and time.
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime='2000-01-01 00:00Z' \
    -C "$work" -cf - kubectl-bloodraven LICENSE | gzip -n >"$dir/$archive"
  sha=$(sha256sum "$dir/$archive" | cut -d' ' -f1)
  echo "$sha  $archive" >"$dir/$archive.sha256"
  url="${RELEASE_URL:-https://example.invalid/bloodraven/releases/download/v$version}/$archive"
  sed -e "s|@VERSION@|$version|g" -e "s|@URL@|$url|g" -e "s|@SHA256@|$sha|g" \
    "$root/krew/bloodraven.yaml" >"$dir/bloodraven.yaml"
  grep -q '@[A-Z0-9]*@' "$dir/bloodraven.yaml" && die "a placeholder is left in $dir/bloodraven.yaml"
  log "wrote $dir/$archive ($sha) and $dir/bloodraven.yaml"
  echo "$dir/$archive"
}

krew_tools() { # -> prints the folder holding krew and validate-krew-manifest
  local bin="$cache/bin/krew-$krew_version"
  if ! [ -x "$bin/krew" ] || ! [ -x "$bin/validate-krew-manifest" ]; then
    command -v go >/dev/null || die "go is missing (krew is built from the Go module proxy)"
    log "building krew $krew_version from the Go module proxy"
    mkdir -p "$bin.tmp"
    GOBIN="$bin.tmp" GOFLAGS=-mod=mod go install "sigs.k8s.io/krew/cmd/krew@$krew_version" \
      "sigs.k8s.io/krew/cmd/validate-krew-manifest@$krew_version" || die "building krew failed"
    rm -rf "$bin" && mv "$bin.tmp" "$bin"
  fi
  echo "$bin"
}

cmd_check() {
  local work tools archive out k8s
  # kubectl as the tests build it (hack/build-k8s.sh, cached by version).
  k8s=$("$root/hack/build-k8s.sh" | tail -n 1)
  [ -x "$k8s/kubectl" ] || die "no kubectl in $k8s (hack/build-k8s.sh)"
  work=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" EXIT
  tools=$(krew_tools)
  archive=$(cmd_build "$work/dist")
  "$tools/validate-krew-manifest" -manifest "$work/dist/bloodraven.yaml" -skip-install >/dev/null 2>"$work/validate.log" ||
    die "validate-krew-manifest refused the manifest: $(cat "$work/validate.log")"
  export KREW_ROOT="$work/krew"
  "$tools/krew" install --manifest="$work/dist/bloodraven.yaml" --archive="$archive" >"$work/install.log" 2>&1 ||
    die "krew install failed: $(cat "$work/install.log")"
  out=$(PATH="$KREW_ROOT/bin:$k8s:$PATH" kubectl bloodraven --version) || die "kubectl bloodraven --version failed"
  [ "$out" = "kubectl-bloodraven $(version)" ] || die "kubectl bloodraven --version printed $out"
  PATH="$KREW_ROOT/bin:$k8s:$PATH" kubectl plugin list 2>/dev/null | grep -q 'kubectl-bloodraven$' ||
    die "kubectl plugin list does not show kubectl-bloodraven"
  log "ok: the manifest validates, krew $krew_version installs it, and kubectl runs it ($out)"
}

case ${1:-} in
  build) cmd_build "${2:-$root/dist}" >/dev/null ;;
  check) cmd_check ;;
  *) sed -n '2,16p' "$0" >&2; exit 2 ;;
esac
