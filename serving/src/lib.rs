//! What the Bloodraven binaries that serve HTTP (the operator and the
//! webhook) need to serve and to run: one way to serve an axum router over TLS
//! ([`serve_tls`]) and one over plain HTTP ([`serve_plain`]), both with the
//! same bounds ([`Limits`]); the rustls configuration and its reload
//! ([`tls`]); the admin listener (`/metrics`, `/healthz`, `/readyz`:
//! [`admin`]); shutdown on SIGTERM
//! ([`shutdown`]); and the rule for request values in log lines and error
//! messages ([`log`]).
//!
//! Model: a listener speaks HTTP/1.1 only (ALPN `http/1.1` on TLS; the
//! HTTP/1 connection builder alone, so an HTTP/2 preface is answered like any
//! malformed request and the connection closed). Every state a connection
//! can be in has a deadline — accept (the connection limit), TLS handshake,
//! waiting for a request head (which also bounds idle keep-alive), writing a
//! response — so no client, authenticated or not, can hold a connection
//! slot for longer than those bounds (docs/deploy-api.md, "Listener limits").
//!
//! ```no_run
//! # async fn example(router: axum::Router, addr: std::net::SocketAddr) -> std::io::Result<()> {
//! use bloodraven_serving::{Limits, bind, serve_plain};
//! // Bind every listener first: a port that cannot be bound ends the process
//! // before it reports ready.
//! let listener = bind("metrics", addr)?;
//! serve_plain("metrics", listener, Limits::new(128), router, std::future::pending()).await
//! # }
//! ```

pub mod admin;
pub mod body;
pub mod limits;
pub mod log;
pub mod shutdown;
pub mod tls;

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum_server::Handle;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto::Builder;

use limits::LimitAcceptor;
pub use limits::Limits;
pub use shutdown::Shutdown;
pub use tls::{RustlsConfig, TlsError};

/// Time in-flight requests get to finish after shutdown was asked for; then
/// their connections are dropped. Within Kubernetes' default 30 s
/// termination grace period, leaving the rest for the process's own shutdown.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Configures the HTTP connection builder of a listener: HTTP/1 only (with
/// the auto builder's version detection off, an HTTP/2 preface reaches the
/// HTTP/1 parser, which refuses it and closes the connection), the request
/// head deadline (also the keep-alive idle deadline) and the head size bound.
///
/// Returns the builder to use; `serve_tls` and `serve_plain` install it, and
/// tests serve one connection with it.
pub(crate) fn http_builder(limits: &Limits) -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new()).http1_only();
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true)
        .max_buf_size(limits.max_head_bytes);
    builder
}

/// Binds `addr` for the listener named `listener` (`"deploy API"`,
/// `"webhook"`, `"probes"`), with `SO_REUSEADDR` (a restarted process binds
/// again while its old connections linger in `TIME_WAIT`) and a backlog of
/// 1,024.
///
/// Every binary binds all of its listeners with this at startup, before it
/// does anything slow and long before it reports ready, and exits when one
/// fails: a process that reported ready while one of its ports belonged to
/// another process had its probes and its scrapes answered by that other
/// process (an e2e run saw a webhook "ready" that the API server never
/// reached). Errors: the address is in use, not local, or not permitted;
/// the message names the listener and the address.
pub fn bind(listener: &'static str, addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let named = |e: std::io::Error| {
        std::io::Error::new(e.kind(), format!("failed to bind the {listener} listener on {addr}: {e}"))
    };
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4() } else { tokio::net::TcpSocket::new_v6() }
        .map_err(named)?;
    socket.set_reuseaddr(true).map_err(named)?;
    socket.bind(addr).map_err(named)?;
    socket.listen(1024).map_err(named)?.into_std().map_err(named)
}

/// Serves `router` over TLS on `listener` (bound by [`bind`]) until
/// `shutdown` resolves, with the bounds of `limits`; `name` names it in log
/// lines (`"deploy API"`, `"webhook"`). Returns when the listener stops.
pub async fn serve_tls(
    name: &'static str,
    listener: std::net::TcpListener,
    tls: RustlsConfig,
    limits: Limits,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let handle = handle(name, limits, "TLS", shutdown);
    let acceptor = axum_server::tls_rustls::RustlsAcceptor::new(tls)
        .handshake_timeout(limits.handshake_timeout)
        .acceptor(LimitAcceptor::new(name, &limits));
    let mut server = axum_server::from_tcp(listener)?.acceptor(acceptor).handle(handle).http1_only();
    *server.http_builder() = http_builder(&limits);
    server.serve(close_on_error(router).into_make_service()).await
}

/// Serves `router` over plain HTTP on `listener` (bound by [`bind`]) until
/// `shutdown` resolves, with the bounds of `limits` (the handshake timeout
/// aside); as [`serve_tls`] otherwise.
pub async fn serve_plain(
    name: &'static str,
    listener: std::net::TcpListener,
    limits: Limits,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let handle = handle(name, limits, "plain HTTP", shutdown);
    let mut server =
        axum_server::from_tcp(listener)?.acceptor(LimitAcceptor::new(name, &limits)).handle(handle).http1_only();
    *server.http_builder() = http_builder(&limits);
    server.serve(close_on_error(router).into_make_service()).await
}

/// Every error answer (4xx, 5xx) ends its connection (`Connection: close`).
/// A client can then keep a connection only by making requests that
/// succeed — for the deploy API, with the token of an authorized client —
/// so an unauthenticated client that keeps its connections busy with
/// requests (one every few seconds, under the idle bound) must reconnect,
/// which the per-peer cap bounds. Well-behaved clients rarely see an error,
/// and a reconnect costs them one handshake.
pub fn close_on_error(router: Router) -> Router {
    router.layer(axum::middleware::map_response(|mut response: axum::response::Response| async move {
        if response.status().is_client_error() || response.status().is_server_error() {
            response
                .headers_mut()
                .insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("close"));
        }
        response
    }))
}

/// A handle that logs the bound address once listening and shuts the
/// listener down (with [`SHUTDOWN_GRACE`]) once `shutdown` resolves.
fn handle(
    listener: &'static str,
    limits: Limits,
    transport: &'static str,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Handle<SocketAddr> {
    let handle = Handle::new();
    let watched = handle.clone();
    tokio::spawn(async move {
        if let Some(addr) = watched.listening().await {
            tracing::info!(
                listener,
                addr = %addr,
                transport,
                max_connections = limits.max_connections,
                header_timeout_seconds = limits.header_timeout.as_secs(),
                write_stall_timeout_seconds = limits.write_stall_timeout.as_secs(),
                "listening (HTTP/1.1 only)"
            );
        }
        shutdown.await;
        watched.graceful_shutdown(Some(SHUTDOWN_GRACE));
    });
    handle
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use hyper_util::rt::TokioIo;
    use hyper_util::service::TowerToHyperService;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    /// Serves one in-memory connection with the listeners' builder; returns
    /// the client's end.
    fn connection(limits: Limits) -> DuplexStream {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let router = Router::new().route("/healthz", get(|| async { "ok" }));
        tokio::spawn(async move {
            let builder = http_builder(&limits);
            let _ = builder.serve_connection(TokioIo::new(server), TowerToHyperService::new(router)).await;
        });
        client
    }

    /// Everything the server sends until it closes, or `None` when it has
    /// not closed within `within`.
    async fn until_closed(client: &mut DuplexStream, within: Duration) -> Option<String> {
        let mut out = Vec::new();
        tokio::time::timeout(within, client.read_to_end(&mut out)).await.ok()?.ok()?;
        Some(String::from_utf8_lossy(&out).into_owned())
    }

    fn quick() -> Limits {
        Limits { header_timeout: Duration::from_millis(300), ..Limits::new(4) }
    }

    /// A client that writes its whole body before it reads (as Python's
    /// `urllib` does) reads the 413 over a real socket: the server drains the
    /// rest of the body before it answers and closes.
    #[tokio::test]
    async fn a_client_that_writes_an_oversized_body_first_reads_the_413() {
        use axum::routing::post;
        let listener = bind("test", "127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new().route(
            "/echo",
            post(|headers: axum::http::HeaderMap, body: axum::body::Body| async move {
                let declared = headers
                    .get(axum::http::header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok());
                match body::read(body, declared, 64 * 1024, Duration::from_secs(5)).await {
                    Ok(b) => (axum::http::StatusCode::OK, format!("{} bytes", b.len())),
                    Err(e) => (axum::http::StatusCode::PAYLOAD_TOO_LARGE, format!("{e:?}")),
                }
            }),
        );
        tokio::spawn(serve_plain("test", listener, Limits::new(8), router, std::future::pending()));
        for (size, want) in [(70 * 1024, "HTTP/1.1 413"), (900 * 1024, "HTTP/1.1 413"), (1024, "HTTP/1.1 200")] {
            let answer = tokio::task::spawn_blocking(move || {
                use std::io::{Read, Write};
                let mut s = std::net::TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let head =
                    format!("POST /echo HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: {size}\r\n\r\n");
                s.write_all(head.as_bytes()).map_err(|e| format!("head: {e}"))?;
                s.write_all(&vec![b'x'; size]).map_err(|e| format!("body: {e}"))?;
                let mut out = Vec::new();
                s.read_to_end(&mut out).map_err(|e| format!("read: {e}"))?;
                Ok::<String, String>(String::from_utf8_lossy(&out).into_owned())
            })
            .await
            .unwrap();
            let answer = answer.unwrap_or_else(|e| panic!("a {size}-byte body: the client saw {e}, not the answer"));
            assert!(answer.starts_with(want), "a {size}-byte body: {answer:?}");
        }
    }

    #[tokio::test]
    async fn a_port_in_use_is_refused_at_bind_naming_the_listener() {
        let held = bind("webhook", "127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = held.local_addr().unwrap();
        let err = bind("probes", addr).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
        assert!(err.to_string().contains(&format!("failed to bind the probes listener on {addr}")), "{err}");
    }

    #[tokio::test]
    async fn an_http2_preface_is_refused_and_closed() {
        let mut client = connection(Limits::new(4));
        // The prior-knowledge preface and an empty SETTINGS frame (RFC 9113 §3.4).
        client.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0").await.unwrap();
        let answer = until_closed(&mut client, Duration::from_secs(2)).await.expect("closed at once");
        assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 "), "no HTTP/2 frame comes back: {answer:?}");
    }

    #[tokio::test]
    async fn silence_and_unfinished_heads_are_closed_at_the_header_timeout() {
        for sent in [&b""[..], b"GET /healthz HTTP/1.1\r\nHost: a\r\n"] {
            let mut client = connection(quick());
            client.write_all(sent).await.unwrap();
            let answer = until_closed(&mut client, Duration::from_secs(3)).await;
            assert!(answer.is_some(), "still open after {:?}", String::from_utf8_lossy(sent));
        }
    }

    #[tokio::test]
    async fn keep_alive_serves_requests_then_closes_when_idle() {
        let mut client = connection(quick());
        for _ in 0..3 {
            client.write_all(b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n").await.unwrap();
            let mut buf = [0u8; 512];
            let n = client.read(&mut buf).await.unwrap();
            let text = String::from_utf8_lossy(&buf[..n]);
            assert!(text.starts_with("HTTP/1.1 200") && text.ends_with("ok"), "{text}");
            // Shorter than the header timeout: the connection stays usable.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(until_closed(&mut client, Duration::from_secs(3)).await.as_deref(), Some(""), "idle: closed");
    }

    #[tokio::test]
    async fn an_oversized_head_is_refused() {
        let limits = Limits { max_head_bytes: 16 * 1024, ..Limits::new(4) };
        let mut client = connection(limits);
        let path = "a".repeat(32 * 1024);
        client.write_all(format!("GET /{path} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes()).await.unwrap();
        let answer = until_closed(&mut client, Duration::from_secs(2)).await.expect("closed");
        assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");
    }
}

/// The listener's eviction through the real server (hyper, axum-server and
/// the acceptor) on loopback sockets.
#[cfg(test)]
mod keep_alive_tests {
    use super::*;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn ask(conn: &mut tokio::net::TcpStream) -> String {
        if let Err(e) = conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await {
            return format!("write: {e}");
        }
        let mut buf = vec![0u8; 1024];
        match tokio::time::timeout(Duration::from_secs(2), conn.read(&mut buf)).await {
            Ok(Ok(0)) => "closed".into(),
            Ok(Ok(n)) => String::from_utf8_lossy(&buf[..n]).into_owned(),
            Ok(Err(e)) => format!("read: {e}"),
            Err(_) => "timeout".into(),
        }
    }

    fn from(last: u8) -> tokio::net::TcpSocket {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(std::net::SocketAddr::from(([127, 0, 0, last], 0))).unwrap();
        socket
    }

    /// The real server over real sockets: 9 peers keep 16 connections each
    /// alive (144 over a limit of 128, 16 per peer), each asking every
    /// 300 ms; a newcomer from a tenth address is answered every time, by
    /// taking the slot of a kept-alive connection idle between requests.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_kept_alive_connection_gives_its_slot_to_a_newcomer() {
        let listener = bind("test", "127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new().route("/healthz", get(|| async { "ok" }));
        tokio::spawn(serve_plain("test", listener, Limits::new(128), router, std::future::pending()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        for peer in 2..=10u8 {
            for _ in 0..16 {
                let stop = stop.clone();
                tokio::spawn(async move {
                    let mut conn = None;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        if conn.is_none() {
                            conn = from(peer).connect(addr).await.ok();
                        }
                        if let Some(c) = conn.as_mut()
                            && !ask(c).await.starts_with("HTTP/1.1 200")
                        {
                            conn = None;
                        }
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                });
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut answers = Vec::new();
        for _ in 0..10 {
            let answer = match from(1).connect(addr).await {
                Ok(mut c) => ask(&mut c).await,
                Err(e) => format!("connect: {e}"),
            };
            answers.push(answer.lines().next().unwrap_or("").to_owned());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(answers.iter().all(|a| a.starts_with("HTTP/1.1 200")), "{answers:?}");
    }
}
