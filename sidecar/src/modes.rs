//! The subcommands: `hold` and `run` over one lease core
//! ([`crate::lease::driver`]), the wrapper `exec`, and the small socket
//! clients `mark`, `permit`, `probe`. Each returns the process exit code.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, watch};

use crate::client::DeployApi;
use crate::config::{ExecArgs, HoldArgs, InstallArgs, LeaseArgs, Mark, MarkArgs, RunArgs, SocketArgs, optional_path};
use crate::ddl::Detector;
use crate::lease::driver::{Settings, drive};
use crate::lease::ending::{Ending, ProcessEnd, exit, verdict};
use crate::lease::machine::{FenceReason, GiveUp};
use crate::record::{FinalRecord, Phase, State, read_state, write_state};
use crate::socket::{self, MarkEvent, Reply, Request, RunState, Shared, Status};

/// A future that resolves on SIGTERM or SIGINT, and stays resolved.
fn stop_signal() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
            tracing::error!("failed to install the signal handlers");
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        let _ = tx.send(true);
    });
    rx
}

async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

fn settings(
    args: &LeaseArgs,
    random_ok: bool,
    termination_log: Option<PathBuf>,
    state_file: Option<PathBuf>,
) -> Result<Settings, String> {
    let (timing, operation_id) = args.check(random_ok).map_err(|e| e.to_string())?;
    let api = DeployApi::new(&args.url, &args.ca_source(), &args.token_file, &args.group, args.request_timeout)
        .map_err(|e| e.to_string())?;
    let detector = args.db_url_file.as_deref().map(Detector::from_file).transpose().map_err(|e| e.to_string())?;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        url = %args.url,
        group = %args.group,
        instance = %args.instance,
        operation_id = %operation_id,
        ttl_seconds = args.ttl,
        renew_interval_ms = timing.interval,
        request_timeout_ms = timing.request_timeout,
        grace_ms = timing.grace,
        acquire_timeout_s = args.acquire_timeout.as_secs_f64(),
        ddl_boundary = ?args.ddl_boundary,
        db_detection = detector.is_some(),
        uid = rustix::process::getuid().as_raw(),
        "bloodraven-sidecar starting"
    );
    if rustix::process::getuid().is_root() {
        tracing::warn!("running as root: the sidecar needs no privilege; run it as a non-root user");
    }
    Ok(Settings {
        api,
        group: args.group.clone(),
        instance: args.instance.clone(),
        operation_id,
        timing,
        acquire_timeout: args.acquire_timeout,
        acquire_poll: args.acquire_poll,
        watch: !args.no_watch,
        boundary: args.ddl_boundary,
        termination_log,
        state_file,
        detector,
        wait_for_exit: Duration::from_secs(5),
    })
}

fn serve(
    path: &Path,
    access: socket::Access,
    status: watch::Receiver<Status>,
    events: mpsc::Sender<Event>,
) -> Result<Arc<Shared>, String> {
    let listener =
        socket::bind(path, access).map_err(|e| format!("failed to bind the socket {}: {e}", path.display()))?;
    let shared = Shared::new(status, events);
    tokio::spawn(socket::serve(listener, shared.clone()));
    Ok(shared)
}

use crate::socket::Event;

/// Publishes the record of a run that ended before asking for any lease
/// ([`FinalRecord::not_run`]); returns `code`.
fn not_run(code: i32, message: &str, lease: &crate::config::LeaseArgs, termination_log: &Path) -> i32 {
    FinalRecord::not_run(code, message, Some(lease)).publish(optional_path(termination_log).as_deref());
    code
}

/// `hold`.
pub async fn hold(args: HoldArgs) -> i32 {
    let stop = stop_signal();
    if let Some(dir) = &args.install {
        match install_into(dir) {
            Ok(targets) => tracing::info!(dir = %dir.display(), files = targets.len(), "installed the exec wrapper"),
            Err(e) => {
                tracing::error!(dir = %dir.display(), error = %e, "failed to install the exec wrapper: the migration cannot start");
                return not_run(
                    exit::USAGE,
                    &format!("failed to install the exec wrapper into {}: {e}", dir.display()),
                    &args.lease,
                    &args.termination_log,
                );
            }
        }
    }
    let s = match settings(&args.lease, false, optional_path(&args.termination_log), Some(args.state_file.clone())) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "refusing to start");
            return not_run(exit::USAGE, &format!("refusing to start: {e}"), &args.lease, &args.termination_log);
        }
    };
    let (status_tx, status_rx) = watch::channel(Status::Acquiring);
    let (events_tx, events_rx) = mpsc::channel(64);
    // A restarted sidecar: its tokens died with it; the run is over.
    let previous = match read_state(&args.state_file) {
        Ok(p) => p.filter(|p| p.operation_id == s.operation_id),
        Err(e) => {
            tracing::error!(path = %args.state_file.display(), error = %e, "unreadable state file: refusing to acquire (a restart must never acquire again)");
            return not_run(
                exit::SIDECAR_FAILED,
                &format!(
                    "unreadable state file {}: {e}; refusing to acquire (a restart must never acquire again)",
                    args.state_file.display()
                ),
                &args.lease,
                &args.termination_log,
            );
        }
    };
    let record = if let Some(previous) = previous {
        let record = restarted(&s, &previous);
        let _ = status_tx.send(Status::Ended { exit_code: record.exit_code, message: record.message.clone() });
        if let Err(e) = serve(&args.socket, socket::Access::Pod, status_rx, events_tx) {
            tracing::error!(error = %e, "socket");
        }
        (record, None)
    } else {
        // The state file must be writable before anything is acquired.
        let first = State {
            operation_id: s.operation_id.clone(),
            phase: Phase::Acquiring,
            in_ddl: false,
            revision: None,
            record: None,
        };
        if let Err(e) = write_state(&args.state_file, &first) {
            tracing::error!(path = %args.state_file.display(), error = %e, "failed to write the state file: refusing to acquire");
            return not_run(
                exit::USAGE,
                &format!("failed to write the state file {}: {e}", args.state_file.display()),
                &args.lease,
                &args.termination_log,
            );
        }
        let shared = match serve(&args.socket, socket::Access::Pod, status_rx, events_tx) {
            Ok(shared) => shared,
            Err(e) => {
                tracing::error!(error = %e, "refusing to start");
                return not_run(exit::USAGE, &format!("refusing to start: {e}"), &args.lease, &args.termination_log);
            }
        };
        (drive(&s, status_tx, events_rx, stopped(stop.clone())).await, Some(shared))
    };
    let (record, shared) = record;
    // A native sidecar that exits is restarted: stay until the kubelet stops
    // the Pod (after the migration container ended).
    stopped(stop).await;
    // Stopped while the wrapper still ends its migration (both got SIGTERM:
    // the sidecar run as an ordinary container of a Pod being deleted):
    // stay until it has its verdict, so that both exit with the record's
    // code, for at most the fence's grace and a moment to report.
    if let Some(shared) = shared {
        let bound = Duration::from_millis(s.timing.grace) + Duration::from_secs(2);
        if tokio::time::timeout(bound, shared.verdict_given()).await.is_err() {
            tracing::warn!(seconds = bound.as_secs_f64(), "the wrapper did not collect its verdict in time; exiting");
        }
    }
    record.exit_code
}

/// The record of a run whose sidecar restarted: acquiring or holding, its
/// tokens are gone (memory only), so the run ends here; the leases lapse by TTL.
fn restarted(s: &Settings, previous: &State) -> FinalRecord {
    if let (Phase::Ended, Some(record)) = (previous.phase, &previous.record) {
        tracing::info!(result = %record.result, "this run already ended; not acquiring again");
        return record.clone();
    }
    let ending = match previous.phase {
        Phase::Acquiring => Ending::NotStarted(GiveUp::Lost { reason: FenceReason::SidecarRestarted.to_string() }),
        _ => Ending::Fenced { reason: FenceReason::SidecarRestarted, in_ddl: previous.in_ddl, process: None },
    };
    let v = verdict(&ending);
    tracing::warn!(
        result = v.result,
        "the sidecar restarted during the run: never acquiring again; the leases lapse by their TTL"
    );
    let record = FinalRecord {
        record: "bloodraven-sidecar".into(),
        operation_id: s.operation_id.clone(),
        group: s.group.clone(),
        instance: s.instance.clone(),
        result: v.result.into(),
        exit_code: v.exit_code,
        ddl_state: v.ddl_state.as_str().into(),
        revision: previous.revision.clone(),
        fence: Some(FenceReason::SidecarRestarted.code().into()),
        last_error: Some(FenceReason::SidecarRestarted.to_string()),
        message: v.message,
        ..FinalRecord::default()
    };
    record.publish(s.termination_log.as_deref());
    if let Some(path) = &s.state_file {
        let state = State { phase: Phase::Ended, record: Some(record.clone()), ..previous.clone() };
        if let Err(e) = write_state(path, &state) {
            tracing::error!(error = %e, "failed to write the state file");
        }
    }
    record
}

/// Ends when `run`'s wrapper is overdue: the grace after a fence (or a
/// moment after the run's end) passed without it exiting; a wrapper that
/// reported the migration's exit waits for its verdict, which the run's
/// end may take a while to give (releasing the hold, the record), so it is
/// overdue only a moment after the run ended.
async fn overdue(mut watched: watch::Receiver<Status>, mut reported: watch::Receiver<bool>) {
    let grace = match watched.wait_for(|s| matches!(s, Status::Fenced { .. } | Status::Ended { .. })).await {
        Ok(s) => match &*s {
            Status::Fenced { grace, .. } => *grace,
            _ => Duration::ZERO,
        },
        Err(_) => return std::future::pending().await,
    };
    tokio::time::sleep(grace + Duration::from_secs(1)).await;
    if *reported.borrow_and_update() {
        if watched.wait_for(|s| matches!(s, Status::Ended { .. })).await.is_err() {
            return std::future::pending().await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A sender of socket events that forwards them to `events`, and whether
/// one of them was the wrapper's report of the migration's exit: from then
/// on the wrapper only waits for its verdict, and is not overdue.
fn tap_exits(events: mpsc::Sender<Event>) -> (mpsc::Sender<Event>, watch::Receiver<bool>) {
    let (tx, mut rx) = mpsc::channel::<Event>(64);
    let (reported_tx, reported_rx) = watch::channel(false);
    tokio::spawn(async move {
        while let Some(event) = rx.recv().await {
            if matches!(event, Event::Exited(..)) {
                let _ = reported_tx.send(true);
            }
            if events.send(event).await.is_err() {
                break;
            }
        }
    });
    (tx, reported_rx)
}

/// `run`.
#[allow(clippy::too_many_lines)] // the run mode's steps in order: settings, socket, leases, the wrapper, its end
pub async fn run(args: RunArgs) -> i32 {
    let stop = stop_signal();
    let s = match settings(&args.lease, true, optional_path(&args.termination_log), None) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "refusing to start");
            return not_run(exit::USAGE, &format!("refusing to start: {e}"), &args.lease, &args.termination_log);
        }
    };
    // A private directory for the socket unless one was given.
    let private = match &args.socket {
        Some(_) => None,
        None => match tempfile::Builder::new().prefix("bloodraven-sidecar-").tempdir() {
            Ok(d) => Some(d),
            Err(e) => {
                tracing::error!(error = %e, "failed to make a directory for the socket");
                return not_run(
                    exit::SIDECAR_FAILED,
                    &format!("failed to make a directory for the socket: {e}"),
                    &args.lease,
                    &args.termination_log,
                );
            }
        },
    };
    let socket_path = args
        .socket
        .clone()
        .unwrap_or_else(|| private.as_ref().map_or_else(PathBuf::new, |d| d.path().join("sidecar.sock")));
    // Orphans of the wrapper's tree (the wrapper killed) become ours, so that
    // they can be killed before the run ends: see the wrapper future below.
    crate::fence::become_subreaper();
    let (status_tx, mut status_rx) = watch::channel(Status::Acquiring);
    let (events_tx, events_rx) = mpsc::channel(64);
    let (socket_tx, reported_rx) = tap_exits(events_tx.clone());
    if let Err(e) = serve(&socket_path, socket::Access::Owner, status_rx.clone(), socket_tx) {
        tracing::error!(error = %e, "refusing to start");
        return not_run(exit::SIDECAR_FAILED, &format!("refusing to start: {e}"), &args.lease, &args.termination_log);
    }
    let wrapper = async {
        // Start the wrapper once both leases are held; never otherwise.
        let held = status_rx
            .wait_for(|s| matches!(s, Status::Held { .. } | Status::Ended { .. }))
            .await
            .map(|s| matches!(*s, Status::Held { .. }));
        if !matches!(held, Ok(true)) {
            return None;
        }
        let exe = match std::env::current_exe() {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(error = %e, "failed to find this program to start the wrapper");
                return None;
            }
        };
        let child = tokio::process::Command::new(exe)
            .arg("exec")
            .arg("--socket")
            .arg(&socket_path)
            .args(["--termination-log", "none", "--connect-timeout", "10", "--"])
            .args(&args.command)
            .env("BLOODRAVEN_SOCKET", &socket_path)
            .spawn();
        // The wrapper has the grace after a fence (or a moment after the
        // run's end) to stop CMD and exit; past that, `run` kills the tree
        // itself. A migration that stopped its wrapper (`kill -STOP $PPID`)
        // otherwise ran on after the fence, and `run` never ended.
        let overdue = overdue(status_rx.clone(), reported_rx.clone());
        let status = match child {
            Ok(mut c) => tokio::select! {
                s = c.wait() => s.ok(),
                () = overdue => {
                    let killed = crate::fence::kill_descendants();
                    tracing::warn!(processes = killed, "the wrapper did not end after the fence or the run's end: killed it and everything it left");
                    c.wait().await.ok()
                }
            },
            Err(e) => {
                tracing::error!(error = %e, "failed to start the wrapper");
                None
            }
        };
        // Nothing the wrapper's tree left outlives it: a wrapper killed with
        // -9 left the migration running, reparented to us (the attack round
        // saw it write after the run had released both leases).
        let stray = crate::fence::kill_descendants();
        if stray > 0 {
            tracing::warn!(processes = stray, "killed processes the wrapper left running");
        }
        // A wrapper that ended without reporting (it failed, or was killed):
        // what the migration did is unknown. After a report the driver no
        // longer reads this.
        let end = ProcessEnd {
            code: status.and_then(|s| s.code()),
            signal: status.and_then(|s| std::os::unix::process::ExitStatusExt::signal(&s)),
        };
        let _ = events_tx.send(Event::WrapperLost(end)).await;
        status
    };
    let (record, wrapper_status) = tokio::join!(drive(&s, status_tx, events_rx, stopped(stop)), wrapper);
    tracing::debug!(wrapper = ?wrapper_status, "wrapper ended");
    record.exit_code
}

/// `exec`.
pub async fn exec(args: ExecArgs) -> i32 {
    let s = crate::exec::ExecSettings {
        socket: args.socket,
        command: args.command,
        connect_timeout: args.connect_timeout,
        verdict_timeout: args.verdict_timeout,
        termination_log: optional_path(&args.termination_log),
        reap_strays: true,
    };
    crate::exec::exec(&s).await
}

/// The request `mark` sends.
pub fn mark_request(what: Mark) -> Request {
    match what {
        Mark::DdlStarted { revision } => Request::Mark { event: MarkEvent::DdlStarted, revision },
        Mark::DdlFinished { revision } => Request::Mark { event: MarkEvent::DdlFinished, revision },
        Mark::Outcome { result, revision, error } => Request::Outcome { result, revision, error },
    }
}

/// `mark`.
pub async fn mark(args: MarkArgs) -> i32 {
    let req = mark_request(args.what);
    match socket::call(&args.socket.socket, &req, args.socket.timeout).await {
        Ok(Reply::Ok) => 0,
        Ok(other) => {
            eprintln!("bloodraven-sidecar mark: refused: {other:?}");
            1
        }
        Err(e) => {
            eprintln!("bloodraven-sidecar mark: {e}");
            1
        }
    }
}

/// `permit`.
pub async fn permit(args: SocketArgs) -> i32 {
    match socket::call(&args.socket, &Request::Permit, args.timeout).await {
        Ok(Reply::Permit { granted: true, remaining_ms, .. }) => {
            println!("granted: {remaining_ms} ms before the fence deadline");
            0
        }
        Ok(Reply::Permit { message, .. }) => {
            eprintln!("bloodraven-sidecar permit: refused: {message}");
            1
        }
        Ok(other) => {
            eprintln!("bloodraven-sidecar permit: unexpected reply {other:?}");
            1
        }
        Err(e) => {
            eprintln!("bloodraven-sidecar permit: {e}");
            1
        }
    }
}

/// `probe`: passes once the sidecar serves its socket, whatever the run's
/// state. The wrapper is installed before the socket serves, so the
/// migration container may start; its wrapper waits on the socket until
/// both leases are held (or the run is over). A wait is therefore never a
/// failing probe, which the kubelet would record as a stream of Warning
/// Events; who holds the lease is said by the wrapper's log and by the
/// operator's `WaitingForLease` Events on the Pod and its Job. The probe
/// prints where the run stands.
pub async fn probe(args: SocketArgs) -> i32 {
    match socket::call(&args.socket, &Request::Status, args.timeout).await {
        Ok(Reply::Status { state: RunState::Acquiring, holder: Some(holder), .. }) => {
            println!("waiting for the migration mutex: held by {holder}");
            0
        }
        Ok(Reply::Status { state: RunState::Held, remaining_ms, .. }) => {
            println!("held ({remaining_ms} ms before the fence deadline)");
            0
        }
        Ok(Reply::Status { state: RunState::Ended, .. }) => {
            println!("ended: the migration's wrapper is refused and reports the run's result");
            0
        }
        Ok(Reply::Status { state, .. }) => {
            println!(
                "{}",
                serde_json::to_value(state).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
            );
            0
        }
        Ok(other) => {
            eprintln!("unexpected reply {other:?}");
            1
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

/// The migration runner's file name; `install` copies it from beside this
/// program when the image has it (the sidecar image does: the migration
/// runner ships beside the sidecar).
pub const MIGRATE_BIN: &str = "bloodraven-migrate";

/// `install`: copies this program to DIR/bloodraven-sidecar, and
/// `bloodraven-migrate` from the same directory as this program (when there)
/// to DIR/bloodraven-migrate, each mode 0755, through a temporary file
/// renamed into place. So a migration container of any image runs the
/// runner from the shared volume, and its revisions stay in the app's own
/// image (the same image as the release). Exit 0, or 2 when a copy fails.
pub fn install(args: &InstallArgs) -> i32 {
    match install_into(&args.dir) {
        Ok(targets) => {
            for target in targets {
                println!("installed {}", target.display());
            }
            0
        }
        Err(e) => {
            eprintln!("bloodraven-sidecar install: failed to copy into {}: {e}", args.dir.display());
            exit::USAGE
        }
    }
}

/// The copies of [`install`] into `dir`; returns the paths written.
///
/// Errors: the first failed create, copy, chmod or rename.
fn install_into(dir: &std::path::Path) -> std::io::Result<Vec<PathBuf>> {
    fn copy(from: &std::path::Path, dir: &std::path::Path, name: &str) -> std::io::Result<PathBuf> {
        use std::os::unix::fs::PermissionsExt as _;
        let target = dir.join(name);
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::copy(from, &tmp)?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))?;
        std::fs::rename(&tmp, &target)?;
        Ok(target)
    }
    std::fs::create_dir_all(dir)?;
    let me = std::env::current_exe()?;
    let mut done = vec![copy(&me, dir, "bloodraven-sidecar")?];
    let runner = me.with_file_name(MIGRATE_BIN);
    if runner.is_file() {
        done.push(copy(&runner, dir, MIGRATE_BIN)?);
    }
    Ok(done)
}
