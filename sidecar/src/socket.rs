//! The sidecar's end of the local socket between the sidecar and the
//! migration: a unix stream socket in a directory only the Pod's containers
//! mount (an emptyDir), one JSON object per line each way. The wire types
//! and the calling side are the contract's, `bloodraven_api::socket`,
//! shared with the migration runner; this module serves them.
//!
//! It never hands out a token: a caller can ask where the run stands
//! (`status`, for the startup probe), ask for permission to take a step
//! (`permit`), report the DDL boundary and the outcome (`mark`,
//! `outcome`), and — once per run — `attach` as the migration's entrypoint
//! wrapper (`bloodraven-sidecar exec`), which is then told to start, kept
//! informed of the fence deadline after every confirmed renewal, told to
//! fence, and finally sends `exited` and gets the verdict.
//!
//! Requests are at most [`MAX_LINE`] bytes; anything else is answered with
//! `{"reply":"error","message":…}` and the connection is closed.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub use bloodraven_api::socket::client::call;
use bloodraven_api::socket::client::read_line;
pub use bloodraven_api::socket::{MAX_LINE, MarkEvent, OutcomeResult, Reply, Request, RunState, parse};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::lease::ending::{ProcessEnd, Report};

/// Most connections served at once (a probe, marks, the wrapper).
const MAX_CONNECTIONS: usize = 32;

/// Longest wait for the driver to confirm a report or a start (a renewal
/// carrying the new `ddlState`): past it, the caller is refused.
const ACK_TIMEOUT: Duration = Duration::from_secs(60);

/// Longest wait for a request line on a new connection.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What the driver publishes for the socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// Asking for the leases.
    Acquiring,
    /// Asking for the leases, which another operation holds: who, and until when.
    Waiting {
        /// The holder, in words.
        holder: String,
    },
    /// Both held until `deadline` (the fence deadline), SIGKILL `grace` after SIGTERM.
    Held {
        /// The fence deadline.
        deadline: Instant,
        /// The grace.
        grace: Duration,
    },
    /// Fenced.
    Fenced {
        /// Why.
        reason: String,
        /// The grace.
        grace: Duration,
    },
    /// Over, with the verdict.
    Ended {
        /// Exit code.
        exit_code: i32,
        /// Why.
        message: String,
    },
}

impl Status {
    fn state(&self) -> RunState {
        match self {
            Status::Acquiring | Status::Waiting { .. } => RunState::Acquiring,
            Status::Held { .. } => RunState::Held,
            Status::Fenced { .. } => RunState::Fenced,
            Status::Ended { .. } => RunState::Ended,
        }
    }

    fn remaining_ms(&self) -> u64 {
        match self {
            Status::Held { deadline, .. } => deadline.saturating_duration_since(Instant::now()).as_millis() as u64,
            _ => 0,
        }
    }
}

/// What the socket tells the driver.
#[derive(Debug)]
pub enum Event {
    /// A DDL-boundary report; the sender is answered once the report is
    /// safe to act on (`ddl-started`: once a renewal carrying `started` was
    /// confirmed, so the operator knows before the DDL is sent).
    Report(Report, Option<String>, oneshot::Sender<()>),
    /// The migration's outcome.
    Outcome {
        /// Succeeded or failed.
        result: OutcomeResult,
        /// Last revision.
        revision: Option<String>,
        /// Last error.
        error: Option<String>,
    },
    /// The wrapper asks to start the migration; answered once it may (with
    /// `--ddl-boundary at-start`: once the Lease has `ddlState: started`).
    Started(oneshot::Sender<()>),
    /// The migration ended; the verdict goes back on the channel.
    Exited(ProcessEnd, oneshot::Sender<(i32, String)>),
    /// Something (a push watch, later) says a lease may be gone: renew now.
    /// Renewals stay the source of truth.
    Nudge,
    /// `run`'s wrapper process ended without reporting the migration's exit
    /// (it was killed); `run` has killed every process it left.
    WrapperLost(ProcessEnd),
}

/// The socket's side of the run: the status to read and the events to send.
#[derive(Debug)]
pub struct Shared {
    status: watch::Receiver<Status>,
    events: mpsc::Sender<Event>,
    attached: AtomicBool,
    /// True from the wrapper's `start` until it has its verdict (or its
    /// connection is gone).
    awaiting_verdict: watch::Sender<bool>,
}

impl Shared {
    /// Shared state over a status channel and an event channel.
    pub fn new(status: watch::Receiver<Status>, events: mpsc::Sender<Event>) -> Arc<Shared> {
        let (awaiting_verdict, _) = watch::channel(false);
        Arc::new(Shared { status, events, attached: AtomicBool::new(false), awaiting_verdict })
    }

    /// Resolves once no started wrapper is waiting for its verdict. A
    /// sidecar that exits before then leaves the wrapper without one (it
    /// exits 94 while the record says otherwise): when both get SIGTERM at
    /// once, as ordinary containers of a Pod being deleted do, the sidecar
    /// waits for this.
    pub async fn verdict_given(&self) {
        let mut awaiting = self.awaiting_verdict.subscribe();
        let _ = awaiting.wait_for(|a| !*a).await;
    }
}

/// Marks a started wrapper as waiting for its verdict until dropped.
struct AwaitingVerdict<'a>(&'a watch::Sender<bool>);

impl<'a> AwaitingVerdict<'a> {
    fn new(flag: &'a watch::Sender<bool>) -> Self {
        flag.send_replace(true);
        Self(flag)
    }
}

impl Drop for AwaitingVerdict<'_> {
    fn drop(&mut self) {
        self.0.send_replace(false);
    }
}

/// Who may connect to the socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Every user that reaches the directory (`hold`: the migration
    /// container may run as another user; only the Pod's containers mount
    /// the emptyDir).
    Pod,
    /// This user only (`run`: the wrapper is our own child; another user
    /// of a shared CI runner must not attach or report).
    Owner,
}

/// Binds `path` (a stale socket file left by an earlier instance is
/// replaced) with the permissions `access` says, and serves it until the
/// task is dropped.
pub fn bind(path: &Path, access: Access) -> std::io::Result<UnixListener> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    // The migration container may run as another user; the socket hands
    // out no secret, and only containers mounting the directory reach it.
    let mode = match access {
        Access::Pod => 0o666,
        Access::Owner => 0o600,
    };
    std::fs::set_permissions(path, <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(mode))?;
    Ok(listener)
}

/// Serves connections on `listener`.
pub async fn serve(listener: UnixListener, shared: Arc<Shared>) {
    let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            if let Err(e) = connection(stream, &shared).await {
                tracing::debug!(error = %e, "socket connection ended");
            }
            drop(permit);
        });
    }
}

async fn write(stream: &mut (impl AsyncWriteExt + Unpin), reply: &Reply) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(reply).map_err(std::io::Error::other)?;
    line.push(b'\n');
    stream.write_all(&line).await?;
    stream.flush().await
}

async fn connection(stream: UnixStream, shared: &Shared) -> std::io::Result<()> {
    let (read, mut write_half) = stream.into_split();
    let mut reader = BufReader::new(read);
    let line = match tokio::time::timeout(REQUEST_TIMEOUT, read_line(&mut reader)).await {
        Err(_) | Ok(Ok(None)) => return Ok(()),
        Ok(Ok(Some(line))) => line,
        Ok(Err(e)) => {
            write(&mut write_half, &Reply::Error { message: e.to_string() }).await?;
            return Ok(());
        }
    };
    let req = match parse(&line) {
        Ok(r) => r,
        Err(message) => return write(&mut write_half, &Reply::Error { message }).await,
    };
    let status = shared.status.borrow().clone();
    let reply = match req {
        Request::Status => Reply::Status {
            state: status.state(),
            remaining_ms: status.remaining_ms(),
            holder: match status {
                Status::Waiting { holder } => Some(holder.clone()),
                _ => None,
            },
        },
        Request::Permit => permit(&status),
        Request::Mark { event, revision } => {
            let report = match event {
                MarkEvent::DdlStarted => Report::DdlStarted,
                MarkEvent::DdlFinished => Report::DdlFinished,
            };
            let (tx, rx) = oneshot::channel();
            match event_reply(shared, &status, Event::Report(report, revision, tx)).await {
                Reply::Ok => match tokio::time::timeout(ACK_TIMEOUT, rx).await {
                    Ok(Ok(())) => Reply::Ok,
                    _ => Reply::Error {
                        message: "the report could not be recorded on the Lease (fenced, or no renewal confirmed it)"
                            .into(),
                    },
                },
                other => other,
            }
        }
        Request::Outcome { result, revision, error } => {
            let error = error.map(|e| crate::record::bounded(&e, 1024));
            event_reply(shared, &status, Event::Outcome { result, revision, error }).await
        }
        // Only the attached wrapper reports the migration's exit (on its
        // own connection): anyone else reaching the socket — another
        // process of the Pod, a child of the migration — would otherwise
        // end the run, release both leases and record CMD's "success"
        // while the migration still runs, or before it ever started. Here
        // `exited` only reads the verdict of a run that is over (the
        // wrapper asks so when its own connection was lost).
        Request::Exited { .. } => return verdict_of_ended(shared, &mut write_half).await,
        Request::Attach => return attach(shared, reader, write_half).await,
    };
    write(&mut write_half, &reply).await
}

fn permit(status: &Status) -> Reply {
    match status {
        Status::Held { .. } if status.remaining_ms() > 0 => {
            Reply::Permit { granted: true, remaining_ms: status.remaining_ms(), message: String::new() }
        }
        Status::Held { .. } => {
            Reply::Permit { granted: false, remaining_ms: 0, message: "the fence deadline passed".into() }
        }
        Status::Acquiring | Status::Waiting { .. } => {
            Reply::Permit { granted: false, remaining_ms: 0, message: "the leases are not held yet".into() }
        }
        Status::Fenced { reason, .. } => {
            Reply::Permit { granted: false, remaining_ms: 0, message: format!("fenced: {reason}") }
        }
        Status::Ended { message, .. } => {
            Reply::Permit { granted: false, remaining_ms: 0, message: format!("the run is over: {message}") }
        }
    }
}

async fn event_reply(shared: &Shared, status: &Status, event: Event) -> Reply {
    if matches!(status, Status::Ended { .. }) {
        return Reply::Error { message: "the run is over; the report was not recorded".into() };
    }
    match shared.events.send(event).await {
        Ok(()) => Reply::Ok,
        Err(_) => Reply::Error { message: "the sidecar is ending; the report was not recorded".into() },
    }
}

async fn exited(shared: &Shared, out: &mut (impl AsyncWriteExt + Unpin), end: ProcessEnd) -> std::io::Result<()> {
    let mut status = shared.status.clone();
    let now = status.borrow_and_update().clone();
    if let Status::Ended { exit_code, message } = now {
        return write(out, &Reply::Verdict { exit_code, message }).await;
    }
    let (tx, rx) = oneshot::channel();
    if shared.events.send(Event::Exited(end, tx)).await.is_ok()
        && let Ok((exit_code, message)) = rx.await
    {
        return write(out, &Reply::Verdict { exit_code, message }).await;
    }
    // The driver ended without taking it: its record holds the verdict.
    let ended = status.wait_for(|s| matches!(s, Status::Ended { .. })).await.map(|s| (*s).clone());
    match ended {
        Ok(Status::Ended { exit_code, message }) => write(out, &Reply::Verdict { exit_code, message }).await,
        _ => write(out, &Reply::Error { message: "the sidecar ended without a verdict".into() }).await,
    }
}

/// `exited` on a connection that did not attach: the verdict once the run
/// is over (waiting up to [`ACK_TIMEOUT`] for it); never an event.
async fn verdict_of_ended(shared: &Shared, out: &mut (impl AsyncWriteExt + Unpin)) -> std::io::Result<()> {
    let mut status = shared.status.clone();
    let ended = tokio::time::timeout(ACK_TIMEOUT, status.wait_for(|s| matches!(s, Status::Ended { .. }))).await;
    let reply = match ended.map(|r| r.map(|s| (*s).clone())) {
        Ok(Ok(Status::Ended { exit_code, message })) => Reply::Verdict { exit_code, message },
        Ok(_) => Reply::Error { message: "the sidecar ended without a verdict".into() },
        Err(_) => Reply::Error {
            message: "only the attached wrapper reports the migration's exit; the run is not over".into(),
        },
    };
    write(out, &reply).await
}

/// Asks the driver to start the migration; `Some` once it may.
async fn started(shared: &Shared) -> Option<()> {
    let (tx, rx) = oneshot::channel();
    shared.events.send(Event::Started(tx)).await.ok()?;
    tokio::time::timeout(ACK_TIMEOUT, rx).await.ok()?.ok()
}

/// The wrapper's connection: start (or refusal), deadline updates, fence.
#[allow(clippy::too_many_lines)] // one connection's protocol, each message handled in turn
async fn attach(
    shared: &Shared,
    mut reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    mut out: tokio::net::unix::OwnedWriteHalf,
) -> std::io::Result<()> {
    let mut status = shared.status.clone();
    // A wrapper that attaches while the leases are still asked for waits on
    // its connection, told who holds the lease each time that changes: its
    // container starts at once (a native sidecar's startup probe passes as
    // soon as this socket serves), and a wait is never a failing probe.
    let mut said: Option<Option<String>> = None;
    let now = loop {
        let now = status.borrow_and_update().clone();
        let holder = match &now {
            Status::Acquiring => None,
            Status::Waiting { holder } => Some(holder.clone()),
            _ => break now,
        };
        if said.as_ref() != Some(&holder) {
            write(&mut out, &Reply::Waiting { holder: holder.clone() }).await?;
            said = Some(holder);
        }
        tokio::select! {
            changed = status.changed() => {
                if changed.is_err() {
                    break status.borrow().clone();
                }
            }
            // A wrapper gone (or talking out of turn) while it waits is not
            // started later: the run would wait for an exit nobody reports.
            line = read_line(&mut reader) => {
                let Some(_) = line? else { return Ok(()) };
                write(&mut out, &Reply::Error { message: "nothing is taken from a waiting wrapper".into() }).await?;
            }
        }
    };
    let start = match &now {
        Status::Held { grace, .. } if now.remaining_ms() > 0 => {
            if shared.attached.swap(true, Ordering::SeqCst) {
                Reply::Refused {
                    exit_code: crate::lease::ending::exit::SIDECAR_FAILED,
                    message: "another wrapper already attached to this run".into(),
                }
            } else if let Some(()) = {
                // The start waits until a renewal records that the migration
                // starts (at-start boundary), up to ACK_TIMEOUT: the wrapper
                // is told to wait, so that its own first-reply bound (its
                // connect timeout) never runs out first and exits 94 while
                // the run goes on.
                if said.is_none() {
                    write(&mut out, &Reply::Waiting { holder: None }).await?;
                }
                started(shared).await
            } {
                let now = status.borrow_and_update().clone();
                Reply::Start { remaining_ms: now.remaining_ms(), grace_ms: grace.as_millis() as u64 }
            } else {
                Reply::Refused {
                    exit_code: crate::lease::ending::exit::SIDECAR_FAILED,
                    message: "the sidecar is ending".into(),
                }
            }
        }
        Status::Ended { exit_code, message } => Reply::Refused { exit_code: *exit_code, message: message.clone() },
        other => Reply::Refused {
            exit_code: crate::lease::ending::exit::SIDECAR_FAILED,
            message: format!("the sidecar does not hold both leases ({:?})", other.state()),
        },
    };
    let _awaiting = matches!(start, Reply::Start { .. }).then(|| AwaitingVerdict::new(&shared.awaiting_verdict));
    write(&mut out, &start).await?;
    let Reply::Start { grace_ms, .. } = start else { return Ok(()) };
    let mut fenced = false;
    // The driver drops the status once the run is over; the wrapper's
    // report of the migration's exit may still be on its way, and is
    // answered with the run's verdict (never by closing the connection,
    // which leaves the wrapper without one: it would exit 94 while the
    // record says otherwise).
    let mut status_open = true;
    loop {
        tokio::select! {
            changed = status.changed(), if status_open => {
                if changed.is_err() {
                    status_open = false;
                    continue;
                }
                let s = status.borrow_and_update().clone();
                match s {
                    Status::Held { .. } => write(&mut out, &Reply::Held { remaining_ms: s.remaining_ms() }).await?,
                    Status::Fenced { reason, grace } if !fenced => {
                        fenced = true;
                        write(&mut out, &Reply::Fence { reason, grace_ms: grace.as_millis() as u64 }).await?;
                    }
                    // The run ended while the migration still runs (its
                    // leases are released or lapsing): it must stop now.
                    Status::Ended { message, .. } if !fenced => {
                        fenced = true;
                        let reason = format!("the run ended before the migration did: {message}");
                        write(&mut out, &Reply::Fence { reason, grace_ms }).await?;
                    }
                    _ => {}
                }
            }
            line = read_line(&mut reader) => {
                let Some(line) = line? else { return Ok(()) };
                match parse(&line) {
                    Ok(Request::Exited { code, signal }) => return exited(shared, &mut out, ProcessEnd { code, signal }).await,
                    Ok(_) => write(&mut out, &Reply::Error { message: "only `exited` is taken on an attached connection".into() }).await?,
                    Err(message) => write(&mut out, &Reply::Error { message }).await?,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
