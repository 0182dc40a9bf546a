//! The example app chart (`charts/examples/counter-app`) on the run's real
//! node, installed with helm as a team installs it: charts/bloodraven
//! (operator and webhook, one replica each) in its own namespace, a group
//! bootstrapped on a MariaDB pair the node reaches, then the app chart in a
//! tenant namespace, from app images built by `hack/app-image.sh` from
//! revision folders and imported into the node.
//!
//! Scoped as `helm_install` is: the operator manages only the test's group
//! (its label), and the webhook configurations select only the test's two
//! namespaces and its group, so parallel tests never meet.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::cluster::OPERATOR_DB_PASSWORD;
use crate::fixtures::{create_group, group, is_ready_at, wait_status};
pub use crate::helm::{helm, helm_ok};
use crate::pods::{apply, node_address};
use crate::{Cluster, SitePair, TestNamespace, e2e_dir, repo_root};

/// The app chart's release name (also its MysqlDatabase, the instance).
pub const RELEASE: &str = "counter-app";
/// The schema the app's revisions go to.
pub const SCHEMA: &str = "counter";
const MIGRATOR_PW: &str = "counter-migrator-pw-7";
const T: Duration = Duration::from_secs(240);

/// The first revision every app-chart test installs: the `counters` table.
pub const V1: (&str, &str) = (
    "V1__counters.sql",
    "CREATE TABLE counters (name VARCHAR(64) NOT NULL PRIMARY KEY, value BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB;",
);

/// An app image built from `revisions` (file name, SQL) by
/// `hack/app-image.sh` and imported into the node; returns its tag
/// (repository `localhost/bloodraven/counter-app`).
pub fn app_image(revisions: &[(&str, &str)]) -> String {
    let dir = e2e_dir().join("app-images").join(crate::suffix());
    std::fs::create_dir_all(&dir).unwrap();
    for (name, sql) in revisions {
        std::fs::write(dir.join(name), sql).unwrap();
    }
    // Concurrent imports (threads here, other test files) are serialized by
    // `hack/node.sh import` itself.
    let out = Command::new(repo_root().join("hack/app-image.sh"))
        .arg("import")
        .arg(e2e_dir().join("control-plane"))
        .arg(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        out.status.success(),
        "hack/app-image.sh import failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
    let (repo, tag) = crate::helm::split_reference(&stdout);
    assert_eq!(repo, "localhost/bloodraven/counter-app", "{stdout}");
    tag
}

/// The operator and webhook installed with charts/bloodraven, a group of
/// the test bootstrapped, and what the app chart needs in the tenant
/// namespace: schema [`SCHEMA`] with a `migrator` account on the primary,
/// and Secret `counter-app-db` holding its URL.
#[derive(Debug)]
pub struct AppEnv {
    /// The cluster.
    pub cluster: Cluster,
    /// The operator's (and webhook's) namespace: release `br` of charts/bloodraven.
    pub op_ns: TestNamespace,
    /// The tenant namespace: release [`RELEASE`] of the app chart.
    pub ns: TestNamespace,
    /// The group.
    pub group: String,
    /// The MariaDB sites (the node reaches them on its bridge address).
    pub pair: SitePair,
    dir: PathBuf,
}

impl AppEnv {
    /// Sets it up; names start with `prefix`.
    pub async fn start(prefix: &str) -> AppEnv {
        let cluster = Cluster::connect().await;
        let mut op_ns = cluster.namespace(&format!("{prefix}-op")).await;
        op_ns.stop_deployments_on_drop();
        let ns = cluster.namespace(prefix).await;
        let pair = SitePair::start_on(prefix, &node_address());
        let dir = e2e_dir().join(format!("helm-app-{}", ns.name));
        std::fs::create_dir_all(&dir).unwrap();

        // One webhook Pod: its PodDisruptionBudget would block every drain (the chart refuses that).
        let one =
            json!({"operator": {"replicas": 1}, "webhook": {"replicas": 1, "podDisruptionBudget": {"enabled": false}}});
        let values = crate::helm::bloodraven_values(&dir, "bloodraven-values.yaml", &op_ns.name, &ns.name, &one);
        let chart = repo_root().join("charts/bloodraven");
        helm_ok(&[
            "install",
            "br",
            chart.to_str().unwrap(),
            "-n",
            &op_ns.name,
            "-f",
            values.to_str().unwrap(),
            "--wait",
            "--timeout",
            "5m",
        ]);
        crate::pods::leader_pod(&cluster, &op_ns.name, T).await;

        op_ns.credentials_secret("site-creds", "bloodraven", OPERATOR_DB_PASSWORD).await;
        let name = format!("{}-g", ns.name);
        create_group(&cluster, &group(&name, &ns.name, pair.sites(&op_ns.name, "site-creds"), "iad")).await;
        wait_status(&cluster, &name, "bootstrap by the chart's operator", T, |s| is_ready_at(s, "iad", 1)).await;

        // The app chart's migration Job is refused (fail closed) until the
        // API server reaches the webhook through its new Service: wait for
        // the webhook's own refusal of a status edit, as helm_install does.
        let groups = cluster.groups();
        crate::wait_for("the webhook's own refusal through its Service", Duration::from_secs(90), || async {
            let patch = Patch::Merge(json!({"status": {"topologyGeneration": 2}}));
            let m = crate::webhook::refusal(groups.patch_status(&name, &PatchParams::default(), &patch).await);
            if m.contains("written only by the operator") { Ok(()) } else { Err(m) }
        })
        .await;

        pair.sql(
            "iad",
            &format!(
                "CREATE DATABASE {SCHEMA}; CREATE USER 'migrator'@'%' IDENTIFIED BY '{MIGRATOR_PW}'; \
                 GRANT ALL ON {SCHEMA}.* TO 'migrator'@'%'; GRANT PROCESS ON *.* TO 'migrator'@'%';"
            ),
        );
        let url = format!("mysql://migrator:{MIGRATOR_PW}@{}:{}/{SCHEMA}", pair.iad_host, pair.iad_port);
        apply(
            &Api::<Secret>::namespaced(cluster.client.clone(), &ns.name),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "counter-app-db"},
                   "stringData": {"url": url}}),
        )
        .await;
        AppEnv { cluster, op_ns, ns, group: name, pair, dir }
    }

    /// The app chart's values for image tag `tag`, as a values file.
    pub fn values(&self, tag: &str) -> PathBuf {
        let path = self.dir.join(format!("app-values-{tag}.yaml"));
        std::fs::write(&path, serde_json::to_string_pretty(&self.values_json(tag)).unwrap()).unwrap();
        path
    }

    /// The app chart's values for image tag `tag`.
    pub fn values_json(&self, tag: &str) -> serde_json::Value {
        json!({
            "image": {"repository": "localhost/bloodraven/counter-app", "tag": tag, "pullPolicy": "IfNotPresent"},
            "database": {"failoverGroup": self.group},
            "migrationJob": {
                "databaseSecret": {"name": "counter-app-db"},
                // Short: a failed or stuck run in a test ends soon. The chart
                // refuses a deadline the runner's retries could outlast:
                // 4 x (5 s lock timeout + 15 s backoff) + 60 s = 140 s < 180 s.
                "activeDeadlineSeconds": 180,
                "maxAttempts": 4,
            },
        })
    }

    /// The arguments of `helm install|upgrade RELEASE charts/examples/counter-app
    /// --wait` with image tag `tag` (for a helm run on another thread).
    pub fn app_args(&self, verb: &str, tag: &str) -> Vec<String> {
        let chart = repo_root().join("charts/examples/counter-app");
        let values = self.values(tag);
        [verb, RELEASE, chart.to_str().unwrap(), "-n", &self.ns.name, "-f", values.to_str().unwrap()]
            .into_iter()
            .chain(["--wait", "--timeout", "4m"])
            .map(str::to_owned)
            .collect()
    }

    /// Runs [`AppEnv::app_args`]; returns whether helm succeeded and its output.
    pub fn app(&self, verb: &str, tag: &str) -> (bool, String) {
        let args = self.app_args(verb, tag);
        helm(&args.iter().map(String::as_str).collect::<Vec<_>>())
    }

    /// `version:state` of every history row, in order (`1:applied,2:applied`).
    pub fn history(&self) -> String {
        self.pair
            .sql(
                "iad",
                &format!(
                    "SELECT IFNULL(GROUP_CONCAT(version, ':', state ORDER BY version), '') FROM {SCHEMA}.bloodraven_schema_history"
                ),
            )
            .trim()
            .to_owned()
    }

    /// The app Deployment's pod-template image, or `None` when it does not exist.
    pub async fn deployment_image(&self) -> Option<String> {
        let d = Api::<Deployment>::namespaced(self.cluster.client.clone(), &self.ns.name)
            .get_opt(RELEASE)
            .await
            .unwrap()?;
        d.spec?.template.spec?.containers.first()?.image.clone()
    }

    /// The run's folder for this test (values files).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}
