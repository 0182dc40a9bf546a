//! Restore-in-place's part of a MysqlFailoverGroup: the request in its spec
//! and its progress in status (the phases: [`super::RestorePhase`]).

use super::planned_failover::{PhaseTransition, PlannedFailoverAdmission};
use super::site_job::{JobTemplate, MIN_JOB_DEADLINE_SECONDS, SiteJobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A request to restore one site from the user's backup, by a Job the user
/// supplies, and make it the primary (`spec.restoreInPlace`, whose
/// description is the contract).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreInPlaceRequest {
    /// Caller-chosen identifier of this request, 1–128 characters of
    /// `[A-Za-z0-9._:-]`. A new value is a new request; a request runs once,
    /// with the fields it was taken up with (kept in status): editing them
    /// under the same id changes nothing but the Job template of a step not
    /// yet started.
    #[schemars(length(min = 1, max = 128), regex(pattern = r"^[A-Za-z0-9._:-]+$"))]
    pub request_id: String,
    /// The site to restore; must be one of `spec.sites`. Default: the
    /// standby (the site that is not active when the request is taken up).
    /// Naming the active site is refused at admission (`Failed`, nothing
    /// touched): restoring the primary under its own clients is not
    /// restore-in-place; switch over first (`spec.plannedFailover`), then
    /// restore the site that was the primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"))]
    pub site: Option<String>,
    /// The namespace the Job runs in: its ServiceAccount, Secrets and
    /// volumes come from there. The operator's own namespace is refused at
    /// admission (a Job there could run as the operator).
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub namespace: String,
    /// The Job that restores the site's server from the user's backup
    /// (`BLOODRAVEN_SITE_ROLE: restore`). It must leave the server running,
    /// answering at the site's host and port with the site's `server_id`,
    /// and with no replication configured; the operator promotes it as the
    /// Job left it.
    pub job_template: JobTemplate,
    /// Seconds the Job may run (its `activeDeadlineSeconds`), 60–86400.
    /// Default 14400. Past it the Job fails and so does the request, with no
    /// generation change: the old primary serves on. While the Job runs,
    /// automatic failover never promotes the site being restored.
    #[serde(default = "default_restore_deadline")]
    #[schemars(range(min = MIN_JOB_DEADLINE_SECONDS, max = MAX_RESTORE_DEADLINE_SECONDS))]
    pub active_deadline_seconds: u32,
}

/// The longest `activeDeadlineSeconds` of a restore Job (24 h): a restore
/// of a large backup takes hours, and the site being restored is no
/// failover target meanwhile whatever the bound.
pub const MAX_RESTORE_DEADLINE_SECONDS: u32 = 86_400;

fn default_restore_deadline() -> u32 {
    14_400
}

/// Progress of a restore-in-place.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreInPlaceStatus {
    /// The request this status answers.
    pub request_id: String,
    /// The site restored (the request's `site`, or the standby it defaulted to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
    /// `Pending`, `Admitting`, `Deferred`, `Restoring`, `Verifying`,
    /// `Fencing`, `Promoting`, `Repointing`, `AwaitingReclone`, `Completed`
    /// or `Failed`.
    pub phase: String,
    /// The active site when the request was taken up (the old primary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_site: Option<String>,
    /// The topology generation the request started from; a restore that
    /// got past its decision leaves the group at exactly this + 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_generation: Option<i64>,
    /// The namespace of the request's Job, as taken up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The Job's `activeDeadlineSeconds`, as taken up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<u32>,
    /// What happened last, in words: for `Failed`, what to fix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// For `Failed`: the site that needs a person: the restored site,
    /// holding whatever the Job left, or the old primary when its fence
    /// could not be finished. A failure before the decision leaves the old
    /// primary serving (writable again if it was fenced) and the generation
    /// where it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_site: Option<String>,
    /// The old primary after the decision: fenced, out of replication and
    /// never promoted until a person re-clones it from the new primary and
    /// sets the annotation `bloodraven.shipstream.io/reclone-done:
    /// <site>@<topologyGeneration>` (this site, the generation the restore
    /// decided). Kept after the request completes, as the record of which
    /// server was replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclone_site: Option<String>,
    /// When the operator took the re-clone mark.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclone_done_time: Option<Time>,
    /// Why admission waits, when it does (`deferReason: DeploymentHold`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<PlannedFailoverAdmission>,
    /// The restore Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<SiteJobStatus>,
    /// Every phase the request entered, oldest first (at most 32 entries;
    /// `Deferred ↔ Admitting` rounds beyond that drop the oldest rounds).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub history: Vec<PhaseTransition>,
}
