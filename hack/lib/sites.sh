# shellcheck shell=bash
# What hack/mariadb.sh and hack/mysql.sh share: the layout of a site folder,
# pid checks, bounded waits and kills, and the commands that do not depend on
# the server (stop, down, status, sql, pair, template's lock and stamp). The
# flavour script sets, before sourcing this file:
#   me              its own name, for messages (mariadb.sh, mysql.sh)
#   SERVER_NAME     the daemon's name in messages and in command lines
#                   (mariadbd, mysqld); procs_of matches it
#   TIMEOUT         seconds for every wait
#   TEMPLATE_STAMP  what the current template is built with (or sets it in
#                   ensure_client)
# and defines, after sourcing it:
#   ensure_client   sets CLIENT and ADMIN (run before every command): the
#                   command-line client and the admin tool (ping, shutdown),
#                   as root over a unix socket, which the caller appends as
#                   --socket=PATH
#   ensure_server   installs or finds the server (template, start)
#   build_template DIR TMP          makes TMP/data (TMP exists); the lock is held
#   launch_site D SOCK PORT SID ADDR RO   starts the daemon with `detach
#                   "${in_ns[@]}" ...` so that $! is its pid; RO is 1 for read-only
#   STATUS_SQL      one SELECT giving the rest of a `status` line
#   REPLICATE_WHAT  the statements `replicate` sends, named in its error
#   replicate_sql HOST PORT         the SQL that points a replica at HOST:PORT
#   REPLICA_STATUS  SHOW SLAVE STATUS / SHOW REPLICA STATUS
#   REPLICA_FIELD   the prefix of its thread fields: Slave / Replica
#   REPLICA_GREP    what of it to print when the threads do not both run
# and then calls sites_main "$@".

SITE_PASSWORD=${BLOODRAVEN_SITE_PASSWORD:-bloodraven-operator-pw}
REPL_PASSWORD=${BLOODRAVEN_REPL_PASSWORD:-bloodraven-repl-pw}

PATH=$PATH:/usr/sbin:/usr/local/sbin
log() { echo "$me: $*" >&2; }
die() { echo "$me: error: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2; }

# The daemon refuses to run as root unless told to.
user_args=()
if [ "$(id -u)" = 0 ]; then user_args=(--user=root); fi

# SQL string literal contents: escape backslashes and single quotes.
sql_str() { local s=${1//\\/\\\\}; printf '%s' "${s//\'/\\\'}"; }

need_dir() { [ -n "${1:-}" ] || usage; mkdir -p "$1"; (cd "$1" && pwd); }
check_name() { [[ $1 =~ ^[A-Za-z0-9_-]+$ ]] || die "site name '$1' must be [A-Za-z0-9_-]+"; }
check_num() { [[ $2 =~ ^[0-9]+$ ]] || die "$1 must be a number, got '$2'"; }
check_sock() { # unix socket paths are limited to 107 bytes
  [ ${#1} -le 107 ] || die "socket path too long (${#1} > 107 bytes): $1; use a shorter DIR"
}

site_dir() { echo "$1/sites/$2"; }
sock_of() { echo "$1/sites/$2/mysqld.sock"; }

client() { # DIR NAME [args...] : root over the socket
  local dir=$1 name=$2; shift 2
  "${CLIENT[@]}" --socket="$(sock_of "$dir" "$name")" --connect-timeout=5 "$@"
}

# pid of site NAME's daemon if it is alive and really ours (pid file checked
# against /proc, so a recycled pid is never taken for it); else nothing.
site_pid() { # DIR NAME
  local d pidf pid
  d=$(site_dir "$1" "$2"); pidf="$d/mysqld.pid"
  [ -s "$pidf" ] || return 0
  pid=$(cat "$pidf")
  [[ $pid =~ ^[0-9]+$ ]] || return 0
  local cmd
  cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 0
  if [[ $cmd == *" --datadir=$d/data "* ]]; then echo "$pid"; fi
}

# Every daemon of DIR (sites and template build), by its command line.
procs_of() { # DIR
  local p cmd
  for p in /proc/[0-9]*; do
    cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
    case $cmd in
      *"$SERVER_NAME"*" --datadir=$1/sites/"* | *"$SERVER_NAME"*" --datadir=$1/.template.tmp/"*) echo "${p#/proc/}" ;;
    esac
  done
}

tail_log() { # file
  if [ -f "$1" ]; then echo "----- last lines of $1 -----" >&2; tail -n 30 "$1" >&2; echo "-----" >&2; fi
}

# Whether PID runs: a zombie does not (it holds no port, file or lock any
# more, and this machine's init may take seconds to reap it).
alive() { # pid
  local st
  st=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  st=${st##*) }
  [ "${st%% *}" != Z ]
}

# Waits until the server on SOCKET answers, while PID lives.
wait_ready() { # socket pid errlog what
  local sock=$1 pid=$2 errlog=$3 what=$4 deadline=$((SECONDS + TIMEOUT))
  while ((SECONDS < deadline)); do
    if "${ADMIN[@]}" --socket="$sock" --connect-timeout=2 ping >/dev/null 2>&1; then
      return 0
    fi
    if ! alive "$pid"; then
      tail_log "$errlog"; die "$what: $SERVER_NAME (pid $pid) exited during start-up"
    fi
    sleep 0.2
  done
  tail_log "$errlog"; die "$what: $SERVER_NAME did not answer within ${TIMEOUT}s"
}

# TERM, bounded wait, then KILL; verifies the pid is gone.
kill_pid() { # pid what
  local pid=$1 what=$2 i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < TIMEOUT * 5; i++)); do alive "$pid" || return 0; sleep 0.2; done
  log "$what: pid $pid still alive after TERM and ${TIMEOUT}s: KILL"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do alive "$pid" || return 0; sleep 0.2; done
  die "$what: pid $pid survives KILL"
}

# Waits (bounded) for PID to exit; 1 when it did not.
wait_exit() { # pid
  local i
  for ((i = 0; i < TIMEOUT * 10; i++)); do alive "$1" || return 0; sleep 0.1; done
  return 1
}

cmd_template() { # DIR
  local dir; dir=$(need_dir "${1:-}")
  ensure_server
  local tpl="$dir/template"
  if [ "$(cat "$tpl/.bloodraven-template-ok" 2>/dev/null)" = "$TEMPLATE_STAMP" ]; then return 0; fi
  # Two concurrent first runs on one DIR: the second waits for the first.
  # (fd 9 must not leak into any daemon, or the lock would outlive us.)
  exec 9>"$dir/.template.lock"
  flock -w "$TIMEOUT" 9 || die "template: another run holds $dir/.template.lock for more than ${TIMEOUT}s"
  if [ "$(cat "$tpl/.bloodraven-template-ok" 2>/dev/null)" = "$TEMPLATE_STAMP" ]; then exec 9>&-; return 0; fi
  rm -rf "$tpl" "$dir/.template.tmp"
  local tmp="$dir/.template.tmp"
  mkdir -p "$tmp"
  build_template "$dir" "$tmp"
  printf '%s' "$TEMPLATE_STAMP" >"$tmp/.bloodraven-template-ok"
  mv "$tmp" "$tpl"
  exec 9>&-
  log "template: ready in $tpl"
}

cmd_start() { # DIR NAME PORT SERVER_ID
  [ $# -eq 4 ] || usage
  local dir name=$2 port=$3 sid=$4
  dir=$(need_dir "$1")
  check_name "$name"; check_num PORT "$port"; check_num SERVER_ID "$sid"
  ensure_server
  local d sock pid
  d=$(site_dir "$dir" "$name"); sock=$(sock_of "$dir" "$name")
  check_sock "$sock"
  pid=$(site_pid "$dir" "$name")
  if [ -n "$pid" ]; then
    log "start: site $name already running (pid $pid)"
    wait_ready "$sock" "$pid" "$d/error.log" "start $name"
    return 0
  fi
  if [ ! -d "$d/data" ]; then
    cmd_template "$dir"
    rm -rf "$d.tmp"; mkdir -p "$d.tmp"
    cp -a "$dir/template/data" "$d.tmp/data"
    mkdir -p "$dir/sites"; rm -rf "$d"; mv "$d.tmp" "$d"
  fi
  local ro=0 addr=${BLOODRAVEN_SITE_ADDR:-127.0.0.1}
  if [ "${BLOODRAVEN_SITE_READ_ONLY:-0}" = 1 ]; then ro=1; fi
  # BLOODRAVEN_SITE_NETNS: run in that network namespace (made by the
  # caller), listening on BLOODRAVEN_SITE_ADDR; its unix socket stays
  # reachable from everywhere (a "local client" a partition does not cut).
  in_ns=()
  if [ -n "${BLOODRAVEN_SITE_NETNS:-}" ]; then in_ns=(ip netns exec "$BLOODRAVEN_SITE_NETNS"); fi
  rm -f "$d/mysqld.pid" "$sock"
  launch_site "$d" "$sock" "$port" "$sid" "$addr" "$ro"
  pid=$!
  wait_ready "$sock" "$pid" "$d/error.log" "start $name"
  log "start: site $name up: $addr:$port, socket $sock, server-id $sid, pid $pid"
}

cmd_replicate() { # DIR REPLICA_NAME PRIMARY_PORT
  [ $# -eq 3 ] || usage
  local dir name=$2 pport=$3
  dir=$(need_dir "$1"); check_name "$name"; check_num PRIMARY_PORT "$pport"
  [ -n "$(site_pid "$dir" "$name")" ] || die "replicate: site $name is not running (hack/$me start first)"
  local phost=${BLOODRAVEN_PRIMARY_HOST:-127.0.0.1}
  client "$dir" "$name" -e "$(replicate_sql "$phost" "$pport")" \
    || { tail_log "$(site_dir "$dir" "$name")/error.log"; die "replicate: $REPLICATE_WHAT on $name failed"; }
  local st='' io='' sq='' deadline=$((SECONDS + TIMEOUT))
  while ((SECONDS < deadline)); do
    st=$(client "$dir" "$name" -e "$REPLICA_STATUS\\G")
    io=$(sed -n "s/^ *${REPLICA_FIELD}_IO_Running: //p" <<<"$st")
    sq=$(sed -n "s/^ *${REPLICA_FIELD}_SQL_Running: //p" <<<"$st")
    if [ "$io" = Yes ] && [ "$sq" = Yes ]; then
      log "replicate: $name replicates from $phost:$pport (IO and SQL threads running)"
      return 0
    fi
    sleep 0.2
  done
  echo "$st" | grep -E "$REPLICA_GREP" >&2 || true
  tail_log "$(site_dir "$dir" "$name")/error.log"
  die "replicate: $name: replication threads not both running after ${TIMEOUT}s (IO=$io SQL=$sq)"
}

cmd_stop() { # DIR NAME
  [ $# -eq 2 ] || usage
  local dir name=$2 pid d
  dir=$(need_dir "$1"); check_name "$name"
  d=$(site_dir "$dir" "$name")
  pid=$(site_pid "$dir" "$name")
  if [ -z "$pid" ]; then log "stop: site $name is not running"; return 0; fi
  # The admin tool failing (no socket, no client), TERM at once: both
  # servers shut down cleanly on it too.
  if ! timeout "$TIMEOUT" "${ADMIN[@]}" --socket="$(sock_of "$dir" "$name")" --connect-timeout=5 shutdown >/dev/null 2>&1 \
     || ! wait_exit "$pid"; then
    log "stop: $name did not shut down cleanly; TERM/KILL pid $pid"
    kill_pid "$pid" "stop $name"
  fi
  log "stop: site $name stopped"
}

cmd_down() { # DIR
  [ $# -eq 1 ] || usage
  local dir s rc=0
  dir=$(need_dir "$1")
  for s in "$dir"/sites/*/; do
    [ -d "$s" ] || continue
    s=$(basename "$s"); [[ $s == *.tmp ]] && continue
    cmd_stop "$dir" "$s" || rc=1
  done
  # Strays (a lost pid file, an interrupted template build): by command line.
  local pid left
  for pid in $(procs_of "$dir"); do
    log "down: stray $SERVER_NAME $pid of $dir: stopping it"; kill_pid "$pid" "stray $pid" || rc=1
  done
  left=$(procs_of "$dir")
  [ -z "$left" ] || die "down: $SERVER_NAME processes of $dir remain: $left"
  return $rc
}

cmd_status() { # DIR
  [ $# -eq 1 ] || usage
  local dir s pid
  dir=$(need_dir "$1")
  for s in "$dir"/sites/*/; do
    [ -d "$s" ] || continue
    s=$(basename "$s"); [[ $s == *.tmp ]] && continue
    pid=$(site_pid "$dir" "$s")
    if [ -n "$pid" ]; then
      echo "$s running pid=$pid $(client "$dir" "$s" -N -B -e "$STATUS_SQL" 2>/dev/null || echo '(not answering)')"
    else
      echo "$s stopped"
    fi
  done
}

cmd_sql() { # DIR NAME SQL [client options...]
  [ $# -ge 3 ] || usage
  local dir name=$2 sql=$3
  dir=$(need_dir "$1"); check_name "$name"; shift 3
  [ -S "$(sock_of "$dir" "$name")" ] || die "sql: no socket for site $name (is it running?)"
  client "$dir" "$name" --batch --skip-column-names "$@" -e "$sql"
}

cmd_dump() { # DIR NAME FILE DATABASE...: a logical backup of DATABASEs, as a user takes one
  [ $# -ge 4 ] || usage
  local dir name=$2 file=$3
  dir=$(need_dir "$1"); check_name "$name"; shift 3
  [ -S "$(sock_of "$dir" "$name")" ] || die "dump: no socket for site $name (is it running?)"
  "${DUMP[@]}" --socket="$(sock_of "$dir" "$name")" "${DUMP_ARGS[@]}" --databases "$@" >"$file"
}

cmd_load() { # DIR NAME FILE: replays a dump on site NAME (as root, through read_only)
  [ $# -eq 3 ] || usage
  local dir name=$2 file=$3
  dir=$(need_dir "$1"); check_name "$name"
  [ -S "$(sock_of "$dir" "$name")" ] || die "load: no socket for site $name (is it running?)"
  client "$dir" "$name" --batch <"$file"
}

cmd_pair() { # DIR PRIMARY_PORT REPLICA_PORT
  [ $# -eq 3 ] || usage
  local dir=$1
  cmd_template "$dir"
  cmd_start "$dir" iad "$2" 1
  cmd_start "$dir" pdx "$3" 2
  cmd_sql "$dir" iad "SET GLOBAL read_only=0"
  cmd_replicate "$dir" pdx "$2"
}

sites_main() {
  [ $# -ge 1 ] || usage
  local cmd=$1; shift
  case $cmd in -h|--help|help) usage ;; esac
  ensure_client
  case $cmd in
    template) [ $# -eq 1 ] || usage; cmd_template "$@" ;;
    start) cmd_start "$@" ;;
    replicate) cmd_replicate "$@" ;;
    stop) cmd_stop "$@" ;;
    down) cmd_down "$@" ;;
    status) cmd_status "$@" ;;
    sql) cmd_sql "$@" ;;
    dump) cmd_dump "$@" ;;
    load) cmd_load "$@" ;;
    pair) cmd_pair "$@" ;;
    -h|--help|help) usage ;;
    *) echo "$me: unknown command '$cmd'" >&2; usage ;;
  esac
}
