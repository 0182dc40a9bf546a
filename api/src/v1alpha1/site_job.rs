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

#[cfg(test)]
mod tests {
    use super::super::{MysqlFailoverGroup, MysqlFailoverGroupSpec};
    use kube::CustomResourceExt;
    use serde_json::json;

    fn group(extra: serde_json::Value) -> serde_json::Value {
        let mut spec = json!({
            "initialActiveSite": "iad",
            "sites": [
                {"name": "iad", "host": "mysql-iad.example.internal", "port": 3306,
                 "credentialsSecretRef": {"namespace": "bloodraven", "name": "iad-operator"}},
                {"name": "pdx", "host": "mysql-pdx.example.internal", "port": 3306,
                 "credentialsSecretRef": {"namespace": "bloodraven", "name": "pdx-operator"}},
            ],
        });
        let serde_json::Value::Object(extra) = extra else { panic!("extra fields are an object") };
        spec.as_object_mut().unwrap().extend(extra);
        spec
    }

    fn template(spec: serde_json::Value) -> serde_json::Value {
        let mut template = json!({"metadata": {"labels": {"team": "databases"}}});
        template["spec"] = spec;
        template
    }

    fn pod() -> serde_json::Value {
        json!({"template": {"spec": {"containers": [{"name": "upgrade", "image": "upgrader:1.4"}]}}})
    }

    #[test]
    fn requests_take_their_defaults_and_their_job_spec_decodes() {
        let spec: MysqlFailoverGroupSpec = serde_json::from_value(group(json!({
            "orderedUpdate": {"requestId": "u1", "namespace": "db-maintenance", "jobTemplate": template(pod())},
            "restoreInPlace": {"requestId": "r1", "namespace": "db-maintenance", "jobTemplate": template(pod())},
        })))
        .unwrap();
        let update = spec.ordered_update.unwrap();
        assert_eq!((update.active_deadline_seconds, update.switch_back), (1800, false));
        let job = update.job_template.job_spec().unwrap();
        assert_eq!(job.template.spec.unwrap().containers[0].image.as_deref(), Some("upgrader:1.4"));
        let restore = spec.restore_in_place.unwrap();
        assert_eq!((restore.active_deadline_seconds, restore.site), (14_400, None), "default: the standby");
    }

    #[test]
    fn a_template_that_is_not_a_job_spec_fails_its_request_never_the_group() {
        let bad = json!({"template": {"spec": {"containers": "not a list"}}});
        let spec: MysqlFailoverGroupSpec = serde_json::from_value(group(json!({
            "orderedUpdate": {"requestId": "u1", "namespace": "db-maintenance", "jobTemplate": template(bad)},
        })))
        .expect("the group decodes whatever the template holds");
        let err = spec.ordered_update.unwrap().job_template.job_spec().unwrap_err();
        assert!(err.to_string().contains("sequence"), "{err}");
    }

    #[test]
    fn the_crd_stays_small_enough_for_kubectl_apply() {
        // kubectl apply (client-side) keeps the whole object in an annotation
        // of at most 256 KiB; the full JobSpec schema, twice, was 1.4 MB.
        let crd = serde_json::to_vec(&MysqlFailoverGroup::crd()).unwrap();
        assert!(crd.len() < 256 * 1024, "the CRD is {} bytes", crd.len());
        let schema = serde_json::to_value(MysqlFailoverGroup::crd()).unwrap();
        let spec = &schema["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        for request in ["orderedUpdate", "restoreInPlace"] {
            let job = &spec[request]["properties"]["jobTemplate"]["properties"]["spec"];
            assert_eq!(job["x-kubernetes-preserve-unknown-fields"], json!(true), "{request}");
            assert_eq!(job["required"], json!(["template"]), "{request}");
        }
    }
}
