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
#   hack/mariadb.sh dump      DIR NAME FILE DATABASE...    # mariadb-dump (no GTID state) over the socket
#   hack/mariadb.sh load      DIR NAME FILE                # replay a dump as root
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
# BLOODRAVEN_SITE_ARGS: more server options for `start`, split at spaces
# (the tests pass --version=… to play an older server).
# Timeouts: BLOODRAVEN_MARIADB_TIMEOUT seconds (default 60) for every wait.
# max_connections: BLOODRAVEN_MARIADB_MAX_CONNECTIONS (default 100; `make figures`
# raises it: 1,000 groups probe the one pair, 400 connections a second).
set -euo pipefail
# shellcheck source=hack/lib/detach.sh
. "$(cd "$(dirname "$0")" && pwd)/lib/detach.sh"

me=mariadb.sh
SERVER_NAME=mariadbd
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

# shellcheck source=hack/lib/sites.sh
. "$(cd "$(dirname "$0")" && pwd)/lib/sites.sh"

ensure_client() {
  CLIENT=(mariadb --no-defaults --protocol=socket --user=root)
  ADMIN=(mariadb-admin --no-defaults --protocol=socket --user=root)
  # A consistent logical backup without GTID state: a restore from it
  # starts the site's own history, as restore-in-place expects.
  DUMP=(mariadb-dump --no-defaults --protocol=socket --user=root)
  DUMP_ARGS=(--single-transaction --routines --triggers)
}

ensure_server() {
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

build_template() { # DIR TMP
  local dir=$1 tmp=$2 sock="$1/.template.sock"
  check_sock "$sock"
  mkdir -p "$tmp/data"
  log "template: mariadb-install-db into $dir/template"
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
  drops=$("${CLIENT[@]}" --socket="$sock" -N -B -e \
    "SELECT CONCAT('DROP USER ', QUOTE(User), '@', QUOTE(Host), ';') FROM mysql.user
       WHERE User='' OR (User='root' AND Host<>'localhost')") \
    || { kill_pid "$pid" template; die "template: listing the accounts failed"; }
  if ! "${CLIENT[@]}" --socket="$sock" <<SQL
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
  "${ADMIN[@]}" --socket="$sock" shutdown || kill_pid "$pid" template
  wait_exit "$pid" || { kill_pid "$pid" template; die "template: clean shutdown timed out"; }
  # Each site starts its own binary log (and its relay log) from nothing.
  rm -f "$tmp"/data/mysql-bin.* "$tmp/mysqld.pid" "$sock"
}

launch_site() { # D SOCK PORT SID ADDR RO
  local d=$1 sock=$2 port=$3 sid=$4 addr=$5 ro_args=() extra_args=()
  if [ "$6" = 1 ]; then ro_args=(--read-only); fi
  read -r -a extra_args <<<"${BLOODRAVEN_SITE_ARGS:-}"
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
    "${extra_args[@]}" >>"$d/error.log" 2>&1
}

STATUS_SQL='SELECT CONCAT("port=",@@port," server_id=",@@server_id," read_only=",@@read_only," gtid_binlog_pos=",@@gtid_binlog_pos," gtid_slave_pos=",@@gtid_slave_pos)'

REPLICATE_WHAT="CHANGE MASTER / START SLAVE"
REPLICA_STATUS="SHOW SLAVE STATUS"
REPLICA_FIELD=Slave
REPLICA_GREP='Running|Error|Master_Port|Gtid'
replicate_sql() { # HOST PORT
  local rp; rp=$(sql_str "$REPL_PASSWORD")
  echo "
    SET GLOBAL read_only=1;
    STOP SLAVE;
    CHANGE MASTER TO MASTER_HOST='$1', MASTER_PORT=$2, MASTER_USER='repl',
      MASTER_PASSWORD='$rp', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1,
      MASTER_HEARTBEAT_PERIOD=1;
    START SLAVE;"
}

sites_main "$@"
