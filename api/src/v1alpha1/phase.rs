//! The phases of the planned disruptions: a planned failover, as
//! `status.plannedFailover.phase` spells them and as the deploy API's
//! `GET /deploy/v1/groups/{group}` shows an operation in flight (`Pending →
//! Admitting → (Deferred ↔ Admitting) → Draining → Promoting → Repointing →
//! Completed | Failed`; docs/failover.md, "Planned failover"); an ordered
//! update ([`OrderedUpdatePhase`]); a restore-in-place ([`RestorePhase`]).
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

/// A phase of an ordered update: each site's own update, run by a user-supplied
/// Job, standby first, with a switchover between (`Pending → Admitting →
/// (Deferred ↔ Admitting) → UpdatingStandby → VerifyingStandby →
/// Switchover{Draining, Promoting, Repointing} → UpdatingFormerPrimary →
/// VerifyingFormerPrimary → [SwitchBack{Draining, Promoting, Repointing}] →
/// Completed | Failed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum OrderedUpdatePhase {
    /// Requested, not yet looked at.
    Pending,
    /// Checking holds, the group's stability and that no other operation runs.
    Admitting,
    /// A live failover-hold defers it (`admission.deferReason: DeploymentHold`).
    Deferred,
    /// The standby's Job runs.
    UpdatingStandby,
    /// Waiting, bounded, for the updated standby to be healthy, replicating and caught up.
    VerifyingStandby,
    /// The switchover: fencing the primary and letting the updated standby catch up.
    SwitchoverDraining,
    /// The switchover is decided; the updated standby is being made the writable primary.
    SwitchoverPromoting,
    /// The former primary is being made a replica of the new one.
    SwitchoverRepointing,
    /// The former primary's Job runs.
    UpdatingFormerPrimary,
    /// Waiting, bounded, for the updated former primary to be healthy and replicating.
    VerifyingFormerPrimary,
    /// The switch-back (when requested): fencing the new primary, letting the former one catch up.
    SwitchBackDraining,
    /// The switch-back is decided; the former primary is being made the writable primary again.
    SwitchBackPromoting,
    /// The standby is being made a replica again.
    SwitchBackRepointing,
    /// Done.
    Completed,
    /// Ended: before the switchover with the topology as it was; after it with the topology
    /// the last decision made, naming the site that needs a person.
    Failed,
}

impl OrderedUpdatePhase {
    /// Every phase, in the order a request passes them.
    pub const ALL: [OrderedUpdatePhase; 15] = [
        OrderedUpdatePhase::Pending,
        OrderedUpdatePhase::Admitting,
        OrderedUpdatePhase::Deferred,
        OrderedUpdatePhase::UpdatingStandby,
        OrderedUpdatePhase::VerifyingStandby,
        OrderedUpdatePhase::SwitchoverDraining,
        OrderedUpdatePhase::SwitchoverPromoting,
        OrderedUpdatePhase::SwitchoverRepointing,
        OrderedUpdatePhase::UpdatingFormerPrimary,
        OrderedUpdatePhase::VerifyingFormerPrimary,
        OrderedUpdatePhase::SwitchBackDraining,
        OrderedUpdatePhase::SwitchBackPromoting,
        OrderedUpdatePhase::SwitchBackRepointing,
        OrderedUpdatePhase::Completed,
        OrderedUpdatePhase::Failed,
    ];

    /// The status spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            OrderedUpdatePhase::Pending => "Pending",
            OrderedUpdatePhase::Admitting => "Admitting",
            OrderedUpdatePhase::Deferred => "Deferred",
            OrderedUpdatePhase::UpdatingStandby => "UpdatingStandby",
            OrderedUpdatePhase::VerifyingStandby => "VerifyingStandby",
            OrderedUpdatePhase::SwitchoverDraining => "SwitchoverDraining",
            OrderedUpdatePhase::SwitchoverPromoting => "SwitchoverPromoting",
            OrderedUpdatePhase::SwitchoverRepointing => "SwitchoverRepointing",
            OrderedUpdatePhase::UpdatingFormerPrimary => "UpdatingFormerPrimary",
            OrderedUpdatePhase::VerifyingFormerPrimary => "VerifyingFormerPrimary",
            OrderedUpdatePhase::SwitchBackDraining => "SwitchBackDraining",
            OrderedUpdatePhase::SwitchBackPromoting => "SwitchBackPromoting",
            OrderedUpdatePhase::SwitchBackRepointing => "SwitchBackRepointing",
            OrderedUpdatePhase::Completed => "Completed",
            OrderedUpdatePhase::Failed => "Failed",
        }
    }

    /// Parses the status spelling (`None` for anything else, the empty string included).
    pub fn parse(s: &str) -> Option<OrderedUpdatePhase> {
        OrderedUpdatePhase::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// Whether the request is over.
    pub const fn is_final(self) -> bool {
        matches!(self, OrderedUpdatePhase::Completed | OrderedUpdatePhase::Failed)
    }
}

impl std::fmt::Display for OrderedUpdatePhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A phase of a restore-in-place: a user-supplied Job restores one site's server
/// from a backup, and that site is promoted (`Pending → Admitting →
/// (Deferred ↔ Admitting) → Restoring → Verifying → Fencing → Promoting →
/// Repointing → AwaitingReclone → Completed | Failed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum RestorePhase {
    /// Requested, not yet looked at.
    Pending,
    /// Checking holds and the site to restore.
    Admitting,
    /// A live failover-hold defers it (`admission.deferReason: DeploymentHold`).
    Deferred,
    /// The restore Job runs; nothing is fenced.
    Restoring,
    /// Checking that the restored site answers, does not replicate, and is the server expected.
    Verifying,
    /// Fencing the old primary (read-only, sessions ended).
    Fencing,
    /// Decided; the restored site is being made the writable primary.
    Promoting,
    /// The `-primary` Services are being pointed at the restored site.
    Repointing,
    /// The old primary stays fenced and out of replication until a person marks its re-clone done.
    AwaitingReclone,
    /// Done.
    Completed,
    /// Ended: before the decision with the topology as it was; after it, superseded.
    Failed,
}

impl RestorePhase {
    /// Every phase, in the order a request passes them.
    pub const ALL: [RestorePhase; 11] = [
        RestorePhase::Pending,
        RestorePhase::Admitting,
        RestorePhase::Deferred,
        RestorePhase::Restoring,
        RestorePhase::Verifying,
        RestorePhase::Fencing,
        RestorePhase::Promoting,
        RestorePhase::Repointing,
        RestorePhase::AwaitingReclone,
        RestorePhase::Completed,
        RestorePhase::Failed,
    ];

    /// The status spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            RestorePhase::Pending => "Pending",
            RestorePhase::Admitting => "Admitting",
            RestorePhase::Deferred => "Deferred",
            RestorePhase::Restoring => "Restoring",
            RestorePhase::Verifying => "Verifying",
            RestorePhase::Fencing => "Fencing",
            RestorePhase::Promoting => "Promoting",
            RestorePhase::Repointing => "Repointing",
            RestorePhase::AwaitingReclone => "AwaitingReclone",
            RestorePhase::Completed => "Completed",
            RestorePhase::Failed => "Failed",
        }
    }

    /// Parses the status spelling (`None` for anything else, the empty string included).
    pub fn parse(s: &str) -> Option<RestorePhase> {
        RestorePhase::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// Whether the request is over.
    pub const fn is_final(self) -> bool {
        matches!(self, RestorePhase::Completed | RestorePhase::Failed)
    }
}

impl std::fmt::Display for RestorePhase {
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

    #[test]
    fn ordered_update_and_restore_phases_round_trip_through_status_and_json() {
        for p in OrderedUpdatePhase::ALL {
            assert_eq!(OrderedUpdatePhase::parse(p.as_str()), Some(p));
            assert_eq!(serde_json::to_value(p).unwrap(), p.as_str());
        }
        for p in RestorePhase::ALL {
            assert_eq!(RestorePhase::parse(p.as_str()), Some(p));
            assert_eq!(serde_json::to_value(p).unwrap(), p.as_str());
        }
        assert_eq!(OrderedUpdatePhase::parse("Draining"), None, "the planned failover's spelling is not this one's");
        assert_eq!(RestorePhase::parse(""), None);
        let finals: Vec<_> = OrderedUpdatePhase::ALL.into_iter().filter(|p| p.is_final()).collect();
        assert_eq!(finals, [OrderedUpdatePhase::Completed, OrderedUpdatePhase::Failed]);
        let finals: Vec<_> = RestorePhase::ALL.into_iter().filter(|p| p.is_final()).collect();
        assert_eq!(finals, [RestorePhase::Completed, RestorePhase::Failed]);
    }
}
