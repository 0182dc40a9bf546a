//! The restore-in-place engine: runs the decision table of
//! `bloodraven_core::failover::restore` against the real sites and the Job
//! it creates (docs/failover.md, "Restore-in-place").
//!
//! A request is `spec.restoreInPlace` (`requestId`, `site`, `namespace`,
//! `jobTemplate`, `activeDeadlineSeconds`). Its progress lives in
//! `status.restoreInPlace`; its id goes into the decision record when it
//! leaves `Pending`, and its switchover is recorded as admitted before the
//! fence, so it never runs twice and a new leader resumes any phase.
//!
//! Order: admission as a planned failover's (a live failover-hold defers;
//! one operation per group; never the active site) → the Job restores the
//! site, nothing fenced meanwhile → the restored site answers within
//! [`ANSWER_BOUND`], does not replicate and is the server the operator
//! knows (`server_id`) → fence the old primary → decide + 1 (every deploy
//! lease revoked with `TopologyChanged`) → promote the restored site → the
//! `<db>-primary` Services follow the decision → the old primary stays
//! fenced, out of replication and never promoted (`RecloneRequired`) until
//! a person re-clones it and annotates the group
//! `bloodraven.shipstream.io/reclone-done: <site>@<generation>`.

use std::time::Duration;

use bloodraven_api::names::RECLONE_DONE_ANNOTATION;
use bloodraven_api::v1alpha1::{MysqlFailoverGroup, RestoreInPlaceStatus};
use bloodraven_core::failover::disruption::{Hold, JobState, SwitchoverFacts};
use bloodraven_core::failover::planned::drain::{self, Bounds};
use bloodraven_core::failover::restore::{self, Facts, Identity, Phase, Restored, holds_automatic_failover};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use crate::controller::failover_group::assess::SiteProbe;
use crate::controller::failover_group::{identity, sites};
use crate::controller::{Context, Error};
use crate::failover::record::SiteHold;
use crate::failover::request::{RequestStatus, recorded_id};
use crate::failover::round::RoundRecord;
use crate::failover::site_job;
use crate::failover::switchover::{Local, admit, bounded};

mod act;

pub(crate) use self::act::release_unrestored;
use self::act::{act, enter};

/// How long the restored site may take to answer after its Job completed.
pub(crate) const ANSWER_BOUND: Duration = Duration::from_secs(300);
/// The grace past the Job's own deadline (see the ordered update's).
pub(super) const JOB_GRACE: Duration = Duration::from_secs(30);
/// How often a running Job or a site being verified is looked at again.
const RECHECK: Duration = Duration::from_secs(2);
/// Rounds of one drive before it yields to the next reconcile.
const MAX_ROUNDS: usize = 24;

/// What a drive left behind.
#[derive(Debug)]
pub(crate) struct Drive {
    /// The group as last written or read.
    pub group: MysqlFailoverGroup,
    phase: Option<Phase>,
    /// When to look again, if sooner than the probe interval.
    pub requeue: Option<Duration>,
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

    /// The request as status shows it, for a drive that ended with an error.
    /// It holds what its phase and the Job last seen hold, within the same
    /// bounds (see the ordered update's).
    pub(crate) fn as_stored(group: MysqlFailoverGroup) -> Drive {
        let phase = state_of(&group).and_then(|s| Phase::parse(&s.phase));
        let hold = phase.zip(state_of(&group)).and_then(|(phase, state)| {
            let running = state.job.as_ref().is_some_and(|j| j.result == "Running");
            let facts = Facts {
                active: group.decided().map(|(s, _)| s.to_owned()).unwrap_or_default(),
                generation: group.decided().map(|(_, g)| g),
                source_generation: state.source_generation,
                site: state.site.clone()?,
                hold: None,
                admissible: Ok(()),
                job: if running { JobState::Running } else { JobState::Absent },
                past_deadline: past_deadline(&group, state, phase, Timestamp::now()),
                restored: None,
                expected: Identity::default(),
                switchover: SwitchoverFacts::default(),
                services_at: None,
                reclone_done: false,
            };
            holds_automatic_failover(phase, &facts)
        });
        Drive { group, phase, requeue: Some(Duration::from_secs(1)), hold, acted_on_sites: true }
    }

    /// A request is in a non-final phase short of waiting for a re-clone
    /// (the group is stable then: the topology is decided).
    pub(crate) fn running(&self) -> bool {
        self.phase.is_some_and(|p| !p.is_final() && p != Phase::AwaitingReclone)
    }

    /// Decided, the restored site not yet promoted or the Services not yet moved.
    pub(crate) fn recovering(&self) -> bool {
        matches!(self.phase, Some(Phase::Promoting | Phase::Repointing))
    }

    /// What the request holds of automatic failover: the rules' hold, and
    /// from the decision until the re-clone the promotion of the old
    /// primary, whose data no longer counts (in a pair: all of it).
    pub(crate) fn holds_automatic_failover(&self) -> bool {
        self.hold.is_some() || self.reclone_site().is_some()
    }

    /// The old primary awaiting a re-clone, if any.
    pub(crate) fn reclone_site(&self) -> Option<String> {
        let state = state_of(&self.group)?;
        let old = state.source_site.as_deref()?;
        restore::awaiting_reclone(self.phase?, old).map(str::to_owned)
    }

    /// Why automatic failover waits, for `AutomaticFailoverHeld`.
    pub(crate) fn hold_message(&self) -> String {
        let state = state_of(&self.group);
        let id = state.map(|s| s.request_id.as_str()).unwrap_or_default();
        match (&self.hold, self.reclone_site()) {
            (Some(Hold::Promotion(site)), _) => format!(
                "restore-in-place {id}: the Job restoring {site} runs; automatic failover does not promote {site} while it runs, at most the Job's activeDeadlineSeconds"
            ),
            (Some(Hold::Group), _) => format!(
                "restore-in-place {id}: the old primary is fenced for the decision; automatic failover waits at most fenceTimeoutSeconds + catchUpTimeoutSeconds from the fence"
            ),
            (None, Some(old)) => format!(
                "restore-in-place {id}: {old}'s data predates the restored primary; it is never promoted until a person re-clones it and marks it done ({RECLONE_DONE_ANNOTATION})"
            ),
            (None, None) => String::new(),
        }
    }

    /// The decision is taken and the restored site not yet promoted.
    pub(crate) fn before_promotion(&self) -> bool {
        self.phase == Some(Phase::Promoting)
    }
}

fn state_of(group: &MysqlFailoverGroup) -> Option<&RestoreInPlaceStatus> {
    RestoreInPlaceStatus::stored(group)
}

/// Whether the request's `phase` ran past its bound at `now`: the Job's
/// deadline (and a grace) in `Restoring`, [`ANSWER_BOUND`] in `Verifying`,
/// the fence's bound in `Fencing`. A phase whose start nobody wrote is past
/// its bound; a start in the future counts as `now`.
fn past_deadline(group: &MysqlFailoverGroup, state: &RestoreInPlaceStatus, phase: Phase, now: Timestamp) -> bool {
    let Some(since) = state.history.iter().rev().find(|t| t.phase == phase.as_str()).map(|t| t.time.0) else {
        return true;
    };
    let since = since.min(now);
    let bound = match phase {
        Phase::Restoring => {
            let deadline = site_job::deadline_seconds(RestoreInPlaceStatus::OPERATION, state.active_deadline_seconds);
            Duration::from_secs(u64::from(deadline)) + JOB_GRACE
        }
        Phase::Verifying => ANSWER_BOUND,
        Phase::Fencing => {
            let bounds = Bounds {
                fence_timeout_seconds: group.spec.failover.fence_timeout_seconds,
                catch_up_timeout_seconds: 0,
            };
            return drain::deadline_passed(Some(since), bounds, now);
        }
        _ => return false,
    };
    now > since + SignedDuration::try_from(bound).unwrap_or(SignedDuration::MAX)
}

/// Puts `status.restoreInPlace` back on its way to `AwaitingReclone` (in
/// `Promoting`, the first step after the decision) when the decision record
/// awaits a re-clone ([`SiteHold::Reclone`]) that status no longer shows:
/// status edited to a final phase, removed, or restored from a backup.
/// Warning `StatusRestored`. The record is the operator's own and
/// verified; status is what people read, and an old primary whose data
/// predates the restored one must stay out of replication and promotion
/// whatever it says.
pub(crate) async fn restore_from_record(
    ctx: &Context,
    round: &RoundRecord,
    group: MysqlFailoverGroup,
) -> Result<MysqlFailoverGroup, Error> {
    let Some(rec) = round.trusted() else { return Ok(group) };
    let Some(SiteHold::Reclone { site: old, generation, request }) = rec.site_hold.clone() else {
        return Ok(group);
    };
    let prefix = format!("{}/", RestoreInPlaceStatus::OPERATION);
    let Some(request_id) = request.strip_prefix(&prefix) else { return Ok(group) };
    if rec.active_site == old || group.site(&old).is_none() {
        return Ok(group);
    }
    let stored = state_of(&group);
    // The request itself, on its way from the decision to the re-clone
    // (promoting, moving the Services) or waiting for it: its engine goes on.
    if stored.is_some_and(|s| s.request_id == request_id && Phase::parse(&s.phase).is_some_and(|p| !p.is_final())) {
        return Ok(group);
    }
    let shown = stored.map_or_else(
        || "no restore-in-place".to_owned(),
        |s| format!("restore-in-place {} in phase {}", s.request_id, s.phase),
    );
    let mut state = stored.filter(|s| s.request_id == request_id).cloned().unwrap_or_default();
    request_id.clone_into(&mut state.request_id);
    state.site = Some(rec.active_site.clone());
    state.source_site = Some(old.clone());
    state.source_generation = Some(generation - 1);
    state.reclone_site = Some(old.clone());
    let message = format!(
        "status showed {shown}, but the decision record awaits the re-clone of {old} (restore-in-place {request_id}, topologyGeneration {generation}); status is written by the operator only and was restored: {old} stays fenced and out of replication until a person re-clones it and annotates the group {RECLONE_DONE_ANNOTATION}={old}@{generation}"
    );
    tracing::warn!(group = %group.name_any(), site = %old, request_id, shown = %shown, "status restored from the decision record: the old primary still awaits its re-clone");
    // Back to the first step after the decision: promoting a site that is
    // already the writable primary and moving Services already moved are
    // no-ops, and one that was not finished is finished; the old primary
    // is held from there on (`awaiting_reclone`).
    let group = enter(ctx, &group, &mut state, Phase::Promoting, Some(message.clone()), None, None).await?;
    crate::controller::failover_group::publish(
        ctx,
        &group,
        kube::runtime::events::EventType::Warning,
        "StatusRestored",
        message,
        "RestoreInPlace",
        None,
    )
    .await;
    Ok(group)
}

/// Writes the re-clone hold of a request decided by an operator that did
/// not record holds yet (the record at the generation the request decided,
/// no hold in it): from then on status can no longer lift it.
async fn backfill_hold(
    ctx: &Context,
    round: &mut RoundRecord,
    rec: Option<&crate::failover::record::Record>,
    state: &RestoreInPlaceStatus,
) -> Result<(), Error> {
    let after_decision =
        matches!(Phase::parse(&state.phase), Some(Phase::Promoting | Phase::Repointing | Phase::AwaitingReclone));
    let Some(decided) = state.source_generation.map(|g| g + 1) else { return Ok(()) };
    if !after_decision || !rec.is_some_and(|r| r.site_hold.is_none() && r.generation == decided) {
        return Ok(());
    }
    let Some(old) = state.source_site.clone() else { return Ok(()) };
    let hold = SiteHold::Reclone { site: old, generation: decided, request: recorded(&state.request_id) };
    crate::failover::planned::request::remember_site_hold(ctx, round, hold).await
}

/// Drives the group's restore-in-place, if any, as far as it goes now.
pub(crate) async fn drive(
    ctx: &Context,
    round: &mut RoundRecord,
    group: MysqlFailoverGroup,
    probes: &[SiteProbe],
) -> Result<Drive, Error> {
    let mut acted = false;
    let is_final = |p: &str| Phase::parse(p).is_none_or(Phase::is_final);
    let group =
        crate::failover::request::run_on_if_ended_by_hand(ctx, round, group, act::in_flight_of, is_final).await?;
    let mut drive = Box::pin(drive_rounds(ctx, round, group, probes, &mut acted)).await?;
    drive.acted_on_sites |= acted;
    // In flight until it ends, past `AwaitingReclone` too.
    if state_of(&drive.group).and_then(|s| Phase::parse(&s.phase)).is_none_or(Phase::is_final) {
        let operation = <RestoreInPlaceStatus as crate::failover::request::RequestStatus>::OPERATION;
        crate::failover::planned::request::forget_ended(ctx, round, Some(operation)).await?;
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
    let (mut group, mut state) = match act::take_up(ctx, round, group).await? {
        Ok(taken) => taken,
        Err(group) => return Ok(Drive::idle(group)),
    };
    let rec = round.fresh(ctx).await?.cloned();
    if let Some(why) = act::not_ours(&group, rec.as_ref(), &state) {
        tracing::warn!(group = %group.name_any(), request_id = %state.request_id, phase = %state.phase, why = %why, "restore-in-place not acted on");
        group = enter(ctx, &group, &mut state, Phase::Failed, Some(why), None, None).await?;
        return Ok(Drive::idle(group));
    }
    let old = state.source_site.clone().unwrap_or_default();
    backfill_hold(ctx, round, rec.as_ref(), &state).await?;
    let foreign_hold = crate::failover::record::foreign_hold(rec.as_ref(), &group, &recorded(&state.request_id));
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
        *acted_on_sites |=
            matches!(phase, Phase::Fencing | Phase::Promoting | Phase::Repointing | Phase::AwaitingReclone);
        let probes = if turn == 0 && !first.is_empty() { first.to_vec() } else { sites::probe_all(&group, ctx).await };
        let hold_now = round.trusted().and_then(|r| r.site_hold.clone());
        let facts = observe(ctx, &group, &mut state, &local, hold_now.as_ref(), phase, &old, &probes).await?;
        let hold = holds_automatic_failover(phase, &facts);
        let action = restore::next(phase, &old, &facts);
        tracing::debug!(group = %group.name_any(), phase = phase.as_str(), action = ?action, "restore-in-place step");
        match act(ctx, round, &mut group, &mut state, &mut local, action, phase, &probes).await {
            Ok(Some(mut done)) => {
                if done.phase == Some(phase) {
                    done.hold = hold;
                }
                return Ok(done);
            }
            Ok(None) => {}
            Err(Error::Site { action, site, message })
                if matches!(phase, Phase::Promoting | Phase::Repointing | Phase::AwaitingReclone) =>
            {
                tracing::warn!(group = %group.name_any(), site = %site, error = %message, action, "restore-in-place step after the decision failed; retrying");
                return Ok(Drive::at(group, phase, RECHECK));
            }
            Err(e) => return Err(e),
        }
    }
    let phase = Phase::parse(&state.phase).unwrap_or(Phase::Failed);
    Ok(Drive::at(group, phase, Duration::from_secs(1)))
}

/// What the engine sees for one step of the request in `phase`.
#[allow(clippy::too_many_arguments)] // one round's view: each argument is a different source
async fn observe(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    state: &mut RestoreInPlaceStatus,
    local: &Local,
    site_hold: Option<&SiteHold>,
    phase: Phase,
    old: &str,
    probes: &[SiteProbe],
) -> Result<Facts, Error> {
    let site = state.site.clone().unwrap_or_default();
    let observed = |s: &str| probes.iter().find(|p| p.site == s).and_then(|p| p.outcome.as_ref().ok());
    let job = if phase == Phase::Restoring {
        let operation = RestoreInPlaceStatus::OPERATION;
        let name = site_job::job_name(&group.name_any(), operation, &state.request_id, &site);
        let uid = group.metadata.uid.clone().unwrap_or_default();
        let held = recorded(&state.request_id);
        let pinned = site_hold.and_then(|h| h.pinned_job(&held, &site));
        let job_uid = pinned.map(|(uid, _)| uid);
        let of = site_job::JobOf { group_uid: &uid, operation, site: &site, request_id: &state.request_id, job_uid };
        let namespace = pinned.map_or_else(|| state.namespace.clone().unwrap_or_default(), |(_, ns)| ns.to_owned());
        let observed = site_job::observe(&ctx.client, &namespace, &name, &of).await?;
        site_job::with_record(observed, state.job.as_ref(), job_uid.is_some())
    } else {
        JobState::Absent
    };
    act::record_job(state, &group.name_any(), &job);
    // The identity is the `server_id` the group knows, not `server_uuid`:
    // a restore that re-initialises the data directory gets a new
    // `auto.cnf` and so a new UUID, while `server_id` is the server's
    // configuration, which a restore of data keeps.
    let expected = identity::known(group)
        .get(&site)
        .map_or_else(Identity::default, |id| Identity { server_id: *id, server_uuid: String::new() });
    let restored = restored_of(probes.iter().find(|p| p.site == site));
    let (o, t) = (observed(old), observed(&site));
    let switchover = SwitchoverFacts {
        old_fenced: o.map(|o| !o.writable),
        fence_failed: local.fence_failed.clone(),
        caught_up: Some(true),
        target_promoted: t.is_some_and(|t| t.writable && t.replication.is_none()),
        old_repointed: false,
    };
    let services_at = if phase == Phase::Repointing { act::services_at(ctx, group).await? } else { None };
    let generation = group.decided().map(|(_, g)| g);
    // The mark counts once the old primary shows the re-clone: it
    // replicates from the restored primary with both threads, and holds
    // nothing the restored primary lacks.
    let mark = format!("{old}@{}", state.source_generation.map_or(0, |g| g + 1));
    let marked = phase == Phase::AwaitingReclone && group.annotations().get(RECLONE_DONE_ANNOTATION) == Some(&mark);
    let site_spec = group.site(&state.site.clone().unwrap_or_default()).cloned();
    let recloned = o.is_some_and(|o| {
        o.replication.as_ref().is_some_and(|r| {
            r.running() && site_spec.as_ref().is_some_and(|s| r.source_host == s.host && r.source_port == s.port)
        })
    }) && crate::controller::failover_group::replicas::known_problem(ctx, group, old).is_none();
    if marked && !recloned {
        tracing::info!(group = %group.name_any(), site = %old, "re-clone marked done, but the site does not replicate from the restored primary cleanly yet; waiting");
    }
    let reclone_done = marked && recloned;
    Ok(Facts {
        active: group.decided().map(|(s, _)| s.to_owned()).unwrap_or_default(),
        generation,
        source_generation: state.source_generation,
        site,
        hold: local.hold.as_ref().map(|h| (h.operation_id.clone(), h.instance.clone())),
        admissible: act::admissible_now(group, expected.server_id)
            .and_then(|()| local.foreign_hold.clone().map_or(Ok(()), Err)),
        job,
        past_deadline: past_deadline(group, state, phase, Timestamp::now()),
        restored,
        expected,
        switchover,
        services_at,
        reclone_done,
    })
}

/// What the probe of the restored site shows. A server that answers at the
/// site's address as another server (`UnexpectedServer`) is that server, so
/// it is refused as such at once, never taken as a site that did not answer
/// until the bound runs out.
fn restored_of(probe: Option<&SiteProbe>) -> Option<Restored> {
    match &probe?.outcome {
        Ok(o) => Some(Restored {
            replicating: o.replication.is_some(),
            identity: Identity { server_id: o.server_id, server_uuid: o.server_uuid.clone() },
        }),
        Err(f) => f.answered_as.map(|server_id| Restored {
            replicating: false,
            identity: Identity { server_id, server_uuid: String::new() },
        }),
    }
}

#[cfg(test)]
mod tests;

/// The recorded id of a restore request.
fn recorded(request_id: &str) -> String {
    recorded_id::<RestoreInPlaceStatus>(request_id)
}
