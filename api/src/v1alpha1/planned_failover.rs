//! The planned failover's part of a MysqlFailoverGroup: the request in its
//! spec and its progress in status, with the pieces of that progress the
//! other planned disruptions (the ordered update, restore-in-place) share:
//! [`PhaseTransition`], [`PlannedFailoverAdmission`].

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A request to move the primary to another site (a planned failover).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlannedFailoverRequest {
    /// The site to promote; must be one of `spec.sites`.
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"))]
    pub target_site: String,
    /// Caller-chosen identifier of this request, 1–128 characters of
    /// `[A-Za-z0-9._:-]`. A new value is a new request.
    #[schemars(length(min = 1, max = 128), regex(pattern = r"^[A-Za-z0-9._:-]+$"))]
    pub request_id: String,
}

/// Progress of a planned failover.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlannedFailoverStatus {
    /// The request this status answers.
    pub request_id: String,
    /// The site being promoted.
    pub target_site: String,
    /// `Pending`, `Admitting`, `Deferred`, `Draining`, `Promoting`,
    /// `Repointing`, `Completed` or `Failed`.
    pub phase: String,
    /// The active site when the request was taken up (the old primary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_site: Option<String>,
    /// The topology generation the request started from; a completed
    /// request leaves the group at exactly this + 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_generation: Option<i64>,
    /// What happened last, in words: for `Failed`, what to fix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Why admission waits, when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<PlannedFailoverAdmission>,
    /// Every phase the request entered, oldest first (at most 32 entries;
    /// `Deferred ↔ Admitting` rounds beyond that drop the oldest rounds).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub history: Vec<PhaseTransition>,
}

/// A request in spec that was not taken up, and why.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IgnoredRequest {
    /// The request's id, as written in spec.
    pub request_id: String,
    /// The site it asks for.
    pub target_site: String,
    /// Why it was not taken up (`RequestIdReused`).
    pub reason: String,
    /// What happened, and what to do.
    pub message: String,
}

/// One phase a request entered (a planned failover, an ordered update, a
/// restore-in-place).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PhaseTransition {
    /// The phase entered.
    pub phase: String,
    /// When.
    pub time: Time,
    /// Why, when there is more to say (a deferral's blocking operation, a failure's cause).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Admission state of a deferred request (a planned failover, an ordered
/// update, a restore-in-place).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlannedFailoverAdmission {
    /// Why the request waits, e.g. `DeploymentHold`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defer_reason: Option<String>,
    /// When admission is tried again (the earliest hold expiry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_time: Option<Time>,
    /// Names the blocking operationId and instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
