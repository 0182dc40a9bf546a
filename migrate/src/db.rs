//! The runner's one connection: opened once, with its own session
//! settings, never reopened behind the caller's back, and the history
//! table's reads and writes.
//!
//! Session settings (a short session lock timeout, set on the migration's
//! connection only):
//! `lock_wait_timeout` and `innodb_lock_wait_timeout` = the lock timeout;
//! `wait_timeout`, `net_read_timeout` and `net_write_timeout` = a bound
//! comfortably above the longest time the runner leaves the connection
//! idle (a backoff, a blocker wait, a sidecar report), so the server never
//! drops it between statements. The server's global settings are untouched.
//!
//! No silent reconnect: `mysql_async::Conn` never reconnects by itself
//! (only its pool does, which the runner does not use), and the runner
//! never opens a second connection during `apply` to run revisions; a lost
//! connection ends the run. The one other connection it ever opens is on a
//! fence ([`Target::kill_session`]), to end its own session server-side.

use std::fmt::Write as _;
use std::time::Duration;

use mysql_async::prelude::Queryable as _;
use mysql_async::{Conn, Opts, OptsBuilder};

use crate::config::DbArgs;
use crate::history::{self, Row, State};

/// Why the database could not be used.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// No URL given.
    #[error(
        "no database given: pass --database-url mysql://user@host:port/schema (or DATABASE_URL, or --database-url-file)"
    )]
    NoUrl,
    /// The URL did not parse (the URL itself is never repeated).
    #[error("failed to read the database URL: {0} (expected mysql://user[:password]@host:port/schema)")]
    Url(String),
    /// The URL names no schema.
    #[error("the database URL names no schema: add /schema after host:port")]
    NoSchema,
    /// A file could not be read.
    #[error("failed to read {what} from {path}: {source}")]
    File {
        /// Which file.
        what: &'static str,
        /// Its path.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// Connecting failed or timed out.
    #[error("failed to connect to {target}: {message}")]
    Connect {
        /// user@host:port/schema.
        target: String,
        /// Why.
        message: String,
    },
    /// A query failed.
    #[error("{}", crate::classify::describe(.0))]
    Query(#[from] mysql_async::Error),
    /// The history row the run was about to insert already exists.
    #[error(
        "revision V{0} already has a history row: something else recorded it during this run (a second runner that takes no run lock, or a person); nothing of this attempt is kept — run `status`"
    )]
    AlreadyRecorded(u64),
    /// A table of the history's name that is not this runner's.
    #[error(
        "table {schema}.bloodraven_schema_history is not this runner's history table (it lacks {missing}): \
         created by another tool or by an incompatible version; nothing was changed — rename it, or migrate another schema"
    )]
    ForeignHistory {
        /// The schema.
        schema: String,
        /// The columns it lacks.
        missing: String,
    },
    /// The `started` row of the revision in flight was changed under the run.
    #[error(
        "the history row of revision V{0} is no longer `started`: it was changed during the run (by hand, or by `resolve`); the revision's statements did run — check the schema, fix the row, then run again"
    )]
    HistoryChanged(u64),
}

/// Session settings a revision may change (`SET foreign_key_checks = 0`)
/// and that are set back before each revision, so that a revision runs
/// the same whether an earlier one ran in the same run or not.
pub const REVISION_SETTINGS: [&str; 9] = [
    "foreign_key_checks",
    "unique_checks",
    "sql_mode",
    "time_zone",
    "sql_log_bin",
    "character_set_client",
    "character_set_connection",
    "character_set_results",
    "collation_connection",
];

/// ER_DUP_ENTRY.
const DUPLICATE_KEY: u16 = 1062;

/// The name of a schema's run lock (`GET_LOCK`): one `apply` or `resolve`
/// at a time per schema, whatever the sidecar. Names are at most 64
/// characters; a long schema name is hashed.
pub fn run_lock_name(schema: &str) -> String {
    let name = format!("bloodraven-migrate:{schema}");
    if name.len() <= 64 {
        name
    } else {
        format!("bloodraven-migrate:{}", &crate::revision::checksum(schema.as_bytes())[..40])
    }
}

/// The server's flavour: where lock information lives differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// MariaDB: `information_schema.METADATA_LOCK_INFO` (plugin), `INNODB_LOCK_WAITS`.
    MariaDb,
    /// MySQL 8: `performance_schema.metadata_locks`, `performance_schema.data_lock_waits`.
    MySql,
}

/// Where to connect, without the password in anything printable.
#[derive(Clone)]
pub struct Target {
    opts: Opts,
    /// `user@host:port/schema`, for logs.
    pub display: String,
    /// The schema.
    pub schema: String,
    connect_timeout: Duration,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target").field("display", &self.display).finish_non_exhaustive()
    }
}

fn read_file(what: &'static str, path: &std::path::Path) -> Result<String, DbError> {
    std::fs::read_to_string(path).map_err(|source| DbError::File { what, path: path.display().to_string(), source })
}

impl Target {
    /// From the flags: URL (flag, env or file), password file.
    pub fn from_args(a: &DbArgs) -> Result<Target, DbError> {
        let url = match (&a.database_url, &a.database_url_file) {
            (Some(u), _) => u.trim().to_owned(),
            (None, Some(path)) => read_file("the database URL", path)?.trim().to_owned(),
            (None, None) => return Err(DbError::NoUrl),
        };
        check_url_shape(&url)?;
        // Before anything can print them: every rendered error is redacted of them (crate::redact).
        register_url_password(&url);
        let opts = Opts::from_url(&url).map_err(|e| DbError::Url(redact(&e.to_string(), &url)))?;
        if let Some(pw) = opts.pass() {
            crate::redact::register(pw);
        }
        let mut b = OptsBuilder::from_opts(opts)
            // Never switch to the unix socket behind the caller's back (a
            // second connection, and another account: user@localhost).
            .prefer_socket(false)
            .stmt_cache_size(0)
            .conn_ttl(None);
        if let Some(path) = &a.password_file {
            let pw = read_file("the password", path)?;
            let pw = pw.strip_suffix('\n').unwrap_or(&pw);
            let pw = pw.strip_suffix('\r').unwrap_or(pw);
            crate::redact::register(pw);
            b = b.pass(Some(pw.to_owned()));
        }
        let opts = Opts::from(b);
        let schema = opts.db_name().map(str::to_owned).filter(|s| !s.is_empty()).ok_or(DbError::NoSchema)?;
        let display =
            format!("{}@{}:{}/{}", opts.user().unwrap_or_default(), opts.ip_or_hostname(), opts.tcp_port(), schema);
        Ok(Target { opts, display, schema, connect_timeout: Duration::from_secs(a.connect_timeout.max(1)) })
    }

    /// Ends session `id` on the server with `KILL CONNECTION`, over a second
    /// connection opened for it, within `timeout` (connect included).
    ///
    /// Why: a client that stops (a fence's SIGTERM) only closes its socket,
    /// and the server notices a closed socket only when the statement next
    /// reads or writes it; a statement that is computing — an `ALTER TABLE`
    /// copying rows, a long `UPDATE` — runs on to its end (and a DDL
    /// commits) after the fence. `KILL` sets the session's killed flag,
    /// which those loops do check: the statement stops and its transaction
    /// rolls back. A user may kill its own sessions without any privilege.
    /// Errors: the server unreachable or the kill refused (the session may
    /// still be running; the caller says so).
    pub async fn kill_session(&self, id: u32, timeout: Duration) -> Result<(), DbError> {
        let kill = async {
            let mut conn = Conn::new(self.opts.clone()).await.map_err(|e| DbError::Connect {
                target: self.display.clone(),
                message: crate::classify::describe(&e),
            })?;
            match conn.query_drop(format!("KILL CONNECTION {id}")).await {
                // ER_NO_SUCH_THREAD: it has already ended.
                Err(mysql_async::Error::Server(e)) if e.code == 1094 => {}
                r => r?,
            }
            let _ = conn.disconnect().await;
            Ok(())
        };
        tokio::time::timeout(timeout, kill).await.map_err(|_| DbError::Connect {
            target: self.display.clone(),
            message: format!("no answer within {timeout:?} to KILL CONNECTION {id}"),
        })?
    }

    /// Opens the connection and sets the session: `lock_timeout` for both
    /// lock waits (`None`: leave the server's defaults, for comparison
    /// only), `idle_bound` for the net/wait timeouts.
    pub async fn connect(&self, lock_timeout: Option<Duration>, idle_bound: Duration) -> Result<Session, DbError> {
        let conn = tokio::time::timeout(self.connect_timeout, Conn::new(self.opts.clone()))
            .await
            .map_err(|_| DbError::Connect {
                target: self.display.clone(),
                message: format!("no answer within {:?}", self.connect_timeout),
            })?
            .map_err(|e| DbError::Connect { target: self.display.clone(), message: crate::classify::describe(&e) })?;
        let mut s = Session { conn, flavor: Flavor::MySql, schema: self.schema.clone(), id: 0, version: String::new() };
        s.id = s.conn.id();
        let idle = idle_bound.as_secs().max(60);
        let mut set =
            format!("SET SESSION wait_timeout = {idle}, net_read_timeout = {idle}, net_write_timeout = {idle}");
        if let Some(l) = lock_timeout {
            let l = l.as_secs().max(1);
            let _ = write!(set, ", lock_wait_timeout = {l}, innodb_lock_wait_timeout = {l}");
        }
        s.conn.query_drop(set).await?;
        let version: Option<String> = s.conn.query_first("SELECT VERSION()").await?;
        s.version = version.unwrap_or_default();
        s.flavor = if s.version.to_ascii_lowercase().contains("mariadb") { Flavor::MariaDb } else { Flavor::MySql };
        Ok(s)
    }
}

/// Refuses a URL whose password a URL parser would read as something
/// else: an unencoded `/`, `?` or `#` in the password ends the host part
/// early, and the rest of the password becomes the port, the schema or the
/// query — fields that are logged. An `@` after the host part is that
/// sign. The message never repeats the URL.
fn check_url_shape(url: &str) -> Result<(), DbError> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    if rest[host_end..].contains('@') {
        return Err(DbError::Url(
            "an `@` follows the host part: a password containing `/`, `?` or `#` must be percent-encoded \
             (%2F, %3F, %23; `%` itself as %25), or given with --password-file"
                .into(),
        ));
    }
    Ok(())
}

/// Registers the URL's password as written (percent-encoded, as a file
/// holding the URL shows it) for [`crate::redact`]; the decoded one is
/// registered once the URL is parsed.
fn register_url_password(url: &str) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    if let Some((userinfo, _)) = rest[..host_end].rsplit_once('@')
        && let Some((_, pw)) = userinfo.split_once(':')
    {
        crate::redact::register(pw);
    }
}

/// Removes the URL (and so its password) from a parser's message, should
/// the parser ever quote it, then the registered secrets.
fn redact(message: &str, url: &str) -> String {
    let message = if url.is_empty() { message.to_owned() } else { message.replace(url, "<the URL>") };
    crate::redact::redact(&message)
}

/// The open session.
#[derive(Debug)]
pub struct Session {
    /// The connection.
    pub conn: Conn,
    /// MariaDB or MySQL.
    pub flavor: Flavor,
    /// The schema.
    pub schema: String,
    /// `CONNECTION_ID()`.
    pub id: u32,
    /// `VERSION()`.
    pub version: String,
}

impl Session {
    /// The session's effective lock and idle settings, for the first log lines.
    pub async fn settings(&mut self) -> Result<(u64, u64, u64), DbError> {
        let row: Option<(u64, u64, u64)> = self
            .conn
            .query_first(
                "SELECT @@SESSION.lock_wait_timeout, @@SESSION.innodb_lock_wait_timeout, @@SESSION.wait_timeout",
            )
            .await?;
        Ok(row.unwrap_or_default())
    }

    /// The session settings a revision commonly changes and a later one
    /// must not inherit, with their values now.
    pub async fn session_state(&mut self) -> Result<Vec<(&'static str, Option<String>)>, DbError> {
        let select = format!(
            "SELECT {}",
            REVISION_SETTINGS.iter().map(|v| format!("CAST(@@SESSION.{v} AS CHAR)")).collect::<Vec<_>>().join(", ")
        );
        let row: Option<mysql_async::Row> = self.conn.query_first(select).await?;
        let row = row.map(mysql_async::Row::unwrap).unwrap_or_default();
        Ok(REVISION_SETTINGS
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let value = match row.get(i) {
                    Some(mysql_async::Value::Bytes(b)) => Some(String::from_utf8_lossy(b).into_owned()),
                    _ => None,
                };
                (*v, value)
            })
            .collect())
    }

    /// Sets back every setting of `baseline` whose value changed since
    /// (only those: setting `sql_log_bin` needs a privilege the runner
    /// needs only when a revision changed it); the names changed.
    pub async fn restore_state(
        &mut self,
        baseline: &[(&'static str, Option<String>)],
    ) -> Result<Vec<&'static str>, DbError> {
        let now = self.session_state().await?;
        let mut changed = Vec::new();
        for ((name, was), (_, is)) in baseline.iter().zip(&now) {
            if was != is
                && let Some(was) = was
            {
                // Numbers as numbers: a boolean setting refuses the string '1'.
                let sql = format!("SET SESSION {name} = ?");
                match was.parse::<i64>() {
                    Ok(n) => self.conn.exec_drop(sql, (n,)).await?,
                    Err(_) => self.conn.exec_drop(sql, (was,)).await?,
                }
                changed.push(*name);
            }
        }
        Ok(changed)
    }

    /// The largest packet the server takes (`@@max_allowed_packet`), bytes.
    pub async fn max_packet(&mut self) -> Result<u64, DbError> {
        let n: Option<u64> = self.conn.query_first("SELECT @@SESSION.max_allowed_packet").await?;
        Ok(n.unwrap_or(u64::MAX))
    }

    /// Creates the history table when missing.
    pub async fn ensure_history(&mut self) -> Result<(), DbError> {
        self.conn.query_drop(history::CREATE).await?;
        Ok(())
    }

    /// Reads the history rows, by version (the table must exist, with this
    /// runner's columns: [`DbError::ForeignHistory`] otherwise).
    pub async fn history(&mut self) -> Result<Vec<Row>, DbError> {
        type Raw = (u64, String, String, String, bool, u32, String, Option<String>);
        let columns: Vec<String> = self
            .conn
            .exec(
                "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
                (history::TABLE,),
            )
            .await?;
        let missing: Vec<&str> = history::COLUMNS
            .iter()
            .copied()
            .filter(|c| !columns.iter().any(|have| have.eq_ignore_ascii_case(c)))
            .collect();
        if !missing.is_empty() {
            return Err(DbError::ForeignHistory { schema: self.schema.clone(), missing: missing.join(", ") });
        }
        let raw: Vec<Raw> = self
            .conn
            .query(format!(
                "SELECT version, description, checksum, state, ddl_started, attempts, \
                 CAST(started_at AS CHAR), CAST(finished_at AS CHAR) FROM {} ORDER BY version",
                history::TABLE
            ))
            .await?;
        Ok(raw
            .into_iter()
            .map(|(version, description, checksum, state, ddl_started, attempts, started_at, finished_at)| Row {
                version,
                description,
                state: State::parse(&state).unwrap_or(State::Unknown),
                state_text: state,
                checksum,
                ddl_started,
                attempts,
                started_at,
                finished_at,
            })
            .collect())
    }

    /// Whether the history table exists.
    pub async fn has_history(&mut self) -> Result<bool, DbError> {
        let n: Option<u64> = self
            .conn
            .exec_first(
                "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
                (history::TABLE,),
            )
            .await?;
        Ok(n.unwrap_or(0) > 0)
    }

    /// Tries the schema's run lock for up to `wait` (whole seconds, 0: no
    /// wait): `Ok(None)` when this session holds it, `Ok(Some(id))` with the
    /// connection holding it otherwise. Held until the session ends (a
    /// `kill -9` releases it with the connection).
    pub async fn try_run_lock(&mut self, wait: Duration) -> Result<Option<u64>, DbError> {
        let name = run_lock_name(&self.schema);
        let got: Option<Option<i64>> = self.conn.exec_first("SELECT GET_LOCK(?, ?)", (&name, wait.as_secs())).await?;
        if got.flatten() == Some(1) {
            return Ok(None);
        }
        let holder: Option<Option<u64>> = self.conn.exec_first("SELECT IS_USED_LOCK(?)", (&name,)).await?;
        Ok(Some(holder.flatten().unwrap_or(0)))
    }

    /// What connection `id` is doing, as far as this account may see
    /// (`PROCESS` shows every account's): `(user, seconds in its state,
    /// its statement)`; `None` when it is gone or not visible.
    pub async fn connection(&mut self, id: u64) -> Result<Option<(String, u64, Option<String>)>, DbError> {
        let row: Option<(String, Option<u64>, Option<String>)> = self
            .conn
            .exec_first("SELECT USER, TIME, LEFT(INFO, 120) FROM information_schema.PROCESSLIST WHERE ID = ?", (id,))
            .await?;
        Ok(row.map(|(user, time, info)| (user, time.unwrap_or(0), info)))
    }

    /// Keeps the server's time as the start of the revision attempt about
    /// to run, for its row ([`Session::write_row`] with `finished`).
    pub async fn mark_start(&mut self) -> Result<(), DbError> {
        Ok(self.conn.query_drop("SET @bloodraven_started = NOW(6)").await?)
    }

    /// Writes the row of `version` in state `state`: a plain insert (after
    /// removing a `rolled-back` row, the only one a run may replace), so a
    /// row that something else recorded meanwhile is never overwritten
    /// ([`DbError::AlreadyRecorded`]); `finished` stamps `finished_at`.
    pub async fn write_row(
        &mut self,
        r: &crate::revision::Revision,
        state: State,
        attempts: u32,
        finished: bool,
    ) -> Result<(), DbError> {
        // A finished row is written at the commit of a DML revision, whose
        // start its attempt kept in @bloodraven_started ([`Session::mark_start`]).
        let (started_at, finished_at) =
            if finished { ("COALESCE(@bloodraven_started, NOW(6))", "NOW(6)") } else { ("NOW(6)", "NULL") };
        self.conn
            .exec_drop(
                format!("DELETE FROM {} WHERE version = ? AND state = 'rolled-back'", history::TABLE),
                (r.version,),
            )
            .await?;
        let sql = format!(
            "INSERT INTO {t} (version, description, checksum, state, ddl_started, attempts, started_at, finished_at, installed_by) \
             VALUES (?, ?, ?, ?, ?, ?, {started_at}, {finished_at}, CURRENT_USER())",
            t = history::TABLE
        );
        let ddl = state == State::Started;
        match self.conn.exec_drop(sql, (r.version, &r.description, &r.checksum, state.as_str(), ddl, attempts)).await {
            Err(mysql_async::Error::Server(e)) if e.code == DUPLICATE_KEY => Err(DbError::AlreadyRecorded(r.version)),
            r => Ok(r?),
        }
    }

    /// `started` → `applied` (DDL revision done) with its attempt count.
    pub async fn finish_row(&mut self, version: u64, attempts: u32) -> Result<(), DbError> {
        self.conn
            .exec_drop(
                format!(
                    "UPDATE {} SET state = 'applied', attempts = ?, finished_at = NOW(6) WHERE version = ? AND state = 'started'",
                    history::TABLE
                ),
                (attempts, version),
            )
            .await?;
        if self.conn.affected_rows() == 1 { Ok(()) } else { Err(DbError::HistoryChanged(version)) }
    }

    /// Removes a `started` row whose revision had no effect at all.
    pub async fn clear_row(&mut self, version: u64) -> Result<(), DbError> {
        self.conn
            .exec_drop(format!("DELETE FROM {} WHERE version = ? AND state = 'started'", history::TABLE), (version,))
            .await?;
        Ok(())
    }

    /// Sets the row of `version`, still in state `from` (as stored), to
    /// `to` (resolve); the number of rows changed.
    pub async fn resolve_row(&mut self, version: u64, from: &str, to: State) -> Result<u64, DbError> {
        self.conn
            .exec_drop(
                format!(
                    "UPDATE {} SET state = ?, finished_at = NOW(6) WHERE version = ? AND state = ?",
                    history::TABLE
                ),
                (to.as_str(), version, from),
            )
            .await?;
        Ok(self.conn.affected_rows())
    }
}

/// Another migration tool's history table found in the schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForeignHistory {
    /// The table (`flyway_schema_history`, …).
    pub table: &'static str,
    /// Flyway only: the newest version it applied successfully (`success = 1`).
    pub newest: Option<String>,
}

impl Session {
    /// The other migration tools' history tables in the schema (the
    /// list the sidecar fingerprints too, [`bloodraven_api::names::HISTORY_TABLES`], without
    /// this runner's own).
    pub async fn foreign_histories(&mut self) -> Result<Vec<ForeignHistory>, DbError> {
        let names: Vec<String> =
            self.conn.query("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()").await?;
        let mut found = Vec::new();
        for &table in bloodraven_api::names::HISTORY_TABLES {
            if table == history::TABLE || !names.iter().any(|n| n.eq_ignore_ascii_case(table)) {
                continue;
            }
            let newest = if table == "flyway_schema_history" {
                // Flyway's own columns; a table of that name without them answers nothing useful.
                self.conn
                    .query_first::<Option<String>, _>(
                        "SELECT CAST(version AS CHAR) FROM flyway_schema_history \
                         WHERE success = 1 AND version IS NOT NULL ORDER BY installed_rank DESC LIMIT 1",
                    )
                    .await
                    .ok()
                    .flatten()
                    .flatten()
            } else {
                None
            };
            found.push(ForeignHistory { table, newest });
        }
        Ok(found)
    }

    /// How many tables (and views) the schema holds besides the history table.
    pub async fn table_count(&mut self) -> Result<u64, DbError> {
        let n: Option<u64> = self
            .conn
            .exec_first(
                "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME <> ?",
                (history::TABLE,),
            )
            .await?;
        Ok(n.unwrap_or(0))
    }

    /// Inserts the `baseline` row at `version` (no checksum: the revisions
    /// it stands for were applied by another tool); a row of that version
    /// recorded meanwhile is [`DbError::AlreadyRecorded`].
    pub async fn write_baseline(&mut self, version: u64, description: &str) -> Result<(), DbError> {
        let sql = format!(
            "INSERT INTO {t} (version, description, checksum, state, ddl_started, attempts, started_at, finished_at, installed_by) \
             VALUES (?, ?, '', ?, 0, 0, NOW(6), NOW(6), CURRENT_USER())",
            t = history::TABLE
        );
        match self.conn.exec_drop(sql, (version, description, State::Baseline.as_str())).await {
            Err(mysql_async::Error::Server(e)) if e.code == DUPLICATE_KEY => Err(DbError::AlreadyRecorded(version)),
            r => Ok(r?),
        }
    }
}

#[cfg(test)]
mod tests;
