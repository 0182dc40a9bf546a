//! The real `bloodraven-webhook` binary as a child process under its own
//! ServiceAccount token with exactly the chart's RBAC
//! (`charts/bloodraven/files/webhook-rbac.yaml`), registered with the real
//! kube-apiserver by `url` + `caBundle` through the configurations the
//! webhook crate builds (the ones the chart and the playground use), scoped
//! to the test's namespaces and groups so parallel tests never meet it.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use bloodraven_webhook::registration::{self, Endpoint, Params};
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use tokio::process::{Child, Command};

use crate::deploy::{TlsFiles, tls_files_for};
use crate::operator::{E2E_LABEL, grant_rbac, kubeconfig_for};
use crate::{Cluster, TestNamespace, e2e_dir, free_port, repo_root};

/// The webhook's ServiceAccount name in the tests (the chart's).
pub const WEBHOOK_SA: &str = "bloodraven-webhook";

/// Path of the webhook binary (`make test` builds it first).
pub fn webhook_bin() -> PathBuf {
    std::env::var_os("BLOODRAVEN_WEBHOOK_BIN")
        .map_or_else(|| repo_root().join("target/debug/bloodraven-webhook"), PathBuf::from)
}

/// One running webhook process and its registration.
#[derive(Debug)]
pub struct Webhook {
    child: Option<Child>,
    /// Its TLS port on 127.0.0.1.
    pub port: u16,
    /// Its admin (metrics) port.
    pub plain_port: u16,
    /// Its certificate files (CA, cert, key).
    pub tls: TlsFiles,
    /// Log file.
    pub log: PathBuf,
    /// Name of its two configurations.
    pub name: String,
    args: Vec<String>,
    kubeconfig: PathBuf,
}

/// How a test starts the webhook.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The deploy API's base URL injected into sidecars.
    pub deploy_url: Option<String>,
    /// The deploy API's CA file.
    pub deploy_ca: Option<PathBuf>,
    /// Extra flags.
    pub extra: Vec<String>,
}

impl Webhook {
    /// The process's peak resident memory so far (KiB), while it runs.
    pub fn memory_peak_kib(&self) -> Option<u64> {
        crate::memory_peak_kib(self.child.as_ref()?.id()?)
    }

    /// Starts a webhook for operator namespace `op_ns` and waits until it is ready.
    pub async fn start(cluster: &Cluster, op_ns: &TestNamespace, options: Options) -> Webhook {
        grant_rbac(cluster, &op_ns.name, WEBHOOK_SA, "charts/bloodraven/files/webhook-rbac.yaml").await;
        let kubeconfig = kubeconfig_for(cluster, &op_ns.name, WEBHOOK_SA).await;
        let dir = e2e_dir().join("webhook").join(format!("{}-{}", op_ns.name, crate::suffix()));
        let tls = tls_files_for(&dir, "IP:127.0.0.1");
        let (port, plain_port, probe_port) = (free_port(), free_port(), free_port());
        let mut args = vec![
            format!("--namespace={}", op_ns.name),
            format!("--addr=127.0.0.1:{port}"),
            format!("--plain-addr=127.0.0.1:{plain_port}"),
            format!("--probe-addr=127.0.0.1:{probe_port}"),
            format!("--tls-cert-file={}", tls.cert.display()),
            format!("--tls-key-file={}", tls.key.display()),
            "--tls-reload-seconds=1".to_owned(),
            // The node's image when the suite imported it; benchmarks run without a node.
            format!(
                "--sidecar-image={}",
                std::env::var("BLOODRAVEN_SIDECAR_IMAGE").unwrap_or_else(|_| "bloodraven/sidecar:e2e".into())
            ),
            "--log-format=json".to_owned(),
        ];
        if let Some(url) = &options.deploy_url {
            args.push(format!("--deploy-url={url}"));
        }
        if let Some(ca) = &options.deploy_ca {
            args.push(format!("--deploy-ca-file={}", ca.display()));
        }
        args.extend(options.extra);
        let log = dir.join("webhook.log");
        let mut w = Webhook {
            child: None,
            port,
            plain_port,
            tls,
            log,
            name: format!("bloodraven-{}", op_ns.name),
            args,
            kubeconfig,
        };
        w.spawn().await;
        w
    }

    async fn spawn(&mut self) {
        let bin = webhook_bin();
        assert!(
            bin.exists(),
            "{} is missing: build it with `cargo build -p bloodraven-webhook` (make test does)",
            bin.display()
        );
        let file = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let child = Command::new(bin)
            .args(&self.args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let url = format!("http://127.0.0.1:{}/readyz", self.plain_port);
        let log = self.log.clone();
        crate::wait_for("the webhook to be ready", Duration::from_secs(60), || {
            let url = url.clone();
            let log = log.clone();
            async move {
                match reqwest::get(&url).await {
                    Ok(r) if r.status().is_success() => Ok(()),
                    other => Err(format!("{other:?}; log: {}", std::fs::read_to_string(&log).unwrap_or_default())),
                }
            }
        })
        .await;
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// SIGKILL.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().await.unwrap();
        }
    }

    /// Starts the process again with the same flags and certificate.
    pub async fn restart(&mut self) {
        self.kill().await;
        self.spawn().await;
    }

    /// The registration parameters for this webhook, scoped to `namespaces`
    /// (the operator's namespace is added) and to groups labelled `E2E_LABEL=label`.
    pub fn params(&self, op_ns: &str, namespaces: &[&str], label: &str) -> Params {
        let mut all: Vec<String> = namespaces.iter().map(|s| (*s).to_owned()).collect();
        all.push(op_ns.to_owned());
        Params {
            name: self.name.clone(),
            endpoint: Endpoint::Url(format!("https://127.0.0.1:{}", self.port)),
            ca_bundle: std::fs::read(&self.tls.ca).unwrap(),
            namespace: op_ns.to_owned(),
            operator: format!("system:serviceaccount:{op_ns}:bloodraven-operator"),
            trusted_deleters: bloodraven_webhook::Config::trusted_default(),
            timeout_seconds: 5,
            namespace_requirements: vec![LabelSelectorRequirement {
                key: "kubernetes.io/metadata.name".into(),
                operator: "In".into(),
                values: Some(all),
            }],
            group_requirements: vec![LabelSelectorRequirement {
                key: E2E_LABEL.into(),
                operator: "In".into(),
                values: Some(vec![label.to_owned()]),
            }],
        }
    }

    /// Registers both configurations with the API server (server-side apply),
    /// and waits until the API server calls the webhook (a registration takes
    /// effect a moment after it is stored).
    pub async fn register(&self, cluster: &Cluster, params: &Params) {
        let pp = PatchParams::apply("bloodraven-e2e").force();
        let v = registration::validating_configuration(params);
        let m = registration::mutating_configuration(params);
        let mut vj = serde_json::to_value(&v).unwrap();
        vj["apiVersion"] = "admissionregistration.k8s.io/v1".into();
        vj["kind"] = "ValidatingWebhookConfiguration".into();
        let mut mj = serde_json::to_value(&m).unwrap();
        mj["apiVersion"] = "admissionregistration.k8s.io/v1".into();
        mj["kind"] = "MutatingWebhookConfiguration".into();
        Api::<ValidatingWebhookConfiguration>::all(cluster.client.clone())
            .patch(&params.name, &pp, &Patch::Apply(vj))
            .await
            .unwrap_or_else(|e| panic!("the API server refused the ValidatingWebhookConfiguration: {e}"));
        Api::<MutatingWebhookConfiguration>::all(cluster.client.clone())
            .patch(&params.name, &pp, &Patch::Apply(mj))
            .await
            .unwrap_or_else(|e| panic!("the API server refused the MutatingWebhookConfiguration: {e}"));
        self.wait_registered(cluster, params).await;
    }

    /// Waits until the API server sends this webhook reviews from both
    /// configurations (a stored configuration takes effect a moment later:
    /// a test that asserted at once saw an annotated Job pass unreviewed).
    /// Probes with dry-run requests, and counts them in the webhook's own
    /// metrics, so the no-op webhook of the benchmark is waited for too.
    async fn wait_registered(&self, cluster: &Cluster, params: &Params) {
        use k8s_openapi::api::batch::v1::Job;
        use k8s_openapi::api::coordination::v1::Lease;
        let dry = kube::api::PostParams { dry_run: true, ..kube::api::PostParams::default() };
        let tenant = params
            .namespace_requirements
            .iter()
            .flat_map(|r| r.values.iter().flatten())
            .find(|n| **n != params.namespace)
            .cloned();
        let lease: Lease = serde_json::from_value(serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "bloodraven-deploy-registration-probe"}}))
        .unwrap();
        let job: Job = serde_json::from_value(serde_json::json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "registration-probe", "annotations": {
                "bloodraven.shipstream.io/inject": "true",
                "bloodraven.shipstream.io/group": "registration-probe",
                "bloodraven.shipstream.io/instance": "registration-probe"}},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "m", "command": ["m"]}]}}}}))
        .unwrap();
        crate::wait_for("the API server to call the webhook", Duration::from_secs(30), || async {
            let counted = |text: &str, webhook: &str| -> u64 {
                text.lines()
                    .filter(|l| {
                        l.starts_with("bloodraven_webhook_reviews_total{")
                            && l.contains(&format!("webhook=\"{webhook}\""))
                    })
                    .filter_map(|l| l.rsplit(' ').next()?.trim().parse::<u64>().ok())
                    .sum()
            };
            let before = self.metrics().await;
            let answer = |r: Result<String, kube::Error>| r.unwrap_or_else(|e| format!("{e}"));
            let lease_answer = answer(
                Api::<Lease>::namespaced(cluster.client.clone(), &params.namespace)
                    .create(&dry, &lease)
                    .await
                    .map(|_| "admitted".to_owned()),
            );
            let job_answer = match &tenant {
                Some(ns) => answer(
                    Api::<Job>::namespaced(cluster.client.clone(), ns).create(&dry, &job).await.map(|_| "admitted".to_owned()),
                ),
                None => "not sent".to_owned(),
            };
            let after = self.metrics().await;
            let state = counted(&after, "operator-state") > counted(&before, "operator-state");
            let inject = tenant.is_none() || counted(&after, "inject") > counted(&before, "inject");
            if state && inject {
                Ok(())
            } else {
                let log = self.log_text();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                Err(format!(
                    "reviewed: operator-state {state}, inject {inject}; the API server answered the Lease probe: {lease_answer}; the Job probe: {job_answer}; the webhook's last log lines: {tail:?}"
                ))
            }
        })
        .await;
    }

    /// Deletes both configurations.
    pub async fn unregister(&self, cluster: &Cluster) {
        let _ = Api::<ValidatingWebhookConfiguration>::all(cluster.client.clone())
            .delete(&self.name, &DeleteParams::default())
            .await;
        let _ = Api::<MutatingWebhookConfiguration>::all(cluster.client.clone())
            .delete(&self.name, &DeleteParams::default())
            .await;
    }

    /// The webhook's `/metrics` text.
    pub async fn metrics(&self) -> String {
        reqwest::get(format!("http://127.0.0.1:{}/metrics", self.plain_port)).await.unwrap().text().await.unwrap()
    }

    /// Reviews answered with `outcome` by `webhook` (from `/metrics`).
    pub async fn reviews(&self, webhook: &str, outcome: &str) -> u64 {
        reviews_in(&self.metrics().await, webhook, Some(outcome))
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Reviews of `webhook` in a `/metrics` text with `outcome` (any outcome when `None`).
fn reviews_in(text: &str, webhook: &str, outcome: Option<&str>) -> u64 {
    text.lines()
        .filter_map(|l| l.strip_prefix("bloodraven_webhook_reviews_total{"))
        .filter(|l| l.contains(&format!("webhook=\"{webhook}\"")))
        .filter(|l| outcome.is_none_or(|o| l.contains(&format!("outcome=\"{o}\""))))
        .filter_map(|l| l.rsplit(' ').next()?.trim().parse::<u64>().ok())
        .sum()
}

/// The message of an API error (what kubectl prints), or panics when `result` succeeded.
pub fn refusal<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(s)) => format!("{} ({})", s.message, s.code),
        Err(e) => format!("{e}"),
        Ok(v) => panic!("expected a refusal, got {v:?}"),
    }
}

/// The refusal of a replace (PUT) of `name` through `api` of the stored
/// object with `edit` applied: read, edit, replace, and read again when the
/// answer is `409 Conflict` (another writer, such as the operator writing
/// the object's status, moved its resourceVersion between the read and the
/// PUT: a CI run under load got that conflict instead of the admission's
/// answer), so what is returned is never a conflict. Panics when the replace
/// succeeds, or after 10 conflicts in a row.
pub async fn refused_replace<K>(api: &kube::Api<K>, name: &str, edit: impl Fn(&mut K)) -> String
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    for _ in 0..10 {
        let mut stored = api.get(name).await.unwrap_or_else(|e| panic!("read {name}: {e}"));
        edit(&mut stored);
        match api.replace(name, &kube::api::PostParams::default(), &stored).await {
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "Conflict" => {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            other => return refusal(other),
        }
    }
    panic!("replace of {name}: 10 conflicts in a row")
}

/// Two tenant namespaces and an operator namespace (with the operator's
/// RBAC granted), and a webhook serving both tenants, registered: the
/// setting of the guard tests.
#[derive(Debug)]
pub struct GuardEnv {
    /// The cluster.
    pub cluster: Cluster,
    /// The first tenant (also the group's label).
    pub ns: TestNamespace,
    /// The second tenant.
    pub ns2: TestNamespace,
    /// The operator's namespace.
    pub op_ns: TestNamespace,
    /// The webhook.
    pub webhook: Webhook,
}

/// Sets up a [`GuardEnv`]; names start with `prefix`.
pub async fn guard_env(prefix: &str) -> GuardEnv {
    let cluster = Cluster::connect().await;
    let ns = cluster.namespace(prefix).await;
    let ns2 = cluster.namespace(&format!("{prefix}-b")).await;
    let op_ns = cluster.namespace(&format!("{prefix}-op")).await;
    crate::operator::grant_operator_rbac(&cluster, &op_ns.name).await;
    let webhook = Webhook::start(&cluster, &op_ns, Options::default()).await;
    let params = webhook.params(&op_ns.name, &[&ns.name, &ns2.name], &ns.name);
    webhook.register(&cluster, &params).await;
    GuardEnv { cluster, ns, ns2, op_ns, webhook }
}

/// The operator Pod's scenario ([`crate::pods::PodScenario`]) and a webhook
/// registered for its tenant namespace, injecting sidecars that call the
/// operator Pod through its Service: the setting of the injection tests.
#[derive(Debug)]
pub struct InjectEnv {
    /// The scenario.
    pub pods: crate::pods::PodScenario,
    /// The webhook.
    pub webhook: Webhook,
}

/// Sets up an [`InjectEnv`]; names start with `prefix`.
pub async fn inject_env(prefix: &str) -> InjectEnv {
    let pods = crate::pods::PodScenario::start(prefix).await;
    let options = Options {
        deploy_url: Some(format!("https://bloodraven.{}.svc:8443", pods.op_ns.name)),
        deploy_ca: Some(pods.tls.ca.clone()),
        extra: Vec::new(),
    };
    let webhook = Webhook::start(&pods.cluster, &pods.op_ns, options).await;
    webhook.register(&pods.cluster, &webhook.params(&pods.op_ns.name, &[&pods.ns.name], &pods.ns.name)).await;
    InjectEnv { pods, webhook }
}
