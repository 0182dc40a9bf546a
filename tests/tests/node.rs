//! Issue 8: the run's cluster has a real node. Jobs that must fail closed
//! behave as Kubernetes specifies (native sidecars, `backoffLimit: 0`,
//! `activeDeadlineSeconds`); namespaces get their `default` ServiceAccount
//! and finalize; and a Pod reaches the operator, itself a Pod from its image,
//! through `https://bloodraven.bloodraven.svc:8443` with a projected token
//! of audience `bloodraven-deploy`, as the seed's walk-through does.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test

use std::time::Duration;

use bloodraven_e2e::cluster::OPERATOR_DB_PASSWORD;
use bloodraven_e2e::deploy::{database, service_account, tls_files_for};
use bloodraven_e2e::fixtures::{create_group, group, is_ready_at, wait_status};
use bloodraven_e2e::pods::{
    OPERATOR_NAMESPACE, apply, image, job_pods, logs, node_address, operator_in_cluster, wait_job_end, wait_pod_end,
};
use bloodraven_e2e::{Cluster, SitePair, TestNamespace};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams};
use serde_json::json;

const T: Duration = Duration::from_secs(120);

/// A Job of `busybox` with a native sidecar (an init container with
/// `restartPolicy: Always`) that stays up until it is told to stop, and a
/// main container running `main`.
fn job(name: &str, main: &str, extra: &serde_json::Value) -> serde_json::Value {
    let busybox = image("BLOODRAVEN_BUSYBOX_IMAGE");
    let mut spec = json!({
        "backoffLimit": 0,
        "template": {"spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "initContainers": [{
                "name": "sidecar", "image": busybox, "imagePullPolicy": "IfNotPresent", "restartPolicy": "Always",
                "command": ["/bin/sh", "-c", "trap 'echo sidecar stopped; exit 0' TERM; echo sidecar up; while true; do sleep 1; done"],
            }],
            "containers": [{"name": "main", "image": busybox, "imagePullPolicy": "IfNotPresent", "command": ["/bin/sh", "-c", main]}],
        }},
    });
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec})
}

async fn run(cluster: &Cluster, ns: &TestNamespace, manifest: serde_json::Value) -> (Job, String, String, Vec<Pod>) {
    let name = manifest["metadata"]["name"].as_str().unwrap().to_owned();
    apply(&Api::<Job>::namespaced(cluster.client.clone(), &ns.name), manifest).await;
    let (job, ended, reason) = wait_job_end(cluster, &ns.name, &name, T).await;
    (job, ended, reason, job_pods(cluster, &ns.name, &name).await)
}

fn terminated_exit(pod: &Pod, container: &str, init: bool) -> Option<i32> {
    let s = pod.status.as_ref()?;
    let list = if init { s.init_container_statuses.as_ref()? } else { s.container_statuses.as_ref()? };
    list.iter().find(|c| c.name == container)?.state.as_ref()?.terminated.as_ref().map(|t| t.exit_code)
}

#[tokio::test]
async fn jobs_with_a_native_sidecar_complete_fail_closed_and_time_out() {
    let cluster = Cluster::connect().await;
    let ns = cluster.namespace("jobs").await;

    // Main exits 0: the Job completes, and the sidecar is stopped (TERM).
    let (_, ended, _, pods) = run(&cluster, &ns, job("ok", "echo main done", &json!({}))).await;
    assert_eq!(ended, "Complete");
    assert_eq!(pods.len(), 1);
    let pod = &pods[0];
    let name = pod.metadata.name.clone().unwrap();
    let pod = bloodraven_e2e::wait_for("the sidecar to be stopped", T, || async {
        let p: Pod = Api::namespaced(cluster.client.clone(), &ns.name).get(&name).await.map_err(|e| e.to_string())?;
        if terminated_exit(&p, "sidecar", true).is_some() { Ok(p) } else { Err(format!("{:?}", p.status)) }
    })
    .await;
    assert_eq!(terminated_exit(&pod, "main", false), Some(0));
    assert_eq!(terminated_exit(&pod, "sidecar", true), Some(0), "the sidecar ran its TERM trap");
    assert!(logs(&cluster, &ns.name, &name, "sidecar").await.contains("sidecar stopped"));

    // Main exits 1 with backoffLimit 0: Failed, and no second Pod.
    let (failed, ended, reason, pods) = run(&cluster, &ns, job("fails", "exit 1", &json!({}))).await;
    assert_eq!((ended.as_str(), reason.as_str()), ("Failed", "BackoffLimitExceeded"));
    // Failed is terminal: the controller has counted every Pod it made.
    let counts = failed.status.as_ref().map(|s| (s.failed, s.succeeded.unwrap_or(0), s.active.unwrap_or(0)));
    assert_eq!(counts, Some((Some(1), 0, 0)), "one Pod, failed, and no retry");
    assert_eq!(pods.len(), 1, "{pods:?}");

    // A stuck main: activeDeadlineSeconds ends the Job as Failed.
    let (_, ended, reason, _) =
        run(&cluster, &ns, job("stuck", "sleep 3600", &json!({"activeDeadlineSeconds": 3}))).await;
    assert_eq!((ended.as_str(), reason.as_str()), ("Failed", "DeadlineExceeded"));
}

#[tokio::test]
async fn namespaces_get_their_default_service_account_and_finalize() {
    let cluster = Cluster::connect().await;
    let ns = cluster.namespace("lifecycle").await;
    let sas: Api<ServiceAccount> = Api::namespaced(cluster.client.clone(), &ns.name);
    bloodraven_e2e::wait_for("the default ServiceAccount", T, || async {
        sas.get("default").await.map(drop).map_err(|e| e.to_string())
    })
    .await;
    // Something for the namespace controller to delete.
    apply(
        &Api::<ConfigMap>::namespaced(cluster.client.clone(), &ns.name),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "left-behind"}}),
    )
    .await;
    let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
    namespaces.delete(&ns.name, &DeleteParams::default()).await.unwrap();
    bloodraven_e2e::wait_for("the namespace to finalize and disappear", T, || async {
        match namespaces.get_opt(&ns.name).await {
            Ok(None) => Ok(()),
            Ok(Some(n)) => Err(format!("{:?}", n.status)),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
}

#[tokio::test]
async fn a_pod_reaches_the_operator_pod_through_its_service_with_a_projected_token() {
    let cluster = Cluster::connect().await;
    // The tenant namespace: its name is also the group's label and the
    // namespace the group admits.
    let ns = cluster.namespace("incluster").await;
    let addr = node_address();
    let pair = SitePair::start_on("incluster", &addr);
    let tls = tls_files_for(
        &pair.dir().join("tls"),
        &format!("DNS:bloodraven.{OPERATOR_NAMESPACE}.svc,DNS:bloodraven.{OPERATOR_NAMESPACE}.svc.cluster.local"),
    );
    operator_in_cluster(&cluster, &ns.name, &tls).await;
    let operator_ns = TestNamespace::existing(&cluster, OPERATOR_NAMESPACE);
    // Named after the tenant: the operator's namespace outlives the run's tests.
    let creds = format!("{}-creds", ns.name);
    operator_ns.credentials_secret(&creds, "bloodraven", OPERATOR_DB_PASSWORD).await;
    let name = format!("{}-g", ns.name);
    create_group(&cluster, &group(&name, &ns.name, pair.sites(OPERATOR_NAMESPACE, &creds), "iad")).await;
    wait_status(&cluster, &name, "bootstrap by the operator Pod", T, |s| is_ready_at(s, "iad", 1)).await;

    service_account(&cluster, &ns.name, "deployer").await;
    database(&cluster, &ns.name, "counter-app", &name, &[(&ns.name, "deployer")]).await;
    apply(
        &Api::<ConfigMap>::namespaced(cluster.client.clone(), &ns.name),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bloodraven-ca"},
               "data": {"ca.crt": std::fs::read_to_string(&tls.ca).unwrap()}}),
    )
    .await;
    let url = format!("https://bloodraven.{OPERATOR_NAMESPACE}.svc:8443/deploy/v1/groups/{name}");
    let script = format!(
        "curl -sS --retry 10 --retry-all-errors --retry-delay 1 --cacert /ca/ca.crt \
         -H \"Authorization: Bearer $(cat /var/run/secrets/bloodraven/token)\" -w '\\nstatus=%{{http_code}}\\n' {url}"
    );
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pipeline"},
        "spec": {
            "serviceAccountName": "deployer",
            "restartPolicy": "Never",
            "containers": [{
                "name": "pipeline", "image": image("BLOODRAVEN_TOOLS_IMAGE"), "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/sh", "-c", script],
                "volumeMounts": [{"name": "token", "mountPath": "/var/run/secrets/bloodraven"},
                                 {"name": "ca", "mountPath": "/ca"}],
            }],
            "volumes": [
                {"name": "token", "projected": {"sources": [{"serviceAccountToken":
                    {"audience": "bloodraven-deploy", "expirationSeconds": 600, "path": "token"}}]}},
                {"name": "ca", "configMap": {"name": "bloodraven-ca"}},
            ],
        },
    });
    apply(&Api::<Pod>::namespaced(cluster.client.clone(), &ns.name), pod).await;
    let ended = wait_pod_end(&cluster, &ns.name, "pipeline", T).await;
    let out = logs(&cluster, &ns.name, "pipeline", "pipeline").await;
    assert_eq!(ended.status.and_then(|s| s.phase).as_deref(), Some("Succeeded"), "{out}");
    let (body, status) = out.trim().rsplit_once('\n').unwrap_or_default();
    assert_eq!(status, "status=200", "{out}");
    let body: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!((body["activeSite"].as_str(), body["topologyGeneration"].as_i64()), (Some("iad"), Some(1)), "{body}");

    cluster.delete_group(&name).await;
}
