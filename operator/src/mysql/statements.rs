//! The statements failover sends, for each flavour (pure, unit-tested; the
//! MariaDB ones run for real in the e2e suite, the MySQL 8 ones are checked
//! here against the MySQL 8.0 reference syntax).
//!
//! | step | MariaDB 10.11 | MySQL 8.0.23+ |
//! |---|---|---|
//! | fence | `SET GLOBAL read_only = 1` (accounts with `READ_ONLY ADMIN` still write: sessions are killed too) | `SET GLOBAL super_read_only = 1` |
//! | unfence | `SET GLOBAL read_only = 0` | `SET GLOBAL super_read_only = 0`, `SET GLOBAL read_only = 0` |
//! | catch-up | `SELECT MASTER_GTID_WAIT(pos, s)` (0 done, -1 timed out) | `SELECT WAIT_FOR_EXECUTED_GTID_SET(set, s)` (0 done, 1 timed out) |
//! | stop replicating | `STOP SLAVE`, `RESET SLAVE ALL` | `STOP REPLICA`, `RESET REPLICA ALL` |
//! | repoint | `SET GLOBAL gtid_slave_pos = @@gtid_current_pos`, `CHANGE MASTER TO … MASTER_USE_GTID = slave_pos` | `CHANGE REPLICATION SOURCE TO … SOURCE_AUTO_POSITION = 1` |
//! | start | `START SLAVE` | `START REPLICA` |
//! | semi-sync | `rpl_semi_sync_master_*` / `rpl_semi_sync_slave_enabled` (built in since 10.3) | `rpl_semi_sync_source_*` / `rpl_semi_sync_replica_enabled` (plugins) |
//!
//! `CHANGE MASTER` / `CHANGE REPLICATION SOURCE` cannot be prepared on
//! either server, so their string values are quoted here ([`quote`]); a
//! statement holding a password is a [`Secret`], whose `Debug` and
//! `Display` never print it.

use std::fmt;

use super::Flavor;

/// Sets the session's `sql_mode` to the one [`quote`] writes for (no
/// `NO_BACKSLASH_ESCAPES`, whatever the server's global mode), before a
/// statement that holds a quoted value.
pub(crate) const QUOTING_MODE: &str = "SET SESSION sql_mode = ''";

/// Quotes a string as a SQL literal for either flavour with the default
/// `sql_mode` (backslash escapes on; [`QUOTING_MODE`]): `'`, `\`, NUL, newline, carriage
/// return and Ctrl-Z are escaped.
pub(crate) fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for c in value.chars() {
        match c {
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            '\0' => out.push_str("\\0"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\u{1a}' => out.push_str("\\Z"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// A statement that holds a secret: sent as is, never printed.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Secret(String);

impl Secret {
    /// The statement text, to send.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<statement with credentials>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<statement with credentials>")
    }
}

/// Where a replica replicates from, and the account it uses.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Source {
    /// Host of the new primary.
    pub host: String,
    /// Port of the new primary.
    pub port: u16,
    /// Replication account.
    pub user: String,
    /// Its password (never printed).
    pub password: String,
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Source")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Statements that make a site refuse writes from ordinary accounts.
pub(crate) fn fence(flavor: Flavor) -> &'static [&'static str] {
    match flavor {
        Flavor::MariaDb => &["SET GLOBAL read_only = 1"],
        // super_read_only also sets read_only, and stops SUPER accounts too.
        Flavor::MySql => &["SET GLOBAL super_read_only = 1"],
    }
}

/// Statements that make a fenced site writable again.
pub(crate) fn unfence(flavor: Flavor) -> &'static [&'static str] {
    match flavor {
        Flavor::MariaDb => &["SET GLOBAL read_only = 0"],
        Flavor::MySql => &["SET GLOBAL super_read_only = 0", "SET GLOBAL read_only = 0"],
    }
}

/// Fails (1227) unless the account may see every session (`PROCESS`):
/// without it `information_schema.PROCESSLIST` answers with the account's
/// own sessions only, and no error.
pub(crate) const SESSIONS_VISIBLE: &str = "SELECT COUNT(*) FROM information_schema.INNODB_TRX";

/// The client sessions fencing ends (id, user, seconds in the current
/// state): everything but this connection, replication threads, and the
/// server's own daemons.
pub(crate) const CLIENT_SESSIONS: &str = "SELECT ID, USER, TIME FROM information_schema.PROCESSLIST \
     WHERE ID <> CONNECTION_ID() \
     AND COMMAND NOT IN ('Binlog Dump', 'Binlog Dump GTID', 'Daemon', 'Slave_IO', 'Slave_SQL', 'Slave_worker', 'Connect') \
     AND USER NOT IN ('system user', 'event_scheduler', 'system user:')";

/// What [`CLIENT_SESSIONS`] leaves out by `COMMAND`: replication threads
/// and the server's own (compared without regard to case, as SQL does).
pub(crate) const NOT_CLIENT_COMMANDS: &[&str] =
    &["Binlog Dump", "Binlog Dump GTID", "Daemon", "Slave_IO", "Slave_SQL", "Slave_worker", "Connect"];

/// What [`CLIENT_SESSIONS`] and [`SEMI_SYNC_WAITERS`] leave out by `USER`.
pub(crate) const NOT_CLIENT_USERS: &[&str] = &["system user", "event_scheduler", "system user:"];

/// The `STATE` of a commit waiting for a semi-sync acknowledgement, as
/// [`SEMI_SYNC_WAITERS`] matches it (a prefix).
pub(crate) const SEMI_SYNC_WAIT_STATE: &str = "Waiting for semi-sync ACK";

/// MariaDB lists its threads with this and the operator filters them as
/// [`CLIENT_SESSIONS`] and [`SEMI_SYNC_WAITERS`] do in SQL: a query of
/// `information_schema.PROCESSLIST` materialises every column, `INFO`
/// (LONGTEXT) too, in an Aria temporary table, and MariaDB 10.11.19 was
/// seen crashing (signal 11 in `ha_maria::drop_table`, from
/// `free_tmp_table`) as it dropped that table during a fence; `SHOW FULL
/// PROCESSLIST` sends the threads as it walks them.
pub(crate) const MARIADB_PROCESSLIST: &str = "SHOW FULL PROCESSLIST";

/// The client sessions whose commit waits for a semi-sync acknowledgement
/// (MariaDB: `… from slave`; MySQL: `… from replica`), as
/// [`CLIENT_SESSIONS`]: on a site no replica acknowledges any more (a
/// returning old primary) they wait until the semi-sync timeout, and
/// `SET GLOBAL read_only` waits for them.
pub(crate) const SEMI_SYNC_WAITERS: &str = "SELECT ID, USER, TIME FROM information_schema.PROCESSLIST \
     WHERE ID <> CONNECTION_ID() AND STATE LIKE 'Waiting for semi-sync ACK%' \
     AND USER NOT IN ('system user', 'event_scheduler', 'system user:')";

/// Switches a site's primary side of semi-sync on or off. Off, commits
/// waiting for an acknowledgement finish without one (the fence's release
/// of the commits of sessions it ended, which MySQL keeps waiting through
/// `KILL`).
pub(crate) fn semi_sync_primary(flavor: Flavor, on: bool) -> String {
    let v = if on { "ON" } else { "OFF" };
    match flavor {
        Flavor::MariaDb => format!("SET GLOBAL rpl_semi_sync_master_enabled = {v}"),
        Flavor::MySql => format!("SET GLOBAL rpl_semi_sync_source_enabled = {v}"),
    }
}

/// How many of the sessions `ids` (a list of ids) have an open InnoDB
/// transaction that changed rows: one that could still commit.
pub(crate) fn writers_among(ids: &str) -> String {
    format!(
        "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_rows_modified > 0 AND trx_mysql_thread_id IN ({ids})"
    )
}

/// Ends the statement a session runs (the session stays).
pub(crate) fn kill_query(id: u64) -> String {
    format!("KILL QUERY {id}")
}

/// Ends one session (its transaction rolls back).
pub(crate) fn kill(id: u64) -> String {
    format!("KILL CONNECTION {id}")
}

/// The query listing accounts that can write through `read_only` on a
/// server of `flavor` and `version` (`@@version`), one `GRANTEE` per row as
/// `'user'@'host'`; `None` on MySQL, where `super_read_only` stops every
/// account. On MariaDB that is `READ_ONLY ADMIN`, and before 10.11 also
/// `SUPER`, which implied it there (MariaDB 10.11 changelog: `SUPER` no
/// longer includes `READ_ONLY ADMIN`). `information_schema.USER_PRIVILEGES`
/// shows other accounts only to an account with `SELECT` on `mysql.*` (or
/// globally): see [`GRANTS_VISIBLE`]. It lists login accounts only, never a
/// role nor `PUBLIC` (MariaDB 10.11): those come from [`ROLES_MAPPING`] and
/// [`show_grants_for_role`], see `super::grants`.
pub(crate) fn read_only_bypass_accounts(flavor: Flavor, version: &str) -> Option<&'static str> {
    match flavor {
        Flavor::MariaDb if super_implies_read_only_admin(version) => Some(
            "SELECT DISTINCT GRANTEE FROM information_schema.USER_PRIVILEGES \
             WHERE PRIVILEGE_TYPE IN ('READ_ONLY ADMIN', 'SUPER')",
        ),
        Flavor::MariaDb => Some(
            "SELECT DISTINCT GRANTEE FROM information_schema.USER_PRIVILEGES \
             WHERE PRIVILEGE_TYPE = 'READ_ONLY ADMIN'",
        ),
        Flavor::MySql => None,
    }
}

/// The privileges that let an account write through `read_only` on MariaDB
/// `version`, as `SHOW GRANTS` names them ([`read_only_bypass_accounts`]
/// has the same list; `ALL PRIVILEGES` counts too).
pub(crate) fn read_only_bypass_privileges(version: &str) -> &'static [&'static str] {
    if super_implies_read_only_admin(version) { &["READ_ONLY ADMIN", "SUPER"] } else { &["READ_ONLY ADMIN"] }
}

/// Whether MariaDB `version` has the `PUBLIC` role (10.11 and later), whose
/// grants every account holds. An unreadable version counts as having it:
/// `SHOW GRANTS FOR PUBLIC` then fails, and the check with it, rather than
/// missing it.
pub(crate) fn has_public_role(version: &str) -> bool {
    !super_implies_read_only_admin(version) || mariadb_minor(version).is_none()
}

/// The account the operator is connected as, `user@host`.
pub(crate) const CURRENT_USER: &str = "SELECT CURRENT_USER()";

/// Every role grant, `(User, Host, Role)`: the grantee is a role (or
/// `PUBLIC`) when `Host` is empty. Needs `SELECT` on `mysql`.
pub(crate) const ROLES_MAPPING: &str = "SELECT User, Host, Role FROM mysql.roles_mapping";

/// The grants of role `role`, with those of the roles granted to it (one
/// line each). `PUBLIC` is readable by every account; other roles need
/// `SELECT` on `mysql`.
pub(crate) fn show_grants_for_role(role: &str) -> String {
    format!("SHOW GRANTS FOR `{}`", role.replace('`', "``"))
}

/// The oldest server of each flavor whose statements these are: MySQL
/// 8.0.23 (`CHANGE REPLICATION SOURCE TO`, `SHOW REPLICA STATUS`,
/// `SOURCE_AUTO_POSITION`; the `rpl_semi_sync_source` plugins came in
/// 8.0.26, and an older server shows them missing), MariaDB 10.5
/// (`READ_ONLY ADMIN`, `SLAVE MONITOR`).
pub(crate) const OLDEST_MYSQL: (u32, u32, u32) = (8, 0, 23);
/// See [`OLDEST_MYSQL`].
pub(crate) const OLDEST_MARIADB: (u32, u32, u32) = (10, 5, 0);

/// Why a server of `flavor` and `version` (`@@version`) is not one the
/// operator drives, or `None` when it is. A version it cannot read counts
/// as supported (a vendor build with its own numbering): its statements
/// then fail with the server's own error.
pub(crate) fn unsupported(flavor: Flavor, version: &str) -> Option<String> {
    let mut parts = version.split(|c: char| !c.is_ascii_digit()).map(str::parse::<u32>);
    let (Some(Ok(major)), Some(Ok(minor))) = (parts.next(), parts.next()) else { return None };
    let patch = parts.next().and_then(Result::ok).unwrap_or(0);
    let (name, oldest, forms) = match flavor {
        Flavor::MySql => ("MySQL", OLDEST_MYSQL, "CHANGE REPLICATION SOURCE TO, SHOW REPLICA STATUS"),
        Flavor::MariaDb => ("MariaDB", OLDEST_MARIADB, "the READ_ONLY ADMIN and SLAVE MONITOR privileges"),
    };
    ((major, minor, patch) < oldest).then(|| {
        format!(
            "{name} {major}.{minor}.{patch} is not supported: the operator needs {name} {}.{}.{} or later ({forms}); \
             it neither fences, promotes nor fails over this site",
            oldest.0, oldest.1, oldest.2
        )
    })
}

/// Whether MariaDB `version` is older than 10.11, where `SUPER` still
/// implied `READ_ONLY ADMIN`. An unreadable version counts as older: that
/// lists more accounts, never fewer.
fn super_implies_read_only_admin(version: &str) -> bool {
    mariadb_minor(version).is_none_or(|v| v < (10, 11))
}

/// `(major, minor)` of a MariaDB `@@version`.
fn mariadb_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split(|c: char| !c.is_ascii_digit()).map(str::parse::<u32>);
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => Some((major, minor)),
        _ => None,
    }
}

/// One row, one integer: greater than zero when the current account holds
/// `SELECT` on every table or on the `mysql` schema, without which
/// `information_schema.USER_PRIVILEGES` shows it its own privileges only (a
/// table grant such as `SELECT ON mysql.global_priv` is not enough: checked
/// on MariaDB 10.11).
pub(crate) const GRANTS_VISIBLE: &str = "SELECT \
     (SELECT COUNT(*) FROM information_schema.USER_PRIVILEGES u \
        WHERE u.PRIVILEGE_TYPE = 'SELECT' AND u.GRANTEE = me.g) + \
     (SELECT COUNT(*) FROM information_schema.SCHEMA_PRIVILEGES s \
        WHERE s.PRIVILEGE_TYPE = 'SELECT' AND s.TABLE_SCHEMA = 'mysql' AND s.GRANTEE = me.g) \
     FROM (SELECT CONCAT(QUOTE(SUBSTRING_INDEX(CURRENT_USER(), '@', 1)), '@', \
        QUOTE(SUBSTRING_INDEX(CURRENT_USER(), '@', -1))) AS g) AS me";

/// The catch-up wait: a query with two parameters (the position or set to
/// reach, and a timeout in seconds) returning one integer, and the value
/// that means "reached".
pub(crate) fn wait_for_position(flavor: Flavor) -> (&'static str, i64) {
    match flavor {
        Flavor::MariaDb => ("SELECT MASTER_GTID_WAIT(?, ?)", 0),
        Flavor::MySql => ("SELECT WAIT_FOR_EXECUTED_GTID_SET(?, ?)", 0),
    }
}

/// Statements that stop replication and forget the source (promotion).
pub(crate) fn stop_replication(flavor: Flavor) -> &'static [&'static str] {
    match flavor {
        Flavor::MariaDb => &["STOP SLAVE", "RESET SLAVE ALL"],
        Flavor::MySql => &["STOP REPLICA", "RESET REPLICA ALL"],
    }
}

/// Statements that make a site a read-only replica of `source`: the
/// quoting mode its quoted values are written for ([`QUOTING_MODE`]: a
/// server whose global sql_mode has NO_BACKSLASH_ESCAPES would read a
/// password with a quote in it as the statement's end, and echo the rest
/// in its syntax error), the fence, then [`replicate_from`].
pub(crate) fn repoint(flavor: Flavor, source: &Source) -> Vec<Secret> {
    let mut all = vec![Secret(QUOTING_MODE.to_owned())];
    all.extend(fence(flavor).iter().map(|s| Secret((*s).to_owned())));
    all.extend(replicate_from(flavor, source));
    all
}

/// Statements that make a site replicate from `source` with GTID auto-positioning.
pub(crate) fn replicate_from(flavor: Flavor, source: &Source) -> Vec<Secret> {
    let (host, user, password) = (quote(&source.host), quote(&source.user), quote(&source.password));
    let port = source.port;
    match flavor {
        Flavor::MariaDb => vec![
            Secret("STOP SLAVE".into()),
            // A former primary has its history in its binlog, not in
            // gtid_slave_pos: start from everything it has (it was checked
            // for errant transactions before it is repointed).
            Secret("SET GLOBAL gtid_slave_pos = @@gtid_current_pos".into()),
            Secret(format!(
                "CHANGE MASTER TO MASTER_HOST = {host}, MASTER_PORT = {port}, MASTER_USER = {user}, \
                 MASTER_PASSWORD = {password}, MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1, \
                 MASTER_HEARTBEAT_PERIOD = 1"
            )),
            Secret("START SLAVE".into()),
        ],
        // HEARTBEAT_PERIOD = 1 (both flavors): the source sends a heartbeat
        // each idle second, so the standby's receiver shows within two
        // seconds whether the primary is alive to it, and an operator that
        // only lost its own path to the primary never fails it over
        // (`bloodraven_core::failover::emergency::Heard`; the default is half
        // of `slave_net_timeout`, 30 s).
        //
        // SOURCE_RETRY_COUNT: MySQL's receiver gives up after 10 tries by
        // default (10 s here) and stays stopped, so a source down for longer
        // (restarted, partitioned) left the replica stopped for good; as
        // MariaDB's default, it keeps trying for a day.
        Flavor::MySql => vec![
            Secret("STOP REPLICA".into()),
            Secret(format!(
                "CHANGE REPLICATION SOURCE TO SOURCE_HOST = {host}, SOURCE_PORT = {port}, SOURCE_USER = {user}, \
                 SOURCE_PASSWORD = {password}, SOURCE_AUTO_POSITION = 1, SOURCE_CONNECT_RETRY = 1, \
                 SOURCE_RETRY_COUNT = 86400, GET_SOURCE_PUBLIC_KEY = 1, SOURCE_HEARTBEAT_PERIOD = 1"
            )),
            Secret("START REPLICA".into()),
        ],
    }
}

/// The semi-sync timeout the operator sets on a primary by default
/// (`semiSyncServerTimeoutSeconds: 0`), in milliseconds: the largest both
/// servers take (about 49 days). The server then never
/// falls back to asynchronous replication on its own, which it would do
/// on a paused or cut-off primary as soon as it ran again, acknowledging
/// commits its standby, promoted meanwhile, never receives. For the same
/// reason commits wait even with no replica connected
/// (`rpl_semi_sync_master_wait_no_slave`, MySQL
/// `…_source_wait_no_replica`, ON; OFF would fall back as soon as the last
/// replica left). The fallback is the operator's, on the decided primary
/// only (`controller::failover_group::semisync`).
pub(crate) const SEMI_SYNC_TIMEOUT_MS: u64 = 4_294_967_295;

/// The semi-sync timeout for a group's `semiSyncServerTimeoutSeconds`, in
/// milliseconds: 0 is [`SEMI_SYNC_TIMEOUT_MS`].
pub(crate) fn semi_sync_timeout_ms(seconds: u32) -> u64 {
    if seconds == 0 { SEMI_SYNC_TIMEOUT_MS } else { u64::from(seconds.min(86_400)) * 1000 }
}

/// Statements that turn semi-synchronous replication on or off on a site,
/// for its role (`primary`: wait for a replica's acknowledgement after the
/// commit is synced to the binlog, AFTER_SYNC, for at most `timeout_ms`
/// ([`semi_sync_timeout_ms`]), for one replica's acknowledgement; replica:
/// acknowledge).
pub(crate) fn semi_sync(flavor: Flavor, on: bool, primary: bool, timeout_ms: u64) -> Vec<String> {
    let v = if on { "ON" } else { "OFF" };
    match (flavor, primary) {
        (Flavor::MariaDb, true) => vec![
            "SET GLOBAL rpl_semi_sync_master_wait_point = AFTER_SYNC".into(),
            format!("SET GLOBAL rpl_semi_sync_master_timeout = {timeout_ms}"),
            "SET GLOBAL rpl_semi_sync_master_wait_no_slave = ON".into(),
            format!("SET GLOBAL rpl_semi_sync_master_enabled = {v}"),
            "SET GLOBAL rpl_semi_sync_slave_enabled = OFF".into(),
        ],
        // The IO thread reads the switch when it connects: restarted, so a
        // running replica starts (or stops) acknowledging at once.
        (Flavor::MariaDb, false) => vec![
            "SET GLOBAL rpl_semi_sync_master_enabled = OFF".into(),
            format!("SET GLOBAL rpl_semi_sync_slave_enabled = {v}"),
            "STOP SLAVE IO_THREAD".into(),
            "START SLAVE IO_THREAD".into(),
        ],
        // A promoted replica keeps its replica switch unless told: each role
        // turns the other's off, as on MariaDB.
        (Flavor::MySql, true) => vec![
            "SET GLOBAL rpl_semi_sync_source_wait_point = AFTER_SYNC".into(),
            format!("SET GLOBAL rpl_semi_sync_source_timeout = {timeout_ms}"),
            "SET GLOBAL rpl_semi_sync_source_wait_no_replica = ON".into(),
            "SET GLOBAL rpl_semi_sync_source_wait_for_replica_count = 1".into(),
            format!("SET GLOBAL rpl_semi_sync_source_enabled = {v}"),
            "SET GLOBAL rpl_semi_sync_replica_enabled = OFF".into(),
        ],
        // Likewise on MySQL: without the restart the source counts no
        // semi-sync replica, waits out its timeout on the next commit, and
        // falls back to asynchronous (seen on 9.7.4).
        (Flavor::MySql, false) => vec![
            "SET GLOBAL rpl_semi_sync_source_enabled = OFF".into(),
            format!("SET GLOBAL rpl_semi_sync_replica_enabled = {v}"),
            "STOP REPLICA IO_THREAD".into(),
            "START REPLICA IO_THREAD".into(),
        ],
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn servers_older_than_the_statements_are_unsupported() {
        assert_eq!(unsupported(Flavor::MySql, "9.7.4"), None);
        assert_eq!(unsupported(Flavor::MySql, "8.4.3-commercial"), None);
        assert_eq!(unsupported(Flavor::MySql, "8.0.23"), None);
        assert_eq!(unsupported(Flavor::MariaDb, "10.11.14-MariaDB-0+deb12u2-log"), None);
        assert_eq!(unsupported(Flavor::MariaDb, "10.5.0-MariaDB"), None);
        assert_eq!(unsupported(Flavor::MariaDb, "odd build"), None, "unreadable: tried");
        let old = unsupported(Flavor::MySql, "8.0.22-log").unwrap();
        assert!(old.starts_with("MySQL 8.0.22 is not supported") && old.contains("8.0.23 or later"), "{old}");
        assert!(unsupported(Flavor::MySql, "5.7.44").is_some());
        let old = unsupported(Flavor::MariaDb, "10.4.34-MariaDB").unwrap();
        assert!(old.contains("MariaDB 10.5.0 or later"), "{old}");
    }
    use bloodraven_core::observation::{replicate_hint, start_hint};

    use super::*;

    #[test]
    fn quoting_escapes_what_could_end_the_literal() {
        assert_eq!(quote("plain"), "'plain'");
        assert_eq!(quote("it's"), r"'it\'s'");
        assert_eq!(quote(r"back\slash"), r"'back\\slash'");
        assert_eq!(quote("a\nb\0c\u{1a}"), r"'a\nb\0c\Z'");
        assert_eq!(quote(r"x\'; DROP TABLE t; --"), r"'x\\\'; DROP TABLE t; --'");
    }

    fn source() -> Source {
        Source { host: "10.0.0.2".into(), port: 3307, user: "repl".into(), password: "p'w\\d".into() }
    }

    #[test]
    fn repointing_uses_gtid_auto_position_on_both_flavours() {
        let maria = replicate_from(Flavor::MariaDb, &source());
        assert_eq!(maria[0].expose(), "STOP SLAVE");
        assert_eq!(maria[1].expose(), "SET GLOBAL gtid_slave_pos = @@gtid_current_pos");
        assert!(maria[2].expose().starts_with("CHANGE MASTER TO MASTER_HOST = '10.0.0.2', MASTER_PORT = 3307"));
        assert!(maria[2].expose().contains("MASTER_USE_GTID = slave_pos"));
        assert!(maria[2].expose().contains(r"MASTER_PASSWORD = 'p\'w\\d'"));
        assert_eq!(maria[3].expose(), "START SLAVE");
        let mysql = replicate_from(Flavor::MySql, &source());
        assert!(
            mysql[1].expose().starts_with("CHANGE REPLICATION SOURCE TO SOURCE_HOST = '10.0.0.2', SOURCE_PORT = 3307")
        );
        assert!(mysql[1].expose().contains("SOURCE_AUTO_POSITION = 1"));
        assert!(mysql[1].expose().contains("SOURCE_RETRY_COUNT = 86400"), "a receiver that never gives up");
        // A heartbeat each idle second on both: the standby's receiver is
        // the second observer an emergency failover asks.
        assert!(maria[2].expose().contains("MASTER_HEARTBEAT_PERIOD = 1"));
        assert!(mysql[1].expose().contains("SOURCE_HEARTBEAT_PERIOD = 1"));
        assert_eq!((mysql[0].expose(), mysql[2].expose()), ("STOP REPLICA", "START REPLICA"));
    }

    #[test]
    fn a_repoint_sets_the_quoting_mode_before_any_quoted_value() {
        for flavor in [Flavor::MariaDb, Flavor::MySql] {
            let all = repoint(flavor, &source());
            assert_eq!(all[0].expose(), QUOTING_MODE);
            let first_quoted = all.iter().position(|s| s.expose().contains("p\\'w")).unwrap();
            assert!(first_quoted > 0, "{flavor:?}");
            assert_eq!(all[1].expose(), fence(flavor)[0]);
        }
    }

    #[test]
    fn secrets_never_print() {
        let stmts = replicate_from(Flavor::MariaDb, &source());
        for s in &stmts {
            assert!(!format!("{s} {s:?}").contains("p'w"), "{s:?}");
        }
        assert!(!format!("{:?}", source()).contains("p'w"));
    }

    #[test]
    fn each_flavour_has_its_own_words() {
        assert_eq!(fence(Flavor::MariaDb), ["SET GLOBAL read_only = 1"]);
        assert_eq!(fence(Flavor::MySql), ["SET GLOBAL super_read_only = 1"]);
        assert_eq!(unfence(Flavor::MySql).len(), 2, "super_read_only off does not turn read_only off");
        assert_eq!(stop_replication(Flavor::MySql), ["STOP REPLICA", "RESET REPLICA ALL"]);
        assert_eq!(stop_replication(Flavor::MariaDb), ["STOP SLAVE", "RESET SLAVE ALL"]);
        assert_eq!(wait_for_position(Flavor::MariaDb).0, "SELECT MASTER_GTID_WAIT(?, ?)");
        assert_eq!(wait_for_position(Flavor::MySql).0, "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, ?)");
        assert!(read_only_bypass_accounts(Flavor::MySql, "8.4.3").is_none());
        let old = read_only_bypass_accounts(Flavor::MariaDb, "10.6.21-MariaDB-log").unwrap();
        assert!(old.contains("'SUPER'"), "{old}");
        for version in ["10.11.19-MariaDB-0+deb12u1-log", "11.4.5-MariaDB"] {
            let new = read_only_bypass_accounts(Flavor::MariaDb, version).unwrap();
            assert!(new.contains("'READ_ONLY ADMIN'") && !new.contains("SUPER"), "{version}: {new}");
        }
        assert!(read_only_bypass_accounts(Flavor::MariaDb, "garbage").unwrap().contains("'SUPER'"));
        assert_eq!(read_only_bypass_privileges("10.6.21-MariaDB-log"), ["READ_ONLY ADMIN", "SUPER"]);
        assert_eq!(read_only_bypass_privileges("10.11.19-MariaDB-0+deb12u1-log"), ["READ_ONLY ADMIN"]);
        assert!(
            !has_public_role("10.6.21-MariaDB-log")
                && has_public_role("10.11.19-MariaDB")
                && has_public_role("11.4.5-MariaDB")
        );
        assert!(has_public_role("garbage"));
        assert_eq!(show_grants_for_role("r`x"), "SHOW GRANTS FOR `r``x`");
        assert_eq!(show_grants_for_role("PUBLIC"), "SHOW GRANTS FOR `PUBLIC`");
        assert!(semi_sync(Flavor::MariaDb, true, true, SEMI_SYNC_TIMEOUT_MS).iter().any(|s| s.contains("AFTER_SYNC")));
        assert!(
            semi_sync(Flavor::MySql, true, true, SEMI_SYNC_TIMEOUT_MS)
                .iter()
                .any(|s| s.contains("rpl_semi_sync_source_enabled = ON"))
        );
        for (flavor, primary, other) in [
            (Flavor::MySql, true, "rpl_semi_sync_replica_enabled = OFF"),
            (Flavor::MySql, false, "rpl_semi_sync_source_enabled = OFF"),
            (Flavor::MariaDb, true, "rpl_semi_sync_slave_enabled = OFF"),
            (Flavor::MariaDb, false, "rpl_semi_sync_master_enabled = OFF"),
        ] {
            assert!(
                semi_sync(flavor, true, primary, SEMI_SYNC_TIMEOUT_MS).iter().any(|s| s.contains(other)),
                "{flavor:?} {primary}: {other}"
            );
        }
        // A primary's waits are the operator's, set before it waits: the
        // server never falls back on its own, even with no replica left.
        for (flavor, var) in [(Flavor::MariaDb, "master"), (Flavor::MySql, "source")] {
            let all = semi_sync(flavor, true, true, SEMI_SYNC_TIMEOUT_MS);
            let at = |needle: &str| all.iter().position(|s| s.contains(needle));
            let on = at(&format!("rpl_semi_sync_{var}_enabled = ON")).unwrap();
            assert!(at(&format!("rpl_semi_sync_{var}_timeout = 4294967295")).unwrap() < on, "{all:?}");
            assert!(
                at("_wait_no_").unwrap() < on
                    && all.iter().any(|s| s.ends_with("_wait_no_slave = ON") || s.ends_with("_wait_no_replica = ON")),
                "{all:?}"
            );
        }
        assert_eq!(kill(42), "KILL CONNECTION 42");
        assert!(
            replicate_hint(Flavor::MySql).contains("SOURCE_AUTO_POSITION")
                && !replicate_hint(Flavor::MySql).contains("MASTER")
        );
        assert!(replicate_hint(Flavor::MariaDb).contains("MASTER_USE_GTID"));
        assert_eq!((start_hint(Flavor::MySql), start_hint(Flavor::MariaDb)), ("START REPLICA", "START SLAVE"));
    }
}
