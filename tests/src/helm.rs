//! helm on the run's cluster, shared by the chart tests (`helm_install`,
//! `helm_cert_manager`, `helm_app`): the binary hack/build-helm.sh built
//! (`BLOODRAVEN_HELM`), charts/bloodraven's values for a release scoped to
//! one test, and the wait for a Deployment to roll out.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use serde_json::json;

use crate::Cluster;
use crate::operator::E2E_LABEL;
use crate::pods::image;

/// Runs helm (`BLOODRAVEN_HELM`, built by hack/build-helm.sh) against the
/// run's API server as its admin, with its cache, config and data under the
/// run's folder; returns whether it succeeded and its output (standard
/// output, then standard error).
pub fn helm(args: &[&str]) -> (bool, String) {
    let bin = image("BLOODRAVEN_HELM");
    let home = crate::e2e_dir().join("helm");
    let out = Command::new(&bin)
        .args(args)
        .arg("--kubeconfig")
        .arg(crate::e2e_dir().join("control-plane/kubeconfig"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .unwrap_or_else(|e| panic!("{bin}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// As [`helm`]; panics with helm's output when it fails.
pub fn helm_ok(args: &[&str]) -> String {
    let (ok, text) = helm(args);
    assert!(ok, "helm {args:?} failed: {text}");
    text
}

/// `(repository, tag)` of an image reference `repository:tag`.
pub fn split_reference(reference: &str) -> (String, String) {
    let (repo, tag) = reference.rsplit_once(':').expect("an image reference with a tag");
    (repo.to_owned(), tag.to_owned())
}

/// Writes `dir/file` with charts/bloodraven's values for a test's release:
/// the node's images, the deploy API on, the operator managing only groups
/// labelled `E2E_LABEL=tenant`, the webhook selecting only namespaces
/// `op_ns` and `tenant` and those groups — with `overrides` merged over them
/// (RFC 7386 merge patch). Returns the path.
pub fn bloodraven_values(dir: &Path, file: &str, op_ns: &str, tenant: &str, overrides: &serde_json::Value) -> PathBuf {
    let (op_repo, op_tag) = split_reference(&image("BLOODRAVEN_OPERATOR_IMAGE"));
    let (wh_repo, wh_tag) = split_reference(&image("BLOODRAVEN_WEBHOOK_IMAGE"));
    let (sc_repo, sc_tag) = split_reference(&image("BLOODRAVEN_SIDECAR_IMAGE"));
    let scope = json!([{"key": "kubernetes.io/metadata.name", "operator": "In", "values": [op_ns, tenant]}]);
    let groups = json!([{"key": E2E_LABEL, "operator": "In", "values": [tenant]}]);
    let mut v = json!({
        "operator": {
            "image": {"repository": op_repo, "tag": op_tag, "pullPolicy": "Never"},
            "groupSelector": format!("{E2E_LABEL}={tenant}"),
            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
        },
        "webhook": {
            "image": {"repository": wh_repo, "tag": wh_tag, "pullPolicy": "Never"},
            "sidecar": {"image": {"repository": sc_repo, "tag": sc_tag, "pullPolicy": "IfNotPresent"}},
            "namespaceSelector": {"matchExpressions": scope},
            "groupSelector": {"matchExpressions": groups},
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
        },
        "auxiliary": {"deployAPI": {"enabled": true}, "escrowTLS": {"enabled": true}},
    });
    json_patch::merge(&mut v, overrides);
    let path = dir.join(file);
    std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    path
}

/// Waits up to `timeout` until Deployment `ns/name` has rolled out: its
/// current generation observed, and every replica updated and ready.
pub async fn wait_rolled_out(cluster: &Cluster, ns: &str, name: &str, timeout: Duration) {
    let api = Api::<Deployment>::namespaced(cluster.client.clone(), ns);
    crate::wait_for(&format!("Deployment {ns}/{name} to roll out"), timeout, || async {
        let d = api.get(name).await.map_err(|e| e.to_string())?;
        let s = d.status.clone().unwrap_or_default();
        let want = d.spec.as_ref().and_then(|s| s.replicas);
        let done = s.observed_generation == d.metadata.generation
            && s.updated_replicas == want
            && s.ready_replicas == want
            && s.replicas == want;
        if done { Ok(()) } else { Err(format!("{s:?}")) }
    })
    .await;
}
