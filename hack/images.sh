#!/usr/bin/env bash
# The project's images, built on this machine without a daemon or a registry
# (umoci, like the node's own images in hack/node-images.sh), and imported
# into a local node's containerd.
#
#   hack/images.sh build        build what is missing; print one line per image: REF ARCHIVE
#   hack/images.sh import DIR   build, import each into DIR's node (hack/node.sh import), and
#                               write DIR/images.env: BLOODRAVEN_OPERATOR_IMAGE, BLOODRAVEN_WEBHOOK_IMAGE,
#                               BLOODRAVEN_SIDECAR_IMAGE, BLOODRAVEN_TOOLS_IMAGE
#   hack/images.sh push PREFIX  build, then copy each project image (not tools) to a registry
#                               with skopeo: PREFIX/NAME:TAG, e.g. PREFIX=registry.example/bloodraven;
#                               skopeo's own options (credentials, TLS) come from SKOPEO_ARGS
#
# Images (tag = the first 12 hex digits of a sha256 over the image's inputs):
#   localhost/bloodraven/operator:TAG  one static binary, /bloodraven-operator (glibc,
#                                      `-C target-feature=+crt-static`, stripped), run as
#                                      65532:65532, with the kubectl plugin /kubectl-bloodraven
#                                      beside it; nothing else inside: no shell, no libraries
#   localhost/bloodraven/webhook:TAG   the same for /bloodraven-webhook (the admission webhook)
#   localhost/bloodraven/sidecar:TAG   the same for /bloodraven-sidecar (the deploy-lease sidecar,
#                                      its `exec` wrapper and `probe`), with /bloodraven-migrate beside
#                                      it (its `install` copies both into an injected Pod's shared
#                                      volume), run as 65532
#   localhost/bloodraven/tools:TAG     for tests only: busybox (Debian's busybox-static) and curl
#                                      with the shared libraries it loads, so a Pod can call the
#                                      deploy API over TLS as a pipeline would
# Archives are cached in ${BLOODRAVEN_CACHE:-~/.cache/bloodraven}/images/NAME-TAG.tar; the static
# build uses cargo's target folder (CARGO_TARGET_DIR), under x86_64-unknown-linux-gnu/release and …/release-sidecar.
# With a registry, push the same archive with a standard tool, e.g.
#   skopeo copy oci-archive:ARCHIVE docker://registry.example/bloodraven/operator:TAG
# or build from the Dockerfile in the repository root (docs/images.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${BLOODRAVEN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bloodraven}
images="$cache/images"
target=${CARGO_TARGET_DIR:-$root/target}
triple=x86_64-unknown-linux-gnu
me=images.sh
log() { echo "$me: $*" >&2; }
die() { echo "$me: error: $*" >&2; exit 1; }
# Bump when the way an image is assembled changes (it is part of every tag).
RECIPE=1
# shellcheck source=hack/lib/oci.sh
. "$root/hack/lib/oci.sh"

need() {
  command -v umoci >/dev/null || die "umoci is missing (apt-get install umoci)"
  command -v strip >/dev/null || die "strip is missing (apt-get install binutils)"
  command -v curl >/dev/null || die "curl is missing (apt-get install curl)"
  [ -x /bin/busybox ] || die "/bin/busybox is missing (apt-get install busybox-static)"
  [ -f /usr/lib/x86_64-linux-gnu/libc.a ] || die "static glibc is missing (apt-get install libc6-dev)"
}

# The static binaries: the operator and the webhook (release) and the sidecar (release-sidecar).
# `|| die`: callers run this inside $(...), where set -e does not stop a
# failed build, and the binaries left in the target folder would be packed.
build_binaries() {
  log "building bloodraven-operator and bloodraven-webhook (release) and bloodraven-sidecar (release-sidecar: size-optimized, see Cargo.toml) as static binaries"
  (cd "$root" && RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --quiet --locked --release --target "$triple" -p bloodraven-operator -p bloodraven-webhook \
      -p bloodraven-kubectl) ||
    die "cargo build of the static operator, webhook and kubectl plugin failed"
  (cd "$root" && RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --quiet --locked --profile release-sidecar --target "$triple" -p bloodraven-sidecar -p bloodraven-migrate) ||
    die "cargo build of the static sidecar and migration runner failed"
}

# Static binaries alone in an image, run as 65532: bloodraven-NAME (the
# entrypoint) and each EXTRA (a binary of that name, from the same profile).
build_static() { # work name profile [extra...] -> prints "ref archive"
  local work=$1 name=$2 profile=$3 bin tag out b
  shift 3
  mkdir -p "$work/rootfs"
  for b in "bloodraven-$name" "$@"; do
    bin="$target/$triple/$profile/$b"
    # A dynamic binary would not start in an image without libraries.
    # (grep without -q reads to the end: with pipefail, -q's early exit can
    # fail the pipe by SIGPIPE.)
    ldd "$bin" 2>&1 | grep -E 'statically linked|not a dynamic executable' >/dev/null || die "$bin is not static: $(ldd "$bin" 2>&1 | head -3)"
    strip -o "$work/rootfs/$b" "$bin"
  done
  tag=$( { echo "recipe $RECIPE $name $*"; for b in "bloodraven-$name" "$@"; do sha256sum <"$work/rootfs/$b"; done; } | sha256sum | cut -c1-12)
  out="$images/$name-$tag.tar"
  if ! [ -s "$out" ]; then
    log "packing localhost/bloodraven/$name:$tag"
    pack "$work" "$name" "$tag" "$out" --config.entrypoint="/bloodraven-$name" --config.user=65532:65532
  fi
  echo "localhost/bloodraven/$name:$tag $out"
}

# curl and every shared library it loads, at the same paths, plus the loader.
build_tools() { # work -> prints "ref archive"
  local work=$1 r="$1/rootfs" tag out libs f a
  libs=$(ldd /usr/bin/curl | awk '/=> \// { print $3 } /^\t\/lib/ { print $1 }' | sort -u)
  tag=$( { echo "recipe $RECIPE tools"; sha256sum /bin/busybox /usr/bin/curl $libs | cut -d' ' -f1; } | sha256sum | cut -c1-12)
  out="$images/tools-$tag.tar"
  if ! [ -s "$out" ]; then
    log "packing localhost/bloodraven/tools:$tag"
    mkdir -p "$r/bin" "$r/usr/bin" "$r/etc" "$r/tmp"
    chmod 1777 "$r/tmp"
    cp /bin/busybox "$r/bin/busybox"
    for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -s busybox "$r/bin/$a"; done
    cp /usr/bin/curl "$r/usr/bin/curl"
    for f in $libs; do mkdir -p "$r$(dirname "$f")"; cp -L "$f" "$r$f"; done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$r/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$r/etc/group"
    pack "$work" tools "$tag" "$out" --config.cmd=/bin/sh --config.env=PATH=/bin:/usr/bin
  fi
  echo "localhost/bloodraven/tools:$tag $out"
}

cmd_build() {
  need
  mkdir -p "$images"
  local work; work=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" EXIT
  mkdir -p "$work/operator" "$work/webhook" "$work/sidecar" "$work/tools"
  build_binaries
  build_static "$work/operator" operator release kubectl-bloodraven
  build_static "$work/webhook" webhook release
  build_static "$work/sidecar" sidecar release-sidecar bloodraven-migrate
  build_tools "$work/tools"
}

cmd_import() { # dir
  local dir; dir=$(cd "$1" && pwd)
  local lines ref archive operator="" webhook="" sidecar="" tools=""
  lines=$(cmd_build)
  while read -r ref archive; do
    "$root/hack/node.sh" import "$dir" "$archive" "$ref"
    case $ref in
      */operator:*) operator=$ref ;;
      */webhook:*) webhook=$ref ;;
      */sidecar:*) sidecar=$ref ;;
      */tools:*) tools=$ref ;;
    esac
  done <<<"$lines"
  printf 'export BLOODRAVEN_OPERATOR_IMAGE=%s\nexport BLOODRAVEN_WEBHOOK_IMAGE=%s\nexport BLOODRAVEN_SIDECAR_IMAGE=%s\nexport BLOODRAVEN_TOOLS_IMAGE=%s\n' \
    "$operator" "$webhook" "$sidecar" "$tools" >"$dir/images.env"
  cat "$dir/images.env"
}

cmd_push() { # prefix
  command -v skopeo >/dev/null || die "skopeo is missing (apt-get install skopeo)"
  local prefix=${1%/} lines ref archive name
  lines=$(cmd_build)
  while read -r ref archive; do
    name=${ref#localhost/bloodraven/}
    case $name in tools:*) continue ;; esac
    # shellcheck disable=SC2086 # SKOPEO_ARGS is a list of options
    skopeo copy --quiet ${SKOPEO_ARGS:-} "oci-archive:$archive" "docker://$prefix/$name" >&2 \
      || die "pushing $ref to $prefix/$name failed"
    echo "$prefix/$name"
  done <<<"$lines"
}

case "${1:-}" in
  build) cmd_build ;;
  push) [ $# -eq 2 ] || { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2; }; cmd_push "$2" ;;
  import) [ $# -eq 2 ] || { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2; }; cmd_import "$2" ;;
  *) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2 ;;
esac
