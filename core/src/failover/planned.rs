//! The planned failover as a pure state machine: given the
//! request's persisted phase and what the engine observes, the one next
//! action (docs/failover.md, "Planned failover", "What a hold holds").
//!
//! Phases: `Pending → Admitting → (Deferred ↔ Admitting) → Draining →
//! Promoting → Repointing → Completed | Failed`.
//!
//! Order, so that no lease holder and no client can write to two primaries:
//! admission (a live failover-hold defers; the target must be ready) →
//! fence the old primary → bounded catch-up of the target → the decision
//! (record, then status: active = target, generation + 1) → promote the
//! target → repoint the old primary → done. A fence or catch-up that cannot
//! finish in its bound unfences the old primary and fails, with no decision.
//!
//! Crash safety: the engine persists only the phase (in status) and the
//! decision (record + status). Every action is chosen from them and fresh
//! observations, so a new leader resumes where the old one stopped; the
//! decision is taken only while the decided active site is not yet the
//! target, so a request never bumps the generation twice.
//!
//! What the request holds (it never delays an emergency failover):
//! before the fence (`Pending`, `Admitting`, `Deferred`) it
//! holds nothing, whatever the deploy leases say. An emergency failover that
//! moves the decision meanwhile supersedes it: it ends `Failed`, saying so,
//! and never runs against the new topology. Only from `Draining` on, when
//! the old primary may be fenced, does it hold automatic failover
//! ([`holds_automatic_failover`]), and only until its own bound (fence +
//! catch-up timeouts) has passed.
//!
//! Invariants (property-tested below on a simulated pair of sites, with
//! failures and crashes injected at every step): at most one writable site;
//! the generation moves by exactly one for a completed request and never for
//! a failed one; a hold defers admission, never a later phase; a request
//! superseded before its fence never acts on a site.
//!
//! This module is the engine's decision table, with the rules it decides
//! from: the target's readiness ([`target_readiness`]) and the drain's
//! bounds ([`drain`]). The engine that runs the actions against the sites
//! (the operator's `failover::planned`) is built on it.

/// A phase of a planned failover, as `status.plannedFailover.phase` spells
/// it: the contract's type (the deploy API shows it in `operations[]`).
pub use bloodraven_api::v1alpha1::PlannedFailoverPhase as Phase;

/// What the engine observes for one step of a request to move the primary to `target`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    /// The decided active site (record and status agree).
    pub active: String,
    /// The decided topology generation now (`None`: not readable).
    pub generation: Option<i64>,
    /// The generation the request was taken up at (`None`: a status
    /// written before the field existed).
    pub source_generation: Option<i64>,
    /// The target of the request.
    pub target: String,
    /// A live failover-hold: `(operationId, instance)`.
    pub hold: Option<(String, String)>,
    /// Whether the target is ready: reachable, replicating from the active
    /// site with both threads running, lag ≤ `maxLagSeconds`, no errant
    /// GTIDs; else what to fix.
    pub target_ready: Result<(), String>,
    /// Whether the old primary (the active site before the decision) is
    /// fenced (read-only, sessions ended): `None` while it cannot be
    /// observed (a blip, a refused login, a mistyped endpoint). Unknown is
    /// never taken for "writable": it may have been fenced a moment ago.
    pub old_fenced: Option<bool>,
    /// Whether the drain ran past its bound (the `Draining` transition plus
    /// the fence and catch-up bounds): an old primary that cannot be made
    /// writable again by then is left as it is, and the request fails so
    /// that emergency failover is no longer held.
    pub past_deadline: bool,
    /// The outcome of the last fence attempt in this phase, if any failed: why.
    pub fence_failed: Option<String>,
    /// The catch-up wait: `None` not done yet, `Some(true)` caught up,
    /// `Some(false)` it ran out of its bound.
    pub caught_up: Option<bool>,
    /// Whether the target is the writable primary with replication stopped.
    pub target_promoted: bool,
    /// Whether the old primary replicates from the target.
    pub old_repointed: bool,
}

/// The next thing to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Persist the phase (and, for `Deferred`, the blocking hold).
    Enter(Phase),
    /// Defer: a hold blocks; retry when it ends (an `Enter(Deferred)` when not there yet).
    Defer {
        /// The blocking operationId.
        operation_id: String,
        /// Its instance.
        instance: String,
    },
    /// Make `site` read-only and end its client sessions after a bounded grace.
    Fence(String),
    /// Wait, bounded, for `site` to apply everything of the fenced primary.
    CatchUp(String),
    /// Make `site` writable again (a failed drain).
    Unfence(String),
    /// The authoritative change: record, then status (`activeSite = site`,
    /// generation + 1); revokes every deploy lease.
    Decide(String),
    /// Stop replication on `site` and make it writable.
    Promote(String),
    /// Make `site` replicate from `source` with GTID auto-position.
    Repoint {
        /// The old primary.
        site: String,
        /// The new primary.
        source: String,
    },
    /// End the request as failed, with a reason that says what to fix.
    Fail(String),
    /// Nothing to do (a final phase).
    Idle,
}

/// Whether the decision moved since a request from `old` was taken up: the
/// active site is another, or the generation is. Before the request's own
/// fence only an emergency failover can move it (a planned operation runs
/// one at a time, and this one has not decided), so a request that sees it
/// was superseded.
fn superseded(old: &str, facts: &Facts) -> bool {
    moved(old, &facts.active, facts.generation, facts.source_generation)
}

/// Whether the decision moved away from `expected` at generation `since`:
/// the active site is another, or the generation is (an unreadable
/// generation, or a request taken up before it was recorded, leaves the
/// site to decide). The supersession test of every planned disruption.
pub(crate) fn moved(expected: &str, active: &str, generation: Option<i64>, since: Option<i64>) -> bool {
    let generation_moved = matches!((generation, since), (Some(now), Some(then)) if now != then);
    active != expected || generation_moved
}

/// What admission decides: the rule every planned disruption shares (the
/// planned failover, the ordered update, restore-in-place: each waits behind
/// a live failover-hold in the same way; docs/failover.md, "What a hold
/// holds").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// A live failover-hold blocks: defer, and retry when it ends.
    Defer {
        /// The blocking operationId.
        operation_id: String,
        /// Its instance.
        instance: String,
    },
    /// Deferred, and the hold ended: admit again from the start.
    Revalidate,
    /// No hold, and the request's own check passed: go on.
    Admit,
    /// No hold, and the request's own check failed: why.
    Refuse(String),
}

/// Admission of a request that is `deferred` (else admitting): a live
/// `hold` defers whatever else holds; a deferred request revalidates once
/// the hold is gone, never goes straight on; then `ready`, the request's own
/// check, admits or refuses.
pub fn admission(deferred: bool, hold: Option<&(String, String)>, ready: &Result<(), String>) -> Admission {
    if let Some((operation_id, instance)) = hold {
        return Admission::Defer { operation_id: operation_id.clone(), instance: instance.clone() };
    }
    if deferred {
        return Admission::Revalidate;
    }
    match ready {
        Ok(()) => Admission::Admit,
        Err(why) => Admission::Refuse(why.clone()),
    }
}

/// Whether a request in `phase` holds the operator's automatic failover
/// (`AutomaticFailoverHeld`): only in `Draining`, when the old primary may
/// be fenced and a promotion of the target may be moments away, and only
/// until the drain's own bound (`fenceTimeoutSeconds` +
/// `catchUpTimeoutSeconds` from entering `Draining`) has passed. Never
/// before the fence, never after the decision, and never because of a
/// deploy lease: a lease is not an input.
pub fn holds_automatic_failover(phase: Phase, past_deadline: bool) -> bool {
    phase == Phase::Draining && !past_deadline
}

/// The next action of a request in `phase` (persisted) with old primary
/// `old` (the active site when the request was admitted), given `facts`.
pub fn next(phase: Phase, old: &str, facts: &Facts) -> Action {
    let decided = facts.active == facts.target;
    match phase {
        Phase::Completed | Phase::Failed => Action::Idle,
        Phase::Pending | Phase::Admitting | Phase::Deferred if superseded(old, facts) => Action::Fail(format!(
            "superseded by an emergency failover: {} is the active site at topologyGeneration {} (the request was taken up at {old}, generation {}); it was not run against the new topology: request a new planned failover if it is still wanted",
            facts.active,
            facts.generation.map_or_else(|| "unknown".to_owned(), |g| g.to_string()),
            facts.source_generation.map_or_else(|| "unknown".to_owned(), |g| g.to_string()),
        )),
        Phase::Pending => Action::Enter(Phase::Admitting),
        Phase::Admitting | Phase::Deferred => {
            match admission(phase == Phase::Deferred, facts.hold.as_ref(), &facts.target_ready) {
                Admission::Defer { operation_id, instance } => Action::Defer { operation_id, instance },
                Admission::Revalidate => Action::Enter(Phase::Admitting),
                Admission::Admit => Action::Enter(Phase::Draining),
                Admission::Refuse(why) => Action::Fail(format!("target {} is not ready: {why}", facts.target)),
            }
        }
        Phase::Draining => {
            if decided {
                return Action::Enter(Phase::Promoting);
            }
            let stranded = || {
                Action::Fail(format!(
                    "the drain ran past its bound and {old} could not be made writable again (it cannot be reached or refuses the operator): it may be left read-only; see the NoPrimary condition and make it writable by hand once it answers"
                ))
            };
            if let Some(why) = &facts.fence_failed {
                return match facts.old_fenced {
                    Some(false) => Action::Fail(format!("could not fence {old}: {why}")),
                    // Unseen past the bound: it may stay read-only.
                    None if facts.past_deadline => stranded(),
                    // Seen fenced (whatever the bound says), or unseen
                    // within it: writable again first.
                    Some(true) | None => Action::Unfence(old.to_owned()),
                };
            }
            match (facts.old_fenced, facts.caught_up) {
                // Unfenced after a failed catch-up: the request ends.
                (Some(false), Some(false)) => Action::Fail(format!(
                    "{} did not catch up with {old} within the bound; {old} is writable again",
                    facts.target
                )),
                (None, _) if facts.past_deadline => stranded(),
                // Fenced, or perhaps: writable again after a failed catch-up.
                (Some(true) | None, Some(false)) => Action::Unfence(old.to_owned()),
                // Not fenced, or cannot tell: fence (again); a failure leads to the unfence above.
                (Some(false) | None, _) => Action::Fence(old.to_owned()),
                (Some(true), None) => Action::CatchUp(facts.target.clone()),
                (Some(true), Some(true)) => Action::Decide(facts.target.clone()),
            }
        }
        // Decided, and since superseded: the new primary failed and an
        // emergency failover moved the decision on. Promoting the old target
        // now would make two primaries.
        Phase::Promoting | Phase::Repointing if !decided => Action::Fail(format!(
            "the decision for {} was superseded: {} is the active site now (an emergency failover after the decision)",
            facts.target, facts.active
        )),
        Phase::Promoting => {
            if facts.target_promoted {
                Action::Enter(Phase::Repointing)
            } else {
                Action::Promote(facts.target.clone())
            }
        }
        Phase::Repointing => {
            if facts.old_repointed {
                Action::Enter(Phase::Completed)
            } else {
                Action::Repoint { site: old.to_owned(), source: facts.target.clone() }
            }
        }
    }
}

mod admission;
pub mod drain;
#[cfg(test)]
mod tests;

pub use self::admission::{errant, target_readiness};
