#!/usr/bin/env bash
# MySQL (mysql-server-core and mysql-client-core from Debian's sid suite) in
# a root of its own, for hack/mysql.sh: built once per package version with
# debootstrap into a cache folder outside the clone, run without chroot
# through the root's own loader (how and why: hack/lib/mysql-root.sh).
# Prints the root's path on its last line; ROOT/bloodraven/bin/ holds
# mysqld, mysql, mysqladmin, mysqlbinlog and mysqldump.
#
#   hack/build-mysql.sh          # the cached root; builds it when there is none (~1 min, ~530 MB)
#   hack/build-mysql.sh update   # asks sid for mysql-server-core's version; builds a new root when it changed
#   hack/build-mysql.sh daily    # `update` when the last check is a day old, else as without argument
#
#   BLOODRAVEN_CACHE          cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/bloodraven)
#   BLOODRAVEN_DEBIAN_MIRROR  archive to build from (default: this machine's Debian mirror)
#   BLOODRAVEN_MYSQL_ROOT     use this root instead of the cache's (never built nor updated)
set -euo pipefail
me=build-mysql.sh
log() { echo "$me: $*" >&2; }
die() { echo "$me: error: $*" >&2; exit 1; }
# shellcheck source=hack/lib/mysql-root.sh
. "$(cd "$(dirname "$0")" && pwd)/lib/mysql-root.sh"
case ${1:-} in
  '') mysql_root_cached || mysql_root_build ;;
  update) mysql_root_update ;;
  daily)
    if [ -z "${BLOODRAVEN_MYSQL_ROOT:-}" ] && mysql_root_cached >/dev/null \
       && [ -z "$(find "$(mysql_cache_base)/.checked" -mmin -1440 2>/dev/null)" ]; then
      mysql_root_update
    else
      mysql_root_cached || mysql_root_build
    fi ;;
  *) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2 ;;
esac
