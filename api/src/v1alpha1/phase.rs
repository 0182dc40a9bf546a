//! The phases of a planned failover, as
//! `status.plannedFailover.phase` spells them and as the deploy API's
//! `GET /deploy/v1/groups/{group}` shows an operation in flight (`Pending →
//! Admitting → (Deferred ↔ Admitting) → Draining → Promoting → Repointing →
//! Completed | Failed`; docs/failover.md, "Planned failover").
//!
//! The status field stays a string (a value this enum does not know, written
//! by hand, is reported and never acted on by the operator); this is the one
//! vocabulary the engine, the deploy API and clients share.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A phase of a planned failover.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum PlannedFailoverPhase {
    /// Requested, not yet looked at.
    Pending,
    /// Checking holds and the target.
    Admitting,
    /// A live failover-hold defers it (`admission.deferReason: DeploymentHold`).
    Deferred,
    /// Fencing the old primary and letting the target catch up.
    Draining,
    /// Decided; the target is being made the writable primary.
    Promoting,
    /// The old primary is being made a replica of the new one.
    Repointing,
    /// Done.
    Completed,
    /// Ended without a decision; or, after one, superseded by an emergency
    /// failover that moved the decision on.
    Failed,
}

impl PlannedFailoverPhase {
    /// Every phase, in the order a request passes them.
    pub const ALL: [PlannedFailoverPhase; 8] = [
        PlannedFailoverPhase::Pending,
        PlannedFailoverPhase::Admitting,
        PlannedFailoverPhase::Deferred,
        PlannedFailoverPhase::Draining,
        PlannedFailoverPhase::Promoting,
        PlannedFailoverPhase::Repointing,
        PlannedFailoverPhase::Completed,
        PlannedFailoverPhase::Failed,
    ];

    /// The status spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            PlannedFailoverPhase::Pending => "Pending",
            PlannedFailoverPhase::Admitting => "Admitting",
            PlannedFailoverPhase::Deferred => "Deferred",
            PlannedFailoverPhase::Draining => "Draining",
            PlannedFailoverPhase::Promoting => "Promoting",
            PlannedFailoverPhase::Repointing => "Repointing",
            PlannedFailoverPhase::Completed => "Completed",
            PlannedFailoverPhase::Failed => "Failed",
        }
    }

    /// Parses the status spelling (`None` for anything else, the empty string included).
    pub fn parse(s: &str) -> Option<PlannedFailoverPhase> {
        PlannedFailoverPhase::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// Whether the request is over.
    pub const fn is_final(self) -> bool {
        matches!(self, PlannedFailoverPhase::Completed | PlannedFailoverPhase::Failed)
    }
}

impl std::fmt::Display for PlannedFailoverPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_round_trip_through_status_and_json() {
        for p in PlannedFailoverPhase::ALL {
            assert_eq!(PlannedFailoverPhase::parse(p.as_str()), Some(p));
            assert_eq!(serde_json::to_value(p).unwrap(), p.as_str());
        }
        assert_eq!(PlannedFailoverPhase::parse(""), None);
        assert_eq!(PlannedFailoverPhase::parse("Bogus"), None);
        let finals: Vec<_> = PlannedFailoverPhase::ALL.into_iter().filter(|p| p.is_final()).collect();
        assert_eq!(finals, [PlannedFailoverPhase::Completed, PlannedFailoverPhase::Failed]);
    }
}
