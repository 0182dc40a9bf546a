//! `bloodraven-webhook`: the admission webhook (docs/webhook.md).
//! Validating guards for the fence —
//! `deploymentClients` authority ([`guards::database`]), a group's status
//! and history ([`guards::group`]), the operator's state objects
//! ([`guards::state`]) — and sidecar injection into annotated migration
//! Jobs ([`inject`]). Served over TLS 1.2/1.3 with a certificate reloaded
//! without restart, with the admin listener (`/metrics`, `/healthz`,
//! `/readyz`) and loopback exec probes of the shared serving crate; the
//! registration the API server needs is built by [`registration`].

pub mod authority;
pub mod config;
pub mod guards;
pub mod inject;
pub mod registration;
pub mod review;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::routing::post;
use bloodraven_serving::admin;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

pub use config::{Cli, Command, Config};

/// The webhook's metrics.
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Registry,
    reviews: IntCounterVec,
    duration: HistogramVec,
}

impl Metrics {
    /// Registers `bloodraven_webhook_reviews_total{webhook, outcome}` and
    /// `bloodraven_webhook_review_duration_seconds{webhook}`.
    pub fn new() -> prometheus::Result<Metrics> {
        use review::Endpoint;
        let registry = Registry::new();
        let reviews = IntCounterVec::new(
            Opts::new(
                "bloodraven_webhook_reviews_total",
                "Admission reviews answered, by webhook and outcome (allowed, denied, patched).",
            ),
            &["webhook", "outcome"],
        )?;
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "bloodraven_webhook_review_duration_seconds",
                "Time from a review's arrival to its answer, seconds.",
            )
            .buckets(vec![0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]),
            &["webhook"],
        )?;
        registry.register(Box::new(reviews.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        // Every series a review can produce exists from the start at 0, so
        // that `rate()` and `absent()` in alerts see the webhook before its
        // first review (a labelled family with no series is not served).
        for endpoint in [Endpoint::Databases, Endpoint::Claims, Endpoint::Groups, Endpoint::State, Endpoint::Jobs] {
            for outcome in ["allowed", "denied"] {
                reviews.with_label_values(&[endpoint.as_str(), outcome]);
            }
            duration.with_label_values(&[endpoint.as_str()]);
        }
        reviews.with_label_values(&[Endpoint::Jobs.as_str(), "patched"]);
        Ok(Metrics { registry, reviews, duration })
    }

    /// The description (name, help, label names) of every metric family
    /// registered here, with or without series (the monitoring check,
    /// `xtask/tests/monitoring.rs`, compares the alert and dashboard
    /// queries with these).
    pub fn families(&self) -> Vec<prometheus::core::Desc> {
        use prometheus::core::Collector as _;
        self.reviews.desc().into_iter().chain(self.duration.desc()).cloned().collect()
    }

    fn observe(&self, webhook: &str, outcome: &str, took: Duration) {
        self.reviews.with_label_values(&[webhook, outcome]).inc();
        self.duration.with_label_values(&[webhook]).observe(took.as_secs_f64());
    }
}

/// What every review reads.
#[derive(Debug)]
pub struct Webhook {
    /// The operator's username.
    pub operator: String,
    /// The operator's namespace.
    pub namespace: String,
    /// Users whose deletes of operator state pass.
    pub trusted_deleters: Vec<String>,
    /// Caches and authorization.
    pub authority: authority::Authority,
    /// Metrics.
    pub metrics: Metrics,
    /// Answer everything "allowed" (benchmark baseline).
    pub noop: bool,
    /// With `noop`: the patch every Job review is answered with.
    pub noop_patch: Option<json_patch::Patch>,
    inject: inject::Settings,
    deploy_ca_file: Option<PathBuf>,
}

impl Webhook {
    /// The injection settings, with the deploy API's CA read now (it may rotate).
    async fn inject_settings(&self) -> Result<inject::Settings, String> {
        let Some(path) = &self.deploy_ca_file else {
            return Err("the webhook was started without --deploy-ca-file, so it cannot inject the sidecar; ask the cluster admin".into());
        };
        let pem = tokio::fs::read_to_string(path)
            .await
            .map_err(|e| format!("the webhook cannot read its deploy CA bundle {}: {e}", path.display()))?;
        certificates_only(&pem).map_err(|e| format!("the webhook's deploy CA bundle {}: {e}", path.display()))?;
        Ok(inject::Settings { ca_pem: pem, ..self.inject.clone() })
    }
}

/// Checks that `pem` holds one or more `CERTIFICATE` sections and nothing
/// else. The bundle is copied into every injected Job (`BLOODRAVEN_CA_PEM`,
/// readable by anyone who can read the Job), so a file that also held a
/// private key — a chart value naming `tls.key` instead of `ca.crt`, a
/// combined PEM — would hand the deploy API's key to every tenant.
///
/// Errors: a section of another kind (named), PEM that does not parse, or no
/// certificate at all.
pub fn certificates_only(pem: &str) -> Result<(), String> {
    use rustls::pki_types::pem::{self, SectionKind};
    let mut reader = pem.as_bytes();
    let mut certificates = 0;
    loop {
        match pem::from_buf(&mut reader) {
            Ok(Some((SectionKind::Certificate, _))) => certificates += 1,
            Ok(Some((kind, _))) => {
                return Err(format!(
                    "it holds a {kind:?} section, not only certificates; refusing to copy it into Jobs (give it the CA certificate alone, e.g. the Secret's ca.crt)"
                ));
            }
            Ok(None) => break,
            Err(e) => return Err(format!("it is not PEM: {e}")),
        }
    }
    if certificates == 0 { Err("it holds no certificate".into()) } else { Ok(()) }
}

/// The router of the admission endpoints (404 elsewhere).
pub fn router(webhook: Arc<Webhook>) -> Router {
    use registration::paths;
    use review::Endpoint;
    let route = |endpoint: Endpoint| {
        post(
            move |state: axum::extract::State<Arc<Webhook>>,
                  query: axum::extract::Query<std::collections::HashMap<String, String>>,
                  headers: axum::http::HeaderMap,
                  body: axum::body::Body| review::handle(endpoint, state, query, headers, body),
        )
    };
    Router::new()
        .route(paths::DATABASES, route(Endpoint::Databases))
        .route(paths::CLAIMS, route(Endpoint::Claims))
        .route(paths::GROUPS, route(Endpoint::Groups))
        .route(paths::STATE, route(Endpoint::State))
        .route(paths::JOBS, route(Endpoint::Jobs))
        .with_state(webhook)
}

/// Runs the webhook until SIGTERM or SIGINT.
pub async fn run(config: Config) -> anyhow::Result<()> {
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        namespace = %config.namespace,
        operator = %config.operator_username(),
        addr = %config.addr,
        noop = config.noop,
        "starting bloodraven-webhook"
    );
    let (Some(cert), Some(key)) = (config.tls_cert_file.clone(), config.tls_key_file.clone()) else {
        anyhow::bail!("--tls-cert-file and --tls-key-file are required: the API server calls webhooks over TLS only");
    };
    // Every listener is bound before anything slow: a port that is taken
    // ends the process here, never after it reported ready.
    let tls_listener = bloodraven_serving::bind("webhook", config.addr)?;
    let plain_listener = bloodraven_serving::bind("metrics and health", config.plain_addr)?;
    let probe_listener = bloodraven_serving::bind("probes", config.probe_addr)?;
    let tls = bloodraven_serving::tls::load_and_watch(cert, key, Duration::from_secs(config.tls_reload_seconds))
        .context("failed to load the webhook certificate")?;
    if let Some(path) = &config.deploy_ca_file {
        // Checked again at every read (it may rotate); a bad file at start is
        // a misconfiguration to stop on, not to discover at the first Job.
        if let Ok(pem) = std::fs::read_to_string(path) {
            certificates_only(&pem).map_err(|e| anyhow::anyhow!("--deploy-ca-file {}: {e}", path.display()))?;
        }
    }
    let client = kube::Client::try_default().await.context("failed to build a Kubernetes client")?;
    let metrics = Metrics::new()?;
    let shutdown = bloodraven_serving::Shutdown::on_signals();
    let ready = admin::Readiness::new();
    let plain = admin::Admin { registry: metrics.registry.clone(), ready: ready.clone() };
    let plain = tokio::spawn(admin::serve(plain_listener, plain, 64, shutdown.stopped()));
    let probes = tokio::spawn(admin::serve_probes(probe_listener, ready.clone(), shutdown.stopped()));
    let authority = authority::Authority::start(client, config.test_authorization_delay_ms.map(Duration::from_millis));
    let webhook = Arc::new(Webhook {
        operator: config.operator_username(),
        namespace: config.namespace.clone(),
        trusted_deleters: config.trusted_deleters.clone(),
        authority: authority.clone(),
        metrics,
        noop: config.noop,
        noop_patch: match &config.noop_patch_file {
            None => None,
            Some(path) => Some(
                serde_json::from_slice(&std::fs::read(path).context("failed to read --noop-patch-file")?)
                    .context("--noop-patch-file is not a JSON patch")?,
            ),
        },
        inject: inject::Settings {
            image: config.sidecar_image.clone(),
            pull_policy: config.sidecar_image_pull_policy.clone(),
            deploy_url: config.deploy_url.clone(),
            ca_pem: String::new(),
            active_deadline_seconds: config.default_active_deadline_seconds,
            token_expiration_seconds: config.token_expiration_seconds,
            acquire_timeout_seconds: config.sidecar_acquire_timeout_seconds,
            version: env!("CARGO_PKG_VERSION").to_owned(),
        },
        deploy_ca_file: config.deploy_ca_file.clone(),
    });
    let max = usize::try_from(config.max_connections).unwrap_or(256);
    // The API server is one peer that opens many connections: the per-peer
    // cap is the listener's whole limit.
    let limits = bloodraven_serving::Limits { max_connections_per_peer: max, ..bloodraven_serving::Limits::new(max) };
    let server = tokio::spawn(bloodraven_serving::serve_tls(
        "webhook",
        tls_listener,
        tls,
        limits,
        router(webhook),
        shutdown.stopped(),
    ));
    authority.wait_ready().await;
    ready.set_ready();
    tracing::info!("caches synced; ready");
    let listener = server.await;
    for task in [plain, probes] {
        if let Ok(Err(e)) = task.await {
            tracing::warn!(error = %e, "an admin listener failed");
        }
    }
    match listener {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(anyhow::Error::new(e).context(format!("failed to serve on {}", config.addr))),
        Err(e) => return Err(anyhow::Error::new(e).context("the webhook listener task failed")),
    }
    tracing::info!("stopped");
    Ok(())
}

/// `configurations`: the registration as YAML (two documents).
pub fn print_configurations(args: &config::ConfigurationsArgs) -> anyhow::Result<String> {
    let ca_bundle =
        std::fs::read(&args.ca_file).with_context(|| format!("failed to read {}", args.ca_file.display()))?;
    let endpoint = if let Some(url) = &args.url {
        registration::Endpoint::Url(url.clone())
    } else {
        let (namespace, name) = args.service.split_once('/').context("--service is NAMESPACE/NAME")?;
        registration::Endpoint::Service { namespace: namespace.into(), name: name.into() }
    };
    let p = registration::Params {
        name: args.name.clone(),
        endpoint,
        ca_bundle,
        namespace: args.namespace.clone(),
        operator: format!("system:serviceaccount:{}:{}", args.namespace, args.operator_service_account),
        trusted_deleters: Config::trusted_default(),
        timeout_seconds: args.timeout_seconds,
        namespace_requirements: Vec::new(),
        group_requirements: Vec::new(),
    };
    let mut v = serde_json::to_value(registration::validating_configuration(&p))?;
    v["apiVersion"] = "admissionregistration.k8s.io/v1".into();
    v["kind"] = "ValidatingWebhookConfiguration".into();
    let mut m = serde_json::to_value(registration::mutating_configuration(&p))?;
    m["apiVersion"] = "admissionregistration.k8s.io/v1".into();
    m["kind"] = "MutatingWebhookConfiguration".into();
    Ok(format!("{}---\n{}", serde_saphyr::to_string(&v)?, serde_saphyr::to_string(&m)?))
}

#[cfg(test)]
mod metrics_tests {
    use super::*;

    #[test]
    fn families_are_every_family_the_registry_serves_from_the_start() {
        let m = Metrics::new().unwrap();
        let body = admin::render(&m.registry);
        for series in [
            "bloodraven_webhook_reviews_total{outcome=\"patched\",webhook=\"inject\"} 0",
            "bloodraven_webhook_reviews_total{outcome=\"denied\",webhook=\"deployment-clients\"} 0",
            "bloodraven_webhook_review_duration_seconds_count{webhook=\"operator-state\"} 0",
        ] {
            assert!(body.contains(series), "{series} missing from {body}");
        }
        let mut served: Vec<String> = m.registry.gather().iter().map(|f| f.name().to_owned()).collect();
        let mut listed: Vec<String> = m.families().iter().map(|d| d.fq_name.clone()).collect();
        served.sort();
        listed.sort();
        assert_eq!(served, listed);
        let reviews = m.families().into_iter().find(|d| d.fq_name == "bloodraven_webhook_reviews_total").unwrap();
        assert_eq!(reviews.variable_labels, ["webhook", "outcome"]);
    }
}

#[cfg(test)]
mod ca_bundle_tests {
    use super::certificates_only;

    const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUYQ==\n-----END CERTIFICATE-----\n";
    const KEY: &str =
        "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n-----END PRIVATE KEY-----\n";
    const EC_KEY: &str = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIA==\n-----END EC PRIVATE KEY-----\n";

    #[test]
    fn a_bundle_of_certificates_is_accepted() {
        assert_eq!(certificates_only(CERT), Ok(()));
        assert_eq!(certificates_only(&format!("{CERT}{CERT}")), Ok(()));
    }

    #[test]
    fn a_private_key_anywhere_in_the_bundle_is_refused_by_kind() {
        for pem in [KEY.to_owned(), format!("{CERT}{KEY}"), format!("{EC_KEY}{CERT}")] {
            let err = certificates_only(&pem).unwrap_err();
            assert!(err.contains("not only certificates"), "{err}");
            assert!(!err.contains("MIG") && !err.contains("MHc"), "the key's bytes are not echoed: {err}");
        }
    }

    #[test]
    fn an_empty_or_non_pem_bundle_is_refused() {
        assert_eq!(certificates_only(""), Err("it holds no certificate".into()));
        assert_eq!(certificates_only("not pem at all\n"), Err("it holds no certificate".into()));
    }
}
