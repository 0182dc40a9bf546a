//! The ending of a run, carried out: the last renewal with the final
//! `ddlState`, the final state recorded (termination message, JSON line,
//! the Lease's `ddlState`), and the leases released — the hold on every
//! path, the mutex only after the record.

use std::time::Duration;

use tokio::sync::oneshot;

use super::Run;
use crate::lease::ending::{Ending, Verdict, verdict};
use crate::lease::machine::{FenceReason, GiveUp, RETRY_BACKOFF_MS, RenewAnswer};
use crate::record::{FinalRecord, Phase};
use crate::socket::Status;
use crate::wire::{DdlState, LeaseKind, released};

/// Renews the migration lease once more with the final `ddlState`, until
/// confirmed or the fence deadline; whether the Lease has it. `stopped`: the
/// heartbeat was fenced by SIGTERM, so only the deadline and the answer
/// count, and any answer but a confirmation or a retryable failure ends it.
async fn final_renewal(run: &mut Run<'_>, ddl: DdlState, stopped: bool) -> bool {
    let Some(token) = run.migration.clone() else { return false };
    loop {
        let sent = run.ms();
        let past = if stopped { run.hb.deadline().is_none_or(|d| sent >= d) } else { run.hb.tick(sent).is_some() };
        if past {
            return false;
        }
        let revision = run.boundary.revision.clone();
        let answer =
            run.s.api.renew(LeaseKind::Migration, &run.s.operation_id, &token, Some(ddl), revision.as_deref()).await;
        let now = run.ms();
        if stopped {
            match answer {
                RenewAnswer::Renewed { generation }
                    if Some(generation) == run.hb.granted_generation(LeaseKind::Migration) =>
                {
                    run.on_lease = Some(ddl);
                    return true;
                }
                RenewAnswer::Failed { .. } | RenewAnswer::Unstable { .. } => {
                    tokio::time::sleep(Duration::from_millis(RETRY_BACKOFF_MS)).await;
                    continue;
                }
                other => {
                    tracing::warn!(answer = ?other, "the final state could not be recorded on the Lease");
                    return false;
                }
            }
        }
        let confirmed = matches!(answer, RenewAnswer::Renewed { .. });
        if confirmed {
            run.on_lease = Some(ddl);
        }
        if run.hb.renewed(LeaseKind::Migration, sent, &answer, now).is_some() {
            tracing::warn!(answer = ?answer, "the final state could not be recorded on the Lease");
            return false;
        }
        if confirmed {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(RETRY_BACKOFF_MS)).await;
    }
}

async fn release(run: &mut Run<'_>, kind: LeaseKind) {
    let token = match kind {
        LeaseKind::Migration => run.migration.take(),
        LeaseKind::FailoverHold => run.hold.take(),
    };
    let Some(token) = token else { return };
    run.hb.forget(kind);
    // A few attempts within a request timeout each: an unreleased lease
    // still lapses by its TTL.
    for attempt in 0..3 {
        let sent = run.ms();
        let answer = run.s.api.release(kind, &run.s.operation_id, &token).await;
        let label = answer.as_ref().map_or_else(|_| "failed".to_owned(), |status| format!("status:{status}"));
        run.log_call("release", kind, sent, &label, None);
        match answer {
            Ok(status) if released(status) => {
                tracing::info!(kind = kind.as_str(), status, "lease released");
                return;
            }
            Ok(status) => tracing::warn!(kind = kind.as_str(), status, attempt, "release refused"),
            Err(e) => tracing::warn!(kind = kind.as_str(), error = %e, attempt, "release failed"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tracing::warn!(kind = kind.as_str(), "lease not released: it lapses by its TTL");
}

#[allow(clippy::too_many_lines)] // the ending's steps, in their required order
pub(super) async fn finish(
    run: &mut Run<'_>,
    mut ending: Ending,
    reply: Option<oneshot::Sender<(i32, String)>>,
) -> FinalRecord {
    // The database's view of the boundary, when configured.
    if let Some(detector) = &run.s.detector
        && !matches!(ending, Ending::NotStarted(_))
    {
        match detector.changed().await {
            Ok(true) => {
                run.boundary.database_changed();
                tracing::info!("the database shows schema or history changes since the grant");
            }
            Ok(false) => tracing::info!("the database shows no schema or history change since the grant"),
            Err(e) => tracing::warn!(error = %e, "failed to read the database for the DDL boundary"),
        }
        if let Ending::Fenced { in_ddl, .. } | Ending::Finished { in_ddl, .. } = &mut ending {
            *in_ddl = *in_ddl || run.boundary.in_ddl();
        }
    }
    let v: Verdict = verdict(&ending);
    // 1. The final state on the Lease first, while the hold still defers a
    // planned failover (released first, the hold would let a waiting planned failover
    // revoke the mutex before its state is recorded): when the run was not
    // fenced, or was stopped (SIGTERM) outside its DDL and so releases the
    // lease. A lease revoked, expired or past its deadline is no longer the
    // sidecar's to renew; one fenced inside DDL is left to lapse, so that
    // the operator records the loss, and already holds `started` when the
    // migration reported it (the report waits for a renewal to carry it).
    let (renew_last, stopped) = match &ending {
        Ending::Fenced { reason: FenceReason::Shutdown, in_ddl: false, .. } => (true, true),
        Ending::Fenced { .. } => (false, false),
        _ => (true, false),
    };
    if renew_last && run.migration.is_some() && run.on_lease != Some(v.ddl_state) {
        final_renewal(run, v.ddl_state, stopped).await;
    }
    let recorded = run.on_lease == Some(v.ddl_state);
    // 2. The hold, on every path (fenced: at once).
    release(run, LeaseKind::FailoverHold).await;
    // 3. Termination message, JSON line, state file.
    let (outcome, reported_error) = match &run.outcome {
        Some((r, e)) => (Some(r.as_str().to_owned()), e.clone()),
        None => (None, None),
    };
    let (fence, fence_error) = match &ending {
        Ending::Fenced { reason, .. } => (Some(reason.code().to_owned()), Some(reason.to_string())),
        _ => (None, None),
    };
    let holder = match &ending {
        Ending::NotStarted(GiveUp::Timeout { holder: Some(h), .. }) => Some(h.to_string()),
        _ => None,
    };
    let give_up = match &ending {
        Ending::NotStarted(g) => Some(g.to_string()),
        _ => None,
    };
    let record = FinalRecord {
        record: "bloodraven-sidecar".into(),
        operation_id: run.s.operation_id.clone(),
        group: run.s.group.clone(),
        instance: run.s.instance.clone(),
        result: v.result.into(),
        exit_code: v.exit_code,
        ddl_state: v.ddl_state.as_str().into(),
        revision: run.boundary.revision.clone(),
        outcome,
        last_error: fence_error.or(give_up).or(reported_error),
        fence,
        holder,
        recorded_on_lease: recorded,
        message: v.message.clone(),
    };
    record.publish(run.s.termination_log.as_deref());
    run.save(Phase::Ended, Some(record.clone()));
    tracing::info!(
        result = v.result,
        exit_code = v.exit_code,
        ddl_state = v.ddl_state.as_str(),
        recorded_on_lease = recorded,
        "run ended"
    );
    // 4. The mutex, only now; not when the Lease must lapse so that the
    // operator records the loss (fenced in DDL), nor when it is already gone.
    let release_mutex = match &ending {
        Ending::NotStarted(_) => true,
        // Recorded `started` (an end inside the DDL): released, and the
        // operator keeps a verification record of it (`ReleasedInDdl`).
        Ending::Finished { .. } => recorded,
        Ending::Fenced { reason, in_ddl, .. } => {
            !in_ddl && matches!(reason, FenceReason::Shutdown | FenceReason::DeadlinePassed)
        }
    };
    if release_mutex {
        release(run, LeaseKind::Migration).await;
    } else if run.migration.is_some() {
        tracing::warn!("the migration lease is left to lapse by its TTL");
        run.migration = None;
    }
    if let Some(tx) = reply {
        let _ = tx.send((v.exit_code, v.message.clone()));
    }
    let _ = run.status.send(Status::Ended { exit_code: v.exit_code, message: v.message });
    record
}
