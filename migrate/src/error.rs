//! Why a command of the runner did not succeed — `apply` stopping short of
//! every pending revision (from a bad setting before anything is touched
//! to a fence's signal), or a person's tool (`status`, `resolve`,
//! `baseline`, `diagnose`) refusing or failing — as one type, and the one
//! place that turns it into an exit code ([`RunnerError::exit_code`]; the
//! codes are [`crate::apply::exit`], documented in docs/migrate.md, "Exit
//! codes").
//!
//! Each error is reported where it arises, with the words that fit the
//! situation (`apply` logs it and tells the sidecar, `mark outcome
//! failed`; a person's tool prints it on standard error); the caller only
//! maps it to the process's exit code.

use crate::apply::{Cause, Failure, exit};
use crate::classify::Class;
use crate::db::DbError;
use crate::guard::GuardError;
use crate::history::PlanError;
use crate::revision::RevisionError;

/// Why a command of the runner did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
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
    /// The revision directory (`--dir`) cannot be read or holds a bad file.
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
    /// [`crate::apply::RUN_LOCK_WAIT`].
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
    /// A person's tool found the schema's run lock held: a run is applying
    /// revisions there right now.
    #[error("{0}")]
    Busy(String),
    /// A person's tool could not take the schema's run lock.
    #[error("failed to take the schema's run lock")]
    RunLock(#[source] DbError),
    /// A person's tool refuses to change the history (the change is not
    /// allowed, or the history changed under it).
    #[error("{0}")]
    Refused(String),
    /// `status`: the history would refuse `apply`.
    #[error("apply would refuse")]
    WouldRefuse(#[source] PlanError),
    /// A person's tool failed on the database.
    #[error("{what}")]
    Database {
        /// The step, in words (`failed to record the baseline`).
        what: String,
        /// The database's error.
        #[source]
        source: DbError,
    },
    /// `diagnose` could not read the lock information.
    #[error("failed to read the lock information")]
    Diagnose(#[source] mysql_async::Error),
    /// `resolve` found no state to move the row to.
    #[error("no state to resolve to")]
    NoTransition,
    /// A flag a person's tool takes is malformed (nothing touched).
    #[error("{0}")]
    Usage(String),
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

impl RunnerError {
    /// The exit code of a run that ended with this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            RunnerError::Tuning(_)
            | RunnerError::NoRevisions
            | RunnerError::Revisions(_)
            | RunnerError::Target(_)
            | RunnerError::Signals
            | RunnerError::Unfit(_)
            | RunnerError::Usage(_) => exit::USAGE,
            RunnerError::NoLease => exit::NO_LEASE,
            RunnerError::Stopped(_) | RunnerError::Unvouched(_) => exit::FENCED,
            RunnerError::Connect(_)
            | RunnerError::RunLock(_)
            | RunnerError::Database { .. }
            | RunnerError::Diagnose(_)
            | RunnerError::NoTransition => exit::FAILED,
            RunnerError::AtStart { source, .. } => failure_code(&Failure::of_db_error(source, false), false),
            RunnerError::RunLockHeld(_) => exit::CONTENTION,
            RunnerError::Plan(_)
            | RunnerError::NotOurHistory(_)
            | RunnerError::ForeignHistory(_)
            | RunnerError::Busy(_)
            | RunnerError::Refused(_)
            | RunnerError::WouldRefuse(_) => exit::REFUSED,
            RunnerError::Revision { failure, exhausted, .. } => failure_code(failure, *exhausted),
        }
    }
}

/// The code of a failed attempt: dirty above all, then by its cause.
fn failure_code(f: &Failure, exhausted: bool) -> i32 {
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
    fn every_stop_but_a_failed_revision_keeps_its_documented_code() {
        let not_ours = || DbError::ForeignHistory { schema: "app".into(), missing: "checksum".into() };
        for (e, code) in [
            (RunnerError::Tuning("retry-min above retry-max".into()), exit::USAGE),
            (RunnerError::NoLease, exit::NO_LEASE),
            (RunnerError::NoRevisions, exit::USAGE),
            (RunnerError::Target(DbError::NoUrl), exit::USAGE),
            (RunnerError::Signals, exit::USAGE),
            (RunnerError::Stopped("SIGTERM"), exit::FENCED),
            (RunnerError::Unvouched(GuardError::Refused("fenced".into())), exit::FENCED),
            (RunnerError::Connect(DbError::NoUrl), exit::FAILED),
            (RunnerError::AtStart { what: "failed to read sql_mode".into(), source: DbError::NoUrl }, exit::FAILED),
            (RunnerError::RunLockHeld("held".into()), exit::CONTENTION),
            (RunnerError::Plan(PlanError::UnknownState { version: 3, state: "odd".into() }), exit::REFUSED),
            (RunnerError::NotOurHistory(not_ours()), exit::REFUSED),
            (RunnerError::ForeignHistory("flyway".into()), exit::REFUSED),
            (RunnerError::Unfit("too large".into()), exit::USAGE),
            (RunnerError::Usage("--description".into()), exit::USAGE),
            (RunnerError::Busy("a run holds it".into()), exit::REFUSED),
            (RunnerError::RunLock(DbError::NoUrl), exit::FAILED),
            (RunnerError::Refused("V3 changed under us".into()), exit::REFUSED),
            (RunnerError::WouldRefuse(PlanError::UnknownState { version: 3, state: "odd".into() }), exit::REFUSED),
            (
                RunnerError::Database { what: "failed to record the baseline".into(), source: DbError::NoUrl },
                exit::FAILED,
            ),
            (RunnerError::NoTransition, exit::FAILED),
        ] {
            assert_eq!(e.exit_code(), code, "{e:?}");
        }
    }
}
