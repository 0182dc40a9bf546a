//! The deploy API (`/deploy/v1`, TLS only, leader only): a group-wide
//! migration mutex and a renewable failover-hold, stored as Kubernetes
//! Leases and fenced by the group's topology generation (docs/deploy-api.md).
//!
//! The lease domain itself (state machine, storage, the service both this
//! API and the reconcilers call) is `crate::lease`; this module is only its
//! HTTP transport:
//! - `auth`: TokenReview (audience `bloodraven-deploy`); who may act for an
//!   instance is `crate::authority`'s.
//! - `router`: the HTTP surface, served by `bloodraven-serving` (TLS 1.2/1.3,
//!   HTTP/1.1 only, the listener bounds, certificate reloads), with the
//!   watch (push revocation, a long-poll) in `router/watch.rs`.
//! - `waiting`: a caller refused because a lease is held, told on its Job.

pub(crate) mod auth;
pub(crate) mod router;
pub(crate) mod waiting;

pub(crate) use bloodraven_serving::{limits, tls};

use std::time::Duration;

use bloodraven_api::v1alpha1::MysqlDatabase;
use futures::StreamExt;
use kube::runtime::reflector::{self, Store as Reflector};
use kube::runtime::watcher;

use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::tolerant::{Findings, Tolerant};

/// What the handlers share.
#[derive(Clone, Debug)]
pub(crate) struct DeployState {
    /// The lease service.
    pub service: crate::lease::service::Service,
    /// Token reviews.
    pub auth: auth::Authenticator,
    /// Who may act for which instance (watch caches).
    pub authority: crate::authority::Authority,
    /// Only the leader answers.
    pub leadership: Leadership,
    /// Metrics.
    pub metrics: Metrics,
    /// Open watches, bounded (see [`watches_for`]).
    pub watches: crate::lease::watch::Watches,
    /// Set once the process is stopping: open watches answer at once.
    pub shutdown: bloodraven_serving::Shutdown,
    /// Waits recorded on the waiting Pods' Jobs (`None`: not recorded).
    pub waiting: Option<waiting::Waiting>,
    /// Request bodies being read, by the caller's namespace (bounded).
    pub body_reads: BodyReads,
}

/// The most request bodies read at once for callers of one namespace. A
/// deployment client sends its small JSON body with its headers, so a
/// read takes milliseconds and a namespace's pipelines never come near
/// this; but a connection whose body is being read is being served, and so
/// holds its listener slot for up to the body's deadline (10 s). Without a
/// bound, a tenant's deployment client trickling bodies from several Pods
/// could keep every slot busy, and other tenants' renewals out.
pub(crate) const BODY_READS_PER_NAMESPACE: usize = 16;

/// Request bodies being read, per caller namespace.
#[derive(Clone, Debug, Default)]
pub(crate) struct BodyReads(std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>);

/// One body read; its drop gives the place back.
#[derive(Debug)]
pub(crate) struct BodyRead {
    reads: BodyReads,
    namespace: String,
}

impl BodyReads {
    /// A place for a body read of a caller in `namespace`, unless it has
    /// [`BODY_READS_PER_NAMESPACE`] already.
    pub(crate) fn take(&self, namespace: &str) -> Option<BodyRead> {
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = map.entry(namespace.to_owned()).or_insert(0);
        if *n >= BODY_READS_PER_NAMESPACE {
            return None;
        }
        *n += 1;
        Some(BodyRead { reads: self.clone(), namespace: namespace.to_owned() })
    }
}

impl Drop for BodyRead {
    fn drop(&mut self) {
        let mut map = self.reads.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = map.get_mut(&self.namespace) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.namespace);
            }
        }
    }
}

/// The bound on open watches for a listener of `max_connections`: half of
/// it, so that watches (each holding a connection for up to a minute) can
/// never take every slot from renewals, which must get through.
pub(crate) fn watches_for(max_connections: usize) -> crate::lease::watch::Watches {
    crate::lease::watch::Watches::new(max_connections / 2)
}

/// Starts a reflector of every MysqlDatabase (for authorization) and waits
/// until its first list is in. A MysqlDatabase that does not decode is left
/// out, so it grants nobody authority (the database controller reports it).
pub(crate) async fn database_reflector(tolerant: &Tolerant) -> Reflector<MysqlDatabase> {
    let (reader, writer) = reflector::store();
    let stream = tolerant.watch(watcher::Config::default(), Some((writer, reader.clone())), Findings::Skip);
    tokio::spawn(stream.for_each(|_| async {}));
    if reader.wait_until_ready().await.is_err() {
        tracing::warn!("the MysqlDatabase reflector stopped before its first list");
    }
    reader
}

/// A watch cache of the groups this operator manages (`selector`), for the
/// renewal fast path; ready once its first list is in. A group that does
/// not decode is left out (the failover-group controller reports it).
pub(crate) async fn group_reflector(
    tolerant: &Tolerant,
    selector: &str,
) -> Reflector<bloodraven_api::v1alpha1::MysqlFailoverGroup> {
    let (reader, writer) = reflector::store();
    let config =
        if selector.is_empty() { watcher::Config::default() } else { watcher::Config::default().labels(selector) };
    let stream = tolerant.watch(config, Some((writer, reader.clone())), Findings::Skip);
    tokio::spawn(stream.for_each(|_| async {}));
    if reader.wait_until_ready().await.is_err() {
        tracing::warn!("the MysqlFailoverGroup reflector stopped before its first list");
    }
    reader
}

/// Keeps `bloodraven_deploy_leases_active{group,kind}` current (leader only).
pub(crate) async fn track_active_leases(
    service: crate::lease::service::Service,
    metrics: Metrics,
    leadership: Leadership,
) {
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        if !leadership.is_leader() {
            continue;
        }
        let Ok(groups) = service.all_slots().await else { continue };
        let now = k8s_openapi::jiff::Timestamp::now();
        metrics.deploy_leases_active.reset();
        for (group, slots) in groups {
            for kind in [bloodraven_api::deploy::LeaseKind::Migration, bloodraven_api::deploy::LeaseKind::FailoverHold]
            {
                let live = i64::from(slots.live(kind, now).is_some());
                metrics.deploy_leases_active.with_label_values(&[group.as_str(), kind.as_str()]).set(live);
            }
        }
    }
}

/// Serves the deploy API over TLS on `listener` (bound at startup by
/// [`bloodraven_serving::bind`]) until `shutdown` resolves, with at most
/// `max_connections` open connections and the other bounds of
/// [`limits::Limits::new`].
pub(crate) async fn serve(
    listener: std::net::TcpListener,
    tls: tls::RustlsConfig,
    max_connections: usize,
    state: DeployState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = limits::Limits::new(max_connections);
    bloodraven_serving::serve_tls("deploy API", listener, tls, limits, router::router(state), shutdown).await
}
