//! The ordered update as a pure state machine: given the request's
//! persisted phase and what the engine observes, the one next action. Each
//! site's own work (a package upgrade, a configuration change) is a
//! user-supplied Job; the operator orders the sites around it, standby
//! first, so that the primary is never the site being changed.
//!
//! Phases: `Pending → Admitting → (Deferred ↔ Admitting) → UpdatingStandby
//! → VerifyingStandby → SwitchoverDraining → SwitchoverPromoting →
//! SwitchoverRepointing → UpdatingFormerPrimary → VerifyingFormerPrimary →
//! [SwitchBackDraining → SwitchBackPromoting → SwitchBackRepointing] →
//! Completed | Failed`.
//!
//! Order: admission exactly as a planned failover's ([`planned::admission`]:
//! a live failover-hold defers, `Deferred` revalidates when it ends; then
//! the group must be stable with no other operation in flight) → the
//! standby's Job, then a bounded wait until the standby is healthy,
//! replicating and caught up → the switchover, "the failover inside an
//! ordered update" (fence, bounded catch-up, decide generation + 1,
//! promote, repoint) → the former primary's Job, now on a fenced replica,
//! then a bounded wait until it is healthy and replicating from the new
//! primary → when the request asks (`switch_back`, default no), a second
//! switchover back to the first primary (generation + 1 again) → done.
//!
//! The switchovers are the planned failover's: each `Switchover*` and
//! `SwitchBack*` phase is that table's `Draining`, `Promoting` or
//! `Repointing` ([`switchover_phase`]), decided by [`planned::next`] itself
//! with the leg's sites ([`switchover_sites`]); its site actions are passed
//! through as [`Action::Switchover`] and its phase changes mapped onto this
//! table. No rule of the switchover is restated here.
//!
//! Failures: a Job that fails or runs past its deadline, a site that is
//! not ready within its bound, or a switchover that fails before its
//! decision ends the update `Failed` with no generation change and the
//! topology as it was. After the switchover's decision, a failure leaves
//! the new topology as decided (the new primary writable, the former one a
//! fenced replica) and names the site that needs a person
//! ([`Failure::attention`]). An emergency failover that moves the decision
//! supersedes the request: it ends, and never acts against the new
//! topology.
//!
//! What the request holds of automatic failover
//! ([`holds_automatic_failover`]):
//! - while a site's Job runs (`UpdatingStandby`, `UpdatingFormerPrimary`),
//!   the promotion of that site and nothing else ([`Hold::Promotion`]):
//!   the emergency path does not make a server that is stopped or
//!   half-upgraded the primary. The hold lasts while the Job runs, only
//!   while that site is not the decided primary, and at most the phase's
//!   bound, the Job's deadline (`activeDeadlineSeconds`, counted from
//!   entering the phase). The primary is still watched: a loss of the
//!   primary while the standby's Job runs is failed over, at most that
//!   deadline late (as soon as the Job ends), and the update is superseded.
//!   A Job on the primary would hold nothing: the rules never run one
//!   there, and a deployment cannot buy a delay of the primary's failover;
//! - while a switchover drains, the group's automatic failover
//!   ([`Hold::Group`]), within the drain's bound, exactly as a planned
//!   failover's drain holds it;
//! - nothing otherwise: not before the standby's Job starts (a deferred or
//!   admitting request holds nothing, whatever the deploy leases say), not
//!   while a site is verified, not after a decision.
//!
//! Crash safety: the engine persists only the phase (in status) and the
//! decisions (record + status). Every action is chosen from them and fresh
//! observations (a Job is named for the request and the site, so it is
//! found again, never run twice), so a new leader resumes where the old one
//! stopped; a switchover decides only while the decided active site is not
//! yet its target, so a request bumps the generation at most once per
//! switchover: once, or twice with the switch-back.
//!
//! Invariants (property-tested on a simulated pair of sites, with Job
//! failures, holds, blips, deadlines, emergency failovers and crashes
//! injected at every step): at most one writable site; the generation moves
//! by exactly one per decision of the request, one for a completed update
//! (two with the switch-back), and never for one that failed before its
//! switchover; a hold defers admission and never a later phase; a
//! superseded request never acts on a site.

use super::disruption::{self, Failure, Hold, JobState, JobStep, Switch, SwitchoverFacts};
use super::planned;

/// A phase of an ordered update, as status spells it: the contract's type.
pub use bloodraven_api::v1alpha1::OrderedUpdatePhase as Phase;

/// What the engine observes for one step of an ordered update of a group
/// whose primary, when the request was taken up, was `primary` (the
/// argument of [`next`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    /// The decided active site (record and status agree).
    pub active: String,
    /// The decided topology generation now (`None`: not readable).
    pub generation: Option<i64>,
    /// The generation the request was taken up at (`None`: not recorded).
    pub source_generation: Option<i64>,
    /// The standby when the request was taken up: updated first.
    pub standby: String,
    /// Whether the request asks to switch back to the first primary at the end.
    pub switch_back: bool,
    /// A live failover-hold: `(operationId, instance)`.
    pub hold: Option<(String, String)>,
    /// Admission's own check: the group is stable (no `Degraded`,
    /// `SplitBrain`, `NoPrimary`, recovery pending, replication running)
    /// and no other operation is in flight; else why not.
    pub admissible: Result<(), String>,
    /// In `UpdatingStandby` and `UpdatingFormerPrimary`: the Job of the
    /// site the phase updates.
    pub job: JobState,
    /// Whether the current phase ran past its bound, counted from entering
    /// it: the Job's deadline in an `Updating*` phase, the readiness bound
    /// in a `Verifying*` phase, the drain's bound (fence + catch-up) in a
    /// `*Draining` phase.
    pub past_deadline: bool,
    /// In a `Verifying*` phase: whether the updated site is ready. The
    /// standby: reachable, replicating from the primary with both threads,
    /// lag ≤ `maxLagSeconds`, no errant GTIDs (the planned failover's
    /// target readiness). The former primary: reachable, replicating from
    /// the new primary with both threads, no errant GTIDs.
    pub updated_ready: Result<(), String>,
    /// In a switchover phase: what the engine sees of the leg's two sites
    /// ([`switchover_sites`]).
    pub switchover: SwitchoverFacts,
}

/// The next thing to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Persist the phase (and, for `Deferred`, the blocking hold).
    Enter(Phase),
    /// Defer: a hold blocks; retry when it ends.
    Defer {
        /// The blocking operationId.
        operation_id: String,
        /// Its instance.
        instance: String,
    },
    /// Create the Job of `site` (named for the request and the site).
    RunJob(String),
    /// Wait, bounded, for the Job of `site` to end.
    AwaitJob(String),
    /// Wait, bounded, for `site` to be ready.
    AwaitReady(String),
    /// A step of the switchover, as the planned failover's table gives it:
    /// `Fence`, `CatchUp`, `Unfence`, `Decide`, `Promote` or `Repoint`,
    /// carried out as for a planned failover.
    Switchover(planned::Action),
    /// End the request as failed.
    Fail(Failure),
    /// Nothing to do (a final phase).
    Idle,
}

/// Which switchover a phase belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leg {
    /// From the first primary to the updated standby.
    Switchover,
    /// Back to the first primary, when requested.
    SwitchBack,
}

/// The switchover a phase runs, and the planned failover's phase it is.
pub const fn switchover_phase(phase: Phase) -> Option<(Leg, planned::Phase)> {
    match phase {
        Phase::SwitchoverDraining => Some((Leg::Switchover, planned::Phase::Draining)),
        Phase::SwitchoverPromoting => Some((Leg::Switchover, planned::Phase::Promoting)),
        Phase::SwitchoverRepointing => Some((Leg::Switchover, planned::Phase::Repointing)),
        Phase::SwitchBackDraining => Some((Leg::SwitchBack, planned::Phase::Draining)),
        Phase::SwitchBackPromoting => Some((Leg::SwitchBack, planned::Phase::Promoting)),
        Phase::SwitchBackRepointing => Some((Leg::SwitchBack, planned::Phase::Repointing)),
        _ => None,
    }
}

/// The sites of a switchover phase, `(old, target)`: the first primary
/// and the standby, or the other way round for the switch-back. The
/// engine observes [`Facts::switchover`] of these.
pub fn switchover_sites<'a>(phase: Phase, primary: &'a str, standby: &'a str) -> Option<(&'a str, &'a str)> {
    switchover_phase(phase).map(|(leg, _)| match leg {
        Leg::Switchover => (primary, standby),
        Leg::SwitchBack => (standby, primary),
    })
}

/// The site whose Job a phase runs: the standby, then the first primary.
pub fn job_site<'a>(phase: Phase, primary: &'a str, standby: &'a str) -> Option<&'a str> {
    match phase {
        Phase::UpdatingStandby => Some(standby),
        Phase::UpdatingFormerPrimary => Some(primary),
        _ => None,
    }
}

/// What a request in `phase`, from first primary `primary`, holds of
/// automatic failover (see the module header): the promotion of the site
/// whose Job runs while it is not the primary, within the Job's deadline;
/// the group's automatic failover while a switchover drains, within the
/// drain's bound; else nothing.
pub fn holds_automatic_failover(phase: Phase, primary: &str, facts: &Facts) -> Option<Hold> {
    if let Some((_, planned::Phase::Draining)) = switchover_phase(phase) {
        return planned::holds_automatic_failover(planned::Phase::Draining, facts.past_deadline).then_some(Hold::Group);
    }
    let site = job_site(phase, primary, &facts.standby)?;
    disruption::job_hold(site, &facts.job, facts.past_deadline, &facts.active)
}

fn fail(reason: String, attention: Option<&str>) -> Action {
    Action::Fail(Failure::new(reason, attention))
}

fn generation(g: Option<i64>) -> String {
    g.map_or_else(|| "unknown".to_owned(), |g| g.to_string())
}

/// The next action of an ordered update in `phase` (persisted), whose
/// primary was `primary` when it was taken up, given `facts`.
pub fn next(phase: Phase, primary: &str, facts: &Facts) -> Action {
    let standby = facts.standby.as_str();
    let after_switchover = facts.source_generation.map(|g| g + 1);
    match phase {
        Phase::Completed | Phase::Failed => Action::Idle,
        Phase::Pending | Phase::Admitting | Phase::Deferred | Phase::UpdatingStandby | Phase::VerifyingStandby
            if planned::moved(primary, &facts.active, facts.generation, facts.source_generation) =>
        {
            let touched = matches!(phase, Phase::UpdatingStandby | Phase::VerifyingStandby);
            fail(
                format!(
                    "superseded by an emergency failover: {} is the active site at topologyGeneration {} (the update was taken up at {primary}, generation {}); it was not run against the new topology: request a new ordered update if it is still wanted",
                    facts.active,
                    generation(facts.generation),
                    generation(facts.source_generation),
                ),
                touched.then_some(standby),
            )
        }
        Phase::Pending => Action::Enter(Phase::Admitting),
        Phase::Admitting | Phase::Deferred => {
            match planned::admission(phase == Phase::Deferred, facts.hold.as_ref(), &facts.admissible) {
                planned::Admission::Defer { operation_id, instance } => Action::Defer { operation_id, instance },
                planned::Admission::Revalidate => Action::Enter(Phase::Admitting),
                planned::Admission::Admit => Action::Enter(Phase::UpdatingStandby),
                planned::Admission::Refuse(why) => fail(format!("the group cannot be updated now: {why}"), None),
            }
        }
        Phase::UpdatingStandby => match disruption::job_step(standby, &facts.job, facts.past_deadline) {
            JobStep::Run => Action::RunJob(standby.to_owned()),
            JobStep::Await => Action::AwaitJob(standby.to_owned()),
            JobStep::Done => Action::Enter(Phase::VerifyingStandby),
            JobStep::Fail(why) => fail(
                format!(
                    "{why}; nothing was switched over: {primary} is the primary at topologyGeneration {}, not updated; fix {standby} and request again",
                    generation(facts.generation)
                ),
                Some(standby),
            ),
        },
        Phase::VerifyingStandby => match &facts.updated_ready {
            Ok(()) => Action::Enter(Phase::SwitchoverDraining),
            Err(why) if facts.past_deadline => fail(
                format!(
                    "the updated standby {standby} was not ready within its bound: {why}; nothing was switched over: {primary} is the primary at topologyGeneration {}",
                    generation(facts.generation)
                ),
                Some(standby),
            ),
            Err(_) => Action::AwaitReady(standby.to_owned()),
        },
        Phase::UpdatingFormerPrimary | Phase::VerifyingFormerPrimary
            if planned::moved(standby, &facts.active, facts.generation, after_switchover) =>
        {
            fail(
                format!(
                    "superseded after the switchover: {} is the active site at topologyGeneration {} (an emergency failover); {primary} was not updated against the new topology",
                    facts.active,
                    generation(facts.generation)
                ),
                Some(primary),
            )
        }
        Phase::UpdatingFormerPrimary => match disruption::job_step(primary, &facts.job, facts.past_deadline) {
            JobStep::Run => Action::RunJob(primary.to_owned()),
            JobStep::Await => Action::AwaitJob(primary.to_owned()),
            JobStep::Done => Action::Enter(Phase::VerifyingFormerPrimary),
            JobStep::Fail(why) => fail(
                format!(
                    "{why}; {standby} is the updated primary at topologyGeneration {}; {primary} stays a fenced replica until a person fixes it",
                    generation(facts.generation)
                ),
                Some(primary),
            ),
        },
        Phase::VerifyingFormerPrimary => match &facts.updated_ready {
            Ok(()) if facts.switch_back => Action::Enter(Phase::SwitchBackDraining),
            Ok(()) => Action::Enter(Phase::Completed),
            Err(why) if facts.past_deadline => fail(
                format!(
                    "the updated former primary {primary} was not ready within its bound: {why}; {standby} is the updated primary at topologyGeneration {}",
                    generation(facts.generation)
                ),
                Some(primary),
            ),
            Err(_) => Action::AwaitReady(primary.to_owned()),
        },
        Phase::SwitchoverDraining
        | Phase::SwitchoverPromoting
        | Phase::SwitchoverRepointing
        | Phase::SwitchBackDraining
        | Phase::SwitchBackPromoting
        | Phase::SwitchBackRepointing => switch(phase, primary, facts),
    }
}

/// A switchover phase: the planned failover's table, its phase changes
/// mapped onto this one's.
fn switch(phase: Phase, primary: &str, facts: &Facts) -> Action {
    let standby = facts.standby.as_str();
    let (Some((leg, sub)), Some((old, target))) = (switchover_phase(phase), switchover_sites(phase, primary, standby))
    else {
        return fail(format!("{phase} is not a switchover phase"), None);
    };
    // The decided topology this switchover may see: its old primary at the
    // generation before its decision, or (its decision) its target one
    // later. Anything else is an emergency failover's: past the drain's
    // bound it may even have moved the decision back, and deciding again
    // would be a second bump of the same switchover.
    let before = facts.source_generation.map(|g| g + i64::from(leg == Leg::SwitchBack));
    let undecided = !planned::moved(old, &facts.active, facts.generation, before);
    let decided = !planned::moved(target, &facts.active, facts.generation, before.map(|g| g + 1));
    if !(decided || (undecided && sub == planned::Phase::Draining)) {
        let lost = if facts.active == old { target } else { old };
        return fail(
            format!(
                "superseded by an emergency failover during the {}: {} is the active site at topologyGeneration {}; it was not run against the new topology",
                if leg == Leg::Switchover { "switchover" } else { "switch-back" },
                facts.active,
                generation(facts.generation)
            ),
            Some(lost),
        );
    }
    match disruption::switchover(
        sub,
        old,
        target,
        &facts.active,
        facts.generation,
        facts.past_deadline,
        &facts.switchover,
    ) {
        Switch::Site(action) => Action::Switchover(action),
        Switch::Enter(next) => Action::Enter(match (leg, next) {
            (Leg::Switchover, planned::Phase::Promoting) => Phase::SwitchoverPromoting,
            (Leg::Switchover, planned::Phase::Repointing) => Phase::SwitchoverRepointing,
            (Leg::Switchover, _) => Phase::UpdatingFormerPrimary,
            (Leg::SwitchBack, planned::Phase::Promoting) => Phase::SwitchBackPromoting,
            (Leg::SwitchBack, planned::Phase::Repointing) => Phase::SwitchBackRepointing,
            (Leg::SwitchBack, _) => Phase::Completed,
        }),
        Switch::Fail { reason, stranded } => {
            let attention = match (leg, sub) {
                // Left read-only, unseen: whoever it was, it needs a person.
                _ if stranded => Some(old),
                // After a decision, superseded: the target lost its role.
                (_, planned::Phase::Promoting | planned::Phase::Repointing) => Some(target),
                // Before the first decision: the topology is as it was.
                (Leg::Switchover, _) => None,
                // The switch-back did not happen: the first primary is not back.
                (Leg::SwitchBack, _) => Some(primary),
            };
            let what = match leg {
                Leg::Switchover => "the switchover",
                Leg::SwitchBack => "the switch-back (both sites are updated)",
            };
            fail(format!("{what} failed: {reason}"), attention)
        }
    }
}

#[cfg(test)]
mod tests;
