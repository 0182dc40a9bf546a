#!/usr/bin/env bash
# Images of third-party migration tools, to run as the migration container of
# a Job the webhook injects (tests/tests/sidecar_tools.rs, docs/pipelines.md),
# built on this machine without a daemon or a registry, like hack/images.sh
# builds the project's images (umoci, hack/lib/oci.sh).
#
#   hack/tool-images.sh build TOOL            build; print REF ARCHIVE
#   hack/tool-images.sh import NODE_DIR TOOL  build, import into NODE_DIR's node
#                                             (hack/node.sh import); print REF
#
# TOOL (versions in hack/tools/versions.env):
#   flyway          localhost/bloodraven/flyway:TAG: Flyway's command line (FLYWAY_VERSION), the
#                   flyway-commandline tar.gz from Maven Central with only the MySQL/MariaDB parts
#                   of it kept (its jars but other databases', and its MariaDB Connector/J), plus
#                   MySQL Connector/J (MYSQL_CONNECTOR_J_VERSION), both checked against Central's
#                   .sha1; a Java runtime `jlink` makes from this machine's JDK with the modules
#                   Flyway's jars need (jdeps), and the shared libraries it loads (ldd, as
#                   hack/images.sh copies curl's); busybox (Debian's busybox-static) for
#                   /bin/flyway, a launcher that execs java (so a SIGTERM to `flyway` reaches the
#                   JVM). /flyway/lib, /flyway/drivers; telemetry off (REDGATE_DISABLE_TELEMETRY).
#   golang-migrate  localhost/bloodraven/golang-migrate:TAG: /bin/migrate alone, built from
#                   github.com/golang-migrate/migrate/v4/cmd/migrate (GOLANG_MIGRATE_VERSION)
#                   through the Go module proxy with `-tags mysql`, CGO_ENABLED=0 (static).
# Both run as 65532:65532, hold no migrations (mount them, e.g. from a ConfigMap, or build FROM
# the image) and write nothing outside /tmp. TAG = the first 12 hex digits of a sha256 over the
# image's inputs and this recipe. Downloads and builds are cached by version in
# ${BLOODRAVEN_CACHE:-~/.cache/bloodraven}/tools/, archives in …/images/NAME-TAG.tar: a second
# run downloads and builds nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=/dev/null
. "$root/hack/tools/versions.env"
cache=${BLOODRAVEN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bloodraven}
images="$cache/images"
tools="$cache/tools"
me=tool-images.sh
log() { echo "$me: $*" >&2; }
die() { echo "$me: error: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2; }
# Bump when the way an image is assembled changes (it is part of every tag).
RECIPE=1
BUSYBOX=/bin/busybox
CENTRAL=https://repo1.maven.org/maven2
# shellcheck source=hack/lib/oci.sh
. "$root/hack/lib/oci.sh"

# A file from Maven Central into DIR, checked against the .sha1 Central
# publishes beside it (Central has no .sha256 for these). Skipped when DIR
# already holds it: it was checked when it was fetched.
central() { # dir path-under-central
  local dir=$1 path=$2 name sum
  name=${path##*/}
  [ -s "$dir/$name" ] && return 0
  mkdir -p "$dir"
  log "downloading $name from Maven Central"
  curl -fsSL --retry 3 -o "$dir/$name.tmp" "$CENTRAL/$path" || die "download of $CENTRAL/$path failed"
  sum=$(curl -fsSL --retry 3 "$CENTRAL/$path.sha1") || die "download of $CENTRAL/$path.sha1 failed"
  sum=${sum%% *}
  [ "$(sha1sum <"$dir/$name.tmp" | cut -d' ' -f1)" = "$sum" ] || { rm -f "$dir/$name.tmp"; die "$name does not match Central's sha1 $sum"; }
  mv "$dir/$name.tmp" "$dir/$name"
}

# Flyway's jars for MySQL and MariaDB, in DIR/lib and DIR/drivers (cached).
flyway_files() { # -> prints dir
  local dir="$tools/flyway-$FLYWAY_VERSION-cj-$MYSQL_CONNECTOR_J_VERSION" dl="$tools/downloads" x j
  if ! [ -f "$dir/.done" ]; then
    central "$dl" "org/flywaydb/flyway-commandline/$FLYWAY_VERSION/flyway-commandline-$FLYWAY_VERSION.tar.gz"
    central "$dl" "com/mysql/mysql-connector-j/$MYSQL_CONNECTOR_J_VERSION/mysql-connector-j-$MYSQL_CONNECTOR_J_VERSION.jar"
    rm -rf "$dir"; mkdir -p "$dir/lib" "$dir/drivers"
    x=$(mktemp -d)
    tar -xzf "$dl/flyway-commandline-$FLYWAY_VERSION.tar.gz" -C "$x"
    x="$x/flyway-$FLYWAY_VERSION"
    # The tar.gz holds every database's module and driver (about 200 MB):
    # keep its own libraries, Flyway's core, command line, verbs and MySQL
    # module (which serves MariaDB too), and MariaDB Connector/J.
    cp "$x"/lib/*.jar "$dir/lib/"
    for j in commandline core mysql reports nc-core nc-callbacks nc-scanners \
      verb-baseline verb-clean verb-info verb-migrate verb-repair verb-schemas verb-validate; do
      cp "$x/lib/flyway/flyway-$j-$FLYWAY_VERSION.jar" "$dir/lib/" || die "no flyway-$j in the tar.gz"
    done
    cp "$x"/drivers/mariadb-java-client-*.jar "$dir/drivers/" || die "no MariaDB Connector/J in the tar.gz"
    cp "$dl/mysql-connector-j-$MYSQL_CONNECTOR_J_VERSION.jar" "$dir/drivers/"
    cp "$x/licenses/LICENSE.md" "$dir/LICENSE.md"
    rm -rf "${x%/*}"
    chmod 0644 "$dir"/lib/*.jar "$dir"/drivers/*.jar
    touch "$dir/.done"
  fi
  echo "$dir"
}

# A Java runtime from this machine's JDK with the modules Flyway's jars need
# (cached by the JDK's version and the module list).
java_runtime() { # jars-dir -> prints dir
  local jars=$1 modules version dir
  if ! command -v jlink >/dev/null || ! command -v jdeps >/dev/null; then
    die "jlink and jdeps are missing (apt-get install openjdk-17-jdk-headless)"
  fi
  # jdeps' list, plus what is loaded by name rather than linked: elliptic-curve
  # TLS (a server's certificate) and sun.misc.Unsafe.
  # (jdeps takes seconds: its answer is kept beside the jars.)
  if ! [ -s "$jars/.modules" ]; then
    jdeps --ignore-missing-deps --print-module-deps --multi-release 17 -q "$jars"/lib/*.jar "$jars"/drivers/*.jar >"$jars/.modules.tmp"
    mv "$jars/.modules.tmp" "$jars/.modules"
  fi
  modules=$(cat "$jars/.modules"),jdk.crypto.ec,jdk.unsupported
  version=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.runtime.version = //p')
  dir="$tools/jre-$version-$(echo "$modules" | sha256sum | cut -c1-12)"
  if ! [ -f "$dir/.done" ]; then
    log "making a Java runtime with jlink ($version: $modules)"
    rm -rf "$dir"
    jlink --add-modules "$modules" --strip-debug --no-header-files --no-man-pages --compress=2 --output "$dir/java" >&2
    # java.desktop is there for java.beans (jdeps); its native AWT, font,
    # image and sound libraries load X11 and more, and nothing here draws.
    rm -f "$dir"/java/lib/lib{awt,awt_xawt,awt_headless,fontmanager,javajpeg,jawt,jsound,lcms,mlib_image,splashscreen}.so
    # The class-data-sharing archive jlink leaves out: the JVM starts in
    # a fraction of the time with it.
    "$dir/java/bin/java" -Xshare:dump >/dev/null
    # The shared libraries the runtime loads, besides its own.
    find "$dir/java" -type f \( -name '*.so' -o -path '*/bin/*' \) -exec ldd {} \; 2>/dev/null |
      awk '/=> \// { print $3 } /^\t\/lib/ { print $1 }' | grep -v "^$dir/" | sort -u >"$dir/libs"
    # Its digest, for the image's tag.
    (cd "$dir/java" && find . -type f | sort | xargs sha256sum | sha256sum | cut -d' ' -f1) >"$dir/sha"
    touch "$dir/.done"
  fi
  echo "$dir"
}

build_flyway() { # -> prints "ref archive"
  local jars jre tag out work r f a launcher
  jars=$(flyway_files)
  jre=$(java_runtime "$jars")
  # exec: java is the process the wrapper started, so its SIGTERM reaches
  # the JVM. -XX:-UsePerfData: no /tmp/hsperfdata (read-only root);
  # TieredStopAtLevel=1: a short run starts faster on the C1 compiler alone.
  # shellcheck disable=SC2016 # expanded by the launcher, not here
  launcher='#!/bin/sh
exec /opt/java/bin/java -XX:-UsePerfData -XX:TieredStopAtLevel=1 -Djava.security.egd=file:/dev/urandom $JAVA_ARGS \
  -cp "/flyway/lib/*:/flyway/drivers/*" org.flywaydb.commandline.Main "$@"'
  tag=$( {
    echo "recipe $RECIPE flyway $FLYWAY_VERSION $MYSQL_CONNECTOR_J_VERSION ${jre##*/} $(cat "$jre/sha")"
    echo "$launcher"
    (cd "$jars" && sha256sum lib/* drivers/*)
    # shellcheck disable=SC2046
    sha256sum "$BUSYBOX" $(cat "$jre/libs") | cut -d' ' -f1
  } | sha256sum | cut -c1-12)
  out="$images/flyway-$tag.tar"
  if ! [ -s "$out" ]; then
    work=$(mktemp -d)
    # shellcheck disable=SC2064
    trap "rm -rf '$work'" RETURN
    r="$work/rootfs"
    mkdir -p "$r/bin" "$r/etc" "$r/tmp" "$r/opt" "$r/flyway"
    chmod 1777 "$r/tmp"
    cp "$BUSYBOX" "$r/bin/busybox"
    for a in $("$BUSYBOX" --list); do [ "$a" = busybox ] || ln -s busybox "$r/bin/$a"; done
    cp -a "$jre/java" "$r/opt/java"
    while read -r f; do mkdir -p "$r$(dirname "$f")"; cp -L "$f" "$r$f"; done <"$jre/libs"
    cp -a "$jars/lib" "$jars/drivers" "$jars/LICENSE.md" "$r/flyway/"
    printf '%s\n' "$launcher" >"$r/bin/flyway"
    chmod 0755 "$r/bin/flyway"
    printf 'root:x:0:0:root:/:/bin/sh\nflyway:x:65532:65532:flyway:/tmp:/bin/false\n' >"$r/etc/passwd"
    printf 'root:x:0:\nflyway:x:65532:\n' >"$r/etc/group"
    log "packing localhost/bloodraven/flyway:$tag"
    pack "$work" flyway "$tag" "$out" --config.user=65532:65532 --config.entrypoint=/bin/flyway \
      --config.env=JAVA_HOME=/opt/java --config.env=REDGATE_DISABLE_TELEMETRY=true --config.workingdir=/tmp
  fi
  echo "localhost/bloodraven/flyway:$tag $out"
}

# golang-migrate's CLI (cached by version).
migrate_binary() { # -> prints path
  local dir="$tools/golang-migrate-$GOLANG_MIGRATE_VERSION"
  if ! [ -x "$dir/migrate" ]; then
    command -v go >/dev/null || die "go is missing"
    log "building golang-migrate $GOLANG_MIGRATE_VERSION (-tags mysql) from the Go module proxy (first time only)"
    # Into a temporary folder and renamed: an interrupted build leaves
    # nothing a later run would take as cached.
    rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
    GOBIN="$dir.tmp" CGO_ENABLED=0 go install -trimpath -tags mysql \
      -ldflags "-s -w -X main.Version=$GOLANG_MIGRATE_VERSION" \
      "github.com/golang-migrate/migrate/v4/cmd/migrate@$GOLANG_MIGRATE_VERSION" >&2 ||
      die "go install of golang-migrate failed"
    mkdir -p "$dir"; mv "$dir.tmp/migrate" "$dir/migrate"; rmdir "$dir.tmp"
  fi
  echo "$dir/migrate"
}

build_golang_migrate() { # -> prints "ref archive"
  local bin tag out work r
  bin=$(migrate_binary)
  # (ldd fails on a binary that is not dynamic: that is the answer wanted.)
  { ldd "$bin" 2>&1 || true; } | grep -E 'statically linked|not a dynamic executable' >/dev/null || die "$bin is not static"
  tag=$( { echo "recipe $RECIPE golang-migrate $GOLANG_MIGRATE_VERSION"; sha256sum <"$bin"; } | sha256sum | cut -c1-12)
  out="$images/golang-migrate-$tag.tar"
  if ! [ -s "$out" ]; then
    work=$(mktemp -d)
    # shellcheck disable=SC2064
    trap "rm -rf '$work'" RETURN
    r="$work/rootfs"
    mkdir -p "$r/bin" "$r/etc" "$r/tmp"
    chmod 1777 "$r/tmp"
    cp "$bin" "$r/bin/migrate"
    printf 'root:x:0:0:root:/:/bin/false\nmigrate:x:65532:65532:migrate:/tmp:/bin/false\n' >"$r/etc/passwd"
    printf 'root:x:0:\nmigrate:x:65532:\n' >"$r/etc/group"
    log "packing localhost/bloodraven/golang-migrate:$tag"
    pack "$work" golang-migrate "$tag" "$out" --config.user=65532:65532 --config.entrypoint=/bin/migrate
  fi
  echo "localhost/bloodraven/golang-migrate:$tag $out"
}

cmd_build() { # tool -> prints "ref archive"
  command -v umoci >/dev/null || die "umoci is missing (apt-get install umoci)"
  [ -x "$BUSYBOX" ] || die "$BUSYBOX is missing (apt-get install busybox-static)"
  mkdir -p "$images" "$tools"
  # One build at a time (test files, and a file's tests, ask at once): the
  # cached folders are made in place.
  exec 9>"$tools/.tool-images.lock"
  flock 9
  case $1 in
    flyway) build_flyway ;;
    golang-migrate) build_golang_migrate ;;
    *) die "unknown TOOL '$1' (flyway, golang-migrate)" ;;
  esac
}

cmd_import() { # node_dir tool
  local line ref archive
  line=$(cmd_build "$2")
  ref=${line%% *}; archive=${line#* }
  "$root/hack/node.sh" import "$1" "$archive" "$ref" >&2
  echo "$ref"
}

case "${1:-}" in
  build) [ $# -eq 2 ] || usage; cmd_build "$2" ;;
  import) [ $# -eq 3 ] || usage; cmd_import "$2" "$3" ;;
  *) usage ;;
esac
