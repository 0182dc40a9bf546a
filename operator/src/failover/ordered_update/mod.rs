//! The ordered update engine: runs the decision table of
//! `bloodraven_core::failover::ordered_update` against the real sites and
//! the Jobs it creates (docs/failover.md, "Ordered update").
//!
//! A request is `spec.orderedUpdate` (`requestId`, `namespace`,
//! `jobTemplate`, `activeDeadlineSeconds`, `switchBack`). Its progress lives
//! in `status.orderedUpdate` (phase, history, the Job of each step), written
//! with the resourceVersion read (merge patch, field manager
//! `bloodraven-operator-engine`); its id goes into the decision record when
//! it leaves `Pending`, and each switchover is recorded as admitted before
//! its drain, so a request never runs twice and a new leader resumes any
//! phase from status, the record, the Jobs and what the sites show.
//!
//! Order: admission exactly as a planned failover's (a live failover-hold
//! defers, `Deferred` with `deferReason: DeploymentHold` and `retryTime` =
//! the hold's expiry; one operation per group) → the standby's Job, then
//! the standby healthy, replicating and caught up (within
//! [`READY_BOUND`]) → the switchover by the planned failover's steps
//! (`failover::switchover`): fence, bounded catch-up, decide + 1, promote,
//! repoint → the former primary's Job, then it healthy and replicating →
//! with `switchBack`, a second switchover (+ 1 again) → `Completed`.
//!
//! What it holds of automatic failover, and for how long, is the rules'
//! (`ordered_update::holds_automatic_failover`): the promotion of the site
//! whose Job runs (never the primary) within the Job's deadline, and the
//! group's while a switchover drains, within the drain's bound.

use std::time::Duration;

use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use bloodraven_api::v1alpha1::OrderedUpdateStatus;
use bloodraven_api::v1alpha1::PhaseTransition;
use bloodraven_core::failover::disruption::{Hold, JobState, SwitchoverFacts};
use bloodraven_core::failover::ordered_update::{
    self, Facts, Phase, holds_automatic_failover, job_site, switchover_phase, switchover_sites,
};
use bloodraven_core::failover::planned;
use bloodraven_core::failover::planned::drain::{self, Bounds};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use crate::controller::failover_group::assess::SiteProbe;
use crate::controller::failover_group::sites;
use crate::controller::{Context, Error};
use crate::failover::record;
use crate::failover::round::RoundRecord;
use crate::failover::site_job;
use crate::failover::switchover::{Local, admissible, admit, bounded};

mod act;
mod request;

use self::act::act;
use self::request::{enter, not_ours, take_up};

/// The operation's name in metrics, Events, Job labels and the record.
const OPERATION: &str = bloodraven_api::names::site_job::OPERATION_ORDERED_UPDATE;
/// Rounds of one drive before it yields to the next reconcile.
const MAX_ROUNDS: usize = 24;
/// How long an updated site may take to be ready (healthy, replicating,
/// caught up) after its Job completed, before the update fails.
pub(crate) const READY_BOUND: Duration = Duration::from_secs(300);
/// The grace past a Job's own `activeDeadlineSeconds` before the engine
/// counts its phase as run out: Kubernetes fails the Job at its deadline,
/// and the engine reads that answer rather than racing it.
pub(super) const JOB_GRACE: Duration = Duration::from_secs(30);
/// How often a running Job or a site being verified is looked at again.
const RECHECK: Duration = Duration::from_secs(2);

/// What a drive left behind.
#[derive(Debug)]
pub(crate) struct Drive {
    /// The group as last written or read.
    pub group: MysqlFailoverGroup,
    /// The phase the request was left in; `None` when nothing runs.
    phase: Option<Phase>,
    /// When to look again, if sooner than the probe interval.
    pub requeue: Option<Duration>,
    /// What the request holds of automatic failover now.
    hold: Option<Hold>,
    /// Whether the drive may have acted on a site.
    pub acted_on_sites: bool,
}

impl Drive {
    /// Nothing running.
    pub(crate) fn idle(group: MysqlFailoverGroup) -> Drive {
        Drive { group, phase: None, requeue: None, hold: None, acted_on_sites: false }
    }

    fn at(group: MysqlFailoverGroup, phase: Phase, requeue: Duration) -> Drive {
        Drive { group, phase: Some(phase), requeue: Some(requeue), hold: None, acted_on_sites: false }
    }

    /// The request as status shows it, for a drive that ended with an
    /// error (the Job could not be read, say): it holds what its phase and
    /// the Job last seen hold, within the same bounds, so an error never
    /// lets the emergency path promote a site whose Job may still run.
    pub(crate) fn as_stored(group: MysqlFailoverGroup) -> Drive {
        let phase = stored_phase(&group);
        let hold =
            phase.zip(group.status.as_ref().and_then(|s| s.ordered_update.as_deref())).and_then(|(phase, state)| {
                let (primary, standby) = (state.source_site.as_deref()?, state.standby_site.as_deref()?);
                let job = match job_site(phase, primary, standby) {
                    Some(site) if state.jobs.iter().any(|j| j.site == site && j.result == "Running") => {
                        JobState::Running
                    }
                    _ => JobState::Absent,
                };
                let facts = Facts {
                    active: group.decided().map(|(s, _)| s.to_owned()).unwrap_or_default(),
                    generation: group.decided().map(|(_, g)| g),
                    source_generation: state.source_generation,
                    standby: standby.to_owned(),
                    switch_back: state.switch_back,
                    hold: None,
                    admissible: Ok(()),
                    job,
                    past_deadline: past_deadline(&group, state, phase, Timestamp::now()),
                    updated_ready: Ok(()),
                    switchover: SwitchoverFacts::default(),
                };
                holds_automatic_failover(phase, primary, &facts)
            });
        Drive { group, phase, requeue: Some(Duration::from_secs(1)), hold, acted_on_sites: true }
    }

    /// A request is in a non-final phase: the group is unstable
    /// (`OperationInProgress`).
    pub(crate) fn running(&self) -> bool {
        self.phase.is_some_and(|p| !p.is_final())
    }

    /// A switchover of the request is decided and not yet done.
    pub(crate) fn recovering(&self) -> bool {
        self.phase.is_some_and(decided)
    }

    /// A switchover is decided and its target not yet promoted: the fenced
    /// old primary has every write.
    pub(crate) fn before_promotion(&self) -> bool {
        matches!(self.phase, Some(Phase::SwitchoverPromoting | Phase::SwitchBackPromoting))
    }

    /// What the request holds of automatic failover.
    pub(crate) fn hold(&self) -> Option<&Hold> {
        self.hold.as_ref()
    }

    /// Why automatic failover waits, for `AutomaticFailoverHeld`.
    pub(crate) fn hold_message(&self) -> String {
        let state = self.group.status.as_ref().and_then(|s| s.ordered_update.as_deref());
        let id = state.map(|s| s.request_id.as_str()).unwrap_or_default();
        match &self.hold {
            Some(Hold::Promotion(site)) => format!(
                "ordered update {id}: the Job of {site} runs; automatic failover does not promote {site} while it runs, at most activeDeadlineSeconds ({}s) from its start; the primary's loss is failed over once the Job ends",
                state.and_then(|s| s.active_deadline_seconds).unwrap_or_default()
            ),
            Some(Hold::Group) => {
                let bound = bounds(&self.group).total().as_secs();
                format!(
                    "ordered update {id}: its switchover is draining (the old primary is fenced); automatic failover waits for its decision at most fenceTimeoutSeconds + catchUpTimeoutSeconds = {bound}s from the drain"
                )
            }
            None => String::new(),
        }
    }
}

fn stored_phase(group: &MysqlFailoverGroup) -> Option<Phase> {
    group.status.as_ref().and_then(|s| s.ordered_update.as_ref()).and_then(|p| Phase::parse(&p.phase))
}

fn bounds(group: &MysqlFailoverGroup) -> Bounds {
    Bounds {
        fence_timeout_seconds: group.spec.failover.fence_timeout_seconds,
        catch_up_timeout_seconds: group.spec.failover.catch_up_timeout_seconds,
    }
}

/// When the request last entered `phase` (its latest transition to it).
fn entered(history: &[PhaseTransition], phase: Phase) -> Option<Timestamp> {
    history.iter().rev().find(|t| t.phase == phase.as_str()).map(|t| t.time.0)
}

/// Whether the request's current `phase` ran past its bound at `now`:
/// the Job's deadline (and a grace) in a Job phase, [`READY_BOUND`] in a
/// verifying phase, the drain's bound in a draining phase. A phase whose
/// start is not in status (a hand edit) is past its bound: nothing waits on
/// a time nobody wrote; a start in the future counts as `now`.
fn past_deadline(group: &MysqlFailoverGroup, state: &OrderedUpdateStatus, phase: Phase, now: Timestamp) -> bool {
    let Some(since) = entered(&state.history, phase) else { return true };
    let since = since.min(now);
    let bound = match phase {
        Phase::UpdatingStandby | Phase::UpdatingFormerPrimary => {
            Duration::from_secs(u64::from(site_job::deadline_seconds(OPERATION, state.active_deadline_seconds)))
                + JOB_GRACE
        }
        Phase::VerifyingStandby | Phase::VerifyingFormerPrimary => READY_BOUND,
        Phase::SwitchoverDraining | Phase::SwitchBackDraining => {
            return drain::deadline_passed(Some(since), bounds(group), now);
        }
        _ => return false,
    };
    now > since + SignedDuration::try_from(bound).unwrap_or(SignedDuration::MAX)
}

/// Writes the Job hold of a request whose site Job an operator that did
/// not record holds yet started (in an `Updating…` phase, no hold in the
/// record): from then on status can no longer lift it, within the Job's
/// deadline counted from entering the phase.
async fn backfill_hold(
    ctx: &Context,
    round: &mut RoundRecord,
    rec: Option<&record::Record>,
    state: &OrderedUpdateStatus,
) -> Result<(), Error> {
    let Some(phase) = Phase::parse(&state.phase) else { return Ok(()) };
    let (primary, standby) =
        (state.source_site.as_deref().unwrap_or_default(), state.standby_site.as_deref().unwrap_or_default());
    let (Some(site), Some(since)) = (job_site(phase, primary, standby), entered(&state.history, phase)) else {
        return Ok(());
    };
    if rec.is_none_or(|r| r.site_hold.is_some()) {
        return Ok(());
    }
    let deadline = site_job::deadline_seconds(OPERATION, state.active_deadline_seconds);
    // Status's history can be written by others: a time in the future
    // would make the hold outlast any Job.
    let bound = Timestamp::now().as_second() + i64::from(deadline) + JOB_GRACE.as_secs() as i64;
    let until = (since.as_second() + i64::from(deadline) + JOB_GRACE.as_secs() as i64).min(bound);
    let hold = record::SiteHold::Job {
        site: site.to_owned(),
        until,
        namespace: state.namespace.clone().unwrap_or_default(),
        request: request::recorded_id(&state.request_id),
        job_uid: None,
    };
    crate::failover::planned::request::remember_site_hold(ctx, round, hold).await
}

/// Drives the group's ordered update, if any, as far as it goes now.
/// `probes` are the round's probes, taken just before.
pub(crate) async fn drive(
    ctx: &Context,
    round: &mut RoundRecord,
    group: MysqlFailoverGroup,
    probes: &[SiteProbe],
) -> Result<Drive, Error> {
    let mut acted_on_sites = false;
    let is_final = |p: &str| Phase::parse(p).is_none_or(Phase::is_final);
    let group =
        crate::failover::request::run_on_if_ended_by_hand(ctx, round, group, request::in_flight_of, is_final).await?;
    let mut drive = Box::pin(drive_rounds(ctx, round, group, probes, &mut acted_on_sites)).await?;
    drive.acted_on_sites |= acted_on_sites;
    if stored_phase(&drive.group).is_none_or(Phase::is_final) {
        crate::failover::planned::request::forget_ended(ctx, round, Some(OPERATION)).await?;
    }
    Ok(drive)
}

async fn drive_rounds(
    ctx: &Context,
    round: &mut RoundRecord,
    group: MysqlFailoverGroup,
    first: &[SiteProbe],
    acted_on_sites: &mut bool,
) -> Result<Drive, Error> {
    let (mut group, mut state) = match take_up(ctx, round, group).await? {
        Ok(taken) => taken,
        Err(group) => return Ok(Drive::idle(group)),
    };
    let rec = round.fresh(ctx).await?.cloned();
    if let Some(why) = not_ours(&group, rec.as_ref(), &state) {
        tracing::warn!(group = %group.name_any(), request_id = %state.request_id, phase = %state.phase, why = %why, "ordered update not acted on");
        group = enter(ctx, &group, &mut state, Phase::Failed, Some(why), None, None).await?;
        return Ok(Drive::idle(group));
    }
    let primary = state.source_site.clone().unwrap_or_default();
    let standby = state.standby_site.clone().unwrap_or_default();
    backfill_hold(ctx, round, rec.as_ref(), &state).await?;
    let foreign_hold = record::foreign_hold(rec.as_ref(), &group, &request::recorded_id(&state.request_id));
    let mut local = Local { foreign_hold, ..Local::default() };
    match Phase::parse(&state.phase) {
        Some(Phase::Deferred) if ctx.deploy_api => {
            local.hold = bounded(&group, "read the failover-hold", ctx.leases.live_hold(&group)).await?;
        }
        Some(Phase::Admitting) => local.hold = admit(ctx, &group, &state.request_id).await?,
        _ => {}
    }
    for turn in 0..MAX_ROUNDS {
        if !ctx.leadership.is_leader() {
            return Err(Error::NotLeader);
        }
        let phase = Phase::parse(&state.phase).unwrap_or(Phase::Failed);
        if phase.is_final() {
            return Ok(Drive::idle(group));
        }
        *acted_on_sites |= switchover_phase(phase).is_some();
        let probes = if turn == 0 && !first.is_empty() { first.to_vec() } else { sites::probe_all(&group, ctx).await };
        let hold_now = round.trusted().and_then(|r| r.site_hold.clone());
        let facts =
            observe(ctx, &group, &mut state, &local, hold_now.as_ref(), phase, &primary, &standby, &probes).await?;
        let hold = holds_automatic_failover(phase, &primary, &facts);
        let action = ordered_update::next(phase, &primary, &facts);
        tracing::debug!(group = %group.name_any(), phase = phase.as_str(), action = ?action, "ordered update step");
        match act(ctx, round, &mut group, &mut state, &mut local, action, phase, &probes).await {
            Ok(Some(mut done)) => {
                if done.phase == Some(phase) {
                    done.hold = hold;
                }
                return Ok(done);
            }
            Ok(None) => {}
            Err(Error::Site { action, site, message }) if decided(phase) => {
                // After a decision a site that cannot be acted on is
                // retried, and the reconcile goes on (the safety paths).
                tracing::warn!(group = %group.name_any(), site = %site, error = %message, action, "ordered update step after a decision failed; retrying");
                return Ok(Drive::at(group, phase, RECHECK));
            }
            Err(e) => return Err(e),
        }
    }
    let phase = Phase::parse(&state.phase).unwrap_or(Phase::Failed);
    Ok(Drive::at(group, phase, Duration::from_secs(1)))
}

/// What the engine sees for one step of the request in `phase`: the
/// decided topology, the hold, the Job of the phase's site (its result
/// kept in status as it changes), whether the phase ran out, the updated
/// site's readiness, and the switchover's two sites.
#[allow(clippy::too_many_arguments)] // one round's view: each argument is a different source
async fn observe(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    state: &mut OrderedUpdateStatus,
    local: &Local,
    site_hold: Option<&record::SiteHold>,
    phase: Phase,
    primary: &str,
    standby: &str,
    probes: &[SiteProbe],
) -> Result<Facts, Error> {
    let observed = |site: &str| probes.iter().find(|p| p.site == site).and_then(|p| p.outcome.as_ref().ok());
    let job = match job_site(phase, primary, standby) {
        Some(site) => {
            let name = site_job::job_name(&group.name_any(), OPERATION, &state.request_id, site);
            let uid = group.metadata.uid.clone().unwrap_or_default();
            let held = request::recorded_id(&state.request_id);
            let pinned = site_hold.and_then(|h| h.pinned_job(&held, site));
            let job_uid = pinned.map(|(uid, _)| uid);
            let namespace = pinned.map_or_else(|| state.namespace.clone().unwrap_or_default(), |(_, ns)| ns.to_owned());
            let of =
                site_job::JobOf { group_uid: &uid, operation: OPERATION, site, request_id: &state.request_id, job_uid };
            let observed = site_job::observe(&ctx.client, &namespace, &name, &of).await?;
            let recorded = state.jobs.iter().find(|j| j.site == site && j.role == act::role(phase));
            site_job::with_record(observed, recorded, job_uid.is_some())
        }
        None => JobState::Absent,
    };
    act::record_job(state, &group.name_any(), phase, primary, standby, &job);
    let updated_ready = match phase {
        Phase::VerifyingStandby => admissible(ctx, group, primary, observed(primary), standby, probes),
        Phase::VerifyingFormerPrimary => admissible(ctx, group, standby, observed(standby), primary, probes),
        _ => Ok(()),
    };
    let switchover = match switchover_sites(phase, primary, standby) {
        Some((old, target)) => {
            let target_spec = group.site(target);
            let (o, t) = (observed(old), observed(target));
            SwitchoverFacts {
                old_fenced: o.map(|o| !o.writable),
                fence_failed: local.fence_failed.clone(),
                caught_up: local.caught_up,
                target_promoted: t.is_some_and(|t| t.writable && t.replication.is_none()),
                old_repointed: o.is_some_and(|o| {
                    o.replication.as_ref().is_some_and(|r| {
                        r.sql_running && target_spec.is_some_and(|s| r.source_host == s.host && r.source_port == s.port)
                    })
                }),
            }
        }
        None => SwitchoverFacts::default(),
    };
    Ok(Facts {
        active: group.decided().map(|(s, _)| s.to_owned()).unwrap_or_default(),
        generation: group.decided().map(|(_, g)| g),
        source_generation: state.source_generation,
        standby: standby.to_owned(),
        switch_back: state.switch_back,
        hold: local.hold.as_ref().map(|h| (h.operation_id.clone(), h.instance.clone())),
        // Admission: the group stable, and the standby ready to be switched
        // to once updated (as a planned failover's target).
        admissible: crate::failover::request::admissible::<OrderedUpdateStatus>(group)
            .and_then(|()| local.foreign_hold.clone().map_or(Ok(()), Err))
            .and_then(|()| admissible(ctx, group, primary, observed(primary), standby, probes)),
        job,
        past_deadline: past_deadline(group, state, phase, Timestamp::now()),
        updated_ready,
        switchover,
    })
}

#[cfg(test)]
mod tests;

/// A phase after a switchover's decision, before the switchover is done.
fn decided(phase: Phase) -> bool {
    matches!(switchover_phase(phase), Some((_, planned::Phase::Promoting | planned::Phase::Repointing)))
}

/// The planned failover's phase a switchover phase runs, for the shared steps.
fn planned_phase(phase: Phase) -> planned::Phase {
    switchover_phase(phase).map_or(planned::Phase::Draining, |(_, p)| p)
}
