//! The planned failover (switchover) engine: runs the decision table of
//! `bloodraven_core::failover::planned` against the real sites (docs/failover.md,
//! "What a hold holds"; docs/concepts.md, "The generation is the fence").
//!
//! A request is `spec.plannedFailover` (`targetSite`, `requestId`). Its
//! progress lives in `status.plannedFailover` (phase, history, admission),
//! written with the resourceVersion read (merge patch, field manager
//! `bloodraven-operator-engine`), and its id in the decision record, so a
//! repeated or older `requestId` is never run twice, even after status is
//! wiped. Each round re-probes both sites and asks `planned::next` for the
//! one next action, so a new leader resumes any phase from status, the
//! record and what the sites show: never a second bump, never two writable
//! sites.
//!
//! Admission: a live failover-hold defers the request (`Deferred`,
//! `admission.retryTime` = the hold's expiry, moved by every renewal); the
//! hold slot is fenced at admission (`lease::Service::admit`) so a hold
//! cannot be granted between the check and the drain. A migration lease
//! alone defers nothing. Then the target must be reachable, replicating
//! from the active site with both threads, lag ≤ `maxLagSeconds`, and free
//! of errant GTIDs.
//!
//! Order: fence the old primary (`read_only`, then end every client
//! session; bounded by `fenceTimeoutSeconds`) → bounded GTID catch-up of the
//! target (`catchUpTimeoutSeconds`) → the decision (record, then status:
//! `activeSite` = target, generation + 1; every deploy lease revoked with
//! `TopologyChanged`) → promote → repoint the old primary → `Completed`.
//! A fence or catch-up that runs out of its bound makes the old primary
//! writable again and ends `Failed`, with no decision and leases untouched.

use std::time::Duration;

use bloodraven_api::names::ENGINE_FIELD_MANAGER;
use bloodraven_api::v1alpha1::{
    IgnoredRequest, MysqlFailoverGroup, MysqlFailoverGroupSpec, PhaseTransition, PlannedFailoverAdmission,
    PlannedFailoverStatus, reason,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::assess::SiteProbe;
use super::{decision, deploy_leases, publish, record, sites};
use crate::controller::{Context, Error, LeaseError, kube_err};
use crate::mysql::statements::Source;
use crate::mysql::{Flavor, ProbeTarget, SiteObservation, actions};
use bloodraven_core::failover::planned::{self, Action, Facts, Phase};
use bloodraven_core::gtid::{MariaDbPosition, MySqlGtidSet};
use bloodraven_core::lease::machine::Grant;

/// Entries kept in `status.plannedFailover.history`.
const MAX_HISTORY: usize = 32;
/// Rounds of one drive before it yields to the next reconcile.
const MAX_ROUNDS: usize = 24;

/// Longest single wait for the target's catch-up: the reconcile of the
/// group is given back between waits (its probes, status and deletion go
/// on), and the catch-up goes on where it was at the next one.
const CATCH_UP_SLICE: Duration = Duration::from_secs(2);
/// When to look again after a catch-up wait that has not reached the position.
const CATCH_UP_RECHECK: Duration = Duration::from_millis(100);

/// One catch-up wait: how long, and whether it is the last one.
#[derive(Debug, PartialEq, Eq)]
struct Slice {
    wait: Duration,
    last: bool,
}

/// The next catch-up wait of a request with phase `history` at `now`, up
/// to its [`drain_deadline`]. Without a `Draining` transition (status
/// wiped) the whole catch-up bound is waited at once, as the last wait:
/// bounded either way.
fn catch_up_slice(
    history: &[PhaseTransition],
    policy: &bloodraven_api::v1alpha1::FailoverPolicy,
    now: Timestamp,
) -> Slice {
    let bound = Duration::from_secs(u64::from(policy.catch_up_timeout_seconds.clamp(1, 3600)));
    let Some(deadline) = drain_deadline(history, policy, now) else { return Slice { wait: bound, last: true } };
    let left_ms = u64::try_from(deadline.as_millisecond().saturating_sub(now.as_millisecond())).unwrap_or(0);
    let left = Duration::from_millis(left_ms);
    if left <= CATCH_UP_SLICE {
        // At least a second: MASTER_GTID_WAIT's timeout is whole seconds here.
        Slice { wait: left.max(Duration::from_secs(1)), last: true }
    } else {
        Slice { wait: CATCH_UP_SLICE, last: false }
    }
}

/// When this process first saw each request draining, by `(group UID,
/// requestId)`: the drain's start is the earlier of that and the
/// `Draining` time in status, so a hand edit moving that time into the
/// future (found by an attack: the old primary stayed fenced past every
/// bound) extends no drain by more than one process's view of it.
#[derive(Clone, Debug, Default)]
pub struct DrainsSeen(std::sync::Arc<std::sync::Mutex<std::collections::HashMap<(String, String), Timestamp>>>);

impl DrainsSeen {
    /// The time to count a drain of `request_id` in `group_uid` from: the
    /// first time this process saw it draining, or `stored` if earlier.
    fn start(&self, group_uid: &str, request_id: &str, stored: Timestamp, now: Timestamp) -> Timestamp {
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let seen = *map.entry((group_uid.to_owned(), request_id.to_owned())).or_insert(now);
        stored.min(seen)
    }

    /// Forgets the drains of a request that left `Draining`.
    fn forget(&self, group_uid: &str, request_id: &str) {
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        map.remove(&(group_uid.to_owned(), request_id.to_owned()));
    }
}

/// Caps the time of a draining request's latest `Draining` transition at
/// when this process first saw it draining (see [`DrainsSeen`]); the capped
/// time is what the next status write keeps.
fn cap_drain(ctx: &Context, group: &MysqlFailoverGroup, state: &mut PlannedFailoverStatus) {
    if Phase::parse(&state.phase) != Some(Phase::Draining) {
        return;
    }
    let uid = group.metadata.uid.clone().unwrap_or_default();
    let Some(entry) = state.history.iter_mut().rev().find(|t| t.phase == Phase::Draining.as_str()) else { return };
    let start = ctx.drains.start(&uid, &state.request_id, entry.time.0, Timestamp::now());
    if start < entry.time.0 {
        tracing::warn!(group = %group.name_any(), request_id = %state.request_id, stored = %entry.time.0, counted_from = %start, "the Draining time in status lies after this operator first saw the drain; counting from the earlier");
        entry.time = Time(start);
    }
}

/// Whether a request with phase `history` drained for longer than its
/// bounds at `now` (see [`drain_deadline`]). False without a `Draining`
/// transition (nothing to count from).
fn drain_deadline_passed(
    history: &[PhaseTransition],
    policy: &bloodraven_api::v1alpha1::FailoverPolicy,
    now: Timestamp,
) -> bool {
    drain_deadline(history, policy, now).is_some_and(|deadline| now > deadline)
}

/// The drain's deadline: the latest `Draining` transition of `history`
/// (as the caller capped it with [`DrainsSeen`]) plus `fenceTimeoutSeconds`
/// and `catchUpTimeoutSeconds`, since the fence comes first. Kept in status,
/// so a new leader goes on with the same deadline.
fn drain_deadline(
    history: &[PhaseTransition],
    policy: &bloodraven_api::v1alpha1::FailoverPolicy,
    now: Timestamp,
) -> Option<Timestamp> {
    let drained = history.iter().rev().find(|t| t.phase == Phase::Draining.as_str())?.time.0.min(now);
    let bounds = u64::from(policy.fence_timeout_seconds.clamp(1, 300))
        + u64::from(policy.catch_up_timeout_seconds.clamp(1, 3600));
    drained.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(i64::try_from(bounds).unwrap_or(i64::MAX))).ok()
}

/// What a drive left behind.
#[derive(Debug)]
pub struct Drive {
    /// The group as last written or read (status may have moved).
    pub group: MysqlFailoverGroup,
    /// The phase the request was left in; `None` when nothing runs.
    phase: Option<Phase>,
    /// When to look again, if sooner than the probe interval.
    pub requeue: Option<Duration>,
    /// Whether a `Draining` request ran past its bound (fence + catch-up).
    past_deadline: bool,
    /// Whether the drive may have acted on a site (it ran a round in
    /// `Draining`, `Promoting` or `Repointing`, or ended with an error):
    /// the probes taken before it no longer show the sites.
    pub acted_on_sites: bool,
}

impl Drive {
    /// Nothing running.
    pub fn idle(group: MysqlFailoverGroup) -> Drive {
        Drive { group, phase: None, requeue: None, past_deadline: false, acted_on_sites: false }
    }

    /// A request left in `phase`, looked at again after `requeue`.
    fn at(group: MysqlFailoverGroup, phase: Phase, requeue: Duration) -> Drive {
        Drive { group, phase: Some(phase), requeue: Some(requeue), past_deadline: false, acted_on_sites: false }
    }

    /// The request as status shows it, for a drive that ended with an
    /// error: the safety paths still run, and hold automatic failover only
    /// as far as that phase does.
    pub fn as_stored(ctx: &Context, group: MysqlFailoverGroup) -> Drive {
        let phase =
            group.status.as_ref().and_then(|s| s.planned_failover.as_ref()).and_then(|p| Phase::parse(&p.phase));
        let drive =
            Drive { group, phase, requeue: Some(Duration::from_secs(1)), past_deadline: false, acted_on_sites: true };
        drive.with_deadline(ctx)
    }

    /// Fills in whether a draining request ran past its bound, counted as
    /// [`cap_drain`] counts it.
    fn with_deadline(mut self, ctx: &Context) -> Drive {
        if self.phase != Some(Phase::Draining) {
            return self;
        }
        let Some(mut state) = self.group.status.as_ref().and_then(|s| s.planned_failover.clone()) else {
            return self;
        };
        cap_drain(ctx, &self.group, &mut state);
        self.past_deadline = drain_deadline_passed(&state.history, &self.group.spec.failover, Timestamp::now());
        self
    }

    /// A request is in a non-final phase: the group is unstable
    /// (`OperationInProgress`).
    pub fn running(&self) -> bool {
        self.phase.is_some_and(|p| !p.is_final())
    }

    /// The request is past its decision (`Promoting`, `Repointing`):
    /// `RecoveryPending`.
    pub fn recovering(&self) -> bool {
        matches!(self.phase, Some(Phase::Promoting | Phase::Repointing))
    }

    /// Automatic failover waits for the request: it is draining, within
    /// its own bound (see [`planned::holds_automatic_failover`]).
    pub fn holds_automatic_failover(&self) -> bool {
        self.phase.is_some_and(|p| planned::holds_automatic_failover(p, self.past_deadline))
    }

    /// Why automatic failover waits, for `AutomaticFailoverHeld`: the drain
    /// and its bound, with the deadline when status records the drain.
    pub fn hold_message(&self) -> String {
        let policy = &self.group.spec.failover;
        let bound = u64::from(policy.fence_timeout_seconds.clamp(1, 300))
            + u64::from(policy.catch_up_timeout_seconds.clamp(1, 3600));
        let history =
            self.group.status.as_ref().and_then(|s| s.planned_failover.as_ref()).map(|p| p.history.as_slice());
        let until = history
            .and_then(|h| drain_deadline(h, policy, Timestamp::now()))
            .map_or_else(String::new, |d| format!(", until {}", d.strftime("%Y-%m-%dT%H:%M:%SZ")));
        format!(
            "a planned failover is draining (its old primary is fenced); automatic failover waits for its decision at most fenceTimeoutSeconds + catchUpTimeoutSeconds = {bound}s from the drain{until}; no deploy lease ever holds it"
        )
    }

    /// The request is decided and its target not yet promoted (`Promoting`):
    /// the fenced old primary has every write.
    pub fn before_promotion(&self) -> bool {
        self.phase == Some(Phase::Promoting)
    }
}

/// Drives the group's planned failover, if any, as far as it goes now.
/// `probes` are the round's probes, taken just before: the drive's first
/// step acts on them, so a request that has not fenced costs the round no
/// probe of its own (against a primary that drops packets every probe costs
/// `probeTimeoutSeconds`, and the emergency path runs after the drive).
pub async fn drive(
    ctx: &Context,
    records: &Api<ConfigMap>,
    group: MysqlFailoverGroup,
    probes: &[SiteProbe],
) -> Result<Drive, Error> {
    let mut acted_on_sites = false;
    let mut drive = Box::pin(drive_rounds(ctx, records, group, probes, &mut acted_on_sites)).await?.with_deadline(ctx);
    drive.acted_on_sites = acted_on_sites;
    Ok(drive)
}

async fn drive_rounds(
    ctx: &Context,
    records: &Api<ConfigMap>,
    group: MysqlFailoverGroup,
    first: &[SiteProbe],
    acted_on_sites: &mut bool,
) -> Result<Drive, Error> {
    let idle = Drive::idle;
    let (mut group, mut state) = match take_up(ctx, records, group).await? {
        Ok(taken) => taken,
        Err(group) => return Ok(idle(group)),
    };
    let rec = ctx.records.read(records, &group.name_any()).await?;
    if let Some(why) = not_ours(&group, rec.as_ref(), &state) {
        tracing::warn!(group = %group.name_any(), request_id = %state.request_id, phase = %state.phase, why = %why, "planned failover not acted on");
        group = enter(ctx, &group, &mut state, Phase::Failed, Some(why), None).await?;
        return Ok(idle(group));
    }
    cap_drain(ctx, &group, &mut state);
    let source = state.source_site.clone().unwrap_or_default();
    let mut local = Local::default();
    // What a previous drive (or leader) learned of the hold is re-learned:
    // a deferred request stays deferred while the hold lives (no
    // Deferred ↔ Admitting churn on every probe), and an admitting one is
    // admitted again before it may drain.
    match Phase::parse(&state.phase) {
        Some(Phase::Deferred) => {
            if let Some(service) = ctx.deploy.as_ref() {
                let hold = bounded(&group, "read the failover-hold", service.live_hold(&group)).await?;
                local.hold = hold;
            }
        }
        Some(Phase::Admitting) => local.hold = admit(ctx, &group, &state).await?,
        _ => {}
    }
    for round in 0..MAX_ROUNDS {
        if !ctx.leadership.is_leader() {
            return Err(Error::NotLeader);
        }
        let phase = Phase::parse(&state.phase).unwrap_or(Phase::Failed);
        if phase.is_final() {
            return Ok(idle(group));
        }
        // Fenced phases act on the sites; the probes of the round no longer
        // show them, and the caller probes again.
        *acted_on_sites |= matches!(phase, Phase::Draining | Phase::Promoting | Phase::Repointing);
        let probes = if round == 0 && !first.is_empty() { first.to_vec() } else { sites::probe_all(&group, ctx).await };
        let observed = |site: &str| probes.iter().find(|p| p.site == site).and_then(|p| p.outcome.as_ref().ok());
        let (Some(source_spec), Some(target_spec)) =
            (group.site(&source).cloned(), group.site(&state.target_site).cloned())
        else {
            let why = format!("site {source} or {} is no longer in spec.sites", state.target_site);
            group = enter(ctx, &group, &mut state, Phase::Failed, Some(why), None).await?;
            return Ok(idle(group));
        };
        let active = group.decided().map(|(s, _)| s.to_owned()).unwrap_or_default();
        let (src, tgt) = (observed(&source), observed(&state.target_site));
        let facts = Facts {
            active: active.clone(),
            generation: group.decided().map(|(_, g)| g),
            source_generation: state.source_generation,
            target: state.target_site.clone(),
            hold: local.hold.as_ref().map(|h| (h.operation_id.clone(), h.instance.clone())),
            target_ready: admissible(ctx, &group, &source, src, &state.target_site, &probes),
            old_fenced: src.map(|o| !o.writable),
            past_deadline: drain_deadline_passed(&state.history, &group.spec.failover, Timestamp::now()),
            fence_failed: local.fence_failed.clone(),
            caught_up: local.caught_up,
            target_promoted: tgt.is_some_and(|o| o.writable && o.replication.is_none()),
            old_repointed: src.is_some_and(|o| {
                o.replication.as_ref().is_some_and(|r| {
                    r.sql_running && r.source_host == target_spec.host && r.source_port == target_spec.port
                })
            }),
        };
        let action = planned::next(phase, &source, &facts);
        tracing::debug!(group = %group.name_any(), phase = phase.as_str(), action = ?action, "planned failover step");
        let flavor = src.or(tgt).map_or(Flavor::MariaDb, |o| o.flavor);
        let version = src.or(tgt).map(|o| o.version.clone()).unwrap_or_default();
        let fence_bound = Duration::from_secs(u64::from(group.spec.failover.fence_timeout_seconds.clamp(1, 300)));
        let action_bound = Duration::from_secs(u64::from(group.spec.failover.probe_timeout_seconds.clamp(1, 60)) * 5);
        let step = Step {
            phase,
            source: source.clone(),
            source_spec,
            target_spec,
            tgt: tgt.cloned(),
            flavor,
            version,
            policy: group.spec.failover.clone(),
            fence_bound,
            action_bound,
        };
        match act(ctx, records, &mut group, &mut state, &mut local, action, &step).await {
            Ok(Some(done)) => return Ok(done),
            Ok(None) => {}
            // After the decision a site that cannot be acted on is retried,
            // and the reconcile goes on (probes, status, and the emergency
            // path, which may fail over a new primary that died).
            Err(Error::Site { action, site, message }) if matches!(phase, Phase::Promoting | Phase::Repointing) => {
                tracing::warn!(group = %group.name_any(), site = %site, error = %message, action, "step after the decision failed; retrying");
                return Ok(Drive::at(group, phase, Duration::from_secs(2)));
            }
            Err(e) => return Err(e),
        }
    }
    let phase = Phase::parse(&state.phase).unwrap_or(Phase::Failed);
    Ok(Drive::at(group, phase, Duration::from_secs(1)))
}

/// Takes up the request to drive: the one in a non-final phase, or a new
/// `spec.plannedFailover` (its id recorded first, so it is never run twice;
/// a target that is already active completes at once, one not in
/// `spec.sites` fails). `Err(group)`: nothing to drive.
async fn take_up(
    ctx: &Context,
    records: &Api<ConfigMap>,
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
            let Some(rec) = ctx.records.read(records, &group.name_any()).await? else { return Ok(Err(group)) };
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
async fn ignore_reused(
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
    let patch = json!({ "status": { "ignoredPlannedFailover": &ignored } });
    let api: Api<MysqlFailoverGroup> = Api::all(ctx.client.clone());
    let params = PatchParams { field_manager: Some(ENGINE_FIELD_MANAGER.into()), ..PatchParams::default() };
    let written = api
        .patch_status(&group.name_any(), &params, &Patch::Merge(&patch))
        .await
        .map_err(kube_err("report an ignored planned failover request for"))?;
    publish(ctx, &written, EventType::Warning, reason::REQUEST_ID_REUSED, ignored.message, "TakeUpRequest", None).await;
    Ok(written)
}

/// The record's word for an admitted request.
fn admission_of(state: &PlannedFailoverStatus) -> String {
    format!("{} {} {}", state.request_id, state.target_site, state.source_site.as_deref().unwrap_or(""))
}

/// Records that `state`'s request was admitted (decision record,
/// compare-and-swap), before its drain.
async fn remember_admission(
    ctx: &Context,
    records: &Api<ConfigMap>,
    group: &MysqlFailoverGroup,
    state: &PlannedFailoverStatus,
) -> Result<(), Error> {
    let Some(rec) = ctx.records.read(records, &group.name_any()).await? else {
        return Err(Error::Site {
            action: "record the admission for",
            site: String::new(),
            message: "no decision record".into(),
        });
    };
    let admitted = admission_of(state);
    if rec.admitted.as_deref() == Some(admitted.as_str()) {
        return Ok(());
    }
    if rec.tampered.is_some() || state.source_site.as_deref() != Some(rec.active_site.as_str()) {
        return Err(Error::Site {
            action: "admit a planned failover for",
            site: state.target_site.clone(),
            message: "the decision record does not show the request's source as active".into(),
        });
    }
    let mut extra = rec.extra();
    extra.admitted = Some(admitted);
    if !ctx.leadership.is_leader() {
        return Err(Error::NotLeader);
    }
    let uid = group.metadata.uid.clone().unwrap_or_default();
    ctx.records.write(records, &group.name_any(), &uid, &rec.active_site, rec.generation, &extra, Some(&rec)).await?;
    Ok(())
}

/// Why the operator will not act on the request `state` shows, if so:
/// before its drain it must be what `spec.plannedFailover` asks (else it was
/// cancelled, or never asked); from the drain on, the decision record must
/// name it as admitted (else status was written by someone else).
fn not_ours(group: &MysqlFailoverGroup, rec: Option<&record::Record>, state: &PlannedFailoverStatus) -> Option<String> {
    let phase = Phase::parse(&state.phase)?;
    match phase {
        Phase::Pending | Phase::Admitting | Phase::Deferred => {
            let asked = group.spec.planned_failover.as_ref();
            (asked.map(|r| (r.request_id.as_str(), r.target_site.as_str()))
                != Some((state.request_id.as_str(), state.target_site.as_str())))
            .then(|| "cancelled: spec.plannedFailover no longer asks for it".to_owned())
        }
        Phase::Draining | Phase::Promoting | Phase::Repointing => {
            let admitted = rec.and_then(|r| r.admitted.as_deref());
            (admitted != Some(admission_of(state).as_str())).then(|| {
                format!(
                    "status showed request {} in phase {} but the operator never admitted it (status is written by the operator only); nothing was done",
                    state.request_id,
                    phase.as_str()
                )
            })
        }
        Phase::Completed | Phase::Failed => None,
    }
}

/// Records that `request_id` was taken up (decision record, compare-and-swap),
/// so neither a repeat of it nor a wiped status ever runs it again.
async fn remember_request(
    ctx: &Context,
    records: &Api<ConfigMap>,
    group: &MysqlFailoverGroup,
    request_id: &str,
) -> Result<(), Error> {
    let Some(rec) = ctx.records.read(records, &group.name_any()).await? else {
        return Err(Error::Site {
            action: "record the request for",
            site: String::new(),
            message: "no decision record".into(),
        });
    };
    if rec.requests.iter().any(|r| r == request_id) {
        return Ok(());
    }
    let mut extra = rec.extra();
    extra.requests.push(request_id.to_owned());
    if !ctx.leadership.is_leader() {
        return Err(Error::NotLeader);
    }
    let uid = group.metadata.uid.clone().unwrap_or_default();
    ctx.records.write(records, &group.name_any(), &uid, &rec.active_site, rec.generation, &extra, Some(&rec)).await?;
    Ok(())
}

/// What one round saw, for [`act`].
struct Step {
    phase: Phase,
    source: String,
    source_spec: bloodraven_api::v1alpha1::Site,
    target_spec: bloodraven_api::v1alpha1::Site,
    tgt: Option<SiteObservation>,
    flavor: Flavor,
    /// `@@version` of the source (or the target), for the bypass check.
    version: String,
    policy: bloodraven_api::v1alpha1::FailoverPolicy,
    fence_bound: Duration,
    action_bound: Duration,
}

/// Runs one action of the decision table; `Some` ends the drive with that answer.
#[allow(clippy::too_many_lines)] // one arm per action of the decision table, each short
async fn act(
    ctx: &Context,
    records: &Api<ConfigMap>,
    group: &mut MysqlFailoverGroup,
    state: &mut PlannedFailoverStatus,
    local: &mut Local,
    action: Action,
    step: &Step,
) -> Result<Option<Drive>, Error> {
    let idle = Drive::idle;
    let phase = step.phase;
    match action {
        Action::Idle => return Ok(Some(idle(group.clone()))),
        Action::Enter(next) => {
            if next == Phase::Draining {
                // Recorded before anything is done to a site: only a request
                // the record names is ever drained, promoted or repointed.
                remember_admission(ctx, records, group, state).await?;
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
                return Ok(Some(idle(group.clone())));
            }
            if next == Phase::Admitting {
                if step.phase == Phase::Pending {
                    remember_request(ctx, records, group, &state.request_id).await?;
                }
                local.hold = admit(ctx, group, state).await?;
            }
        }
        Action::Defer { .. } => {
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
            return Ok(Some(Drive::at(group.clone(), Phase::Deferred, requeue)));
        }
        Action::Fence(site) => {
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
                    crate::failpoint::hit("planned-after-fence");
                }
                Err(err) => {
                    let (_, message) = crate::mysql::classify(&err);
                    tracing::warn!(group = %group.name_any(), site = %site, error = %message, "fence failed");
                    local.fence_failed = Some(message);
                }
            }
        }
        Action::CatchUp(site) => {
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
            crate::failpoint::hit("planned-after-catch-up");
            local.promotion_position = Some(positions.binlog);
        }
        Action::Unfence(site) => {
            let spec = group.site(&site).cloned().ok_or(Error::NoName)?;
            let creds = credentials(ctx, &spec).await?;
            let at = ProbeTarget { host: spec.host.clone(), port: spec.port };
            if !ctx.leadership.is_leader() {
                return Err(Error::NotLeader);
            }
            actions::unfence(&at, &creds, step.flavor, step.action_bound)
                .await
                .map_err(|e| site_err("unfence", &site, &e))?;
            tracing::warn!(group = %group.name_any(), site = %site, "old primary made writable again after a failed drain");
        }
        Action::Fail(why) => {
            *group = enter(ctx, group, state, Phase::Failed, Some(why), None).await?;
            ctx.metrics.failovers_total.with_label_values(&[&group.name_any(), "planned", "failed"]).inc();
            return Ok(Some(idle(group.clone())));
        }
        Action::Decide(site) => {
            let Some(rec) = ctx.records.read(records, &group.name_any()).await? else {
                return Err(Error::Site { action: "decide for", site, message: "the decision record is gone".into() });
            };
            if rec.tampered.is_some() || rec.active_site != step.source {
                let why =
                    "the decision record no longer shows the source site as active; see the DecisionConflict condition"
                        .to_owned();
                *group = enter(ctx, group, state, Phase::Failed, Some(why), None).await?;
                return Ok(Some(idle(group.clone())));
            }
            let mut extra = rec.extra();
            extra.promotion_position =
                local.promotion_position.clone().or(step.tgt.as_ref().map(|o| o.gtid_position.clone()));
            let decided = decision::decide(ctx, records, group, &rec, &site, &extra, None).await?;
            crate::failpoint::hit("planned-after-decide");
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
        }
        Action::Promote(site) => {
            let creds = credentials(ctx, &step.target_spec).await?;
            let at = ProbeTarget { host: step.target_spec.host.clone(), port: step.target_spec.port };
            if !ctx.leadership.is_leader() {
                return Err(Error::NotLeader);
            }
            actions::promote(&at, &creds, step.flavor, step.action_bound)
                .await
                .map_err(|e| site_err("promote", &site, &e))?;
            tracing::info!(group = %group.name_any(), site = %site, "promoted");
            crate::failpoint::hit("planned-after-promote");
        }
        Action::Repoint { site, source: new_primary } => {
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
            crate::failpoint::hit("planned-after-repoint");
        }
    }
    Ok(None)
}

/// What one drive learned that the sites do not show.
#[derive(Default)]
struct Local {
    hold: Option<Grant>,
    fence_failed: Option<String>,
    caught_up: Option<bool>,
    promotion_position: Option<String>,
}

fn site_err(action: &'static str, site: &str, err: &crate::mysql::ProbeError) -> Error {
    let (_, message) = crate::mysql::classify(err);
    Error::Site { action, site: site.to_owned(), message }
}

async fn credentials(ctx: &Context, site: &bloodraven_api::v1alpha1::Site) -> Result<crate::mysql::Credentials, Error> {
    sites::read_credentials(site, ctx).await.map_err(|f| Error::Site {
        action: "read credentials for",
        site: site.name.clone(),
        message: f.message,
    })
}

/// The admission check: the live failover-hold that defers the request;
/// `None` admits (and fences the hold slot).
async fn admit(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    state: &PlannedFailoverStatus,
) -> Result<Option<Grant>, Error> {
    let Some(service) = ctx.deploy.as_ref() else { return Ok(None) };
    let marker = format!("{}@{}", state.request_id, Timestamp::now());
    bounded(group, "admit the planned failover", service.admit(&group.name_any(), &marker)).await
}

/// A deploy-lease call of the drive, bounded by the group's probe timeout:
/// the drive runs before the safety paths in a reconcile, and a slow lease
/// store must not delay an emergency failover (an error here ends the
/// drive, and the reconcile goes on to the safety paths).
async fn bounded<T>(
    group: &MysqlFailoverGroup,
    action: &'static str,
    call: impl std::future::Future<Output = Result<T, crate::lease::service::ServiceError>>,
) -> Result<T, Error> {
    let bound = Duration::from_secs(u64::from(group.spec.failover.probe_timeout_seconds.clamp(1, 60)));
    let answer = match tokio::time::timeout(bound, call).await {
        Ok(answer) => answer.map_err(LeaseError::from),
        Err(_) => Err(LeaseError::Timeout { seconds: bound.as_secs() }),
    };
    answer.map_err(Error::leases(action))
}

/// Reports accounts that can write through `read_only` on `site` (MariaDB
/// `READ_ONLY ADMIN`, or `SUPER` before 10.11; themselves, through roles or
/// `PUBLIC`) other than the exact one the operator is connected as, right
/// before the fence: a Warning Event, and a fresh check for the
/// `ReadOnlyBypassAccounts` condition. The fence ends their sessions anyway.
async fn report_bypass(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    site: &str,
    target: &ProbeTarget,
    creds: &crate::mysql::Credentials,
    step: &Step,
) {
    let timeout = Duration::from_secs(u64::from(group.spec.failover.probe_timeout_seconds.clamp(1, 60)));
    match actions::read_only_bypass(target, creds, step.flavor, &step.version, timeout).await {
        Ok(found) => {
            ctx.bypass.store(&group.uid().unwrap_or_default(), site, found.clone());
            if found.accounts.is_empty() {
                return;
            }
            let shown: Vec<String> =
                found.accounts.iter().take(10).map(|a| bloodraven_serving::log::escape(a, 80)).collect();
            publish(
                ctx,
                group,
                EventType::Warning,
                reason::READ_ONLY_ADMIN_ACCOUNTS,
                format!(
                    "on site {site}, {} can write through read_only (READ_ONLY ADMIN, or SUPER before MariaDB 10.11); the fence ends their sessions, but application and migration accounts should not hold these privileges",
                    shown.join(", ")
                ),
                "Fence",
                None,
            )
            .await;
        }
        Err(err) => {
            tracing::debug!(site, error = %crate::mysql::classify(&err).1, "could not list read_only bypass accounts");
        }
    }
}

/// Whether `target` may be promoted by a planned failover: what the replica
/// check found of it (errant transactions, a stall) refuses it before
/// anything this probe shows, since both come from rounds a single probe
/// cannot replace; then [`target_readiness`].
fn admissible(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    source: &str,
    source_obs: Option<&SiteObservation>,
    target: &str,
    probes: &[SiteProbe],
) -> Result<(), String> {
    if let Some(problem) = super::replicas::known_problem(ctx, group, target) {
        return Err(problem);
    }
    target_readiness(&group.spec, source, source_obs, target, probes)
}

/// Whether `target` is ready to be promoted from `source`, by this probe alone:
/// reachable, replicating from the source (by `server_id`) with both
/// threads, lag ≤ `maxLagSeconds`, and no transaction the source lacks
/// (errant GTIDs). `Err` says what to fix.
pub fn target_readiness(
    spec: &MysqlFailoverGroupSpec,
    source: &str,
    source_obs: Option<&SiteObservation>,
    target: &str,
    probes: &[SiteProbe],
) -> Result<(), String> {
    let probe = probes.iter().find(|p| p.site == target).ok_or_else(|| format!("{target} was not probed"))?;
    let obs = probe.outcome.as_ref().map_err(|f| format!("{target} is unreachable: {}", f.message))?;
    let src = source_obs.ok_or_else(|| format!("the active site {source} is unreachable"))?;
    let Some(r) = &obs.replication else {
        return Err(format!("{target} has no replication configured; make it a replica of {source}"));
    };
    if !r.running() {
        return Err(format!(
            "{target} replication is not running (IO thread: {}, SQL thread: {}); start it ({}) and fix its errors",
            r.io_running,
            r.sql_running,
            crate::mysql::statements::start_hint(obs.flavor)
        ));
    }
    if r.source_server_id != Some(src.server_id) {
        return Err(format!("{target} does not replicate from {source} (server_id {})", src.server_id));
    }
    match r.lag_seconds {
        Some(lag) if lag > u64::from(spec.failover.max_lag_seconds) => {
            return Err(format!(
                "{target} is {lag}s behind, more than maxLagSeconds ({}s); wait for it to catch up",
                spec.failover.max_lag_seconds
            ));
        }
        None => return Err(format!("{target} reports no replication lag (NULL); wait until it is replicating")),
        Some(_) => {}
    }
    if let Some(errant) = errant(obs.flavor, &obs.gtid_position, &src.gtid_position, src.server_id, &src.server_uuid)? {
        return Err(format!(
            "{target} has transactions {source} lacks (errant GTIDs: {errant}); remove them or rebuild {target} from {source}"
        ));
    }
    Ok(())
}

/// Transactions `have` (a replica) has that `base` (its source, server
/// `base_server_id`, `base_uuid` on MySQL) lacks (`None`: none), less those
/// the source wrote itself: the two positions are read at slightly
/// different moments, so a replica can be ahead of a busy source's snapshot
/// with the source's own transactions, which are not errant. MariaDB: per
/// domain, a last GTID past `base`'s whose server is not the source.
/// MySQL: `have − base`, without the source's UUID (found by the failover
/// benchmark: a switchover back under write load was refused for the
/// source's own newest transaction).
pub fn errant(
    flavor: Flavor,
    have: &str,
    base: &str,
    base_server_id: u32,
    base_uuid: &str,
) -> Result<Option<String>, String> {
    match flavor {
        Flavor::MariaDb => {
            let have = MariaDbPosition::parse(have).map_err(|e| e.to_string())?;
            let base = MariaDbPosition::parse(base).map_err(|e| e.to_string())?;
            let mut beyond = have.beyond(&base);
            beyond.0.retain(|_, (server, _)| *server != base_server_id);
            Ok((!beyond.is_empty()).then(|| beyond.to_string()))
        }
        Flavor::MySql => {
            let have = MySqlGtidSet::parse(have).map_err(|e| e.to_string())?;
            let base = MySqlGtidSet::parse(base).map_err(|e| e.to_string())?;
            let mut extra = have.minus(&base);
            extra.0.retain(|uuid, _| !uuid.eq_ignore_ascii_case(base_uuid));
            Ok((!extra.is_empty()).then(|| extra.to_string()))
        }
    }
}

/// Enters `phase`: history, Event, status (one write).
async fn enter(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    state: &mut PlannedFailoverStatus,
    phase: Phase,
    message: Option<String>,
    admission: Option<PlannedFailoverAdmission>,
) -> Result<MysqlFailoverGroup, Error> {
    if phase != Phase::Draining {
        ctx.drains.forget(group.metadata.uid.as_deref().unwrap_or_default(), &state.request_id);
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
    crate::failpoint::hit(&format!("planned-entered-{}", phase.as_str()));
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
fn replacing(stored: Option<&PlannedFailoverStatus>, state: &PlannedFailoverStatus) -> serde_json::Value {
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

/// Writes `status.plannedFailover` (and, while it runs, `stable: false`,
/// `unstableReason: OperationInProgress`, so the deploy API answers `423`
/// at once) with the resourceVersion of `group`.
async fn write_state(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    state: &PlannedFailoverStatus,
) -> Result<MysqlFailoverGroup, Error> {
    if !ctx.leadership.is_leader() {
        return Err(Error::NotLeader);
    }
    let running = Phase::parse(&state.phase).is_some_and(|p| !p.is_final());
    let stored = group.status.as_ref().and_then(|s| s.planned_failover.as_ref());
    let mut status = json!({ "plannedFailover": replacing(stored, state) });
    if group.status.as_ref().is_some_and(|s| s.ignored_planned_failover.is_some()) {
        // A request was taken up: the report of an ignored one is over.
        status["ignoredPlannedFailover"] = serde_json::Value::Null;
    }
    if running {
        status["stable"] = json!(false);
        status["unstableReason"] = json!(reason::OPERATION_IN_PROGRESS);
    }
    let patch = json!({ "metadata": { "resourceVersion": group.resource_version() }, "status": status });
    let api: Api<MysqlFailoverGroup> = Api::all(ctx.client.clone());
    let params = PatchParams { field_manager: Some(ENGINE_FIELD_MANAGER.into()), ..PatchParams::default() };
    api.patch_status(&group.name_any(), &params, &Patch::Merge(&patch))
        .await
        .map_err(kube_err("write the planned failover's progress"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catch_up_waits_in_slices_until_the_bound_counted_from_the_drain() {
        let t0: Timestamp = "2026-12-01T10:00:00Z".parse().unwrap();
        let at = |secs: i64| t0 + k8s_openapi::jiff::SignedDuration::from_secs(secs);
        let entry =
            |phase: &str, secs: i64| PhaseTransition { phase: phase.into(), time: Time(at(secs)), message: None };
        let history = vec![entry("Pending", -5), entry("Admitting", -4), entry("Draining", 0)];
        let policy = bloodraven_api::v1alpha1::FailoverPolicy {
            fence_timeout_seconds: 10,
            catch_up_timeout_seconds: 30,
            ..Default::default()
        };
        // Deadline: drain + fence bound + catch-up bound = t0 + 40 s.
        assert_eq!(catch_up_slice(&history, &policy, at(1)), Slice { wait: CATCH_UP_SLICE, last: false });
        assert_eq!(catch_up_slice(&history, &policy, at(37)), Slice { wait: CATCH_UP_SLICE, last: false });
        assert_eq!(catch_up_slice(&history, &policy, at(39)), Slice { wait: Duration::from_secs(1), last: true });
        assert_eq!(
            catch_up_slice(&history, &policy, at(500)),
            Slice { wait: Duration::from_secs(1), last: true },
            "past the deadline: one last short look, then it fails"
        );
        assert!(!drain_deadline_passed(&history, &policy, at(40)) && drain_deadline_passed(&history, &policy, at(41)));
        // A new leader after a restart reads the same deadline from status.
        let mut later = history.clone();
        later.push(entry("Draining", 20));
        assert_eq!(
            catch_up_slice(&later, &policy, at(45)),
            Slice { wait: CATCH_UP_SLICE, last: false },
            "the latest drain counts"
        );
        // A Draining time in the future (a hand edit) counts as now, so the
        // bound still ends the drain (found by an attack).
        let edited = vec![entry("Draining", 100_000)];
        assert_eq!(drain_deadline(&edited, &policy, at(5)), Some(at(45)));
        // No drain in the history (status wiped): the whole bound, once.
        assert_eq!(catch_up_slice(&history[..2], &policy, at(1)), Slice { wait: Duration::from_secs(30), last: true });
        assert!(!drain_deadline_passed(&history[..2], &policy, at(10_000)));
    }

    #[test]
    fn a_new_request_replaces_every_field_of_the_stored_one() {
        let stored = PlannedFailoverStatus {
            request_id: "r1".into(),
            target_site: "pdx".into(),
            phase: "Deferred".into(),
            source_site: Some("iad".into()),
            source_generation: Some(3),
            message: Some("deferred by op-1".into()),
            admission: Some(PlannedFailoverAdmission {
                defer_reason: Some(reason::DEPLOYMENT_HOLD.into()),
                retry_time: Some(Time("2026-12-01T10:00:00Z".parse().unwrap())),
                message: Some("the failover-hold of operation op-1".into()),
            }),
            history: vec![PhaseTransition {
                phase: "Deferred".into(),
                time: Time("2026-12-01T09:59:00Z".parse().unwrap()),
                message: None,
            }],
        };
        let fresh = PlannedFailoverStatus {
            request_id: "r2".into(),
            target_site: "iad".into(),
            phase: "Pending".into(),
            source_site: Some("pdx".into()),
            source_generation: Some(4),
            ..PlannedFailoverStatus::default()
        };
        let mut merged = serde_json::to_value(&stored).unwrap();
        json_patch::merge(&mut merged, &replacing(Some(&stored), &fresh));
        let merged: PlannedFailoverStatus = serde_json::from_value(merged).unwrap();
        assert_eq!(merged, fresh, "nothing of r1 is left");
        // A deferral's admission that changes loses what it no longer says.
        let mut later = stored.clone();
        later.admission = Some(PlannedFailoverAdmission { message: Some("m".into()), ..Default::default() });
        let mut merged = serde_json::to_value(&stored).unwrap();
        json_patch::merge(&mut merged, &replacing(Some(&stored), &later));
        assert_eq!(serde_json::from_value::<PlannedFailoverStatus>(merged).unwrap(), later);
    }

    #[test]
    fn errant_transactions_by_flavour() {
        assert_eq!(errant(Flavor::MariaDb, "0-1-10", "0-1-10", 1, ""), Ok(None));
        assert_eq!(errant(Flavor::MariaDb, "0-1-9", "0-1-10", 1, ""), Ok(None), "behind is not errant");
        assert_eq!(errant(Flavor::MariaDb, "0-2-11", "0-1-10", 1, ""), Ok(Some("0-2-11".into())));
        // Read a moment after a busy source: ahead with the source's own transactions.
        assert_eq!(errant(Flavor::MariaDb, "0-2-240", "0-2-238", 2, ""), Ok(None));
        assert_eq!(
            errant(Flavor::MariaDb, "0-1-10,1-2-3", "0-1-10", 1, ""),
            Ok(Some("1-2-3".into())),
            "a domain the base lacks"
        );
        assert_eq!(errant(Flavor::MariaDb, "", "0-1-10", 1, ""), Ok(None));
        assert!(errant(Flavor::MariaDb, "zzz", "0-1-1", 1, "").is_err());
        let u = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let source = "87f16bcf-efcf-11f1-85e2-02fc00000001";
        assert_eq!(errant(Flavor::MySql, &format!("{u}:1-5"), &format!("{u}:1-5"), 1, source), Ok(None));
        assert!(errant(Flavor::MySql, &format!("{u}:1-6"), &format!("{u}:1-5"), 1, source).unwrap().is_some());
        // Read a moment after a busy source: ahead with the source's own
        // transactions (the benchmark's input), in either case of its UUID.
        let have = format!("{u}:1-176,{source}:1-251");
        let base = format!("{u}:1-176,{source}:1-250");
        assert_eq!(errant(Flavor::MySql, &have, &base, 2, source), Ok(None));
        assert_eq!(errant(Flavor::MySql, &have, &base, 2, &source.to_uppercase()), Ok(None));
        // Its own writes on the replica are errant all the same.
        let mine = "d901bb47-efcd-11f1-90bb-02fc00000001";
        assert_eq!(errant(Flavor::MySql, &format!("{have},{mine}:1"), &base, 2, source), Ok(Some(format!("{mine}:1"))));
    }
}
