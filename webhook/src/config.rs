//! Command-line flags (each also read from an environment variable).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

pub use bloodraven_telemetry::LogFormat;

/// `bloodraven-webhook`: the admission webhook.
#[derive(Debug, Parser)]
#[command(name = "bloodraven-webhook", version, about)]
pub struct Cli {
    /// What to do; serving when absent.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Serving flags.
    #[command(flatten)]
    pub serve: Config,
}

/// Subcommands besides serving.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the ValidatingWebhookConfiguration and the
    /// MutatingWebhookConfiguration (YAML) for `kubectl apply -f -`.
    Configurations(ConfigurationsArgs),
    /// The exec probe's client: GET PATH on the loopback probe listener, exit 0 on 200.
    Probe(bloodraven_serving::admin::ProbeArgs),
}

/// Flags of `configurations`.
#[derive(Clone, Debug, clap::Args)]
pub struct ConfigurationsArgs {
    /// Name of both configurations.
    #[arg(long, default_value = "bloodraven")]
    pub name: String,
    /// Reach the webhook at this URL (`https://host:port`) instead of a Service.
    #[arg(long, conflicts_with = "service")]
    pub url: Option<String>,
    /// Reach the webhook through Service `NAMESPACE/NAME` (port 9443).
    #[arg(long, default_value = "bloodraven/bloodraven-webhook")]
    pub service: String,
    /// The CA bundle (PEM file) the webhook's certificate chains to.
    #[arg(long)]
    pub ca_file: PathBuf,
    /// The operator's namespace.
    #[arg(long, default_value = bloodraven_api::names::DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// The operator's ServiceAccount name (in `--namespace`).
    #[arg(long, default_value = "bloodraven-operator")]
    pub operator_service_account: String,
    /// Seconds the API server waits for the webhook.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(i32).range(1..=30))]
    pub timeout_seconds: i32,
}

/// The serving flags.
#[derive(Clone, Debug, clap::Args)]
pub struct Config {
    /// The operator's (and the webhook's) namespace: where its state objects live.
    #[arg(long, env = "BLOODRAVEN_NAMESPACE", default_value = bloodraven_api::names::DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// The operator's ServiceAccount name, in `--namespace`.
    #[arg(long, env = "BLOODRAVEN_OPERATOR_SERVICE_ACCOUNT", default_value = "bloodraven-operator")]
    pub operator_service_account: String,
    /// Users whose deletes of operator state objects are let through
    /// (Kubernetes deleting a namespace or garbage): repeat the flag.
    #[arg(
        long = "trusted-deleter",
        env = "BLOODRAVEN_TRUSTED_DELETERS",
        value_delimiter = ',',
        default_values_t = Config::trusted_default()
    )]
    pub trusted_deleters: Vec<String>,
    /// TLS listener of the admission endpoints.
    #[arg(long, env = "BLOODRAVEN_WEBHOOK_ADDR", default_value = "0.0.0.0:9443")]
    pub addr: SocketAddr,
    /// Certificate chain (PEM); reloaded when it changes.
    #[arg(long, env = "BLOODRAVEN_TLS_CERT_FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// Private key (PEM); reloaded with the certificate.
    #[arg(long, env = "BLOODRAVEN_TLS_KEY_FILE")]
    pub tls_key_file: Option<PathBuf>,
    /// Seconds between checks of the certificate files.
    #[arg(long, env = "BLOODRAVEN_TLS_RELOAD_SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub tls_reload_seconds: u64,
    /// Most connections at once on the TLS listener.
    #[arg(long, env = "BLOODRAVEN_WEBHOOK_MAX_CONNECTIONS", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub max_connections: u64,
    /// Plain HTTP admin listener: `/metrics`, `/healthz`, `/readyz`.
    #[arg(long, env = "BLOODRAVEN_PLAIN_ADDR", default_value = "0.0.0.0:8082")]
    pub plain_addr: SocketAddr,
    /// Loopback listener of the exec probes.
    #[arg(long, env = "BLOODRAVEN_PROBE_ADDR", default_value = bloodraven_serving::admin::PROBE_ADDR)]
    pub probe_addr: SocketAddr,
    /// The sidecar image injected into migration Jobs.
    #[arg(long, env = "BLOODRAVEN_SIDECAR_IMAGE", default_value = "bloodraven/sidecar:latest")]
    pub sidecar_image: String,
    /// Its pull policy.
    #[arg(long, env = "BLOODRAVEN_SIDECAR_IMAGE_PULL_POLICY", default_value = "IfNotPresent", value_parser = ["Always", "IfNotPresent", "Never"])]
    pub sidecar_image_pull_policy: String,
    /// The deploy API the injected sidecar calls.
    #[arg(long, env = "BLOODRAVEN_DEPLOY_URL", default_value = "https://bloodraven.bloodraven.svc:8443")]
    pub deploy_url: String,
    /// The deploy API's CA bundle (PEM file), injected into the sidecar; re-read for every injection.
    #[arg(long, env = "BLOODRAVEN_DEPLOY_CA_FILE")]
    pub deploy_ca_file: Option<PathBuf>,
    /// `activeDeadlineSeconds` given to an injected Job that sets none.
    #[arg(long, env = "BLOODRAVEN_DEFAULT_ACTIVE_DEADLINE_SECONDS", default_value_t = 3600, value_parser = clap::value_parser!(i64).range(60..=604_800))]
    pub default_active_deadline_seconds: i64,
    /// The sidecar's acquire timeout, seconds (cut to fit the Job's deadline).
    #[arg(long, env = "BLOODRAVEN_SIDECAR_ACQUIRE_TIMEOUT", default_value_t = 600, value_parser = clap::value_parser!(i64).range(10..=86_400))]
    pub sidecar_acquire_timeout_seconds: i64,
    /// Lifetime of the injected projected token, seconds (at least 600).
    #[arg(long, env = "BLOODRAVEN_TOKEN_EXPIRATION_SECONDS", default_value_t = 3600, value_parser = clap::value_parser!(i64).range(600..=86_400))]
    pub token_expiration_seconds: i64,
    /// Log format.
    #[arg(long, env = "BLOODRAVEN_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Benchmarks only: answer every review "allowed" with no check (the
    /// baseline a benchmark compares the real webhook with).
    #[arg(long, env = "BLOODRAVEN_WEBHOOK_NOOP", hide = true)]
    pub noop: bool,
    /// Benchmarks only, with `--noop`: answer every Job review with the JSON
    /// patch in this file (the baseline that costs the API server the same
    /// patch as a real injection, without the webhook's checks).
    #[arg(long, env = "BLOODRAVEN_WEBHOOK_NOOP_PATCH_FILE", hide = true, requires = "noop")]
    pub noop_patch_file: Option<PathBuf>,
    /// Tests only: delay every SubjectAccessReview by this many milliseconds
    /// (to show that a slow authorization is bounded by the API server's timeout).
    #[arg(long, env = "BLOODRAVEN_WEBHOOK_TEST_AUTHZ_DELAY_MS", hide = true)]
    pub test_authorization_delay_ms: Option<u64>,
}

impl Config {
    /// The default trusted deleters: the namespace controller and the
    /// garbage collector, as kube-controller-manager runs them with
    /// `--use-service-account-credentials`.
    pub fn trusted_default() -> Vec<String> {
        vec![
            "system:serviceaccount:kube-system:namespace-controller".to_owned(),
            "system:serviceaccount:kube-system:generic-garbage-collector".to_owned(),
        ]
    }

    /// The operator's username: `system:serviceaccount:NS:NAME`.
    pub fn operator_username(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.operator_service_account)
    }
}
