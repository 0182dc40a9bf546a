//! Issue 9 in a real Job Pod on the run's node: `bloodraven-sidecar hold`
//! as a native sidecar (startup probe `probe`), the migration container's
//! entrypoint the `exec` wrapper (installed from the sidecar image into the
//! shared emptyDir), the operator as a Pod behind `bloodraven.<its namespace>.svc`.
//! A migration Job completes and its record reaches the sidecar's
//! termination message; a revoked Job whose migration traps SIGTERM and
//! exits 0 still fails; a Job that cannot get the mutex never starts its
//! migration.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test

use std::time::Duration;

use bloodraven_e2e::cluster::OPERATOR_DB_PASSWORD;
use bloodraven_e2e::deploy::tls_files_for;
use bloodraven_e2e::fixtures::{create_group, group, is_ready_at, wait_status};
use bloodraven_e2e::pods::{apply, image, job_pods, logs, node_address, operator_in_namespace, wait_job_end};
use bloodraven_e2e::{Cluster, SitePair, TestNamespace, wait_for};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

const T: Duration = Duration::from_secs(180);
const SIDECAR_EXIT_FENCED_IN_DDL: i32 = 93;

struct Env {
    cluster: Cluster,
    ns: TestNamespace,
    /// The operator Pod's namespace (its own per test: one Deployment serves one group selector).
    op_ns: TestNamespace,
    group: String,
    _pair: SitePair,
}

/// The tenant namespace, a group bootstrapped by the operator Pod, the
/// `deployer` ServiceAccount listed by MysqlDatabase `counter-app`, and the CA.
async fn setup(prefix: &str) -> Env {
    let cluster = Cluster::connect().await;
    let ns = cluster.namespace(prefix).await;
    let op_ns = cluster.namespace(&format!("{prefix}-op")).await;
    let pair = SitePair::start_on(prefix, &node_address());
    let tls = tls_files_for(
        &pair.dir().join("tls"),
        &format!("DNS:bloodraven.{0}.svc,DNS:bloodraven.{0}.svc.cluster.local", op_ns.name),
    );
    operator_in_namespace(&cluster, &op_ns.name, &ns.name, &tls).await;
    op_ns.credentials_secret("site-creds", "bloodraven", OPERATOR_DB_PASSWORD).await;
    let name = format!("{}-g", ns.name);
    create_group(&cluster, &group(&name, &ns.name, pair.sites(&op_ns.name, "site-creds"), "iad")).await;
    wait_status(&cluster, &name, "bootstrap by the operator Pod", T, |s| is_ready_at(s, "iad", 1)).await;
    bloodraven_e2e::pods::deploy_client(&cluster, &ns.name, &name, &tls).await;
    Env { cluster, ns, op_ns, group: name, _pair: pair }
}

/// A migration Job as the webhook will shape it: `install` copies the
/// sidecar binary into the shared emptyDir; `sidecar` holds the leases
/// (native sidecar, startup probe); `migration` runs `script` through the
/// wrapper, as another user than the sidecar.
fn job(env: &Env, name: &str, script: &str, sidecar_env: &[(&str, &str)], deadline: u32) -> serde_json::Value {
    let sidecar_image = image("BLOODRAVEN_SIDECAR_IMAGE");
    let restricted = json!({"runAsNonRoot": true, "runAsUser": 65532, "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}});
    let mut envs = vec![
        json!({"name": "BLOODRAVEN_URL", "value": format!("https://bloodraven.{}.svc:8443", env.op_ns.name)}),
        json!({"name": "BLOODRAVEN_CA", "value": "/ca/ca.crt"}),
        json!({"name": "BLOODRAVEN_TOKEN_FILE", "value": "/var/run/secrets/bloodraven/token"}),
        json!({"name": "BLOODRAVEN_GROUP", "value": env.group}),
        json!({"name": "BLOODRAVEN_INSTANCE", "value": "counter-app"}),
        json!({"name": "BLOODRAVEN_JOB_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['batch.kubernetes.io/controller-uid']"}}}),
        json!({"name": "BLOODRAVEN_TTL", "value": "15"}),
        json!({"name": "BLOODRAVEN_GRACE", "value": "3"}),
        json!({"name": "BLOODRAVEN_REQUEST_TIMEOUT", "value": "2"}),
        json!({"name": "BLOODRAVEN_LOG_FORMAT", "value": "json"}),
    ];
    envs.extend(sidecar_env.iter().map(|(k, v)| json!({"name": k, "value": v})));
    json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline,
            "template": {"spec": {
                "serviceAccountName": "deployer",
                "automountServiceAccountToken": false,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 15,
                "initContainers": [
                    {"name": "install", "image": sidecar_image, "imagePullPolicy": "IfNotPresent",
                     "args": ["install", "/run/bloodraven/bin"], "securityContext": restricted,
                     "volumeMounts": [{"name": "run", "mountPath": "/run/bloodraven"}]},
                    {"name": "sidecar", "image": sidecar_image, "imagePullPolicy": "IfNotPresent", "restartPolicy": "Always",
                     "args": ["hold"], "env": envs, "securityContext": restricted,
                     "startupProbe": {"exec": {"command": ["/bloodraven-sidecar", "probe"]}, "periodSeconds": 1, "failureThreshold": 600},
                     "volumeMounts": [{"name": "run", "mountPath": "/run/bloodraven"},
                                      {"name": "token", "mountPath": "/var/run/secrets/bloodraven", "readOnly": true},
                                      {"name": "ca", "mountPath": "/ca", "readOnly": true}]},
                ],
                "containers": [{
                    "name": "migration", "image": image("BLOODRAVEN_TOOLS_IMAGE"), "imagePullPolicy": "IfNotPresent",
                    "command": ["/run/bloodraven/bin/bloodraven-sidecar", "exec", "--", "/bin/sh", "-c", script],
                    "env": [{"name": "S", "value": "/run/bloodraven/bin/bloodraven-sidecar"}],
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 65534, "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
                    "volumeMounts": [{"name": "run", "mountPath": "/run/bloodraven"}],
                }],
                "volumes": [
                    {"name": "run", "emptyDir": {}},
                    {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"audience": "bloodraven-deploy", "expirationSeconds": 600, "path": "token"}}]}},
                    {"name": "ca", "configMap": {"name": "bloodraven-ca"}},
                ],
            }},
        },
    })
}

async fn start(env: &Env, manifest: serde_json::Value) {
    apply(&Api::<Job>::namespaced(env.cluster.client.clone(), &env.ns.name), manifest).await;
}

fn terminated(pod: &Pod, container: &str, init: bool) -> Option<(i32, String)> {
    let s = pod.status.as_ref()?;
    let list = if init { s.init_container_statuses.as_ref()? } else { s.container_statuses.as_ref()? };
    let t = list.iter().find(|c| c.name == container)?.state.as_ref()?.terminated.clone()?;
    Some((t.exit_code, t.message.unwrap_or_default()))
}

/// The sidecar's final record (its termination message), once it stopped.
async fn sidecar_record(env: &Env, job: &str) -> (Pod, serde_json::Value) {
    wait_for(&format!("the sidecar of {job} to stop with its record"), T, || async {
        let pods = job_pods(&env.cluster, &env.ns.name, job).await;
        let pod = pods.first().ok_or("no Pod")?.clone();
        match terminated(&pod, "sidecar", true) {
            Some((_, msg)) if !msg.is_empty() => {
                let record: serde_json::Value = serde_json::from_str(&msg).map_err(|e| format!("{e}: {msg}"))?;
                Ok((pod, record))
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

#[tokio::test]
async fn a_migration_job_holds_both_leases_completes_and_records_its_result() {
    let env = setup("scjob-ok").await;
    let script = "$S permit && $S mark ddl-started --revision 7 && sleep 2 && $S mark ddl-finished --revision 7 && $S mark outcome succeeded --revision 7";
    start(&env, job(&env, "migrate", script, &[("BLOODRAVEN_DDL_BOUNDARY", "reported")], 150)).await;
    let (_, ended, reason) = wait_job_end(&env.cluster, &env.ns.name, "migrate", T).await;
    let pods = job_pods(&env.cluster, &env.ns.name, "migrate").await;
    let pod_name = pods[0].metadata.name.clone().unwrap();
    assert_eq!(
        ended,
        "Complete",
        "{reason}; sidecar log:\n{}",
        logs(&env.cluster, &env.ns.name, &pod_name, "sidecar").await
    );
    let (pod, record) = sidecar_record(&env, "migrate").await;
    assert_eq!(terminated(&pod, "migration", false).map(|t| t.0), Some(0));
    assert_eq!(record["result"], "succeeded", "{record}");
    assert_eq!(record["recordedOnLease"], true, "{record}");
    assert_eq!((record["ddlState"].as_str(), record["revision"].as_str()), (Some("completed"), Some("7")), "{record}");
    // The operationId is the Job's UID.
    let uid = pod.metadata.labels.as_ref().and_then(|l| l.get("batch.kubernetes.io/controller-uid")).cloned().unwrap();
    assert_eq!(record["operationId"].as_str(), Some(uid.as_str()), "{record}");
}

#[tokio::test]
async fn a_revoked_job_fails_even_when_its_migration_traps_sigterm_and_exits_0() {
    let env = setup("scjob-revoke").await;
    let script = "trap 'echo got SIGTERM; exit 0' TERM; echo started; while :; do sleep 0.1; done";
    start(&env, job(&env, "trapped", script, &[], 150)).await;
    // Running: the migration container started (only after the probe passed).
    let pod_name = wait_for("the migration to run", T, || async {
        let pods = job_pods(&env.cluster, &env.ns.name, "trapped").await;
        let pod = pods.first().ok_or("no Pod")?;
        let name = pod.metadata.name.clone().unwrap();
        if logs(&env.cluster, &env.ns.name, &name, "migration").await.contains("started") {
            Ok(name)
        } else {
            Err("not yet".into())
        }
    })
    .await;
    let patch = json!({"metadata": {"annotations": {"bloodraven.shipstream.io/revoke-deployment-leases": "now"}}});
    env.cluster.groups().patch(&env.group, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let (_, ended, _) = wait_job_end(&env.cluster, &env.ns.name, "trapped", T).await;
    assert_eq!(ended, "Failed");
    let out = logs(&env.cluster, &env.ns.name, &pod_name, "migration").await;
    assert!(out.contains("got SIGTERM"), "the migration received SIGTERM: {out}");
    let (pod, record) = sidecar_record(&env, "trapped").await;
    let (code, _) = terminated(&pod, "migration", false).unwrap();
    assert_eq!(code, SIDECAR_EXIT_FENCED_IN_DDL, "the wrapper exits with the verdict, not the trapped 0");
    assert_eq!(
        (record["result"].as_str(), record["fence"].as_str()),
        (Some("schema-verification-required"), Some("revoked")),
        "{record}"
    );
}

#[tokio::test]
async fn a_job_that_cannot_get_the_mutex_fails_without_starting_its_migration() {
    let env = setup("scjob-held").await;
    // A holder that runs until its deadline.
    start(&env, job(&env, "holder", "echo holding; sleep 3600", &[], 60)).await;
    wait_for("the holder to run", T, || async {
        let pods = job_pods(&env.cluster, &env.ns.name, "holder").await;
        let pod = pods.first().ok_or("no Pod")?;
        let name = pod.metadata.name.clone().unwrap();
        if logs(&env.cluster, &env.ns.name, &name, "migration").await.contains("holding") {
            Ok(())
        } else {
            Err("not yet".into())
        }
    })
    .await;
    start(&env, job(&env, "blocked", "echo MIGRATION STARTED", &[("BLOODRAVEN_ACQUIRE_TIMEOUT", "3")], 25)).await;
    // The sidecar gives up and says so (its final JSON line) while the Pod
    // still runs: the Job controller deletes the Pod at the deadline.
    let (pod_name, record) = wait_for("the blocked sidecar's final record", T, || async {
        let pods = job_pods(&env.cluster, &env.ns.name, "blocked").await;
        let name = pods.first().ok_or("no Pod")?.metadata.name.clone().unwrap();
        let out = logs(&env.cluster, &env.ns.name, &name, "sidecar").await;
        let record = out
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["record"] == "bloodraven-sidecar")
            .ok_or_else(|| format!("no record yet: {out}"))?;
        Ok((name, record))
    })
    .await;
    assert_eq!(record["result"], "not-started", "{record}");
    assert_eq!(record["exitCode"], 90, "{record}");
    assert!(record["holder"].as_str().unwrap_or_default().contains("counter-app"), "{record}");
    let pod: Pod = Api::namespaced(env.cluster.client.clone(), &env.ns.name).get(&pod_name).await.unwrap();
    let main = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref()).and_then(|c| c.first().cloned());
    let waiting = main.as_ref().is_some_and(|c| c.state.as_ref().is_some_and(|s| s.waiting.is_some()));
    assert!(waiting, "the migration container has not started (the probe never passed): {main:?}");
    let (_, ended, reason) = wait_job_end(&env.cluster, &env.ns.name, "blocked", T).await;
    assert_eq!((ended.as_str(), reason.as_str()), ("Failed", "DeadlineExceeded"));
}
