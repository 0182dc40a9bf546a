//! The admin listener every Bloodraven binary serves on plain HTTP:
//! `/metrics` (Prometheus text), `/healthz` (the process answers) and
//! `/readyz` (the process is ready: caches synced, controllers running —
//! what "ready" means is the binary's to say, through [`Readiness`]). Any
//! other path answers 404: in particular the operator's deploy API
//! (`/deploy`) is never served here, only over TLS.
//!
//! Served with the same bounds as every listener ([`crate::serve_plain`]);
//! its bound is time, not authentication, so let only kubelet and the
//! scrapers reach it (a NetworkPolicy).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::routing::get;
use prometheus::{Encoder as _, Registry, TextEncoder};

use crate::Limits;

/// Whether the process is ready; false until [`Readiness::set_ready`].
/// Cheap to clone; every clone sees the same flag.
#[derive(Clone, Debug, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// A flag that says "not ready".
    pub fn new() -> Self {
        Readiness::default()
    }

    /// From now on `/readyz` answers 200.
    pub fn set_ready(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether the process said it is ready.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// What the admin listener serves.
#[derive(Clone, Debug)]
pub struct Admin {
    /// The process's metrics, rendered on `/metrics`.
    pub registry: Registry,
    /// The process's readiness, answered on `/readyz`.
    pub ready: Readiness,
}

/// The admin router: `/metrics`, `/healthz`, `/readyz`; 404 elsewhere.
pub fn router(admin: Admin) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(admin)
}

/// The registry's metrics in the Prometheus text format (version 0.0.4).
pub fn render(registry: &Registry) -> String {
    let mut buf = Vec::new();
    if let Err(err) = TextEncoder::new().encode(&registry.gather(), &mut buf) {
        tracing::warn!(error = %err, "failed to encode metrics");
    }
    String::from_utf8(buf).unwrap_or_default()
}

async fn metrics(State(admin): State<Admin>) -> ([(header::HeaderName, &'static str); 1], String) {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], render(&admin.registry))
}

async fn readyz(State(admin): State<Admin>) -> (StatusCode, &'static str) {
    if admin.ready.is_ready() { (StatusCode::OK, "ok") } else { (StatusCode::SERVICE_UNAVAILABLE, "not ready") }
}

/// Serves the admin router on `addr` (plain HTTP) until `shutdown` resolves,
/// with at most `max_connections` open connections and the other bounds of
/// [`Limits::new`]. Returns an error when `addr` cannot be bound.
pub async fn serve(
    addr: SocketAddr,
    admin: Admin,
    max_connections: usize,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    crate::serve_plain("metrics and health", addr, Limits::new(max_connections), router(admin), shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    fn admin(ready: bool) -> Admin {
        let admin = Admin { registry: Registry::new(), ready: Readiness::new() };
        if ready {
            admin.ready.set_ready();
        }
        admin
    }

    async fn status(router: Router, path: &str) -> StatusCode {
        router.oneshot(Request::get(path).body(Body::empty()).unwrap()).await.unwrap().status()
    }

    #[tokio::test]
    async fn the_admin_port_never_serves_the_deploy_api() {
        for path in ["/deploy", "/deploy/v1", "/deploy/v1/groups/playground"] {
            assert_eq!(status(router(admin(true)), path).await, StatusCode::NOT_FOUND, "{path}");
        }
    }

    #[tokio::test]
    async fn readyz_follows_readiness_and_healthz_does_not() {
        assert_eq!(status(router(admin(false)), "/readyz").await, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(status(router(admin(true)), "/readyz").await, StatusCode::OK);
        assert_eq!(status(router(admin(false)), "/healthz").await, StatusCode::OK);
    }

    #[tokio::test]
    async fn metrics_are_the_registrys_in_prometheus_text() {
        let a = admin(true);
        let gauge = prometheus::IntGauge::new("bloodraven_test_gauge", "a test gauge").unwrap();
        a.registry.register(Box::new(gauge.clone())).unwrap();
        gauge.set(3);
        let response = router(a).oneshot(Request::get("/metrics").body(Body::empty()).unwrap()).await.unwrap();
        assert_eq!(response.headers()[header::CONTENT_TYPE], "text/plain; version=0.0.4");
        let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        assert!(String::from_utf8_lossy(&body).contains("bloodraven_test_gauge 3"));
    }
}
