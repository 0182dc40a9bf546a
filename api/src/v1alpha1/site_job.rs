//! What the planned disruptions that run a user's Job share in the API (the
//! ordered update, restore-in-place): the Job template a request carries,
//! and the record of one site's Job in status.
//!
//! The Job does the site's own work (a package upgrade, a configuration
//! change, a restore from the user's backup); the operator orders the sites
//! around it and never looks inside it. What the operator sets on the Job it
//! creates from the template is listed on [`JobTemplate`]; the environment
//! it adds is named in `names::site_job`.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::JobSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The Job the operator runs once per site: a `batch/v1` `JobTemplateSpec`
/// (`metadata` + `spec`), of whose metadata only labels and annotations are
/// read.
///
/// The operator creates each Job in the request's `namespace`, named for the
/// request and the site (so a Job is found again after a restart, never run
/// twice), and sets or overrides: `backoffLimit: 0` (a Pod that fails fails
/// the step: a site's update or restore that half ran is not run again
/// without a person), `completions: 1`, `parallelism: 1`, the request's
/// `activeDeadlineSeconds`, the Pod template's `restartPolicy: Never`, an
/// owner reference to the group (the Job is deleted with it), the labels
/// `app.kubernetes.io/managed-by: bloodraven-operator`,
/// `bloodraven.shipstream.io/group-hash`, `bloodraven.shipstream.io/site`
/// and `bloodraven.shipstream.io/operation`, and on every container (init
/// containers included) the environment `BLOODRAVEN_GROUP`,
/// `BLOODRAVEN_SITE`, `BLOODRAVEN_SITE_HOST`, `BLOODRAVEN_SITE_PORT`,
/// `BLOODRAVEN_SITE_ROLE` and `BLOODRAVEN_REQUEST_ID`, replacing any
/// variable of the same name. `selector`, `manualSelector` and `suspend` are
/// ignored. Everything else is the template's.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobTemplate {
    /// Labels and annotations added to each Job (the operator's labels win
    /// on a clash). Name, namespace and owner references are the operator's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JobMetadata>,
    /// The Job's `batch/v1` `JobSpec` (`template` required), with the
    /// fields above set by the operator. Its schema here checks only that
    /// `template` is present: the Job's own validation is the API
    /// server's, when the request is admitted (a server-side dry run of
    /// each Job, so a template it refuses fails the request before any
    /// site is touched) and when each Job is created.
    #[schemars(schema_with = "job_spec_schema")]
    pub spec: serde_json::Map<String, serde_json::Value>,
}

impl JobTemplate {
    /// The template's `spec` as a `batch/v1` `JobSpec`; an error names the
    /// field that does not decode.
    ///
    /// # Errors
    ///
    /// The spec is not a `JobSpec` (a field of the wrong type, `template`
    /// missing).
    pub fn job_spec(&self) -> Result<JobSpec, serde_json::Error> {
        serde_json::from_value(serde_json::Value::Object(self.spec.clone()))
    }
}

/// The schema of [`JobTemplate::spec`]: an object with `template`, its
/// fields kept as written. The whole `JobSpec` schema (the Pod's, with
/// every container field) would be about 700 kB per request in the CRD,
/// twice over (the ordered update's and restore-in-place's): past what
/// `kubectl apply` can store in its last-applied annotation and near the
/// API server's object limit. And a group whose spec does not decode is a
/// group the operator cannot manage: kept as JSON here, a template that is
/// not a `JobSpec` fails its request, never the group.
fn job_spec_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "required": ["template"],
        "properties": {
            "template": {
                "description": "The Pod template of the Job (a `PodTemplateSpec`); `spec.restartPolicy` is set to `Never`.",
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true
            }
        },
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// The part of a Job's metadata a template may set.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobMetadata {
    /// Labels added to each Job.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations added to each Job.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// One site's Job of a request, as the operator created and last saw it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SiteJobStatus {
    /// The site the Job works on.
    pub site: String,
    /// Its role in the request: `standby` or `former-primary` (an ordered
    /// update), `restore` (a restore-in-place); the Job's
    /// `BLOODRAVEN_SITE_ROLE`.
    pub role: String,
    /// The Job's name, in the request's `namespace`.
    pub job_name: String,
    /// `Running`, `Complete` or `Failed` (the Job's condition; a Job past
    /// `activeDeadlineSeconds` is `Failed`).
    pub result: String,
    /// For `Failed`: the reason and message Kubernetes gives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the operator created the Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the operator saw it end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
}

/// Bounds of a request's `activeDeadlineSeconds`: the shortest a Job may be
/// given. A minute is less than any real update or restore; the bound is
/// there so a typo (`activeDeadlineSeconds: 1`) does not fail every Job.
pub const MIN_JOB_DEADLINE_SECONDS: u32 = 60;

