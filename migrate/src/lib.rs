//! Bloodraven's migration runner, `bloodraven-migrate`, for MySQL and
//! MariaDB (docs/migrate.md): Flyway-named revision files, one commit per
//! revision with its history row, a short session lock timeout, a bounded
//! jittered retry of lock contention only, a pre-flight look for blockers
//! before each DDL, and the sidecar's permission and DDL boundary when it
//! runs in an injected Job.
//!
//! Layout: `revision` (files, statements, checksums), `history` (the table,
//! its states and the plan; pure), `classify` (error codes; pure), `retry`
//! (backoff; pure), `redact` (secrets out of every printed error), `db` (the one connection and its settings), `blockers`
//! (pre-flight and `diagnose`), `guard` (the runner's side of the
//! sidecar's socket, whose contract is `bloodraven_api::socket`), `apply`
//! (the run), `commands` (`status`, `resolve`, `diagnose`, `baseline`),
//! `error` (every way a command ends short, and the one mapping to exit
//! codes), `config` (flags).

pub mod apply;
pub mod blockers;
pub mod classify;
pub mod commands;
pub mod config;
pub mod db;
mod error;
pub mod guard;
pub mod history;
pub mod redact;
pub mod retry;
pub mod revision;

use std::path::Path;

use tokio::signal::unix::{SignalKind, signal};

/// Runs the parsed command; returns the exit code.
pub async fn run(cli: config::Cli) -> i32 {
    use config::Command;
    match cli.command {
        Command::Apply(a) => apply_command(a).await,
        Command::Status(a) => commands::status(a).await,
        Command::Resolve(a) => commands::resolve(a).await,
        Command::Diagnose(a) => commands::diagnose(a).await,
        Command::Baseline(a) => commands::baseline(a).await,
    }
}

/// `apply`, with its settings checked and its signals watched; returns
/// the exit code ([`error::RunnerError::exit_code`]).
async fn apply_command(a: config::ApplyArgs) -> i32 {
    match apply_checked(a).await {
        Ok(()) => apply::exit::OK,
        Err(e) => e.exit_code(),
    }
}

/// [`apply_command`]'s work; an error is already logged.
async fn apply_checked(a: config::ApplyArgs) -> Result<(), error::RunnerError> {
    use error::RunnerError;
    let tuning = match a.tuning.check() {
        Ok(t) => t,
        Err(e) => {
            tracing::error!(error = %e, "bad settings");
            return Err(RunnerError::Tuning(e));
        }
    };
    let guard = guard::Guard::detect(a.socket.as_deref(), Path::new(guard::DEFAULT_SOCKET));
    require_lease(a.require_lease, &guard)?;
    let revisions = match revision::load_dir(&a.dir) {
        // A wrong --dir or a mount that came up empty must not pass for "nothing pending".
        Ok(r) if r.is_empty() => {
            tracing::error!(
                dir = %revision::escape(&a.dir.to_string_lossy()),
                "no revision in the directory (files named V<n>__<description>.sql): a wrong --dir, or a mount that came up empty? nothing was touched"
            );
            return Err(RunnerError::NoRevisions);
        }
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "bad revision directory; nothing was touched");
            return Err(RunnerError::Revisions(e));
        }
    };
    let target = match db::Target::from_args(&a.db) {
        Ok(t) => t,
        Err(e) => {
            tracing::error!(error = %e, "bad database settings; nothing was touched");
            return Err(RunnerError::Target(e));
        }
    };
    let session_id = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let unsent = std::sync::Arc::new(std::sync::Mutex::new(None));
    let alone = matches!(guard, guard::Guard::Alone);
    let settings = apply::ApplySettings {
        revisions,
        target: target.clone(),
        session_id: session_id.clone(),
        unsent: unsent.clone(),
        tuning,
        on_blocker: a.on_blocker,
        guard,
        server_lock_timeouts: a.server_lock_timeouts,
        ignore_foreign_history: a.ignore_foreign_history,
    };
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        tracing::error!("failed to install the signal handlers");
        return Err(RunnerError::Signals);
    };
    let signal = tokio::select! {
        result = apply::run(&settings) => return result,
        // The sidecar's wrapper fences with SIGTERM: stop at once.
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    let unsent = unsent.lock().ok().and_then(|g| *g);
    stopped(signal, &target, session_id.load(std::sync::atomic::Ordering::SeqCst), unsent, alone).await;
    Err(RunnerError::Stopped(signal))
}

/// `--require-lease`: alone (no sidecar socket found) the run is refused
/// ([`error::RunnerError::NoLease`], exit 8) before anything else — the directory
/// unread, the database never connected to. Behind a sidecar the usual
/// rule holds: no granted `permit`, no connection (exit 6).
fn require_lease(required: bool, guard: &guard::Guard) -> Result<(), error::RunnerError> {
    if !required || *guard != guard::Guard::Alone {
        return Ok(());
    }
    tracing::error!(
        socket = guard::DEFAULT_SOCKET,
        "refusing to start: --require-lease ({}=true) is set but there is no sidecar socket \
         (no --socket/BLOODRAVEN_SOCKET, no {}), so there would be no deploy lease and no fence. \
         This migration is meant to run behind the deploy-lease sidecar: was the Job's {} annotation removed, \
         or its sidecar lost? Nothing was touched",
        bloodraven_api::names::inject::REQUIRE_LEASE_ENV,
        guard::DEFAULT_SOCKET,
        bloodraven_api::names::inject::INJECT,
    );
    Err(error::RunnerError::NoLease)
}

/// How long a fence waits for the server to end the session (the sidecar's
/// grace before SIGKILL is longer).
const KILL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// After a fence's signal: ends the session server-side (`KILL CONNECTION`,
/// see [`db::Target::kill_session`]), so no statement of the revision runs
/// on after the fence. The kill rolls back a DML revision in flight; a DDL
/// revision's `started` row stays (dirty), as it must.
///
/// A DDL revision marked `started` none of whose statements had been sent
/// (`unsent`: stopped during its pre-flight look or `--on-blocker wait`) is
/// not dirty: alone (a person's Ctrl-C, a pipeline's timeout), its row is
/// removed once the session is ended, so the next run needs no `resolve`;
/// behind the sidecar the stop is a fence, after which the runner writes
/// nothing, so the log says that `resolve V --rolled-back` is safe.
async fn stopped(signal: &str, target: &db::Target, session: u32, unsent: Option<u64>, alone: bool) {
    let mut ended = session == 0;
    if session != 0 {
        match target.kill_session(session, KILL_TIMEOUT).await {
            Ok(()) => {
                ended = true;
                tracing::info!(signal, connection = session, "ended the session on the server (KILL CONNECTION)");
            }
            Err(e) => tracing::error!(
                signal,
                connection = session,
                error = %e,
                "failed to end the session on the server: a statement of the revision may still be running there; check the process list"
            ),
        }
    }
    if let Some(v) = unsent {
        let cleared = match (alone, ended) {
            (true, true) => clear_unsent(target, v).await,
            (false, _) => Err("behind the sidecar a stop is a fence: nothing is written after it".to_owned()),
            (true, false) => Err("the session could not be ended, so its row is left as it is".to_owned()),
        };
        match cleared {
            Ok(()) => tracing::info!(
                signal,
                revision = v,
                "revision V{v} was marked started but none of its statements had been sent: its history row was removed, nothing to resolve"
            ),
            Err(e) => tracing::error!(
                signal,
                revision = v,
                error = %e,
                "revision V{v} is marked started but none of its statements had been sent: `bloodraven-migrate resolve {v} --rolled-back` is safe"
            ),
        }
    }
    tracing::error!(
        signal,
        "stopped by a signal (the sidecar's fence?): the revision in flight is not recorded as applied"
    );
}

/// Removes the `started` row of revision `v`, none of whose statements
/// was sent, over a new session, within [`KILL_TIMEOUT`].
async fn clear_unsent(target: &db::Target, v: u64) -> Result<(), String> {
    let clear = async {
        let mut s = target.connect(Some(KILL_TIMEOUT), std::time::Duration::from_secs(60)).await?;
        s.clear_row(v).await?;
        let _ = s.conn.disconnect().await;
        Ok::<(), db::DbError>(())
    };
    match tokio::time::timeout(KILL_TIMEOUT, clear).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {KILL_TIMEOUT:?}")),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[test]
    fn attack_require_lease_refuses_only_a_run_with_no_sidecar() {
        let alone = guard::Guard::Alone;
        let behind = guard::Guard::Sidecar("/run/bloodraven/sidecar.sock".into());
        let code = |r: Result<(), error::RunnerError>| r.map_err(|e| e.exit_code());
        assert_eq!(code(require_lease(true, &alone)), Err(apply::exit::NO_LEASE));
        assert_eq!(code(require_lease(false, &alone)), Ok(()), "a person at a terminal runs alone");
        assert_eq!(code(require_lease(true, &behind)), Ok(()), "behind a sidecar the permit decides");
        assert!(![0, 1, 2, 3, 4, 5, 6, 7].contains(&apply::exit::NO_LEASE), "a code of its own");
    }

    #[tokio::test]
    async fn attack_require_lease_alone_never_connects() {
        // A URL whose host could not answer anyway: the refusal must come first, with no connect timeout.
        let cli = config::Cli::try_parse_from([
            "bloodraven-migrate",
            "apply",
            "--dir",
            "/nonexistent-revisions",
            "--database-url",
            "mysql://m:pw@192.0.2.1:3306/app",
            "--connect-timeout",
            "30",
            "--require-lease",
        ])
        .unwrap();
        let config::Command::Apply(a) = cli.command else { panic!("apply") };
        // The test machine has no /run/bloodraven: the run is alone.
        if guard::Guard::detect(None, Path::new(guard::DEFAULT_SOCKET)) != guard::Guard::Alone {
            return;
        }
        let started = std::time::Instant::now();
        assert_eq!(apply_command(a).await, apply::exit::NO_LEASE);
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "refused before any connect attempt");
    }
}
