//! Carrying out one action of the decision table on the sites: fence,
//! catch up, decide, promote, repoint, unfence, and the phase changes.

use super::{
    CATCH_UP_RECHECK, Drive, admit, catch_up_slice, enter, remember_admission, remember_request, report_bypass,
    write_state,
};
use crate::controller::Context;
use crate::controller::Error;
use crate::controller::failover_group::deploy_leases;
use crate::controller::failover_group::publish;
use crate::controller::failover_group::sites;
use crate::failover::decision;
use crate::failover::round::RoundRecord;
use crate::mysql::Flavor;
use crate::mysql::ProbeTarget;
use crate::mysql::SiteObservation;
use crate::mysql::actions;
use crate::mysql::statements::Source;
use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use bloodraven_api::v1alpha1::PlannedFailoverAdmission;
use bloodraven_api::v1alpha1::PlannedFailoverStatus;
use bloodraven_api::v1alpha1::reason;
use bloodraven_core::failover::planned::Action;
use bloodraven_core::failover::planned::Phase;
use bloodraven_core::lease::machine::Grant;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::events::EventType;
use std::time::Duration;

/// What one round saw, for [`act`].
pub(super) struct Step {
    pub(super) phase: Phase,
    pub(super) source: String,
    pub(super) source_spec: bloodraven_api::v1alpha1::Site,
    pub(super) target_spec: bloodraven_api::v1alpha1::Site,
    pub(super) tgt: Option<SiteObservation>,
    pub(super) flavor: Flavor,
    /// `@@version` of the source (or the target), for the bypass check.
    pub(super) version: String,
    pub(super) policy: bloodraven_api::v1alpha1::FailoverPolicy,
    pub(super) fence_bound: Duration,
    pub(super) action_bound: Duration,
}

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
        Action::Fence(site) => fence(ctx, group, local, step, site).await,
        Action::CatchUp(site) => catch_up(ctx, group, state, local, step, site).await,
        Action::Unfence(site) => unfence(ctx, group, step, site).await,
        Action::Fail(why) => fail(ctx, group, state, why).await,
        Action::Decide(site) => decide(ctx, round, group, state, local, step, site).await,
        Action::Promote(site) => promote(ctx, group, step, site).await,
        Action::Repoint { site, source } => repoint(ctx, group, step, site, source).await,
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
        if step.phase == Phase::Pending {
            remember_request(ctx, round, &state.request_id).await?;
        }
        local.hold = admit(ctx, group, state).await?;
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

/// Fences the old primary (`read_only`, then ends every client session),
/// within `fenceTimeoutSeconds`; a failure is kept for the table.
async fn fence(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    local: &mut Local,
    step: &Step,
    site: String,
) -> Result<Option<Drive>, Error> {
    let spec = group.site(&site).cloned().ok_or(Error::NoName)?;
    let creds = credentials(ctx, &spec).await?;
    let target = ProbeTarget { host: spec.host.clone(), port: spec.port };
    report_bypass(ctx, group, &spec.name, &target, &creds, step).await;
    if !ctx.leadership.is_leader() {
        return Err(Error::NotLeader);
    }
    match actions::fence(&target, &creds, step.flavor, step.fence_bound).await {
        Ok(done) => {
            tracing::info!(group = %group.name_any(), site = %site, killed = done.killed.len(), left = done.left.len(), "old primary fenced");
            ctx.failpoint.hit("planned-after-fence");
        }
        Err(err) => {
            let (_, message) = crate::mysql::classify(&err);
            tracing::warn!(group = %group.name_any(), site = %site, error = %message, "fence failed");
            local.fence_failed = Some(message);
        }
    }
    Ok(None)
}

/// Waits one slice for the target to apply the old primary's position.
async fn catch_up(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    state: &PlannedFailoverStatus,
    local: &mut Local,
    step: &Step,
    site: String,
) -> Result<Option<Drive>, Error> {
    let creds = credentials(ctx, &step.source_spec).await?;
    let at = ProbeTarget { host: step.source_spec.host.clone(), port: step.source_spec.port };
    let positions = actions::positions(&at, &creds, step.flavor, step.action_bound)
        .await
        .map_err(|e| site_err("read the GTID position of", &step.source, &e))?;
    let slice = catch_up_slice(&state.history, &step.policy, Timestamp::now());
    let tcreds = credentials(ctx, &step.target_spec).await?;
    let tat = ProbeTarget { host: step.target_spec.host.clone(), port: step.target_spec.port };
    // A target that cannot be asked is one that did not catch up:
    // the old primary is made writable again and the request fails,
    // rather than leaving it fenced while the wait is retried.
    let reached = match actions::catch_up(&tat, &tcreds, step.flavor, &positions.binlog, slice.wait).await {
        Ok(reached) => reached,
        Err(e) => {
            let (_, message) = crate::mysql::classify(&e);
            tracing::warn!(group = %group.name_any(), site = %site, error = %message, "catch-up failed");
            false
        }
    };
    if !reached && !slice.last {
        // Not yet, and the bound has not run out: give the reconcile
        // back (probes, status, deletion) and wait again next round.
        tracing::debug!(group = %group.name_any(), site = %site, "catching up; waiting again");
        return Ok(Some(Drive::at(group.clone(), Phase::Draining, CATCH_UP_RECHECK)));
    }
    local.caught_up = Some(reached);
    ctx.failpoint.hit("planned-after-catch-up");
    local.promotion_position = Some(positions.binlog);
    Ok(None)
}

/// Makes the old primary writable again after a drain that failed.
async fn unfence(ctx: &Context, group: &MysqlFailoverGroup, step: &Step, site: String) -> Result<Option<Drive>, Error> {
    let spec = group.site(&site).cloned().ok_or(Error::NoName)?;
    let creds = credentials(ctx, &spec).await?;
    let at = ProbeTarget { host: spec.host.clone(), port: spec.port };
    if !ctx.leadership.is_leader() {
        return Err(Error::NotLeader);
    }
    actions::unfence(&at, &creds, step.flavor, step.action_bound).await.map_err(|e| site_err("unfence", &site, &e))?;
    tracing::warn!(group = %group.name_any(), site = %site, "old primary made writable again after a failed drain");
    Ok(None)
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

/// The decision: the target becomes the active site at the next
/// generation (record, then status), and every deploy lease is revoked.
async fn decide(
    ctx: &Context,
    round: &mut RoundRecord,
    group: &mut MysqlFailoverGroup,
    state: &mut PlannedFailoverStatus,
    local: &Local,
    step: &Step,
    site: String,
) -> Result<Option<Drive>, Error> {
    let Some(rec) = round.reread(ctx).await?.cloned() else {
        return Err(Error::Site { action: "decide for", site, message: "the decision record is gone".into() });
    };
    if rec.tampered.is_some() || rec.active_site != step.source {
        let why = "the decision record no longer shows the source site as active; see the DecisionConflict condition"
            .to_owned();
        *group = enter(ctx, group, state, Phase::Failed, Some(why), None).await?;
        return Ok(Some(Drive::idle(group.clone())));
    }
    let mut extra = rec.extra();
    extra.promotion_position = local.promotion_position.clone().or(step.tgt.as_ref().map(|o| o.gtid_position.clone()));
    let decided = decision::decide(ctx, round, group, &site, &extra, None).await?;
    ctx.failpoint.hit("planned-after-decide");
    let generation = rec.generation + 1;
    tracing::info!(group = %group.name_any(), site = %site, generation, request_id = %state.request_id, "planned failover decided");
    publish(
            ctx,
            &decided,
            EventType::Normal,
            "ActiveSiteChanged",
            format!(
                "planned failover {}: {site} is the active site at topologyGeneration {generation} (was {}); every deploy lease of the group is revoked",
                state.request_id, step.source
            ),
            "Decide",
            None,
        )
        .await;
    ctx.metrics.topology_generation.with_label_values(&[&group.name_any()]).set(generation);
    // The generation already revokes every lease (a renewal compares
    // it); the tombstones and Events may wait for the next round.
    deploy_leases::maintain_after_decision(ctx, &decided).await;
    *group = decided;
    Ok(None)
}

/// Promotes the decided target.
async fn promote(ctx: &Context, group: &MysqlFailoverGroup, step: &Step, site: String) -> Result<Option<Drive>, Error> {
    let creds = credentials(ctx, &step.target_spec).await?;
    let at = ProbeTarget { host: step.target_spec.host.clone(), port: step.target_spec.port };
    if !ctx.leadership.is_leader() {
        return Err(Error::NotLeader);
    }
    actions::promote(&at, &creds, step.flavor, step.action_bound).await.map_err(|e| site_err("promote", &site, &e))?;
    tracing::info!(group = %group.name_any(), site = %site, "promoted");
    ctx.failpoint.hit("planned-after-promote");
    Ok(None)
}

/// Repoints the old primary at the new one.
async fn repoint(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    step: &Step,
    site: String,
    new_primary: String,
) -> Result<Option<Drive>, Error> {
    let Some(spec) = group.site(&site).cloned() else { return Ok(None) };
    let creds = credentials(ctx, &spec).await?;
    let repl = sites::read_replication_credentials(&step.target_spec, ctx).await.map_err(|f| Error::Site {
        action: "read replication credentials for",
        site: site.clone(),
        message: f.message,
    })?;
    let at = ProbeTarget { host: spec.host.clone(), port: spec.port };
    let from = Source {
        host: step.target_spec.host.clone(),
        port: step.target_spec.port,
        user: repl.username.clone(),
        password: repl.password.clone(),
    };
    if !ctx.leadership.is_leader() {
        return Err(Error::NotLeader);
    }
    actions::repoint(&at, &creds, step.flavor, &from, step.action_bound)
        .await
        .map_err(|e| site_err("repoint", &site, &e))?;
    tracing::info!(group = %group.name_any(), site = %site, source = %new_primary, "repointed");
    ctx.failpoint.hit("planned-after-repoint");
    Ok(None)
}

/// What one drive learned that the sites do not show.
#[derive(Default)]
pub(super) struct Local {
    pub(super) hold: Option<Grant>,
    pub(super) fence_failed: Option<String>,
    pub(super) caught_up: Option<bool>,
    pub(super) promotion_position: Option<String>,
}

pub(super) fn site_err(action: &'static str, site: &str, err: &crate::mysql::ProbeError) -> Error {
    let (_, message) = crate::mysql::classify(err);
    Error::Site { action, site: site.to_owned(), message }
}

pub(super) async fn credentials(
    ctx: &Context,
    site: &bloodraven_api::v1alpha1::Site,
) -> Result<crate::mysql::Credentials, Error> {
    sites::read_credentials(site, ctx).await.map_err(|f| Error::Site {
        action: "read credentials for",
        site: site.name.clone(),
        message: f.message,
    })
}
