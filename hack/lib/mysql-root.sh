# shellcheck shell=bash
# MySQL from Debian's sid suite, in a root of its own: Debian 12 has no
# mysql-server, sid has mysql-server-core and mysql-client-core (9.7), and
# installing sid packages into this system would replace its libc. So
# debootstrap makes a minimal sid root holding only those two packages and
# their libraries, and the binaries run from it WITHOUT chroot, through the
# root's own dynamic loader and libraries:
#   ROOT/bloodraven/bin/mysqld ARGS  =  exec ROOT/bloodraven/ld/mysqld \
#     --library-path ROOT/usr/lib/<multiarch> ROOT/usr/sbin/mysqld ARGS
# where ROOT/bloodraven/ld/mysqld is a symlink to the root's ld-linux, so the
# process is named mysqld (ps, ss, pgrep) though the kernel runs the loader.
# Host paths (data folders, sockets, `ip netns exec`) work unchanged.
#
# Cache: ${BLOODRAVEN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bloodraven}/mysql/
#   root-<mysql-server-core version>/  one root per package version
#   current -> root-<version>          the one in use
#   .lock                              flock: one build at a time
#   .checked                           when sid's version was last asked (update)
# BLOODRAVEN_MYSQL_ROOT=DIR uses DIR (a root laid out as above) instead.
# BLOODRAVEN_DEBIAN_MIRROR: the archive to build from (default: the first
# URIs of /etc/apt/sources.list.d/debian.sources, else deb.debian.org).
#
# Callers set `me` and define log and die.

# MYSQL_SERIES: the only series a root may hold (hack/tools/versions.env).
# shellcheck source=hack/tools/versions.env
. "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tools/versions.env"

mysql_cache_base() {
  echo "${BLOODRAVEN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bloodraven}/mysql"
}

# The root in use, its real path, when it is complete; else fails. No
# network, no lock: what every hack/mysql.sh command calls.
mysql_root_cached() {
  local r=${BLOODRAVEN_MYSQL_ROOT:-$(mysql_cache_base)/current}
  [ -f "$r/bloodraven/.root-ok" ] || return 1
  (cd -P "$r" && pwd)
}

mysql_mirror() {
  if [ -n "${BLOODRAVEN_DEBIAN_MIRROR:-}" ]; then echo "$BLOODRAVEN_DEBIAN_MIRROR"; return; fi
  local m=''
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    m=$(awk '/^URIs:/ && $2 !~ /security/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources)
  fi
  if [ -z "$m" ] && [ -f /etc/apt/sources.list ]; then
    m=$(awk '$1 == "deb" && $2 ~ /^https?:/ && $2 !~ /security/ { print $2; exit }' /etc/apt/sources.list)
  fi
  echo "${m:-http://deb.debian.org/debian}"
}

# The mysql-server-core version sid has now (one index download, ~1 s).
mysql_sid_version() {
  local arch
  arch=$(dpkg --print-architecture)
  # awk reads to the end: an early exit would kill xz and curl with SIGPIPE,
  # and fail the pipe.
  curl -fsS --max-time 120 "$(mysql_mirror)/dists/sid/main/binary-$arch/Packages.xz" | xz -dc |
    awk '/^Package: / { p = $2 } p == "mysql-server-core" && /^Version: / { v = $2 } END { print v }'
}

# Root privileges for debootstrap (mknod, chown, chroot into the new root).
_mysql_as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# Removes a (partial) root: anything debootstrap left mounted in it first.
_mysql_rm_root() { # DIR
  local m
  [ -e "$1" ] || return 0
  for m in $(awk -v p="$1/" 'index($2, p) == 1 { print $2 }' /proc/self/mounts | sort -r); do
    _mysql_as_root umount -l "$m" || true
  done
  _mysql_as_root rm -rf --one-file-system "$1"
}

# Deletes the roots no process runs from, but the current one.
_mysql_gc() { # BASE CURRENT
  local r p cmd used
  for r in "$1"/root-*; do
    [ -d "$r" ] && [ "$r" != "$2" ] || continue
    used=''
    for p in /proc/[0-9]*; do
      cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
      if [[ $cmd == *"$r/"* ]]; then used=1; break; fi
    done
    if [ -z "$used" ]; then log "removing the old MySQL root $r"; _mysql_rm_root "$r"; fi
  done
}

# Builds a root from sid (unless FORCE is empty and one is cached), makes it
# current and prints its path. One build at a time (flock).
mysql_root_build() { # [force]
  local force=${1:-} base
  if [ -n "${BLOODRAVEN_MYSQL_ROOT:-}" ]; then
    mysql_root_cached || die "BLOODRAVEN_MYSQL_ROOT=$BLOODRAVEN_MYSQL_ROOT has no bloodraven/.root-ok"
    return
  fi
  base=$(mysql_cache_base)
  mkdir -p "$base"
  # (fd 8 must not leak into a daemon: hack/lib/detach.sh closes it.)
  exec 8>"$base/.lock"
  flock -w 1800 8 || die "another build holds $base/.lock for more than 30 minutes"
  local r
  if [ -z "$force" ] && r=$(mysql_root_cached); then exec 8>&-; echo "$r"; return 0; fi
  if ! command -v debootstrap >/dev/null; then
    log "debootstrap not found: installing it with apt-get (hack/deps.sh installs it up front)"
    # shellcheck source=hack/lib/apt.sh
    . "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
    apt_install debootstrap >&2 || die "apt-get install debootstrap failed"
  fi
  local tmp="$base/build.tmp" mirror started=$SECONDS
  mirror=$(mysql_mirror)
  _mysql_rm_root "$tmp"
  log "building a MySQL root from Debian sid ($mirror) in $tmp: debootstrap, about a minute, once per mysql-server-core version"
  if ! _mysql_as_root debootstrap --variant=minbase --include=mysql-server-core,mysql-client-core \
       sid "$tmp" "$mirror" >"$base/build.log" 2>&1; then
    tail -n 30 "$base/build.log" >&2
    _mysql_rm_root "$tmp"
    die "debootstrap of sid with mysql-server-core failed (whole log: $base/build.log)"
  fi
  local ver
  ver=$(dpkg-query --admindir="$tmp/var/lib/dpkg" -W -f '${Version}' mysql-server-core) \
    || die "mysql-server-core is not installed in $tmp"
  if [[ $ver != "$MYSQL_SERIES".* ]]; then
    _mysql_rm_root "$tmp"
    die "sid's mysql-server-core is $ver, not of the series $MYSQL_SERIES (MYSQL_SERIES in hack/tools/versions.env)"
  fi
  # What no test reads: the downloaded packages, docs, man pages, translations.
  _mysql_as_root rm -rf "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/* \
    "$tmp"/usr/share/doc "$tmp"/usr/share/man "$tmp"/usr/share/info "$tmp"/usr/share/locale
  local final="$base/root-${ver//[^A-Za-z0-9.+~-]/_}"
  _mysql_rm_root "$final"
  _mysql_as_root chown "$(id -u):$(id -g)" "$tmp"
  mv "$tmp" "$final"
  _mysql_wrappers "$final"
  local v
  v=$("$final/bloodraven/bin/mysqld" --no-defaults --version 2>&1) \
    || { echo "$v" >&2; die "$final/bloodraven/bin/mysqld does not run"; }
  "$final/bloodraven/bin/mysql" --no-defaults --version >/dev/null \
    || die "$final/bloodraven/bin/mysql does not run"
  printf '%s\n' "$ver" >"$final/bloodraven/.root-ok"
  ln -sfn "$(basename "$final")" "$base/current.tmp"
  mv -T "$base/current.tmp" "$base/current"
  touch "$base/.checked"
  log "MySQL root ready in $((SECONDS - started)) s: $final ($(du -sh "$final" | cut -f1)); $v"
  _mysql_gc "$base" "$final"
  exec 8>&-
  echo "$final"
}

# ROOT/bloodraven/bin/NAME for the server and the clients (see the header).
_mysql_wrappers() { # ROOT
  local r=$1 ld lib name path
  ld=$(ls "$r"/usr/lib/*-linux-gnu/ld-linux*.so.[0-9] 2>/dev/null | head -n 1 || true)
  [ -n "$ld" ] || die "no dynamic loader in $r/usr/lib/*-linux-gnu"
  lib=$(dirname "$ld")
  mkdir -p "$r/bloodraven/bin" "$r/bloodraven/ld"
  for name in mysqld mysql mysqladmin mysqlbinlog mysqldump; do
    path=$r/usr/sbin/$name; [ -x "$path" ] || path=$r/usr/bin/$name
    [ -x "$path" ] || die "$name not found in $r"
    ln -sfn "$ld" "$r/bloodraven/ld/$name"
    printf '#!/bin/sh\n# %s of the Debian sid root %s, run through its own loader and libraries.\nexec %s --library-path %s %s "$@"\n' \
      "$name" "$r" "$r/bloodraven/ld/$name" "$lib" "$path" >"$r/bloodraven/bin/$name"
    chmod +x "$r/bloodraven/bin/$name"
  done
}

# Asks sid for mysql-server-core's version; builds a new root when it is not
# the current one's. Prints the current root.
mysql_root_update() {
  local base want have='' r
  if [ -n "${BLOODRAVEN_MYSQL_ROOT:-}" ]; then mysql_root_build; return; fi
  base=$(mysql_cache_base)
  want=$(mysql_sid_version) || want=''
  if [ -z "$want" ]; then
    log "could not read mysql-server-core's version in sid from $(mysql_mirror): keeping the cached root"
    mysql_root_cached || mysql_root_build
    return
  fi
  if r=$(mysql_root_cached); then have=$(cat "$r/bloodraven/.root-ok"); fi
  mkdir -p "$base"; touch "$base/.checked"
  if [ "$have" = "$want" ]; then echo "$r"; return 0; fi
  if [ -n "$have" ] && [[ $want != "$MYSQL_SERIES".* ]]; then
    log "sid has mysql-server-core $want, not of the series $MYSQL_SERIES: keeping $have (MYSQL_SERIES in hack/tools/versions.env)"
    echo "$r"; return 0
  fi
  log "sid has mysql-server-core $want, the cached root ${have:-(none)}: building"
  # A failed build (sid is often mid-transition) keeps the cached root.
  if ! (mysql_root_build force >/dev/null) && [ -n "$have" ]; then
    log "building mysql-server-core $want failed: keeping $have"
    echo "$r"; return 0
  fi
  mysql_root_cached
}
