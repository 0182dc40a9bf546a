//! The planned failover engine: runs the decision table of
//! `bloodraven_core::failover::planned` against the real sites (docs/failover.md,
//! "What a hold holds"; docs/concepts.md, "The generation is the fence").
//!
//! A request is `spec.plannedFailover` (`targetSite`, `requestId`). Its
//! progress lives in `status.plannedFailover` (phase, history, admission),
//! written with the resourceVersion read (merge patch, field manager
//! `bloodraven-operator-engine`), and its id in the decision record, so a
//! repeated or older `requestId` is never run twice, even after status is
//! wiped. Each step of a drive (up to [`MAX_ROUNDS`] per reconcile; the
//! first acts on the reconcile's own probes) probes both sites and asks
//! `planned::next` for the one next action, so a new leader resumes any phase from status, the
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

use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::controller::failover_group::assess::SiteProbe;
use crate::controller::failover_group::sites;
use crate::controller::{Context, Error};
use crate::failover::round::RoundRecord;
use crate::mysql::Flavor;
use bloodraven_core::failover::planned::{self, Facts, Phase};

/// Entries kept in `status.plannedFailover.history`.
const MAX_HISTORY: usize = 32;
/// Rounds of one drive before it yields to the next reconcile.
const MAX_ROUNDS: usize = 24;

mod act;
mod drain;
pub(crate) mod request;
#[cfg(test)]
mod tests;

use self::act::act;
pub(crate) use self::drain::DrainsSeen;
use self::drain::{bounds, cap_drain, catch_up_slice, drain_deadline, drain_deadline_passed};
use self::request::{enter, not_ours, remember_admission, remember_request, take_up, write_state};
use crate::failover::switchover::{Local, Step, admissible, admit, bounded};
use bloodraven_core::failover::planned::drain::CATCH_UP_RECHECK;

/// What a drive left behind.
#[derive(Debug)]
pub(crate) struct Drive {
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
    pub(crate) fn idle(group: MysqlFailoverGroup) -> Drive {
        Drive { group, phase: None, requeue: None, past_deadline: false, acted_on_sites: false }
    }

    /// A request left in `phase`, looked at again after `requeue`.
    fn at(group: MysqlFailoverGroup, phase: Phase, requeue: Duration) -> Drive {
        Drive { group, phase: Some(phase), requeue: Some(requeue), past_deadline: false, acted_on_sites: false }
    }

    /// The request as status shows it, for a drive that ended with an
    /// error: the safety paths still run, and hold automatic failover only
    /// as far as that phase does.
    pub(crate) fn as_stored(ctx: &Context, group: MysqlFailoverGroup) -> Drive {
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
    pub(crate) fn running(&self) -> bool {
        self.phase.is_some_and(|p| !p.is_final())
    }

    /// The request is past its decision (`Promoting`, `Repointing`):
    /// `RecoveryPending`.
    pub(crate) fn recovering(&self) -> bool {
        matches!(self.phase, Some(Phase::Promoting | Phase::Repointing))
    }

    /// Automatic failover waits for the request: it is draining, within
    /// its own bound (see [`planned::holds_automatic_failover`]).
    pub(crate) fn holds_automatic_failover(&self) -> bool {
        self.phase.is_some_and(|p| planned::holds_automatic_failover(p, self.past_deadline))
    }

    /// Why automatic failover waits, for `AutomaticFailoverHeld`: the drain
    /// and its bound, with the deadline when status records the drain.
    pub(crate) fn hold_message(&self) -> String {
        let policy = &self.group.spec.failover;
        let bound = bounds(policy).total().as_secs();
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
    pub(crate) fn before_promotion(&self) -> bool {
        self.phase == Some(Phase::Promoting)
    }
}

/// Drives the group's planned failover, if any, as far as it goes now.
/// `probes` are the round's probes, taken just before: the drive's first
/// step acts on them, so a request that has not fenced costs the round no
/// probe of its own (against a primary that drops packets every probe costs
/// `probeTimeoutSeconds`, and the emergency path runs after the drive).
pub(crate) async fn drive(
    ctx: &Context,
    round: &mut RoundRecord,
    group: MysqlFailoverGroup,
    probes: &[SiteProbe],
) -> Result<Drive, Error> {
    let mut acted_on_sites = false;
    let group = request::run_on_if_ended_by_hand(ctx, round, group).await?;
    let mut drive = Box::pin(drive_rounds(ctx, round, group, probes, &mut acted_on_sites)).await?.with_deadline(ctx);
    drive.acted_on_sites = acted_on_sites;
    let shown =
        drive.group.status.as_ref().and_then(|s| s.planned_failover.as_ref()).and_then(|p| Phase::parse(&p.phase));
    if shown.is_none_or(Phase::is_final) {
        request::forget_ended(ctx, round, None).await?;
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
    let idle = Drive::idle;
    let (mut group, mut state) = match take_up(ctx, round, group).await? {
        Ok(taken) => taken,
        Err(group) => return Ok(idle(group)),
    };
    // Acted on: a copy from the watch cache may lag another leader's admission.
    let rec = round.fresh(ctx).await?.cloned();
    if let Some(why) = not_ours(&group, rec.as_ref(), &state) {
        tracing::warn!(group = %group.name_any(), request_id = %state.request_id, phase = %state.phase, why = %why, "planned failover not acted on");
        group = enter(ctx, &group, &mut state, Phase::Failed, Some(why), None).await?;
        return Ok(idle(group));
    }
    cap_drain(ctx, &group, &mut state);
    let source = state.source_site.clone().unwrap_or_default();
    let foreign_hold = crate::failover::record::foreign_hold(rec.as_ref(), &group, &state.request_id);
    let mut local = Local { foreign_hold, ..Local::default() };
    // What a previous drive (or leader) learned of the hold is re-learned:
    // a deferred request stays deferred while the hold lives (no
    // Deferred ↔ Admitting churn on every probe), and an admitting one is
    // admitted again before it may drain.
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
            return Ok(idle(group));
        }
        // Fenced phases act on the sites; the probes of the round no longer
        // show them, and the caller probes again.
        *acted_on_sites |= matches!(phase, Phase::Draining | Phase::Promoting | Phase::Repointing);
        let probes = if turn == 0 && !first.is_empty() { first.to_vec() } else { sites::probe_all(&group, ctx).await };
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
            // One operation at a time: another in flight refuses this one.
            target_ready: crate::failover::decision::other_operation(
                &group,
                crate::failover::decision::PLANNED_FAILOVER,
            )
            .map(|other| format!("{other} is in flight; one operation at a time"))
            .or_else(|| local.foreign_hold.clone())
            .map_or_else(|| admissible(ctx, &group, &source, src, &state.target_site, &probes), Err),
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
        let (fence_bound, action_bound) = Step::bounds(&group.spec.failover);
        let step = Step {
            phase,
            failpoints: "planned",
            source: source.clone(),
            source_spec,
            target_spec,
            tgt: tgt.cloned(),
            flavor,
            version,
            policy: group.spec.failover.clone(),
            fence_bound,
            action_bound,
            reclone: None,
            foreign: Step::foreign_in(&probes),
        };
        match act(ctx, round, &mut group, &mut state, &mut local, action, &step).await {
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
