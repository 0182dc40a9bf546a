//! `GET /deploy/v1/groups/{group}`: a group as a deploy pipeline observes it
//! (the active site, topologyGeneration, the health block, every in-flight
//! operation phase, and stable with an unstableReason; docs/deploy-api.md,
//! "Reference"). Never a token.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{DdlState, LeaseKind, schema};
use crate::v1alpha1::PlannedFailoverPhase;
#[cfg(feature = "crd")]
use crate::v1alpha1::SiteHealth;
use crate::v1alpha1::{OrderedUpdatePhase, RestorePhase};

/// The answer of `GET /deploy/v1/groups/{group}`. Every field is always
/// present; `activeSite`, `topologyGeneration` and `unstableReason` are
/// `null` when they have no value (before bootstrap; when stable).
#[cfg(feature = "crd")]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("additionalProperties" = false))]
pub struct GroupView {
    /// The group's name.
    #[schemars(with = "schema::ResourceName")]
    pub group: String,
    /// The site the operator decided holds the primary role.
    pub active_site: Option<String>,
    /// Durable count of authoritative active-site changes (≥ 1 once bootstrapped).
    #[schemars(range(min = 1))]
    pub topology_generation: Option<i64>,
    /// False during any operation phase (Deferred included), while a planned
    /// failover holds automatic failover, and when the group is Degraded,
    /// SplitBrain, NoPrimary, recovery is pending or replication is not
    /// running. Replication lag alone never makes it false.
    pub stable: bool,
    /// Why `stable` is false: a condition type, `BootstrapPending`,
    /// `NotObserved`, `OperationInProgress` or `AutomaticFailoverHeld`;
    /// `null` when stable.
    pub unstable_reason: Option<String>,
    /// The last written probe of each site (`status.health`).
    pub health: Vec<SiteHealth>,
    /// Operations in flight (a finished one is not listed).
    pub operations: Vec<OperationView>,
    /// Live leases (a lapsed or revoked one is not listed).
    pub leases: Vec<LeaseView>,
    /// Schemas awaiting a person's verification, oldest first: operations
    /// that ended after their DDL started. A new migration lease for one of
    /// these instances is refused (`409 schema_verification_required`)
    /// until the group's `schema-verified` annotation clears it.
    pub verifications: Vec<VerificationView>,
}

/// A schema awaiting verification: the operation whose lease ended inside
/// its DDL.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("additionalProperties" = false))]
pub struct VerificationView {
    /// The operation.
    #[schemars(with = "schema::OperationId")]
    pub operation_id: String,
    /// Its MysqlDatabase name: the instance whose schema must be checked.
    #[schemars(with = "schema::ResourceName")]
    pub instance: String,
    /// The revision it last reported, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<schema::Revision>")]
    pub revision: Option<String>,
    /// How its lease ended: `TopologyChanged`, `OperatorRevoked`, `Lapsed`
    /// or `ReleasedInDdl`.
    pub ending: String,
    /// The group's topology generation when it ended.
    #[schemars(range(min = 1))]
    pub topology_generation: i64,
}

/// What kind of operation is in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum OperationType {
    /// A planned failover of `spec.plannedFailover`.
    PlannedFailover,
    /// An ordered update of `spec.orderedUpdate`.
    OrderedUpdate,
    /// A restore-in-place of `spec.restoreInPlace`.
    RestoreInPlace,
}

/// One operation in flight.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("additionalProperties" = false))]
pub struct OperationView {
    /// What it is.
    #[serde(rename = "type")]
    pub type_: OperationType,
    /// The request's id (`spec.plannedFailover.requestId`,
    /// `spec.orderedUpdate.requestId` or `spec.restoreInPlace.requestId`):
    /// 1–128 characters of `[A-Za-z0-9._:-]`.
    #[schemars(length(min = 1, max = 128), regex(pattern = r"^[A-Za-z0-9._:-]+$"))]
    pub request_id: String,
    /// The site being promoted: a planned failover's target, the standby an
    /// ordered update switches over to, the site a restore-in-place restores.
    pub target_site: String,
    /// Where it stands, as the request's status spells it (never
    /// `Completed` or `Failed`: those are not in flight).
    pub phase: OperationPhase,
}

/// The phase of an operation in flight: one of its type's phases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum OperationPhase {
    /// A planned failover's.
    PlannedFailover(PlannedFailoverPhase),
    /// An ordered update's.
    OrderedUpdate(OrderedUpdatePhase),
    /// A restore-in-place's.
    RestoreInPlace(RestorePhase),
}

/// One live lease (never its token).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("additionalProperties" = false))]
pub struct LeaseView {
    /// The lease kind.
    pub kind: LeaseKind,
    /// The holding operation.
    #[schemars(with = "schema::OperationId")]
    pub operation_id: String,
    /// Its MysqlDatabase name.
    #[schemars(with = "schema::ResourceName")]
    pub instance: String,
    /// Expiry.
    #[schemars(with = "schema::Timestamp")]
    pub expires_at: String,
    /// Generation of the grant.
    #[schemars(range(min = 1))]
    pub topology_generation: i64,
    /// Last reported DDL state, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ddl_state: Option<DdlState>,
    /// Set when the migration lease was revoked: it keeps the mutex until
    /// `expiresAt`, the deadline its client was last given (that client may
    /// run until then without hearing of the revocation), and is never
    /// renewed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked: Option<super::RevokeReason>,
}
