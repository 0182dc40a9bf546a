//! A restore-in-place's bookkeeping and actions: taking the request up,
//! what the operator refuses to act on, the Job, the fence, the decision
//! and the promotion (`failover::switchover`), the Services, and the
//! re-clone mark.

use std::time::Duration;

use super::{Drive, RECHECK, recorded};
use crate::controller::failover_group::assess::SiteProbe;
use crate::controller::failover_group::publish;
use crate::controller::{Context, Error, kube_err};
use crate::failover::planned::request::{
    ensure_held_job, forget_job_hold_if_ended, forget_site_hold, remember_admitted, remember_request,
    remember_site_hold,
};
use crate::failover::record::{self, SiteHold};
use crate::failover::request::{RequestStatus, deferral, ignore_reused, write_if_changed};
use crate::failover::round::RoundRecord;
use crate::failover::site_job;
use crate::failover::switchover::{self, Local, Step, admit};
use crate::mysql::Flavor;
use bloodraven_api::names::site_job::ROLE_RESTORE;
use bloodraven_api::names::{ACTIVE_SITE_ANNOTATION, GROUP_ANNOTATION, PRIMARY_OF_LABEL, RECLONE_DONE_ANNOTATION};
use bloodraven_api::v1alpha1::{MysqlFailoverGroup, PlannedFailoverAdmission, RestoreInPlaceStatus, SiteJobStatus};
use bloodraven_core::failover::disruption::JobState;
use bloodraven_core::failover::planned;
use bloodraven_core::failover::restore::{Action, Phase};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};

/// The record's word for the request's switchover, admitted before the fence.
fn admission_of(state: &RestoreInPlaceStatus) -> String {
    let old = state.source_site.as_deref().unwrap_or("");
    format!("{} {} {old}", recorded(&state.request_id), state.site.as_deref().unwrap_or(""))
}

/// Enters `phase` (see `failover::request::enter`).
pub(super) async fn enter(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    state: &mut RestoreInPlaceStatus,
    phase: Phase,
    message: Option<String>,
    admission: Option<PlannedFailoverAdmission>,
    attention: Option<String>,
) -> Result<MysqlFailoverGroup, Error> {
    // Waiting for a person's re-clone leaves the group stable: the topology
    // is decided and deploys go on against the restored primary.
    let phase = (phase.as_str(), !phase.is_final() && phase != Phase::AwaitingReclone);
    crate::failover::request::enter(ctx, group, state, phase, message, admission, attention).await
}

/// Takes up the request to drive: the one in a non-final phase, or a new
/// `spec.restoreInPlace` whose id was never taken up. `Err(group)`:
/// nothing to drive.
pub(super) async fn take_up(
    ctx: &Context,
    round: &mut RoundRecord,
    group: MysqlFailoverGroup,
) -> Result<Result<(MysqlFailoverGroup, RestoreInPlaceStatus), MysqlFailoverGroup>, Error> {
    let current = RestoreInPlaceStatus::stored(&group).cloned();
    if let Some(st) = current.as_ref().filter(|st| Phase::parse(&st.phase).is_some_and(|p| !p.is_final())) {
        return Ok(Ok((group.clone(), st.clone())));
    }
    let Some(request) = group.spec.restore_in_place.as_deref().cloned() else { return Ok(Err(group)) };
    if let Some(st) = current.as_ref().filter(|st| st.request_id == request.request_id) {
        if request.site.is_none() || request.site == st.site {
            // The request status answers: done.
            return Ok(Err(group));
        }
        let why = format!("it was taken up before, for site {}", st.site.as_deref().unwrap_or("?"));
        let site = request.site.as_deref().unwrap_or_default();
        return ignore_reused::<RestoreInPlaceStatus>(ctx, group, (&request.request_id, site), &why).await.map(Err);
    }
    let Some((active, generation)) = group.decided().map(|(s, g)| (s.to_owned(), g)) else { return Ok(Err(group)) };
    let Some(rec) = round.fresh(ctx).await?.cloned() else { return Ok(Err(group)) };
    if rec.requests.contains(&recorded(&request.request_id)) {
        // Taken up before (status moved on, or was lost since): never again.
        let why = "the decision record lists it among the requests already taken up";
        let site = request.site.as_deref().unwrap_or_default();
        return ignore_reused::<RestoreInPlaceStatus>(ctx, group, (&request.request_id, site), why).await.map(Err);
    }
    if rec.tampered.is_some() || rec.active_site != active || rec.generation != generation {
        return Ok(Err(group));
    }
    let mut state = asked(&group, &request, &active, generation);
    let site = state.site.clone();
    let refused = match site {
        None => Some("the group has no standby to restore: spec.sites names one site".to_owned()),
        Some(s) if group.site(&s).is_none() => Some(format!("site {s} is not one of spec.sites")),
        Some(_) if site_job::namespace_refused(ctx, &request.namespace, &group.name_any()).is_some() => {
            site_job::namespace_refused(ctx, &request.namespace, &group.name_any())
        }
        Some(_) => request
            .job_template
            .job_spec()
            .err()
            .map(|e| format!("spec.restoreInPlace.jobTemplate.spec is not a Job spec: {e}")),
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

/// The request as spec asks for it, taken up at `active`, `generation`
/// (the site defaults to the standby): the terms it runs on.
fn asked(
    group: &MysqlFailoverGroup,
    request: &bloodraven_api::v1alpha1::RestoreInPlaceRequest,
    active: &str,
    generation: i64,
) -> RestoreInPlaceStatus {
    let standby = || group.spec.sites.iter().map(|s| s.name.clone()).find(|s| s != active);
    RestoreInPlaceStatus {
        request_id: request.request_id.clone(),
        site: request.site.clone().or_else(standby),
        source_site: Some(active.to_owned()),
        source_generation: Some(generation),
        namespace: Some(request.namespace.clone()),
        active_deadline_seconds: Some(request.active_deadline_seconds),
        ..RestoreInPlaceStatus::default()
    }
}

/// The record's `inFlight` for `state`: its recorded id, old primary, site,
/// source generation, namespace and deadline
/// (`failover::request::in_flight_words`).
pub(super) fn in_flight_of(state: &RestoreInPlaceStatus) -> Option<String> {
    let id = recorded(&state.request_id);
    let generation = state.source_generation.map(|g| g.to_string()).unwrap_or_default();
    let deadline = state.active_deadline_seconds.map(|d| d.to_string()).unwrap_or_default();
    crate::failover::request::in_flight_words(&[
        &id,
        state.source_site.as_deref().unwrap_or_default(),
        state.site.as_deref().unwrap_or_default(),
        &generation,
        state.namespace.as_deref().unwrap_or_default(),
        &deadline,
    ])
}

/// Why the operator will not act on the request `state` shows, if so
/// (see the ordered update's: cancelled before the Job; once taken up, in
/// flight in the record on the terms status shows; from the fence on,
/// admitted there). After its decision the record's re-clone hold of the
/// request answers instead: it names the old primary and the generation
/// decided, status put back from it (`restore_from_record`) is the
/// operator's own, and what is left to do (promote the decided site, keep
/// the old primary out) follows the record's decision whatever else
/// status says.
pub(super) fn not_ours(
    group: &MysqlFailoverGroup,
    rec: Option<&record::Record>,
    state: &RestoreInPlaceStatus,
) -> Option<String> {
    let phase = Phase::parse(&state.phase).filter(|p| !p.is_final())?;
    let decided = matches!(phase, Phase::Promoting | Phase::Repointing | Phase::AwaitingReclone);
    if decided && rec.is_some_and(|r| awaits_reclone(r, state)) {
        return None;
    }
    let before_job = matches!(phase, Phase::Pending | Phase::Admitting | Phase::Deferred);
    let fenced = !before_job && !matches!(phase, Phase::Restoring | Phase::Verifying);
    let shown = crate::failover::request::Shown {
        request_id: &state.request_id,
        phase: phase.as_str(),
        before_job,
        pending: (phase == Phase::Pending).then(|| {
            let asked_terms = || {
                // The source and its generation as status shows them: a
                // source other than the decided one is superseded (the
                // rules' first check), never run.
                let request = group.spec.restore_in_place.as_deref()?;
                let source = state.source_site.as_deref()?;
                in_flight_of(&asked(group, request, source, state.source_generation?))
            };
            asked_terms().unwrap_or_default()
        }),
        asked: group.spec.restore_in_place.as_ref().map(|r| r.request_id.as_str()),
        in_flight: in_flight_of(state),
        admitted: fenced.then(|| rec.and_then(|r| r.admitted.as_deref()) == Some(admission_of(state).as_str())),
    };
    crate::failover::request::not_ours::<RestoreInPlaceStatus>(rec, &shown)
}

/// Whether `rec` awaits the re-clone that `state`'s decision left: its
/// hold names the request, the old primary and the generation decided, and
/// the restored site is the decided primary.
fn awaits_reclone(rec: &record::Record, state: &RestoreInPlaceStatus) -> bool {
    matches!(&rec.site_hold, Some(SiteHold::Reclone { site, generation, request })
        if *request == recorded(&state.request_id)
            && state.source_site.as_ref() == Some(site)
            && state.source_generation == Some(generation - 1)
            && state.site.as_ref() == Some(&rec.active_site))
}

/// Admission's own check: the group stable with no other operation in
/// flight (`failover::request::admissible`), and the operator knows which
/// server the site is.
pub(super) fn admissible_now(group: &MysqlFailoverGroup, known_server_id: u32) -> Result<(), String> {
    crate::failover::request::admissible::<RestoreInPlaceStatus>(group)?;
    if known_server_id == 0 {
        return Err("the operator does not know the site's server_id yet (status.health[].identity)".to_owned());
    }
    Ok(())
}

/// Keeps the restore Job in `state.job` as last seen.
pub(super) fn record_job(state: &mut RestoreInPlaceStatus, group: &str, job: &JobState) {
    let (result, message) = match job {
        JobState::Absent => return,
        JobState::Running => ("Running", None),
        JobState::Complete => ("Complete", None),
        JobState::Failed(why) => ("Failed", Some(why.clone())),
    };
    let site = state.site.clone().unwrap_or_default();
    let now = Time(Timestamp::now());
    let entry = state.job.get_or_insert_with(|| SiteJobStatus {
        site: site.clone(),
        role: ROLE_RESTORE.to_owned(),
        job_name: site_job::job_name(group, RestoreInPlaceStatus::OPERATION, &state.request_id, &site),
        start_time: Some(now.clone()),
        ..SiteJobStatus::default()
    });
    if entry.result != result {
        result.clone_into(&mut entry.result);
        entry.message = message;
        if result != "Running" {
            entry.completion_time = Some(now);
        }
    }
}

/// The site every `<db>-primary` Service of the group points at, once they
/// all agree (`None` while they do not); the active site when the group
/// has none. Only the Services the MysqlDatabase reconciler keeps count:
/// named for an authoritative MysqlDatabase of the group, in its namespace,
/// with its controller ownerReference. Anyone who may create a Service can
/// copy the label and annotations, and a copy that never follows the
/// decision held the request in `Repointing` for good.
pub(super) async fn services_at(ctx: &Context, group: &MysqlFailoverGroup) -> Result<Option<String>, Error> {
    let api: Api<Service> = Api::all(ctx.client.clone());
    let services = api
        .list_metadata(&ListParams::default().labels(PRIMARY_OF_LABEL))
        .await
        .map_err(kube_err("list the -primary Services"))?;
    let name = group.name_any();
    let databases = ctx.authority.authoritative(&name);
    let kept = |s: &kube::core::PartialObjectMeta<Service>| {
        let owner = s.metadata.owner_references.iter().flatten().find(|o| o.controller == Some(true));
        databases.iter().any(|db| {
            db.namespace() == s.namespace()
                && crate::controller::database::service_name(&db.name_any()).is_ok_and(|n| n == s.name_any())
                && owner.is_some_and(|o| o.kind == "MysqlDatabase" && Some(&o.uid) == db.metadata.uid.as_ref())
        })
    };
    let mut at = services
        .items
        .iter()
        .filter(|s| s.annotations().get(GROUP_ANNOTATION) == Some(&name) && kept(s))
        .map(|s| s.annotations().get(ACTIVE_SITE_ANNOTATION).cloned().unwrap_or_default());
    let Some(first) = at.next() else { return Ok(group.decided().map(|(s, _)| s.to_owned())) };
    Ok(at.all(|s| s == first).then_some(first))
}

/// Runs one action of the table; `Some` ends the drive with that answer.
#[allow(clippy::too_many_arguments)] // one round: the request, its local memory and the probes it acts on
pub(super) async fn act(
    ctx: &Context,
    round: &mut RoundRecord,
    group: &mut MysqlFailoverGroup,
    state: &mut RestoreInPlaceStatus,
    local: &mut Local,
    action: Action,
    phase: Phase,
    probes: &[SiteProbe],
) -> Result<Option<Drive>, Error> {
    match action {
        Action::Idle => Ok(Some(Drive::idle(group.clone()))),
        Action::Enter(next) => enter_next(ctx, round, group, state, local, phase, next).await,
        Action::Defer { .. } => {
            let Some(hold) = local.hold.as_ref() else { return Ok(None) };
            let (admission, requeue) = deferral::<RestoreInPlaceStatus>(hold);
            if phase == Phase::Deferred {
                state.admission = Some(admission);
                *group = write_if_changed(ctx, group, state).await?;
            } else {
                let note = admission.message.clone();
                *group = enter(ctx, group, state, Phase::Deferred, note, Some(admission), None).await?;
            }
            Ok(Some(Drive::at(group.clone(), Phase::Deferred, requeue)))
        }
        Action::RunJob(site) => run_job(ctx, round, group, state, &site).await,
        Action::AwaitJob(_) | Action::AwaitRestored(_) | Action::RepointServices(_) => {
            // The Job's result is kept in status; the Services follow the
            // decision by the MysqlDatabase reconciler.
            *group = write_if_changed(ctx, group, state).await?;
            Ok(Some(Drive::at(group.clone(), phase, RECHECK)))
        }
        Action::AwaitReclone(_) => {
            *group = write_if_changed(ctx, group, state).await?;
            Ok(Some(Drive::at(group.clone(), phase, Duration::from_secs(10))))
        }
        Action::Switchover(step) => switch(ctx, round, group, state, local, phase, step, probes).await,
        Action::Fail(failure) => {
            // A Job that ended holds nothing more; one deleted before it
            // ended keeps its site held until its deadline; an old primary
            // awaiting its re-clone stays held.
            forget_job_hold_if_ended(ctx, round, group, &recorded(&state.request_id)).await?;
            hold_unrestored(ctx, round, group, state, failure.attention.as_deref()).await?;
            *group = write_if_changed(ctx, group, state).await?;
            *group = enter(ctx, group, state, Phase::Failed, Some(failure.reason), None, failure.attention).await?;
            Ok(Some(Drive::idle(group.clone())))
        }
    }
}

async fn enter_next(
    ctx: &Context,
    round: &mut RoundRecord,
    group: &mut MysqlFailoverGroup,
    state: &mut RestoreInPlaceStatus,
    local: &mut Local,
    from: Phase,
    next: Phase,
) -> Result<Option<Drive>, Error> {
    if from == Phase::Pending {
        // `not_ours` refused a status whose terms are not words before.
        let terms = in_flight_of(state).unwrap_or_default();
        remember_request(ctx, round, &recorded(&state.request_id), &terms).await?;
    }
    let old = state.source_site.clone().unwrap_or_default();
    let site = state.site.clone().unwrap_or_default();
    if next == Phase::Fencing {
        remember_admitted(ctx, round, &admission_of(state), &old, &site).await?;
    }
    if next == Phase::Restoring
        && let Some(why) = dry_run_job(ctx, group, state).await?
    {
        *group = enter(ctx, group, state, Phase::Failed, Some(why), None, None).await?;
        return Ok(Some(Drive::idle(group.clone())));
    }
    let request = recorded(&state.request_id);
    match next {
        // Before the Job exists: whatever becomes of status, the site is
        // not promoted while it may be restored (at most the Job's deadline).
        Phase::Restoring => {
            let deadline = site_job::deadline_seconds(RestoreInPlaceStatus::OPERATION, state.active_deadline_seconds);
            let until = Timestamp::now().as_second() + i64::from(deadline) + super::JOB_GRACE.as_secs() as i64;
            let namespace = state.namespace.clone().unwrap_or_default();
            remember_site_hold(
                ctx,
                round,
                SiteHold::Job { site: site.clone(), until, namespace, request, job_uid: None },
            )
            .await?;
        }
        Phase::Verifying => forget_site_hold(ctx, round, &request, |h| matches!(h, SiteHold::Job { .. })).await?,
        _ => {}
    }
    let generation = group.decided().map_or(0, |(_, g)| g);
    let message = match next {
        Phase::AwaitingReclone => {
            state.reclone_site = Some(old.clone());
            Some(format!(
                "{site} is the restored primary at topologyGeneration {generation}; {old} stays fenced and out of replication until a person re-clones it from {site} and annotates the group {RECLONE_DONE_ANNOTATION}={old}@{generation}"
            ))
        }
        Phase::Completed => {
            state.reclone_done_time = Some(Time(Timestamp::now()));
            Some(format!("completed: {site} is the restored primary and {old} was re-cloned"))
        }
        _ => None,
    };
    if matches!(next, Phase::Fencing | Phase::AwaitingReclone) {
        // A mark written before the request asks for it (guessed from the
        // generation, or left from an earlier restore) releases nothing.
        *group = remove_reclone_mark(ctx, group).await?;
    }
    if next == Phase::Completed {
        // The hold first: a leader that stops between the two writes leaves
        // `AwaitingReclone` with the mark, which the next one completes. A
        // `Completed` status beside a re-clone hold reads as status edited
        // by hand, and was put back to re-open the finished restore.
        forget_site_hold(ctx, round, &recorded(&state.request_id), |_| true).await?;
    }
    *group = write_if_changed(ctx, group, state).await?;
    *group = enter(ctx, group, state, next, message, None, None).await?;
    match next {
        Phase::AwaitingReclone => {
            let note = state.message.clone().unwrap_or_default();
            publish(ctx, group, EventType::Warning, "RecloneRequired", note, "RestoreInPlace", None).await;
        }
        Phase::Completed => {
            *group = remove_reclone_mark(ctx, group).await?;
            return Ok(Some(Drive::idle(group.clone())));
        }
        Phase::Admitting => local.hold = admit(ctx, group, &state.request_id).await?,
        _ => {}
    }
    Ok(None)
}

/// The restore Job, validated by the API server before it runs: why the
/// request cannot run, if so (nothing touched yet).
async fn dry_run_job(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    state: &RestoreInPlaceStatus,
) -> Result<Option<String>, Error> {
    let Some(request) = group.spec.restore_in_place.as_deref().filter(|r| r.request_id == state.request_id) else {
        return Ok(Some("spec.restoreInPlace no longer asks for it".to_owned()));
    };
    let site = state.site.clone().unwrap_or_default();
    let spec = group.site(&site).cloned().ok_or(Error::NoName)?;
    let namespace = state.namespace.clone().unwrap_or_default();
    let job = site_job::JobSpecFor {
        group,
        operation: RestoreInPlaceStatus::OPERATION,
        request_id: &state.request_id,
        namespace: &namespace,
        template: &request.job_template,
        deadline_seconds: state.active_deadline_seconds.unwrap_or(request.active_deadline_seconds),
        site: &spec,
        role: ROLE_RESTORE,
        job_uid: None,
    };
    match site_job::dry_run(&ctx.client, &job).await {
        Ok(()) => Ok(None),
        Err(site_job::EnsureError::Refused(why)) => {
            Ok(Some(format!("the Job restoring {site} would not be created: {why}; nothing was touched")))
        }
        Err(site_job::EnsureError::Api(e)) => Err(e),
    }
}

/// Removes the re-clone annotation once taken (the mark of one restore
/// never releases the old primary of a later one: it names the generation).
async fn remove_reclone_mark(ctx: &Context, group: &MysqlFailoverGroup) -> Result<MysqlFailoverGroup, Error> {
    if !group.annotations().contains_key(RECLONE_DONE_ANNOTATION) {
        return Ok(group.clone());
    }
    let api: Api<MysqlFailoverGroup> = Api::all(ctx.client.clone());
    let patch = serde_json::json!({"metadata": {"annotations": {RECLONE_DONE_ANNOTATION: null}}});
    let params = PatchParams {
        field_manager: Some(bloodraven_api::names::ENGINE_FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    api.patch(&group.name_any(), &params, &Patch::Merge(&patch)).await.map_err(kube_err("remove the re-clone mark"))
}

/// A restore that fails once its Job was made leaves its site holding
/// whatever the Job wrote (a half-loaded dump answers read-only, stands
/// alone and usually holds nothing the primary lacks, so the rejoin of a
/// returning site took it for a clean replica, and a promotion could
/// follow). The record holds it ([`SiteHold::Unrestored`]) before status
/// says `Failed`, whatever status shows later, until a person marks it
/// re-cloned ([`release_unrestored`]). A Job was made when status recorded
/// it, or when the record still holds the request's Job hold (written
/// before the Job is made, cleared when making it was refused). Judged on
/// the record, not status: its active site and generation, and a re-clone
/// hold of the old primary is never replaced. A mark already on the group
/// (typed early, or left from an earlier hold of the same site and
/// generation) is removed: only one set after this hold releases it.
async fn hold_unrestored(
    ctx: &Context,
    round: &mut RoundRecord,
    group: &mut MysqlFailoverGroup,
    state: &RestoreInPlaceStatus,
    attention: Option<&str>,
) -> Result<(), Error> {
    let site = state.site.clone().unwrap_or_default();
    let request = recorded(&state.request_id);
    round.fresh(ctx).await?;
    let Some(rec) = round.trusted().cloned() else { return Ok(()) };
    let job_hold =
        matches!(&rec.site_hold, Some(SiteHold::Job { request: of, site: on, .. }) if *of == request && *on == site);
    let made = state.job.is_some() || job_hold;
    let replaceable =
        rec.site_hold.as_ref().is_none_or(|h| h.request() == request && !matches!(h, SiteHold::Reclone { .. }));
    if attention != Some(site.as_str())
        || !made
        || site == rec.active_site
        || group.site(&site).is_none()
        || !replaceable
    {
        return Ok(());
    }
    let hold = SiteHold::Unrestored { site, generation: rec.generation, request };
    remember_site_hold(ctx, round, hold).await?;
    *group = remove_reclone_mark(ctx, group).await?;
    Ok(())
}

/// Lifts the record's [`SiteHold::Unrestored`] once the group carries its
/// re-clone mark (`reclone-done: SITE@GENERATION`, the generation it
/// failed at), removes the mark, and says so (Event `RecloneDone`). The
/// site is then judged as any other: rejoined once it answers clean,
/// promotable once it replicates.
pub(crate) async fn release_unrestored(
    ctx: &Context,
    round: &mut RoundRecord,
    group: MysqlFailoverGroup,
) -> Result<MysqlFailoverGroup, Error> {
    let Some(hold @ SiteHold::Unrestored { .. }) = round.trusted().and_then(|r| r.site_hold.clone()) else {
        return Ok(group);
    };
    let mark = hold.reclone_mark().unwrap_or_default();
    if group.annotations().get(RECLONE_DONE_ANNOTATION) != Some(&mark) {
        return Ok(group);
    }
    // The mark first: a hold left by a failed second write is released by
    // the next mark, while a mark left behind would release a later hold.
    let group = remove_reclone_mark(ctx, &group).await?;
    forget_site_hold(ctx, round, hold.request(), |h| matches!(h, SiteHold::Unrestored { .. })).await?;
    let site = hold.site();
    tracing::info!(group = %group.name_any(), site, request = hold.request(), "re-clone marked done: the failed restore's hold is lifted");
    let note = format!(
        "{site} was marked re-cloned ({RECLONE_DONE_ANNOTATION}={mark}): the hold {} left on it is lifted; it is rejoined as a replica once it answers clean, and may be promoted once it replicates",
        hold.request()
    );
    publish(ctx, &group, EventType::Normal, "RecloneDone", note, "RestoreInPlace", None).await;
    Ok(group)
}

/// Creates the restore Job (found again if it exists), and records it.
async fn run_job(
    ctx: &Context,
    round: &mut RoundRecord,
    group: &mut MysqlFailoverGroup,
    state: &mut RestoreInPlaceStatus,
    site: &str,
) -> Result<Option<Drive>, Error> {
    let request = group.spec.restore_in_place.as_deref().filter(|r| r.request_id == state.request_id).cloned();
    // Where no Job of the request's was made, its hold holds nothing.
    let no_job = |h: &SiteHold| matches!(h, SiteHold::Job { .. });
    let Some(request) = request else {
        forget_site_hold(ctx, round, &recorded(&state.request_id), no_job).await?;
        let why =
            format!("spec.restoreInPlace no longer asks for request {}: its Job cannot be made", state.request_id);
        *group = enter(ctx, group, state, Phase::Failed, Some(why), None, Some(site.to_owned())).await?;
        return Ok(Some(Drive::idle(group.clone())));
    };
    let spec = group.site(site).cloned().ok_or(Error::NoName)?;
    let namespace = state.namespace.clone().unwrap_or(request.namespace.clone());
    let held = recorded(&state.request_id);
    // The request failed once its Job was made, and the leader that wrote
    // the hold stopped before status said so: the Job may have vanished
    // since, and is never made a second time.
    if round
        .trusted()
        .and_then(|r| r.site_hold.as_ref())
        .is_some_and(|h| matches!(h, SiteHold::Unrestored { .. }) && h.request() == held && h.site() == site)
    {
        let why = format!(
            "the decision record holds {site} unrestored for this request (it failed after its Job was made); the Job is not made again, and nothing was decided"
        );
        *group = enter(ctx, group, state, Phase::Failed, Some(why), None, Some(site.to_owned())).await?;
        return Ok(Some(Drive::idle(group.clone())));
    }
    let pinned =
        round.trusted().and_then(|r| r.site_hold.as_ref()?.pinned_job(&held, site)).map(|(uid, _)| uid.to_owned());
    let job = site_job::JobSpecFor {
        group,
        operation: RestoreInPlaceStatus::OPERATION,
        request_id: &state.request_id,
        namespace: &namespace,
        template: &request.job_template,
        deadline_seconds: state.active_deadline_seconds.unwrap_or(request.active_deadline_seconds),
        site: &spec,
        role: ROLE_RESTORE,
        job_uid: pinned.as_deref(),
    };
    // The Job's own deadline counts from its making.
    let deadline = site_job::deadline_seconds(RestoreInPlaceStatus::OPERATION, Some(job.deadline_seconds));
    let until = Timestamp::now().as_second() + i64::from(deadline) + super::JOB_GRACE.as_secs() as i64;
    let observed = match ensure_held_job(ctx, round, &job, &held, until).await? {
        Ok(observed) => observed,
        Err(why) => {
            let why = format!("the Job restoring {site} could not be created: {why}; nothing was decided");
            // A Job of the request's name that was there before is held as
            // one of ours that ran: its Pod may be restoring the site.
            hold_unrestored(ctx, round, group, state, Some(site)).await?;
            *group = enter(ctx, group, state, Phase::Failed, Some(why), None, Some(site.to_owned())).await?;
            return Ok(Some(Drive::idle(group.clone())));
        }
    };
    tracing::info!(group = %group.name_any(), site, request_id = %state.request_id, "restore Job created");
    ctx.failpoint.hit("restore-in-place-after-job");
    record_job(state, &group.name_any(), &observed);
    *group = write_if_changed(ctx, group, state).await?;
    Ok(Some(Drive::at(group.clone(), Phase::Restoring, RECHECK)))
}

/// A step of the fence, decision or promotion, as for a planned failover.
#[allow(clippy::too_many_arguments)]
async fn switch(
    ctx: &Context,
    round: &mut RoundRecord,
    group: &mut MysqlFailoverGroup,
    state: &mut RestoreInPlaceStatus,
    local: &mut Local,
    phase: Phase,
    action: planned::Action,
    probes: &[SiteProbe],
) -> Result<Option<Drive>, Error> {
    let old = state.source_site.clone().unwrap_or_default();
    let site = state.site.clone().unwrap_or_default();
    let (Some(source_spec), Some(target_spec)) = (group.site(&old).cloned(), group.site(&site).cloned()) else {
        let why = format!("site {old} or {site} is no longer in spec.sites");
        *group = enter(ctx, group, state, Phase::Failed, Some(why), None, None).await?;
        return Ok(Some(Drive::idle(group.clone())));
    };
    let observed = |s: &str| probes.iter().find(|p| p.site == s).and_then(|p| p.outcome.as_ref().ok());
    let (src, tgt) = (observed(&old), observed(&site));
    let step = Step {
        phase: if phase == Phase::Fencing { planned::Phase::Draining } else { planned::Phase::Promoting },
        failpoints: RestoreInPlaceStatus::OPERATION,
        source: old.clone(),
        source_spec,
        target_spec,
        tgt: tgt.cloned(),
        flavor: src.or(tgt).map_or(Flavor::MariaDb, |o| o.flavor),
        version: src.or(tgt).map(|o| o.version.clone()).unwrap_or_default(),
        policy: group.spec.failover.clone(),
        fence_bound: Step::bounds(&group.spec.failover).0,
        action_bound: Step::bounds(&group.spec.failover).1,
        // The decision itself records that the old primary awaits its
        // re-clone: no moment in which it counts as a candidate.
        reclone: Some(recorded(&state.request_id)),
        foreign: Step::foreign_in(probes),
    };
    match action {
        planned::Action::Fence(s) => switchover::fence(ctx, group, local, &step, &s).await?,
        planned::Action::Unfence(s) => switchover::unfence(ctx, group, &step, &s).await?,
        planned::Action::Decide(s) => {
            let what = format!("restore-in-place {} (the restored {s} is promoted)", state.request_id);
            let Some(decided) = switchover::decide(ctx, round, group, local, &step, &s, &what).await? else {
                let why =
                    "the decision record no longer shows the old primary as active; see the DecisionConflict condition";
                hold_unrestored(ctx, round, group, state, Some(&site)).await?;
                *group = enter(ctx, group, state, Phase::Failed, Some(why.to_owned()), None, Some(site)).await?;
                return Ok(Some(Drive::idle(group.clone())));
            };
            *group = decided;
        }
        planned::Action::Promote(s) => switchover::promote(ctx, group, &step, &s).await?,
        // Nothing to catch up (the restored data is the backup's) and
        // nothing to repoint (the old primary awaits a re-clone): the rules
        // never ask for either here.
        other => {
            tracing::warn!(group = %group.name_any(), action = ?other, "step not carried out in a restore-in-place");
        }
    }
    Ok(None)
}
