//! Carrying out one action of the ordered update's table: the phase
//! changes (the request recorded, each switchover admitted in the record
//! before its drain), deferral behind a hold, the Jobs, and the
//! switchover's steps on the sites (`failover::switchover`).

use super::request::{admission_of, enter, recorded_id};
use super::{Drive, OPERATION, RECHECK, bounds, entered, planned_phase};
use crate::controller::Context;
use crate::controller::Error;
use crate::controller::failover_group::assess::SiteProbe;
use crate::failover::planned::request::{
    ensure_held_job, forget_job_hold_if_ended, forget_site_hold, remember_admitted, remember_request,
    remember_site_hold,
};
use crate::failover::record::SiteHold;
use crate::failover::request::{deferral, write_if_changed};
use crate::failover::round::RoundRecord;
use crate::failover::site_job;
use crate::failover::switchover::{self, Local, Step, admit};
use crate::mysql::Flavor;
use bloodraven_api::names::site_job::{ROLE_FORMER_PRIMARY, ROLE_STANDBY};
use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use bloodraven_api::v1alpha1::OrderedUpdateStatus;
use bloodraven_api::v1alpha1::SiteJobStatus;
use bloodraven_core::failover::disruption::JobState;
use bloodraven_core::failover::ordered_update::{Action, Leg, Phase, job_site, switchover_phase, switchover_sites};
use bloodraven_core::failover::planned;
use bloodraven_core::failover::planned::drain::{CATCH_UP_RECHECK, catch_up_slice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

/// Runs one action of the table; `Some` ends the drive with that answer.
#[allow(clippy::too_many_arguments)] // one round: the request, its local memory and the probes it acts on
pub(super) async fn act(
    ctx: &Context,
    round: &mut RoundRecord,
    group: &mut MysqlFailoverGroup,
    state: &mut OrderedUpdateStatus,
    local: &mut Local,
    action: Action,
    phase: Phase,
    probes: &[SiteProbe],
) -> Result<Option<Drive>, Error> {
    match action {
        Action::Idle => Ok(Some(Drive::idle(group.clone()))),
        Action::Enter(next) => enter_next(ctx, round, group, state, local, phase, next).await,
        Action::Defer { .. } => defer(ctx, group, state, local, phase).await,
        Action::RunJob(site) => run_job(ctx, round, group, state, phase, &site).await,
        Action::AwaitJob(_) | Action::AwaitReady(_) => {
            // The Job's result, as observed this round, is kept in status.
            *group = write_if_changed(ctx, group, state).await?;
            Ok(Some(Drive::at(group.clone(), phase, RECHECK)))
        }
        Action::Switchover(step) => switch(ctx, round, group, state, local, phase, step, probes).await,
        Action::Fail(failure) => {
            // A Job that ended holds nothing more; one deleted before it
            // ended keeps its site held until its deadline.
            forget_job_hold_if_ended(ctx, round, group, &recorded_id(&state.request_id)).await?;
            *group = write_if_changed(ctx, group, state).await?;
            *group = enter(ctx, group, state, Phase::Failed, Some(failure.reason), None, failure.attention).await?;
            Ok(Some(Drive::idle(group.clone())))
        }
    }
}

/// Enters the phase the table names: the request recorded when it leaves
/// `Pending`, a switchover recorded as admitted before its drain.
async fn enter_next(
    ctx: &Context,
    round: &mut RoundRecord,
    group: &mut MysqlFailoverGroup,
    state: &mut OrderedUpdateStatus,
    local: &mut Local,
    from: Phase,
    next: Phase,
) -> Result<Option<Drive>, Error> {
    if from == Phase::Pending {
        // `not_ours` refused a status whose terms are not words before.
        let terms = super::request::in_flight_of(state).unwrap_or_default();
        remember_request(ctx, round, &recorded_id(&state.request_id), &terms).await?;
    }
    if next == Phase::SwitchoverDraining
        && group.spec.ordered_update.as_ref().map(|r| r.request_id.as_str()) != Some(state.request_id.as_str())
    {
        // Cancelled while the standby's Job ran: stop before the switchover.
        let why =
            "cancelled: spec.orderedUpdate no longer asks for it; the standby was updated, nothing was switched over";
        let standby = state.standby_site.clone();
        *group = enter(ctx, group, state, Phase::Failed, Some(why.to_owned()), None, standby).await?;
        return Ok(Some(Drive::idle(group.clone())));
    }
    if let Some((leg, planned::Phase::Draining)) = switchover_phase(next) {
        let (primary, standby) =
            (state.source_site.clone().unwrap_or_default(), state.standby_site.clone().unwrap_or_default());
        let (old, target) = match leg {
            Leg::Switchover => (primary, standby),
            Leg::SwitchBack => (standby, primary),
        };
        remember_admitted(ctx, round, &admission_of(state, leg), &old, &target).await?;
        // A drain starts with nothing learned of the one before.
        *local = Local { hold: local.hold.take(), ..Local::default() };
    }
    if next == Phase::UpdatingStandby
        && let Some(why) = dry_run_jobs(ctx, group, state).await?
    {
        *group = enter(ctx, group, state, Phase::Failed, Some(why), None, None).await?;
        return Ok(Some(Drive::idle(group.clone())));
    }
    // A site's Job is held in the record before it exists, and released
    // once it is over: whatever becomes of status, that site is not
    // promoted while it may be half-updated (at most the Job's deadline).
    let request = recorded_id(&state.request_id);
    if let Some(site) = job_site(
        next,
        state.source_site.as_deref().unwrap_or_default(),
        &state.standby_site.clone().unwrap_or_default(),
    ) {
        let deadline = site_job::deadline_seconds(OPERATION, state.active_deadline_seconds);
        let until = Timestamp::now().as_second() + i64::from(deadline) + super::JOB_GRACE.as_secs() as i64;
        let (site, namespace) = (site.to_owned(), state.namespace.clone().unwrap_or_default());
        remember_site_hold(ctx, round, SiteHold::Job { site, until, namespace, request, job_uid: None }).await?;
    } else if matches!(from, Phase::UpdatingStandby | Phase::UpdatingFormerPrimary) {
        forget_site_hold(ctx, round, &request, |h| matches!(h, SiteHold::Job { .. })).await?;
    }
    let message = (next == Phase::Completed).then(|| {
        let (generation, active) = group.decided().map(|(s, g)| (g, s.to_owned())).unwrap_or_default();
        format!("completed at topologyGeneration {generation}: both sites updated; {active} is the writable primary")
    });
    *group = write_if_changed(ctx, group, state).await?;
    *group = enter(ctx, group, state, next, message, None, None).await?;
    if next == Phase::Completed {
        return Ok(Some(Drive::idle(group.clone())));
    }
    if next == Phase::Admitting {
        local.hold = admit(ctx, group, &state.request_id).await?;
    }
    Ok(None)
}

/// Both Jobs of the request, validated by the API server before the first
/// runs: why the request cannot run, if so (nothing touched yet).
async fn dry_run_jobs(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    state: &OrderedUpdateStatus,
) -> Result<Option<String>, Error> {
    let Some(request) = group.spec.ordered_update.as_deref().filter(|r| r.request_id == state.request_id) else {
        return Ok(Some("spec.orderedUpdate no longer asks for it".to_owned()));
    };
    let namespace = state.namespace.clone().unwrap_or_default();
    let (primary, standby) =
        (state.source_site.clone().unwrap_or_default(), state.standby_site.clone().unwrap_or_default());
    for (phase, site) in [(Phase::UpdatingStandby, &standby), (Phase::UpdatingFormerPrimary, &primary)] {
        let spec = group.site(site).cloned().ok_or(Error::NoName)?;
        let job = site_job::JobSpecFor {
            group,
            operation: OPERATION,
            request_id: &state.request_id,
            namespace: &namespace,
            template: &request.job_template,
            deadline_seconds: state.active_deadline_seconds.unwrap_or(request.active_deadline_seconds),
            site: &spec,
            role: role(phase),
            job_uid: None,
        };
        match site_job::dry_run(&ctx.client, &job).await {
            Ok(()) => {}
            Err(site_job::EnsureError::Refused(why)) => {
                return Ok(Some(format!("the Job of {site} would not be created: {why}; nothing was touched")));
            }
            Err(site_job::EnsureError::Api(e)) => return Err(e),
        }
    }
    Ok(None)
}

/// Defers the request behind the live failover-hold, until it lapses or is released.
async fn defer(
    ctx: &Context,
    group: &mut MysqlFailoverGroup,
    state: &mut OrderedUpdateStatus,
    local: &Local,
    phase: Phase,
) -> Result<Option<Drive>, Error> {
    let Some(hold) = local.hold.as_ref() else { return Ok(None) };
    let (admission, requeue) = deferral::<OrderedUpdateStatus>(hold);
    if phase == Phase::Deferred {
        if state.admission.as_ref() != Some(&admission) {
            state.admission = Some(admission);
            *group = write_if_changed(ctx, group, state).await?;
        }
    } else {
        let note = admission.message.clone();
        *group = enter(ctx, group, state, Phase::Deferred, note, Some(admission), None).await?;
    }
    Ok(Some(Drive::at(group.clone(), Phase::Deferred, requeue)))
}

/// The role of the site whose Job `phase` runs.
pub(super) fn role(phase: Phase) -> &'static str {
    if phase == Phase::UpdatingStandby { ROLE_STANDBY } else { ROLE_FORMER_PRIMARY }
}

/// Creates the Job of `site` from the request's template as it is now
/// (found again if it exists), and records it in status.
async fn run_job(
    ctx: &Context,
    round: &mut RoundRecord,
    group: &mut MysqlFailoverGroup,
    state: &mut OrderedUpdateStatus,
    phase: Phase,
    site: &str,
) -> Result<Option<Drive>, Error> {
    let request = group.spec.ordered_update.as_deref().filter(|r| r.request_id == state.request_id).cloned();
    // Where no Job of the request's was made, its hold holds nothing.
    let no_job = |h: &SiteHold| matches!(h, SiteHold::Job { .. });
    let Some(request) = request else {
        forget_site_hold(ctx, round, &recorded_id(&state.request_id), no_job).await?;
        let why = format!(
            "spec.orderedUpdate no longer asks for request {}: its Job for {site} cannot be made; request again",
            state.request_id
        );
        *group = enter(ctx, group, state, Phase::Failed, Some(why), None, Some(site.to_owned())).await?;
        return Ok(Some(Drive::idle(group.clone())));
    };
    let spec = group.site(site).cloned().ok_or(Error::NoName)?;
    let namespace = state.namespace.clone().unwrap_or(request.namespace.clone());
    let recorded = recorded_id(&state.request_id);
    let pinned =
        round.trusted().and_then(|r| r.site_hold.as_ref()?.pinned_job(&recorded, site)).map(|(uid, _)| uid.to_owned());
    let job = site_job::JobSpecFor {
        group,
        operation: OPERATION,
        request_id: &state.request_id,
        namespace: &namespace,
        template: &request.job_template,
        deadline_seconds: state.active_deadline_seconds.unwrap_or(request.active_deadline_seconds),
        site: &spec,
        role: role(phase),
        job_uid: pinned.as_deref(),
    };
    // The Job's own deadline counts from its making.
    let deadline = site_job::deadline_seconds(OPERATION, Some(job.deadline_seconds));
    let until = Timestamp::now().as_second() + i64::from(deadline) + super::JOB_GRACE.as_secs() as i64;
    let observed = match ensure_held_job(ctx, round, &job, &recorded, until).await? {
        Ok(observed) => observed,
        Err(why) => {
            let why = format!("the Job of {site} could not be created: {why}; nothing was switched over");
            *group = enter(ctx, group, state, Phase::Failed, Some(why), None, Some(site.to_owned())).await?;
            return Ok(Some(Drive::idle(group.clone())));
        }
    };
    tracing::info!(group = %group.name_any(), site, request_id = %state.request_id, "ordered update Job created");
    ctx.failpoint.hit(&format!("{OPERATION}-after-job"));
    let (primary, standby) =
        (state.source_site.clone().unwrap_or_default(), state.standby_site.clone().unwrap_or_default());
    record_job(state, &group.name_any(), phase, &primary, &standby, &observed);
    *group = write_if_changed(ctx, group, state).await?;
    Ok(Some(Drive::at(group.clone(), phase, RECHECK)))
}

/// Keeps the Job of `phase`'s site in `state.jobs` as last seen: created
/// (with its start), and its result when it ends.
pub(super) fn record_job(
    state: &mut OrderedUpdateStatus,
    group: &str,
    phase: Phase,
    primary: &str,
    standby: &str,
    job: &JobState,
) {
    let Some(site) = job_site(phase, primary, standby) else { return };
    let (result, message) = match job {
        JobState::Absent => return,
        JobState::Running => ("Running", None),
        JobState::Complete => ("Complete", None),
        JobState::Failed(why) => ("Failed", Some(why.clone())),
    };
    let name = site_job::job_name(group, OPERATION, &state.request_id, site);
    let now = Time(Timestamp::now());
    if !state.jobs.iter().any(|j| j.site == site && j.role == role(phase)) {
        state.jobs.push(SiteJobStatus {
            site: site.to_owned(),
            role: role(phase).to_owned(),
            job_name: name,
            start_time: Some(now.clone()),
            ..SiteJobStatus::default()
        });
    }
    let Some(entry) = state.jobs.iter_mut().find(|j| j.site == site && j.role == role(phase)) else { return };
    if entry.result != result {
        result.clone_into(&mut entry.result);
        entry.message = message;
        if result != "Running" {
            entry.completion_time = Some(now);
        }
    }
}

/// A step of a switchover, carried out as for a planned failover.
#[allow(clippy::too_many_arguments)]
async fn switch(
    ctx: &Context,
    round: &mut RoundRecord,
    group: &mut MysqlFailoverGroup,
    state: &mut OrderedUpdateStatus,
    local: &mut Local,
    phase: Phase,
    action: planned::Action,
    probes: &[SiteProbe],
) -> Result<Option<Drive>, Error> {
    let (primary, standby) =
        (state.source_site.clone().unwrap_or_default(), state.standby_site.clone().unwrap_or_default());
    let Some((old, target)) = switchover_sites(phase, &primary, &standby) else { return Ok(None) };
    let (Some(source_spec), Some(target_spec)) = (group.site(old).cloned(), group.site(target).cloned()) else {
        let why = format!("site {old} or {target} is no longer in spec.sites");
        *group = enter(ctx, group, state, Phase::Failed, Some(why), None, None).await?;
        return Ok(Some(Drive::idle(group.clone())));
    };
    let observed = |site: &str| probes.iter().find(|p| p.site == site).and_then(|p| p.outcome.as_ref().ok());
    let (src, tgt) = (observed(old), observed(target));
    let step = Step {
        phase: planned_phase(phase),
        failpoints: OPERATION,
        source: old.to_owned(),
        source_spec,
        target_spec,
        tgt: tgt.cloned(),
        flavor: src.or(tgt).map_or(Flavor::MariaDb, |o| o.flavor),
        version: src.or(tgt).map(|o| o.version.clone()).unwrap_or_default(),
        policy: group.spec.failover.clone(),
        fence_bound: Step::bounds(&group.spec.failover).0,
        action_bound: Step::bounds(&group.spec.failover).1,
        reclone: None,
        foreign: Step::foreign_in(probes),
    };
    match action {
        planned::Action::Fence(site) => switchover::fence(ctx, group, local, &step, &site).await?,
        planned::Action::CatchUp(site) => {
            let drained = entered(&state.history, phase);
            let slice = catch_up_slice(drained, bounds(group), Timestamp::now());
            if !switchover::catch_up(ctx, group, local, &step, &site, slice).await? {
                return Ok(Some(Drive::at(group.clone(), phase, CATCH_UP_RECHECK)));
            }
        }
        planned::Action::Unfence(site) => switchover::unfence(ctx, group, &step, &site).await?,
        planned::Action::Decide(site) => {
            let leg = if matches!(switchover_phase(phase), Some((Leg::SwitchBack, _))) {
                "switch-back"
            } else {
                "switchover"
            };
            let what = format!("ordered update {} ({leg})", state.request_id);
            let Some(decided) = switchover::decide(ctx, round, group, local, &step, &site, &what).await? else {
                let why = "the decision record no longer shows the switchover's old primary as active; see the DecisionConflict condition";
                *group =
                    enter(ctx, group, state, Phase::Failed, Some(why.to_owned()), None, Some(old.to_owned())).await?;
                return Ok(Some(Drive::idle(group.clone())));
            };
            *group = decided;
        }
        planned::Action::Promote(site) => switchover::promote(ctx, group, &step, &site).await?,
        planned::Action::Repoint { site, source } => switchover::repoint(ctx, group, &step, &site, &source).await?,
        // The rules map the switchover's phase changes and failures onto
        // the update's own before they get here.
        other => {
            tracing::warn!(group = %group.name_any(), action = ?other, "switchover action not carried out in an ordered update");
        }
    }
    Ok(None)
}
