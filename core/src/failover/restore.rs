//! Restore-in-place as a pure state machine: given the request's persisted
//! phase and what the engine observes, the one next action. A request
//! names a site (default: the standby) and a user-supplied Job that
//! restores that site's server from the user's backup; the restored site
//! then becomes the primary, and the old primary's data no longer counts.
//!
//! Phases: `Pending → Admitting → (Deferred ↔ Admitting) → Restoring →
//! Verifying → Fencing → Promoting → Repointing → AwaitingReclone →
//! Completed | Failed`.
//!
//! Order: admission exactly as a planned failover's ([`planned::admission`]:
//! a live failover-hold defers, `Deferred` revalidates when it ends; then
//! no other operation may be in flight, and the site named must not be the
//! active one: restoring the primary under its own clients is not
//! restore-in-place, switch over first) → the Job restores the site,
//! nothing fenced meanwhile (the primary serves on) → the restored site
//! must answer, must not replicate, and must be the server expected
//! (`server_id`, and `server_uuid` where the flavour has one, as the
//! operator knows the site) → fence the old primary (read-only, sessions
//! ended) → the decision, "the restore-in-place promotion" (record, then
//! status: active = the restored site, generation + 1; revokes every
//! deploy lease) → promote the restored site → point the `-primary`
//! Services at it → wait for a person to mark the old primary re-cloned.
//!
//! The fence, the decision and the promotion are the planned failover's
//! (`Fencing` is its `Draining` with nothing to catch up: the restored
//! data is the backup's, not the old primary's, and it is promoted as it
//! is), decided by [`planned::next`] itself.
//!
//! The old primary after the decision ([`awaiting_reclone`]): it stays
//! fenced (re-fenced if it is seen writable), out of replication, and is
//! never promoted, until a person marks its re-clone done
//! ([`Facts::reclone_done`]); only then does the request complete.
//!
//! Failures: a Job that fails or runs past its deadline, a restored site
//! that does not answer within its bound, replicates, or is another
//! server, or a fence that cannot finish in its bound ends the request
//! `Failed` with no generation change: the old primary serves on (made
//! writable again if it was fenced) and the restored site, named as the
//! one that needs a person, holds whatever the Job left.
//!
//! What the request holds of automatic failover
//! ([`holds_automatic_failover`]): while the Job runs, the promotion of
//! the site being restored ([`Hold::Promotion`]; never the primary, at
//! most the Job's deadline); while the old primary is fenced before the
//! decision, the group's ([`Hold::Group`], within the fence bound, as a
//! planned failover's drain); nothing otherwise, and never because of a
//! deploy lease.
//!
//! Crash safety: the engine persists only the phase and the decision;
//! every action is chosen from them and fresh observations (the Job is
//! named for the request and the site), so a new leader resumes exactly
//! once; the decision is taken only while the decided active site is not
//! yet the restored one, so a request never bumps the generation twice.

use super::disruption::{self, Failure, Hold, JobState, JobStep, Switch, SwitchoverFacts};
use super::planned;

/// A phase of a restore-in-place, as status spells it: the contract's type.
pub use bloodraven_api::v1alpha1::RestorePhase as Phase;

/// Which server a site is, as the operator knows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// `@@server_id`.
    pub server_id: u32,
    /// `@@server_uuid` (MySQL); empty where the flavour has none (MariaDB).
    pub server_uuid: String,
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "server_id {}", self.server_id)?;
        if !self.server_uuid.is_empty() {
            write!(f, ", server_uuid {}", self.server_uuid)?;
        }
        Ok(())
    }
}

/// What a probe of the restored site shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restored {
    /// Whether replication is configured on it (any channel, running or not).
    pub replicating: bool,
    /// Which server answered.
    pub identity: Identity,
}

/// What the engine observes for one step of a request to restore `site`
/// of a group whose primary, when the request was taken up, was `old` (the
/// argument of [`next`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    /// The decided active site (record and status agree).
    pub active: String,
    /// The decided topology generation now (`None`: not readable).
    pub generation: Option<i64>,
    /// The generation the request was taken up at (`None`: not recorded).
    pub source_generation: Option<i64>,
    /// The site to restore.
    pub site: String,
    /// A live failover-hold: `(operationId, instance)`.
    pub hold: Option<(String, String)>,
    /// Admission's own check: no other operation in flight, the site is in
    /// `spec.sites`; else why not.
    pub admissible: Result<(), String>,
    /// In `Restoring`: the restore Job.
    pub job: JobState,
    /// Whether the current phase ran past its bound, counted from entering
    /// it: the Job's deadline in `Restoring`, the answer bound in
    /// `Verifying`, the fence bound in `Fencing`.
    pub past_deadline: bool,
    /// In `Verifying`: the restored site (`None`: it does not answer).
    pub restored: Option<Restored>,
    /// The server the site is expected to be.
    pub expected: Identity,
    /// From `Fencing` on: the old primary and the restored site
    /// ([`SwitchoverFacts::caught_up`] is not read).
    pub switchover: SwitchoverFacts,
    /// The site the `-primary` Services point at (`None`: not readable).
    pub services_at: Option<String>,
    /// A person marked the old primary's re-clone done.
    pub reclone_done: bool,
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
    /// Create the restore Job of `site` (named for the request and the site).
    RunJob(String),
    /// Wait, bounded, for the Job of `site` to end.
    AwaitJob(String),
    /// Wait, bounded, for the restored `site` to answer.
    AwaitRestored(String),
    /// A step of the fence, decision or promotion, as the planned
    /// failover's table gives it: `Fence`, `Unfence`, `Decide` or `Promote`.
    Switchover(planned::Action),
    /// Point the `-primary` Services at `site`.
    RepointServices(String),
    /// Wait for a person to mark the re-clone of `site` done.
    AwaitReclone(String),
    /// End the request as failed.
    Fail(Failure),
    /// Nothing to do (a final phase).
    Idle,
}

/// What a request in `phase` holds of automatic failover (see the module
/// header).
pub fn holds_automatic_failover(phase: Phase, facts: &Facts) -> Option<Hold> {
    match phase {
        Phase::Restoring => disruption::job_hold(&facts.site, &facts.job, facts.past_deadline, &facts.active),
        Phase::Fencing => {
            planned::holds_automatic_failover(planned::Phase::Draining, facts.past_deadline).then_some(Hold::Group)
        }
        _ => None,
    }
}

/// The old primary a request in `phase` has decided away from, whose data
/// no longer counts: it stays fenced and out of replication, is never
/// promoted, and awaits a person's re-clone. `None` before the decision
/// and once the request is over.
pub fn awaiting_reclone(phase: Phase, old: &str) -> Option<&str> {
    matches!(phase, Phase::Promoting | Phase::Repointing | Phase::AwaitingReclone).then_some(old)
}

fn fail(reason: String, attention: Option<&str>) -> Action {
    Action::Fail(Failure::new(reason, attention))
}

fn generation(g: Option<i64>) -> String {
    g.map_or_else(|| "unknown".to_owned(), |g| g.to_string())
}

/// The next action of a restore-in-place in `phase` (persisted), whose
/// primary was `old` when it was taken up, given `facts`.
#[allow(clippy::too_many_lines)] // the decision table: one arm per phase, each short
pub fn next(phase: Phase, old: &str, facts: &Facts) -> Action {
    let site = facts.site.as_str();
    // Before the decision nothing moved: the old primary serves on.
    let undecided = |why: String| {
        fail(
            format!(
                "{why}; nothing was decided: {old} is the primary at topologyGeneration {}; {site} holds whatever the restore left: restore it again or re-clone it from {old}",
                generation(facts.generation)
            ),
            Some(site),
        )
    };
    match phase {
        Phase::Completed | Phase::Failed => Action::Idle,
        Phase::Pending | Phase::Admitting | Phase::Deferred | Phase::Restoring | Phase::Verifying
            if planned::moved(old, &facts.active, facts.generation, facts.source_generation) =>
        {
            let touched = matches!(phase, Phase::Restoring | Phase::Verifying);
            fail(
                format!(
                    "superseded by an emergency failover: {} is the active site at topologyGeneration {} (the restore was taken up at {old}, generation {}); it was not run against the new topology: request a new restore if it is still wanted",
                    facts.active,
                    generation(facts.generation),
                    generation(facts.source_generation),
                ),
                touched.then_some(site),
            )
        }
        Phase::Pending => Action::Enter(Phase::Admitting),
        Phase::Admitting | Phase::Deferred => {
            let ready = if site == facts.active {
                Err(format!(
                    "{site} is the active site: switch over first (a planned failover), then restore it as the standby"
                ))
            } else {
                facts.admissible.clone()
            };
            match planned::admission(phase == Phase::Deferred, facts.hold.as_ref(), &ready) {
                planned::Admission::Defer { operation_id, instance } => Action::Defer { operation_id, instance },
                planned::Admission::Revalidate => Action::Enter(Phase::Admitting),
                planned::Admission::Admit => Action::Enter(Phase::Restoring),
                planned::Admission::Refuse(why) => fail(format!("{site} cannot be restored now: {why}"), None),
            }
        }
        Phase::Restoring => match disruption::job_step(site, &facts.job, facts.past_deadline) {
            JobStep::Run => Action::RunJob(site.to_owned()),
            JobStep::Await => Action::AwaitJob(site.to_owned()),
            JobStep::Done => Action::Enter(Phase::Verifying),
            JobStep::Fail(why) => undecided(why),
        },
        Phase::Verifying => match &facts.restored {
            None if facts.past_deadline => undecided(format!("the restored {site} did not answer within its bound")),
            None => Action::AwaitRestored(site.to_owned()),
            Some(r) if r.replicating => undecided(format!(
                "the restored {site} replicates: a restored server must stand alone (reset its replication) before it is promoted"
            )),
            Some(r) if !same_server(&facts.expected, &r.identity) => undecided(format!(
                "the restored {site} is another server ({}; expected {}): check the Job's target and spec.sites",
                r.identity, facts.expected
            )),
            Some(_) => Action::Enter(Phase::Fencing),
        },
        // Neither before its decision nor its decision: an emergency
        // failover's (past the fence's bound it may even have moved the
        // decision back; deciding again would be a second bump).
        Phase::Fencing
            if planned::moved(old, &facts.active, facts.generation, facts.source_generation)
                && planned::moved(site, &facts.active, facts.generation, facts.source_generation.map(|g| g + 1)) =>
        {
            fail(
                format!(
                    "superseded by an emergency failover during the fence: {} is the active site at topologyGeneration {}; {site} was not promoted",
                    facts.active,
                    generation(facts.generation)
                ),
                Some(site),
            )
        }
        Phase::Fencing => {
            // Nothing to catch up: the restored data is the backup's.
            let sw = SwitchoverFacts { caught_up: Some(true), ..facts.switchover.clone() };
            match disruption::switchover(
                planned::Phase::Draining,
                old,
                site,
                &facts.active,
                facts.generation,
                facts.past_deadline,
                &sw,
            ) {
                Switch::Site(action) => Action::Switchover(action),
                Switch::Enter(_) => Action::Enter(Phase::Promoting),
                Switch::Fail { reason, stranded } => {
                    if stranded {
                        fail(format!("the fence failed: {reason}"), Some(old))
                    } else {
                        undecided(format!("the fence failed: {reason}"))
                    }
                }
            }
        }
        Phase::Promoting | Phase::Repointing | Phase::AwaitingReclone => after_decision(phase, old, facts),
    }
}

/// The phases after the decision: promote, repoint the Services, and wait
/// for the re-clone, with the old primary kept fenced throughout.
fn after_decision(phase: Phase, old: &str, facts: &Facts) -> Action {
    let site = facts.site.as_str();
    match phase {
        _ if planned::moved(site, &facts.active, facts.generation, facts.source_generation.map(|g| g + 1)) => fail(
            format!(
                "the restore-in-place promotion of {site} was superseded: {} is the active site at topologyGeneration {} (an emergency failover after the decision)",
                facts.active,
                generation(facts.generation)
            ),
            Some(site),
        ),
        // Its data no longer counts: never writable again.
        _ if facts.switchover.old_fenced == Some(false) => Action::Switchover(planned::Action::Fence(old.to_owned())),
        Phase::Promoting => {
            match disruption::switchover(
                planned::Phase::Promoting,
                old,
                site,
                &facts.active,
                facts.generation,
                facts.past_deadline,
                &facts.switchover,
            ) {
                Switch::Site(action) => Action::Switchover(action),
                Switch::Enter(_) => Action::Enter(Phase::Repointing),
                Switch::Fail { reason, .. } => fail(reason, Some(site)),
            }
        }
        Phase::Repointing => {
            if facts.services_at.as_deref() == Some(site) {
                Action::Enter(Phase::AwaitingReclone)
            } else {
                Action::RepointServices(site.to_owned())
            }
        }
        Phase::AwaitingReclone => {
            if facts.reclone_done {
                Action::Enter(Phase::Completed)
            } else {
                Action::AwaitReclone(old.to_owned())
            }
        }
        other => fail(format!("{other} is not a phase after the decision"), None),
    }
}

/// Whether `seen` is the server `expected`: the same `server_id`, and the
/// same `server_uuid` where one is known (case aside).
fn same_server(expected: &Identity, seen: &Identity) -> bool {
    expected.server_id == seen.server_id
        && (expected.server_uuid.is_empty() || expected.server_uuid.eq_ignore_ascii_case(&seen.server_uuid))
}

#[cfg(test)]
mod tests;
