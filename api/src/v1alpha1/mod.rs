//! `bloodraven.shipstream.io/v1alpha1`: [`MysqlFailoverGroup`] (cluster-scoped)
//! and [`MysqlDatabase`] (namespaced). Field names follow
//! docs/failover-groups.md; validation that the OpenAPI schema can express lives
//! in the schema (patterns, bounds, list-map keys, CEL rules), and the
//! operator re-checks at run time what it cannot.
//!
//! The resources themselves need kube and k8s-openapi (feature `crd`); the
//! phase and condition vocabulary does not, and is there without it.

mod conditions;
#[cfg(feature = "crd")]
mod database;
#[cfg(feature = "crd")]
mod failover_group;
#[cfg(feature = "crd")]
mod ordered_update;
mod phase;
#[cfg(feature = "crd")]
mod planned_failover;
#[cfg(feature = "crd")]
mod restore_in_place;
#[cfg(feature = "crd")]
mod site_job;

pub use conditions::{ConditionType, reason};
#[cfg(feature = "crd")]
pub use database::{DeploymentClient, FailoverGroupRef, MysqlDatabase, MysqlDatabaseSpec, MysqlDatabaseStatus};
#[cfg(feature = "crd")]
pub use failover_group::{
    AllowedDatabases, DatabaseNamespaces, EmergencyFailoverStatus, FailoverPolicy, InstanceClaim, MysqlFailoverGroup,
    MysqlFailoverGroupSpec, MysqlFailoverGroupStatus, NamespacesFrom, SecretRef, Site, SiteHealth,
};
#[cfg(feature = "crd")]
pub use ordered_update::{MAX_UPDATE_DEADLINE_SECONDS, OrderedUpdateRequest, OrderedUpdateStatus};
pub use phase::{OrderedUpdatePhase, PlannedFailoverPhase, RestorePhase};
#[cfg(feature = "crd")]
pub use planned_failover::{
    IgnoredRequest, PhaseTransition, PlannedFailoverAdmission, PlannedFailoverRequest, PlannedFailoverStatus,
};
#[cfg(feature = "crd")]
pub use restore_in_place::{MAX_RESTORE_DEADLINE_SECONDS, RestoreInPlaceRequest, RestoreInPlaceStatus};
#[cfg(feature = "crd")]
pub use site_job::{JobMetadata, JobTemplate, MIN_JOB_DEADLINE_SECONDS, SiteJobStatus};

/// `metav1.Condition`, as every status here uses it.
#[cfg(feature = "crd")]
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
