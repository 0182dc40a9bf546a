#!/usr/bin/env bash
# MySQL "sites" as local processes, the same as hack/mariadb.sh's (same
# commands, arguments, environment and output lines: a caller swaps the
# script's name and nothing else). Every site is a mysqld (9.7, Debian sid's
# mysql-server-core, from the root hack/build-mysql.sh caches) with its own
# datadir under DIR/sites/NAME, listening on 127.0.0.1:PORT and on the unix
# socket DIR/sites/NAME/mysqld.sock.
#
#   hack/mysql.sh template  DIR                          # initialise DIR/template once
#   hack/mysql.sh start     DIR NAME PORT SERVER_ID      # copy template, start site NAME
#   hack/mysql.sh replicate DIR REPLICA_NAME PRIMARY_PORT
#   hack/mysql.sh stop      DIR NAME                     # clean shutdown (bounded)
#   hack/mysql.sh down      DIR                          # stop every site under DIR/sites
#   hack/mysql.sh status    DIR                          # one line per site
#   hack/mysql.sh sql       DIR NAME 'SQL' [client options...]
#   hack/mysql.sh dump      DIR NAME FILE DATABASE...    # mysqldump --set-gtid-purged=OFF over the socket
#   hack/mysql.sh load      DIR NAME FILE                # replay a dump as root
#   hack/mysql.sh pair      DIR PRIMARY_PORT REPLICA_PORT  # iad (id 1) -> pdx (id 2)
#
# Sites: GTIDs on (gtid_mode=ON, enforce_gtid_consistency), ROW binlog,
# log_replica_updates, performance_schema on (small), X protocol off, the
# semi-sync plugins loaded (off until the operator turns them on).
#
# Accounts (created in the template by --initialize-insecure's init file,
# which writes no binary log nor GTID; RESET BINARY LOGS AND GTIDS makes sure
# a fresh site has an empty gtid_executed):
#   root@localhost   no password, reachable only over the unix socket
#                    (--initialize makes no other root; --skip-name-resolve
#                    means TCP never matches 'localhost'). Works whatever
#                    the OS user is.
#   bloodraven@127.0.0.1 / @localhost / @'10.%'  the operator's account,
#                    password $BLOODRAVEN_SITE_PASSWORD (default bloodraven-operator-pw)
#   repl@127.0.0.1 / @localhost / @'10.%'        REPLICATION SLAVE,
#                    password $BLOODRAVEN_REPL_PASSWORD (default bloodraven-repl-pw)
# All caching_sha2_password (9.x has no mysql_native_password): replicas
# connect without TLS and ask for the source's RSA key (GET_SOURCE_PUBLIC_KEY=1,
# as the operator's CHANGE REPLICATION SOURCE does).
# The passwords are baked into the template: change them => delete DIR/template.
#
# read_only is a runtime setting: a restarted site comes up writable, unless
# BLOODRAVEN_SITE_READ_ONLY=1 is set for `start` (then it passes
# --super-read-only, which sets read_only too, as a fenced MySQL site has).
# `replicate` sets super_read_only=1 on the replica.
# BLOODRAVEN_SITE_ARGS: more server options for `start`, split at spaces.
# Timeouts: BLOODRAVEN_MYSQL_TIMEOUT, else BLOODRAVEN_MARIADB_TIMEOUT, seconds
# (default 60) for every wait. max_connections: BLOODRAVEN_MYSQL_MAX_CONNECTIONS,
# else BLOODRAVEN_MARIADB_MAX_CONNECTIONS (default 100).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/lib/detach.sh
. "$here/lib/detach.sh"

me=mysql.sh
SERVER_NAME=mysqld
TIMEOUT=${BLOODRAVEN_MYSQL_TIMEOUT:-${BLOODRAVEN_MARIADB_TIMEOUT:-60}}
MAX_CONNECTIONS=${BLOODRAVEN_MYSQL_MAX_CONNECTIONS:-${BLOODRAVEN_MARIADB_MAX_CONNECTIONS:-100}}
# The operator's privileges, each found by running the operator's statement
# as an account without it on MySQL 9.7.4 (hack/README.md lists the errors).
# SUPER is deprecated and not granted: 9.7 names a narrower privilege for
# each of these.
#   SYSTEM_VARIABLES_ADMIN  SET GLOBAL super_read_only / read_only /
#                           rpl_semi_sync_* (fence, unfence, semi-sync)
#   CONNECTION_ADMIN        KILL CONNECTION of another account's session
#                           (fence). Not SYSTEM_USER: the sessions of
#                           SYSTEM_USER accounts (root) it cannot end (1095),
#                           and the operator leaves them, since
#                           super_read_only already stops their writes
#   REPLICATION_SLAVE_ADMIN STOP/START REPLICA, CHANGE REPLICATION SOURCE TO
#   RELOAD                  RESET REPLICA ALL (promotion); it would also
#                           allow FLUSH and RESET BINARY LOGS AND GTIDS, which
#                           the operator never sends
#   REPLICATION CLIENT      SHOW REPLICA STATUS (probe)
#   PROCESS                 other accounts' sessions in
#                           information_schema.PROCESSLIST / SHOW PROCESSLIST
#                           (fence), INNODB_TRX and data_lock_waits (migrations)
OPERATOR_PRIVILEGES="SYSTEM_VARIABLES_ADMIN, CONNECTION_ADMIN, REPLICATION_SLAVE_ADMIN, RELOAD, REPLICATION CLIENT, PROCESS"
# and what it reads, granted ON these (no password hash among them):
#   performance_schema.*    replication_connection_status (received GTIDs),
#                           metadata_locks, threads, data_lock_waits (migrations)
# Nothing of mysql.*: super_read_only stops every account, so the operator
# does not look for accounts that write through read_only on MySQL.
OPERATOR_READS=("SELECT ON performance_schema.*")
# Not granted: any data privilege; INSERT on mysql.plugin (INSTALL PLUGIN,
# which a super_read_only replica refuses anyway: the semi-sync plugins are
# loaded at start).
# InnoDB sizes fixed at --initialize must be the same at every start.
INNODB_INIT_ARGS=(--innodb-redo-log-capacity=16M --innodb-doublewrite=OFF)

# shellcheck source=hack/lib/mysql-root.sh
. "$here/lib/mysql-root.sh"

MYSQL_ROOT=''
# The cached root, when there is one (no network, no build): every command
# but start and template makes do without (nothing can run then).
ensure_client() {
  MYSQL_ROOT=$(mysql_root_cached) || MYSQL_ROOT=''
  if [ -n "$MYSQL_ROOT" ]; then
    # --commands: the 9.x client ignores \G and the other client commands
    # in -e and in piped input unless told (`sql DIR NAME 'SHOW REPLICA
    # STATUS\G'` must work as with MariaDB's client); `system` stays off.
    CLIENT=("$MYSQL_ROOT/bloodraven/bin/mysql" --no-defaults --commands --protocol=socket --user=root)
    ADMIN=("$MYSQL_ROOT/bloodraven/bin/mysqladmin" --no-defaults --protocol=socket --user=root)
    # --set-gtid-purged=OFF: the restored site starts its own GTID history
    # (restore-in-place promotes it as it is), rather than claiming the
    # source's.
    DUMP=("$MYSQL_ROOT/bloodraven/bin/mysqldump" --no-defaults --protocol=socket --user=root)
    DUMP_ARGS=(--single-transaction --routines --triggers --set-gtid-purged=OFF)
  else
    CLIENT=(false); ADMIN=(false); DUMP=(false); DUMP_ARGS=()
  fi
  # The template's stamp names the server's version: a new root, a new template.
  TEMPLATE_STAMP="accounts-v1 $OPERATOR_PRIVILEGES; ${OPERATOR_READS[*]}; ${INNODB_INIT_ARGS[*]}; mysql-server-core $(cat "$MYSQL_ROOT/bloodraven/.root-ok" 2>/dev/null || true)"
}

ensure_server() {
  [ -n "$MYSQL_ROOT" ] && return 0
  log "no MySQL root cached: building it (hack/deps.sh builds it up front)"
  mysql_root_build >/dev/null
  ensure_client
  [ -n "$MYSQL_ROOT" ] || die "no MySQL root after building it"
}

# What every mysqld here is given: the root's own folders, since it is not
# where the binary was built for.
mysqld_args() {
  MYSQLD=("$MYSQL_ROOT/bloodraven/bin/mysqld" --no-defaults "${user_args[@]}"
    --basedir="$MYSQL_ROOT/usr" --lc-messages-dir="$MYSQL_ROOT/usr/share/mysql"
    --character-sets-dir="$MYSQL_ROOT/usr/share/mysql/charsets"
    --plugin-dir="$MYSQL_ROOT/usr/lib/mysql/plugin"
    # No LOAD DATA INFILE / SELECT INTO OUTFILE (the default folder,
    # /var/lib/mysql-files, does not exist: mysqld would not start).
    --secure-file-priv=NULL)
}

build_template() { # DIR TMP
  local dir=$1 tmp=$2 sp rp
  mkdir -p "$tmp"
  sp=$(sql_str "$SITE_PASSWORD"); rp=$(sql_str "$REPL_PASSWORD")
  local host grants='' read
  # Sites in their own network namespaces (the partition tests) are reached
  # over veth pairs in 10.0.0.0/8.
  for host in 127.0.0.1 localhost 10.%; do
    grants+="CREATE USER 'bloodraven'@'$host' IDENTIFIED BY '$sp';
GRANT $OPERATOR_PRIVILEGES ON *.* TO 'bloodraven'@'$host';
"
    for read in "${OPERATOR_READS[@]}"; do grants+="GRANT $read TO 'bloodraven'@'$host';
"; done
    grants+="CREATE USER 'repl'@'$host' IDENTIFIED BY '$rp';
GRANT REPLICATION SLAVE ON *.* TO 'repl'@'$host';
"
  done
  # The init file holds the passwords: private, and removed at once.
  (umask 077; printf '%s' "SET sql_log_bin=0;
$grants
SET sql_log_bin=1;
RESET BINARY LOGS AND GTIDS;
" >"$tmp/accounts.sql")
  log "template: mysqld --initialize-insecure into $dir/template"
  mysqld_args
  if ! "${MYSQLD[@]}" --datadir="$tmp/data" --initialize-insecure --init-file="$tmp/accounts.sql" \
        --log-error="$tmp/initialize.log" "${INNODB_INIT_ARGS[@]}" --innodb-buffer-pool-size=16M \
        >>"$tmp/initialize.log" 2>&1; then
    rm -f "$tmp/accounts.sql"
    tail_log "$tmp/initialize.log"; die "template: mysqld --initialize-insecure (or its accounts) failed"
  fi
  rm -f "$tmp/accounts.sql"
  # Per site, not per template: auto.cnf holds server_uuid (the source of a
  # site's GTIDs: two sites with one UUID refuse to replicate), the TLS and
  # RSA key pairs are made at a site's first start (auto_generate_certs).
  rm -f "$tmp/data/auto.cnf" "$tmp"/data/*.pem "$tmp"/data/mysql-bin.* "$tmp"/data/binlog.*
}

launch_site() { # D SOCK PORT SID ADDR RO
  local d=$1 sock=$2 port=$3 sid=$4 addr=$5 ro_args=() extra_args=()
  read -r -a extra_args <<<"${BLOODRAVEN_SITE_ARGS:-}"
  # super_read_only also sets read_only, and stops accounts with
  # CONNECTION_ADMIN (root) too: what a fenced MySQL site runs with.
  if [ "$6" = 1 ]; then ro_args=(--super-read-only=ON); fi
  # mysqld keeps SOCKET.lock holding its pid and refuses to start while that
  # pid is alive: after a kill -9 it is left behind, and its pid may belong
  # to another process by now (or to the killed mysqld, still a zombie).
  # The site is not running (cmd_start checked its pid file): it is stale.
  rm -f "$sock.lock"
  mysqld_args
  # ROW is 9.7's only default binlog_format, and naming it logs a
  # deprecation warning at every start: not passed. sync_binlog=0 and
  # innodb_flush_log_at_trx_commit=2: no fsync per commit (a killed mysqld
  # loses nothing the OS has; the machine does not crash in a test).
  # No doublewrite buffer (16 MB a site; torn pages need an OS crash too).
  # event_scheduler OFF (as MariaDB's default): on, a primary's shutdown
  # waits 8 s longer while a replica is connected (9.7.4: "Shutting down
  # replica threads", then nothing until the scheduler is killed).
  detach "${in_ns[@]}" "${MYSQLD[@]}" "${ro_args[@]}" \
    --datadir="$d/data" --port="$port" --bind-address="$addr" \
    --socket="$sock" --pid-file="$d/mysqld.pid" --log-error="$d/error.log" \
    --server-id="$sid" --report-host="$addr" --report-port="$port" \
    --log-bin=mysql-bin --relay-log=relay-bin --log-replica-updates=ON \
    --gtid-mode=ON --enforce-gtid-consistency=ON --skip-name-resolve --mysqlx=OFF \
    --event-scheduler=OFF \
    --plugin-load-add=semisync_source.so --plugin-load-add=semisync_replica.so \
    "${INNODB_INIT_ARGS[@]}" --innodb-buffer-pool-size=16M --innodb-log-buffer-size=1M \
    --innodb-flush-log-at-trx-commit=2 --sync-binlog=0 \
    --innodb-use-native-aio=0 \
    --innodb-autoextend-increment=1 \
    --max-connections="$MAX_CONNECTIONS" \
    --key-buffer-size=1M --table-open-cache=200 --table-definition-cache=400 \
    "${PFS_ARGS[@]}" "${extra_args[@]}" >>"$d/error.log" 2>&1
}

# performance_schema on (the migration runner reads metadata_locks and
# data_lock_waits; the operator replication_connection_status), its tables
# small: the defaults cost about 250 MB a site, these about 40 MB. Threads:
# every connection plus mysqld's own (about 40) and replication's; a thread
# past the bound is not instrumented (Performance_schema_thread_instances_lost).
PFS_ARGS=(--performance-schema=ON
  --performance-schema-max-thread-instances=$((MAX_CONNECTIONS + 100))
  --performance-schema-accounts-size=16 --performance-schema-hosts-size=16 --performance-schema-users-size=16
  --performance-schema-digests-size=200 --performance-schema-error-size=100
  --performance-schema-max-sql-text-length=512 --performance-schema-max-digest-length=512
  --performance-schema-events-statements-history-long-size=100
  --performance-schema-events-stages-history-long-size=100
  --performance-schema-events-waits-history-long-size=100
  --performance-schema-events-transactions-history-long-size=100)

STATUS_SQL="SELECT CONCAT('port=',@@port,' server_id=',@@server_id,' read_only=',@@read_only,' super_read_only=',@@super_read_only,' gtid_executed=',REPLACE(@@gtid_executed,'\\n',''))"

REPLICATE_WHAT="CHANGE REPLICATION SOURCE / START REPLICA"
REPLICA_STATUS="SHOW REPLICA STATUS"
REPLICA_FIELD=Replica
REPLICA_GREP='Running|Error|Source_Host|Source_Port|Auto_Position|Gtid_Set'
replicate_sql() { # HOST PORT
  local rp; rp=$(sql_str "$REPL_PASSWORD")
  echo "
    SET GLOBAL super_read_only=1;
    STOP REPLICA;
    CHANGE REPLICATION SOURCE TO SOURCE_HOST='$1', SOURCE_PORT=$2, SOURCE_USER='repl',
      SOURCE_PASSWORD='$rp', SOURCE_AUTO_POSITION=1, SOURCE_CONNECT_RETRY=1,
      SOURCE_RETRY_COUNT=86400, GET_SOURCE_PUBLIC_KEY=1, SOURCE_HEARTBEAT_PERIOD=1;
    START REPLICA;"
}

# shellcheck source=hack/lib/sites.sh
. "$here/lib/sites.sh"
sites_main "$@"
