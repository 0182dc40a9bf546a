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
//!
//! Kubelet's probes do not use it: anyone who can open TCP connections to
//! the Pod could fill its connection slots and fail readiness (taking the
//! deploy API out of its Service). [`serve_probes`] answers `/healthz` and
//! `/readyz` on a loopback-only listener that nothing outside the Pod can
//! reach, and [`probe`] is the client an `exec` probe runs
//! (`bloodraven-operator probe /readyz`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

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

/// The probe router: `/healthz` and `/readyz` only; 404 elsewhere.
pub fn probe_router(ready: Readiness) -> Router {
    Router::new().route("/healthz", get(|| async { "ok" })).route("/readyz", get(readyz_of)).with_state(ready)
}

/// Default address of the probe listener: loopback only, so that only
/// processes in the Pod (an `exec` probe) reach it.
pub const PROBE_ADDR: &str = "127.0.0.1:8081";

/// Most connections the probe listener holds at once: one `exec` probe at a
/// time per probe kind, with room for overlap.
const PROBE_MAX_CONNECTIONS: usize = 16;

/// Serves [`probe_router`] on `listener` (bound by [`crate::bind`]; plain
/// HTTP, [`PROBE_MAX_CONNECTIONS`]) until `shutdown` resolves. A
/// non-loopback address is served but logged as a warning: it gives back
/// the exposure this listener exists to avoid.
pub async fn serve_probes(
    listener: std::net::TcpListener,
    ready: Readiness,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    if !addr.ip().is_loopback() {
        tracing::warn!(addr = %addr, "the probe listener is not on a loopback address: anyone who reaches it can fill its slots and fail readiness");
    }
    let limits = Limits { max_connections_per_peer: PROBE_MAX_CONNECTIONS, ..Limits::new(PROBE_MAX_CONNECTIONS) };
    crate::serve_plain("probes", listener, limits, probe_router(ready), shutdown).await
}

/// GETs `path` from the probe listener at `addr` over HTTP/1.1 within
/// `timeout` and returns the status code. Errors (connect, I/O, timeout)
/// are returned as text for the probe's output. The client of an `exec`
/// readiness or liveness probe: exit 0 on 200.
pub async fn probe(addr: SocketAddr, path: &str, timeout: Duration) -> Result<u16, String> {
    let get = async {
        let stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| format!("connect to {addr}: {e}"))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| format!("HTTP handshake with {addr}: {e}"))?;
        tokio::spawn(conn);
        let request = axum::http::Request::get(path)
            .header(axum::http::header::HOST, addr.to_string())
            .body(http_body_util::Empty::<axum::body::Bytes>::new())
            .map_err(|e| format!("request for {path:?}: {e}"))?;
        let response = sender.send_request(request).await.map_err(|e| format!("GET {path} from {addr}: {e}"))?;
        Ok(response.status().as_u16())
    };
    tokio::time::timeout(timeout, get).await.map_err(|_| format!("no answer from {addr} within {timeout:?}"))?
}

/// `<binary> probe [--addr ADDR] [--timeout-seconds N] PATH`: what a Pod's
/// `exec` probe runs. Exit 0 when the probe listener answers 200, 1
/// otherwise (the status or the error on stdout, which kubelet records in
/// the probe's Event).
#[derive(clap::Parser, Debug)]
#[command(name = "probe", about = "Ask this Pod's loopback probe listener; exit 0 on 200")]
pub struct ProbeArgs {
    /// The probe listener's address (the binary's `--probe-addr`).
    #[arg(long, default_value = PROBE_ADDR)]
    pub addr: SocketAddr,
    /// Seconds to wait for the answer (kubelet's own `timeoutSeconds`
    /// bounds the whole command too).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=60))]
    pub timeout_seconds: u64,
    /// `/readyz` or `/healthz`.
    pub path: String,
}

impl ProbeArgs {
    /// Runs the probe and returns the process exit code.
    pub async fn run(&self) -> i32 {
        match probe(self.addr, &self.path, Duration::from_secs(self.timeout_seconds)).await {
            Ok(200) => {
                println!("{} 200", self.path);
                0
            }
            Ok(code) => {
                println!("{} {code}", self.path);
                1
            }
            Err(err) => {
                println!("{err}");
                1
            }
        }
    }
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
    readyz_of(State(admin.ready)).await
}

async fn readyz_of(State(ready): State<Readiness>) -> (StatusCode, &'static str) {
    if ready.is_ready() { (StatusCode::OK, "ok") } else { (StatusCode::SERVICE_UNAVAILABLE, "not ready") }
}

/// Serves the admin router on `listener` (bound by [`crate::bind`]; plain
/// HTTP) until `shutdown` resolves, with at most `max_connections` open
/// connections and the other bounds of [`Limits::new`].
pub async fn serve(
    listener: std::net::TcpListener,
    admin: Admin,
    max_connections: usize,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    crate::serve_plain("metrics and health", listener, Limits::new(max_connections), router(admin), shutdown).await
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
    async fn the_probe_listener_answers_probes_only_and_its_client_reads_the_status() {
        let ready = Readiness::new();
        for path in ["/metrics", "/deploy/v1"] {
            assert_eq!(status(probe_router(ready.clone()), path).await, StatusCode::NOT_FOUND, "{path}");
        }
        let listener = crate::bind("probes", "127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve_probes(listener, ready.clone(), async move {
            let _ = stopped.await;
        }));
        let t = Duration::from_secs(2);
        let mut first = probe(addr, "/readyz", t).await;
        for _ in 0..50 {
            if first.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            first = probe(addr, "/readyz", t).await;
        }
        assert_eq!(first, Ok(503));
        ready.set_ready();
        assert_eq!(probe(addr, "/readyz", t).await, Ok(200));
        assert_eq!(probe(addr, "/healthz", t).await, Ok(200));
        assert_eq!(probe(addr, "/metrics", t).await, Ok(404));
        let _ = stop.send(());
        server.await.unwrap().unwrap();
        let err = probe(addr, "/readyz", t).await.unwrap_err();
        assert!(err.contains("connect to 127.0.0.1"), "{err}");
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
