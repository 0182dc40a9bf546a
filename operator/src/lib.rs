//! The Bloodraven operator: leader election, the failover-group and database
//! reconcilers, the MySQL adapter, the deploy API and metrics. Its listeners
//! and shutdown come from `bloodraven-serving`, shared with the webhook; its
//! tracing setup from `bloodraven-telemetry`, shared with every binary.
//!
//! [`run`] wires them together; `main.rs` only parses flags and calls it.

// Every item is the crate's own unless it is part of the public surface
// below (run, Config, metric_families): the compiler says so, not a comment.
#![warn(unreachable_pub)]

mod authority;
mod config;
mod controller;
mod deploy_api;
mod events;
mod failover;
mod failpoint;
mod leader;
mod leader_label;
mod lease;
mod metrics;
mod mysql;
mod tolerant;
mod watch_cache;

use std::sync::Arc;

use anyhow::Context as _;
use bloodraven_serving::admin;
use events::Recorder;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::events::Reporter;
use kube::{Api, Client};

pub use config::Config;

/// Time the controllers get to finish in-flight reconciles after SIGTERM
/// (a probe is bounded by `probeTimeoutSeconds`, at most 60 s, but the
/// usual one ends in well under this); within Kubernetes' default 30 s
/// termination grace period.
const CONTROLLER_SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// The description of every metric family the operator serves on
/// `/metrics`: [`metrics::Metrics::new`]'s and those the modules that own
/// metrics register at start ([`run`] makes the same registrations). Listed
/// with or without series, for the monitoring check
/// (`xtask/tests/monitoring.rs`) and `docs/metrics.md`.
pub fn metric_families() -> Result<Vec<prometheus::core::Desc>, metrics::MetricsError> {
    let metrics = metrics::Metrics::new()?;
    tolerant::report::register_metrics(&metrics)?;
    Ok(metrics.families())
}

/// Runs the operator until SIGTERM or SIGINT.
#[allow(clippy::too_many_lines)] // start-up in its order, one step a line or two
pub async fn run(config: Config) -> anyhow::Result<()> {
    let timings = config.leader_timings().map_err(anyhow::Error::msg)?;
    let identity = config.identity.clone().unwrap_or_else(default_identity);
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        identity = %identity,
        namespace = %config.namespace,
        plain_addr = %config.plain_addr,
        plain_max_connections = config.plain_max_connections,
        leader_lease = %config.leader_lease_name,
        lease_duration_seconds = config.lease_duration_seconds,
        renew_deadline_seconds = config.renew_deadline_seconds,
        retry_period_seconds = config.retry_period_seconds,
        group_selector = %config.group_selector,
        deploy_api_enabled = config.deploy_api_enabled,
        deploy_api_addr = %config.deploy_api_addr,
        deploy_api_max_connections = config.deploy_api_max_connections,
        credentials_namespace = %config.credentials_namespace.as_deref().unwrap_or(&config.namespace),
        "starting bloodraven-operator"
    );
    if let Some(seconds) = config.status_heartbeat_seconds {
        tracing::warn!(
            status_heartbeat_seconds = seconds,
            "--status-heartbeat-seconds is deprecated and has no effect: status is written only when it changes"
        );
    }
    // Every listener is bound before anything else (before leader election
    // too): a port that is taken ends the process here, never after it
    // reported ready or became leader.
    let plain_listener = bloodraven_serving::bind("metrics and health", config.plain_addr)?;
    let probe_listener = bloodraven_serving::bind("probes", config.probe_addr)?;
    let deploy_listener = if config.deploy_api_enabled {
        Some(bloodraven_serving::bind("deploy API", config.deploy_api_addr)?)
    } else {
        None
    };
    let client = Client::try_default().await.context("failed to build a Kubernetes client")?;
    let metrics = metrics::Metrics::new()?;
    let shutdown = bloodraven_serving::Shutdown::on_signals();

    let leases: Api<Lease> = Api::namespaced(client.clone(), &config.namespace);
    let (elector, leadership) = leader::Elector::new(leases, &config.leader_lease_name, &identity, timings);
    let elector = tokio::spawn(elector.run(shutdown.stopped()));
    tokio::spawn(track_leadership(leadership.clone(), metrics.clone(), timings.retry_period));
    if let Some(pod) = std::env::var("POD_NAME").ok().filter(|p| !p.is_empty()) {
        let pods = Api::namespaced(client.clone(), &config.namespace);
        tokio::spawn(leader_label::keep(pods, pod, leadership.clone(), timings.retry_period / 2));
    }
    let reporter = Reporter { controller: "bloodraven-operator".into(), instance: Some(identity.clone()) };
    let recorder = Recorder::new(client.clone(), reporter);
    // Every read of a Bloodraven custom resource goes through this reader,
    // so one object that does not decode is reported and skipped.
    let tolerant = tolerant::Tolerant::start(&client, &recorder, &leadership, &metrics, shutdown.stopped())?;

    let ready = admin::Readiness::new();
    let plain = admin::Admin { registry: metrics.registry().clone(), ready: ready.clone() };
    let plain_max = usize::try_from(config.plain_max_connections).unwrap_or(128);
    let plain = tokio::spawn(admin::serve(plain_listener, plain, plain_max, shutdown.stopped()));
    let probes = tokio::spawn(admin::serve_probes(probe_listener, ready.clone(), shutdown.stopped()));

    // Watch caches shared by the database reconciler and the deploy API:
    // authority is decided from them, never from a per-request read.
    let authority = authority::Authority {
        databases: deploy_api::database_reflector(&tolerant).await,
        groups: deploy_api::group_reflector(&tolerant, &config.group_selector).await,
        namespaces: authority::namespace_reflector(client.clone()).await,
    };

    // The one lease service of the process: the deploy API's handlers and the
    // reconcilers share its per-group locks and change counters.
    let leases = lease::service::Service::new(
        lease::store::Store::new(Api::namespaced(client.clone(), &config.namespace)).watch_verifications(),
        tolerant.clone(),
    )
    .with_group_cache(authority.groups.clone());
    let deploy_api = start_deploy_api(
        deploy_listener,
        &leases,
        &config,
        &client,
        &recorder,
        &authority,
        &leadership,
        &metrics,
        &shutdown,
    )?;

    // The key of decision-record digests, before any record is read.
    let record_key = failover::record::load_key(&Api::namespaced(client.clone(), &config.namespace))
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let credentials_namespace = config.credentials_namespace.clone().unwrap_or_else(|| config.namespace.clone());
    let records = failover::record::Records::start(
        &client,
        &config.namespace,
        metrics.decision_record_reads_total.clone(),
        record_key,
    );
    let ctx = Arc::new(controller::Context {
        client: client.clone(),
        recorder,
        metrics,
        leadership,
        namespace: config.namespace.clone(),
        deploy_api,
        authority,
        leases,
        tolerant,
        failpoint: failpoint::Failpoint::armed(config.failpoint.as_deref()),
        groups: controller::failover_group::State {
            missed: failover::emergency::Missed::default(),
            replicas: controller::failover_group::replicas::Replicas::default(),
            drains: failover::planned::DrainsSeen::default(),
            bypass: controller::failover_group::bypass::Checks::default(),
            unswept: failover::reassert::Unswept::default(),
            credentials: controller::failover_group::credentials::Cache::start(&client, &credentials_namespace),
            records,
            semi_sync: controller::failover_group::semisync::Memory::default(),
        },
        credentials_namespace,
    });
    tokio::spawn(controller::failover_group::cleanup::sweep_while_leading(ctx.clone()));
    ready.set_ready();
    let controllers = async {
        tokio::join!(
            controller::failover_group::run(
                ctx.clone(),
                &config.group_selector,
                config.reconcile_concurrency,
                shutdown.stopped(),
            ),
            controller::database::run(ctx, &config.group_selector, shutdown.stopped()),
        );
    };
    // A controller stops gracefully once in-flight reconciles end, but one
    // whose cache never filled (a SIGTERM during start-up) would wait for
    // it forever: after the signal, the controllers get a bounded grace.
    tokio::select! {
        () = controllers => {}
        () = async {
            shutdown.stopped().await;
            tokio::time::sleep(CONTROLLER_SHUTDOWN_GRACE).await;
        } => tracing::warn!(grace_seconds = CONTROLLER_SHUTDOWN_GRACE.as_secs(), "controllers did not stop within their grace; exiting"),
    }
    // Controllers are down: release leadership before exiting.
    let _ = elector.await;
    for (task, addr) in [(plain, config.plain_addr), (probes, config.probe_addr)] {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => return Err(anyhow::Error::new(err).context(format!("failed to serve on {addr}"))),
            Err(err) => return Err(anyhow::Error::new(err).context("plain HTTP task failed")),
        }
    }
    tracing::info!("stopped");
    Ok(())
}

/// Serves the deploy API on `listener` (bound at startup when
/// `--deploy-api-enabled`, `None` otherwise) over `service`, the lease
/// service the reconcilers share; whether it serves.
#[allow(clippy::too_many_arguments)] // the process's shared handles, each used once here
fn start_deploy_api(
    listener: Option<std::net::TcpListener>,
    service: &lease::service::Service,
    config: &Config,
    client: &Client,
    recorder: &Recorder,
    authority: &authority::Authority,
    leadership: &leader::Leadership,
    metrics: &metrics::Metrics,
    shutdown: &bloodraven_serving::Shutdown,
) -> anyhow::Result<bool> {
    let Some(listener) = listener else {
        return Ok(false);
    };
    let (Some(cert), Some(key)) = (config.tls_cert_file.clone(), config.tls_key_file.clone()) else {
        anyhow::bail!(
            "--deploy-api-enabled needs --tls-cert-file and --tls-key-file (chart: auxiliary.escrowTLS.enabled with a certificate Secret); the deploy API is never served without TLS"
        );
    };
    let tls = deploy_api::tls::load_and_watch(cert, key, std::time::Duration::from_secs(config.tls_reload_seconds))
        .context("failed to load the deploy API certificate")?;
    let max_connections = usize::try_from(config.deploy_api_max_connections).unwrap_or(512);
    let state = deploy_api::DeployState {
        service: service.clone(),
        auth: deploy_api::auth::Authenticator::new(
            Api::all(client.clone()),
            std::time::Duration::from_secs(config.token_review_cache_seconds),
        ),
        authority: authority.clone(),
        leadership: leadership.clone(),
        metrics: metrics.clone(),
        watches: deploy_api::watches_for(max_connections),
        shutdown: shutdown.clone(),
        waiting: Some(deploy_api::waiting::Waiting::new(client.clone(), recorder.clone())),
        body_reads: deploy_api::BodyReads::default(),
    };
    tokio::spawn(deploy_api::track_active_leases(service.clone(), metrics.clone(), leadership.clone()));
    let addr = config.deploy_api_addr;
    let server = deploy_api::serve(listener, tls, max_connections, state, shutdown.stopped());
    tokio::spawn(async move {
        if let Err(err) = server.await {
            tracing::error!(addr = %addr, error = %err, "the deploy API listener failed");
        }
    });
    Ok(true)
}

fn default_identity() -> String {
    let base = std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "bloodraven-operator".into());
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{base}_{}", &suffix[..8])
}

/// Keeps `bloodraven_leader` current, and drops the per-group gauges when
/// this replica stops leading (see [`metrics::Metrics::forget_groups`]).
async fn track_leadership(leadership: leader::Leadership, metrics: metrics::Metrics, period: std::time::Duration) {
    let mut was = false;
    loop {
        let now = leadership.is_leader();
        metrics.leader.set(i64::from(now));
        if was && !now {
            metrics.forget_groups();
        }
        was = now;
        tokio::time::sleep(period / 2).await;
    }
}
