//! `apply`: the pending revisions, one commit per revision, each retried
//! as a whole only for lock contention.
//!
//! Order of a run (docs/migrate.md):
//! 1. read and check the directory (bad files: exit 2, nothing touched);
//! 2. behind the sidecar, a granted `permit` before the database is
//!    touched at all — so the applied set is read only once the migration
//!    mutex is held; alone, say so in the first log line;
//! 3. one connection with its own session settings ([`crate::db`]);
//! 4. the schema's run lock (`GET_LOCK`, held by the session to its end),
//!    so that a second runner — alone, or an older one — waits instead of
//!    applying the same revisions; then the history table, then the plan
//!    ([`crate::history::plan`]);
//! 5. per revision: `permit`, then attempts. A DML revision runs in one
//!    transaction with its history row (all or nothing, `kill -9`
//!    included). A DDL revision reports `ddl-started` to the sidecar,
//!    commits its row as `started` before its first statement, looks for
//!    blockers before each DDL statement, and is marked `applied` at the
//!    end; if it fails after any statement took effect (or the connection
//!    is lost) its row stays `started`: dirty.
//! 6. Retries ([`crate::classify`], [`crate::retry`]): only 1213/1205,
//!    only while nothing of the revision took effect, re-running it from
//!    its first statement after a jittered backoff, up to `maxAttempts`.

use std::time::{Duration, Instant};

use bloodraven_api::socket::MarkEvent;
use mysql_async::prelude::Queryable as _;

use crate::blockers;
use crate::classify::{self, Class};
use crate::config::{OnBlocker, Tuning};
use crate::db::{Session, Target};
use crate::guard::{Guard, GuardError};
use crate::history::{self, State};
use crate::revision::{Kind, Revision};

use crate::error::RunnerError;

mod checks;
mod run_lock;

use checks::{check_packets, check_sql_mode, preflight};
pub use run_lock::RUN_LOCK_WAIT;
use run_lock::run_lock;

/// Exit codes of `apply` and the other subcommands. The runner maps its
/// errors to them in one place, [`RunnerError::exit_code`].
pub mod exit {
    /// Everything applied (or nothing pending).
    pub const OK: i32 = 0;
    /// A revision failed with its own error (not retried), nothing of it left behind.
    pub const FAILED: i32 = 1;
    /// Bad flags, files or URL: nothing was touched.
    pub const USAGE: i32 = 2;
    /// The history refuses the run: a dirty revision, a changed checksum, out of order.
    pub const REFUSED: i32 = 3;
    /// Lock contention on every one of `maxAttempts` attempts, or blockers
    /// with `--on-blocker fail`: drain the readers, or end the blocker.
    pub const CONTENTION: i32 = 4;
    /// The connection was lost; the revision in flight is not recorded as applied.
    pub const CONNECTION_LOST: i32 = 5;
    /// Fenced: the sidecar refused or could not vouch for a live lease, or
    /// the site is read-only (1290).
    pub const FENCED: i32 = 6;
    /// This run left a revision dirty (`started`): a person must check the
    /// schema and `resolve` it.
    pub const DIRTY: i32 = 7;
    /// Not started: `--require-lease` and no sidecar socket, so no deploy
    /// lease and no fence (the sidecar's 91, "not started: refused", in
    /// the runner's numbering); the database was not touched.
    pub const NO_LEASE: i32 = 8;
}

/// What `apply` needs.
#[derive(Debug)]
pub struct ApplySettings {
    /// The revisions (read and checked already).
    pub revisions: Vec<Revision>,
    /// The database.
    pub target: Target,
    /// The tuning settings: lock timeout, attempts, backoff bounds.
    pub tuning: Tuning,
    /// `--on-blocker`.
    pub on_blocker: OnBlocker,
    /// Alone or behind the sidecar.
    pub guard: Guard,
    /// Leave the server's lock timeouts (benchmark comparison only).
    pub server_lock_timeouts: bool,
    /// `--ignore-foreign-history`: apply from the first revision although
    /// another tool's history table is in the schema.
    pub ignore_foreign_history: bool,
    /// Where `apply` publishes its session's `CONNECTION_ID()` once open (0
    /// before), so a fence can end the session server-side.
    pub session_id: std::sync::Arc<std::sync::atomic::AtomicU32>,
    /// The DDL revision whose `started` row is (being) written while none
    /// of its statements has been sent yet: a stop signal then leaves a
    /// row that is not really dirty ([`crate::stopped`] settles it).
    pub unsent: std::sync::Arc<std::sync::Mutex<Option<u64>>>,
}

fn set_unsent(s: &ApplySettings, v: Option<u64>) {
    if let Ok(mut g) = s.unsent.lock() {
        *g = v;
    }
}

/// Why an attempt failed.
#[derive(Clone, Debug)]
pub(crate) enum Cause {
    /// A server or connection error.
    Db(Class, Option<u16>),
    /// Blockers seen by the pre-flight look: `wait` ran out (retried like
    /// lock contention), or `--on-blocker fail` (not retried).
    Blocked {
        /// Whether another attempt may follow.
        retried: bool,
    },
    /// The sidecar refused or was unreachable.
    Sidecar,
}

/// A failed attempt.
#[derive(Clone, Debug)]
pub(crate) struct Failure {
    pub(crate) cause: Cause,
    pub(crate) message: String,
    /// Whether some of the revision may have taken effect (its row stays `started`).
    pub(crate) dirty: bool,
    /// The statement (1-based) it failed on, when one.
    statement: Option<usize>,
}

impl Failure {
    fn retried(&self) -> bool {
        !self.dirty
            && match self.cause {
                Cause::Db(c, _) => c.retried(),
                Cause::Blocked { retried } => retried,
                Cause::Sidecar => false,
            }
    }

    fn code(&self) -> String {
        match self.cause {
            Cause::Db(_, Some(c)) => c.to_string(),
            Cause::Db(c, None) => c.as_str().into(),
            Cause::Blocked { .. } => "blocked".into(),
            Cause::Sidecar => "sidecar".into(),
        }
    }

    fn db(e: &mysql_async::Error, dirty: bool, statement: Option<usize>) -> Failure {
        let (class, code) = classify::of_error(e);
        // Redacted by `describe`: the server quotes the statement near a syntax error.
        let message = classify::describe(e);
        Failure { cause: Cause::Db(class, code), message, dirty, statement }
    }

    /// A failure of the runner's own database step (no statement of a
    /// revision): a query error classified, anything else `Other`.
    pub(crate) fn of_db_error(e: &crate::db::DbError, dirty: bool) -> Failure {
        match e {
            crate::db::DbError::Query(q) => Failure::db(q, dirty, None),
            other => {
                Failure { cause: Cause::Db(Class::Other, None), message: other.to_string(), dirty, statement: None }
            }
        }
    }
}

/// The longest time the runner leaves its connection idle, for the
/// session's wait/net timeouts: a backoff, a `wait` for blockers, a
/// sidecar report (up to 75 s) — four times that, at least 10 minutes.
pub fn idle_bound(t: &Tuning) -> Duration {
    let gap = t.retry_max.max(t.lock_timeout).max(Duration::from_secs(75));
    (gap * 4).max(Duration::from_secs(600))
}

/// Runs `apply`; an error is already logged and reported to the sidecar
/// ([`RunnerError::exit_code`] gives the run's exit code).
pub(crate) async fn run(s: &ApplySettings) -> Result<(), RunnerError> {
    let started = Instant::now();
    announce(s);
    // The mutex first: nothing is read before the sidecar vouches for the lease.
    if let Err(e) = s.guard.permit().await {
        tracing::error!(error = %e, "refusing to touch the database: the sidecar does not vouch for a live lease");
        return Err(RunnerError::Unvouched(e));
    }
    let lock = (!s.server_lock_timeouts).then_some(s.tuning.lock_timeout);
    let mut session = match s.target.connect(lock, idle_bound(&s.tuning)).await {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "failed to open the session");
            s.guard.outcome(false, None, Some(e.to_string())).await;
            return Err(RunnerError::Connect(e));
        }
    };
    s.session_id.store(session.id, std::sync::atomic::Ordering::SeqCst);
    match session.settings().await {
        Ok((lock_wait, innodb_wait, wait)) => tracing::info!(
            server = %session.version,
            connection = session.id,
            lock_wait_timeout_s = lock_wait,
            innodb_lock_wait_timeout_s = innodb_wait,
            wait_timeout_s = wait,
            "session open"
        ),
        Err(e) => return Err(failed_at_start(&s.guard, "failed to read the session settings", e).await),
    }
    // The schema's run lock before the history is read: a second runner
    // (by hand, a pipeline, an older Job) waits here instead of applying
    // what this one applies.
    run_lock(&s.guard, &mut session).await?;
    let rows = read_history(s, &mut session).await?;
    let plan = match history::plan(&s.revisions, &rows) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(error = %e, "refusing to apply");
            s.guard.outcome(false, None, Some(e.to_string())).await;
            return Err(RunnerError::Plan(e));
        }
    };
    check_packets(&s.guard, &mut session, &plan.pending).await?;
    check_sql_mode(&s.guard, &mut session, &plan.pending).await?;
    for v in &plan.unknown {
        tracing::warn!(revision = v, "applied revision V{v} has no file in the directory (an older directory?)");
    }
    tracing::info!(
        applied = rows.iter().filter(|r| r.state == State::Applied).count(),
        pending = plan.pending.len(),
        "history read under {}",
        if matches!(s.guard, crate::guard::Guard::Alone) {
            "the run lock"
        } else {
            "the run lock and the migration mutex"
        }
    );
    let baseline = match session.session_state().await {
        Ok(b) => b,
        Err(e) => return Err(failed_at_start(&s.guard, "failed to read the session settings", e).await),
    };
    let mut last = None;
    for rev in plan.pending {
        match revision(s, &mut session, rev, &baseline).await {
            Ok(attempts) => {
                tracing::info!(
                    revision = rev.version,
                    attempts,
                    "revision V{} applied ({})",
                    rev.version,
                    crate::revision::escape(&rev.description)
                );
                last = Some(rev.version);
            }
            Err((f, attempts)) => {
                let exhausted = f.retried() && attempts >= s.tuning.max_attempts;
                report(&mut session, &s.guard, rev, &f, attempts, exhausted).await;
                s.guard.outcome(false, last, Some(format!("V{}: {}", rev.version, f.message))).await;
                return Err(RunnerError::Revision { version: rev.version, failure: f, exhausted });
            }
        }
    }
    let elapsed_ms = started.elapsed().as_millis() as u64;
    if let Some(v) = last {
        tracing::info!(last = v, elapsed_ms, "done: every pending revision applied, the last V{v}");
    } else {
        tracing::info!(elapsed_ms, "done: no revision was pending");
    }
    s.guard.outcome(true, last, None).await;
    Ok(())
}

/// The first log lines: alone or behind the sidecar, and the settings.
fn announce(s: &ApplySettings) {
    match &s.guard {
        Guard::Alone => tracing::info!(
            version = env!("CARGO_PKG_VERSION"),
            target = %s.target.display,
            "bloodraven-migrate starting alone: no sidecar socket, so no deploy lease and no fence (a second runner on this schema still waits on its run lock)"
        ),
        Guard::Sidecar(p) => tracing::info!(
            version = env!("CARGO_PKG_VERSION"),
            target = %s.target.display,
            socket = %p.display(),
            "bloodraven-migrate starting behind the sidecar: permission before each revision, DDL boundary reported"
        ),
    }
    tracing::info!(
        revisions = s.revisions.len(),
        lock_timeout_s = s.tuning.lock_timeout.as_secs(),
        server_lock_timeouts = s.server_lock_timeouts,
        max_attempts = s.tuning.max_attempts,
        retry_min_s = s.tuning.retry_min.as_secs(),
        retry_max_s = s.tuning.retry_max.as_secs(),
        on_blocker = ?s.on_blocker,
        "settings"
    );
}

/// Creates the history table when missing and reads it (under the run
/// lock); with an empty history, refuses another tool's schema
/// ([`foreign_history`]). `Err` is already logged and reported.
async fn read_history(s: &ApplySettings, session: &mut Session) -> Result<Vec<history::Row>, RunnerError> {
    let exists = match session.has_history().await {
        Ok(e) => e,
        Err(e) => return Err(failed_at_start(&s.guard, &format!("failed to read {}", history::TABLE), e).await),
    };
    let rows = if exists {
        match session.history().await {
            Ok(r) => r,
            Err(e @ crate::db::DbError::ForeignHistory { .. }) => {
                tracing::error!(error = %e, "refusing to apply");
                s.guard.outcome(false, None, Some(e.to_string())).await;
                return Err(RunnerError::NotOurHistory(e));
            }
            Err(e) => return Err(failed_at_start(&s.guard, &format!("failed to read {}", history::TABLE), e).await),
        }
    } else {
        Vec::new()
    };
    // Before anything is created, so a refused run changes nothing.
    if rows.is_empty() && !s.ignore_foreign_history {
        foreign_history(&s.guard, session).await?;
    }
    // Created only when missing: a fenced (read-only) site refuses even a no-op CREATE.
    if !exists && let Err(e) = session.ensure_history().await {
        return Err(failed_at_start(&s.guard, &format!("failed to create {}", history::TABLE), e).await);
    }
    Ok(rows)
}

/// With an empty history: refuses when another migration tool's history
/// table is in the schema (Flyway refuses a non-empty schema without its
/// history the same way): that tool most likely applied the first
/// revisions already, and running them again would fail at best. The
/// message says how to adopt the schema (`baseline`) or go on anyway.
async fn foreign_history(guard: &Guard, session: &mut Session) -> Result<(), RunnerError> {
    let found = match session.foreign_histories().await {
        Ok(f) => f,
        Err(e) => return Err(failed_at_start(guard, "failed to look for other tools' history tables", e).await),
    };
    if found.is_empty() {
        return Ok(());
    }
    let tables = found.iter().map(|f| f.table).collect::<Vec<_>>().join(", ");
    let hint = match found.iter().find_map(|f| f.newest.as_deref()) {
        Some(v) => format!(
            "Flyway applied up to version {v}: if your revision files continue its numbering, run `bloodraven-migrate baseline {v}`"
        ),
        None => "run `bloodraven-migrate baseline V` with V the newest of your revisions that tool applied".to_owned(),
    };
    let message = format!(
        "the schema has no bloodraven-migrate history but holds {tables}, another migration tool's history: \
         its revisions are most likely in place already, and applying from V1 would run them again. {hint}, \
         then apply; or pass --ignore-foreign-history to apply from V1 anyway. Nothing was changed"
    );
    tracing::error!("{message}");
    guard.outcome(false, None, Some(message.clone())).await;
    Err(RunnerError::ForeignHistory(message))
}

/// A failure before any revision, logged and reported; its exit code is
/// classified like a revision's (a read-only site is fenced, a lost
/// connection is lost).
async fn failed_at_start(guard: &Guard, what: &str, e: crate::db::DbError) -> RunnerError {
    let f = Failure::of_db_error(&e, false);
    tracing::error!(code = %f.code(), error = %e, "{what}; no revision was started");
    guard.outcome(false, None, Some(format!("{what}: {e}"))).await;
    RunnerError::AtStart { what: what.to_owned(), source: e }
}

/// Logs a failed revision the way a person reads it: its own error, what
/// it means, and for lock contention who held the lock (`diagnose`'s output).
///
/// Behind the sidecar, a DDL revision that failed ended its run inside the
/// DDL boundary: the sidecar exits 93 and the group requires a person to
/// verify the schema before any retry. The runner's advice says so, rather
/// than a plain "run again" that the sidecar's verdict contradicts.
async fn report(session: &mut Session, guard: &Guard, rev: &Revision, f: &Failure, attempts: u32, exhausted: bool) {
    let statement = f.statement.map_or_else(String::new, |i| format!(" at statement {i}"));
    let meaning = meaning(f, rev, attempts, exhausted);
    let meaning = if matches!(guard, Guard::Sidecar(_)) && rev.has_ddl() && !matches!(f.cause, Cause::Sidecar) {
        format!(
            "{meaning}. Behind the sidecar the run ended inside its DDL: it ends as schema verification required (exit 93); a person checks the schema and clears the verification on the group before the run is repeated"
        )
    } else {
        meaning
    };
    tracing::error!(
        revision = rev.version,
        code = %f.code(),
        attempts,
        dirty = f.dirty,
        "revision V{} failed{statement}: {} — {meaning}",
        rev.version,
        f.message
    );
    if matches!(f.cause, Cause::Db(Class::LockContention, _) | Cause::Blocked { .. }) {
        match blockers::diagnose(session).await {
            Ok(d) => {
                for line in d.to_string().lines() {
                    tracing::error!("diagnose: {line}");
                }
            }
            Err(e) => tracing::warn!(error = %e, "failed to read the lock-wait graph"),
        }
    }
}

/// What a failed revision means, in a person's words.
fn meaning(f: &Failure, rev: &Revision, attempts: u32, exhausted: bool) -> String {
    match (&f.cause, f.dirty) {
        (_, true) => format!(
            "revision V{v} is dirty: some of it may be in place; check the schema, then `bloodraven-migrate resolve {v} --applied` or `--rolled-back`",
            v = rev.version
        ),
        (Cause::Db(Class::LockContention, _) | Cause::Blocked { .. }, _) if exhausted => format!(
            "lock contention on all {attempts} attempts: something holds a lock on the revision's tables (see below); end it or drain the readers, not a longer lock timeout"
        ),
        (Cause::Blocked { .. }, _) => "blockers seen before the DDL and --on-blocker fail: nothing was sent".into(),
        (Cause::Db(Class::StatementTimeout, _), _) => {
            "statement timeout: too slow rather than unlucky, not retried; drain the readers or make the revision cheaper".into()
        }
        (Cause::Db(Class::Killed, _), _) => "the query was killed by someone; not retried".into(),
        (Cause::Db(Class::ReadOnly, _), _) => {
            "the site is read-only: it was fenced (a failover?); not retried, and never followed to another site".into()
        }
        (Cause::Db(Class::ConnectionLost, _), _) => {
            "the connection was lost: not reconnected; the revision is not recorded as applied (a DML revision rolled back with it)".into()
        }
        (Cause::Sidecar, _) => "the sidecar stopped the run (fenced, or it could not vouch for the lease)".into(),
        (Cause::Db(..), _) => "the revision's own error: not retried; fix the revision and run again".into(),
    }
}

/// Applies one revision with its retries; Ok(attempts) or the last failure.
async fn revision(
    s: &ApplySettings,
    session: &mut Session,
    rev: &Revision,
    baseline: &[(&'static str, Option<String>)],
) -> Result<u32, (Failure, u32)> {
    let mut rng = rand::rng();
    let mut attempt = 1;
    loop {
        if let Err(e) = s.guard.permit().await {
            let f = Failure { cause: Cause::Sidecar, message: e.to_string(), dirty: false, statement: None };
            if let GuardError::Refused(_) = e {
                tracing::error!(revision = rev.version, "fenced: stopping before revision V{}", rev.version);
            }
            return Err((f, attempt));
        }
        // Each attempt starts from the run's session settings: nothing a revision (or a failed attempt) SET carries over.
        match session.restore_state(baseline).await {
            Ok(changed) if !changed.is_empty() => tracing::info!(
                revision = rev.version,
                settings = ?changed,
                "set back session settings an earlier revision or attempt changed"
            ),
            Ok(_) => {}
            Err(e) => return Err((Failure::of_db_error(&e, false), attempt)),
        }
        tracing::info!(revision = rev.version, attempt, ddl = rev.has_ddl(), "revision V{} starting", rev.version);
        let result = if rev.has_ddl() {
            ddl_attempt(s, session, rev, attempt).await
        } else {
            dml_attempt(session, rev, attempt).await
        };
        let f = match result {
            Ok(()) => return Ok(attempt),
            Err(f) => f,
        };
        if !f.retried() || attempt >= s.tuning.max_attempts {
            return Err((f, attempt));
        }
        let wait = crate::retry::backoff(attempt, s.tuning.retry_min, s.tuning.retry_max, &mut rng);
        // The contract (docs/migrate.md, "Retries"): a `retrying in Ns` line with the error code.
        tracing::warn!(
            revision = rev.version,
            attempt,
            max_attempts = s.tuning.max_attempts,
            code = %f.code(),
            wait_ms = wait.as_millis() as u64,
            "revision V{} lost a lock race ({}: {}); retrying in {:.1}s",
            rev.version,
            f.code(),
            f.message,
            wait.as_secs_f64()
        );
        tokio::time::sleep(wait).await;
        attempt += 1;
    }
}

/// A DML revision: one transaction with its history row.
async fn dml_attempt(session: &mut Session, rev: &Revision, attempt: u32) -> Result<(), Failure> {
    session.mark_start().await.map_err(|e| Failure::of_db_error(&e, false))?;
    session.conn.query_drop("START TRANSACTION").await.map_err(|e| Failure::db(&e, false, None))?;
    for (i, st) in rev.statements.iter().enumerate() {
        if let Err(e) = session.conn.query_drop(&st.sql).await {
            // InnoDB rolls back only the statement on 1205; the revision goes whole.
            let _ = session.conn.query_drop("ROLLBACK").await;
            return Err(Failure::db(&e, false, Some(i + 1)));
        }
    }
    let recorded = session.write_row(rev, State::Applied, attempt, true).await;
    if let Err(e) = recorded {
        let _ = session.conn.query_drop("ROLLBACK").await;
        return Err(match e {
            crate::db::DbError::Query(e) => Failure::db(&e, false, None),
            other => Failure {
                cause: Cause::Db(Class::Other, None),
                message: other.to_string(),
                dirty: false,
                statement: None,
            },
        });
    }
    // A lost connection here leaves the outcome to the history row, committed with the revision or not at all.
    session.conn.query_drop("COMMIT").await.map_err(|e| Failure::db(&e, false, None))
}

/// A DDL revision: `started` first, its statements one by one, `applied` last.
async fn ddl_attempt(s: &ApplySettings, session: &mut Session, rev: &Revision, attempt: u32) -> Result<(), Failure> {
    s.guard.mark(MarkEvent::DdlStarted, rev.version).await.map_err(|e| Failure {
        cause: Cause::Sidecar,
        message: format!("failed to report ddl-started: {e}"),
        dirty: false,
        statement: None,
    })?;
    set_unsent(s, Some(rev.version));
    session.write_row(rev, State::Started, attempt, false).await.map_err(|e| Failure::of_db_error(&e, false))?;
    tracing::info!(
        revision = rev.version,
        "revision V{} marked started (ddlStarted) before its first statement",
        rev.version
    );
    for (i, st) in rev.statements.iter().enumerate() {
        if st.kind == Kind::Ddl
            && let Err(f) = preflight(s, session, rev, i, &st.tables).await
        {
            return Err(clean_or_dirty(session, rev, f, i).await);
        }
        // From here on a statement may have reached the server.
        set_unsent(s, None);
        if let Err(e) = session.conn.query_drop(&st.sql).await {
            let f = Failure::db(&e, false, Some(i + 1));
            return Err(clean_or_dirty(session, rev, f, i).await);
        }
    }
    session.finish_row(rev.version, attempt).await.map_err(|e| Failure::of_db_error(&e, true))?;
    if let Err(e) = s.guard.mark(MarkEvent::DdlFinished, rev.version).await {
        tracing::warn!(revision = rev.version, error = %e, "applied, but the sidecar did not take ddl-finished");
    }
    Ok(())
}

/// A DDL revision's failure at statement index `i`: clean (row removed)
/// only when no statement took effect and the server answered; else dirty.
async fn clean_or_dirty(session: &mut Session, rev: &Revision, mut f: Failure, i: usize) -> Failure {
    let lost = matches!(f.cause, Cause::Db(Class::ConnectionLost, _));
    if i == 0 && !lost {
        match session.clear_row(rev.version).await {
            Ok(()) => return f,
            Err(e) => tracing::error!(error = %e, "failed to clear the started row of a revision that had no effect"),
        }
    }
    f.dirty = true;
    f
}

#[cfg(test)]
mod tests;
