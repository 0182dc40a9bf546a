//! Connection limits of the deploy API's listener, so that nobody can hold
//! the operator's file descriptors (and with them its database probes and
//! health checks) by opening idle or slow connections without a token:
//!
//! - at most `max_connections` connections at once; one more is closed at accept;
//! - the TLS handshake must finish within [`HANDSHAKE_TIMEOUT`];
//! - a request's headers must arrive within [`HEADER_TIMEOUT`] (also the
//!   idle limit of a kept-alive connection);
//! - a request's body must arrive within [`BODY_TIMEOUT`] (in the router).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum_server::accept::{Accept, DefaultAcceptor};
use futures::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Time allowed for a TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Time allowed for a request's headers, and for an idle kept-alive connection.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Time allowed for a request's body.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepts a connection only while fewer than the limit are open.
#[derive(Clone, Debug)]
pub struct LimitAcceptor {
    slots: Arc<Semaphore>,
}

impl LimitAcceptor {
    /// At most `max_connections` open connections.
    pub fn new(max_connections: usize) -> Self {
        LimitAcceptor { slots: Arc::new(Semaphore::new(max_connections)) }
    }
}

/// A connection holding its slot until it is dropped.
#[derive(Debug)]
pub struct Limited<I> {
    inner: I,
    _slot: OwnedSemaphorePermit,
}

impl<I, S> Accept<I, S> for LimitAcceptor
where
    I: Send + 'static,
    S: Send + 'static,
{
    type Stream = Limited<I>;
    type Service = S;
    type Future = BoxFuture<'static, io::Result<(Self::Stream, Self::Service)>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let slot = self.slots.clone().try_acquire_owned();
        Box::pin(async move {
            let slot = slot.map_err(|_| io::Error::other("deploy API connection limit reached"))?;
            let (inner, service) = DefaultAcceptor.accept(stream, service).await?;
            Ok((Limited { inner, _slot: slot }, service))
        })
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Limited<I> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Limited<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
