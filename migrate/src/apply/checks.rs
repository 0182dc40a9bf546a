//! The looks before statements are sent: the blocker look before a DDL
//! statement with `--on-blocker`, and the refusals before the first
//! revision (a statement larger than the server takes, a backslash under
//! `NO_BACKSLASH_ESCAPES`).

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable as _;

use super::{ApplySettings, Cause, Failure, failed_at_start};
use crate::blockers::{self, Found};
use crate::classify;
use crate::config::OnBlocker;
use crate::db::Session;
use crate::error::RunnerError;
use crate::guard::Guard;
use crate::revision::Revision;

/// The pre-flight look before a DDL statement, and `--on-blocker`.
pub(super) async fn preflight(
    s: &ApplySettings,
    session: &mut Session,
    rev: &Revision,
    index: usize,
    tables: &[crate::revision::TableRef],
) -> Result<(), Failure> {
    let look = |found: &Found| {
        for b in &found.blockers {
            tracing::warn!(
                revision = rev.version,
                connection = b.id,
                transaction_age_s = b.trx_age,
                idle_s = b.idle_for,
                query = %blockers::one_line(&b.query, 200),
                exact = found.exact,
                "possible blocker before DDL: {b}"
            );
        }
    };
    let found = match blockers::preflight(session, tables).await {
        Ok(found) => found,
        // The account may not read other sessions (no PROCESS): the look is blind, not the revision wrong.
        Err(mysql_async::Error::Server(e)) if classify::is_privilege(e.code) => {
            let why = format!(
                "cannot look for blockers before the DDL: the account may not read other sessions ({}: {}); grant it PROCESS",
                e.code,
                crate::redact::redact(&e.message)
            );
            if s.on_blocker == OnBlocker::Fail {
                return Err(Failure {
                    cause: Cause::Blocked { retried: false },
                    message: format!("{why} (--on-blocker fail: nothing is sent without the look)"),
                    dirty: false,
                    statement: Some(index + 1),
                });
            }
            tracing::warn!(
                revision = rev.version,
                code = e.code,
                "{why}; sending the DDL without it (bounded by the lock timeout)"
            );
            return Ok(());
        }
        Err(e) => return Err(Failure::db(&e, index > 0, Some(index + 1))),
    };
    if found.blockers.is_empty() {
        return Ok(());
    }
    look(&found);
    match s.on_blocker {
        OnBlocker::Proceed => Ok(()),
        OnBlocker::Fail => Err(Failure {
            cause: Cause::Blocked { retried: false },
            message: format!("{} session(s) hold or wait for locks on {}", found.blockers.len(), names(tables)),
            dirty: false,
            statement: Some(index + 1),
        }),
        OnBlocker::Wait => {
            let until = Instant::now() + s.tuning.lock_timeout;
            loop {
                tokio::time::sleep(Duration::from_millis(250)).await;
                let found = blockers::preflight(session, tables)
                    .await
                    .map_err(|e| Failure::db(&e, index > 0, Some(index + 1)))?;
                if found.blockers.is_empty() {
                    tracing::info!(revision = rev.version, "blockers gone: sending the DDL");
                    return Ok(());
                }
                if Instant::now() >= until {
                    if index > 0 {
                        // Past the first statement the revision cannot be retried: queue, bounded by the lock timeout.
                        tracing::warn!(
                            revision = rev.version,
                            "blockers still there; sending the DDL (bounded by the lock timeout)"
                        );
                        return Ok(());
                    }
                    look(&found);
                    return Err(Failure {
                        cause: Cause::Blocked { retried: true },
                        message: format!(
                            "{} session(s) still hold or wait for locks on {} after {} s",
                            found.blockers.len(),
                            names(tables),
                            s.tuning.lock_timeout.as_secs()
                        ),
                        dirty: false,
                        statement: Some(index + 1),
                    });
                }
            }
        }
    }
}

/// A statement the server cannot take would fail mid-run, after earlier
/// revisions took effect: refused before the first revision.
pub(super) async fn check_packets(
    guard: &Guard,
    session: &mut Session,
    pending: &[&Revision],
) -> Result<(), RunnerError> {
    let max = match session.max_packet().await {
        Ok(max) => max,
        Err(e) => return Err(failed_at_start(guard, "failed to read max_allowed_packet", e).await),
    };
    let Some((rev, index, len)) = oversized(pending, max) else { return Ok(()) };
    let why = format!(
        "{}: statement {index} is {len} bytes, more than the server takes (max_allowed_packet = {max}); \
         split it into smaller statements, or raise max_allowed_packet",
        rev.file
    );
    tracing::error!("{why}; no revision was started");
    guard.outcome(false, None, Some(why.clone())).await;
    Err(RunnerError::Unfit(why))
}

/// The splitter reads a backslash in a string as an escape (the servers'
/// default); under `NO_BACKSLASH_ESCAPES` the server does not, so a
/// revision with a backslash could be split where the server would not —
/// statements merged, or DDL read as DML. Refused before the first revision.
pub(super) async fn check_sql_mode(
    guard: &Guard,
    session: &mut Session,
    pending: &[&Revision],
) -> Result<(), RunnerError> {
    let mode: Option<String> = match session.conn.query_first("SELECT @@SESSION.sql_mode").await {
        Ok(m) => m,
        Err(e) => return Err(failed_at_start(guard, "failed to read sql_mode", crate::db::DbError::Query(e)).await),
    };
    if !mode.unwrap_or_default().to_ascii_uppercase().contains("NO_BACKSLASH_ESCAPES") {
        return Ok(());
    }
    let Some(rev) = pending.iter().find(|r| r.statements.iter().any(|st| st.sql.contains('\\'))) else {
        return Ok(());
    };
    let why = format!(
        "{}: has a backslash, and the server's sql_mode has NO_BACKSLASH_ESCAPES, under which the runner's statement split \
         (which reads a backslash as an escape) may differ from the server's; write the revision without backslashes, \
         or run with a sql_mode without NO_BACKSLASH_ESCAPES",
        rev.file
    );
    tracing::error!("{why}; no revision was started");
    guard.outcome(false, None, Some(why.clone())).await;
    Err(RunnerError::Unfit(why))
}

/// The first statement (revision, 1-based index, length) of `pending`
/// that the server would refuse as a packet larger than `max` bytes (with
/// room for the packet's header and command byte).
pub(super) fn oversized<'a>(pending: &[&'a Revision], max: u64) -> Option<(&'a Revision, usize, usize)> {
    pending.iter().find_map(|r| {
        r.statements.iter().enumerate().find_map(|(i, st)| {
            (st.sql.len() as u64).saturating_add(1024).gt(&max).then_some((*r, i + 1, st.sql.len()))
        })
    })
}

fn names(tables: &[crate::revision::TableRef]) -> String {
    let n: Vec<String> =
        tables.iter().map(|(s, t)| s.as_ref().map_or_else(|| t.clone(), |s| format!("{s}.{t}"))).collect();
    if n.is_empty() { "its tables".into() } else { n.join(", ") }
}
