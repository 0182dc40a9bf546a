use super::*;
use tokio::io::AsyncWriteExt;

/// A peer at a given address, for the counting tests.
struct From(Option<std::net::IpAddr>);

impl PeerAddr for From {
    fn peer_ip(&self) -> Option<std::net::IpAddr> {
        self.0
    }
}

impl PeerAddr for () {
    fn peer_ip(&self) -> Option<std::net::IpAddr> {
        None
    }
}

impl PeerAddr for tokio::io::DuplexStream {
    fn peer_ip(&self) -> Option<std::net::IpAddr> {
        None
    }
}

#[test]
fn one_peer_takes_at_most_its_share() {
    let acceptor = LimitAcceptor::new("test", &Limits { max_connections_per_peer: 2, ..Limits::new(8) });
    let ip = |last: u8| From(Some(std::net::IpAddr::from([127, 0, 0, last])));
    let a = acceptor.limit(ip(2)).unwrap();
    let b = acceptor.limit(ip(2)).unwrap();
    assert!(acceptor.limit(ip(2)).is_err(), "a third connection of one peer is refused");
    let other = acceptor.limit(ip(1)).unwrap();
    drop(a);
    let c = acceptor.limit(ip(2)).unwrap();
    assert_eq!(acceptor.open_connections(), 3);
    drop((b, c, other));
    assert_eq!(acceptor.open_connections(), 0);
    assert_eq!(per_peer_default(512), 64);
    assert_eq!(per_peer_default(128), 16);
    assert_eq!(per_peer_default(4), 4);
    assert_eq!(per_peer_default(2), 2);
}

fn limits(max: usize, stall: Duration) -> Limits {
    Limits { write_stall_timeout: stall, ..Limits::new(max) }
}

#[tokio::test]
async fn slots_are_held_until_the_connection_is_dropped() {
    let acceptor = LimitAcceptor::new("test", &limits(2, WRITE_STALL_TIMEOUT));
    let a = acceptor.limit(()).unwrap();
    let b = acceptor.limit(()).unwrap();
    let busy = (acceptor.serve(&a), acceptor.serve(&b));
    assert_eq!(acceptor.open_connections(), 2);
    assert!(acceptor.limit(()).is_err(), "a third connection is refused while both are being served");
    drop(busy);
    drop(a);
    let c = acceptor.limit(()).unwrap();
    assert_eq!(acceptor.open_connections(), 2);
    drop((b, c));
    assert_eq!(acceptor.open_connections(), 0);
}

/// Many peers, each under its cap, fill the listener with connections
/// that never send a request: a newcomer takes the slot of the oldest
/// of them, which is closed; a connection being served is never taken.
#[tokio::test]
#[allow(clippy::many_single_char_names)] // a to e: the connections in the order they came
async fn at_the_limit_a_newcomer_evicts_the_oldest_connection_that_made_no_request() {
    use tokio::io::AsyncReadExt as _;
    let acceptor = LimitAcceptor::new("test", &limits(3, WRITE_STALL_TIMEOUT));
    let (near_a, _far_a) = tokio::io::duplex(64);
    let mut a = acceptor.limit(near_a).unwrap();
    let (near_b, _far_b) = tokio::io::duplex(64);
    let b = acceptor.limit(near_b).unwrap();
    let (near_c, _far_c) = tokio::io::duplex(64);
    let c = acceptor.limit(near_c).unwrap();
    let serving_b = acceptor.serve(&b);
    // a blocks in a read (an idle client); the newcomer's arrival ends it.
    let reader = tokio::spawn(async move {
        let mut buf = [0u8; 8];
        let r = a.read(&mut buf).await;
        (r.map_err(|e| e.kind()), a)
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (near_d, _far_d) = tokio::io::duplex(64);
    let d = acceptor.limit(near_d).expect("the newcomer takes the oldest idle connection's slot");
    let (read, a) = tokio::time::timeout(Duration::from_secs(2), reader).await.expect("woken").unwrap();
    assert_eq!(read.unwrap_err(), io::ErrorKind::ConnectionAborted);
    assert_eq!((acceptor.evicted(), acceptor.open_connections()), (1, 3));
    // Next longest idle: c (b is being served).
    let (near_e, _far_e) = tokio::io::duplex(64);
    let e = acceptor.limit(near_e).unwrap();
    assert!(c.state.evicted.load(Ordering::Acquire) && !b.state.evicted.load(Ordering::Acquire));
    let serving = (serving_b, acceptor.serve(&d), acceptor.serve(&e));
    assert!(acceptor.limit(()).is_err(), "every slot's connection is being served: refused");
    assert_eq!(acceptor.open_connections(), 3);
    drop((a, c));
    assert_eq!(acceptor.open_connections(), 3, "the evicted held no slot");
    drop(serving);
    drop((b, d, e));
    assert_eq!(acceptor.open_connections(), 0);
}

/// A pipeline's one connection, though older, outlasts a flood from
/// peers that each hold more: they evict one another.
#[test]
fn the_peer_holding_the_most_loses_its_oldest_first() {
    let acceptor = LimitAcceptor::new("test", &Limits { max_connections_per_peer: 3, ..Limits::new(4) });
    let ip = |last: u8| From(Some(std::net::IpAddr::from([127, 0, 0, last])));
    let pipeline = acceptor.limit(ip(1)).unwrap();
    let flood: Vec<_> = (0..3).map(|_| acceptor.limit(ip(2)).unwrap()).collect();
    // Full: a newcomer from a third peer evicts peer 2's oldest.
    let third = acceptor.limit(ip(3)).unwrap();
    assert!(flood[0].state.evicted.load(Ordering::Acquire));
    assert!(!pipeline.state.evicted.load(Ordering::Acquire), "the lone connection is not the one evicted");
    drop(flood);
    let again: Vec<_> = (0..3).map(|_| acceptor.limit(ip(2)).unwrap()).collect();
    // 1 + 1 + 3 open would be 5 over 4: the third new one evicted peer 2's own.
    assert!(again[0].state.evicted.load(Ordering::Acquire));
    assert!(!pipeline.state.evicted.load(Ordering::Acquire) && !third.state.evicted.load(Ordering::Acquire));
    assert_eq!((acceptor.evicted(), acceptor.open_connections()), (2, 4));
}

/// Connections kept alive between requests (a request now and then,
/// each answered) are idle between them: a flood of them from peers
/// holding many evicts its own, never a connection being served, and
/// a connection is queued once however many requests it made.
#[test]
fn a_kept_alive_connection_is_idle_between_its_requests() {
    let acceptor = LimitAcceptor::new("test", &Limits { max_connections_per_peer: 3, ..Limits::new(4) });
    let ip = |last: u8| From(Some(std::net::IpAddr::from([127, 0, 0, last])));
    let renewal = acceptor.limit(ip(1)).unwrap();
    let flood: Vec<_> = (0..3).map(|_| acceptor.limit(ip(2)).unwrap()).collect();
    for _ in 0..100 {
        for conn in &flood {
            drop(acceptor.serve(conn));
        }
    }
    assert_eq!(acceptor.idle.0.lock().unwrap().len(), 4, "one entry per connection");
    let serving = acceptor.serve(&renewal);
    let newcomer = acceptor.limit(ip(3)).expect("a kept-alive idle connection gives its slot");
    assert!(flood[0].state.evicted.load(Ordering::Acquire), "the flood's longest idle");
    assert!(!renewal.state.evicted.load(Ordering::Acquire));
    drop(serving);
    // Idle again, but its peer holds one connection: the flood's go first.
    let again = acceptor.limit(ip(4)).unwrap();
    assert!(flood[1].state.evicted.load(Ordering::Acquire) && !renewal.state.evicted.load(Ordering::Acquire));
    assert_eq!((acceptor.evicted(), acceptor.open_connections()), (2, 4));
    drop((renewal, flood, newcomer, again));
    assert_eq!(acceptor.open_connections(), 0);
}

#[test]
fn zero_connections_is_raised_to_one() {
    assert_eq!(Limits::new(0).max_connections, 1);
    assert_eq!(Limits::new(512).max_connections, 512);
}

#[tokio::test]
async fn a_peer_that_never_reads_ends_the_connection() {
    let acceptor = LimitAcceptor::new("test", &limits(1, Duration::from_millis(200)));
    // An in-memory pipe with a 1 KiB buffer whose far end never reads.
    let (near, _far) = tokio::io::duplex(1024);
    let mut conn = acceptor.limit(near).unwrap();
    let started = Instant::now();
    let err = conn.write_all(&vec![0u8; 64 * 1024]).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
    assert!(started.elapsed() >= Duration::from_millis(200));
}

#[tokio::test]
async fn a_slow_reader_that_keeps_reading_is_not_cut() {
    let acceptor = LimitAcceptor::new("test", &limits(1, Duration::from_millis(300)));
    let (near, mut far) = tokio::io::duplex(1024);
    let mut conn = acceptor.limit(near).unwrap();
    let reader = tokio::spawn(async move {
        let mut buf = [0u8; 512];
        let mut total = 0;
        while total < 16 * 1024 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            total += tokio::io::AsyncReadExt::read(&mut far, &mut buf).await.unwrap();
        }
        total
    });
    // 16 KiB through a 1 KiB pipe takes about 32 × 20 ms, more than the
    // stall timeout in total, but no single write waits that long.
    conn.write_all(&vec![0u8; 16 * 1024]).await.unwrap();
    assert_eq!(reader.await.unwrap(), 16 * 1024);
}
