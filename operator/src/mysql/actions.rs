//! What the operator does to a site, over a fresh connection bounded by a
//! timeout, with the statements of `statements` for the site's flavour.
//! Used by primary reassertion now and by the failover engine next.

use std::time::Duration;

use mysql_async::prelude::Queryable;

use super::probe::{Credentials, ProbeError, ProbeTarget, connect};
use super::{grants, statements};
use bloodraven_core::observation::Flavor;

/// What a fence did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fenced {
    /// Client sessions ended: `(id, user)`.
    pub killed: Vec<(u64, String)>,
    /// MySQL sessions the operator may not end (their account holds
    /// `SYSTEM_USER`, which the operator's does not): `(id, user)`.
    /// `super_read_only` already stops their writes, and an open
    /// transaction of theirs fails at `COMMIT` (1290).
    pub left: Vec<(u64, String)>,
}

/// How long the fence's `SET GLOBAL read_only` waits for what client
/// sessions hold before the fence looks for commits waiting for a
/// semi-sync acknowledgement: a healthy server sets it at once.
const FIRST_WAIT: Duration = Duration::from_secs(1);

/// How often, past [`FIRST_WAIT`], the fence looks for such commits again
/// while `read_only` waits.
const WAITERS_EVERY: Duration = Duration::from_millis(250);

/// How long a commit has waited for its acknowledgement (the process
/// list's whole seconds) before the fence counts it as waiting for one
/// that does not come: a replica that acknowledges does so in
/// milliseconds.
const WAITED_SECONDS: u64 = 1;

/// What the fence may spend on each step past its bound: ending its own
/// statement, reading that statement's answer, switching semi-sync back.
const STEP: Duration = Duration::from_secs(1);

/// Fences a site: read-only (`read_only` on MariaDB, `super_read_only` on
/// MySQL), then ends every client session but its own — on MariaDB
/// `read_only` does not stop accounts with `READ_ONLY ADMIN` (root among
/// them), so ending sessions is part of the fence.
///
/// `SET GLOBAL read_only` takes the global read lock (new writes wait
/// behind it, and fail once it is set), then the commit lock, waiting for
/// the writes and commits under way, `timeout` and a second at most: a
/// long write or a table lock past that fails the fence, and the site
/// stays writable. Past the bound the fence ends its own statement and
/// reads its answer, so a fence reported failed never takes effect later.
///
/// Commits waiting for a semi-sync acknowledgement are not waited for: on
/// a returning old primary whose standby replicates from it no more, none
/// comes before the semi-sync timeout, when they would all be acknowledged.
/// Past [`FIRST_WAIT`], once a commit has waited [`WAITED_SECONDS`], the
/// fence ends from a second session every client session (it ends them all
/// once fenced anyway): their clients see the connection lost, never an
/// acknowledgement. MariaDB releases an ended session's commit. MySQL's
/// lossless semi-sync keeps it waiting, so the fence then switches the
/// site's primary side of semi-sync off, which lets those commits finish
/// unacknowledged — only when every waiting commit is an ended session's
/// and no session it may not end (a MySQL `SYSTEM_USER` account's) has
/// changed rows in its open transaction, since switching off acknowledges
/// whatever commits after. A fence that fails after that switches it on
/// again. A site being fenced is no primary; the group's semi-sync
/// settings turn it on again if it is made primary.
pub(crate) async fn fence(
    target: &ProbeTarget,
    creds: &Credentials,
    flavor: Flavor,
    timeout: Duration,
) -> Result<Fenced, ProbeError> {
    let started = tokio::time::Instant::now();
    let bound = timeout.max(FIRST_WAIT);
    // The server gives up each of its two waits itself (error 1205) a
    // second past the bound: a fence bounded by one second (reassertion's,
    // the probe timeout) still has the time to end the commits waiting for
    // an acknowledgement after FIRST_WAIT.
    let server_wait = bound.as_secs().max(1) + 1;
    let give_up = started + bound + Duration::from_millis(1500);
    let run = async {
        let mut conn = connect(target, creds).await?;
        conn.query_drop(format!("SET SESSION lock_wait_timeout = {server_wait}")).await?;
        let own = u64::from(conn.id());
        let mut waiters = Waiters { own, ..Waiters::default() };
        let outcome = {
            let set = read_only(&mut conn, flavor);
            tokio::pin!(set);
            let mut next = started + FIRST_WAIT;
            let answered = loop {
                tokio::select! {
                    done = &mut set => break Some(done),
                    () = tokio::time::sleep_until(next.min(give_up)) => {
                        let now = tokio::time::Instant::now();
                        if now >= give_up {
                            break None;
                        }
                        let left = give_up.saturating_duration_since(now);
                        next = match tokio::time::timeout(left, waiters.release(target, creds, flavor)).await {
                            Ok(Ok(())) => tokio::time::Instant::now() + WAITERS_EVERY,
                            failed => {
                                if let Ok(Err(e)) = failed {
                                    tracing::warn!(site = %target.host, error = %e, "the fence could not end the commits waiting for a semi-sync acknowledgement");
                                }
                                // Cut off mid-statement, the session is in
                                // no known state: not used again.
                                waiters.helper = None;
                                give_up
                            }
                        };
                    }
                }
            };
            if let Some(done) = answered {
                done.map_err(ProbeError::from)
            } else {
                // Past the bound: the statement is ended from a fresh
                // session, and its own answer says whether it took effect
                // meanwhile (then the fence holds).
                end_statement(target, creds, own).await;
                match tokio::time::timeout(STEP, &mut set).await {
                    Ok(done) => done.map_err(ProbeError::from),
                    Err(_) => Err(ProbeError::Waited(format!(
                        "read_only still waited for the site's writes after {:.1}s and could not be seen to end; check @@read_only on the site",
                        started.elapsed().as_secs_f32()
                    ))),
                }
            }
        };
        if let Err(e) = outcome {
            if !waiters.killed.is_empty() {
                tracing::warn!(site = %target.host, killed = waiters.killed.len(), "read_only still waited after the sessions were ended");
            }
            if waiters.released {
                switch_back(target, creds, flavor).await;
            }
            return Err(e);
        }
        if waiters.released {
            tracing::info!(site = %target.host, killed = waiters.killed.len(), "fence switched the site's primary side of semi-sync off to release the ended sessions' commits");
        }
        let spare = waiters.helper.as_ref().map(|h| u64::from(h.id()));
        let Waiters { mut killed, mut left, helper, .. } = waiters;
        if let Some(helper) = helper {
            let _ = helper.disconnect().await;
        }
        end_sessions(&mut conn, flavor, Sessions::Clients, spare, &mut killed, &mut left).await?;
        let _ = conn.disconnect().await;
        Ok(Fenced { killed, left })
    };
    // The server's own bounds answer first (error 1205, the fence not
    // taken); this one only covers a server that does not answer at all.
    let outer = bound + Duration::from_millis(1500) + 3 * STEP;
    tokio::time::timeout(outer, run).await.unwrap_or(Err(ProbeError::Timeout(outer)))
}

/// Sets `read_only` (not `super_read_only`) and nothing else: a site whose
/// own maintenance may be running there as an account that writes through
/// it (see `failover::reassert`). Bounded like the fence's statement.
pub(crate) async fn set_read_only(
    target: &ProbeTarget,
    creds: &Credentials,
    timeout: Duration,
) -> Result<(), ProbeError> {
    let wait = timeout.as_secs().max(1);
    let statements = [format!("SET SESSION lock_wait_timeout = {wait}"), "SET GLOBAL read_only = 1".to_owned()];
    run_all(target, creds, &statements, timeout + STEP).await
}

/// The fence's second session, which ends the commits waiting for a
/// semi-sync acknowledgement while the fence's `read_only` waits.
#[derive(Default)]
struct Waiters {
    /// The fence's own session, never ended.
    own: u64,
    /// Sessions ended: `(id, user)`.
    killed: Vec<(u64, String)>,
    /// Sessions the operator may not end: `(id, user)`.
    left: Vec<(u64, String)>,
    /// The session, opened on first need.
    helper: Option<mysql_async::Conn>,
    /// Whether the site's primary side of semi-sync was switched off.
    released: bool,
}

impl Waiters {
    /// Once a commit has waited for its acknowledgement [`WAITED_SECONDS`],
    /// ends every client session but the fence's own; then, when every
    /// waiting commit is an ended session's (MySQL keeps those waiting) and
    /// no session left has changed rows it could still commit, switches
    /// the site's primary side of semi-sync off.
    async fn release(&mut self, target: &ProbeTarget, creds: &Credentials, flavor: Flavor) -> Result<(), ProbeError> {
        let Waiters { own, killed, left, helper, released } = self;
        let helper = match helper {
            Some(h) => h,
            slot => slot.insert(connect(target, creds).await?),
        };
        let waiting = sessions(helper, flavor, Sessions::SemiSyncWaiters).await?;
        if !waiting.iter().any(|(.., time)| *time >= WAITED_SECONDS) {
            return Ok(());
        }
        // Every session, not only the waiting ones: a transaction open
        // elsewhere commits past the global read lock's wait, and once
        // semi-sync is off, it would be acknowledged.
        end_sessions(helper, flavor, Sessions::Clients, Some(*own), killed, left).await?;
        if *released {
            return Ok(());
        }
        let waiting = sessions(helper, flavor, Sessions::SemiSyncWaiters).await?;
        let all_ended = waiting.iter().all(|(id, ..)| killed.iter().any(|(k, _)| k == id));
        let writers_left = if left.is_empty() {
            0
        } else {
            let ids = left.iter().map(|(id, _)| id.to_string()).collect::<Vec<_>>().join(", ");
            helper.query_first::<u64, _>(statements::writers_among(&ids)).await?.unwrap_or(0)
        };
        if !waiting.is_empty() && all_ended && writers_left == 0 {
            helper.query_drop(statements::semi_sync_primary(flavor, false)).await?;
            *released = true;
        }
        Ok(())
    }
}

/// Switches the site's primary side of semi-sync on again after a fence
/// that failed once it had switched it off: the site stays writable, and
/// its commits wait for an acknowledgement as before.
async fn switch_back(target: &ProbeTarget, creds: &Credentials, flavor: Flavor) {
    match run_all(target, creds, &[statements::semi_sync_primary(flavor, true)], STEP).await {
        Ok(()) => {
            tracing::warn!(site = %target.host, "the fence failed: the site's primary side of semi-sync is on again");
        }
        Err(e) => {
            tracing::error!(site = %target.host, error = %e, "the fence failed and the site's primary side of semi-sync could not be switched on again");
        }
    }
}

/// Ends the fence's own statement (session `id`), still waiting past its
/// bound, from a fresh session.
async fn end_statement(target: &ProbeTarget, creds: &Credentials, id: u64) {
    if let Err(e) = run_all(target, creds, &[statements::kill_query(id)], STEP).await {
        tracing::warn!(site = %target.host, error = %e, "could not end the fence's statement past its bound");
    }
}

/// The fence's statements (read_only, and super_read_only on MySQL).
async fn read_only(conn: &mut mysql_async::Conn, flavor: Flavor) -> Result<(), mysql_async::Error> {
    for stmt in statements::fence(flavor) {
        conn.query_drop(*stmt).await?;
    }
    Ok(())
}

/// The sessions a fence looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sessions {
    /// [`statements::CLIENT_SESSIONS`].
    Clients,
    /// [`statements::SEMI_SYNC_WAITERS`].
    SemiSyncWaiters,
}

/// The sessions `which` names, as (id, user, seconds in the current
/// state): MySQL answers the SQL itself; MariaDB's threads are listed with
/// [`statements::MARIADB_PROCESSLIST`] and filtered here the same way.
async fn sessions(
    conn: &mut mysql_async::Conn,
    flavor: Flavor,
    which: Sessions,
) -> Result<Vec<(u64, String, u64)>, mysql_async::Error> {
    if flavor == Flavor::MySql {
        let sql = match which {
            Sessions::Clients => statements::CLIENT_SESSIONS,
            Sessions::SemiSyncWaiters => statements::SEMI_SYNC_WAITERS,
        };
        return conn.query(sql).await;
    }
    let own: Option<u64> = conn.query_first("SELECT CONNECTION_ID()").await?;
    let rows: Vec<mysql_async::Row> = conn.query(statements::MARIADB_PROCESSLIST).await?;
    let text = |row: &mysql_async::Row, column: &str| -> String {
        row.get_opt::<Option<String>, &str>(column).and_then(Result::ok).flatten().unwrap_or_default()
    };
    Ok(rows
        .iter()
        .filter_map(|row| {
            let id: u64 = row.get_opt::<u64, &str>("Id")?.ok()?;
            let time: u64 = row.get_opt::<Option<u64>, &str>("Time").and_then(Result::ok).flatten().unwrap_or(0);
            let session =
                ProcessRow { id, user: text(row, "User"), command: text(row, "Command"), state: text(row, "State") };
            session.listed(which, own).then_some((id, session.user, time))
        })
        .collect())
}

/// A row of MariaDB's process list, as the fence's filters read it.
struct ProcessRow {
    id: u64,
    user: String,
    command: String,
    state: String,
}

impl ProcessRow {
    /// Whether `which` lists it, as its SQL does; `own`: this connection.
    fn listed(&self, which: Sessions, own: Option<u64>) -> bool {
        let among = |list: &[&str], v: &str| list.iter().any(|l| l.eq_ignore_ascii_case(v));
        if Some(self.id) == own || among(statements::NOT_CLIENT_USERS, &self.user) {
            return false;
        }
        match which {
            Sessions::Clients => !among(statements::NOT_CLIENT_COMMANDS, &self.command),
            Sessions::SemiSyncWaiters => self
                .state
                .get(..statements::SEMI_SYNC_WAIT_STATE.len())
                .is_some_and(|p| p.eq_ignore_ascii_case(statements::SEMI_SYNC_WAIT_STATE)),
        }
    }
}

/// Ends the client sessions `which` lists but `spare` (never the
/// operator's own nor the replication threads), adding each to `killed`, or to `left` when it is a
/// SYSTEM_USER account's on MySQL (super_read_only stops its writes).
async fn end_sessions(
    conn: &mut mysql_async::Conn,
    flavor: Flavor,
    which: Sessions,
    spare: Option<u64>,
    killed: &mut Vec<(u64, String)>,
    left: &mut Vec<(u64, String)>,
) -> Result<(), ProbeError> {
    // Without PROCESS the process list shows the operator's own
    // sessions only, and the fence would end none of the others'. On
    // MariaDB those may hold READ_ONLY ADMIN and write on: a fence that
    // cannot see them does not hold (1227, InsufficientPrivileges). On
    // MySQL super_read_only has stopped them already.
    if flavor == Flavor::MariaDb {
        let _: Option<u64> = conn.query_first(statements::SESSIONS_VISIBLE).await?;
    }
    for (id, user, _) in sessions(conn, flavor, which).await? {
        // The fence's own second session; or ended already, still rolling
        // back (or, on MySQL, its commit still waiting).
        if spare == Some(id) || killed.iter().any(|(k, _)| *k == id) {
            continue;
        }
        match conn.query_drop(statements::kill(id)).await {
            Ok(()) => killed.push((id, user)),
            // ER_NO_SUCH_THREAD: it ended by itself meanwhile.
            Err(mysql_async::Error::Server(e)) if e.code == 1094 => {}
            // ER_KILL_DENIED_ERROR on MySQL: a SYSTEM_USER account's
            // session, which super_read_only has stopped from writing.
            // On MariaDB it is a fence that does not hold (read_only
            // does not stop READ_ONLY ADMIN accounts).
            Err(mysql_async::Error::Server(e)) if e.code == 1095 && flavor == Flavor::MySql => {
                if !left.iter().any(|(l, _)| *l == id) {
                    left.push((id, user));
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Runs `statements` on a site over one fresh connection, within `timeout`.
async fn run_all<S: AsRef<str> + Send + Sync>(
    target: &ProbeTarget,
    creds: &Credentials,
    statements: &[S],
    timeout: Duration,
) -> Result<(), ProbeError> {
    let run = async {
        let mut conn = connect(target, creds).await?;
        for stmt in statements {
            conn.query_drop(stmt.as_ref()).await?;
        }
        let _ = conn.disconnect().await;
        Ok(())
    };
    tokio::time::timeout(timeout, run).await.unwrap_or(Err(ProbeError::Timeout(timeout)))
}

/// Makes a fenced site writable again (a planned failover that could not
/// finish its drain).
pub(crate) async fn unfence(
    target: &ProbeTarget,
    creds: &Credentials,
    flavor: Flavor,
    timeout: Duration,
) -> Result<(), ProbeError> {
    run_all(target, creds, statements::unfence(flavor), timeout).await
}

/// Promotes a site: stops replication, forgets its source, makes it writable.
///
/// `semi_sync`: the group asks for semi-sync and the site can do it, with
/// the server's timeout in milliseconds. Its primary side is switched on
/// before it is made writable, so no commit it takes is acknowledged
/// without a replica unless the operator falls back
/// (`controller::failover_group::semisync`).
pub(crate) async fn promote(
    target: &ProbeTarget,
    creds: &Credentials,
    flavor: Flavor,
    semi_sync: Option<u64>,
    timeout: Duration,
) -> Result<(), ProbeError> {
    let mut all: Vec<String> = statements::stop_replication(flavor).iter().map(|s| (*s).to_owned()).collect();
    if let Some(timeout_ms) = semi_sync {
        all.extend(statements::semi_sync(flavor, true, true, timeout_ms));
    }
    all.extend(statements::unfence(flavor).iter().map(|s| (*s).to_owned()));
    run_all(target, creds, &all, timeout).await
}

/// Makes a site a replica of `source` with GTID auto-positioning, read-only.
pub(crate) async fn repoint(
    target: &ProbeTarget,
    creds: &Credentials,
    flavor: Flavor,
    source: &statements::Source,
    timeout: Duration,
) -> Result<(), ProbeError> {
    let all: Vec<String> = statements::repoint(flavor, source).iter().map(|s| s.expose().to_owned()).collect();
    run_all(target, creds, &all, timeout).await
}

/// A site's semi-sync switches as its role asks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SemiSyncRole {
    /// On or off.
    pub on: bool,
    /// The primary's side (and the replica's off), or the replica's.
    pub primary: bool,
    /// Restart a replica's IO thread so it takes effect (only when
    /// replication is configured).
    pub restart_io: bool,
    /// The primary's own timeout, in milliseconds.
    pub timeout_ms: u64,
}

/// Turns semi-synchronous replication on or off for a site's role.
pub(crate) async fn semi_sync(
    target: &ProbeTarget,
    creds: &Credentials,
    flavor: Flavor,
    role: SemiSyncRole,
    timeout: Duration,
) -> Result<(), ProbeError> {
    let all: Vec<String> = statements::semi_sync(flavor, role.on, role.primary, role.timeout_ms)
        .into_iter()
        .filter(|s| role.restart_io || !s.ends_with("IO_THREAD"))
        .collect();
    run_all(target, creds, &all, timeout).await
}

/// The sessions whose commit waits for a semi-sync acknowledgement on a
/// site, as (id, seconds its statement has run), within `timeout`.
pub(crate) async fn semi_sync_waiters(
    target: &ProbeTarget,
    creds: &Credentials,
    flavor: Flavor,
    timeout: Duration,
) -> Result<Vec<(u64, u64)>, ProbeError> {
    let read = async {
        let mut conn = connect(target, creds).await?;
        let waiting = sessions(&mut conn, flavor, Sessions::SemiSyncWaiters).await?;
        let _ = conn.disconnect().await;
        Ok::<_, ProbeError>(waiting.into_iter().map(|(id, _, time)| (id, time)).collect())
    };
    tokio::time::timeout(timeout, read)
        .await
        .unwrap_or_else(|_| Err(ProbeError::Waited(format!("the process list took over {}s", timeout.as_secs()))))
}

/// A site's GTID positions: what it applied from a source, what it wrote
/// to its own binlog, and everything it has (MariaDB `gtid_slave_pos`,
/// `gtid_binlog_pos`, `gtid_current_pos`; MySQL `gtid_executed` for each).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Positions {
    /// Applied from a source.
    pub applied: String,
    /// In its own binary log (what a replica of it can receive).
    pub binlog: String,
    /// Everything it has.
    pub current: String,
}

/// Reads a site's GTID positions.
pub(crate) async fn positions(
    target: &ProbeTarget,
    creds: &Credentials,
    flavor: Flavor,
    timeout: Duration,
) -> Result<Positions, ProbeError> {
    let run = async {
        let mut conn = connect(target, creds).await?;
        let sql = match flavor {
            Flavor::MariaDb => "SELECT @@gtid_slave_pos, @@gtid_binlog_pos, @@gtid_current_pos",
            Flavor::MySql => "SELECT @@gtid_executed, @@gtid_executed, @@gtid_executed",
        };
        let row: Option<(String, String, String)> = conn.query_first(sql).await?;
        let _ = conn.disconnect().await;
        let (applied, binlog, current) =
            row.ok_or_else(|| ProbeError::Unexpected("no row for the GTID positions".into()))?;
        let clean = |s: String| s.replace('\n', "");
        Ok(Positions { applied: clean(applied), binlog: clean(binlog), current: clean(current) })
    };
    tokio::time::timeout(timeout, run).await.unwrap_or(Err(ProbeError::Timeout(timeout)))
}

/// Reads a site's binlogged GTIDs as errant transactions are judged by
/// ([`crate::mysql::SiteObservation::gtid_binlog_state`]): MariaDB
/// `gtid_binlog_state`, MySQL `gtid_executed`. `awaited` (MySQL: GTIDs of
/// the site's own that a replica already shows, see
/// [`bloodraven_core::failover::replica::in_flight`]) is waited for first,
/// for at most [`IN_FLIGHT_WAIT_SECONDS`]; what is still missing then is
/// read as missing.
pub(crate) async fn binlog_state(
    target: &ProbeTarget,
    creds: &Credentials,
    flavor: Flavor,
    awaited: Option<&str>,
    timeout: Duration,
) -> Result<String, ProbeError> {
    let run = async {
        let mut conn = connect(target, creds).await?;
        if let Some(set) = awaited.filter(|_| flavor == Flavor::MySql) {
            // 0 reached, 1 timed out: either way the set is read next.
            let _: Option<Option<i64>> =
                conn.exec_first(statements::wait_for_position(flavor).0, (set, IN_FLIGHT_WAIT_SECONDS)).await?;
        }
        let sql = match flavor {
            Flavor::MariaDb => "SELECT @@gtid_binlog_state",
            Flavor::MySql => "SELECT @@gtid_executed",
        };
        let row: Option<String> = conn.query_first(sql).await?;
        let _ = conn.disconnect().await;
        Ok(row.ok_or_else(|| ProbeError::Unexpected("no row for the binlogged GTIDs".into()))?.replace('\n', ""))
    };
    tokio::time::timeout(timeout, run).await.unwrap_or(Err(ProbeError::Timeout(timeout)))
}

/// How long a primary's commit stage is waited for before a replica's
/// newer GTIDs of the primary's own are judged errant: a group commit's
/// fsync, with room for a loaded disk.
pub(crate) const IN_FLIGHT_WAIT_SECONDS: u64 = 1;

/// Waits, at most `bound`, for a replica to apply everything up to
/// `position` (`MASTER_GTID_WAIT` / `WAIT_FOR_EXECUTED_GTID_SET`).
/// `Ok(true)` reached, `Ok(false)` the bound ran out.
pub(crate) async fn catch_up(
    target: &ProbeTarget,
    creds: &Credentials,
    flavor: Flavor,
    position: &str,
    bound: Duration,
) -> Result<bool, ProbeError> {
    let (sql, reached) = statements::wait_for_position(flavor);
    let secs = bound.as_secs().max(1);
    let run = async {
        let mut conn = connect(target, creds).await?;
        let got: Option<Option<i64>> = conn.exec_first(sql, (position, secs)).await?;
        let _ = conn.disconnect().await;
        Ok(got.flatten() == Some(reached))
    };
    // The server's own bound, plus a margin for connecting.
    let outer = bound + Duration::from_secs(5);
    tokio::time::timeout(outer, run).await.unwrap_or(Err(ProbeError::Timeout(outer)))
}

/// What a site shows of the accounts that can write through `read_only`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Bypass {
    /// Accounts other than the exact one the operator is connected as
    /// (`CURRENT_USER()`), as `'user'@'host'` (followed by `through role
    /// 'name'` when held through a role), sorted, `PUBLIC (every account)`
    /// first: see [`grants::bypass_accounts`]. Empty on MySQL, where
    /// `super_read_only` stops them.
    pub accounts: Vec<String>,
    /// Whether the operator's account sees every account's privileges
    /// (`SELECT` on `mysql.*` or globally); when not, MariaDB shows it its
    /// own grants and `PUBLIC`'s only, so `accounts` holds at most
    /// `PUBLIC`. Always true on MySQL.
    pub all_visible: bool,
    /// The site fences with `super_read_only` (MySQL), which stops every
    /// account: nothing to list.
    pub super_read_only: bool,
}

/// Lists the accounts other than the operator's own that can write through
/// `read_only` on a server of `flavor` and `version` (`@@version`), bounded
/// by `timeout`: those that hold the privilege themselves, through roles
/// (`mysql.roles_mapping`, roles of roles) and through `PUBLIC` when the
/// operator sees every account's grants; `PUBLIC` alone otherwise. Errors:
/// connecting or querying fails.
pub(crate) async fn read_only_bypass(
    target: &ProbeTarget,
    creds: &Credentials,
    flavor: Flavor,
    version: &str,
    timeout: Duration,
) -> Result<Bypass, ProbeError> {
    let Some(sql) = statements::read_only_bypass_accounts(flavor, version) else {
        return Ok(Bypass { accounts: Vec::new(), all_visible: true, super_read_only: true });
    };
    let privileges = statements::read_only_bypass_privileges(version);
    let public = statements::has_public_role(version);
    let run = async {
        let mut conn = connect(target, creds).await?;
        let me: Option<String> = conn.query_first(statements::CURRENT_USER).await?;
        let visible: Option<i64> = conn.query_first(statements::GRANTS_VISIBLE).await?;
        let all_visible = visible.unwrap_or(0) > 0;
        let mut found = grants::Grants { accounts: conn.query(sql).await?, ..grants::Grants::default() };
        if all_visible {
            found.mapping = conn.query(statements::ROLES_MAPPING).await?;
        }
        // The roles granted to someone, and PUBLIC (readable by anyone).
        let mut roles: Vec<&str> = found.mapping.iter().map(|(_, _, role)| role.as_str()).collect();
        if public {
            roles.push(grants::PUBLIC);
        }
        roles.sort_unstable();
        roles.dedup();
        let mut holding = Vec::new();
        for role in roles {
            let lines: Vec<String> = conn.query(statements::show_grants_for_role(role)).await?;
            if grants::show_grants_hold(&lines, privileges) {
                holding.push(role.to_owned());
            }
        }
        found.roles = holding;
        let _ = conn.disconnect().await;
        Ok((found, me, all_visible))
    };
    let (found, me, all_visible) =
        tokio::time::timeout(timeout, run).await.unwrap_or(Err(ProbeError::Timeout(timeout)))?;
    let me = me.as_deref().and_then(grants::current_user);
    let accounts = grants::bypass_accounts(&found, me.as_deref(), public);
    Ok(Bypass { accounts, all_visible, super_read_only: false })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: u64, user: &str, command: &str, state: &str) -> ProcessRow {
        ProcessRow { id, user: user.into(), command: command.into(), state: state.into() }
    }

    /// MariaDB's process list is filtered here as the SQL filters MySQL's:
    /// the same lists, the same case rules.
    #[test]
    fn mariadb_sessions_are_filtered_as_the_sql_filters_them() {
        let client = row(7, "app", "Query", "Sending data");
        assert!(client.listed(Sessions::Clients, Some(3)));
        assert!(!client.listed(Sessions::Clients, Some(7)), "the fence's own connection");
        assert!(!client.listed(Sessions::SemiSyncWaiters, Some(3)));
        for command in ["Binlog Dump GTID", "binlog dump", "Slave_IO", "Daemon", "Connect"] {
            assert!(!row(8, "repl", command, "").listed(Sessions::Clients, Some(3)), "{command}");
        }
        assert!(!row(9, "system user", "Query", "").listed(Sessions::Clients, Some(3)));
        assert!(!row(9, "event_scheduler", "Daemon", "").listed(Sessions::Clients, None));
        let waiting = row(10, "app", "Query", "Waiting for semi-sync ACK from slave");
        assert!(waiting.listed(Sessions::SemiSyncWaiters, Some(3)) && waiting.listed(Sessions::Clients, Some(3)));
        assert!(!row(11, "app", "Query", "Waiting").listed(Sessions::SemiSyncWaiters, Some(3)));
        // The lists are the SQL's.
        for word in statements::NOT_CLIENT_COMMANDS.iter().chain(statements::NOT_CLIENT_USERS) {
            assert!(statements::CLIENT_SESSIONS.contains(&format!("'{word}'")), "{word}");
        }
        assert!(statements::SEMI_SYNC_WAITERS.contains(&format!("'{}%'", statements::SEMI_SYNC_WAIT_STATE)));
    }
}
