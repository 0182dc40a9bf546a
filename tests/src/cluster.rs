//! The API server of the e2e run: an admin client, the CRDs, and per-test namespaces.

use std::path::PathBuf;
use std::time::Duration;

use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::{e2e_dir, install_crypto, repo_root, wait_for};

/// Default password of the operator's account in the MariaDB template.
pub const OPERATOR_DB_PASSWORD: &str = "bloodraven-operator-pw";
/// Password of the replication account `repl` on the test sites (hack/mariadb.sh, hack/mysql.sh).
pub const REPL_DB_PASSWORD: &str = "bloodraven-repl-pw";

/// An admin client of this run's API server, and the server's URL.
async fn admin_client() -> (Client, String) {
    install_crypto();
    let dir = e2e_dir().join("control-plane");
    let kubeconfig = Kubeconfig::read_from(dir.join("kubeconfig"))
        .unwrap_or_else(|e| panic!("failed to read {}/kubeconfig (is the control plane up?): {e}", dir.display()));
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.unwrap();
    let url = config.cluster_url.to_string().trim_end_matches('/').to_owned();
    (Client::try_from(config).unwrap(), url)
}

/// The run's lock on the CRDs, file `crds.lock` in the e2e folder, across
/// the test processes of one run: shared while a test's [`Cluster::connect`]
/// applies the CRDs, exclusive while the tolerant test holds them loosened
/// (a connect in between put the strict schema back under it). Blocks until
/// held; released when the file is dropped.
pub fn crd_lock(exclusive: bool) -> std::fs::File {
    let path = e2e_dir().join("crds.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let locked = if exclusive { file.lock() } else { file.lock_shared() };
    locked.unwrap_or_else(|e| panic!("lock {}: {e}", path.display()));
    file
}

/// The control plane of this e2e run.
#[derive(Clone)]
pub struct Cluster {
    /// Admin client (system:masters).
    pub client: Client,
    /// API server URL.
    pub url: String,
    /// CA bundle path of the API server.
    pub ca_path: PathBuf,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").field("url", &self.url).finish_non_exhaustive()
    }
}

impl Cluster {
    /// Connects as admin and installs (server-side applies) the CRDs.
    pub async fn connect() -> Cluster {
        let (client, url) = admin_client().await;
        let dir = e2e_dir().join("control-plane");
        let cluster = Cluster { client, url, ca_path: dir.join("pki/ca.crt") };
        let _shared = crd_lock(false);
        cluster.install_crds().await;
        cluster
    }

    /// Server-side applies the CRDs from `charts/bloodraven/crds` (also what
    /// restores them after a test loosened them) and waits until they are
    /// established.
    pub async fn install_crds(&self) {
        let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        for file in ["mysqlfailovergroups.yaml", "mysqldatabases.yaml"] {
            let path = repo_root().join("charts/bloodraven/crds").join(file);
            let crd: CustomResourceDefinition =
                serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let name = crd.metadata.name.clone().unwrap();
            api.patch(&name, &PatchParams::apply("bloodraven-e2e").force(), &Patch::Apply(&crd)).await.unwrap();
            wait_crd_established(&api, &name, Duration::from_secs(30)).await;
        }
    }

    /// Creates a namespace `<prefix>-<random>` for one test.
    pub async fn namespace(&self, prefix: &str) -> TestNamespace {
        let name = format!("{prefix}-{}", crate::suffix());
        let api: Api<Namespace> = Api::all(self.client.clone());
        let ns = Namespace {
            metadata: ObjectMeta { name: Some(name.clone()), ..ObjectMeta::default() },
            ..Namespace::default()
        };
        api.create(&PostParams::default(), &ns).await.unwrap();
        TestNamespace { name, client: self.client.clone(), stop_deployments: false }
    }

    /// A client of this API server that authenticates with a bearer `token`
    /// only (e.g. a ServiceAccount's, from [`crate::deploy::token`]): what
    /// that identity may do, not what the admin may.
    pub async fn client_with_token(&self, token: &str) -> Client {
        let kubeconfig: Kubeconfig = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": {"server": self.url, "certificate-authority": self.ca_path}}],
            "users": [{"name": "token", "user": {"token": token}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "token"}}],
            "current-context": "e2e",
        }))
        .unwrap();
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.unwrap();
        Client::try_from(config).unwrap()
    }

    /// The groups API.
    pub fn groups(&self) -> Api<MysqlFailoverGroup> {
        Api::all(self.client.clone())
    }

    /// Deletes a group (best effort; used at the end of a test).
    pub async fn delete_group(&self, name: &str) {
        let _ = self.groups().delete(name, &DeleteParams::default()).await;
    }

    /// Deletes a group and waits up to `timeout` until it is gone: its
    /// cleanup finalizer needs a running operator, so a test that is about
    /// to remove the operator (helm uninstall) deletes its groups this way
    /// first.
    pub async fn delete_group_and_wait(&self, name: &str, timeout: Duration) {
        self.delete_group(name).await;
        let groups = self.groups();
        wait_for("the group to be deleted by the operator's finalizer", timeout, || async {
            match groups.get_opt(name).await {
                Ok(None) => Ok(()),
                Ok(Some(g)) => Err(format!("finalizers {:?}", g.metadata.finalizers)),
                Err(e) => Err(e.to_string()),
            }
        })
        .await;
    }
}

/// A namespace owned by one test.
#[derive(Clone)]
pub struct TestNamespace {
    /// Namespace name.
    pub name: String,
    client: Client,
    /// Whether dropping this handle deletes the namespace's Deployments
    /// ([`TestNamespace::stop_deployments_on_drop`]).
    stop_deployments: bool,
}

impl Drop for TestNamespace {
    /// Deletes the namespace's Deployments when asked to. An operator Pod
    /// outlives its test otherwise: the run's Pod operators (chart installs,
    /// per-test operator Pods) all kept running to the end of the suite,
    /// each probing sites that were gone, renewing its leader Lease and
    /// watching every group, database and namespace, until the API server
    /// answered the last test files in seconds (a CI run failed three of
    /// them on timeouts). The delete runs on a thread of its own with its
    /// own client: the test's runtime is ending. Best effort, bounded by
    /// the client's timeouts; nothing else of the namespace is touched (its
    /// objects stay readable for a post-mortem).
    fn drop(&mut self) {
        if !self.stop_deployments {
            return;
        }
        let namespace = self.name.clone();
        let stop = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
            runtime.block_on(async {
                let (client, _) = admin_client().await;
                let api: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(client, &namespace);
                let all = kube::api::ListParams::default();
                if let Err(e) = api.delete_collection(&DeleteParams::background(), &all).await {
                    eprintln!("could not stop the Deployments of namespace {namespace}: {e}");
                }
            });
        });
        let _ = stop.join();
    }
}

impl std::fmt::Debug for TestNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestNamespace").field("name", &self.name).finish_non_exhaustive()
    }
}

impl TestNamespace {
    /// Has dropping this handle delete the namespace's Deployments (an
    /// operator or webhook Pod the test started), so they stop with the
    /// test (see the `Drop` impl).
    pub fn stop_deployments_on_drop(&mut self) {
        self.stop_deployments = true;
    }

    /// A handle on namespace `name`, which already exists (e.g. the
    /// operator's own `bloodraven`).
    pub fn existing(cluster: &Cluster, name: &str) -> TestNamespace {
        TestNamespace { name: name.to_owned(), client: cluster.client.clone(), stop_deployments: false }
    }

    /// Creates a Secret with `username` and `password` for a site account.
    pub async fn credentials_secret(&self, name: &str, username: &str, password: &str) {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.name);
        let secret = Secret {
            metadata: ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() },
            data: Some(
                [
                    ("username".to_owned(), ByteString(username.as_bytes().to_vec())),
                    ("password".to_owned(), ByteString(password.as_bytes().to_vec())),
                    // The replication account of the site scripts, for repointing.
                    ("replicationUsername".to_owned(), ByteString(b"repl".to_vec())),
                    ("replicationPassword".to_owned(), ByteString(REPL_DB_PASSWORD.as_bytes().to_vec())),
                ]
                .into(),
            ),
            ..Secret::default()
        };
        api.create(&PostParams::default(), &secret).await.unwrap();
    }
}

/// Waits up to `timeout` until CRD `name` is established (its
/// `Established` condition `True`): only then does the API server serve its
/// resources.
pub async fn wait_crd_established(api: &Api<CustomResourceDefinition>, name: &str, timeout: Duration) {
    wait_for(&format!("CRD {name} to be established"), timeout, || async {
        let crd = api.get(name).await.map_err(|e| e.to_string())?;
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established { Ok(()) } else { Err("not established".into()) }
    })
    .await;
}

/// Server-side applies every CRD of the multi-document YAML file `path` as
/// `field_manager` (the same from every test process, so that concurrent
/// applies of the same CRDs agree) and waits until each is established;
/// returns their names. Idempotent.
pub async fn apply_crd_file(cluster: &Cluster, path: &std::path::Path, field_manager: &str) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let api: Api<CustomResourceDefinition> = Api::all(cluster.client.clone());
    let mut docs = vec![String::new()];
    for line in text.lines() {
        if line == "---" {
            docs.push(String::new());
        } else {
            let doc = docs.last_mut().unwrap();
            doc.push_str(line);
            doc.push('\n');
        }
    }
    let mut names = Vec::new();
    for doc in docs.iter().filter(|d| d.lines().any(|l| l.starts_with("kind:"))) {
        let crd: CustomResourceDefinition =
            serde_saphyr::from_str(doc).unwrap_or_else(|e| panic!("a CRD of {}: {e}", path.display()));
        let name = crd.metadata.name.clone().unwrap();
        api.patch(&name, &PatchParams::apply(field_manager).force(), &Patch::Apply(&crd))
            .await
            .unwrap_or_else(|e| panic!("apply CRD {name}: {e}"));
        names.push(name);
    }
    for name in &names {
        wait_crd_established(&api, name, Duration::from_secs(60)).await;
    }
    names
}
