//! Command-line flags; every flag can also be set from the environment
//! variable named beside it. Durations are whole seconds.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;

/// Log output format: shared by every binary (`bloodraven-telemetry`).
pub(crate) use bloodraven_telemetry::LogFormat;

/// The operator's configuration.
#[derive(Clone, Debug, Parser)]
#[command(name = "bloodraven-operator", version, about)]
pub struct Config {
    /// Crash-test hook: the process aborts (as by SIGKILL: no cleanup, no
    /// Lease release) when the failover engine reaches the named point,
    /// e.g. `planned-after-decide` (see `crate::failpoint`). Hidden; for
    /// the e2e tests that kill the leader at every phase.
    #[arg(long, env = "BLOODRAVEN_FAILPOINT", hide = true)]
    pub failpoint: Option<String>,

    /// Namespace the operator runs in: its leader-election Lease (and, later,
    /// the deploy Leases) live here.
    #[arg(long, env = "BLOODRAVEN_NAMESPACE", default_value = bloodraven_api::names::DEFAULT_NAMESPACE)]
    pub namespace: String,

    /// Identity written as the leader Lease's holder. Default: `$POD_NAME`,
    /// else the host name, with a random suffix so two processes never share one.
    #[arg(long, env = "BLOODRAVEN_IDENTITY")]
    pub identity: Option<String>,

    /// Address of the plain HTTP listener (`/metrics`, `/healthz`, `/readyz`).
    #[arg(long, env = "BLOODRAVEN_PLAIN_ADDR", default_value = "0.0.0.0:8082")]
    pub plain_addr: SocketAddr,

    /// Address of the probe listener (`/healthz`, `/readyz`), for kubelet's
    /// `exec` probes (`bloodraven-operator probe /readyz`). Loopback by
    /// default: a listener other Pods can reach could have its connection
    /// slots filled by anyone, failing readiness.
    #[arg(long, env = "BLOODRAVEN_PROBE_ADDR", default_value = bloodraven_serving::admin::PROBE_ADDR)]
    pub probe_addr: SocketAddr,

    /// Most open connections the plain listener accepts at once; more are
    /// closed at accept. Kubelet probes and Prometheus scrapes need a
    /// handful; 128 leaves room for several scrapers, and with the deploy
    /// API's 512 stays under the common 1024 open-file limit with room for
    /// the API-server and MySQL connections. Every connection is also bounded
    /// in time (see `docs/deploy-api.md`, "Listener limits").
    #[arg(long, env = "BLOODRAVEN_PLAIN_MAX_CONNECTIONS", default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub plain_max_connections: u64,

    /// Name of the leader-election Lease.
    #[arg(long, env = "BLOODRAVEN_LEADER_LEASE", default_value = bloodraven_api::names::LEADER_LEASE_NAME)]
    pub leader_lease_name: String,

    /// Seconds a non-leader waits after the last observed renewal before it
    /// takes over the leader Lease (client-go's LeaseDuration).
    #[arg(long, env = "BLOODRAVEN_LEASE_DURATION_SECONDS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(2..=3600))]
    pub lease_duration_seconds: u64,

    /// Seconds the leader keeps acting without a successful renewal; must be
    /// shorter than the lease duration (client-go's RenewDeadline).
    #[arg(long, env = "BLOODRAVEN_RENEW_DEADLINE_SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub renew_deadline_seconds: u64,

    /// Seconds between attempts to acquire or renew the leader Lease
    /// (client-go's RetryPeriod); must be shorter than the renew deadline.
    #[arg(long, env = "BLOODRAVEN_RETRY_PERIOD_SECONDS", default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub retry_period_seconds: u64,

    /// Only manage MysqlFailoverGroups matching this label selector (empty:
    /// all). Lets several operators share one API server, one per shard.
    #[arg(long, env = "BLOODRAVEN_GROUP_SELECTOR", default_value = "")]
    pub group_selector: String,

    /// The only namespace site credential Secrets are read from (default: the
    /// operator's namespace). A group naming a Secret elsewhere gets
    /// `CredentialsUnavailable`: creating a group must not let anyone use or
    /// probe Secrets of other namespaces (the cert-manager ClusterIssuer pattern).
    #[arg(long, env = "BLOODRAVEN_CREDENTIALS_NAMESPACE")]
    pub credentials_namespace: Option<String>,

    /// Serve the deploy API (`/deploy/v1`) on `--deploy-api-addr` over TLS
    /// (chart value `auxiliary.deployAPI.enabled`). Needs `--tls-cert-file`
    /// and `--tls-key-file`; the operator refuses to start without them.
    #[arg(long, env = "BLOODRAVEN_DEPLOY_API_ENABLED", default_value_t = false)]
    pub deploy_api_enabled: bool,

    /// Address of the deploy API's TLS listener.
    #[arg(long, env = "BLOODRAVEN_DEPLOY_API_ADDR", default_value = "0.0.0.0:8443")]
    pub deploy_api_addr: SocketAddr,

    /// PEM certificate chain of the TLS listener (the `auxiliary.escrowTLS` Secret's `tls.crt`).
    #[arg(long, env = "BLOODRAVEN_TLS_CERT_FILE")]
    pub tls_cert_file: Option<std::path::PathBuf>,

    /// PEM private key of the TLS listener (`tls.key`).
    #[arg(long, env = "BLOODRAVEN_TLS_KEY_FILE")]
    pub tls_key_file: Option<std::path::PathBuf>,

    /// Seconds between checks of the certificate files for changes (reload without restart).
    #[arg(long, env = "BLOODRAVEN_TLS_RELOAD_SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub tls_reload_seconds: u64,

    /// Most open connections the deploy API accepts at once; more are closed
    /// at accept (with the handshake, header, idle, write-stall and body
    /// timeouts, this bounds what idle or slow clients can hold; see
    /// `docs/deploy-api.md`, "Listener limits").
    #[arg(long, env = "BLOODRAVEN_DEPLOY_API_MAX_CONNECTIONS", default_value_t = 512, value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub deploy_api_max_connections: u64,

    /// Longest time, in seconds, a TokenReview result is reused (never past
    /// the token's own expiry; 0 disables the cache).
    #[arg(long, env = "BLOODRAVEN_TOKEN_REVIEW_CACHE_SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=300))]
    pub token_review_cache_seconds: u64,

    /// Deprecated, no effect: a group's status is written only when
    /// something in it changes, never because it is old. Still accepted so
    /// that existing manifests keep starting; a value logs one warning at
    /// start.
    #[arg(long, env = "BLOODRAVEN_STATUS_HEARTBEAT_SECONDS", value_parser = clap::value_parser!(u64))]
    pub status_heartbeat_seconds: Option<u64>,

    /// Most failover groups reconciled (probed, acted on, status written)
    /// at once. A group's reconcile is mostly waiting on MySQL and the API
    /// server, so a few dozen keep up with a thousand groups at a 5 s probe
    /// interval; the bound keeps memory (connections, TLS buffers) and the
    /// burst on the API server flat when every group changes at once.
    #[arg(long, env = "BLOODRAVEN_RECONCILE_CONCURRENCY", default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub reconcile_concurrency: u16,

    /// Log format.
    #[arg(long, env = "BLOODRAVEN_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

impl Config {
    /// Leader-election timings, checked: retry period < renew deadline < lease duration.
    pub fn leader_timings(&self) -> Result<crate::leader::Timings, String> {
        let t = crate::leader::Timings {
            lease_duration: Duration::from_secs(self.lease_duration_seconds),
            renew_deadline: Duration::from_secs(self.renew_deadline_seconds),
            retry_period: Duration::from_secs(self.retry_period_seconds),
        };
        if t.retry_period >= t.renew_deadline || t.renew_deadline >= t.lease_duration {
            return Err(format!(
                "leader timings must satisfy retry period ({}s) < renew deadline ({}s) < lease duration ({}s)",
                self.retry_period_seconds, self.renew_deadline_seconds, self.lease_duration_seconds
            ));
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deprecated_status_heartbeat_is_still_accepted() {
        let unset = Config::try_parse_from(["bloodraven-operator"]).unwrap();
        assert_eq!(unset.status_heartbeat_seconds, None, "no value: no deprecation warning");
        // Every value it took before still starts the operator.
        for seconds in ["1", "60", "600"] {
            let set = Config::try_parse_from(["bloodraven-operator", "--status-heartbeat-seconds", seconds]).unwrap();
            assert_eq!(set.status_heartbeat_seconds, seconds.parse().ok());
        }
    }
}
