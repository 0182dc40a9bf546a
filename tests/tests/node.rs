//! The run's cluster has a real node. Jobs that must fail closed
//! behave as Kubernetes specifies (native sidecars, `backoffLimit: 0`,
//! `activeDeadlineSeconds`); namespaces get their `default` ServiceAccount
//! and finalize; and a Pod reaches the operator, itself a Pod from its image,
//! through `https://bloodraven.bloodraven.svc:8443` with a projected token
//! of audience `bloodraven-deploy`, as a deploy pipeline does.
//!
//! And the node is no way onto the host for a tenant: Pod Security admission
//! (`baseline`, hack/control-plane.sh) refuses a namespace-admin's Pods that
//! ask for privileges, the host's namespaces or its file system, while a
//! plain Pod runs; and from the pod network, kube-proxy's and kubelet's
//! health and metrics ports are closed (they listen on the host's loopback).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test

use std::time::Duration;

use bloodraven_e2e::cluster::OPERATOR_DB_PASSWORD;
use bloodraven_e2e::deploy::{service_account, tls_files_for, token};
use bloodraven_e2e::fixtures::{create_group, group, is_ready_at, wait_status};
use bloodraven_e2e::pods::{
    OPERATOR_NAMESPACE, apply, image, job_pods, logs, node_address, operator_in_cluster, wait_job_end, wait_pod_end,
};
use bloodraven_e2e::{Cluster, SitePair, TestNamespace};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
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

/// Two operator replicas: Service `bloodraven` sends to the leader's Pod
/// only (the label the leader keeps on it; a follower would answer
/// `503 not_leader`), and follows the next leader when that Pod goes.
#[tokio::test]
async fn with_two_replicas_the_service_sends_to_the_leader_only_and_follows_the_next() {
    let cluster = Cluster::connect().await;
    let mut ns = cluster.namespace("leadersvc").await;
    ns.stop_deployments_on_drop();
    let dir = bloodraven_e2e::e2e_dir().join("leadersvc").join(&ns.name);
    let tls = tls_files_for(&dir, &format!("DNS:bloodraven.{}.svc", ns.name));
    bloodraven_e2e::pods::operator_replicas_in_namespace(&cluster, &ns.name, &ns.name, &tls, 2).await;
    let first = bloodraven_e2e::pods::leader_pod(&cluster, &ns.name, T).await;
    let pods = Api::<Pod>::namespaced(cluster.client.clone(), &ns.name);
    // A graceful delete, as a rollout or a drain does: the leader releases its Lease.
    pods.delete(&first, &DeleteParams::default()).await.unwrap();
    let next = bloodraven_e2e::wait_for("the next leader's Pod to be the one endpoint", T, || async {
        match bloodraven_e2e::pods::leader_endpoint(&cluster, &ns.name).await {
            Ok(name) if name != first => Ok(name),
            Ok(name) => Err(format!("{name} still the endpoint")),
            Err(e) => Err(e),
        }
    })
    .await;
    assert_ne!(next, first);
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
    let mut operator_ns = TestNamespace::existing(&cluster, OPERATOR_NAMESPACE);
    // Its operator Pod stops with the test; the namespace stays.
    operator_ns.stop_deployments_on_drop();
    // Named after the tenant: the operator's namespace outlives the run's tests.
    let creds = format!("{}-creds", ns.name);
    operator_ns.credentials_secret(&creds, "bloodraven", OPERATOR_DB_PASSWORD).await;
    let name = format!("{}-g", ns.name);
    create_group(&cluster, &group(&name, &ns.name, pair.sites(OPERATOR_NAMESPACE, &creds), "iad")).await;
    wait_status(&cluster, &name, "bootstrap by the operator Pod", T, |s| is_ready_at(s, "iad", 1)).await;

    bloodraven_e2e::pods::deploy_client(&cluster, &ns.name, &name, &tls).await;
    let url = format!("https://bloodraven.{OPERATOR_NAMESPACE}.svc:8443/deploy/v1/groups/{name}");
    let body = bloodraven_e2e::pods::deploy_get_from_pod(&cluster, &ns.name, &url, T).await;
    assert_eq!((body["activeSite"].as_str(), body["topologyGeneration"].as_i64()), (Some("iad"), Some(1)), "{body}");

    cluster.delete_group(&name).await;
}

/// A Pod of one busybox container `c` with `spec` merged into its spec and
/// `security` as the container's securityContext; a volume `host`, when
/// `spec` has one, is mounted at /host.
fn host_pod(name: &str, spec: &serde_json::Value, security: &serde_json::Value) -> Pod {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": image("BLOODRAVEN_BUSYBOX_IMAGE"), "imagePullPolicy": "IfNotPresent",
                            "command": ["sleep", "3600"], "securityContext": security}],
        },
    });
    for (k, v) in spec.as_object().unwrap() {
        pod["spec"][k] = v.clone();
    }
    if pod["spec"]["volumes"].is_array() {
        pod["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "host", "mountPath": "/host"}]);
    }
    serde_json::from_value(pod).unwrap()
}

/// ServiceAccount `name` in `ns` with RBAC's `admin` role there and nothing
/// else (a namespace-admin), and a client that authenticates with its own
/// token; returns once that client may list Pods (its RoleBinding reached the
/// authorizer) and sees the namespace's `default` ServiceAccount (without it
/// the ServiceAccount admission plugin, which runs before Pod Security,
/// refuses every Pod).
async fn namespace_admin(cluster: &Cluster, ns: &str, name: &str) -> kube::Client {
    service_account(cluster, ns, name).await;
    apply(
        &Api::<RoleBinding>::namespaced(cluster.client.clone(), ns),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": format!("{name}-admin")},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
               "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]}),
    )
    .await;
    let client = cluster.client_with_token(&token(cluster, ns, name, &[]).await).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    bloodraven_e2e::wait_for(&format!("{ns}/{name} to list Pods"), T, || async {
        pods.list(&ListParams::default()).await.map(drop).map_err(|e| e.to_string())
    })
    .await;
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    bloodraven_e2e::wait_for("the default ServiceAccount", T, || async {
        sas.get("default").await.map(drop).map_err(|e| e.to_string())
    })
    .await;
    client
}

/// The playground's attack, replayed: a ServiceAccount with RBAC's `admin`
/// role in its own namespace (and nothing else) created a privileged Pod
/// with the host's network and PIDs and `/` mounted, and read the cluster's
/// keys, the sites' data and etcd from it. Pod Security admission
/// (`baseline`, every namespace) now refuses each of those asks on its own,
/// with a 403 that names it; the tenant cannot relabel its namespace out of
/// `baseline`; and its plain Pod still runs, reaches a host service on the
/// node address (CoreDNS's readiness port), but not kube-proxy's metrics and
/// health ports nor kubelet's health port, which listen on the host's loopback.
#[tokio::test]
async fn a_namespace_admin_is_refused_host_pods_and_its_plain_pod_runs() {
    let cluster = Cluster::connect().await;
    let ns = cluster.namespace("podsec").await;
    // The tenant's own token: everything below is what it may do, not the admin.
    let tenant = namespace_admin(&cluster, &ns.name, "tenant").await;
    let pods: Api<Pod> = Api::namespaced(tenant.clone(), &ns.name);

    let host_root = json!({"volumes": [{"name": "host", "hostPath": {"path": "/"}}]});
    let cases = [
        (
            host_pod("privileged", &json!({}), &json!({"privileged": true})),
            vec![r#"privileged (container "c" must not set securityContext.privileged=true)"#],
        ),
        (host_pod("host-path", &host_root, &json!({})), vec![r#"hostPath volumes (volume "host")"#]),
        (
            host_pod("host-network", &json!({"hostNetwork": true}), &json!({})),
            vec!["host namespaces (hostNetwork=true)"],
        ),
        // The attack's Pod, all at once.
        (
            host_pod(
                "attack",
                &json!({"hostNetwork": true, "hostPID": true, "volumes": host_root["volumes"]}),
                &json!({"privileged": true}),
            ),
            vec![
                "host namespaces (hostNetwork=true, hostPID=true)",
                r#"privileged (container "c" must not set securityContext.privileged=true)"#,
                r#"hostPath volumes (volume "host")"#,
            ],
        ),
    ];
    let admin: Api<Pod> = Api::namespaced(cluster.client.clone(), &ns.name);
    for (pod, fragments) in cases {
        let name = pod.metadata.name.clone().unwrap();
        match pods.create(&PostParams::default(), &pod).await {
            Err(kube::Error::Api(s)) => {
                assert_eq!(s.code, 403, "{name}: {s:?}");
                assert!(s.message.contains(r#"violates PodSecurity "baseline:latest""#), "{name}: {}", s.message);
                for f in fragments {
                    assert!(s.message.contains(f), "{name}: no `{f}` in: {}", s.message);
                }
            }
            other => panic!("the tenant's Pod {name} was not refused: {other:?}"),
        }
        assert!(admin.get_opt(&name).await.unwrap().is_none(), "{name} exists");
    }

    // Pod Security's per-namespace override is a Namespace label, which the
    // tenant may not set.
    let patch = json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}});
    match Api::<Namespace>::all(tenant).patch(&ns.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "{s:?}");
            assert!(s.message.contains(r#"cannot patch resource "namespaces""#), "{}", s.message);
        }
        other => panic!("the tenant relabelled its namespace: {other:?}"),
    }

    // A plain Pod (runs as root, no securityContext: baseline allows it,
    // `restricted` only warns) runs. It reaches a host service on the node
    // address, so a refused port there is that port's binding.
    let addr = node_address();
    let script = format!(
        "for p in 8181/ready 10249/metrics 10256/healthz 10248/healthz; do \
           curl -sS --max-time 5 -o /dev/null http://{addr}:$p; echo \"port $p exit=$?\"; done"
    );
    let plain: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain"},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "plain", "image": image("BLOODRAVEN_TOOLS_IMAGE"), "imagePullPolicy": "IfNotPresent",
            "command": ["/bin/sh", "-c", script],
        }]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &plain).await.unwrap();
    let ended = wait_pod_end(&cluster, &ns.name, "plain", T).await;
    let out = logs(&cluster, &ns.name, "plain", "plain").await;
    assert_eq!(ended.status.and_then(|s| s.phase).as_deref(), Some("Succeeded"), "{out}");
    let exit = |port: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("port {port} exit=")))
            .unwrap_or_else(|| panic!("no result for {port}: {out}"))
            .to_owned()
    };
    assert_eq!(exit("8181/ready"), "0", "CoreDNS's readiness on the node address: {out}");
    for port in ["10249/metrics", "10256/healthz", "10248/healthz"] {
        // curl's 7: connection refused (nothing listens there).
        assert_eq!(exit(port), "7", "{port} on the node address: {out}");
    }
}
