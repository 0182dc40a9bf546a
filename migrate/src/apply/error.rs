//! Why `apply` stops short of applying every pending revision — from a
//! bad setting before anything is touched to a fence's signal — as one
//! type, and the one place that turns it into an exit code
//! ([`ApplyError::exit_code`]; the codes are [`super::exit`], documented
//! in docs/migrate.md, "Exit codes").
//!
//! Each error is logged and reported to the sidecar (`mark outcome
//! failed`) where it arises, with the words that fit the situation; the
//! caller only maps it to the process's exit code.

use crate::classify::Class;
use crate::db::DbError;
use crate::guard::GuardError;
use crate::history::PlanError;
use crate::revision::RevisionError;

use super::{Cause, Failure, exit};

/// Why a run of `apply` ended before every pending revision was applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The tuning flags do not hold together (nothing touched).
    #[error("bad settings: {0}")]
    Tuning(String),
    /// `--require-lease` and no sidecar socket: no deploy lease, no fence
    /// (nothing read, nothing touched).
    #[error("--require-lease is set but there is no sidecar socket")]
    NoLease,
    /// The revision directory holds no revision: a wrong `--dir`, or a
    /// mount that came up empty, must not pass for "nothing pending".
    #[error("no revision in the directory")]
    NoRevisions,
    /// The revision directory cannot be read or holds a bad file.
    #[error("bad revision directory")]
    Revisions(#[source] RevisionError),
    /// The database settings do not name a database (nothing touched).
    #[error("bad database settings")]
    Target(#[source] DbError),
    /// The signal handlers could not be installed.
    #[error("failed to install the signal handlers")]
    Signals,
    /// Stopped by SIGTERM (the sidecar's fence) or SIGINT; the revision in
    /// flight is not recorded as applied.
    #[error("stopped by {0}")]
    Stopped(&'static str),
    /// Before the database was touched, the sidecar did not vouch for a
    /// live lease (refused, or unreachable).
    #[error("the sidecar does not vouch for a live lease")]
    Unvouched(#[source] GuardError),
    /// The session could not be opened.
    #[error("failed to open the session")]
    Connect(#[source] DbError),
    /// A step before the first revision failed on the database (reading
    /// the session, the run lock, the history); classified like a
    /// revision's failure: a read-only site is fenced, a lost connection is
    /// lost.
    #[error("{what}")]
    AtStart {
        /// The step, in words (`failed to read sql_mode`).
        what: String,
        /// The database's error.
        #[source]
        source: DbError,
    },
    /// Another run held the schema's run lock for all of
    /// [`super::RUN_LOCK_WAIT`].
    #[error("{0}")]
    RunLockHeld(String),
    /// The history refuses the run: a dirty revision, a changed checksum,
    /// out of order.
    #[error("refusing to apply")]
    Plan(#[source] PlanError),
    /// The history table is not this runner's.
    #[error("refusing to apply")]
    NotOurHistory(#[source] DbError),
    /// An empty history in a schema another migration tool manages.
    #[error("{0}")]
    ForeignHistory(String),
    /// A pending revision the server cannot take as written (a statement
    /// larger than `max_allowed_packet`, a backslash under
    /// `NO_BACKSLASH_ESCAPES`): refused before the first revision.
    #[error("{0}")]
    Unfit(String),
    /// A revision failed (after its retries, if any).
    #[error("revision V{version} failed: {}", failure.message)]
    Revision {
        /// The revision.
        version: u64,
        /// Its last attempt's failure.
        failure: Failure,
        /// Whether the failure was retried on every allowed attempt.
        exhausted: bool,
    },
}

impl ApplyError {
    /// The exit code of a run that ended with this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            ApplyError::Tuning(_)
            | ApplyError::NoRevisions
            | ApplyError::Revisions(_)
            | ApplyError::Target(_)
            | ApplyError::Signals
            | ApplyError::Unfit(_) => exit::USAGE,
            ApplyError::NoLease => exit::NO_LEASE,
            ApplyError::Stopped(_) | ApplyError::Unvouched(_) => exit::FENCED,
            ApplyError::Connect(_) => exit::FAILED,
            ApplyError::AtStart { source, .. } => failure_code(&Failure::of_db_error(source, false), false),
            ApplyError::RunLockHeld(_) => exit::CONTENTION,
            ApplyError::Plan(_) | ApplyError::NotOurHistory(_) | ApplyError::ForeignHistory(_) => exit::REFUSED,
            ApplyError::Revision { failure, exhausted, .. } => failure_code(failure, *exhausted),
        }
    }
}

/// The code of a failed attempt: dirty above all, then by its cause.
pub(super) fn failure_code(f: &Failure, exhausted: bool) -> i32 {
    if f.dirty {
        return exit::DIRTY;
    }
    match f.cause {
        Cause::Db(Class::ConnectionLost, _) => exit::CONNECTION_LOST,
        Cause::Db(Class::ReadOnly, _) | Cause::Sidecar => exit::FENCED,
        Cause::Db(Class::LockContention, _) if exhausted => exit::CONTENTION,
        Cause::Blocked { .. } => exit::CONTENTION,
        Cause::Db(..) => exit::FAILED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stop_before_a_revision_keeps_its_documented_code() {
        let not_ours = || DbError::ForeignHistory { schema: "app".into(), missing: "checksum".into() };
        for (e, code) in [
            (ApplyError::Tuning("retry-min above retry-max".into()), exit::USAGE),
            (ApplyError::NoLease, exit::NO_LEASE),
            (ApplyError::NoRevisions, exit::USAGE),
            (ApplyError::Target(DbError::NoUrl), exit::USAGE),
            (ApplyError::Signals, exit::USAGE),
            (ApplyError::Stopped("SIGTERM"), exit::FENCED),
            (ApplyError::Unvouched(GuardError::Refused("fenced".into())), exit::FENCED),
            (ApplyError::Connect(DbError::NoUrl), exit::FAILED),
            (ApplyError::AtStart { what: "failed to read sql_mode".into(), source: DbError::NoUrl }, exit::FAILED),
            (ApplyError::RunLockHeld("held".into()), exit::CONTENTION),
            (ApplyError::Plan(PlanError::UnknownState { version: 3, state: "odd".into() }), exit::REFUSED),
            (ApplyError::NotOurHistory(not_ours()), exit::REFUSED),
            (ApplyError::ForeignHistory("flyway".into()), exit::REFUSED),
            (ApplyError::Unfit("too large".into()), exit::USAGE),
        ] {
            assert_eq!(e.exit_code(), code, "{e:?}");
        }
    }
}
