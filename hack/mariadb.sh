#!/usr/bin/env bash
# MariaDB "sites" as local processes on loopback, for the playground and the
# e2e tests. Every site is a mariadbd with its own datadir under DIR/sites/NAME,
# listening on 127.0.0.1:PORT and on the unix socket DIR/sites/NAME/mysqld.sock.
#
#   hack/mariadb.sh template  DIR                          # initialise DIR/template once
#   hack/mariadb.sh start     DIR NAME PORT SERVER_ID      # copy template, start site NAME
#   hack/mariadb.sh replicate DIR REPLICA_NAME PRIMARY_PORT
#   hack/mariadb.sh stop      DIR NAME                     # clean shutdown (bounded)
#   hack/mariadb.sh down      DIR                          # stop every site under DIR/sites
#   hack/mariadb.sh status    DIR                          # one line per site
#   hack/mariadb.sh sql       DIR NAME 'SQL' [client options...]
#   hack/mariadb.sh pair      DIR PRIMARY_PORT REPLICA_PORT  # iad (id 1) -> pdx (id 2)
#
# Accounts (created in the template, so in every site, with sql_log_bin=0 and
# followed by RESET MASTER: a fresh site has no GTID at all):
#   root@localhost   no password, reachable only over the unix socket (the
#                    TCP root accounts that mariadb-install-db creates are
#                    dropped; --skip-name-resolve means TCP never matches
#                    'localhost'). Works whatever the OS user is.
#   bloodraven@127.0.0.1 / @localhost  the operator's account,
#                    password $BLOODRAVEN_SITE_PASSWORD (default bloodraven-operator-pw)
#   repl@127.0.0.1 / @localhost        REPLICATION SLAVE,
#                    password $BLOODRAVEN_REPL_PASSWORD (default bloodraven-repl-pw)
# The passwords are baked into the template: change them => delete DIR/template.
#
# read_only is a runtime setting: a restarted site comes up writable, unless
# BLOODRAVEN_SITE_READ_ONLY=1 is set for `start` (then it passes --read-only).
# Timeouts: BLOODRAVEN_MARIADB_TIMEOUT seconds (default 60) for every wait.
# max_connections: BLOODRAVEN_MARIADB_MAX_CONNECTIONS (default 100; `make figures`
# raises it: 1,000 groups probe the one pair, 400 connections a second).
set -euo pipefail
# shellcheck source=hack/lib/detach.sh
. "$(cd "$(dirname "$0")" && pwd)/lib/detach.sh"

SITE_PASSWORD=${BLOODRAVEN_SITE_PASSWORD:-bloodraven-operator-pw}
REPL_PASSWORD=${BLOODRAVEN_REPL_PASSWORD:-bloodraven-repl-pw}
TIMEOUT=${BLOODRAVEN_MARIADB_TIMEOUT:-60}
# Small and quick to start; the same redo-log size in the template and the
# sites, so that a copied datadir never has its redo log resized at start.
INNODB_LOG_FILE_SIZE=8M
# The operator's privileges. All exist in MariaDB 10.11 (SHOW PRIVILEGES).
# Since 10.11 SUPER no longer implies READ_ONLY ADMIN, and `SET GLOBAL
# read_only` itself needs READ_ONLY ADMIN; the rest are named too so that
# nothing depends on what SUPER happens to imply. RELOAD is for promotion's
# RESET SLAVE ALL (a promoted site must forget its source, or a restart would
# start replicating from the old primary again); the operator never runs
# RESET MASTER or FLUSH TABLES WITH READ LOCK, which RELOAD would also allow.
# Not granted: REPLICATION MASTER ADMIN (SHOW SLAVE HOSTS), any data privilege.
OPERATOR_PRIVILEGES="PROCESS, BINLOG MONITOR, SLAVE MONITOR, REPLICATION SLAVE ADMIN, READ_ONLY ADMIN, CONNECTION ADMIN, SUPER, RELOAD"
# What a template was built with: a template of other accounts is rebuilt.
TEMPLATE_STAMP="accounts-v3 $OPERATOR_PRIVILEGES"

PATH=$PATH:/usr/sbin:/usr/local/sbin
me=mariadb.sh
log() { echo "$me: $*" >&2; }
die() { echo "$me: error: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2; }

# mariadbd refuses to run as root unless told to.
user_args=()
if [ "$(id -u)" = 0 ]; then user_args=(--user=root); fi

ensure_mariadb() {
  if command -v mariadbd >/dev/null && command -v mariadb-install-db >/dev/null \
     && command -v mariadb >/dev/null && command -v mariadb-admin >/dev/null; then
    return 0
  fi
  log "mariadbd not found: installing mariadb-server and mariadb-client with apt-get (hack/deps.sh installs them up front)"
  # shellcheck source=lib/apt.sh
  . "$(dirname "$0")/lib/apt.sh"
  apt_install mariadb-server mariadb-client >&2 || die "apt-get install mariadb-server mariadb-client failed"
  command -v mariadbd >/dev/null || die "mariadbd still not found after apt-get install"
}

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
  mariadb --no-defaults --protocol=socket --socket="$(sock_of "$dir" "$name")" \
    --user=root --connect-timeout=5 "$@"
}

# pid of site NAME's mariadbd if it is alive and really ours (pid file checked
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

# Every mariadbd of DIR (sites and template build), by its command line.
procs_of() { # DIR
  local p cmd
  for p in /proc/[0-9]*; do
    cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
    case $cmd in
      *mariadbd*" --datadir=$1/sites/"* | *mariadbd*" --datadir=$1/.template.tmp/"*) echo "${p#/proc/}" ;;
    esac
  done
}

tail_log() { # file
  if [ -f "$1" ]; then echo "----- last lines of $1 -----" >&2; tail -n 30 "$1" >&2; echo "-----" >&2; fi
}

# Waits until the server on SOCKET answers, while PID lives.
wait_ready() { # socket pid errlog what
  local sock=$1 pid=$2 errlog=$3 what=$4 deadline=$((SECONDS + TIMEOUT))
  while ((SECONDS < deadline)); do
    if mariadb-admin --no-defaults --protocol=socket --socket="$sock" --user=root \
         --connect-timeout=2 ping >/dev/null 2>&1; then
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      tail_log "$errlog"; die "$what: mariadbd (pid $pid) exited during start-up"
    fi
    sleep 0.2
  done
  tail_log "$errlog"; die "$what: mariadbd did not answer within ${TIMEOUT}s"
}

# TERM, bounded wait, then KILL; verifies the pid is gone.
kill_pid() { # pid what
  local pid=$1 what=$2 i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < TIMEOUT * 5; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  log "$what: pid $pid still alive after TERM and ${TIMEOUT}s: KILL"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  die "$what: pid $pid survives KILL"
}

cmd_template() { # DIR
  local dir; dir=$(need_dir "${1:-}")
  ensure_mariadb
  local tpl="$dir/template"
  if [ "$(cat "$tpl/.bloodraven-template-ok" 2>/dev/null)" = "$TEMPLATE_STAMP" ]; then return 0; fi
  # Two concurrent first runs on one DIR: the second waits for the first.
  # (fd 9 must not leak into any mariadbd, or the lock would outlive us.)
  exec 9>"$dir/.template.lock"
  flock -w "$TIMEOUT" 9 || die "template: another run holds $dir/.template.lock for more than ${TIMEOUT}s"
  if [ "$(cat "$tpl/.bloodraven-template-ok" 2>/dev/null)" = "$TEMPLATE_STAMP" ]; then exec 9>&-; return 0; fi
  rm -rf "$tpl" "$dir/.template.tmp"
  local tmp="$dir/.template.tmp" sock="$dir/.template.sock"
  check_sock "$sock"
  mkdir -p "$tmp/data"
  log "template: mariadb-install-db into $tpl"
  if ! mariadb-install-db --no-defaults "${user_args[@]}" --datadir="$tmp/data" \
        --auth-root-authentication-method=normal --skip-test-db --skip-name-resolve \
        --innodb-log-file-size=$INNODB_LOG_FILE_SIZE >"$tmp/install-db.log" 2>&1; then
    tail_log "$tmp/install-db.log"; die "template: mariadb-install-db failed"
  fi
  # Socket only (no TCP), binary log on so that RESET MASTER has something to reset.
  detach mariadbd --no-defaults "${user_args[@]}" --datadir="$tmp/data" --skip-networking \
    --socket="$sock" --pid-file="$tmp/mysqld.pid" --log-error="$tmp/error.log" \
    --server-id=1 --log-bin=mysql-bin --skip-name-resolve --performance-schema=OFF \
    --innodb-buffer-pool-size=16M --innodb-log-file-size=$INNODB_LOG_FILE_SIZE \
    --innodb-use-native-aio=0 >>"$tmp/error.log" 2>&1
  local pid=$!
  wait_ready "$sock" "$pid" "$tmp/error.log" "template"
  local sp rp
  sp=$(sql_str "$SITE_PASSWORD"); rp=$(sql_str "$REPL_PASSWORD")
  # root only over the unix socket: drop the TCP root accounts (127.0.0.1, ::1,
  # the host name) and any anonymous account.
  local drops
  drops=$(mariadb --no-defaults --protocol=socket --socket="$sock" --user=root -N -B -e \
    "SELECT CONCAT('DROP USER ', QUOTE(User), '@', QUOTE(Host), ';') FROM mysql.user
       WHERE User='' OR (User='root' AND Host<>'localhost')") \
    || { kill_pid "$pid" template; die "template: listing the accounts failed"; }
  if ! mariadb --no-defaults --protocol=socket --socket="$sock" --user=root <<SQL
SET sql_log_bin=0;
$drops
CREATE USER 'bloodraven'@'127.0.0.1' IDENTIFIED BY '$sp';
CREATE USER 'bloodraven'@'localhost' IDENTIFIED BY '$sp';
GRANT $OPERATOR_PRIVILEGES ON *.* TO 'bloodraven'@'127.0.0.1';
GRANT $OPERATOR_PRIVILEGES ON *.* TO 'bloodraven'@'localhost';
CREATE USER 'repl'@'127.0.0.1' IDENTIFIED BY '$rp';
CREATE USER 'repl'@'localhost' IDENTIFIED BY '$rp';
GRANT REPLICATION SLAVE ON *.* TO 'repl'@'127.0.0.1';
GRANT REPLICATION SLAVE ON *.* TO 'repl'@'localhost';
-- Sites in their own network namespaces (the partition tests) are reached
-- over veth pairs in 10.0.0.0/8.
CREATE USER 'bloodraven'@'10.%' IDENTIFIED BY '$sp';
GRANT $OPERATOR_PRIVILEGES ON *.* TO 'bloodraven'@'10.%';
CREATE USER 'repl'@'10.%' IDENTIFIED BY '$rp';
GRANT REPLICATION SLAVE ON *.* TO 'repl'@'10.%';
SET sql_log_bin=1;
RESET MASTER;
SQL
  then
    kill_pid "$pid" template; die "template: creating the accounts failed"
  fi
  mariadb-admin --no-defaults --protocol=socket --socket="$sock" --user=root shutdown \
    || kill_pid "$pid" template
  local i
  for ((i = 0; i < TIMEOUT * 5; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -0 "$pid" 2>/dev/null && { kill_pid "$pid" template; die "template: clean shutdown timed out"; }
  # Each site starts its own binary log (and its relay log) from nothing.
  rm -f "$tmp"/data/mysql-bin.* "$tmp/mysqld.pid" "$sock"
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
  ensure_mariadb
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
  local ro_args=() in_ns=() addr=${BLOODRAVEN_SITE_ADDR:-127.0.0.1}
  if [ "${BLOODRAVEN_SITE_READ_ONLY:-0}" = 1 ]; then ro_args=(--read-only); fi
  # BLOODRAVEN_SITE_NETNS: run in that network namespace (made by the
  # caller), listening on BLOODRAVEN_SITE_ADDR; its unix socket stays
  # reachable from everywhere (a "local client" a partition does not cut).
  if [ -n "${BLOODRAVEN_SITE_NETNS:-}" ]; then in_ns=(ip netns exec "$BLOODRAVEN_SITE_NETNS"); fi
  rm -f "$d/mysqld.pid" "$sock"
  detach "${in_ns[@]}" mariadbd --no-defaults "${user_args[@]}" "${ro_args[@]}" \
    --datadir="$d/data" --port="$port" --bind-address="$addr" \
    --socket="$sock" --pid-file="$d/mysqld.pid" --log-error="$d/error.log" \
    --server-id="$sid" --report-host="$addr" --report-port="$port" \
    --log-bin=mysql-bin --relay-log=relay-bin --log-slave-updates=1 \
    --gtid-strict-mode=1 --binlog-format=ROW --skip-name-resolve \
    --innodb-buffer-pool-size=16M --innodb-log-file-size=$INNODB_LOG_FILE_SIZE \
    --innodb-log-buffer-size=2M --innodb-flush-log-at-trx-commit=2 \
    --innodb-use-native-aio=0 --innodb-temp-data-file-path=ibtmp1:1M:autoextend \
    --innodb-autoextend-increment=1 \
    --performance-schema=OFF --max-connections="${BLOODRAVEN_MARIADB_MAX_CONNECTIONS:-100}" \
    --key-buffer-size=1M --aria-pagecache-buffer-size=8M --table-open-cache=200 \
    >>"$d/error.log" 2>&1
  pid=$!
  wait_ready "$sock" "$pid" "$d/error.log" "start $name"
  log "start: site $name up: $addr:$port, socket $sock, server-id $sid, pid $pid"
}

cmd_replicate() { # DIR REPLICA_NAME PRIMARY_PORT
  [ $# -eq 3 ] || usage
  local dir name=$2 pport=$3
  dir=$(need_dir "$1"); check_name "$name"; check_num PRIMARY_PORT "$pport"
  [ -n "$(site_pid "$dir" "$name")" ] || die "replicate: site $name is not running (hack/mariadb.sh start first)"
  local rp phost=${BLOODRAVEN_PRIMARY_HOST:-127.0.0.1}; rp=$(sql_str "$REPL_PASSWORD")
  client "$dir" "$name" -e "
    SET GLOBAL read_only=1;
    STOP SLAVE;
    CHANGE MASTER TO MASTER_HOST='$phost', MASTER_PORT=$pport, MASTER_USER='repl',
      MASTER_PASSWORD='$rp', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1;
    START SLAVE;" || die "replicate: CHANGE MASTER / START SLAVE on $name failed"
  local st='' io='' sq='' deadline=$((SECONDS + TIMEOUT))
  while ((SECONDS < deadline)); do
    st=$(client "$dir" "$name" -e 'SHOW SLAVE STATUS\G')
    io=$(sed -n 's/^ *Slave_IO_Running: //p' <<<"$st")
    sq=$(sed -n 's/^ *Slave_SQL_Running: //p' <<<"$st")
    if [ "$io" = Yes ] && [ "$sq" = Yes ]; then
      log "replicate: $name replicates from $phost:$pport (IO and SQL threads running)"
      return 0
    fi
    sleep 0.2
  done
  echo "$st" | grep -E 'Running|Error|Master_Port|Gtid' >&2 || true
  die "replicate: $name: replication threads not both running after ${TIMEOUT}s (IO=$io SQL=$sq)"
}

cmd_stop() { # DIR NAME
  [ $# -eq 2 ] || usage
  local dir name=$2 pid d i
  dir=$(need_dir "$1"); check_name "$name"
  d=$(site_dir "$dir" "$name")
  pid=$(site_pid "$dir" "$name")
  if [ -z "$pid" ]; then log "stop: site $name is not running"; return 0; fi
  timeout "$TIMEOUT" mariadb-admin --no-defaults --protocol=socket --socket="$(sock_of "$dir" "$name")" \
    --user=root --connect-timeout=5 shutdown >/dev/null 2>&1 || true
  for ((i = 0; i < TIMEOUT * 5; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then
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
    log "down: stray mariadbd $pid of $dir: stopping it"; kill_pid "$pid" "stray $pid" || rc=1
  done
  left=$(procs_of "$dir")
  [ -z "$left" ] || die "down: mariadbd processes of $dir remain: $left"
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
      echo "$s running pid=$pid $(client "$dir" "$s" -N -B -e 'SELECT CONCAT("port=",@@port," server_id=",@@server_id," read_only=",@@read_only," gtid_binlog_pos=",@@gtid_binlog_pos," gtid_slave_pos=",@@gtid_slave_pos)' 2>/dev/null || echo '(not answering)')"
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

cmd_pair() { # DIR PRIMARY_PORT REPLICA_PORT
  [ $# -eq 3 ] || usage
  local dir=$1
  cmd_template "$dir"
  cmd_start "$dir" iad "$2" 1
  cmd_start "$dir" pdx "$3" 2
  cmd_sql "$dir" iad "SET GLOBAL read_only=0"
  cmd_replicate "$dir" pdx "$2"
}

[ $# -ge 1 ] || usage
cmd=$1; shift
case $cmd in
  template) [ $# -eq 1 ] || usage; cmd_template "$@" ;;
  start) cmd_start "$@" ;;
  replicate) cmd_replicate "$@" ;;
  stop) cmd_stop "$@" ;;
  down) cmd_down "$@" ;;
  status) cmd_status "$@" ;;
  sql) cmd_sql "$@" ;;
  pair) cmd_pair "$@" ;;
  -h|--help|help) usage ;;
  *) echo "$me: unknown command '$cmd'" >&2; usage ;;
esac
