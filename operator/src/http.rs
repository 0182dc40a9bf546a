//! The plain HTTP listener (default :8082): `/metrics`, `/healthz`,
//! `/readyz`. It never serves `/deploy` (the deploy API is TLS-only on :8443):
//! any other path answers 404. Served by `bloodraven-serving` with the same
//! bounds as every listener, its own connection limit
//! (`--plain-max-connections`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

use crate::metrics::Metrics;

/// Shared state of the plain listener.
#[derive(Clone, Debug)]
pub struct PlainState {
    /// Metrics to render.
    pub metrics: Metrics,
    /// Set once the controllers' caches are running.
    pub ready: Arc<AtomicBool>,
}

/// The plain router.
pub fn router(state: PlainState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(state)
}

async fn metrics(State(state): State<PlainState>) -> ([(axum::http::HeaderName, &'static str); 1], String) {
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], state.metrics.render())
}

async fn readyz(State(state): State<PlainState>) -> (StatusCode, &'static str) {
    if state.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

/// Binds `addr` and serves until `shutdown` resolves, with at most
/// `max_connections` open connections and the other bounds of
/// [`bloodraven_serving::Limits::new`] (HTTP/1.1 only, header, idle and
/// write-stall timeouts), the same as the deploy API's.
pub async fn serve(
    addr: SocketAddr,
    state: PlainState,
    max_connections: usize,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = bloodraven_serving::Limits::new(max_connections);
    bloodraven_serving::serve_plain("metrics and health", addr, limits, router(state), shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    fn state(ready: bool) -> PlainState {
        PlainState { metrics: Metrics::new().unwrap(), ready: Arc::new(AtomicBool::new(ready)) }
    }

    async fn status(router: Router, path: &str) -> StatusCode {
        router.oneshot(Request::get(path).body(Body::empty()).unwrap()).await.unwrap().status()
    }

    #[tokio::test]
    async fn plain_port_never_serves_deploy_api() {
        for path in ["/deploy", "/deploy/v1", "/deploy/v1/groups/playground"] {
            assert_eq!(status(router(state(true)), path).await, StatusCode::NOT_FOUND, "{path}");
        }
    }

    #[tokio::test]
    async fn readyz_follows_readiness() {
        assert_eq!(status(router(state(false)), "/readyz").await, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(status(router(state(true)), "/readyz").await, StatusCode::OK);
        assert_eq!(status(router(state(false)), "/healthz").await, StatusCode::OK);
    }

    #[tokio::test]
    async fn metrics_are_prometheus_text() {
        let s = state(true);
        s.metrics.topology_generation.with_label_values(&["g"]).set(3);
        let body = s.metrics.render();
        assert!(body.contains("bloodraven_topology_generation{group=\"g\"} 3"), "{body}");
        s.metrics.site_up.with_label_values(&["g", "iad"]).set(1);
        s.metrics.site_up.with_label_values(&["h", "iad"]).set(1);
        s.metrics.forget_group("g", &["iad", "pdx"]);
        let body = s.metrics.render();
        assert!(!body.contains("group=\"g\""), "a deleted group leaves no series: {body}");
        assert!(body.contains("bloodraven_site_up{group=\"h\",site=\"iad\"} 1"), "other groups stay: {body}");
    }
}
