//! The ordered update's part of a MysqlFailoverGroup: the request in its
//! spec and its progress in status (the phases: [`super::OrderedUpdatePhase`]).

use super::planned_failover::{PhaseTransition, PlannedFailoverAdmission};
use super::site_job::{JobTemplate, MIN_JOB_DEADLINE_SECONDS, SiteJobStatus};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A request to update both sites, one at a time, by a Job the user
/// supplies (`spec.orderedUpdate`, whose description is the contract).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrderedUpdateRequest {
    /// Caller-chosen identifier of this request, 1–128 characters of
    /// `[A-Za-z0-9._:-]`. A new value is a new request; a request runs once,
    /// with the fields it was taken up with (kept in status): editing them
    /// under the same id changes nothing but the Job template of a step not
    /// yet started.
    #[schemars(length(min = 1, max = 128), regex(pattern = r"^[A-Za-z0-9._:-]+$"))]
    pub request_id: String,
    /// The namespace the Jobs run in: their ServiceAccount, Secrets and
    /// volumes come from there. The operator's own namespace is refused at
    /// admission (a Job there could run as the operator).
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub namespace: String,
    /// The Job run once per site. The same template serves both sites; the
    /// Job tells them apart by its environment (`BLOODRAVEN_SITE`,
    /// `BLOODRAVEN_SITE_HOST`, `BLOODRAVEN_SITE_PORT`,
    /// `BLOODRAVEN_SITE_ROLE`: `standby` or `former-primary`). Each Job is
    /// created from the template as it is when its step starts.
    pub job_template: JobTemplate,
    /// Seconds each site's Job may run (its `activeDeadlineSeconds`),
    /// 60–21600. Default 1800. Past it the Job fails and so does the
    /// update. It also bounds how long the update holds the promotion of
    /// the site whose Job runs: a loss of the primary meanwhile is failed
    /// over at most this late.
    #[serde(default = "default_update_deadline")]
    #[schemars(range(min = MIN_JOB_DEADLINE_SECONDS, max = MAX_UPDATE_DEADLINE_SECONDS))]
    pub active_deadline_seconds: u32,
    /// Whether to switch back to the first primary once both sites are
    /// updated (a second switchover, a second generation step). Default
    /// false: the updated standby stays the primary.
    #[serde(default)]
    pub switch_back: bool,
}

/// The longest `activeDeadlineSeconds` of an ordered update's Jobs (6 h):
/// the most a Job may delay the emergency failover of a primary lost while
/// the standby's Job runs.
pub const MAX_UPDATE_DEADLINE_SECONDS: u32 = 21_600;

fn default_update_deadline() -> u32 {
    1800
}

/// Progress of an ordered update.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrderedUpdateStatus {
    /// The request this status answers.
    pub request_id: String,
    /// `Pending`, `Admitting`, `Deferred`, `UpdatingStandby`,
    /// `VerifyingStandby`, `SwitchoverDraining`, `SwitchoverPromoting`,
    /// `SwitchoverRepointing`, `UpdatingFormerPrimary`,
    /// `VerifyingFormerPrimary`, `SwitchBackDraining`, `SwitchBackPromoting`,
    /// `SwitchBackRepointing`, `Completed` or `Failed`.
    pub phase: String,
    /// The active site when the request was taken up (the first primary,
    /// updated second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_site: Option<String>,
    /// The standby when the request was taken up (updated first, then
    /// promoted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standby_site: Option<String>,
    /// The topology generation the request started from; a completed
    /// update leaves the group at exactly this + 1 (+ 2 with the switch-back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_generation: Option<i64>,
    /// The namespace of the request's Jobs, as taken up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Whether the request switches back at the end, as taken up.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub switch_back: bool,
    /// The Jobs' `activeDeadlineSeconds`, as taken up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<u32>,
    /// What happened last, in words: for `Failed`, what to fix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// For `Failed`: the site that needs a person (a site whose Job failed,
    /// a site left read-only, a site not updated or not back in its role).
    /// A failure before the switchover leaves the topology as it was; one
    /// after a switchover's decision leaves the topology as decided (the
    /// new primary writable, the other site a fenced replica) and is
    /// resolved on the site named here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_site: Option<String>,
    /// Why admission waits, when it does (`deferReason: DeploymentHold`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<PlannedFailoverAdmission>,
    /// The Job of each step, in the order they ran (at most two: the
    /// standby's, the former primary's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2))]
    pub jobs: Vec<SiteJobStatus>,
    /// Every phase the request entered, oldest first (at most 32 entries;
    /// `Deferred ↔ Admitting` rounds beyond that drop the oldest rounds).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub history: Vec<PhaseTransition>,
}
