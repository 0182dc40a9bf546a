//! The bounds every listener applies, so that nobody can hold the process's
//! file descriptors (and with them its database probes, its API-server
//! watches and its health checks) by opening idle or slow connections
//! without credentials (docs/deploy-api.md, "Listener limits"):
//!
//! - at most [`Limits::max_connections`] connections at once, and at most
//!   [`Limits::max_connections_per_peer`] from one peer address; one more
//!   from a peer at its cap is closed at accept, before any TLS or HTTP
//!   work — so one client that keeps reconnecting, or keeps its connections
//!   busy with requests, cannot take every slot from the others (an
//!   unauthenticated answer also closes its connection: see the deploy
//!   router);
//! - when every slot is taken, a new connection takes the slot of an idle
//!   connection, which is closed: one with no request being served (still
//!   in its TLS handshake or its request head, idle since it connected, or
//!   kept alive between requests), the longest idle of the peer address
//!   that holds the most connections. Many peers holding idle connections
//!   (several Pods of one tenant, each under the per-peer cap, whether they
//!   never send a request or send one now and then to keep each connection
//!   alive) then evict one another, however fast they reopen, and not a
//!   pipeline that opens one connection for its renewal: its address holds
//!   fewer. Only when every peer holds as few connections as the
//!   newcomer's does idle time alone decide, and a new connection finishes
//!   its handshake and request in milliseconds. A connection is never
//!   evicted while a request on it is being served;
//! - a TLS handshake must finish within [`Limits::handshake_timeout`];
//! - only HTTP/1.1 is spoken (see the crate documentation): an HTTP/2
//!   preface is refused like any other malformed request line;
//! - a request's headers must arrive within [`Limits::header_timeout`],
//!   counted from when the connection is ready for a request — so the same
//!   bound closes a connection that sends nothing, one that finished a TLS
//!   handshake and went quiet, and an idle kept-alive one;
//! - a connection whose writes make no progress for
//!   [`Limits::write_stall_timeout`] (a client that never reads its
//!   response) is closed;
//! - a handler that reads a body bounds it with [`BODY_TIMEOUT`] (the
//!   deploy API's router does).
//!
//! Invariant: every connection holds one slot of its listener's semaphore
//! from accept until it is dropped, and every state a connection can be in
//! (handshake, waiting for a request head, writing) has a deadline.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum_server::accept::{Accept, DefaultAcceptor};
use futures::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;

/// Time allowed for a TLS handshake. A client on the same cluster network
/// finishes one in milliseconds; 5 s leaves room for a loaded node without
/// letting a silent client hold a slot for long.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Time allowed for a request's headers, counted from when the connection is
/// ready for a request: also the idle limit of a kept-alive connection.
/// Clients (the sidecar renewing every ttl/3 with ttl ≥ 5 s, kubelet probes,
/// Prometheus scrapes) send a whole head at once, so 10 s only ever cuts
/// clients that are not sending one.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Time a write may make no progress before the connection is closed. Our
/// responses are small (a few KiB; `/metrics` tens of KiB), so a client that
/// reads at all drains them long before this; one that stops reading must
/// not hold its slot forever. As long as the header timeout, so that no
/// state of a connection outlives the others' bound.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Time a handler allows for reading a request body (deploy API: 64 KiB at
/// most). A pipeline sends its small JSON body with its headers.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest request head (request line and headers), in bytes, a listener
/// buffers; a longer one is answered 431 and the connection closed. A
/// ServiceAccount token (about 1 KiB) plus the longest path we accept fit
/// many times over; the bound keeps what 512 connections can make the
/// process buffer to 64 MiB (hyper's default allows about 400 KiB each).
pub const MAX_HEAD_BYTES: usize = 128 * 1024;

/// How often, at most, a listener logs that it refused connections at its
/// limit: one line per refused connection would let a flood of connections
/// flood the log too.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The bounds of one listener. [`Limits::new`] gives the documented defaults
/// for everything but the connection limit, which each listener takes from
/// its own flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most connections open at once (≥ 1).
    pub max_connections: usize,
    /// TLS handshake deadline ([`HANDSHAKE_TIMEOUT`]); unused by plain listeners.
    pub handshake_timeout: Duration,
    /// Request-head and keep-alive idle deadline ([`HEADER_TIMEOUT`]).
    pub header_timeout: Duration,
    /// Longest time a write may make no progress ([`WRITE_STALL_TIMEOUT`]).
    pub write_stall_timeout: Duration,
    /// Largest request head in bytes ([`MAX_HEAD_BYTES`]).
    pub max_head_bytes: usize,
    /// Most connections open at once from one peer IP address (≥ 1):
    /// [`per_peer_default`] of `max_connections` unless a listener says
    /// otherwise.
    pub max_connections_per_peer: usize,
}

/// The default per-peer cap for a listener of `max_connections`: an eighth
/// of it, at least 4. A pipeline's sidecar or a Prometheus scrape holds one
/// or two connections; kubelet probes come from the node's address; so a
/// well-behaved peer never comes near it, while one peer can take at most
/// an eighth of the slots.
pub fn per_peer_default(max_connections: usize) -> usize {
    (max_connections / 8).max(4).min(max_connections.max(1))
}

impl Limits {
    /// The default bounds with at most `max_connections` connections
    /// (raised to 1 when 0: a listener that accepts nothing is a misconfiguration).
    pub fn new(max_connections: usize) -> Self {
        Limits {
            max_connections: max_connections.max(1),
            handshake_timeout: HANDSHAKE_TIMEOUT,
            header_timeout: HEADER_TIMEOUT,
            write_stall_timeout: WRITE_STALL_TIMEOUT,
            max_head_bytes: MAX_HEAD_BYTES,
            max_connections_per_peer: per_peer_default(max_connections.max(1)),
        }
    }
}

/// A stream that knows its peer's address (for the per-peer cap).
pub trait PeerAddr {
    /// The peer's IP address, if known.
    fn peer_ip(&self) -> Option<std::net::IpAddr>;
}

impl PeerAddr for tokio::net::TcpStream {
    fn peer_ip(&self) -> Option<std::net::IpAddr> {
        self.peer_addr().ok().map(|a| a.ip())
    }
}

/// Open connections per peer address; a [`PeerSlot`] gives its count back on drop.
#[derive(Debug, Default)]
struct Peers(std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>);

/// One connection's place in its peer's count.
#[derive(Debug)]
pub(crate) struct PeerSlot {
    peers: Arc<Peers>,
    ip: Option<std::net::IpAddr>,
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let Some(ip) = self.ip else { return };
        let mut map = self.peers.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = map.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&ip);
            }
        }
    }
}

impl Peers {
    /// Connections `ip` holds open now (one for an unknown address).
    fn held(&self, ip: Option<std::net::IpAddr>) -> usize {
        let Some(ip) = ip else { return 1 };
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&ip).copied().unwrap_or(0)
    }

    /// Takes a place for `ip` unless it already holds `max` connections.
    fn take(self: &Arc<Self>, ip: Option<std::net::IpAddr>, max: usize) -> Option<PeerSlot> {
        if let Some(ip) = ip {
            let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let n = map.entry(ip).or_insert(0);
            if *n >= max {
                return None;
            }
            *n += 1;
        }
        Some(PeerSlot { peers: self.clone(), ip })
    }
}

/// One connection's standing for eviction, shared by its stream, the
/// service that counts the requests being served on it, and (weakly) the
/// queue of idle connections.
#[derive(Debug, Default)]
pub(crate) struct ConnState {
    /// Requests being served on it now: never evicted while there is one.
    serving: std::sync::atomic::AtomicUsize,
    /// In the idle queue (changed only under its lock): a connection is
    /// queued at accept and again when its last request ends, at most once.
    queued: std::sync::atomic::AtomicBool,
    /// Evicted: its reads and writes fail from now on.
    evicted: std::sync::atomic::AtomicBool,
    /// Woken on eviction, so that a connection blocked in a read ends now.
    waker: futures::task::AtomicWaker,
    /// Its listener slot (taken over by the connection that evicts it).
    slot: std::sync::Mutex<Option<OwnedSemaphorePermit>>,
    /// Its peer's address, which decides whose connection is evicted.
    ip: Option<std::net::IpAddr>,
}

impl ConnState {
    fn idle(&self) -> bool {
        self.serving.load(Ordering::Acquire) == 0 && !self.evicted.load(Ordering::Acquire)
    }
}

/// Idle connections, longest idle first (weakly: a closed connection is
/// skipped; one being served is dropped from the queue and queued again
/// when its last request ends).
#[derive(Debug, Default)]
struct Idle(std::sync::Mutex<std::collections::VecDeque<std::sync::Weak<ConnState>>>);

/// Keeps in `queue` the connections still idle, unmarking the others.
fn keep_idle(queue: &mut std::collections::VecDeque<std::sync::Weak<ConnState>>) {
    queue.retain(|w| {
        let Some(s) = w.upgrade() else { return false };
        let idle = s.idle();
        if !idle {
            s.queued.store(false, Ordering::Release);
        }
        idle
    });
}

impl Idle {
    /// Queues `state` unless it is queued already; past `bound` entries,
    /// first drops those no longer idle (at most one entry per connection,
    /// so the queue holds at most the listener's open connections).
    fn push(&self, state: &Arc<ConnState>, bound: usize) {
        let mut queue = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        if queue.len() >= bound {
            keep_idle(&mut queue);
        }
        queue.push_back(Arc::downgrade(state));
    }

    /// Evicts an idle connection — the longest idle of the peer address
    /// holding the most open connections (`peers`) — and returns its slot.
    fn evict(&self, peers: &Peers) -> Option<OwnedSemaphorePermit> {
        let mut queue = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            keep_idle(&mut queue);
            let held = |s: &ConnState| peers.held(s.ip);
            // `max_by_key` keeps the last of equals; scanning from the back
            // makes that the oldest.
            let victim = queue
                .iter()
                .enumerate()
                .filter_map(|(i, w)| w.upgrade().map(|s| (i, held(&s))))
                .rev()
                .max_by_key(|&(_, n)| n)
                .map(|(i, _)| i)?;
            let state = queue.remove(victim).and_then(|w| w.upgrade())?;
            state.queued.store(false, Ordering::Release);
            if state.evicted.swap(true, Ordering::AcqRel) {
                continue;
            }
            if state.serving.load(Ordering::Acquire) > 0 {
                // A request began since the scan: not this one.
                state.evicted.store(false, Ordering::Release);
                continue;
            }
            let slot = state.slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
            state.waker.wake();
            if slot.is_some() {
                return slot;
            }
        }
    }
}

/// Accepts a connection only while fewer than the limit are open (or by
/// evicting the oldest that made no request), and wraps it so that a write
/// making no progress ends it.
#[derive(Clone, Debug)]
pub(crate) struct LimitAcceptor {
    listener: &'static str,
    slots: Arc<Semaphore>,
    max_connections: usize,
    peers: Arc<Peers>,
    max_connections_per_peer: usize,
    write_stall_timeout: Duration,
    refusals: Arc<Refusals>,
    idle: Arc<Idle>,
    evictions: Arc<AtomicU64>,
}

/// Refused connections, for a rate-limited log line.
#[derive(Debug)]
struct Refusals {
    since_log: AtomicU64,
    started: Instant,
    /// Milliseconds after `started` of the last log line (0: never logged).
    last_log_ms: AtomicU64,
}

impl Refusals {
    fn refused(&self, listener: &'static str, max_connections: usize) {
        let refused = self.since_log.fetch_add(1, Ordering::Relaxed) + 1;
        let now_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX).max(1);
        let last = self.last_log_ms.load(Ordering::Relaxed);
        let interval_ms = u64::try_from(REFUSAL_LOG_INTERVAL.as_millis()).unwrap_or(u64::MAX);
        let due = last == 0 || now_ms.saturating_sub(last) >= interval_ms;
        if due && self.last_log_ms.compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            self.since_log.fetch_sub(refused, Ordering::Relaxed);
            tracing::warn!(
                listener,
                max_connections,
                refused,
                "connection limit reached; refused connections at accept"
            );
        }
    }
}

impl LimitAcceptor {
    /// An acceptor for the listener named `listener` (used in log lines) with `limits`.
    pub(crate) fn new(listener: &'static str, limits: &Limits) -> Self {
        LimitAcceptor {
            listener,
            slots: Arc::new(Semaphore::new(limits.max_connections)),
            max_connections: limits.max_connections,
            peers: Arc::default(),
            max_connections_per_peer: limits.max_connections_per_peer.max(1),
            write_stall_timeout: limits.write_stall_timeout,
            refusals: Arc::new(Refusals {
                since_log: AtomicU64::new(0),
                started: Instant::now(),
                last_log_ms: AtomicU64::new(0),
            }),
            idle: Arc::default(),
            evictions: Arc::default(),
        }
    }

    /// Connections open now.
    #[cfg(test)]
    fn open_connections(&self) -> usize {
        self.max_connections - self.slots.available_permits()
    }

    /// Wraps `io` in a slot — a free one, or the one of the oldest
    /// connection that made no request, which is evicted — or refuses it
    /// when its peer already holds its share, or every connection made a
    /// request.
    pub(crate) fn limit<I: PeerAddr>(&self, io: I) -> io::Result<Limited<I>> {
        let ip = io.peer_ip();
        let Some(peer) = self.peers.take(ip, self.max_connections_per_peer) else {
            self.refusals.refused(self.listener, self.max_connections);
            return Err(io::Error::other("per-peer connection limit reached"));
        };
        let slot = if let Ok(slot) = self.slots.clone().try_acquire_owned() {
            slot
        } else if let Some(slot) = self.idle.evict(&self.peers) {
            let n = self.evictions.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::warn!(
                    listener = self.listener,
                    evicted = n,
                    "connection limit reached; evicted the longest idle connection of the peer holding the most"
                );
            }
            slot
        } else {
            self.refusals.refused(self.listener, self.max_connections);
            return Err(io::Error::other("connection limit reached"));
        };
        let state = Arc::new(ConnState { slot: std::sync::Mutex::new(Some(slot)), ip, ..ConnState::default() });
        self.idle.push(&state, self.max_connections);
        Ok(Limited::new(io, state, peer, self.write_stall_timeout))
    }

    /// Connections evicted so far.
    #[cfg(test)]
    fn evicted(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }

    /// A request being served on `conn` until the result is dropped.
    #[cfg(test)]
    fn serve<I>(&self, conn: &Limited<I>) -> Serving {
        Serving::begin(&conn.state, &self.idle, self.max_connections)
    }
}

/// The per-connection service, counting the requests being served on its
/// connection (not evictable while there is one).
#[derive(Clone, Debug)]
pub struct MarkServed<S> {
    inner: S,
    state: Arc<ConnState>,
    idle: Arc<Idle>,
    bound: usize,
}

/// One request being served; its drop queues the connection as idle again
/// when it was the last.
#[derive(Debug)]
pub(crate) struct Serving {
    state: Arc<ConnState>,
    idle: Arc<Idle>,
    bound: usize,
}

impl Serving {
    fn begin(state: &Arc<ConnState>, idle: &Arc<Idle>, bound: usize) -> Self {
        state.serving.fetch_add(1, Ordering::AcqRel);
        Serving { state: state.clone(), idle: idle.clone(), bound }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        if self.state.serving.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.idle.push(&self.state, self.bound);
        }
    }
}

/// A response future that holds its request's [`Serving`] until it ends.
#[derive(Debug)]
pub struct ServingFuture<F> {
    inner: Pin<Box<F>>,
    _serving: Serving,
}

impl<F: Future> Future for ServingFuture<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<S, R> tower::Service<R> for MarkServed<S>
where
    S: tower::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ServingFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let serving = Serving::begin(&self.state, &self.idle, self.bound);
        ServingFuture { inner: Box::pin(self.inner.call(request)), _serving: serving }
    }
}

impl<I, S> Accept<I, S> for LimitAcceptor
where
    I: PeerAddr + Send + 'static,
    S: Send + 'static,
{
    type Stream = Limited<I>;
    type Service = MarkServed<S>;
    type Future = BoxFuture<'static, io::Result<(Self::Stream, Self::Service)>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        // The slot is taken (or refused) here, synchronously, before any TLS
        // or HTTP work is spent on the connection.
        let limited = self.limit(stream);
        let (idle, bound) = (self.idle.clone(), self.max_connections);
        Box::pin(async move {
            let limited = limited?;
            let state = limited.state.clone();
            let (stream, service) = DefaultAcceptor.accept(limited, service).await?;
            Ok((stream, MarkServed { inner: service, state, idle, bound }))
        })
    }
}

/// A connection holding its slot until it is dropped; its writes fail with
/// `TimedOut` once they made no progress for the stall timeout.
#[derive(Debug)]
pub(crate) struct Limited<I> {
    inner: I,
    /// Holds the slot; evicted, reads and writes fail.
    state: Arc<ConnState>,
    _peer: PeerSlot,
    write_stall_timeout: Duration,
    /// Armed at the first write that could not proceed; cleared by progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<I> Limited<I> {
    fn new(inner: I, state: Arc<ConnState>, peer: PeerSlot, write_stall_timeout: Duration) -> Self {
        Limited { inner, state, _peer: peer, write_stall_timeout, stalled: None }
    }

    /// `Err` once evicted; otherwise registers `cx` to be woken by an eviction.
    fn check_evicted(&self, cx: &Context<'_>) -> io::Result<()> {
        self.state.waker.register(cx.waker());
        if self.state.evicted.load(Ordering::Acquire) {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "evicted: the listener was full and this connection was idle",
            ));
        }
        Ok(())
    }

    /// Called when the inner write is pending: pending until the stall
    /// deadline, then `TimedOut`.
    fn poll_stall<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let timeout = self.write_stall_timeout;
        let deadline = self.stalled.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the peer read nothing for {}s", timeout.as_secs()),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn progress<T>(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match polled {
            Poll::Pending => self.poll_stall(cx),
            ready @ Poll::Ready(_) => {
                self.stalled = None;
                ready
            }
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Limited<I> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if let Err(e) = self.check_evicted(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Limited<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if let Err(e) = self.check_evicted(cx) {
            return Poll::Ready(Err(e));
        }
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.progress(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.progress(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_flush(cx);
        this.progress(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.progress(cx, polled)
    }
}

#[cfg(test)]
mod tests;
