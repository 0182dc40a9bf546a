//! `helm install` of charts/bloodraven on the run's real node, as
//! a user installs it: the operator's and the webhook's images imported into
//! the node, two replicas of each, the chart's own certificates. Then the
//! operator becomes leader and bootstraps a group, the webhook refuses a hand
//! edit of status.topologyGeneration and injects the sidecar into an
//! annotated Job, the deploy API answers a Pod through the Service
//! `bloodraven`; `helm upgrade` with a changed value keeps the certificates
//! and applies the value; `helm uninstall` leaves none of the chart's
//! objects behind, namespaced or cluster-scoped.
//!
//! Scoped so that it cannot touch the other tests sharing the cluster: the
//! release lives in its own namespace, the operator manages only groups with
//! this test's label, and the webhook configurations (named after the
//! release) select only this test's namespaces and groups.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test

use std::path::PathBuf;
use std::time::Duration;

use bloodraven_e2e::cluster::OPERATOR_DB_PASSWORD;
use bloodraven_e2e::fixtures::{create_group, group, is_ready_at, wait_status};
use bloodraven_e2e::helm::{bloodraven_values, helm_ok as helm, wait_rolled_out};
use bloodraven_e2e::pods::{apply, image, node_address};
use bloodraven_e2e::webhook::refusal;
use bloodraven_e2e::{Cluster, SitePair, e2e_dir, repo_root};
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const T: Duration = Duration::from_secs(240);

/// The values file of the release ([`bloodraven_values`]) with the
/// operator's log format `log_format`.
fn values(dir: &std::path::Path, op_ns: &str, tenant: &str, log_format: &str) -> PathBuf {
    let file = format!("values-{op_ns}-{log_format}.yaml");
    bloodraven_values(dir, &file, op_ns, tenant, &json!({"operator": {"logFormat": log_format}}))
}

fn ca_bundle(v: &ValidatingWebhookConfiguration) -> Vec<u8> {
    v.webhooks.as_ref().unwrap()[0].client_config.ca_bundle.as_ref().unwrap().0.clone()
}

#[tokio::test]
#[allow(clippy::too_many_lines)] // one user's install, use, upgrade and uninstall, in order
async fn helm_install_upgrade_uninstall_of_the_chart_on_the_node() {
    let cluster = Cluster::connect().await;
    let c = cluster.client.clone();
    let op_ns = cluster.namespace("helm").await;
    let tenant = cluster.namespace("helm-t").await;
    let release = "br";
    let config_name = format!("{release}-{}", op_ns.name);
    let pair = SitePair::start_on("helm", &node_address());
    let dir = e2e_dir().join(format!("helm-{}", op_ns.name));
    std::fs::create_dir_all(&dir).unwrap();
    let chart = repo_root().join("charts/bloodraven");
    let chart = chart.to_str().unwrap();

    // Install, as a user would: --wait until both Deployments are ready.
    let v1 = values(&dir, &op_ns.name, &tenant.name, "text");
    helm(&["install", release, chart, "-n", &op_ns.name, "-f", v1.to_str().unwrap(), "--wait", "--timeout", "5m"]);
    wait_rolled_out(&cluster, &op_ns.name, "bloodraven-operator", T).await;
    wait_rolled_out(&cluster, &op_ns.name, "bloodraven-webhook", T).await;
    let deployments = Api::<Deployment>::namespaced(c.clone(), &op_ns.name);
    for d in ["bloodraven-operator", "bloodraven-webhook"] {
        assert_eq!(deployments.get(d).await.unwrap().spec.unwrap().replicas, Some(2), "{d}");
    }
    let pdbs = Api::<PodDisruptionBudget>::namespaced(c.clone(), &op_ns.name);
    bloodraven_e2e::wait_for("the webhook's PDB to count both replicas", T, || async {
        let s = pdbs.get("bloodraven-webhook").await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        if s.current_healthy == 2 && s.disruptions_allowed == 1 { Ok(()) } else { Err(format!("{s:?}")) }
    })
    .await;

    // The operator becomes leader: one of its Pods holds bloodraven-leader.
    let pods = Api::<Pod>::namespaced(c.clone(), &op_ns.name);
    let operator_pods: Vec<String> = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=bloodraven-operator"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    let leases = Api::<Lease>::namespaced(c.clone(), &op_ns.name);
    bloodraven_e2e::wait_for("an operator Pod to hold the leader Lease", T, || async {
        let lease = leases.get("bloodraven-leader").await.map_err(|e| e.to_string())?;
        let holder = lease.spec.and_then(|s| s.holder_identity).unwrap_or_default();
        if operator_pods.iter().any(|p| holder.starts_with(p.as_str())) {
            Ok(())
        } else {
            Err(format!("holder {holder:?}, pods {operator_pods:?}"))
        }
    })
    .await;

    // Service bloodraven has one endpoint: the leader's Pod, which the
    // leader labels (the chart's selector).
    let leader = bloodraven_e2e::pods::leader_pod(&cluster, &op_ns.name, T).await;
    assert!(operator_pods.contains(&leader), "{leader} among {operator_pods:?}");

    // It bootstraps a group of its selector.
    op_ns.credentials_secret("site-creds", "bloodraven", OPERATOR_DB_PASSWORD).await;
    let name = format!("{}-g", tenant.name);
    create_group(&cluster, &group(&name, &tenant.name, pair.sites(&op_ns.name, "site-creds"), "iad")).await;
    wait_status(&cluster, &name, "bootstrap by the chart's operator", T, |s| is_ready_at(s, "iad", 1)).await;

    // The webhook refuses a hand edit of the fence, even by a cluster admin.
    let groups = cluster.groups();
    let pp = PatchParams::default();
    // Until the API server reaches the webhook through its Service (kube-proxy
    // may not route the new ClusterIP yet: the write then fails closed with
    // `connection refused`, a refusal too, but not the guard's).
    let m =
        bloodraven_e2e::wait_for("the webhook's own refusal through its Service", Duration::from_secs(60), || async {
            let patch = Patch::Merge(json!({"status": {"topologyGeneration": 2}}));
            let m = refusal(groups.patch_status(&name, &pp, &patch).await);
            if m.contains("written only by the operator") { Ok(m) } else { Err(m) }
        })
        .await;
    assert!(m.contains("plannedFailover"), "{m}");
    let now = groups.get_status(&name).await.unwrap().status.unwrap();
    assert_eq!(now.topology_generation, Some(1));

    // The deploy API through Service bloodraven, from a Pod with a projected
    // token, trusting the CA of the certificate the chart issued.
    let deploy_tls = Api::<Secret>::namespaced(c.clone(), &op_ns.name).get("bloodraven-deploy-tls").await.unwrap();
    let ca = String::from_utf8(deploy_tls.data.unwrap()["ca.crt"].0.clone()).unwrap();
    bloodraven_e2e::deploy::service_account(&cluster, &tenant.name, "deployer").await;
    bloodraven_e2e::deploy::database(&cluster, &tenant.name, "counter-app", &name, &[(&tenant.name, "deployer")]).await;
    apply(
        &Api::<ConfigMap>::namespaced(c.clone(), &tenant.name),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bloodraven-ca"}, "data": {"ca.crt": ca}}),
    )
    .await;
    let url = format!("https://bloodraven.{}.svc:8443/deploy/v1/groups/{name}", op_ns.name);
    // Retried as a pipeline retries: a moment without an endpoint (a new
    // leader not yet labelled) or a 503 not_leader is not an answer.
    let body = bloodraven_e2e::pods::deploy_get_from_pod(&cluster, &tenant.name, &url, T).await;
    assert_eq!((body["activeSite"].as_str(), body["topologyGeneration"].as_i64()), (Some("iad"), Some(1)), "{body}");

    // The webhook injects the sidecar into an annotated Job (a dry run: the
    // API server calls the webhook and stores nothing).
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "migrate", "annotations": {
            "bloodraven.shipstream.io/inject": "true",
            "bloodraven.shipstream.io/group": name,
            "bloodraven.shipstream.io/instance": "counter-app"}},
        "spec": {"template": {"spec": {
            "serviceAccountName": "deployer",
            "restartPolicy": "Never",
            "containers": [{"name": "migrate", "image": image("BLOODRAVEN_TOOLS_IMAGE"), "command": ["true"]}],
        }}},
    });
    let job: Job = serde_json::from_value(job).unwrap();
    let jobs = Api::<Job>::namespaced(c.clone(), &tenant.name);
    // Until the operator has recorded the database's claim of the instance.
    let injected = bloodraven_e2e::wait_for("an injected dry-run Job", T, || async {
        jobs.create(&PostParams { dry_run: true, ..PostParams::default() }, &job).await.map_err(|e| e.to_string())
    })
    .await;
    let pod_spec = injected.spec.unwrap().template.spec.unwrap();
    let sidecar = pod_spec
        .init_containers
        .iter()
        .flatten()
        .find(|c| c.name == "bloodraven-sidecar")
        .unwrap_or_else(|| panic!("no sidecar injected: {pod_spec:?}"));
    assert_eq!(sidecar.image.as_deref(), Some(image("BLOODRAVEN_SIDECAR_IMAGE").as_str()));

    // helm upgrade with a changed value: the value reaches the Pods, the
    // chart's certificates are kept (lookup), except one whose recorded
    // expiry is within renewBeforeDays: that one is re-issued by the same CA.
    let validating = Api::<ValidatingWebhookConfiguration>::all(c.clone());
    let secrets = Api::<Secret>::namespaced(c.clone(), &op_ns.name);
    let cert = |s: Secret| s.data.unwrap()["tls.crt"].clone();
    let ca_before = ca_bundle(&validating.get(&config_name).await.unwrap());
    let webhook_cert_before = cert(secrets.get("bloodraven-webhook-tls").await.unwrap());
    let deploy_cert_before = cert(secrets.get("bloodraven-deploy-tls").await.unwrap());
    let soon = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 86_400;
    secrets
        .patch(
            "bloodraven-webhook-tls",
            &pp,
            &Patch::Merge(
                json!({"metadata": {"annotations": {"bloodraven.shipstream.io/not-after": soon.to_string()}}}),
            ),
        )
        .await
        .unwrap();
    let v2 = values(&dir, &op_ns.name, &tenant.name, "json");
    helm(&["upgrade", release, chart, "-n", &op_ns.name, "-f", v2.to_str().unwrap(), "--wait", "--timeout", "5m"]);
    wait_rolled_out(&cluster, &op_ns.name, "bloodraven-operator", T).await;
    let args = deployments.get("bloodraven-operator").await.unwrap().spec.unwrap().template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap();
    assert!(args.contains(&"--log-format=json".to_owned()), "{args:?}");
    assert_eq!(ca_bundle(&validating.get(&config_name).await.unwrap()), ca_before, "the CA is kept across upgrades");
    assert_eq!(
        cert(secrets.get("bloodraven-deploy-tls").await.unwrap()),
        deploy_cert_before,
        "a certificate far from expiry is kept across upgrades"
    );
    let webhook_tls = secrets.get("bloodraven-webhook-tls").await.unwrap();
    let not_after: u64 =
        webhook_tls.metadata.annotations.as_ref().unwrap()["bloodraven.shipstream.io/not-after"].parse().unwrap();
    assert!(not_after > soon + 300 * 86_400, "re-issued for leafDays: not-after {not_after}");
    assert_ne!(cert(webhook_tls), webhook_cert_before, "a certificate near expiry is re-issued on upgrade");
    let m = refusal(groups.patch_status(&name, &pp, &Patch::Merge(json!({"status": {"topologyGeneration": 2}}))).await);
    assert!(m.contains("written only by the operator"), "after the upgrade: {m}");
    bloodraven_e2e::wait_for("a leader after the upgrade", T, || async {
        let pods: Vec<String> = pods
            .list(&ListParams::default().labels("app.kubernetes.io/name=bloodraven-operator"))
            .await
            .map_err(|e| e.to_string())?
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.metadata.name)
            .collect();
        let lease = leases.get("bloodraven-leader").await.map_err(|e| e.to_string())?;
        let holder = lease.spec.and_then(|s| s.holder_identity).unwrap_or_default();
        if pods.iter().any(|p| holder.starts_with(p.as_str())) { Ok(()) } else { Err(format!("{holder:?} {pods:?}")) }
    })
    .await;

    // The group goes first (its cleanup finalizer needs the operator), then
    // helm uninstall leaves none of the chart's objects.
    cluster.delete_group_and_wait(&name, T).await;
    helm(&["uninstall", release, "-n", &op_ns.name, "--wait", "--timeout", "5m"]);
    let instance = format!("app.kubernetes.io/instance={release}");
    let lp = ListParams::default().labels(&instance);
    let ns = op_ns.name.as_str();
    let mut left: Vec<String> = Vec::new();
    macro_rules! leftover {
        ($api:expr, $kind:literal) => {
            for o in $api.list(&lp).await.unwrap().items {
                left.push(format!("{} {}", $kind, o.metadata.name.unwrap_or_default()));
            }
        };
    }
    leftover!(Api::<Deployment>::namespaced(c.clone(), ns), "Deployment");
    leftover!(Api::<Service>::namespaced(c.clone(), ns), "Service");
    leftover!(Api::<Secret>::namespaced(c.clone(), ns), "Secret");
    leftover!(Api::<ServiceAccount>::namespaced(c.clone(), ns), "ServiceAccount");
    leftover!(Api::<Role>::namespaced(c.clone(), ns), "Role");
    leftover!(Api::<RoleBinding>::namespaced(c.clone(), ns), "RoleBinding");
    leftover!(Api::<PodDisruptionBudget>::namespaced(c.clone(), ns), "PodDisruptionBudget");
    leftover!(Api::<k8s_openapi::api::networking::v1::NetworkPolicy>::namespaced(c.clone(), ns), "NetworkPolicy");
    for o in Api::<ClusterRole>::all(c.clone()).list(&ListParams::default()).await.unwrap().items {
        let n = o.metadata.name.unwrap_or_default();
        if n.starts_with(&config_name) {
            left.push(format!("ClusterRole {n}"));
        }
    }
    for o in Api::<ClusterRoleBinding>::all(c.clone()).list(&ListParams::default()).await.unwrap().items {
        let n = o.metadata.name.unwrap_or_default();
        if n.starts_with(&config_name) {
            left.push(format!("ClusterRoleBinding {n}"));
        }
    }
    if validating.get_opt(&config_name).await.unwrap().is_some() {
        left.push(format!("ValidatingWebhookConfiguration {config_name}"));
    }
    if Api::<MutatingWebhookConfiguration>::all(c.clone()).get_opt(&config_name).await.unwrap().is_some() {
        left.push(format!("MutatingWebhookConfiguration {config_name}"));
    }
    assert!(left.is_empty(), "left after helm uninstall: {left:?}");
    // And the Pods are gone (--wait waited for the Deployments' deletion,
    // not their Pods').
    bloodraven_e2e::wait_for("the release's Pods to be gone", T, || async {
        let left = pods.list(&ListParams::default().labels(&instance)).await.map_err(|e| e.to_string())?.items.len();
        if left == 0 { Ok(()) } else { Err(format!("{left} Pods")) }
    })
    .await;
    drop(pair);
}
