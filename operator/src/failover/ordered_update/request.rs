//! An ordered update's bookkeeping: taking the request up (its id recorded
//! in the decision record when it leaves `Pending`, so it never runs
//! twice, even after status is wiped), each phase written to
//! `status.orderedUpdate` with its Event and metric, and what the operator
//! refuses to act on.

use crate::controller::Context;
use crate::controller::Error;
use crate::failover::record;
use crate::failover::request::ignore_reused;
use crate::failover::round::RoundRecord;
use crate::failover::site_job;
use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use bloodraven_api::v1alpha1::OrderedUpdateStatus;
use bloodraven_api::v1alpha1::PlannedFailoverAdmission;
use bloodraven_core::failover::ordered_update::{Leg, Phase, switchover_phase};

/// The word of the request in the decision record's `requests`.
pub(super) fn recorded_id(request_id: &str) -> String {
    crate::failover::request::recorded_id::<OrderedUpdateStatus>(request_id)
}

/// The record's word for a switchover of the request admitted to drain.
pub(super) fn admission_of(state: &OrderedUpdateStatus, leg: Leg) -> String {
    let (primary, standby) = (state.source_site.as_deref().unwrap_or(""), state.standby_site.as_deref().unwrap_or(""));
    let (old, target) = match leg {
        Leg::Switchover => (primary, standby),
        Leg::SwitchBack => (standby, primary),
    };
    format!("{} {target} {old}", recorded_id(&state.request_id))
}

/// Takes up the request to drive: the one in a non-final phase, or a new
/// `spec.orderedUpdate` whose id was never taken up. `Err(group)`: nothing
/// to drive.
pub(super) async fn take_up(
    ctx: &Context,
    round: &mut RoundRecord,
    group: MysqlFailoverGroup,
) -> Result<Result<(MysqlFailoverGroup, OrderedUpdateStatus), MysqlFailoverGroup>, Error> {
    let current = group.status.as_ref().and_then(|s| s.ordered_update.as_deref().cloned());
    if let Some(st) = current.as_ref().filter(|st| Phase::parse(&st.phase).is_some_and(|p| !p.is_final())) {
        return Ok(Ok((group.clone(), st.clone())));
    }
    let Some(request) = group.spec.ordered_update.as_deref().cloned() else { return Ok(Err(group)) };
    if current.as_ref().is_some_and(|st| st.request_id == request.request_id) {
        // The request status answers: done.
        return Ok(Err(group));
    }
    let Some((active, generation)) = group.decided().map(|(s, g)| (s.to_owned(), g)) else { return Ok(Err(group)) };
    let Some(rec) = round.fresh(ctx).await?.cloned() else { return Ok(Err(group)) };
    if rec.requests.contains(&recorded_id(&request.request_id)) {
        // Taken up before (status moved on, or was lost since): never again.
        let why = "the decision record lists it among the requests already taken up";
        // The site it would have updated first: the standby.
        let standby = group.spec.sites.iter().find(|s| s.name != active).map(|s| s.name.clone()).unwrap_or_default();
        return ignore_reused::<OrderedUpdateStatus>(ctx, group, (&request.request_id, &standby), why).await.map(Err);
    }
    if rec.tampered.is_some() || rec.active_site != active || rec.generation != generation {
        return Ok(Err(group));
    }
    let mut state = asked(&group, &request, &active, generation);
    let standby = state.standby_site.clone();
    let refused = if standby.is_none() {
        Some("the group has no standby: spec.sites names one site".to_owned())
    } else if let Some(why) = site_job::namespace_refused(ctx, &request.namespace, &kube::ResourceExt::name_any(&group))
    {
        Some(why)
    } else {
        request
            .job_template
            .job_spec()
            .err()
            .map(|e| format!("spec.orderedUpdate.jobTemplate.spec is not a Job spec: {e}"))
    };
    let (phase, message) = match refused {
        Some(why) => (Phase::Failed, Some(why)),
        None => (Phase::Pending, None),
    };
    let group = enter(ctx, &group, &mut state, phase, message, None, None).await?;
    if phase.is_final() {
        return Ok(Err(group));
    }
    Ok(Ok((group, state)))
}

/// The request as spec asks for it, taken up at `active`, `generation`:
/// the terms it runs on.
fn asked(
    group: &MysqlFailoverGroup,
    request: &bloodraven_api::v1alpha1::OrderedUpdateRequest,
    active: &str,
    generation: i64,
) -> OrderedUpdateStatus {
    OrderedUpdateStatus {
        request_id: request.request_id.clone(),
        source_site: Some(active.to_owned()),
        standby_site: group.spec.sites.iter().map(|s| s.name.clone()).find(|s| s != active),
        source_generation: Some(generation),
        namespace: Some(request.namespace.clone()),
        switch_back: request.switch_back,
        active_deadline_seconds: Some(request.active_deadline_seconds),
        ..OrderedUpdateStatus::default()
    }
}

/// The record's `inFlight` for `state`: its recorded id, sites, source
/// generation, namespace, deadline and `switchBack`
/// (`failover::request::in_flight_words`).
pub(super) fn in_flight_of(state: &OrderedUpdateStatus) -> Option<String> {
    let id = recorded_id(&state.request_id);
    let generation = state.source_generation.map(|g| g.to_string()).unwrap_or_default();
    let deadline = state.active_deadline_seconds.map(|d| d.to_string()).unwrap_or_default();
    let switch_back = state.switch_back.to_string();
    crate::failover::request::in_flight_words(&[
        &id,
        state.source_site.as_deref().unwrap_or_default(),
        state.standby_site.as_deref().unwrap_or_default(),
        &generation,
        state.namespace.as_deref().unwrap_or_default(),
        &deadline,
        &switch_back,
    ])
}

/// Why the operator will not act on the request `state` shows, if so
/// (`failover::request::not_ours`).
pub(super) fn not_ours(
    group: &MysqlFailoverGroup,
    rec: Option<&record::Record>,
    state: &OrderedUpdateStatus,
) -> Option<String> {
    let phase = Phase::parse(&state.phase).filter(|p| !p.is_final())?;
    let shown = crate::failover::request::Shown {
        request_id: &state.request_id,
        phase: phase.as_str(),
        before_job: matches!(phase, Phase::Pending | Phase::Admitting | Phase::Deferred),
        pending: (phase == Phase::Pending).then(|| {
            let asked_terms = || {
                // The source and its generation as status shows them: a
                // source other than the decided one is superseded (the
                // rules' first check), never run.
                let request = group.spec.ordered_update.as_deref()?;
                let source = state.source_site.as_deref()?;
                in_flight_of(&asked(group, request, source, state.source_generation?))
            };
            asked_terms().unwrap_or_default()
        }),
        asked: group.spec.ordered_update.as_ref().map(|r| r.request_id.as_str()),
        in_flight: in_flight_of(state),
        admitted: switchover_phase(phase)
            .map(|(leg, _)| rec.and_then(|r| r.admitted.as_deref()) == Some(admission_of(state, leg).as_str())),
    };
    crate::failover::request::not_ours::<OrderedUpdateStatus>(rec, &shown)
}

/// Enters `phase` (see `failover::request::enter`).
pub(super) async fn enter(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    state: &mut OrderedUpdateStatus,
    phase: Phase,
    message: Option<String>,
    admission: Option<PlannedFailoverAdmission>,
    attention: Option<String>,
) -> Result<MysqlFailoverGroup, Error> {
    let phase = (phase.as_str(), !phase.is_final());
    crate::failover::request::enter(ctx, group, state, phase, message, admission, attention).await
}
