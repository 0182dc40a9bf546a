//! The schema's run lock: taken before the history is read, waited for
//! while another run holds it, and who holds it named in the log.

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable as _;

use super::failed_at_start;
use crate::db::Session;
use crate::error::RunnerError;
use crate::guard::Guard;

/// How long `apply` waits for another run on the same schema to end.
pub const RUN_LOCK_WAIT: Duration = Duration::from_secs(600);

/// Takes the schema's run lock ([`crate::db::run_lock_name`]), waiting up
/// to [`RUN_LOCK_WAIT`] for another run to end, logging who holds it.
pub(super) async fn run_lock(guard: &Guard, session: &mut Session) -> Result<(), RunnerError> {
    let until = Instant::now() + RUN_LOCK_WAIT;
    // The first try does not wait, so that a waiting run says at once why it waits.
    let mut wait = Duration::ZERO;
    let mut said: Option<(u64, Instant)> = None;
    loop {
        let tried = session.try_run_lock(wait).await;
        wait = Duration::from_secs(5);
        match tried {
            Ok(None) => {
                tracing::info!(
                    lock = %crate::db::run_lock_name(&session.schema),
                    "holding the schema's run lock: no other bloodraven-migrate applies or resolves revisions here until this run ends"
                );
                return Ok(());
            }
            Ok(Some(holder)) if Instant::now() < until => {
                // Said when the holder changes and once a minute, not at every try.
                if said.is_none_or(|(h, at): (u64, Instant)| h != holder || at.elapsed() >= Duration::from_secs(60)) {
                    said = Some((holder, Instant::now()));
                    let doing = holder_doing(session, holder).await;
                    tracing::warn!(
                        holder_connection = holder,
                        "another bloodraven-migrate run holds this schema's run lock (connection {holder}{doing}); waiting up to {} s for it to end before reading the history",
                        until.saturating_duration_since(Instant::now()).as_secs()
                    );
                }
            }
            Ok(Some(holder)) => {
                let doing = holder_doing(session, holder).await;
                let why = format!(
                    "another bloodraven-migrate run (connection {holder}{doing}) held this schema's run lock for {} s; let it finish, or end it (KILL {holder})",
                    RUN_LOCK_WAIT.as_secs()
                );
                tracing::error!(holder_connection = holder, "{why}; no revision was started");
                guard.outcome(false, None, Some(why.clone())).await;
                return Err(RunnerError::RunLockHeld(why));
            }
            Err(e) => return Err(failed_at_start(guard, "failed to take the schema's run lock", e).await),
        }
    }
}

/// What the run lock's holder is doing, for the log: a runner killed
/// mid-revision (`kill -9`, a lost Pod) leaves its statement running on the
/// server, and that session keeps the lock until the statement ends; with
/// the same account and a statement running, it is named as a likely
/// orphan with the `KILL` that ends it. Empty when it cannot be seen.
async fn holder_doing(session: &mut Session, holder: u64) -> String {
    let me: Option<String> =
        session.conn.query_first("SELECT SUBSTRING_INDEX(CURRENT_USER(), '@', 1)").await.ok().flatten();
    match session.connection(holder).await {
        Ok(Some((user, secs, Some(statement)))) if me.as_deref() == Some(user.as_str()) => format!(
            ", your account, running for {secs} s: {}; if no other run of yours is alive, it is the statement of a dead run, which the server runs on after its client died — end it with KILL {holder}",
            crate::redact::redact(&statement)
        ),
        Ok(Some((user, secs, Some(statement)))) => {
            format!(", account {user}, running for {secs} s: {}", crate::redact::redact(&statement))
        }
        Ok(Some((user, secs, None))) => format!(", account {user}, idle for {secs} s"),
        Ok(None) | Err(_) => String::new(),
    }
}
