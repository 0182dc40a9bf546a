//! Pods on the run's real node (`hack/node.sh`: kubelet, containerd, the Job
//! controller, kube-proxy, CoreDNS), with the images `hack/images.sh` and
//! `hack/node-images.sh` built on this machine and imported into the node;
//! `hack/e2e.sh` exports their references. Also the operator as a Pod: a
//! Deployment in namespace `bloodraven` from its image, under the chart's
//! RBAC, behind the Service `bloodraven` (port 8443), as a deploy
//! pipeline calls it from inside the cluster.

use std::fmt::Write as _;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, Service};
use kube::api::{Api, ListParams, LogParams, Patch, PatchParams};
use serde_json::json;

use crate::Cluster;
use crate::deploy::TlsFiles;

/// The operator's namespace and its Service's name, as the chart names them.
pub const OPERATOR_NAMESPACE: &str = "bloodraven";

/// An image reference `hack/e2e.sh` exported (`BLOODRAVEN_BUSYBOX_IMAGE`,
/// `BLOODRAVEN_TOOLS_IMAGE`, `BLOODRAVEN_OPERATOR_IMAGE`, …).
pub fn image(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| panic!("{var} is not set: run the e2e tests with `make test` (hack/e2e.sh brings up the node and imports the images)"))
}

/// The node's bridge address (`BLOODRAVEN_NODE_ADDRESS`): Pods reach host
/// services bound to it.
pub fn node_address() -> String {
    image("BLOODRAVEN_NODE_ADDRESS")
}

/// Server-side applies `obj` (a JSON manifest) with the test's field manager.
pub async fn apply<K>(api: &Api<K>, obj: serde_json::Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = obj["metadata"]["name"].as_str().expect("manifest has a name").to_owned();
    api.patch(&name, &PatchParams::apply("bloodraven-e2e").force(), &Patch::Apply(&obj)).await.unwrap()
}

/// Waits until Job `name` has condition `Complete` or `Failed` True; returns
/// the Job and the condition that ended it (type, reason).
pub async fn wait_job_end(cluster: &Cluster, ns: &str, name: &str, timeout: Duration) -> (Job, String, String) {
    let api: Api<Job> = Api::namespaced(cluster.client.clone(), ns);
    crate::wait_for(&format!("Job {ns}/{name} to end"), timeout, || async {
        let job = api.get(name).await.map_err(|e| e.to_string())?;
        let end = job.status.as_ref().and_then(|s| s.conditions.as_ref()).and_then(|cs| {
            cs.iter()
                .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
                .map(|c| (c.type_.clone(), c.reason.clone().unwrap_or_default()))
        });
        if let Some((t, r)) = end {
            return Ok((job, t, r));
        }
        // Why it has not ended: the Job's own status says little when its
        // Pod is stuck (unscheduled, image missing).
        let pods = Api::<Pod>::namespaced(cluster.client.clone(), ns)
            .list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}")))
            .await
            .map_or_else(
                |e| format!("pods not listed: {e}"),
                |l| l.items.iter().map(pod_summary).collect::<Vec<_>>().join("; "),
            );
        Err(format!("{:?}; pods: [{pods}]", job.status))
    })
    .await
}

/// The Pods of Job `job` (label `batch.kubernetes.io/job-name`).
pub async fn job_pods(cluster: &Cluster, ns: &str, job: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(cluster.client.clone(), ns);
    api.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}"))).await.unwrap().items
}

/// A container's log (through the API server and the kubelet).
pub async fn logs(cluster: &Cluster, ns: &str, pod: &str, container: &str) -> String {
    let api: Api<Pod> = Api::namespaced(cluster.client.clone(), ns);
    api.logs(pod, &LogParams { container: Some(container.into()), ..LogParams::default() }).await.unwrap_or_default()
}

/// One line on where a Pod is stuck, for a wait's failure message: its name,
/// phase, every condition that is not True (with reason and message, e.g.
/// `PodScheduled` refused for a `disk-pressure` taint) and every container
/// waiting or terminated with its reason.
pub fn pod_summary(pod: &Pod) -> String {
    let name = pod.metadata.name.as_deref().unwrap_or("?");
    let Some(status) = pod.status.as_ref() else { return format!("{name}: no status") };
    let mut out = format!("{name}: phase {:?}", status.phase);
    for c in status.conditions.iter().flatten().filter(|c| c.status != "True") {
        let _ = write!(
            out,
            ", {} {} ({}: {})",
            c.type_,
            c.status,
            c.reason.as_deref().unwrap_or(""),
            c.message.as_deref().unwrap_or("")
        );
    }
    let containers = status.init_container_statuses.iter().flatten().chain(status.container_statuses.iter().flatten());
    for cs in containers {
        let Some(state) = cs.state.as_ref() else { continue };
        if let Some(w) = &state.waiting {
            let _ = write!(
                out,
                ", {} waiting ({}: {})",
                cs.name,
                w.reason.as_deref().unwrap_or(""),
                w.message.as_deref().unwrap_or("")
            );
        } else if let Some(t) = &state.terminated {
            let _ = write!(out, ", {} exited {} ({})", cs.name, t.exit_code, t.reason.as_deref().unwrap_or(""));
        }
    }
    out
}

/// Waits until Pod `name` has phase `Succeeded` or `Failed`; returns it.
pub async fn wait_pod_end(cluster: &Cluster, ns: &str, name: &str, timeout: Duration) -> Pod {
    let api: Api<Pod> = Api::namespaced(cluster.client.clone(), ns);
    crate::wait_for(&format!("Pod {ns}/{name} to end"), timeout, || async {
        let pod = api.get(name).await.map_err(|e| e.to_string())?;
        match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Succeeded" | "Failed") => Ok(pod),
            _ => Err(pod_summary(&pod)),
        }
    })
    .await
}

/// Runs the operator as a Deployment in [`OPERATOR_NAMESPACE`] from
/// `BLOODRAVEN_OPERATOR_IMAGE`, under the chart's RBAC, managing groups
/// labelled `E2E_LABEL=label`, with the deploy API on (certificate `tls`)
/// behind Service `bloodraven`; waits until its Pod is Ready. Site
/// credentials Secrets go in the same namespace (the credentials namespace).
pub async fn operator_in_cluster(cluster: &Cluster, label: &str, tls: &TlsFiles) {
    operator_in_namespace(cluster, OPERATOR_NAMESPACE, label, tls).await;
}

/// As [`operator_in_cluster`], in namespace `ns` (Service `bloodraven.<ns>.svc`):
/// tests that run in parallel each get their own operator Pod, since one
/// Deployment serves one group selector.
pub async fn operator_in_namespace(cluster: &Cluster, ns: &str, label: &str, tls: &TlsFiles) {
    operator_replicas_in_namespace(cluster, ns, label, tls, 1).await;
}

/// As [`operator_in_namespace`], with `replicas` Pods (leader election
/// picks one); Service `bloodraven` selects the leader's Pod only, by its
/// label `bloodraven.shipstream.io/leader`, as the chart's does.
pub async fn operator_replicas_in_namespace(cluster: &Cluster, ns: &str, label: &str, tls: &TlsFiles, replicas: i32) {
    let c = cluster.client.clone();
    apply(
        &Api::<Namespace>::all(c.clone()),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )
    .await;
    crate::operator::grant_operator_rbac(cluster, ns).await;
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap();
    apply(
        &Api::<Secret>::namespaced(c.clone(), ns),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bloodraven-deploy-tls", "namespace": ns},
               "type": "kubernetes.io/tls", "stringData": {"tls.crt": read(&tls.cert), "tls.key": read(&tls.key)}}),
    )
    .await;
    let labels = json!({"app.kubernetes.io/name": "bloodraven-operator"});
    let leader = json!({"app.kubernetes.io/name": "bloodraven-operator", LEADER_LABEL: "true"});
    apply(
        &Api::<Service>::namespaced(c.clone(), ns),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "bloodraven", "namespace": ns},
               "spec": {"selector": leader, "ports": [{"name": "deploy", "port": 8443, "targetPort": "deploy"}]}}),
    )
    .await;
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "bloodraven-operator", "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": "bloodraven-operator",
                    "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "operator",
                        "image": image("BLOODRAVEN_OPERATOR_IMAGE"),
                        "imagePullPolicy": "IfNotPresent",
                        "args": [
                            format!("--namespace={ns}"),
                            format!("--group-selector={}={label}", crate::operator::E2E_LABEL),
                            "--deploy-api-enabled",
                            "--tls-cert-file=/tls/tls.crt",
                            "--tls-key-file=/tls/tls.key",
                        ],
                        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                        "ports": [{"name": "deploy", "containerPort": 8443}, {"name": "plain", "containerPort": 8082}],
                        // exec, on the loopback probe listener: nothing outside the Pod
                        // can fill its slots (see serving/src/admin.rs).
                        "readinessProbe": {"exec": {"command": ["/bloodraven-operator", "probe", "/readyz"]}, "periodSeconds": 2},
                        "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                                            "capabilities": {"drop": ["ALL"]}},
                        "volumeMounts": [{"name": "tls", "mountPath": "/tls", "readOnly": true}],
                    }],
                    "volumes": [{"name": "tls", "secret": {"secretName": "bloodraven-deploy-tls"}}],
                }
            }
        }
    });
    let api = Api::<Deployment>::namespaced(c, ns);
    apply(&api, deployment).await;
    // Rolled out: this spec observed, and its replicas updated and Ready
    // (a Deployment left by an earlier run rolls over to this image).
    crate::wait_for("the operator Deployment to roll out", Duration::from_secs(120), || async {
        let d = api.get("bloodraven-operator").await.map_err(|e| e.to_string())?;
        let s = d.status.clone().unwrap_or_default();
        let done = s.observed_generation == d.metadata.generation
            && s.updated_replicas == Some(replicas)
            && s.ready_replicas == Some(replicas)
            && s.replicas == Some(replicas);
        if done { Ok(()) } else { Err(format!("{s:?}")) }
    })
    .await;
    // And the Service has its one endpoint: the leader's Pod.
    leader_pod(cluster, ns, Duration::from_secs(60)).await;
}

/// The label the operator's leader puts on its own Pod.
pub const LEADER_LABEL: &str = "bloodraven.shipstream.io/leader";

/// Waits until exactly one operator Pod of `ns` carries [`LEADER_LABEL`],
/// it is the leader-election Lease's holder, and Service `bloodraven`'s
/// EndpointSlices list exactly its address, ready; returns its name.
pub async fn leader_pod(cluster: &Cluster, ns: &str, timeout: Duration) -> String {
    crate::wait_for(&format!("the leader's Pod to be the one endpoint of {ns}/bloodraven"), timeout, || {
        leader_endpoint(cluster, ns)
    })
    .await
}

/// One look at what [`leader_pod`] waits for: the labelled Pod's name, or
/// what is not so yet.
pub async fn leader_endpoint(cluster: &Cluster, ns: &str) -> Result<String, String> {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let pods = Api::<Pod>::namespaced(cluster.client.clone(), ns);
    let labelled =
        pods.list(&ListParams::default().labels(&format!("{LEADER_LABEL}=true"))).await.map_err(|e| e.to_string())?;
    let [pod] = labelled.items.as_slice() else {
        return Err(format!("{} Pods labelled leader", labelled.items.len()));
    };
    let name = pod.metadata.name.clone().unwrap_or_default();
    let holder = Api::<Lease>::namespaced(cluster.client.clone(), ns)
        .get("bloodraven-leader")
        .await
        .map_err(|e| e.to_string())?
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    if !holder.starts_with(&format!("{name}_")) {
        return Err(format!("Pod {name} is labelled but the Lease holder is {holder:?}"));
    }
    let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap_or_default();
    let list = Api::<EndpointSlice>::namespaced(cluster.client.clone(), ns)
        .list(&ListParams::default().labels("kubernetes.io/service-name=bloodraven"))
        .await
        .map_err(|e| e.to_string())?;
    let endpoints: Vec<(Vec<String>, Option<bool>)> = list
        .items
        .iter()
        .flat_map(|s| s.endpoints.iter())
        .map(|e| (e.addresses.clone(), e.conditions.as_ref().and_then(|c| c.ready)))
        .collect();
    if endpoints == [(vec![ip.clone()], Some(true))] {
        Ok(name)
    } else {
        Err(format!("endpoints {endpoints:?}, leader {name} at {ip}"))
    }
}

/// What a pipeline in namespace `ns` needs to call the deploy API about
/// `group` from a Pod: ServiceAccount `deployer`, MysqlDatabase
/// `counter-app` of the group listing it in `deploymentClients`, and
/// ConfigMap `bloodraven-ca` holding the CA of `tls` (key `ca.crt`).
pub async fn deploy_client(cluster: &Cluster, ns: &str, group: &str, tls: &TlsFiles) {
    crate::deploy::service_account(cluster, ns, "deployer").await;
    crate::deploy::database(cluster, ns, "counter-app", group, &[(ns, "deployer")]).await;
    crate::deploy::wait_claimed(cluster, group, ns, "counter-app", Duration::from_secs(60)).await;
    let ca = std::fs::read_to_string(&tls.ca).unwrap_or_else(|e| panic!("{}: {e}", tls.ca.display()));
    apply(
        &Api::<ConfigMap>::namespaced(cluster.client.clone(), ns),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bloodraven-ca"},
               "data": {"ca.crt": ca}}),
    )
    .await;
}

/// A tenant namespace with a group bootstrapped by an operator Pod in its
/// own namespace (deploy API behind `bloodraven.<op ns>.svc`), the
/// `deployer` ServiceAccount listed by MysqlDatabase `counter-app`, and the
/// CA ([`deploy_client`]): what a migration Job Pod needs.
#[derive(Debug)]
pub struct PodScenario {
    /// The cluster.
    pub cluster: crate::Cluster,
    /// The tenant namespace.
    pub ns: crate::TestNamespace,
    /// The operator Pod's namespace (its own per test: one Deployment serves one group selector).
    pub op_ns: crate::TestNamespace,
    /// The group's name.
    pub group: String,
    /// The deploy API's certificate files.
    pub tls: TlsFiles,
    /// The MariaDB sites (stopped when dropped).
    pub pair: crate::SitePair,
}

impl PodScenario {
    /// Sets it up; names start with `prefix`.
    pub async fn start(prefix: &str) -> PodScenario {
        use crate::fixtures::{create_group, group, is_ready_at, wait_status};
        let cluster = crate::Cluster::connect().await;
        let ns = cluster.namespace(prefix).await;
        let mut op_ns = cluster.namespace(&format!("{prefix}-op")).await;
        op_ns.stop_deployments_on_drop();
        let pair = crate::SitePair::start_on(prefix, &node_address());
        let tls = crate::deploy::tls_files_for(
            &pair.dir().join("tls"),
            &format!("DNS:bloodraven.{0}.svc,DNS:bloodraven.{0}.svc.cluster.local", op_ns.name),
        );
        operator_in_namespace(&cluster, &op_ns.name, &ns.name, &tls).await;
        op_ns.credentials_secret("site-creds", "bloodraven", crate::cluster::OPERATOR_DB_PASSWORD).await;
        let name = format!("{}-g", ns.name);
        create_group(&cluster, &group(&name, &ns.name, pair.sites(&op_ns.name, "site-creds"), "iad")).await;
        wait_status(&cluster, &name, "bootstrap by the operator Pod", Duration::from_secs(180), |s| {
            is_ready_at(s, "iad", 1)
        })
        .await;
        deploy_client(&cluster, &ns.name, &name, &tls).await;
        PodScenario { cluster, ns, op_ns, group: name, tls, pair }
    }
}

/// Pod `pipeline` as a pipeline in a tenant namespace runs: ServiceAccount
/// `deployer`, a projected token of audience `bloodraven-deploy` at
/// `/var/run/secrets/bloodraven/token`, ConfigMap `bloodraven-ca` at `/ca`,
/// the tools image (curl, busybox) running `script` with `/bin/sh -c`.
pub fn pipeline_pod(script: &str) -> serde_json::Value {
    json!({
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
    })
}

/// GETs `url` (a deploy API address inside the cluster) from
/// [`pipeline_pod`] in namespace `ns` with its token and CA, asking once a
/// second for 30 s until it answers 200; returns the JSON body. Panics with
/// the Pod's log when it never does.
pub async fn deploy_get_from_pod(cluster: &Cluster, ns: &str, url: &str, timeout: Duration) -> serde_json::Value {
    let script = format!(
        "for i in $(seq 30); do \
           s=$(curl -sS -o /tmp/body -w '%{{http_code}}' --cacert /ca/ca.crt \
               -H \"Authorization: Bearer $(cat /var/run/secrets/bloodraven/token)\" {url}); \
           [ \"$s\" = 200 ] && {{ cat /tmp/body; echo; echo status=$s; exit 0; }}; sleep 1; \
         done; cat /tmp/body; echo; echo status=$s; exit 1"
    );
    apply(&Api::<Pod>::namespaced(cluster.client.clone(), ns), pipeline_pod(&script)).await;
    let ended = wait_pod_end(cluster, ns, "pipeline", timeout).await;
    let out = logs(cluster, ns, "pipeline", "pipeline").await;
    assert_eq!(ended.status.and_then(|s| s.phase).as_deref(), Some("Succeeded"), "{out}");
    let (body, status) = out.trim().rsplit_once('\n').unwrap_or_default();
    assert_eq!(status, "status=200", "{out}");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {out}"))
}
