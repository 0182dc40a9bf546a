//! `MysqlDatabase`: one application's schema on a failover group, and the
//! deploy pipelines allowed to coordinate migrations on it.
//!
//! Authority model (docs/deploy-api.md, "Who may ask"): the pairs in
//! `spec.deploymentClients` may take deploy leases on the group named by
//! `spec.failoverGroupRef.name`, with this resource's *name* as the lease's
//! `instance` (not the SQL schema name). At most one pair per namespace.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Desired state of a MysqlDatabase.
#[derive(CustomResource, KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[kube(
    group = "bloodraven.shipstream.io",
    version = "v1alpha1",
    kind = "MysqlDatabase",
    plural = "mysqldatabases",
    shortname = "mdb",
    category = "bloodraven",
    namespaced,
    status = "MysqlDatabaseStatus",
    printcolumn = r#"{"name":"Group","type":"string","jsonPath":".spec.failoverGroupRef.name"}"#,
    printcolumn = r#"{"name":"Schema","type":"string","jsonPath":".spec.schema"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MysqlDatabaseSpec {
    /// The MysqlFailoverGroup this database lives on.
    pub failover_group_ref: FailoverGroupRef,
    /// SQL schema name: 1–64 characters of `[A-Za-z0-9_$]`, not all digits,
    /// and not a system schema (`mysql`, `information_schema`,
    /// `performance_schema`, `sys`, any case: the API server answers "must
    /// not validate the schema (not)" for those).
    ///
    /// The system-schema rule is a `not` pattern rather than a CEL rule: the
    /// API server cannot bind a CEL rule to a value of the wrong type (one a
    /// CRD downgrade can leave behind), and then refuses every write of the
    /// object, its status included; a pattern is ratcheted like every other
    /// schema check, so such an object can still be reported on and fixed.
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9_$]*[A-Za-z_$][A-Za-z0-9_$]*$"))]
    #[schemars(extend("not" = {"pattern": "^(?i)(mysql|information_schema|performance_schema|sys)$"}))]
    pub schema: String,
    /// ServiceAccounts allowed to take deploy leases for this database, at
    /// most one per namespace (a list keyed by `namespace`), at most 64.
    #[serde(default)]
    #[schemars(length(max = 64))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["namespace"]))]
    pub deployment_clients: Vec<DeploymentClient>,
}

/// Reference to a cluster-scoped MysqlFailoverGroup.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct FailoverGroupRef {
    /// Name of the MysqlFailoverGroup (a DNS subdomain).
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"))]
    pub name: String,
}

/// A `(namespace, serviceAccount)` pair allowed to coordinate deploys.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentClient {
    /// Namespace of the ServiceAccount (a DNS label).
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub namespace: String,
    /// Name of the ServiceAccount (a DNS subdomain).
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"))]
    pub service_account: String,
}

/// Observed state of a MysqlDatabase.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MysqlDatabaseStatus {
    /// `Ready`: the referenced group exists.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// `metadata.generation` the status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
