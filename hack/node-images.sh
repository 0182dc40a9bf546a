#!/usr/bin/env bash
# The images the local node itself needs, built without a daemon or a
# registry: OCI image layouts made with umoci (Debian), packed as OCI archives
# (a tar of the layout) that `ctr images import` loads (hack/node.sh import).
#
#   hack/node-images.sh build    build what is missing; print one line per image: REF ARCHIVE
#   hack/node-images.sh refs     print the refs only (REF per line), building what is missing
#
# Images (tag = the first 12 hex digits of a sha256 over the image's inputs, so
# a changed input is a new tag and an unchanged one is not rebuilt):
#   localhost/bloodraven/pause:TAG    the sandbox image: hack/tools/pause (static Go), runs as 65535
#   localhost/bloodraven/busybox:TAG  a shell for tests: Debian's busybox-static with its applets
#                                     as symlinks in /bin (its wget crashes in a bare image: use nc)
# Archives are cached in ${BLOODRAVEN_CACHE:-~/.cache/bloodraven}/images/NAME-TAG.tar.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${BLOODRAVEN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bloodraven}
images="$cache/images"
me=node-images.sh
log() { echo "$me: $*" >&2; }
die() { echo "$me: error: $*" >&2; exit 1; }
# Bump when the way an image is assembled changes (it is part of every tag).
RECIPE=1
BUSYBOX=/bin/busybox

need() {
  command -v umoci >/dev/null || die "umoci is missing (apt-get install umoci)"
  command -v go >/dev/null || die "go is missing"
  # grep without -q reads to the end: with pipefail, -q's early exit can
  # kill the writer with SIGPIPE and fail the pipe (seen: 1 run in 50).
  [ -x "$BUSYBOX" ] && "$BUSYBOX" --list 2>/dev/null | grep -x nc >/dev/null ||
    die "$BUSYBOX is not busybox-static with nc (apt-get install busybox-static)"
}

# shellcheck source=hack/lib/oci.sh
. "$root/hack/lib/oci.sh"

build_pause() { # work -> prints "ref archive"
  local work=$1 tag out
  mkdir -p "$work/rootfs"
  (cd "$root/hack/tools/pause" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/rootfs/pause" .)
  tag=$( { echo "recipe $RECIPE pause"; sha256sum <"$work/rootfs/pause"; } | sha256sum | cut -c1-12)
  out="$images/pause-$tag.tar"
  if ! [ -s "$out" ]; then
    log "building localhost/bloodraven/pause:$tag"
    pack "$work" pause "$tag" "$out" --config.entrypoint=/pause --config.user=65535:65535
  fi
  echo "localhost/bloodraven/pause:$tag $out"
}

build_busybox() { # work -> prints "ref archive"
  local work=$1 tag out
  tag=$( { echo "recipe $RECIPE busybox"; sha256sum <"$BUSYBOX"; } | sha256sum | cut -c1-12)
  out="$images/busybox-$tag.tar"
  if ! [ -s "$out" ]; then
    log "building localhost/bloodraven/busybox:$tag"
    local r="$work/rootfs"
    mkdir -p "$r/bin" "$r/etc" "$r/tmp" "$r/root"
    chmod 1777 "$r/tmp"
    cp "$BUSYBOX" "$r/bin/busybox"
    local a
    for a in $("$BUSYBOX" --list); do [ "$a" = busybox ] || ln -s busybox "$r/bin/$a"; done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$r/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$r/etc/group"
    pack "$work" busybox "$tag" "$out" --config.cmd=/bin/sh
  fi
  echo "localhost/bloodraven/busybox:$tag $out"
}

cmd_build() {
  need
  mkdir -p "$images"
  local work; work=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" EXIT
  mkdir -p "$work/pause" "$work/busybox"
  build_pause "$work/pause"
  build_busybox "$work/busybox"
}

case "${1:-}" in
  build) cmd_build ;;
  refs) cmd_build | cut -d' ' -f1 ;;
  *) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2 ;;
esac
