#!/usr/bin/env bash
# The example app's image (charts/examples/counter-app), built on this machine
# without a daemon or a registry, like hack/images.sh builds the project's
# images (umoci, hack/lib/oci.sh): the revisions ship in the app image, so the
# migration Job and the Deployment run the same image tag.
#
#   hack/app-image.sh build REVISIONS [NAME]           build; print REF ARCHIVE
#   hack/app-image.sh import NODE_DIR REVISIONS [NAME]  build, import into NODE_DIR's node
#                                                       (hack/node.sh import); print REF
#
# REVISIONS is a folder of bloodraven-migrate revisions (V<n>__<description>.sql; other files are
# not copied). NAME defaults to counter-app. The image, localhost/bloodraven/NAME:TAG (TAG = the
# first 12 hex digits of a sha256 over busybox, the revisions and this recipe), holds:
#   /bin/busybox and its applets   Debian's busybox-static: the app is `httpd` serving /www, and
#                                  the chart's pre-install wait uses `nslookup`
#   /migrations/V*.sql             the revisions, read by bloodraven-migrate in the migration Job
#                                  (the runner itself comes from the sidecar image, copied into
#                                  the Pod by the injected install container)
#   /www/index.html                a page naming the image's revisions: the stand-in application
# and runs as 65532. It is an example, not an application: it never connects to the database.
# charts/examples/counter-app/Dockerfile builds the same image for a registry.
# Archives are cached in ${BLOODRAVEN_CACHE:-~/.cache/bloodraven}/images/NAME-TAG.tar.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${BLOODRAVEN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bloodraven}
images="$cache/images"
me=app-image.sh
log() { echo "$me: $*" >&2; }
die() { echo "$me: error: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2; }
# Bump when the way the image is assembled changes (it is part of every tag).
RECIPE=1
BUSYBOX=/bin/busybox
# shellcheck source=hack/lib/oci.sh
. "$root/hack/lib/oci.sh"

cmd_build() { # revisions name -> prints "ref archive"
  local src=$1 name=$2 work r tag out f files=()
  command -v umoci >/dev/null || die "umoci is missing (apt-get install umoci)"
  [ -x "$BUSYBOX" ] || die "$BUSYBOX is missing (apt-get install busybox-static)"
  [ -d "$src" ] || die "no folder $src"
  [[ $name =~ ^[a-z0-9][a-z0-9._-]*$ ]] || die "NAME must be a lower-case image name (got '$name')"
  for f in "$src"/V*.sql; do [ -f "$f" ] && files+=("$f"); done
  [ ${#files[@]} -gt 0 ] || die "no V<n>__<description>.sql in $src"
  mkdir -p "$images"
  tag=$( {
    echo "recipe $RECIPE app $name"
    sha256sum <"$BUSYBOX"
    for f in "${files[@]}"; do echo "${f##*/}"; sha256sum <"$f"; done
  } | sha256sum | cut -c1-12)
  out="$images/$name-$tag.tar"
  if ! [ -s "$out" ]; then
    work=$(mktemp -d)
    # shellcheck disable=SC2064
    trap "rm -rf '$work'" RETURN
    r="$work/rootfs"
    mkdir -p "$r/bin" "$r/etc" "$r/tmp" "$r/migrations" "$r/www"
    chmod 1777 "$r/tmp"
    cp "$BUSYBOX" "$r/bin/busybox"
    for f in $("$BUSYBOX" --list); do [ "$f" = busybox ] || ln -s busybox "$r/bin/$f"; done
    printf 'root:x:0:0:root:/:/bin/sh\napp:x:65532:65532:app:/:/bin/false\n' >"$r/etc/passwd"
    printf 'root:x:0:\napp:x:65532:\n' >"$r/etc/group"
    {
      echo "<!doctype html><title>$name</title><h1>$name</h1><p>revisions in this image:</p><ul>"
      for f in "${files[@]}"; do
        cp "$f" "$r/migrations/"
        echo "<li>${f##*/}</li>"
      done
      echo "</ul>"
    } >"$r/www/index.html"
    chmod 0644 "$r/migrations/"* "$r/www/index.html"
    log "packing localhost/bloodraven/$name:$tag (${#files[@]} revisions)"
    pack "$work" "$name" "$tag" "$out" --config.user=65532:65532 \
      --config.cmd=/bin/httpd --config.cmd=-f --config.cmd=-p --config.cmd=8080 --config.cmd=-h --config.cmd=/www
  fi
  echo "localhost/bloodraven/$name:$tag $out"
}

cmd_import() { # node_dir revisions name
  local line ref archive
  line=$(cmd_build "$2" "$3")
  ref=${line%% *}; archive=${line#* }
  "$root/hack/node.sh" import "$1" "$archive" "$ref" >&2
  echo "$ref"
}

case "${1:-}" in
  build) [ $# -ge 2 ] && [ $# -le 3 ] || usage; cmd_build "$2" "${3:-counter-app}" ;;
  import) [ $# -ge 3 ] && [ $# -le 4 ] || usage; cmd_import "$2" "$3" "${4:-counter-app}" ;;
  *) usage ;;
esac
