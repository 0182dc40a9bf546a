//! The operator's own state in its namespace: deploy Leases (slots,
//! tombstones, verification records), decision-record ConfigMaps and their
//! digest key Secret are written and deleted only by the operator's
//! ServiceAccount; the leader-election Lease is deleted by nobody. Hand edits
//! of these are ways of lying to the fence.
//!
//! Two users are let through besides the operator, because Kubernetes
//! itself deletes objects for them and a refusal would wedge it: the
//! namespace controller (deleting the operator's namespace) and the garbage
//! collector (`--trusted-deleter`, deletes only).

use bloodraven_api::names::state;

/// One kind of operator state object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A deploy Lease: slot, tombstone or verification record.
    DeployLease,
    /// A decision record (ConfigMap).
    DecisionRecord,
    /// The decision-record digest key (Secret).
    RecordKey,
    /// The operator's leader-election Lease.
    LeaderLease,
}

/// The kind of the object `name` of `resource` (`leases`, `configmaps`,
/// `secrets`) in the operator's namespace, if it is operator state. A
/// `generateName` counts as a name: a user cannot slip a prefix past the guard.
pub fn classify(resource: &str, name: &str, leader_lease: &str) -> Option<Kind> {
    match resource {
        "leases" if name == leader_lease => Some(Kind::LeaderLease),
        "leases" if state::LEASE_PREFIXES.iter().any(|p| name.starts_with(p)) => Some(Kind::DeployLease),
        "configmaps" if state::CONFIGMAP_PREFIXES.iter().any(|p| name.starts_with(p)) => Some(Kind::DecisionRecord),
        "secrets" if state::SECRET_NAMES.contains(&name) => Some(Kind::RecordKey),
        _ => None,
    }
}

/// The namespace controller's user (kube-controller-manager with
/// `--use-service-account-credentials`): the only one that may delete the
/// leader Lease, when the whole namespace goes.
pub const NAMESPACE_CONTROLLER: &str = "system:serviceaccount:kube-system:namespace-controller";

/// Who is asking, for this guard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who {
    /// The operator's ServiceAccount.
    Operator,
    /// The namespace controller ([`NAMESPACE_CONTROLLER`]).
    NamespaceController,
    /// Another deleter Kubernetes needs (the garbage collector).
    Trusted,
    /// Anyone else.
    Other,
}

/// Whether `who` may `delete` (else create or update) an object of `kind`
/// named `name`. Errors: the refusal, naming the supported way.
pub fn check(kind: Kind, name: &str, delete: bool, who: Who) -> Result<(), String> {
    match (kind, who, delete) {
        // The garbage collector may delete state (it follows the operator's
        // owner references, which users cannot add: updates are guarded),
        // but not the leader Lease, whose updates are not guarded. The
        // leader Lease is never sent here for writes (matchConditions):
        // answered as if it were not guarded.
        (_, Who::NamespaceController, true)
        | (Kind::DeployLease | Kind::DecisionRecord | Kind::RecordKey, Who::Trusted, true)
        | (Kind::DeployLease | Kind::DecisionRecord | Kind::RecordKey, Who::Operator, _)
        | (Kind::LeaderLease, _, false) => Ok(()),
        (Kind::LeaderLease, _, true) => Err(format!(
            "Lease {name} is the operator's leader election and may not be deleted: a deleted Lease lets a second replica lead while the first still acts. To move leadership, delete the leading operator Pod (its holderIdentity); it releases the Lease on shutdown"
        )),
        (Kind::DeployLease, _, _) => Err(format!(
            "Lease {name} is a deploy lease of the Bloodraven operator and is written only by it: a hand edit could keep a fenced migration running. To end every deploy lease of a group, annotate the MysqlFailoverGroup bloodraven.shipstream.io/revoke-deployment-leases=<reason>; a holder ends its own with DELETE on the deploy API; a schema checked by hand is recorded with the annotation bloodraven.shipstream.io/schema-verified"
        )),
        (Kind::DecisionRecord, _, _) => Err(format!(
            "ConfigMap {name} is a decision record of the Bloodraven operator (the group's decided active site and topology generation) and is written only by it. To move the primary, request a planned failover: spec.plannedFailover {{targetSite, requestId}} on the MysqlFailoverGroup"
        )),
        (Kind::RecordKey, _, _) => Err(format!(
            "Secret {name} is the key of the operator's decision-record digests and is written only by it; the operator creates it at first start"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_classified_by_resource_and_prefix() {
        let l = "bloodraven-leader";
        assert_eq!(classify("leases", "bloodraven-leader", l), Some(Kind::LeaderLease));
        assert_eq!(classify("leases", "bloodraven-deploy-abc-migration", l), Some(Kind::DeployLease));
        assert_eq!(classify("leases", "bloodraven-tombstone-a-b", l), Some(Kind::DeployLease));
        assert_eq!(classify("leases", "bloodraven-verify-a-b", l), Some(Kind::DeployLease));
        assert_eq!(classify("configmaps", "bloodraven-topology-0123", l), Some(Kind::DecisionRecord));
        assert_eq!(classify("secrets", "bloodraven-record-key", l), Some(Kind::RecordKey));
        assert_eq!(classify("configmaps", "bloodraven-deploy-x", l), None);
        assert_eq!(classify("leases", "my-app-leader", l), None);
        assert_eq!(classify("secrets", "bloodraven-record-key-2", l), None);
    }

    #[test]
    fn only_the_operator_writes_its_state_and_nobody_deletes_the_leader_lease() {
        for kind in [Kind::DeployLease, Kind::DecisionRecord, Kind::RecordKey] {
            check(kind, "x", false, Who::Operator).unwrap();
            check(kind, "x", true, Who::Operator).unwrap();
            check(kind, "x", true, Who::Trusted).unwrap();
            check(kind, "x", true, Who::NamespaceController).unwrap();
            assert!(check(kind, "x", false, Who::Trusted).is_err(), "{kind:?}: the trusted deleters only delete");
            assert!(check(kind, "x", false, Who::Other).is_err());
            assert!(check(kind, "x", true, Who::Other).is_err());
        }
        let e = check(Kind::DeployLease, "bloodraven-deploy-x", true, Who::Other).unwrap_err();
        assert!(e.contains("revoke-deployment-leases"), "{e}");
        let e = check(Kind::DecisionRecord, "bloodraven-topology-x", false, Who::Other).unwrap_err();
        assert!(e.contains("plannedFailover"), "{e}");
        // A user who adds an owner reference to the leader Lease (an update,
        // not guarded) must not get the garbage collector to delete it.
        for who in [Who::Operator, Who::Other, Who::Trusted] {
            let e = check(Kind::LeaderLease, "bloodraven-leader", true, who).unwrap_err();
            assert!(e.contains("delete the leading operator Pod"), "{e}");
        }
        check(Kind::LeaderLease, "bloodraven-leader", true, Who::NamespaceController).unwrap();
    }
}
