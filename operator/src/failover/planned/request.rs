//! A request's bookkeeping: taking it up (its id recorded first, a reused
//! id reported), the admission written to the decision record before the
//! drain, each phase written to `status.plannedFailover`.

use super::MAX_HISTORY;
use crate::controller::Context;
use crate::controller::Error;
use crate::controller::failover_group::{mark_operation_in_progress, publish};
use crate::controller::kube_err;
use crate::failover::record;
use crate::failover::request::operation_of;
use crate::failover::round::RoundRecord;
use bloodraven_api::names::ENGINE_FIELD_MANAGER;
use bloodraven_api::v1alpha1::IgnoredRequest;
use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use bloodraven_api::v1alpha1::PhaseTransition;
use bloodraven_api::v1alpha1::PlannedFailoverAdmission;
use bloodraven_api::v1alpha1::PlannedFailoverStatus;
use bloodraven_api::v1alpha1::reason;
use bloodraven_core::failover::planned::Phase;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::ResourceExt;
use kube::api::Patch;
use kube::api::PatchParams;
use kube::runtime::events::EventType;
use serde_json::json;

/// Takes up the request to drive: the one in a non-final phase, or a new
/// `spec.plannedFailover` (its id recorded first, so it is never run twice;
/// a target that is already active completes at once, one not in
/// `spec.sites` fails). `Err(group)`: nothing to drive.
pub(super) async fn take_up(
    ctx: &Context,
    round: &mut RoundRecord,
    group: MysqlFailoverGroup,
) -> Result<Result<(MysqlFailoverGroup, PlannedFailoverStatus), MysqlFailoverGroup>, Error> {
    let current = group.status.as_ref().and_then(|s| s.planned_failover.clone());
    let mut state = match current {
        Some(st) if Phase::parse(&st.phase).is_some_and(|p| !p.is_final()) => st,
        _ => {
            let Some(request) = group.spec.planned_failover.clone() else { return Ok(Err(group)) };
            if let Some(st) = current.as_ref().filter(|st| st.request_id == request.request_id) {
                if st.target_site == request.target_site {
                    // The request status answers: done.
                    return Ok(Err(group));
                }
                let why = format!(
                    "it was taken up before, for target {} (phase {})",
                    st.target_site,
                    if st.phase.is_empty() { "unknown" } else { st.phase.as_str() }
                );
                return ignore_reused(ctx, group, &request, &why).await.map(Err);
            }
            let Some((active, generation)) = group.decided().map(|(s, g)| (s.to_owned(), g)) else {
                return Ok(Err(group));
            };
            let Some(rec) = round.fresh(ctx).await?.cloned() else { return Ok(Err(group)) };
            if rec.requests.contains(&request.request_id) {
                // Taken up before (status may have been wiped since): never again.
                let why = "the decision record lists it among the requests already taken up";
                return ignore_reused(ctx, group, &request, why).await.map(Err);
            }
            if rec.tampered.is_some() || rec.active_site != active || rec.generation != generation {
                // resolve() reports it; nothing starts on a record that does not agree.
                return Ok(Err(group));
            }
            // Status first (Pending); the id goes into the record when the
            // request leaves Pending, before anything is done to a site.
            PlannedFailoverStatus {
                request_id: request.request_id,
                target_site: request.target_site,
                phase: String::new(),
                source_site: Some(active),
                source_generation: Some(generation),
                ..PlannedFailoverStatus::default()
            }
        }
    };
    let mut group = group;
    if state.phase.is_empty() {
        let already = state.source_site.as_deref() == Some(state.target_site.as_str());
        let (phase, message) = if already {
            (Phase::Completed, Some(format!("{} is already the active site; nothing to do", state.target_site)))
        } else if group.site(&state.target_site).is_none() {
            (Phase::Failed, Some(format!("target {} is not one of spec.sites", state.target_site)))
        } else {
            (Phase::Pending, None)
        };
        group = enter(ctx, &group, &mut state, phase, message, None).await?;
        if phase.is_final() {
            return Ok(Err(group));
        }
    }
    Ok(Ok((group, state)))
}

/// Reports `request`, whose id was taken up before (`why`), as ignored:
/// `status.ignoredPlannedFailover` and one Warning Event, once per id and
/// target; a request runs once, so the person who reused the id learns to
/// write a new one instead of waiting for a failover that never comes.
pub(super) async fn ignore_reused(
    ctx: &Context,
    group: MysqlFailoverGroup,
    request: &bloodraven_api::v1alpha1::PlannedFailoverRequest,
    why: &str,
) -> Result<MysqlFailoverGroup, Error> {
    let ignored = IgnoredRequest {
        request_id: request.request_id.clone(),
        target_site: request.target_site.clone(),
        reason: reason::REQUEST_ID_REUSED.to_owned(),
        message: format!(
            "spec.plannedFailover.requestId {} was not taken up: {why}, and a request runs once; to ask for a planned failover to {}, write a new requestId",
            request.request_id, request.target_site
        ),
    };
    let stored = group.status.as_ref().and_then(|s| s.ignored_planned_failover.as_ref());
    if stored == Some(&ignored) || !ctx.leadership.is_leader() {
        return Ok(group);
    }
    tracing::warn!(group = %group.name_any(), request_id = %request.request_id, target = %request.target_site, "planned failover request id reused; not taken up");
    crate::failover::request::report_ignored(ctx, &group, "ignoredPlannedFailover", ignored).await
}

/// The record's word for an admitted request.
pub(super) fn admission_of(state: &PlannedFailoverStatus) -> String {
    format!("{} {} {}", state.request_id, state.target_site, state.source_site.as_deref().unwrap_or(""))
}

/// Records that `state`'s request was admitted (decision record,
/// compare-and-swap), before its drain.
pub(super) async fn remember_admission(
    ctx: &Context,
    round: &mut RoundRecord,
    state: &PlannedFailoverStatus,
) -> Result<(), Error> {
    let source = state.source_site.as_deref().unwrap_or_default();
    remember_admitted(ctx, round, &admission_of(state), source, &state.target_site).await
}

/// Records `admitted`, the word of a request admitted to switch over from
/// `source` to `target` (decision record, compare-and-swap), before its
/// drain: only a switchover the record names is ever drained, promoted or
/// repointed.
pub(crate) async fn remember_admitted(
    ctx: &Context,
    round: &mut RoundRecord,
    admitted: &str,
    source: &str,
    target: &str,
) -> Result<(), Error> {
    let rec = record_for(ctx, round, "record the admission for").await?;
    if rec.admitted.as_deref() == Some(admitted) {
        return Ok(());
    }
    if rec.tampered.is_some() || source != rec.active_site {
        return Err(Error::Site {
            action: "admit a switchover for",
            site: target.to_owned(),
            message: "the decision record does not show the request's source as active".into(),
        });
    }
    let mut extra = rec.extra();
    extra.admitted = Some(admitted.to_owned());
    keep_decision(ctx, round, &rec, &extra).await
}

/// Sets the record's [`record::SiteHold`] to `hold` (compare-and-swap,
/// the same decision), before the step it guards.
pub(crate) async fn remember_site_hold(
    ctx: &Context,
    round: &mut RoundRecord,
    hold: record::SiteHold,
) -> Result<(), Error> {
    let rec = record_for(ctx, round, "record the site hold for").await?;
    if rec.site_hold.as_ref() == Some(&hold) {
        return Ok(());
    }
    // Its words come from status too (a namespace, a site name): one that
    // would not read back as written is never stored.
    if record::SiteHold::parse(&hold.to_string()).as_ref() != Some(&hold) {
        return Err(Error::Site {
            action: "record the site hold for",
            site: hold.site().to_owned(),
            message: "the hold's site or namespace is not a single word (status was written by someone else)".into(),
        });
    }
    // Another request's hold that still holds is never replaced (admission
    // refuses while it holds; this is the last word before the write).
    if let Some(why) = rec
        .site_hold
        .as_ref()
        .filter(|h| h.request() != hold.request())
        .and_then(|h| h.holds(&rec.active_site, &[h.site()], Timestamp::now().as_second()))
    {
        return Err(Error::Site { action: "record the site hold for", site: rec.active_site.clone(), message: why });
    }
    let mut extra = rec.extra();
    extra.site_hold = Some(hold);
    keep_decision(ctx, round, &rec, &extra).await
}

/// Makes the site Job of `spec` (found again if this request's pinned Job
/// exists) under the record's Job hold of `request`, and pins the hold to
/// it, at least until `until`. `Ok(Err(why))`: no Job may run for the
/// request; a hold that no Job of ours was made under is cleared, one
/// pinned stays to its bound.
pub(crate) async fn ensure_held_job(
    ctx: &Context,
    round: &mut RoundRecord,
    spec: &crate::failover::site_job::JobSpecFor<'_>,
    request: &str,
    until: i64,
) -> Result<Result<bloodraven_core::failover::disruption::JobState, String>, Error> {
    use crate::failover::site_job::{EnsureError, ensure};
    let site = spec.site.name.as_str();
    if !ctx.leadership.is_leader() {
        return Err(Error::NotLeader);
    }
    match ensure(ctx, spec).await {
        // Made before this step made it: a leader that died before pinning
        // it, a Job left by an earlier request of the same id, or a
        // look-alike. Its provenance is unknown, so it is not taken for
        // this request's, and the hold stays to its bound.
        Ok(ensured) if !ensured.created && spec.job_uid.is_none() => Ok(Err(format!(
            "a Job of this request's name existed before the operator made it (made by an earlier leader, an earlier request of the same id, or someone else); it is not taken for this request's, and {site} stays held until the Job's deadline"
        ))),
        Ok(ensured) => {
            pin_job_hold(ctx, round, request, site, &ensured.uid, until).await?;
            Ok(Ok(ensured.state))
        }
        Err(EnsureError::Refused(why)) => {
            // Refused before it was made: it holds nothing. Once made
            // (pinned), its end alone ends the hold, whatever took its name.
            if spec.job_uid.is_none() {
                forget_site_hold(ctx, round, request, |h| matches!(h, record::SiteHold::Job { .. })).await?;
            }
            Ok(Err(why))
        }
        Err(EnsureError::Api(e)) => Err(e),
    }
}

/// Pins the record's Job hold of `request` on `site` to the Job's `uid`
/// once the Job is made (compare-and-swap, the same decision): from then
/// on only that Job's end ends the hold. The hold lasts at least until
/// `until` (the Job's deadline counts from its making, which a leader
/// change can put after the hold was written).
async fn pin_job_hold(
    ctx: &Context,
    round: &mut RoundRecord,
    request: &str,
    site: &str,
    uid: &str,
    until: i64,
) -> Result<(), Error> {
    let rec = record_for(ctx, round, "pin the site hold for").await?;
    let mut extra = rec.extra();
    let Some(record::SiteHold::Job { site: held, request: of, job_uid: pinned @ None, until: bound, .. }) =
        extra.site_hold.as_mut()
    else {
        return Ok(());
    };
    if held != site || of != request || uid.is_empty() {
        return Ok(());
    }
    *pinned = Some(uid.to_owned());
    *bound = (*bound).max(until);
    keep_decision(ctx, round, &rec, &extra).await
}

/// Clears the record's [`record::SiteHold`] when it is one of `request`'s
/// that `which` accepts (another request's, or another kind, stays).
pub(crate) async fn forget_site_hold(
    ctx: &Context,
    round: &mut RoundRecord,
    request: &str,
    which: fn(&record::SiteHold) -> bool,
) -> Result<(), Error> {
    let rec = record_for(ctx, round, "clear the site hold for").await?;
    if !rec.site_hold.as_ref().is_some_and(|h| h.request() == request && which(h)) {
        return Ok(());
    }
    let mut extra = rec.extra();
    extra.site_hold = None;
    keep_decision(ctx, round, &rec, &extra).await
}

/// Clears the record's Job hold of `request` once its Job has ended by its
/// own status (see [`crate::failover::site_job::ended`]); a Job deleted
/// before it ended (its Pod may run on, orphaned) keeps the hold until its
/// deadline.
pub(crate) async fn forget_job_hold_if_ended(
    ctx: &Context,
    round: &mut RoundRecord,
    group: &MysqlFailoverGroup,
    request: &str,
) -> Result<(), Error> {
    let rec = record_for(ctx, round, "clear the site hold for").await?;
    let Some(record::SiteHold::Job { site, namespace, request: of, job_uid, .. }) = rec.site_hold.as_ref() else {
        return Ok(());
    };
    let Some((operation, request_id)) = of.split_once('/').filter(|_| of == request) else { return Ok(()) };
    let name = crate::failover::site_job::job_name(&group.name_any(), operation, request_id, site);
    let uid = group.metadata.uid.clone().unwrap_or_default();
    let job =
        crate::failover::site_job::JobOf { group_uid: &uid, operation, site, request_id, job_uid: job_uid.as_deref() };
    if crate::failover::site_job::ended(&ctx.client, namespace, &name, &job).await? {
        forget_site_hold(ctx, round, request, |h| matches!(h, record::SiteHold::Job { .. })).await?;
    }
    Ok(())
}

/// The record's `inFlight` for `state`: its id, target, source and source
/// generation (`failover::request::in_flight_words`).
pub(super) fn in_flight_of(state: &PlannedFailoverStatus) -> Option<String> {
    let generation = state.source_generation.map(|g| g.to_string()).unwrap_or_default();
    let source = state.source_site.as_deref().unwrap_or_default();
    crate::failover::request::in_flight_words(&[&state.request_id, &state.target_site, source, &generation])
}

/// Runs on a planned failover someone else ended in status
/// ([`crate::failover::request::ended_by_hand`]): its running phase written
/// back, history untouched (the drain's deadline counts from there), and a
/// Warning Event `StatusRestored`. Returns the group as written, or as it was.
pub(super) async fn run_on_if_ended_by_hand(
    ctx: &Context,
    round: &mut RoundRecord,
    group: MysqlFailoverGroup,
) -> Result<MysqlFailoverGroup, Error> {
    use crate::failover::request::{ended_by_hand, may_be_ended_by_hand, run_on_note};
    let Some(mut state) = group.status.as_ref().and_then(|s| s.planned_failover.clone()) else { return Ok(group) };
    let is_final = |p: &str| Phase::parse(p).is_none_or(Phase::is_final);
    if !may_be_ended_by_hand(&state.phase, &state.history, is_final) || !ctx.leadership.is_leader() {
        return Ok(group);
    }
    let rec = round.fresh(ctx).await?.cloned();
    let terms = in_flight_of(&state);
    let Some(last) =
        ended_by_hand(rec.as_ref(), terms.as_deref(), &state.phase, &state.history, is_final).map(str::to_owned)
    else {
        return Ok(group);
    };
    let note = run_on_note("planned failover", &state.request_id, &state.phase, &last);
    tracing::warn!(group = %group.name_any(), request_id = %state.request_id, shown = %state.phase, phase = %last, "request ended in status by someone else runs on");
    state.phase = last;
    state.message = Some(note.clone());
    let written = write_state(ctx, &group, &state).await?;
    publish(ctx, &written, EventType::Warning, reason::STATUS_RESTORED, note, "PlannedFailover", None).await;
    Ok(written)
}

/// Why the operator will not act on the request `state` shows, if so:
/// before its drain it must be what `spec.plannedFailover` asks (else it was
/// cancelled, or never asked); once taken up, the decision record must hold
/// it in flight on the terms status shows, and from the drain on name it as
/// admitted (else status was written by someone else).
pub(super) fn not_ours(
    group: &MysqlFailoverGroup,
    rec: Option<&record::Record>,
    state: &PlannedFailoverStatus,
) -> Option<String> {
    let phase = Phase::parse(&state.phase)?;
    if phase.is_final() {
        return None;
    }
    let never = |why: &str| {
        format!(
            "status showed request {} in phase {}, but {why} (status is written by the operator only); nothing was done",
            state.request_id,
            phase.as_str()
        )
    };
    if matches!(phase, Phase::Pending | Phase::Admitting | Phase::Deferred) {
        let asked = group.spec.planned_failover.as_ref();
        if asked.map(|r| (r.request_id.as_str(), r.target_site.as_str()))
            != Some((state.request_id.as_str(), state.target_site.as_str()))
        {
            return Some("cancelled: spec.plannedFailover no longer asks for it".to_owned());
        }
    }
    let in_flight = in_flight_of(state);
    let draining = matches!(phase, Phase::Draining | Phase::Promoting | Phase::Repointing);
    let admitted = rec.and_then(|r| r.admitted.as_deref()) == Some(admission_of(state).as_str());
    // In Pending: the terms the spec asks for, from the source status
    // shows (a source other than the decided one is superseded, never run).
    let asked = (phase == Phase::Pending).then(|| {
        let request = group.spec.planned_failover.as_ref()?;
        in_flight_of(&PlannedFailoverStatus {
            request_id: request.request_id.clone(),
            target_site: request.target_site.clone(),
            source_site: state.source_site.clone(),
            source_generation: state.source_generation,
            ..PlannedFailoverStatus::default()
        })
    });
    let pending = asked.map(Option::unwrap_or_default);
    if let Some(why) = crate::failover::request::not_as_recorded(
        rec,
        &state.request_id,
        in_flight.as_deref(),
        pending.as_deref(),
        draining && admitted,
    ) {
        return Some(never(why));
    }
    (draining && !admitted).then(|| never("the operator never admitted it"))
}

/// Records that `request_id` was taken up on the terms `in_flight`
/// ([`record::Record::in_flight`]), in one write (decision record,
/// compare-and-swap), before anything is done to a site: neither a repeat
/// of it nor a wiped status ever runs it again.
/// Errors: the record already lists the id on other terms (it ran once).
pub(crate) async fn remember_request(
    ctx: &Context,
    round: &mut RoundRecord,
    request_id: &str,
    in_flight: &str,
) -> Result<(), Error> {
    let rec = record_for(ctx, round, "record the request for").await?;
    if rec.requests.iter().any(|r| r == request_id) {
        if rec.in_flight.iter().any(|t| t == in_flight) {
            return Ok(());
        }
        return Err(Error::Site {
            action: "take up a request for",
            site: rec.active_site.clone(),
            message: format!("the decision record lists request {request_id} as taken up already, on other terms"),
        });
    }
    let operation = operation_of(request_id);
    let mut extra = rec.extra();
    extra.requests.push(request_id.to_owned());
    // One request per operation runs: a line of the same operation left
    // behind (an operator stopped before it removed it) is replaced.
    extra.in_flight.retain(|t| operation_of(t) != operation);
    extra.in_flight.push(in_flight.to_owned());
    keep_decision(ctx, round, &rec, &extra).await
}

/// Clears what the record keeps of a request of `operation` while it runs
/// (`inFlight`, `admitted`) once status shows none of its requests in a
/// running phase (`None`: the planned failover's, whose ids carry no
/// `operation/`). Left behind, a
/// finished request written back into a running phase by hand would match
/// them and run again. Reads the record only when the round's copy shows
/// one to clear.
pub(crate) async fn forget_ended(ctx: &Context, round: &mut RoundRecord, operation: Option<&str>) -> Result<(), Error> {
    let ours = |line: &String| !line.is_empty() && operation_of(line) == operation;
    let left = |r: &record::Record| r.in_flight.iter().any(ours) || r.admitted.as_ref().is_some_and(ours);
    if !round.get().is_some_and(left) || !ctx.leadership.is_leader() {
        return Ok(());
    }
    let rec = record_for(ctx, round, "clear the ended request for").await?;
    if !left(&rec) || rec.tampered.is_some() {
        return Ok(());
    }
    let mut extra = rec.extra();
    extra.in_flight.retain(|t| !ours(t));
    if extra.admitted.as_ref().is_some_and(ours) {
        extra.admitted = None;
    }
    keep_decision(ctx, round, &rec, &extra).await
}

/// Enters `phase`: history, Event, status (one write).
pub(super) async fn enter(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    state: &mut PlannedFailoverStatus,
    phase: Phase,
    message: Option<String>,
    admission: Option<PlannedFailoverAdmission>,
) -> Result<MysqlFailoverGroup, Error> {
    if phase != Phase::Draining {
        ctx.groups.drains.forget(group.metadata.uid.as_deref().unwrap_or_default(), &state.request_id);
    }
    phase.as_str().clone_into(&mut state.phase);
    state.message.clone_from(&message);
    state.admission = admission;
    state.history.push(PhaseTransition {
        phase: state.phase.clone(),
        time: Time(Timestamp::now()),
        message: message.clone(),
    });
    if state.history.len() > MAX_HISTORY {
        // Keep the first entry (when it started) and the latest ones.
        let excess = state.history.len() - MAX_HISTORY;
        state.history.drain(1..=excess);
    }
    let written = write_state(ctx, group, state).await?;
    ctx.failpoint.hit(&format!("planned-entered-{}", phase.as_str()));
    let operation = crate::failover::decision::PLANNED_FAILOVER;
    ctx.metrics
        .operation_phase_transitions_total
        .with_label_values(&[&group.name_any(), operation, phase.as_str()])
        .inc();
    let type_ = if phase == Phase::Failed { EventType::Warning } else { EventType::Normal };
    // A phase entered again (Admitting after Deferred) is a transition of
    // its own: its count keeps the note, and so the Event, its own.
    let times = state.history.iter().filter(|h| h.phase == state.phase).count();
    let again = if times > 1 { format!(" (again: time {times})") } else { String::new() };
    let note = format!(
        "planned failover {} to {}: {}{again}{}",
        state.request_id,
        state.target_site,
        phase.as_str(),
        message.map(|m| format!(": {m}")).unwrap_or_default()
    );
    publish(ctx, &written, type_, &format!("PlannedFailover{}", phase.as_str()), note, "PlannedFailover", None).await;
    Ok(written)
}

/// `state` as a merge patch over `stored`: every field `stored` has and
/// `state` leaves out (an `Option` that is `None` is not serialized) is
/// written as null, at any depth, so the stored request is replaced whole.
/// Found on the playground: a new request showed the previous request's
/// deferral (`admission`) and message beside its own history.
pub(crate) fn replacing<T: serde::Serialize>(stored: Option<&T>, state: &T) -> serde_json::Value {
    fn nulls(new: &mut serde_json::Value, old: &serde_json::Value) {
        let (Some(new), Some(old)) = (new.as_object_mut(), old.as_object()) else { return };
        for (key, was) in old {
            match new.get_mut(key) {
                Some(now) => nulls(now, was),
                None => {
                    new.insert(key.clone(), serde_json::Value::Null);
                }
            }
        }
    }
    let mut new = serde_json::to_value(state).unwrap_or(serde_json::Value::Null);
    if let Some(stored) = stored {
        nulls(&mut new, &serde_json::to_value(stored).unwrap_or(serde_json::Value::Null));
    }
    new
}

/// Writes `status.plannedFailover` with the resourceVersion of `group`,
/// and, when the phase is not final, has the observer mark the group
/// unstable (`OperationInProgress`) right after, so the deploy API answers
/// `423` at once (it also reads the phase itself, for the moment between the
/// two writes: `lease::service::facts_of`).
pub(super) async fn write_state(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    state: &PlannedFailoverStatus,
) -> Result<MysqlFailoverGroup, Error> {
    if !ctx.leadership.is_leader() {
        return Err(Error::NotLeader);
    }
    let stored = group.status.as_ref().and_then(|s| s.planned_failover.as_ref());
    let mut status = json!({ "plannedFailover": replacing(stored, state) });
    if group.status.as_ref().is_some_and(|s| s.ignored_planned_failover.is_some()) {
        // A request was taken up: the report of an ignored one is over.
        status["ignoredPlannedFailover"] = serde_json::Value::Null;
    }
    let patch = json!({ "metadata": { "resourceVersion": group.resource_version() }, "status": status });
    let api: Api<MysqlFailoverGroup> = Api::all(ctx.client.clone());
    let params = PatchParams { field_manager: Some(ENGINE_FIELD_MANAGER.into()), ..PatchParams::default() };
    let written = api
        .patch_status(&group.name_any(), &params, &Patch::Merge(&patch))
        .await
        .map_err(kube_err("write the planned failover's progress"))?;
    if Phase::parse(&state.phase).is_some_and(|p| !p.is_final()) {
        return mark_operation_in_progress(ctx, written).await;
    }
    Ok(written)
}

/// The group's decision record for a write that needs it, read afresh when
/// the round's copy came from the watch cache: a request is only ever acted
/// on with a record (bootstrap writes it first).
async fn record_for(ctx: &Context, round: &mut RoundRecord, action: &'static str) -> Result<record::Record, Error> {
    round.fresh(ctx).await?.cloned().ok_or_else(|| Error::Site {
        action,
        site: String::new(),
        message: "no decision record".into(),
    })
}

/// Rewrites the decision record `rec` with `extra`, the same decision
/// (site and generation), compare-and-swap; leader only.
async fn keep_decision(
    ctx: &Context,
    round: &mut RoundRecord,
    rec: &record::Record,
    extra: &record::Extra,
) -> Result<(), Error> {
    if let Some(how) = &rec.tampered {
        // Rewriting it would give a hand edit a valid digest.
        return Err(Error::Site {
            action: "record a planned failover for",
            site: rec.active_site.clone(),
            message: format!("the decision record was edited by hand ({how}); see the DecisionConflict condition"),
        });
    }
    round.write(ctx, &rec.active_site, rec.generation, extra).await.map(drop)
}
