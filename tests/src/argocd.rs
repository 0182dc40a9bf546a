//! Argo CD's application controller and repo server, with a Redis of their
//! own, as host processes against the run's API server, and a Helm chart
//! repository for them to read the example chart from
//! (tests/tests/argocd_app.rs).
//!
//! `hack/build-argocd.sh` builds both from the github.com/argoproj/argo-cd/v3
//! Go module and puts the module's CRDs beside them;
//! `BLOODRAVEN_ARGOCD_BIN_DIR` names that folder. Redis is Debian's
//! `redis-server`, the chart repository `helm package` and `helm repo index`
//! served by Python's `http.server`, all on 127.0.0.1. Argo CD's API server
//! (and its UI and CLI), Dex, the notifications and ApplicationSet
//! controllers and the commit server are not run: a sync does not need
//! them. A sync is asked for as the API server itself asks for it
//! (`argocd app sync` writes `operation` on the Application, which the
//! controller carries out), or by an automated sync policy.
//!
//! Each instance belongs to one test: its Applications, settings and
//! cluster Secret live in a namespace of the test, and the cluster Secret's
//! `namespaces` limits what the controller watches and manages to the
//! test's tenant namespace, so that tests sharing the cluster never meet.
//! The controller runs as the cluster admin (the run's kubeconfig), and the
//! cluster Secret holds the admin's client certificate, as an Argo CD
//! installation holds its cluster's credentials.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

use crate::pods::apply;
use crate::{Cluster, TestNamespace, e2e_dir, free_port, repo_root, wait_for};

/// Field manager of the CRDs' server-side apply (the same from every test
/// process, so that concurrent applies of the same CRDs agree).
const FIELD_MANAGER: &str = "bloodraven-e2e-argocd";

/// The folder of `hack/build-argocd.sh`'s output: `BLOODRAVEN_ARGOCD_BIN_DIR`
/// (controller, repo-server, crds.yaml).
pub fn bin_dir() -> PathBuf {
    let Some(dir) = std::env::var_os("BLOODRAVEN_ARGOCD_BIN_DIR").map(PathBuf::from) else {
        panic!(
            "BLOODRAVEN_ARGOCD_BIN_DIR is not set: it names the folder hack/build-argocd.sh prints \
             (Argo CD's application controller, repo server and CRDs); hack/e2e.sh sets it"
        )
    };
    for file in ["controller", "repo-server", "crds.yaml"] {
        assert!(
            dir.join(file).exists(),
            "{} is missing: BLOODRAVEN_ARGOCD_BIN_DIR must be the folder hack/build-argocd.sh prints",
            dir.join(file).display()
        );
    }
    dir
}

/// A child process killed when dropped, and its log file.
#[derive(Debug)]
struct Process {
    _child: Child,
    log: PathBuf,
}

fn spawn(program: &Path, args: &[String], envs: &[(&str, String)], log: PathBuf) -> Process {
    let file = std::fs::File::create(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null()).stdout(file.try_clone().unwrap()).stderr(file).kill_on_drop(true);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let child = cmd.spawn().unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    Process { _child: child, log }
}

/// The last `n` lines of a log file, headed by its path.
fn tail_of(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    format!("--- {} ---\n{}", path.display(), lines[lines.len().saturating_sub(n)..].join("\n"))
}

/// A Helm chart repository on 127.0.0.1 holding one packaged chart
/// (`helm package`, `helm repo index`), served by `python3 -m http.server`;
/// stopped when dropped.
#[derive(Debug)]
pub struct ChartRepo {
    _server: Process,
    /// The repository's URL (`http://127.0.0.1:PORT`).
    pub url: String,
    /// The packaged chart's version (its Chart.yaml's).
    pub version: String,
}

impl ChartRepo {
    /// Packages `chart` into `dir` and serves `dir`.
    pub async fn serve(chart: &Path, dir: &Path) -> ChartRepo {
        std::fs::create_dir_all(dir).unwrap();
        let port = free_port();
        let url = format!("http://127.0.0.1:{port}");
        let out = crate::helm::helm_ok(&["package", chart.to_str().unwrap(), "-d", dir.to_str().unwrap()]);
        let packaged = out.trim().rsplit(": ").next().unwrap_or_default().to_owned();
        let version = packaged
            .rsplit_once('-')
            .and_then(|(_, v)| v.strip_suffix(".tgz"))
            .unwrap_or_else(|| panic!("helm package said {out:?}"))
            .to_owned();
        crate::helm::helm_ok(&["repo", "index", dir.to_str().unwrap(), "--url", &url]);
        let server = spawn(
            Path::new("python3"),
            &[
                "-m".into(),
                "http.server".into(),
                "--bind".into(),
                "127.0.0.1".into(),
                "--directory".into(),
                dir.to_str().unwrap().into(),
                port.to_string(),
            ],
            &[],
            dir.with_extension("log"),
        );
        let index = format!("{url}/index.yaml");
        wait_for(&format!("the chart repository at {url}"), Duration::from_secs(30), || async {
            let r = reqwest::get(&index).await.map_err(|e| e.to_string())?;
            if r.status().is_success() { Ok(()) } else { Err(r.status().to_string()) }
        })
        .await;
        ChartRepo { _server: server, url, version }
    }
}

/// Argo CD's application controller and repo server, with their Redis,
/// scoped to one test; stopped when dropped.
#[derive(Debug)]
pub struct ArgoCd {
    /// The namespace of the Applications, the settings and the cluster Secret.
    pub namespace: String,
    /// The destination server of the Applications (the run's API server URL).
    pub server: String,
    cluster: Cluster,
    processes: Vec<Process>,
}

impl ArgoCd {
    /// Applies Argo CD's CRDs, writes its settings and a cluster Secret
    /// for the run's API server limited to `managed` namespaces, and starts
    /// Redis, the repo server and the application controller, the
    /// Applications' namespace being `ns`.
    pub async fn start(cluster: &Cluster, ns: &TestNamespace, managed: &[&str]) -> ArgoCd {
        let bin = bin_dir();
        let names = crate::cluster::apply_crd_file(cluster, &bin.join("crds.yaml"), FIELD_MANAGER).await;
        assert!(names.iter().any(|n| n == "applications.argoproj.io"), "crds.yaml holds {names:?}");

        let server = write_settings(cluster, &ns.name, managed).await;
        let kubeconfig_path = e2e_dir().join("control-plane/kubeconfig");

        let logs = e2e_dir().join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        let work = e2e_dir().join(format!("argocd-{}", ns.name));
        std::fs::create_dir_all(work.join("tmp")).unwrap();
        let log = |name: &str| logs.join(format!("{}-argocd-{name}.log", ns.name));
        let port = || free_port().to_string();

        let redis_port = port();
        let redis = spawn(
            Path::new("redis-server"),
            &["--port", &redis_port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"].map(str::to_owned),
            &[],
            log("redis"),
        );
        let redis_addr = format!("127.0.0.1:{redis_port}");

        // The repo server runs `helm` from its PATH.
        let helm = PathBuf::from(crate::pods::image("BLOODRAVEN_HELM"));
        let path = format!(
            "{}:{}",
            helm.parent().unwrap().display(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
        );
        let repo_port = port();
        let repo_server = spawn(
            &bin.join("repo-server"),
            &[
                "--redis",
                &redis_addr,
                "--address",
                "127.0.0.1",
                "--port",
                &repo_port,
                "--metrics-address",
                "127.0.0.1",
                "--metrics-port",
                &port(),
                "--disable-tls",
                "--logformat",
                "text",
            ]
            .map(str::to_owned),
            &[
                ("PATH", path),
                ("TMPDIR", work.join("tmp").display().to_string()),
                ("HOME", work.display().to_string()),
                // No GnuPG on the host to verify commits with; nothing here is signed.
                ("ARGOCD_GPG_ENABLED", "false".into()),
            ],
            log("repo-server"),
        );
        let controller = spawn(
            &bin.join("controller"),
            &[
                "--kubeconfig",
                kubeconfig_path.to_str().unwrap(),
                "--namespace",
                &ns.name,
                "--redis",
                &redis_addr,
                "--repo-server",
                &format!("127.0.0.1:{repo_port}"),
                "--repo-server-plaintext",
                "--metrics-port",
                &port(),
                // Refresh every 30 s rather than every 2 to 3 minutes.
                "--app-resync",
                "30",
                "--app-resync-jitter",
                "5",
                "--logformat",
                "text",
            ]
            .map(str::to_owned),
            &[("HOME", work.display().to_string())],
            log("controller"),
        );
        ArgoCd {
            namespace: ns.name.clone(),
            server,
            cluster: cluster.clone(),
            processes: vec![redis, repo_server, controller],
        }
    }

    /// The Applications of this instance.
    pub fn applications(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.cluster.client.clone(), &self.namespace, &resource("Application"))
    }

    /// Creates (or replaces) Application `name`: chart `chart` of `repo`
    /// at its packaged version, with `values`, release `name`, into
    /// `namespace`, with `sync_policy` (`{}`: sync on request only).
    pub async fn application(
        &self,
        name: &str,
        repo: &ChartRepo,
        chart: &str,
        namespace: &str,
        values: Value,
        sync_policy: Value,
    ) {
        apply(
            &self.applications(),
            json!({
                "apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": name},
                "spec": {
                    "project": "default",
                    "source": {"repoURL": repo.url, "chart": chart, "targetRevision": repo.version,
                               "helm": {"releaseName": name, "valuesObject": values}},
                    "destination": {"server": self.server, "namespace": namespace},
                    "syncPolicy": sync_policy,
                },
            }),
        )
        .await;
    }

    /// Sets the Application's Helm values (a merge patch of `valuesObject`,
    /// as a change committed to a GitOps repository would).
    pub async fn set_values(&self, name: &str, values: Value) {
        let patch = json!({"spec": {"source": {"helm": {"valuesObject": values}}}});
        self.applications()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("patch Application {name}: {e}"));
    }

    /// Asks for a sync of Application `name`, as `argocd app sync` does
    /// through Argo CD's API server: an `operation` on the Application,
    /// which the controller carries out and then removes. Returns what the
    /// API server answered (an error if it refused the patch).
    pub async fn request_sync(&self, name: &str) -> Result<(), kube::Error> {
        let patch = json!({"operation": {
            "initiatedBy": {"username": "e2e"},
            "sync": {"syncStrategy": {"hook": {}}},
        }});
        self.applications().patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(|_| ())
    }

    /// `status.operationState` of Application `name` (`Null` before any).
    pub async fn operation_state(&self, name: &str) -> Value {
        let app = self.applications().get(name).await.unwrap_or_else(|e| panic!("get Application {name}: {e}"));
        app.data["status"]["operationState"].clone()
    }

    /// Waits until an operation of Application `name` started after
    /// `after` (an RFC 3339 `startedAt`, or "" for any) has ended;
    /// returns its `operationState` (phase Succeeded, Failed or Error).
    pub async fn wait_operation_end(&self, name: &str, after: &str, timeout: Duration) -> Value {
        let what = format!("a sync of Application {name} started after {after:?} to end");
        crate::wait::wait_for_or(
            &what,
            timeout,
            || async {
                let state = self.operation_state(name).await;
                let started = state["startedAt"].as_str().unwrap_or_default();
                let phase = state["phase"].as_str().unwrap_or_default();
                if started > after && ["Succeeded", "Failed", "Error"].contains(&phase) {
                    Ok(state)
                } else {
                    Err(format!("phase {phase:?} started {started:?}"))
                }
            },
            || format!("\n{}", self.tail()),
        )
        .await
    }

    /// The last lines of every log, for a failure message.
    pub fn tail(&self) -> String {
        self.processes.iter().map(|p| tail_of(&p.log, 30)).collect::<Vec<_>>().join("\n")
    }

    /// Waits until the controller has compared Application `name` with
    /// the cluster after `after` (RFC 3339, as [`now_rfc3339`] gives it:
    /// `status.reconciledAt` later); returns the Application.
    pub async fn wait_reconciled_after(&self, name: &str, after: &str, timeout: Duration) -> DynamicObject {
        let what = format!("the controller to compare Application {name} after {after}");
        wait_for(&what, timeout, || async {
            let app = self.applications().get(name).await.map_err(|e| e.to_string())?;
            let at = app.data["status"]["reconciledAt"].as_str().unwrap_or_default().to_owned();
            if at.as_str() > after { Ok(app) } else { Err(format!("reconciled at {at}")) }
        })
        .await
    }
}

/// Argo CD's settings in `namespace` (its ConfigMaps and Secret, the
/// default AppProject) and a cluster Secret for the run's API server,
/// limited to the `managed` namespaces; returns the server's URL.
async fn write_settings(cluster: &Cluster, namespace: &str, managed: &[&str]) -> String {
    let client = cluster.client.clone();
    let labels = json!({"app.kubernetes.io/part-of": "argocd"});
    let cms = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    // Argo CD's defaults: an empty argocd-cm is a working installation.
    for name in ["argocd-cm", "argocd-cmd-params-cm", "argocd-rbac-cm"] {
        apply(&cms, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}}))
            .await;
    }
    let secrets = Api::<Secret>::namespaced(client.clone(), namespace);
    apply(
        &secrets,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "argocd-secret", "labels": labels},
                   "stringData": {"server.secretkey": crate::suffix() + &crate::suffix()}}),
    )
    .await;

    // The cluster: the run's API server, as its admin, limited to `managed`.
    let kubeconfig_path = e2e_dir().join("control-plane/kubeconfig");
    let text = std::fs::read_to_string(&kubeconfig_path).unwrap();
    let kubeconfig: Value = serde_saphyr::from_str(&text).unwrap();
    let field = |v: &Value| -> String {
        v.as_str().unwrap_or_else(|| panic!("the run's kubeconfig holds its credentials inline")).to_owned()
    };
    let server = field(&kubeconfig["clusters"][0]["cluster"]["server"]);
    let user = &kubeconfig["users"][0]["user"];
    let config = json!({"tlsClientConfig": {
        "caData": field(&kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"]),
        "certData": field(&user["client-certificate-data"]),
        "keyData": field(&user["client-key-data"]),
    }});
    apply(
        &secrets,
        json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "cluster-run", "labels": {"argocd.argoproj.io/secret-type": "cluster"}},
                   "stringData": {"name": "run", "server": server, "namespaces": managed.join(","),
                                  "config": config.to_string()}}),
    )
    .await;
    let projects = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &resource("AppProject"));
    apply(
        &projects,
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": "default"},
                   "spec": {"sourceRepos": ["*"], "destinations": [{"server": server, "namespace": "*"}]}}),
    )
    .await;
    server
}

/// An `argoproj.io/v1alpha1` kind.
fn resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("argoproj.io", "v1alpha1", kind))
}

/// The example chart's folder.
pub fn counter_app_chart() -> PathBuf {
    repo_root().join("charts/examples/counter-app")
}

impl ArgoCd {
    /// Terminates the running operation of Application `name`, as
    /// `argocd app terminate-op` does through Argo CD's API server: sets
    /// `status.operationState.phase` to `Terminating`, which the controller
    /// carries out (gitops-engine's `Terminate`: every running hook is
    /// deleted, and the operation ends `Failed`).
    pub async fn terminate(&self, name: &str) {
        let patch = json!({"status": {"operationState": {"phase": "Terminating"}}});
        self.applications()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("terminate the operation of Application {name}: {e}"));
    }
}

/// Now, in RFC 3339 with whole seconds, as Argo CD writes its times.
pub fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}
