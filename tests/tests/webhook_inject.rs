//! Issue 10, injection: an annotated Job created through the real API
//! server comes back with the sidecar and, on the local node, runs with the
//! sidecar holding both leases; a copy of an injected Job is injected once;
//! each refusal says what to fix; un-annotated Jobs are left alone.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test

use std::time::Duration;

use bloodraven_e2e::cluster::OPERATOR_DB_PASSWORD;
use bloodraven_e2e::deploy::tls_files_for;
use bloodraven_e2e::fixtures::{create_group, group, is_ready_at, wait_status};
use bloodraven_e2e::pods::{image, job_pods, logs, node_address, operator_in_namespace, wait_job_end};
use bloodraven_e2e::webhook::{Options, Webhook, refusal};
use bloodraven_e2e::{Cluster, SitePair, TestNamespace};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(180);

struct Env {
    cluster: Cluster,
    ns: TestNamespace,
    group: String,
    _op_ns: TestNamespace,
    _pair: SitePair,
    _webhook: Webhook,
}

/// A group bootstrapped by the operator Pod (deploy API behind
/// `bloodraven.<op ns>.svc`), MysqlDatabase `counter-app` listing
/// `deployer`, and the webhook registered for the tenant namespace.
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
    let webhook = Webhook::start(
        &cluster,
        &op_ns,
        Options {
            deploy_url: Some(format!("https://bloodraven.{}.svc:8443", op_ns.name)),
            deploy_ca: Some(tls.ca.clone()),
            extra: Vec::new(),
        },
    )
    .await;
    webhook.register(&cluster, &webhook.params(&op_ns.name, &[&ns.name], &ns.name)).await;
    Env { cluster, ns, group: name, _op_ns: op_ns, _pair: pair, _webhook: webhook }
}

/// A migration Job as a team writes it: annotated, one container with a command.
fn job(env: &Env, name: &str, script: &str) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "annotations": {
            "bloodraven.shipstream.io/inject": "true",
            "bloodraven.shipstream.io/group": env.group,
            "bloodraven.shipstream.io/instance": "counter-app",
            "bloodraven.shipstream.io/ttl": "30"}},
        "spec": {"template": {"spec": {
            "serviceAccountName": "deployer",
            "automountServiceAccountToken": false,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 15,
            "containers": [{
                "name": "migrate", "image": image("BLOODRAVEN_TOOLS_IMAGE"), "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/sh", "-c", script],
                "securityContext": {"runAsNonRoot": true, "runAsUser": 65534, "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
            }],
        }}},
    })
}

async fn create(env: &Env, manifest: &Value, dry_run: bool) -> Result<Job, kube::Error> {
    let pp = PostParams { dry_run, ..PostParams::default() };
    Api::<Job>::namespaced(env.cluster.client.clone(), &env.ns.name)
        .create(&pp, &serde_json::from_value(manifest.clone()).unwrap())
        .await
}

fn init_names(job: &Job) -> Vec<String> {
    let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    pod.init_containers.iter().flatten().map(|c| c.name.clone()).collect()
}

fn command(job: &Job) -> Vec<String> {
    job.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0].command.clone().unwrap_or_default()
}

#[tokio::test]
async fn an_annotated_job_is_injected_and_runs_holding_both_leases() {
    let env = setup("whinj-run").await;
    let script = "/run/bloodraven/bin/bloodraven-sidecar permit && echo MIGRATING && sleep 2";
    let created = create(&env, &job(&env, "migrate", script), false).await.unwrap();
    assert_eq!(init_names(&created), ["bloodraven-install", "bloodraven-sidecar"]);
    assert_eq!(&command(&created)[..4], ["/run/bloodraven/bin/bloodraven-sidecar", "exec", "--", "/bin/sh"]);
    let spec = created.spec.as_ref().unwrap();
    assert_eq!((spec.backoff_limit, spec.active_deadline_seconds), (Some(0), Some(3600)));

    let (_, ended, reason) = wait_job_end(&env.cluster, &env.ns.name, "migrate", T).await;
    let pods = job_pods(&env.cluster, &env.ns.name, "migrate").await;
    let pod = pods[0].clone();
    let pod_name = pod.metadata.name.clone().unwrap();
    let sidecar_log = logs(&env.cluster, &env.ns.name, &pod_name, "bloodraven-sidecar").await;
    assert_eq!(ended, "Complete", "{reason}; sidecar log:\n{sidecar_log}");
    assert!(logs(&env.cluster, &env.ns.name, &pod_name, "migrate").await.contains("MIGRATING"));
    // The sidecar's final record: both leases were held (the migration was
    // permitted), the result recorded on the Lease, the operationId the Job's UID.
    let record = sidecar_log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["record"] == "bloodraven-sidecar")
        .unwrap_or_else(|| panic!("no final record in:\n{sidecar_log}"));
    assert_eq!(record["result"], "succeeded", "{record}");
    assert_eq!(record["recordedOnLease"], true, "{record}");
    assert_eq!(record["operationId"].as_str(), created.metadata.uid.as_deref(), "{record}");
}

#[tokio::test]
async fn injection_is_idempotent_refusals_say_what_to_fix_and_plain_jobs_are_left_alone() {
    let env = setup("whinj-api").await;
    let injected = create(&env, &job(&env, "once", "true"), false).await.unwrap();
    // A copy of an injected Job (as `kubectl get -o yaml`, renamed): one sidecar, wrapped once.
    let mut copy = serde_json::to_value(&injected).unwrap();
    copy["metadata"] = json!({"name": "copy", "annotations": injected.metadata.annotations});
    copy["spec"].as_object_mut().unwrap().remove("selector");
    copy["spec"]["template"]["metadata"] = json!({});
    copy.as_object_mut().unwrap().remove("status");
    let again = create(&env, &copy, true).await.unwrap();
    assert_eq!(init_names(&again), ["bloodraven-install", "bloodraven-sidecar"]);
    assert_eq!(command(&again).iter().filter(|c| c.as_str() == "exec").count(), 1, "{:?}", command(&again));

    // Refusals, each through the API server.
    let mut no_instance = job(&env, "x1", "true");
    no_instance["metadata"]["annotations"].as_object_mut().unwrap().remove("bloodraven.shipstream.io/instance");
    let m = refusal(create(&env, &no_instance, true).await);
    assert!(m.contains("bloodraven.shipstream.io/instance annotation"), "{m}");
    let mut other_sa = job(&env, "x2", "true");
    other_sa["spec"]["template"]["spec"]["serviceAccountName"] = json!("intruder");
    let m = refusal(create(&env, &other_sa, true).await);
    assert!(m.contains("does not list this Job's ServiceAccount") && m.contains("intruder"), "{m}");
    let mut ignore = job(&env, "x3", "true");
    ignore["spec"]["podFailurePolicy"] =
        json!({"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]});
    let m = refusal(create(&env, &ignore, true).await);
    assert!(m.contains("action Ignore"), "{m}");
    let mut unknown_group = job(&env, "x4", "true");
    unknown_group["metadata"]["annotations"]["bloodraven.shipstream.io/group"] = json!("no-such-group");
    let m = refusal(create(&env, &unknown_group, true).await);
    assert!(m.contains("does not exist"), "{m}");

    // Without the annotation (or with another value) nothing is added.
    let mut plain = job(&env, "plain", "true");
    plain["metadata"]["annotations"]["bloodraven.shipstream.io/inject"] = json!("false");
    let left = create(&env, &plain, true).await.unwrap();
    assert!(init_names(&left).is_empty());
    assert_eq!(command(&left), ["/bin/sh", "-c", "true"]);
    // The injected Job's Pod runs to completion too (its migration is `true`).
    let (_, ended, reason) = wait_job_end(&env.cluster, &env.ns.name, "once", T).await;
    assert_eq!(ended, "Complete", "{reason}");
}
