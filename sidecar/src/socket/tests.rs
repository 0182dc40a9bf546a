use std::path::PathBuf;

use tokio::io::AsyncReadExt as _;

use super::*;

/// A sidecar's socket over a status channel; returns the event receiver.
fn serve_with(dir: &Path, status: Status) -> (PathBuf, watch::Sender<Status>, mpsc::Receiver<Event>) {
    let (path, tx, erx, _) = serve_shared(dir, status);
    (path, tx, erx)
}

fn serve_shared(dir: &Path, status: Status) -> (PathBuf, watch::Sender<Status>, mpsc::Receiver<Event>, Arc<Shared>) {
    let path = dir.join("s.sock");
    let (tx, rx) = watch::channel(status);
    let (etx, erx) = mpsc::channel(8);
    let listener = bind(&path, Access::Pod).unwrap();
    let shared = Shared::new(rx, etx);
    tokio::spawn(serve(listener, shared.clone()));
    (path, tx, erx, shared)
}

/// A wrapper that attaches before the leases are held waits on its
/// connection, told who holds the lease as that changes, and starts
/// once they are held; a run that ends while it waits refuses it with
/// the run's code; a wrapper gone while it waits is never started.
#[tokio::test]
async fn a_wrapper_attached_while_acquiring_waits_then_starts_or_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (path, tx, mut events) = serve_with(dir.path(), Status::Acquiring);
    let stream = UnixStream::connect(&path).await.unwrap();
    let (read, mut out) = stream.into_split();
    out.write_all(b"{\"op\":\"attach\"}\n").await.unwrap();
    let mut reader = BufReader::new(read);
    let next = |line: Option<String>| serde_json::from_str::<Reply>(&line.unwrap()).unwrap();
    assert_eq!(next(read_line(&mut reader).await.unwrap()), Reply::Waiting { holder: None });
    tx.send(Status::Waiting { holder: "operation op-0 for counter-app (expires T)".into() }).unwrap();
    match next(read_line(&mut reader).await.unwrap()) {
        Reply::Waiting { holder: Some(h) } => assert!(h.contains("op-0"), "{h}"),
        other => panic!("{other:?}"),
    }
    // The same holder again is not said again; the grant starts the wrapper.
    tx.send(Status::Waiting { holder: "operation op-0 for counter-app (expires T)".into() }).unwrap();
    let driver = tokio::spawn(async move {
        match events.recv().await {
            Some(Event::Started(ack)) => ack.send(()).unwrap(),
            other => panic!("{other:?}"),
        }
        events
    });
    tx.send(Status::Held { deadline: Instant::now() + Duration::from_secs(20), grace: Duration::from_secs(1) })
        .unwrap();
    assert!(matches!(next(read_line(&mut reader).await.unwrap()), Reply::Start { .. }));
    drop(driver.await.unwrap());

    // The run ends while a wrapper waits: refused with the run's code.
    let dir = tempfile::tempdir().unwrap();
    let (path, tx, _events) = serve_with(dir.path(), Status::Acquiring);
    let stream = UnixStream::connect(&path).await.unwrap();
    let (read, mut out) = stream.into_split();
    out.write_all(b"{\"op\":\"attach\"}\n").await.unwrap();
    let mut reader = BufReader::new(read);
    assert_eq!(next(read_line(&mut reader).await.unwrap()), Reply::Waiting { holder: None });
    tx.send(Status::Ended { exit_code: 90, message: "gave up".into() }).unwrap();
    assert_eq!(
        next(read_line(&mut reader).await.unwrap()),
        Reply::Refused { exit_code: 90, message: "gave up".into() }
    );

    // A wrapper gone while it waits: the grant does not start it.
    let dir = tempfile::tempdir().unwrap();
    let (path, tx, mut events) = serve_with(dir.path(), Status::Acquiring);
    let mut stream = UnixStream::connect(&path).await.unwrap();
    stream.write_all(b"{\"op\":\"attach\"}\n").await.unwrap();
    let mut first = [0u8; 64];
    let _ = stream.read(&mut first).await.unwrap();
    drop(stream);
    tokio::time::sleep(Duration::from_millis(100)).await;
    tx.send(Status::Held { deadline: Instant::now() + Duration::from_secs(20), grace: Duration::from_secs(1) })
        .unwrap();
    let started = tokio::time::timeout(Duration::from_millis(300), events.recv()).await;
    assert!(started.is_err(), "a gone wrapper was started: {started:?}");
}

#[tokio::test]
async fn probe_permit_and_marks() {
    let dir = tempfile::tempdir().unwrap();
    let (path, tx, mut events) = serve_with(dir.path(), Status::Acquiring);
    let t = Duration::from_secs(2);
    let r = call(&path, &Request::Status, t).await.unwrap();
    assert_eq!(r, Reply::Status { state: RunState::Acquiring, remaining_ms: 0, holder: None });
    assert!(matches!(call(&path, &Request::Permit, t).await.unwrap(), Reply::Permit { granted: false, .. }));
    // Waiting on a holder: still acquiring (no permit), and the probe learns who holds it.
    tx.send(Status::Waiting { holder: "operation op-0 for counter-app (expires T)".into() }).unwrap();
    match call(&path, &Request::Status, t).await.unwrap() {
        Reply::Status { state: RunState::Acquiring, holder: Some(h), .. } => assert!(h.contains("op-0"), "{h}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(call(&path, &Request::Permit, t).await.unwrap(), Reply::Permit { granted: false, .. }));
    tx.send(Status::Held { deadline: Instant::now() + Duration::from_secs(20), grace: Duration::from_secs(1) })
        .unwrap();
    match call(&path, &Request::Permit, t).await.unwrap() {
        Reply::Permit { granted: true, remaining_ms, .. } => assert!(remaining_ms > 15_000, "{remaining_ms}"),
        other => panic!("{other:?}"),
    }
    let driver = tokio::spawn(async move {
        let answered = match events.recv().await {
            Some(Event::Report(Report::DdlStarted, Some(r), ack)) if r == "1" => ack.send(()).is_ok(),
            _ => false,
        };
        (answered, events)
    });
    let r = call(&path, &Request::Mark { event: MarkEvent::DdlStarted, revision: Some("1".into()) }, t).await.unwrap();
    assert_eq!(r, Reply::Ok, "answered only once the driver confirmed the report");
    let (answered, mut events) = driver.await.unwrap();
    assert!(answered);
    // Unconfirmed (the driver drops the ack: fenced): an error, not Ok.
    let driver = tokio::spawn(async move { drop(events.recv().await) });
    let r = call(&path, &Request::Mark { event: MarkEvent::DdlStarted, revision: None }, t).await.unwrap();
    assert!(matches!(r, Reply::Error { .. }), "{r:?}");
    driver.await.unwrap();
    // A line that is too long is refused, not buffered.
    let mut s = UnixStream::connect(&path).await.unwrap();
    s.write_all(&vec![b'x'; MAX_LINE + 10]).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    assert!(out.contains("\"reply\":\"error\"") && out.contains("longer than"), "{out}");
}

/// Found by the attack round: `{"op":"exited","code":0}` from any process
/// that reached the socket ended the run as "succeeded" (exit 0, both
/// leases released, `ddlState: completed` on the Lease) while the
/// migration still ran, or before it had started.
#[tokio::test]
async fn exited_from_a_connection_that_did_not_attach_never_ends_the_run() {
    let dir = tempfile::tempdir().unwrap();
    for status in [
        Status::Acquiring,
        Status::Held { deadline: Instant::now() + Duration::from_secs(20), grace: Duration::from_secs(1) },
    ] {
        let (path, tx, mut events) = serve_with(dir.path(), status);
        let forged = Request::Exited { code: Some(0), signal: None };
        let r = call(&path, &forged, Duration::from_millis(500)).await;
        assert!(r.is_err(), "no verdict while the run goes on: {r:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(events.try_recv().is_err(), "the driver must not hear of it");
        // Over: the verdict is read, not made.
        tx.send(Status::Ended { exit_code: 93, message: "verify".into() }).unwrap();
        let r = call(&path, &forged, Duration::from_secs(2)).await.unwrap();
        assert_eq!(r, Reply::Verdict { exit_code: 93, message: "verify".into() });
        assert!(events.try_recv().is_err());
        std::fs::remove_file(&path).unwrap();
    }
}

/// Attaches as the wrapper, lets the run start, and reads the first reply.
async fn attach(
    path: &Path,
    events: &mut mpsc::Receiver<Event>,
) -> (BufReader<tokio::net::unix::OwnedReadHalf>, tokio::net::unix::OwnedWriteHalf, Reply) {
    let stream = UnixStream::connect(path).await.unwrap();
    let (read, mut out) = stream.into_split();
    out.write_all(b"{\"op\":\"attach\"}\n").await.unwrap();
    let mut reader = BufReader::new(read);
    match events.recv().await {
        Some(Event::Started(ack)) => ack.send(()).unwrap(),
        other => panic!("{other:?}"),
    }
    // A start is preceded by `waiting` while it is confirmed.
    let mut first: Reply = serde_json::from_str(&read_line(&mut reader).await.unwrap().unwrap()).unwrap();
    while first == (Reply::Waiting { holder: None }) {
        first = serde_json::from_str(&read_line(&mut reader).await.unwrap().unwrap()).unwrap();
    }
    (reader, out, first)
}

#[tokio::test]
async fn an_attached_wrapper_is_fenced_when_the_run_ends_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let held = Status::Held { deadline: Instant::now() + Duration::from_secs(20), grace: Duration::from_secs(3) };
    let (path, tx, mut events) = serve_with(dir.path(), held);
    let (mut reader, _out, first) = attach(&path, &mut events).await;
    assert!(matches!(first, Reply::Start { .. }), "{first:?}");
    tx.send(Status::Ended { exit_code: 94, message: "the sidecar failed".into() }).unwrap();
    let fence: Reply = serde_json::from_str(&read_line(&mut reader).await.unwrap().unwrap()).unwrap();
    assert!(
        matches!(&fence, Reply::Fence { grace_ms: 3000, reason } if reason.contains("the sidecar failed")),
        "{fence:?}"
    );
}

#[test]
fn run_sockets_are_the_owner_s_only() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        for (access, mode) in [(Access::Owner, 0o600), (Access::Pod, 0o666)] {
            let path = dir.path().join(format!("{access:?}.sock"));
            let _l = bind(&path, access).unwrap();
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, mode, "{access:?}");
        }
    });
}

#[tokio::test]
async fn one_wrapper_attaches_and_is_told_to_fence() {
    let dir = tempfile::tempdir().unwrap();
    let held = Status::Held { deadline: Instant::now() + Duration::from_secs(20), grace: Duration::from_secs(3) };
    let (path, tx, mut events) = serve_with(dir.path(), held);
    let (mut reader, mut out, first) = attach(&path, &mut events).await;
    assert!(matches!(first, Reply::Start { grace_ms: 3000, .. }), "{first:?}");
    // A second wrapper is refused.
    let second = call(&path, &Request::Attach, Duration::from_secs(2)).await.unwrap();
    assert!(matches!(second, Reply::Refused { .. }), "{second:?}");
    tx.send(Status::Fenced { reason: "revoked".into(), grace: Duration::from_secs(3) }).unwrap();
    let fence: Reply = serde_json::from_str(&read_line(&mut reader).await.unwrap().unwrap()).unwrap();
    assert_eq!(fence, Reply::Fence { reason: "revoked".into(), grace_ms: 3000 });
    out.write_all(b"{\"op\":\"exited\",\"code\":0}\n").await.unwrap();
    match events.recv().await {
        Some(Event::Exited(end, reply)) => {
            assert_eq!(end, ProcessEnd { code: Some(0), signal: None });
            reply.send((92, "fenced".into())).unwrap();
        }
        other => panic!("{other:?}"),
    }
    let verdict: Reply = serde_json::from_str(&read_line(&mut reader).await.unwrap().unwrap()).unwrap();
    assert_eq!(verdict, Reply::Verdict { exit_code: 92, message: "fenced".into() });
}

/// Found by a trial with the sidecar as an ordinary container: the Pod's
/// deletion sent SIGTERM to both; the sidecar fenced, recorded 92 and
/// exited, and the wrapper, left without a verdict, exited 94. The
/// sidecar now waits for `verdict_given` before exiting.
#[tokio::test]
async fn a_started_wrapper_awaits_its_verdict_until_it_has_it() {
    let dir = tempfile::tempdir().unwrap();
    let held = Status::Held { deadline: Instant::now() + Duration::from_secs(20), grace: Duration::from_secs(3) };
    let (path, tx, mut events, shared) = serve_shared(dir.path(), held);
    let quick = Duration::from_millis(200);
    assert!(tokio::time::timeout(quick, shared.verdict_given()).await.is_ok(), "no wrapper: nothing to wait for");
    let (mut reader, mut out, first) = attach(&path, &mut events).await;
    assert!(matches!(first, Reply::Start { .. }), "{first:?}");
    tx.send(Status::Fenced { reason: "shutdown".into(), grace: Duration::from_secs(3) }).unwrap();
    let _fence = read_line(&mut reader).await.unwrap().unwrap();
    assert!(tokio::time::timeout(quick, shared.verdict_given()).await.is_err(), "the wrapper still ends");
    out.write_all(b"{\"op\":\"exited\",\"signal\":15}\n").await.unwrap();
    match events.recv().await {
        Some(Event::Exited(_, reply)) => reply.send((92, "fenced".into())).unwrap(),
        other => panic!("{other:?}"),
    }
    let verdict: Reply = serde_json::from_str(&read_line(&mut reader).await.unwrap().unwrap()).unwrap();
    assert_eq!(verdict, Reply::Verdict { exit_code: 92, message: "fenced".into() });
    assert!(tokio::time::timeout(Duration::from_secs(2), shared.verdict_given()).await.is_ok(), "answered");
    // A wrapper whose connection is gone is not waited for either.
    let dir2 = tempfile::tempdir().unwrap();
    let (path2, _tx2, mut events2, shared2) = serve_shared(
        dir2.path(),
        Status::Held { deadline: Instant::now() + Duration::from_secs(20), grace: Duration::from_secs(3) },
    );
    let (reader2, out2, _) = attach(&path2, &mut events2).await;
    assert!(tokio::time::timeout(quick, shared2.verdict_given()).await.is_err());
    drop((reader2, out2));
    assert!(tokio::time::timeout(Duration::from_secs(2), shared2.verdict_given()).await.is_ok(), "gone");
}

/// The same trial's second half: the driver ended (dropping the status)
/// between the wrapper's fence and its report, and the connection was
/// closed without an answer. The report is answered with the verdict.
#[tokio::test]
async fn a_report_after_the_run_ended_still_gets_the_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let held = Status::Held { deadline: Instant::now() + Duration::from_secs(20), grace: Duration::from_secs(3) };
    let (path, tx, mut events, shared) = serve_shared(dir.path(), held);
    let (mut reader, mut out, first) = attach(&path, &mut events).await;
    assert!(matches!(first, Reply::Start { .. }), "{first:?}");
    tx.send(Status::Fenced { reason: "shutdown".into(), grace: Duration::from_secs(3) }).unwrap();
    let _fence = read_line(&mut reader).await.unwrap().unwrap();
    tx.send(Status::Ended { exit_code: 92, message: "fenced".into() }).unwrap();
    drop(tx);
    tokio::time::sleep(Duration::from_millis(100)).await;
    out.write_all(b"{\"op\":\"exited\",\"code\":0}\n").await.unwrap();
    let verdict: Reply = serde_json::from_str(&read_line(&mut reader).await.unwrap().unwrap()).unwrap();
    assert_eq!(verdict, Reply::Verdict { exit_code: 92, message: "fenced".into() });
    assert!(tokio::time::timeout(Duration::from_secs(2), shared.verdict_given()).await.is_ok());
}
