//! `helm install` of charts/bloodraven with `certManager.enabled=true`
//! against a real cert-manager (its controller and cainjector built from the
//! cert-manager Go module by hack/build-cert-manager.sh, run as host
//! processes: tests/src/certmanager.rs). cert-manager issues the chart's CA
//! and both serving certificates, the cainjector writes the CA into the
//! webhook configurations; then the operator and the webhook come up on
//! them, the webhook refuses a hand edit of status.topologyGeneration, the
//! deploy API answers a Pod that trusts the cert-manager CA only, and a
//! manual re-issue of the webhook's certificate (what `cmctl renew` does)
//! reaches the running webhook Pods without a restart. `helm uninstall` at
//! the end.
//!
//! Scoped as tests/tests/helm_install.rs is: the release lives in its own
//! namespace, the operator manages only groups with this test's label, the
//! webhook configurations (named after the release and namespace) select
//! only this test's namespaces and groups, and cert-manager's processes act
//! on the release's namespace only.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test

use std::sync::Arc;
use std::time::Duration;

use bloodraven_e2e::certmanager::{self, CertManager};
use bloodraven_e2e::cluster::OPERATOR_DB_PASSWORD;
use bloodraven_e2e::fixtures::{create_group, group, is_ready_at, wait_status};
use bloodraven_e2e::helm::{bloodraven_values, helm_ok as helm, wait_rolled_out};
use bloodraven_e2e::pods::{apply, node_address};
use bloodraven_e2e::webhook::refusal;
use bloodraven_e2e::{Cluster, SitePair, e2e_dir, repo_root};
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;

const T: Duration = Duration::from_secs(240);

/// Key `key` of Secret `name` (panics when either is missing).
async fn secret_key(secrets: &Api<Secret>, name: &str, key: &str) -> Vec<u8> {
    let s = secrets.get(name).await.unwrap_or_else(|e| panic!("Secret {name}: {e}"));
    let data = s.data.unwrap_or_default();
    data.get(key).unwrap_or_else(|| panic!("Secret {name} has no {key}: keys {:?}", data.keys())).0.clone()
}

/// The CA bundles of every webhook of the release's two configurations.
async fn ca_bundles(cluster: &Cluster, name: &str) -> Vec<Option<Vec<u8>>> {
    let c = cluster.client.clone();
    let mut bundles = Vec::new();
    let v = Api::<ValidatingWebhookConfiguration>::all(c.clone()).get(name).await.unwrap();
    bundles.extend(v.webhooks.unwrap_or_default().into_iter().map(|w| w.client_config.ca_bundle.map(|b| b.0)));
    let m = Api::<MutatingWebhookConfiguration>::all(c).get(name).await.unwrap();
    bundles.extend(m.webhooks.unwrap_or_default().into_iter().map(|w| w.client_config.ca_bundle.map(|b| b.0)));
    bundles
}

/// The first certificate of a PEM bundle.
fn first_der(pem: &[u8]) -> Vec<u8> {
    CertificateDer::pem_slice_iter(pem).next().expect("a certificate in the PEM").unwrap().as_ref().to_vec()
}

/// The certificate the webhook Pod at `ip` serves on 9443, checked against
/// `ca_pem` for the Service's name `host` (a TLS handshake from the host:
/// the node's Pods are on a bridge the host is on).
async fn served_certificate(ip: &str, host: &str, ca_pem: &[u8]) -> Result<Vec<u8>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(cert.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect((ip, 9443)).await.map_err(|e| format!("connect {ip}:9443: {e}"))?;
    let name = ServerName::try_from(host.to_owned()).unwrap();
    let tls = tokio::time::timeout(Duration::from_secs(10), connector.connect(name, tcp))
        .await
        .map_err(|_| format!("TLS handshake with {ip}:9443 timed out"))?
        .map_err(|e| format!("TLS handshake with {ip}:9443 as {host}: {e}"))?;
    let (_, session) = tls.get_ref();
    let chain = session.peer_certificates().ok_or("no peer certificate")?;
    Ok(chain[0].as_ref().to_vec())
}

/// Name, uid, IP and restart count of each running webhook Pod.
async fn webhook_pods(pods: &Api<Pod>) -> Vec<(String, String, String, i32)> {
    let list = pods.list(&ListParams::default().labels("app.kubernetes.io/name=bloodraven-webhook")).await.unwrap();
    let mut out: Vec<_> = list
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let status = p.status.unwrap_or_default();
            let restarts = status.container_statuses.iter().flatten().map(|c| c.restart_count).sum();
            (p.metadata.name.unwrap(), p.metadata.uid.unwrap(), status.pod_ip.unwrap_or_default(), restarts)
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
#[allow(clippy::too_many_lines)] // one user's install on cert-manager, use, renewal and uninstall, in order
async fn helm_install_with_cert_manager_issues_injects_and_renews() {
    let cluster = Cluster::connect().await;
    let c = cluster.client.clone();
    let op_ns = cluster.namespace("helm-cm").await;
    let tenant = cluster.namespace("helm-cm-t").await;
    let ns = op_ns.name.as_str();
    let release = "br";
    let config_name = format!("{release}-{ns}");
    let dir = e2e_dir().join(format!("helm-{ns}"));
    std::fs::create_dir_all(&dir).unwrap();
    let chart = repo_root().join("charts/bloodraven");
    let chart = chart.to_str().unwrap();

    // cert-manager: its CRDs (shared by the run: applied idempotently), its
    // controller and cainjector for this namespace only.
    certmanager::install_crds(&cluster).await;
    let cm = CertManager::start(ns);
    let pair = SitePair::start_on("helm-cm", &node_address());

    // Install, as a user with cert-manager would: the Pods wait for the
    // Secrets cert-manager writes; --wait until both Deployments are ready.
    let v = bloodraven_values(
        &dir,
        &format!("values-{ns}.yaml"),
        ns,
        &tenant.name,
        &json!({"certManager": {"enabled": true}}),
    );
    helm(&["install", release, chart, "-n", ns, "-f", v.to_str().unwrap(), "--wait", "--timeout", "5m"]);

    // Every Certificate of the chart is Ready, its Secret written.
    let mut revisions = std::collections::BTreeMap::new();
    for name in ["bloodraven-ca", "bloodraven-webhook", "bloodraven-deploy"] {
        let cert = tokio::time::timeout(T + Duration::from_secs(10), certmanager::wait_ready(&cluster, ns, name, 1, T))
            .await
            .unwrap_or_else(|_| panic!("Certificate {name}: {}", cm.tail()));
        revisions.insert(name, cert.data["status"]["revision"].as_i64().unwrap());
    }
    let secrets = Api::<Secret>::namespaced(c.clone(), ns);
    let ca = secret_key(&secrets, "bloodraven-ca", "ca.crt").await;
    assert_eq!(first_der(&ca), first_der(&secret_key(&secrets, "bloodraven-ca", "tls.crt").await), "a self-signed CA");
    for s in ["bloodraven-webhook-tls", "bloodraven-deploy-tls"] {
        assert_eq!(secret_key(&secrets, s, "ca.crt").await, ca, "{s} is signed by the chart's CA Issuer");
        assert!(!secret_key(&secrets, s, "tls.key").await.is_empty(), "{s}");
    }

    // The cainjector wrote that CA into every webhook of both configurations.
    bloodraven_e2e::wait_for("the cainjector to inject the CA into the webhook configurations", T, || async {
        let bundles = ca_bundles(&cluster, &config_name).await;
        if !bundles.is_empty() && bundles.iter().all(|b| b.as_deref() == Some(ca.as_slice())) {
            Ok(())
        } else {
            Err(format!(
                "{} webhooks, injected: {:?}",
                bundles.len(),
                bundles.iter().map(Option::is_some).collect::<Vec<_>>()
            ))
        }
    })
    .await;

    wait_rolled_out(&cluster, ns, "bloodraven-operator", T).await;
    wait_rolled_out(&cluster, ns, "bloodraven-webhook", T).await;

    // The operator bootstraps a group of its selector.
    op_ns.credentials_secret("site-creds", "bloodraven", OPERATOR_DB_PASSWORD).await;
    let name = format!("{}-g", tenant.name);
    create_group(&cluster, &group(&name, &tenant.name, pair.sites(ns, "site-creds"), "iad")).await;
    wait_status(&cluster, &name, "bootstrap by the chart's operator", T, |s| is_ready_at(s, "iad", 1)).await;

    // The webhook, called by the API server with the injected CA, refuses a
    // hand edit of the fence.
    let groups = cluster.groups();
    let pp = PatchParams::default();
    let fence = Patch::Merge(json!({"status": {"topologyGeneration": 2}}));
    let m =
        bloodraven_e2e::wait_for("the webhook's own refusal through its Service", Duration::from_secs(60), || async {
            let m = refusal(groups.patch_status(&name, &pp, &fence).await);
            if m.contains("written only by the operator") { Ok(m) } else { Err(m) }
        })
        .await;
    assert!(m.contains("plannedFailover"), "{m}");
    assert_eq!(groups.get_status(&name).await.unwrap().status.unwrap().topology_generation, Some(1));

    // The deploy API through Service bloodraven, from a Pod that trusts the
    // cert-manager CA only.
    bloodraven_e2e::deploy::service_account(&cluster, &tenant.name, "deployer").await;
    bloodraven_e2e::deploy::database(&cluster, &tenant.name, "counter-app", &name, &[(&tenant.name, "deployer")]).await;
    apply(
        &Api::<ConfigMap>::namespaced(c.clone(), &tenant.name),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bloodraven-ca"},
               "data": {"ca.crt": String::from_utf8(ca.clone()).unwrap()}}),
    )
    .await;
    let url = format!("https://bloodraven.{ns}.svc:8443/deploy/v1/groups/{name}");
    let body = bloodraven_e2e::pods::deploy_get_from_pod(&cluster, &tenant.name, &url, T).await;
    assert_eq!((body["activeSite"].as_str(), body["topologyGeneration"].as_i64()), (Some("iad"), Some(1)), "{body}");

    // Each webhook Pod serves the certificate cert-manager issued.
    let pods = Api::<Pod>::namespaced(c.clone(), ns);
    let host = format!("bloodraven-webhook.{ns}.svc");
    let before = webhook_pods(&pods).await;
    assert_eq!(before.len(), 2, "{before:?}");
    let leaf_before = first_der(&secret_key(&secrets, "bloodraven-webhook-tls", "tls.crt").await);
    for (pod, _, ip, _) in &before {
        let served = bloodraven_e2e::wait_for(&format!("webhook Pod {pod} to serve over TLS"), T, || {
            served_certificate(ip, &host, &ca)
        })
        .await;
        assert_eq!(served, leaf_before, "{pod} serves the issued certificate");
    }

    // Renewal: mark the webhook's Certificate for re-issue as `cmctl renew`
    // does. cert-manager issues a new certificate with a new key
    // (rotationPolicy: Always) from the same CA; the kubelet updates the
    // Secret volume and the running webhook reloads the files: every Pod
    // serves the new certificate, none restarted, and the webhook still
    // refuses the hand edit.
    certmanager::renew(&cluster, ns, "bloodraven-webhook").await;
    let renewed =
        certmanager::wait_ready(&cluster, ns, "bloodraven-webhook", revisions["bloodraven-webhook"] + 1, T).await;
    let leaf_after = first_der(&secret_key(&secrets, "bloodraven-webhook-tls", "tls.crt").await);
    assert_ne!(leaf_after, leaf_before, "re-issued: {}", renewed.data["status"]);
    assert_eq!(secret_key(&secrets, "bloodraven-webhook-tls", "ca.crt").await, ca, "by the same CA");
    for (pod, _, ip, _) in &before {
        bloodraven_e2e::wait_for(&format!("webhook Pod {pod} to serve the renewed certificate"), T, || async {
            let served = served_certificate(ip, &host, &ca).await?;
            if served == leaf_after { Ok(()) } else { Err("still the old certificate".into()) }
        })
        .await;
    }
    assert_eq!(webhook_pods(&pods).await, before, "the same Pods, no container restarted");
    assert!(ca_bundles(&cluster, &config_name).await.iter().all(|b| b.as_deref() == Some(ca.as_slice())));
    let m = refusal(groups.patch_status(&name, &pp, &fence).await);
    assert!(m.contains("written only by the operator"), "after the renewal: {m}");

    // The group goes first (its cleanup finalizer needs the operator), then
    // helm uninstall removes the chart's cert-manager objects.
    cluster.delete_group_and_wait(&name, T).await;
    helm(&["uninstall", release, "-n", ns, "--wait", "--timeout", "5m"]);
    let left = certmanager::certificates(&cluster, ns).list(&ListParams::default()).await.unwrap().items;
    assert!(
        left.is_empty(),
        "Certificates left after helm uninstall: {:?}",
        left.iter().map(|c| &c.metadata.name).collect::<Vec<_>>()
    );
    // The Secrets are cert-manager's, not the chart's (no owner reference
    // without --enable-certificate-owner-ref): they stay (docs/install.md).
    for s in ["bloodraven-ca", "bloodraven-webhook-tls", "bloodraven-deploy-tls"] {
        assert!(secrets.get_opt(s).await.unwrap().is_some(), "Secret {s} is kept by helm uninstall");
    }
    let configs = [
        Api::<ValidatingWebhookConfiguration>::all(c.clone())
            .get_opt(&config_name)
            .await
            .unwrap()
            .map(|_| "Validating"),
        Api::<MutatingWebhookConfiguration>::all(c.clone()).get_opt(&config_name).await.unwrap().map(|_| "Mutating"),
    ];
    let configs: Vec<&str> = configs.into_iter().flatten().collect();
    assert!(configs.is_empty(), "{configs:?}WebhookConfiguration {config_name} left after helm uninstall");
    drop(cm);
    drop(pair);
}
