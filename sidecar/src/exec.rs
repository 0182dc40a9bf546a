//! `bloodraven-sidecar exec -- CMD…`: the migration's entrypoint wrapper,
//! and the only process that ever signals the migration.
//!
//! Why a wrapper: a native sidecar's exit code does not count toward the
//! Pod's result, so a migration that traps SIGTERM and exits 0 after a
//! fence would complete the Job. The wrapper is the migration container's
//! main process: it starts CMD only on the sidecar's `start`, and exits
//! with the sidecar's verdict, never with a fenced CMD's 0. It also needs
//! no shared process namespace: with one, a migration running as the
//! sidecar's user could read the sidecar's memory, lease tokens included.
//!
//! The wrapper fences CMD (SIGTERM, then SIGKILL to its process group after
//! the grace) when the sidecar says so, when the connection to the sidecar
//! is lost (a restarted sidecar has no lease tokens: the run is over), and
//! on its own when the fence deadline the sidecar last confirmed passes —
//! so a stopped (SIGSTOP) or hung sidecar cannot let a step run past it.
//! `run` starts the same wrapper as its child, so both modes fence alike.

use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::time::{Instant, sleep_until};

use crate::fence::Target;
use crate::lease::ending::exit;
use crate::socket::{Reply, Request};

/// Settings of `exec`.
#[derive(Clone, Debug)]
pub struct ExecSettings {
    /// The sidecar's socket.
    pub socket: PathBuf,
    /// The migration command and its arguments.
    pub command: Vec<String>,
    /// How long to wait for the sidecar's socket to accept.
    pub connect_timeout: Duration,
    /// How long to wait for the verdict after CMD ended.
    pub verdict_timeout: Duration,
    /// Termination message path for the wrapper's own refusals and fences.
    pub termination_log: Option<PathBuf>,
    /// Become the subreaper of CMD's processes and kill every one left at
    /// the end, in or out of its process group (the wrapper as a program;
    /// off in unit tests, whose process runs other tests' children).
    pub reap_strays: bool,
}

/// Runs the wrapper; returns the exit code.
pub async fn exec(s: &ExecSettings) -> i32 {
    let (code, message) = run(s).await;
    if code != 0 {
        tracing::warn!(exit_code = code, message = %message, "migration wrapper ended");
        if code >= exit::NOT_STARTED_TIMEOUT
            && let Some(path) = &s.termination_log
        {
            let _ = std::fs::write(path, crate::record::bounded(&message, 3000));
        }
    } else {
        tracing::info!(message = %message, "migration wrapper ended");
    }
    code
}

async fn connect(s: &ExecSettings) -> Result<UnixStream, String> {
    let until = Instant::now() + s.connect_timeout;
    loop {
        match UnixStream::connect(&s.socket).await {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() >= until => {
                return Err(format!("failed to connect to the sidecar at {}: {e}", s.socket.display()));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

async fn send(out: &mut (impl AsyncWriteExt + Unpin), req: &Request) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(req).map_err(std::io::Error::other)?;
    line.push(b'\n');
    out.write_all(&line).await
}

/// The sidecar's first decisive reply to `attach`: `start` or `refused`.
/// Before it, `waiting` lines (the leases are still asked for) are logged
/// once per holder, with no time limit of the wrapper's own: the sidecar's
/// acquire timeout ends the wait with a refusal. Stopped while waiting
/// (SIGTERM, SIGINT: the Pod is deleted), the wrapper exits at once as
/// not started, the code the sidecar records for a run stopped before both
/// leases were held.
async fn first_decision(
    s: &ExecSettings,
    lines: &mut tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
    term: &mut Option<Signal>,
    int: &mut Option<Signal>,
) -> Result<Result<Reply, String>, (i32, String)> {
    let mut waiting = false;
    loop {
        // Until the sidecar first answers, it must answer promptly.
        let limit = if waiting { Duration::MAX } else { s.connect_timeout };
        let line = tokio::select! {
            line = tokio::time::timeout(limit, lines.next_line()) => line,
            Some(()) = recv(term) => return Err((exit::NOT_STARTED_REFUSED, "not started: stopped (SIGTERM) while waiting for the leases".into())),
            Some(()) = recv(int) => return Err((exit::NOT_STARTED_REFUSED, "not started: stopped (SIGINT) while waiting for the leases".into())),
        };
        let reply = match line {
            Ok(Ok(Some(l))) => {
                serde_json::from_str::<Reply>(&l).map_err(|e| format!("unreadable reply from the sidecar: {e}"))
            }
            Ok(Ok(None)) => Err("the sidecar closed the connection".into()),
            Ok(Err(e)) => Err(format!("failed to read from the sidecar: {e}")),
            Err(_) => Err("the sidecar did not answer".into()),
        };
        match reply {
            Ok(Reply::Waiting { holder }) => {
                waiting = true;
                if let Some(holder) = holder {
                    tracing::info!(holder = %holder, "waiting for the leases: held by another operation");
                } else {
                    tracing::info!("waiting for the sidecar to take the leases");
                }
            }
            other => return Ok(other),
        }
    }
}

/// What woke the wrapper's loop.
enum Wake {
    Exited(std::io::Result<std::process::ExitStatus>),
    Line(std::io::Result<Option<String>>),
    Timer,
    Stop,
}

/// The fence in progress.
struct Fencing {
    reason: String,
    kill_at: Instant,
    killed: bool,
}

#[allow(clippy::too_many_lines)] // one select loop; splitting it would scatter its state
async fn run(s: &ExecSettings) -> (i32, String) {
    let Some((program, args)) = s.command.split_first() else {
        return (exit::USAGE, "exec needs a command after --".into());
    };
    let stream = match connect(s).await {
        Ok(c) => c,
        Err(e) => return (exit::SIDECAR_FAILED, e),
    };
    let (read, mut out) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    if let Err(e) = send(&mut out, &Request::Attach).await {
        return (exit::SIDECAR_FAILED, format!("failed to attach to the sidecar: {e}"));
    }
    let mut term = signal(SignalKind::terminate()).ok();
    let mut int = signal(SignalKind::interrupt()).ok();
    let first = match first_decision(s, &mut lines, &mut term, &mut int).await {
        Ok(first) => first,
        Err(ended) => return ended,
    };
    let (mut deadline, grace) = match first {
        Ok(Reply::Start { remaining_ms, grace_ms }) => {
            (Instant::now() + Duration::from_millis(remaining_ms), Duration::from_millis(grace_ms))
        }
        Ok(Reply::Refused { exit_code, message }) => return (exit_code, format!("not started: {message}")),
        Ok(other) => return (exit::SIDECAR_FAILED, format!("unexpected reply from the sidecar: {other:?}")),
        Err(e) => return (exit::SIDECAR_FAILED, e),
    };
    if s.reap_strays {
        crate::fence::become_subreaper();
    }
    let mut child = match tokio::process::Command::new(program).args(args).process_group(0).spawn() {
        Ok(c) => c,
        Err(e) => {
            let message = format!("failed to start {program}: {e}");
            let _ = send(&mut out, &Request::Exited { code: Some(127), signal: None }).await;
            let verdict = verdict(&mut lines, s.verdict_timeout).await;
            return (verdict.map_or(127, |v| v.0), message);
        }
    };
    let Some(target) = child.id().and_then(Target::new) else {
        return (exit::SIDECAR_FAILED, "the migration process has no usable pid".into());
    };
    tracing::info!(pid = child.id(), command = %program, "migration started");
    let mut connected = true;
    let mut fencing: Option<Fencing> = None;
    let fence = |fencing: &mut Option<Fencing>, reason: String| {
        if fencing.is_none() {
            tracing::warn!(reason = %reason, grace_ms = grace.as_millis() as u64, "fencing the migration: SIGTERM now, SIGKILL after the grace");
            target.terminate();
            *fencing = Some(Fencing { reason, kill_at: Instant::now() + grace, killed: false });
        }
    };
    let status = loop {
        let wake = match &fencing {
            Some(f) if !f.killed => f.kill_at,
            Some(_) => Instant::now() + Duration::from_secs(3600),
            None => deadline,
        };
        let event = tokio::select! {
            status = child.wait() => Wake::Exited(status),
            line = lines.next_line(), if connected => Wake::Line(line),
            () = sleep_until(wake) => Wake::Timer,
            Some(()) = recv(&mut term) => Wake::Stop,
            Some(()) = recv(&mut int) => Wake::Stop,
        };
        match event {
            Wake::Exited(status) => break status,
            Wake::Line(Ok(Some(l))) => match serde_json::from_str::<Reply>(&l) {
                Ok(Reply::Held { remaining_ms }) => deadline = Instant::now() + Duration::from_millis(remaining_ms),
                Ok(Reply::Fence { reason, .. }) => fence(&mut fencing, format!("the sidecar fenced the run: {reason}")),
                Ok(other) => tracing::warn!(reply = ?other, "unexpected message from the sidecar"),
                Err(e) => tracing::warn!(error = %e, "unreadable message from the sidecar"),
            },
            Wake::Line(Ok(None) | Err(_)) => {
                connected = false;
                fence(
                    &mut fencing,
                    "the connection to the sidecar was lost (a restarted sidecar holds no lease)".into(),
                );
            }
            Wake::Timer => {
                if let Some(f) = fencing.as_mut() {
                    tracing::warn!("grace over: SIGKILL to the migration's process group");
                    target.kill_group();
                    if s.reap_strays {
                        crate::fence::kill_descendants();
                    }
                    f.killed = true;
                } else {
                    fence(
                        &mut fencing,
                        "no renewal was confirmed before the fence deadline (the sidecar is stopped or cut off)".into(),
                    );
                }
            }
            Wake::Stop => {
                // A Pod deletion or a cancelled job: SIGTERM now, and SIGKILL
                // after the sidecar's grace, as on a fence. A migration that
                // ignores SIGTERM otherwise ran for the whole termination
                // grace period (and the next deploy waited a further TTL).
                fence(&mut fencing, "a stop signal (the Pod was deleted, or the job cancelled)".into());
            }
        }
    };
    // Nothing the migration started outlives it: its group, and whatever
    // left the group (reparented to us, the subreaper).
    target.kill_group();
    let stray = if s.reap_strays { crate::fence::kill_descendants() } else { 0 };
    if stray > 0 {
        tracing::warn!(processes = stray, "killed processes the migration left running (outside its process group)");
    }
    let end = match status {
        Ok(st) => (st.code(), st.signal()),
        Err(e) => {
            tracing::warn!(error = %e, "failed to wait for the migration");
            (None, None)
        }
    };
    tracing::info!(code = ?end.0, signal = ?end.1, "migration ended");
    let exited = Request::Exited { code: end.0, signal: end.1 };
    let verdict = if connected && send(&mut out, &exited).await.is_ok() {
        verdict(&mut lines, s.verdict_timeout).await
    } else {
        fresh_verdict(s, &exited).await
    };
    match (verdict, fencing) {
        (Some((code, message)), _) => (code, message),
        (None, Some(f)) => (
            exit::SIDECAR_FAILED,
            format!("fenced ({}); the sidecar gave no verdict: treat the schema as unverified", f.reason),
        ),
        (None, None) => (exit::SIDECAR_FAILED, "the sidecar gave no verdict: the run's state is unknown".into()),
    }
}

async fn recv(s: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match s {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

/// Reads until the verdict (skipping deadline updates), within `timeout`.
async fn verdict(
    lines: &mut tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
    timeout: Duration,
) -> Option<(i32, String)> {
    let work = async {
        while let Ok(Some(l)) = lines.next_line().await {
            if let Ok(Reply::Verdict { exit_code, message }) = serde_json::from_str::<Reply>(&l) {
                return Some((exit_code, message));
            }
        }
        None
    };
    tokio::time::timeout(timeout, work).await.ok().flatten()
}

/// Asks for the verdict on a new connection (the first one was lost).
async fn fresh_verdict(s: &ExecSettings, exited: &Request) -> Option<(i32, String)> {
    match crate::socket::call(&s.socket, exited, s.verdict_timeout).await {
        Ok(Reply::Verdict { exit_code, message }) => Some((exit_code, message)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::UnixListener;

    /// A sidecar stand-in: answers `attach` with `start`, then runs `script`
    /// of replies (a `None` closes the connection), then answers `exited`
    /// with verdict 92. Returns the `exited` request it saw.
    fn fake(
        listener: UnixListener,
        remaining_ms: u64,
        then: Vec<Option<Reply>>,
    ) -> tokio::task::JoinHandle<Option<Request>> {
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.ok()?;
            let (read, mut out) = stream.into_split();
            let mut lines = BufReader::new(read).lines();
            let attach: Request = serde_json::from_str(&lines.next_line().await.ok()??).ok()?;
            assert_eq!(attach, Request::Attach);
            let send = |r: &Reply| format!("{}\n", serde_json::to_string(r).unwrap_or_default());
            out.write_all(send(&Reply::Start { remaining_ms, grace_ms: 500 }).as_bytes()).await.ok()?;
            for r in then {
                tokio::time::sleep(Duration::from_millis(300)).await;
                match r {
                    Some(r) => out.write_all(send(&r).as_bytes()).await.ok()?,
                    None => return None,
                }
            }
            let exited: Request = serde_json::from_str(&lines.next_line().await.ok()??).ok()?;
            out.write_all(send(&Reply::Verdict { exit_code: 92, message: "fenced".into() }).as_bytes()).await.ok()?;
            Some(exited)
        })
    }

    fn settings(dir: &std::path::Path, script: &str) -> ExecSettings {
        ExecSettings {
            socket: dir.join("s.sock"),
            command: vec!["/bin/sh".into(), "-c".into(), script.into()],
            connect_timeout: Duration::from_secs(2),
            verdict_timeout: Duration::from_secs(2),
            termination_log: None,
            reap_strays: false,
        }
    }

    const TRAPS_TERM_EXITS_0: &str = "trap 'exit 0' TERM; while :; do sleep 0.05; done";

    #[tokio::test]
    async fn a_fence_stops_the_migration_and_a_trapped_exit_0_takes_the_verdict() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path(), TRAPS_TERM_EXITS_0);
        let server = fake(
            UnixListener::bind(&s.socket).unwrap(),
            60_000,
            vec![Some(Reply::Fence { reason: "revoked".into(), grace_ms: 500 })],
        );
        let (code, _) = run(&s).await;
        assert_eq!(code, 92, "the sidecar's verdict, not the migration's 0");
        assert_eq!(server.await.unwrap(), Some(Request::Exited { code: Some(0), signal: None }));
    }

    #[tokio::test]
    async fn the_wrapper_fences_by_its_own_deadline_when_no_renewal_is_confirmed() {
        let dir = tempfile::tempdir().unwrap();
        // SIGTERM ignored: only the SIGKILL after the grace ends it.
        let s = settings(dir.path(), "trap '' TERM; while :; do sleep 0.05; done");
        let server = fake(UnixListener::bind(&s.socket).unwrap(), 400, vec![]);
        let started = Instant::now();
        let (code, _) = run(&s).await;
        assert_eq!(code, 92);
        assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
        assert_eq!(server.await.unwrap(), Some(Request::Exited { code: None, signal: Some(9) }));
    }

    #[tokio::test]
    async fn losing_the_sidecar_fences_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path(), TRAPS_TERM_EXITS_0);
        let server = fake(
            UnixListener::bind(&s.socket).unwrap(),
            60_000,
            vec![Some(Reply::Held { remaining_ms: 60_000 }), None],
        );
        let (code, message) = run(&s).await;
        assert!(server.await.unwrap().is_none());
        assert_eq!(code, exit::SIDECAR_FAILED, "{message}");
        assert!(message.contains("connection to the sidecar was lost"), "{message}");
    }

    #[tokio::test]
    async fn a_refusal_never_starts_the_migration() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let s = settings(dir.path(), &format!("touch {}", marker.display()));
        let listener = UnixListener::bind(&s.socket).unwrap();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let (read, mut out) = stream.into_split();
            let _ = BufReader::new(read).lines().next_line().await;
            let refused = Reply::Refused { exit_code: 90, message: "held by op-a".into() };
            out.write_all(format!("{}\n", serde_json::to_string(&refused).unwrap()).as_bytes()).await.unwrap();
        });
        let (code, message) = run(&s).await;
        assert_eq!(code, 90);
        assert!(message.contains("op-a"), "{message}");
        assert!(!marker.exists(), "the migration must not start");
    }
}
