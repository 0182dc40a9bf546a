//! The example app chart synced by a real Argo CD ([`crate::argocd`]) on
//! the run's node: charts/bloodraven (operator and webhook) installed with
//! helm, a group on real sites, the database record made by the platform
//! team (under Argo CD the chart skips it), and an Application of
//! `charts/examples/counter-app` from a chart repository on 127.0.0.1, in
//! a tenant namespace of the test.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Service, ServiceAccount};
use kube::api::Api;
use serde_json::{Value, json};

use crate::app::{AppEnv, RELEASE, SCHEMA};
use crate::argocd::{ArgoCd, ChartRepo, counter_app_chart};
use crate::pods::{apply, job_pods, logs};
use crate::{TestNamespace, wait_for};

/// The migration Job's name (`<release>-migrate`).
pub const JOB: &str = "counter-app-migrate";
const T: Duration = Duration::from_secs(240);

/// An [`AppEnv`] with Argo CD and the chart repository.
#[derive(Debug)]
pub struct ArgoApp {
    /// The operator, the webhook, the group, the sites, the tenant namespace.
    pub env: AppEnv,
    /// Argo CD.
    pub argo: ArgoCd,
    /// The chart repository Argo CD reads.
    pub repo: ChartRepo,
    _argo_ns: TestNamespace,
}

impl ArgoApp {
    /// Sets it up; names start with `prefix`. The MysqlDatabase
    /// [`RELEASE`] and the migration Job's ServiceAccount are created as a
    /// platform team creates them, with the labels a Helm install of the
    /// chart gives them (a team moving from Helm to Argo CD keeps them).
    pub async fn start(prefix: &str) -> ArgoApp {
        let env = AppEnv::start(prefix).await;
        let mut argo_ns = env.cluster.namespace(&format!("{prefix}-argo")).await;
        argo_ns.stop_deployments_on_drop();
        let labels = json!({"app.kubernetes.io/name": "counter-app", "app.kubernetes.io/instance": RELEASE,
                            "app.kubernetes.io/managed-by": "Helm"});
        apply(
            &Api::<ServiceAccount>::namespaced(env.cluster.client.clone(), &env.ns.name),
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": JOB, "labels": labels}, "automountServiceAccountToken": false}),
        )
        .await;
        apply(
            &Api::<bloodraven_api::v1alpha1::MysqlDatabase>::namespaced(env.cluster.client.clone(), &env.ns.name),
            json!({"apiVersion": "bloodraven.shipstream.io/v1alpha1", "kind": "MysqlDatabase",
                   "metadata": {"name": RELEASE, "labels": labels},
                   "spec": {"failoverGroupRef": {"name": env.group}, "schema": SCHEMA,
                            "deploymentClients": [{"namespace": env.ns.name, "serviceAccount": JOB}]}}),
        )
        .await;
        let services = Api::<Service>::namespaced(env.cluster.client.clone(), &env.ns.name);
        wait_for("the operator's counter-app-primary Service", T, || async {
            services.get(&format!("{RELEASE}-primary")).await.map(|_| ()).map_err(|e| e.to_string())
        })
        .await;
        let repo = ChartRepo::serve(&counter_app_chart(), &env.dir().join("chart-repo")).await;
        let argo = ArgoCd::start(&env.cluster, &argo_ns, &[&env.ns.name]).await;
        ArgoApp { env, argo, repo, _argo_ns: argo_ns }
    }

    /// Creates the Application [`RELEASE`] at image tag `tag`, with
    /// `sync_policy`.
    pub async fn create(&self, tag: &str, sync_policy: Value) {
        self.argo
            .application(RELEASE, &self.repo, "counter-app", &self.env.ns.name, self.env.values_json(tag), sync_policy)
            .await;
    }

    /// `startedAt` of the Application's last operation ("" before any).
    pub async fn last_started(&self) -> String {
        self.argo.operation_state(RELEASE).await["startedAt"].as_str().unwrap_or_default().to_owned()
    }

    /// Asks for a sync and waits for it to end; returns its operation
    /// state and how long it took from the request.
    pub async fn sync(&self) -> (Value, Duration) {
        let after = self.last_started().await;
        let asked = Instant::now();
        self.argo.request_sync(RELEASE).await.unwrap();
        let state = self.argo.wait_operation_end(RELEASE, &after, T).await;
        (state, asked.elapsed())
    }

    /// UIDs of the MysqlDatabase and of its `-primary` Service.
    pub async fn record_uids(&self) -> (String, String) {
        let client = self.env.cluster.client.clone();
        let db = Api::<bloodraven_api::v1alpha1::MysqlDatabase>::namespaced(client.clone(), &self.env.ns.name)
            .get(RELEASE)
            .await
            .unwrap();
        let svc =
            Api::<Service>::namespaced(client, &self.env.ns.name).get(&format!("{RELEASE}-primary")).await.unwrap();
        (db.metadata.uid.unwrap(), svc.metadata.uid.unwrap())
    }

    /// The migration Job's Pod, its runner's and its sidecar's logs.
    pub async fn job_logs(&self) -> (k8s_openapi::api::core::v1::Pod, String, String) {
        let pods = job_pods(&self.env.cluster, &self.env.ns.name, JOB).await;
        let pod = pods.into_iter().next().unwrap_or_else(|| panic!("no Pod of Job {JOB}"));
        let name = pod.metadata.name.clone().unwrap();
        let runner = logs(&self.env.cluster, &self.env.ns.name, &name, "migrate").await;
        let sidecar = logs(&self.env.cluster, &self.env.ns.name, &name, "bloodraven-sidecar").await;
        (pod, runner, sidecar)
    }

    /// The migration Job's UID, if it exists.
    pub async fn job_uid(&self) -> Option<String> {
        Api::<k8s_openapi::api::batch::v1::Job>::namespaced(self.env.cluster.client.clone(), &self.env.ns.name)
            .get_opt(JOB)
            .await
            .unwrap()
            .and_then(|j| j.metadata.uid)
    }
}

impl ArgoApp {
    /// Follows the logs of the migration Job's running Pod, runner and
    /// sidecar, until their containers end (or the Pod is deleted): the
    /// whole log of a Pod that will not be there to read afterwards.
    pub async fn follow_job_logs(&self) -> tokio::task::JoinHandle<(String, String)> {
        let pods = job_pods(&self.env.cluster, &self.env.ns.name, JOB).await;
        let pod = pods.into_iter().next().unwrap_or_else(|| panic!("no Pod of Job {JOB}"));
        let name = pod.metadata.name.unwrap();
        let api =
            Api::<k8s_openapi::api::core::v1::Pod>::namespaced(self.env.cluster.client.clone(), &self.env.ns.name);
        let follow = move |container: &'static str| {
            let (api, name) = (api.clone(), name.clone());
            async move {
                use futures::{AsyncBufReadExt as _, StreamExt as _};
                let params =
                    kube::api::LogParams { container: Some(container.into()), follow: true, ..Default::default() };
                let Ok(stream) = api.log_stream(&name, &params).await else { return String::new() };
                stream.lines().filter_map(|l| async { l.ok() }).collect::<Vec<_>>().await.join("\n")
            }
        };
        tokio::spawn(async move { tokio::join!(follow("migrate"), follow("bloodraven-sidecar")) })
    }

    /// The deploy lease slots (migration mutex, failover-hold) that have a
    /// holder, as `operationId` per slot, in the operator's namespace.
    pub async fn held_slots(&self) -> Vec<String> {
        use bloodraven_api::names::deploy_lease::{ROLE_LABEL, ROLE_SLOT};
        let leases = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
            self.env.cluster.client.clone(),
            &self.env.op_ns.name,
        );
        let list =
            leases.list(&kube::api::ListParams::default().labels(&format!("{ROLE_LABEL}={ROLE_SLOT}"))).await.unwrap();
        list.items.into_iter().filter_map(|l| l.spec?.holder_identity.filter(|h| !h.is_empty())).collect()
    }

    /// Blocks until a session of the migration's account runs `DO SLEEP`
    /// on the active site.
    pub async fn wait_sleeping(&self) {
        wait_for("the migration's SLEEP to run", T, || async {
            let n = self.sleeping();
            if n == 1 { Ok(()) } else { Err(format!("{n} sessions sleeping; {}", self.argo.tail())) }
        })
        .await;
    }

    /// Sessions of the migration's account running `DO SLEEP` on the active site.
    pub fn sleeping(&self) -> usize {
        self.env
            .pair
            .sql(
                "iad",
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'migrator' AND INFO LIKE 'DO SLEEP%'",
            )
            .trim()
            .parse()
            .unwrap_or(usize::MAX)
    }
}
