//! Carrying out one action of the decision table on the sites: fence,
//! catch up, decide, promote, repoint, unfence, and the phase changes.

use super::{CATCH_UP_RECHECK, Drive, catch_up_slice, enter, remember_admission, remember_request, write_state};
use crate::controller::Context;
use crate::controller::Error;
use crate::failover::round::RoundRecord;
use crate::failover::switchover::{self, Local, Step};
use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use bloodraven_api::v1alpha1::PlannedFailoverAdmission;
use bloodraven_api::v1alpha1::PlannedFailoverStatus;
use bloodraven_api::v1alpha1::reason;
use bloodraven_core::failover::planned::Action;
use bloodraven_core::failover::planned::Phase;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use std::time::Duration;

/// Runs one action of the decision table; `Some` ends the drive with that answer.
pub(super) async fn act(
    ctx: &Context,
    round: &mut RoundRecord,
    group: &mut MysqlFailoverGroup,
    state: &mut PlannedFailoverStatus,
    local: &mut Local,
    action: Action,
    step: &Step,
) -> Result<Option<Drive>, Error> {
    match action {
        Action::Idle => Ok(Some(Drive::idle(group.clone()))),
        Action::Enter(next) => enter_next(ctx, round, group, state, local, step, next).await,
        Action::Defer { .. } => defer(ctx, group, state, local, step.phase).await,
        Action::Fence(site) => switchover::fence(ctx, group, local, step, &site).await.map(|()| None),
        Action::CatchUp(site) => {
            let slice = catch_up_slice(&state.history, &step.policy, Timestamp::now());
            if switchover::catch_up(ctx, group, local, step, &site, slice).await? {
                Ok(None)
            } else {
                // Not yet, and the bound has not run out: give the reconcile
                // back (probes, status, deletion) and wait again next round.
                Ok(Some(Drive::at(group.clone(), Phase::Draining, CATCH_UP_RECHECK)))
            }
        }
        Action::Unfence(site) => switchover::unfence(ctx, group, step, &site).await.map(|()| None),
        Action::Fail(why) => fail(ctx, group, state, why).await,
        Action::Decide(site) => {
            let what = format!("planned failover {}", state.request_id);
            if let Some(decided) = switchover::decide(ctx, round, group, local, step, &site, &what).await? {
                *group = decided;
                Ok(None)
            } else {
                let why =
                    "the decision record no longer shows the source site as active; see the DecisionConflict condition";
                *group = enter(ctx, group, state, Phase::Failed, Some(why.to_owned()), None).await?;
                Ok(Some(Drive::idle(group.clone())))
            }
        }
        Action::Promote(site) => switchover::promote(ctx, group, step, &site).await.map(|()| None),
        Action::Repoint { site, source } => switchover::repoint(ctx, group, step, &site, &source).await.map(|()| None),
    }
}

/// Enters the phase the table names (the admission recorded before a drain;
/// the request recorded and the hold read on admission).
async fn enter_next(
    ctx: &Context,
    round: &mut RoundRecord,
    group: &mut MysqlFailoverGroup,
    state: &mut PlannedFailoverStatus,
    local: &mut Local,
    step: &Step,
    next: Phase,
) -> Result<Option<Drive>, Error> {
    if step.phase == Phase::Pending {
        // Recorded before status leaves Pending: a request past Pending
        // runs only on the terms the record holds.
        // `not_ours` refused a status whose terms are not words before.
        let terms = super::request::in_flight_of(state).unwrap_or_default();
        remember_request(ctx, round, &state.request_id, &terms).await?;
    }
    if next == Phase::Draining {
        // Recorded before anything is done to a site: only a request
        // the record names is ever drained, promoted or repointed.
        remember_admission(ctx, round, state).await?;
    }
    // Said as what happened, with its generation: the group's
    // current state is in its conditions, and a later failover does
    // not make this untrue.
    let message = (next == Phase::Completed).then(|| {
        let generation = group.status.as_ref().and_then(|s| s.topology_generation).unwrap_or_default();
        format!(
            "completed at topologyGeneration {generation}: {} became the writable primary and {} a replica of it",
            state.target_site, step.source
        )
    });
    *group = enter(ctx, group, state, next, message, None).await?;
    if next == Phase::Completed {
        ctx.metrics.failovers_total.with_label_values(&[&group.name_any(), "planned", "completed"]).inc();
        return Ok(Some(Drive::idle(group.clone())));
    }
    if next == Phase::Admitting {
        local.hold = switchover::admit(ctx, group, &state.request_id).await?;
    }
    Ok(None)
}

/// Defers the request behind the live failover-hold, until it lapses or is released.
async fn defer(
    ctx: &Context,
    group: &mut MysqlFailoverGroup,
    state: &mut PlannedFailoverStatus,
    local: &Local,
    phase: Phase,
) -> Result<Option<Drive>, Error> {
    let Some(hold) = local.hold.clone() else { return Ok(None) };
    let expires = hold.expires_at();
    let admission = PlannedFailoverAdmission {
        defer_reason: Some(reason::DEPLOYMENT_HOLD.to_owned()),
        retry_time: Some(Time(expires)),
        message: Some(format!(
            "the failover-hold of operation {} (instance {}) defers this planned failover until it is released or lapses",
            hold.operation_id, hold.instance
        )),
    };
    if phase == Phase::Deferred {
        if state.admission.as_ref() != Some(&admission) {
            state.admission = Some(admission);
            *group = write_state(ctx, group, state).await?;
        }
    } else {
        let note = admission.message.clone();
        ctx.metrics.planned_failovers_deferred_total.with_label_values(&[&group.name_any()]).inc();
        *group = enter(ctx, group, state, Phase::Deferred, note, Some(admission)).await?;
    }
    let wait = (expires.as_millisecond() - Timestamp::now().as_millisecond()).max(0);
    let requeue = Duration::from_millis(u64::try_from(wait).unwrap_or(0)) + Duration::from_millis(200);
    Ok(Some(Drive::at(group.clone(), Phase::Deferred, requeue)))
}

/// Ends the request `Failed`, saying why.
async fn fail(
    ctx: &Context,
    group: &mut MysqlFailoverGroup,
    state: &mut PlannedFailoverStatus,
    why: String,
) -> Result<Option<Drive>, Error> {
    *group = enter(ctx, group, state, Phase::Failed, Some(why), None).await?;
    ctx.metrics.failovers_total.with_label_values(&[&group.name_any(), "planned", "failed"]).inc();
    Ok(Some(Drive::idle(group.clone())))
}
