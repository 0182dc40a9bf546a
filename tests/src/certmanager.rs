//! cert-manager's controller and cainjector as host processes against the
//! run's API server, for the chart's `certManager.enabled` path
//! (tests/tests/helm_cert_manager.rs).
//!
//! `hack/build-cert-manager.sh` builds both from the
//! github.com/cert-manager/cert-manager Go module and puts the module's CRDs
//! beside them; `BLOODRAVEN_CERT_MANAGER_BIN_DIR` names that folder. Both
//! processes run as the cluster admin (the run's kubeconfig) and are scoped
//! to one namespace with `--namespace`, so that tests sharing the cluster
//! never meet: the controller acts on that namespace's Issuers and
//! Certificates only, the cainjector injects only from Certificates of that
//! namespace (it watches webhook configurations cluster-wide, as they are
//! cluster-scoped, and leaves alone those whose source is elsewhere).
//! cert-manager's own admission webhook is not run: its CRDs are v1 only,
//! without a conversion webhook, so the API server serves them without it
//! (it only validates and defaults cert-manager's objects).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::json;
use tokio::process::{Child, Command};

use crate::{Cluster, e2e_dir, wait_for};

/// Field manager of the CRDs' server-side apply (the same from every test
/// process, so concurrent applies of the same CRDs agree).
const FIELD_MANAGER: &str = "bloodraven-e2e-cert-manager";

/// The folder of `hack/build-cert-manager.sh`'s output:
/// `BLOODRAVEN_CERT_MANAGER_BIN_DIR` (controller, cainjector, crds.yaml).
pub fn bin_dir() -> PathBuf {
    let Some(dir) = std::env::var_os("BLOODRAVEN_CERT_MANAGER_BIN_DIR").map(PathBuf::from) else {
        panic!(
            "BLOODRAVEN_CERT_MANAGER_BIN_DIR is not set: it names the folder hack/build-cert-manager.sh prints \
             (cert-manager's controller, cainjector and CRDs); hack/e2e.sh sets it"
        )
    };
    for file in ["controller", "cainjector", "crds.yaml"] {
        assert!(
            dir.join(file).exists(),
            "{} is missing: BLOODRAVEN_CERT_MANAGER_BIN_DIR must be the folder hack/build-cert-manager.sh prints",
            dir.join(file).display()
        );
    }
    dir
}

/// Server-side applies cert-manager's CRDs (`crds.yaml` of [`bin_dir`]) and
/// waits until they are established. Idempotent: other test processes may
/// apply the same CRDs at the same time.
pub async fn install_crds(cluster: &Cluster) {
    let names = crate::cluster::apply_crd_file(cluster, &bin_dir().join("crds.yaml"), FIELD_MANAGER).await;
    assert!(names.iter().any(|n| n == "certificates.cert-manager.io"), "crds.yaml holds {names:?}");
}

/// cert-manager's controller and cainjector, scoped to one namespace;
/// killed when dropped.
#[derive(Debug)]
pub struct CertManager {
    _controller: Child,
    _cainjector: Child,
    /// Log files of the controller and the cainjector.
    pub logs: [PathBuf; 2],
}

impl CertManager {
    /// Starts both in `namespace`, as the cluster admin.
    pub fn start(namespace: &str) -> CertManager {
        let dir = bin_dir();
        let kubeconfig = e2e_dir().join("control-plane/kubeconfig");
        let logs_dir = e2e_dir().join("logs");
        std::fs::create_dir_all(&logs_dir).unwrap();
        let spawn = |name: &str| {
            let log = logs_dir.join(format!("{namespace}-cert-manager-{name}.log"));
            let file = std::fs::File::create(&log).unwrap();
            let child = Command::new(dir.join(name))
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(["--namespace", namespace])
                // cert-manager logs its info level at klog verbosity 2.
                .args(["-v", "2"])
                .stdin(Stdio::null())
                .stdout(file.try_clone().unwrap())
                .stderr(file)
                .kill_on_drop(true)
                .spawn()
                .unwrap_or_else(|e| panic!("{}: {e}", dir.join(name).display()));
            (child, log)
        };
        let (controller, controller_log) = spawn("controller");
        let (cainjector, cainjector_log) = spawn("cainjector");
        CertManager { _controller: controller, _cainjector: cainjector, logs: [controller_log, cainjector_log] }
    }

    /// The last lines of both logs, for a failure message.
    pub fn tail(&self) -> String {
        self.logs
            .iter()
            .map(|p| {
                let text = std::fs::read_to_string(p).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                format!("--- {} ---\n{}", p.display(), lines[lines.len().saturating_sub(20)..].join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// cert-manager.io/v1 Certificates of `ns`.
pub fn certificates(cluster: &Cluster, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cert-manager.io", "v1", "Certificate");
    Api::namespaced_with(cluster.client.clone(), ns, &ApiResource::from_gvk(&gvk))
}

/// The status of condition `type_` of a cert-manager object, if any.
pub fn condition(obj: &DynamicObject, type_: &str) -> Option<String> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str().map(str::to_owned))
}

/// Waits until Certificate `ns/name` is Ready (for its current generation)
/// and not issuing, with `status.revision` at least `revision`. Returns it.
pub async fn wait_ready(cluster: &Cluster, ns: &str, name: &str, revision: i64, timeout: Duration) -> DynamicObject {
    let api = certificates(cluster, ns);
    wait_for(&format!("Certificate {ns}/{name} to be Ready at revision >= {revision}"), timeout, || async {
        let c = api.get(name).await.map_err(|e| e.to_string())?;
        let ready = c.data["status"]["conditions"].as_array().into_iter().flatten().any(|k| {
            k["type"] == "Ready" && k["status"] == "True" && k["observedGeneration"].as_i64() == c.metadata.generation
        });
        let issuing = condition(&c, "Issuing").as_deref() == Some("True");
        let at = c.data["status"]["revision"].as_i64().unwrap_or(0);
        if ready && !issuing && at >= revision { Ok(c) } else { Err(format!("{}", c.data["status"])) }
    })
    .await
}

/// What `cmctl renew` does (cert-manager's documented manual renewal): sets
/// the Certificate's `Issuing` condition to True, reason
/// `ManuallyTriggered`, through the status subresource.
pub async fn renew(cluster: &Cluster, ns: &str, name: &str) {
    let api = certificates(cluster, ns);
    let c = api.get(name).await.unwrap();
    let mut conditions: Vec<serde_json::Value> = c.data["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|k| k["type"] != "Issuing")
        .collect();
    let now = k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    conditions.push(json!({
        "type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
        "message": "Certificate re-issuance manually triggered",
        "lastTransitionTime": now, "observedGeneration": c.metadata.generation,
    }));
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": {"conditions": conditions}})))
        .await
        .unwrap_or_else(|e| panic!("mark Certificate {ns}/{name} for renewal: {e}"));
}
