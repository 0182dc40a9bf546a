//! The I/O around the lease core: sends the POSTs and PUTs the core asks
//! for, feeds their answers back, publishes where the run stands to the
//! local socket, and carries out the ending (hold released on every path;
//! the final state recorded — termination message, JSON line, the Lease's
//! `ddlState` — before the mutex is released).
//!
//! One task decides; each HTTP request runs in its own task so that a slow
//! answer on one lease never delays the other's renewal. Answers that
//! arrive after a fence are dropped: the heartbeat has stopped.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep_until};

use super::ending::{Boundary, BoundaryMode, Ending, ProcessEnd};
use super::machine::{
    AcquirePolicy, AcquireStep, FenceReason, GiveUp, Heartbeat, HolderInfo, Millis, PostAnswer, RenewAnswer, Timing,
    after_post,
};
use crate::client::DeployApi;
use crate::ddl::Detector;
use crate::record::{FinalRecord, Phase, State, write_state};
use crate::socket::{Event, OutcomeResult, Status};
use crate::wire::{DdlState, LeaseKind, LeaseToken, WatchAnswer};

mod finish;

use finish::finish;

/// The wait of one watch request, in seconds: half the server's longest
/// (60), so a connection is never held near a server or proxy bound.
const WATCH_SECONDS: u32 = 30;

/// A watch answered `Held` sooner than this did not wait: the next one
/// waits [`WATCH_PAUSE`] first.
const WATCH_EARLY: Duration = Duration::from_secs(WATCH_SECONDS as u64 / 2);

/// The pause after a watch that did not wait.
const WATCH_PAUSE: Duration = Duration::from_secs(1);

/// Everything a run needs.
#[derive(Debug)]
pub struct Settings {
    /// The deploy API client.
    pub api: DeployApi,
    /// The group.
    pub group: String,
    /// The MysqlDatabase name.
    pub instance: String,
    /// The operationId.
    pub operation_id: String,
    /// Checked timing (ttl, interval, request timeout, grace).
    pub timing: Timing,
    /// How long to keep asking for the leases.
    pub acquire_timeout: Duration,
    /// Longest wait between two POSTs while another operation holds the mutex.
    pub acquire_poll: Duration,
    /// Whether each held lease is watched (push revocation); off only in
    /// benchmarks that compare against renewals alone.
    pub watch: bool,
    /// How the DDL boundary is learnt.
    pub boundary: BoundaryMode,
    /// Termination message path.
    pub termination_log: Option<PathBuf>,
    /// `hold`'s state file.
    pub state_file: Option<PathBuf>,
    /// The database detection, when configured.
    pub detector: Option<Detector>,
    /// How long after SIGTERM + grace to wait for the migration's exit
    /// after a fence, before recording the end without it.
    pub wait_for_exit: Duration,
}

enum Io {
    Post { kind: LeaseKind, sent: Millis, answer: PostAnswer, token: Option<LeaseToken> },
    Renew { kind: LeaseKind, sent: Millis, version: u64, ddl: DdlState, answer: RenewAnswer },
}

struct Run<'a> {
    s: &'a Settings,
    origin: Instant,
    /// The wall clock at `origin`, for the call log's times.
    wall_origin: std::time::SystemTime,
    hb: Heartbeat,
    migration: Option<LeaseToken>,
    hold: Option<LeaseToken>,
    boundary: Boundary,
    outcome: Option<(OutcomeResult, Option<String>)>,
    status: watch::Sender<Status>,
    started: bool,
    /// Reports waiting for a renewal that carries them: (DDL version, ack).
    pending: Vec<(u64, oneshot::Sender<()>)>,
    /// Counts the changes of the `ddlState` sent; each renewal carries the
    /// version it was built from.
    ddl_version: u64,
    /// The `ddlState` the last confirmed renewal of the migration lease
    /// carried: what the Lease holds.
    on_lease: Option<DdlState>,
}

impl Run<'_> {
    /// Answers `ack` at once when the `ddlState` to send did not become
    /// `started`; otherwise renews now and answers once a migration-lease
    /// renewal sent after this moment is confirmed (dropped on a fence).
    fn confirm_when_recorded(&mut self, was: DdlState, ack: oneshot::Sender<()>) {
        if self.boundary.wire_state() == DdlState::Started && was != DdlState::Started {
            self.ddl_version += 1;
            self.pending.push((self.ddl_version, ack));
            self.hb.renew_now(self.ms());
        } else {
            let _ = ack.send(());
        }
    }

    /// A renewal of `kind` built at DDL version `version` was answered
    /// (`confirmed`: 200 at the grant's generation). Answers the reports it
    /// carried; asks again for those it could not carry (built before them).
    fn recorded(&mut self, kind: LeaseKind, version: u64, confirmed: bool) {
        if kind != LeaseKind::Migration || self.pending.is_empty() {
            return;
        }
        if confirmed {
            let (done, waiting): (Vec<_>, Vec<_>) =
                std::mem::take(&mut self.pending).into_iter().partition(|(v, _)| *v <= version);
            for (_, ack) in done {
                let _ = ack.send(());
            }
            self.pending = waiting;
        }
        if !self.pending.is_empty() && confirmed {
            self.hb.renew_now(self.ms());
        }
    }

    fn ms(&self) -> Millis {
        self.origin.elapsed().as_millis() as Millis
    }

    fn at(&self, m: Millis) -> Instant {
        self.origin + Duration::from_millis(m)
    }

    /// `m` (ms since the run began) as microseconds since the Unix epoch.
    fn unix_us(&self, m: Millis) -> u64 {
        let at = self.wall_origin + Duration::from_millis(m);
        at.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
    }

    /// The confirmed deadline of the lease that lapses first (µs since the
    /// epoch): past it the migration must be gone. `None` before a grant.
    fn confirmed_until_us(&self) -> Option<u64> {
        [LeaseKind::Migration, LeaseKind::FailoverHold]
            .into_iter()
            .filter_map(|k| self.hb.clock(k))
            .map(|c| c.confirmed_until)
            .min()
            .map(|m| self.unix_us(m))
    }

    /// One line of the call log (`debug`, target `bloodraven_sidecar::calls`):
    /// a lease call sent at `sent`, answered now, and the deadline it left
    /// confirmed. What a fault-injection run records of every client; off
    /// unless asked for (`RUST_LOG=bloodraven_sidecar::calls=debug`).
    fn log_call(&self, call: &str, kind: LeaseKind, sent: Millis, answer: &str, generation: Option<i64>) {
        let confirmed_until_us = self.hb.clock(kind).map(|c| self.unix_us(c.confirmed_until));
        tracing::debug!(
            target: "bloodraven_sidecar::calls",
            call,
            kind = kind.as_str(),
            operation_id = %self.s.operation_id,
            call_us = self.unix_us(sent),
            ret_us = self.unix_us(self.ms()),
            answer,
            generation,
            confirmed_until_us,
            "lease call"
        );
    }

    fn token(&self, kind: LeaseKind) -> Option<&LeaseToken> {
        match kind {
            LeaseKind::Migration => self.migration.as_ref(),
            LeaseKind::FailoverHold => self.hold.as_ref(),
        }
    }

    fn save(&self, phase: Phase, record: Option<FinalRecord>) {
        if let Some(path) = &self.s.state_file {
            let state = State {
                operation_id: self.s.operation_id.clone(),
                phase,
                in_ddl: self.boundary.in_ddl(),
                revision: self.boundary.revision.clone(),
                record,
            };
            if let Err(e) = write_state(path, &state) {
                tracing::error!(path = %path.display(), error = %e, "failed to write the state file");
            }
        }
    }

    fn publish_held(&self) {
        let remaining = self.hb.remaining(self.ms());
        let _ = self.status.send(Status::Held {
            deadline: Instant::now() + Duration::from_millis(remaining),
            grace: Duration::from_millis(self.hb.timing().grace),
        });
    }

    fn spawn_post(&self, tasks: &mut JoinSet<Io>, kind: LeaseKind) {
        let api = self.s.api.clone();
        let (op, instance) = (self.s.operation_id.clone(), self.s.instance.clone());
        let ttl = (self.hb.timing().ttl / 1000) as u32;
        let sent = self.ms();
        tasks.spawn(async move {
            let (answer, token) = api.create(kind, &op, &instance, ttl).await;
            Io::Post { kind, sent, answer, token }
        });
    }

    /// Watches `kind`'s lease for as long as the run holds it (the task is
    /// aborted when the loop ends): an answer saying it may be gone sends
    /// `kind` on `nudge`, and the loop renews at once — so a revocation
    /// reaches the fence within a round trip or two, not at the next ttl/3.
    fn spawn_watch(&self, watchers: &mut JoinSet<()>, kind: LeaseKind, nudge: mpsc::Sender<LeaseKind>) {
        let Some(token) = self.token(kind).cloned().filter(|_| self.s.watch) else { return };
        let api = self.s.api.clone();
        let op = self.s.operation_id.clone();
        let margin = Duration::from_millis(self.hb.timing().request_timeout);
        watchers.spawn(async move {
            loop {
                let asked = Instant::now();
                match api.watch(kind, &op, &token, WATCH_SECONDS, margin).await {
                    // A wait that came back long before its time (a server or
                    // proxy that does not hold it): pause, so that the watch
                    // never asks as fast as the round trip allows (the attack
                    // round saw ~55 requests a second against one such server).
                    WatchAnswer::Held if asked.elapsed() < WATCH_EARLY => {
                        tokio::time::sleep(WATCH_PAUSE).await;
                    }
                    WatchAnswer::Held => {}
                    WatchAnswer::Gone(what) => {
                        tracing::info!(kind = kind.as_str(), answer = %what, "watch: the lease may be gone; renewing now");
                        if nudge.send(kind).await.is_err() {
                            return;
                        }
                        // The renewal decides; if it confirms, watch again after a pause.
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    WatchAnswer::Retry(ms, what) => {
                        tracing::debug!(kind = kind.as_str(), answer = %what, retry_in_ms = ms, "watch not answered; again after a pause");
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                    }
                }
            }
        });
    }

    fn spawn_renew(&self, tasks: &mut JoinSet<Io>, kind: LeaseKind) {
        let Some(token) = self.token(kind).cloned() else { return };
        let api = self.s.api.clone();
        let op = self.s.operation_id.clone();
        let ddl = self.boundary.wire_state();
        let revision = self.boundary.revision.clone();
        let sent = self.ms();
        let version = self.ddl_version;
        tasks.spawn(async move {
            let answer = api.renew(kind, &op, &token, Some(ddl), revision.as_deref()).await;
            Io::Renew { kind, sent, version, ddl, answer }
        });
    }
}

/// The call log's word for a POST's answer: the error code the deploy API
/// uses (`held`, `unstable`, `revoked`), `granted`, `refused:<status>`, or
/// `failed` when there was no usable answer.
fn post_label(answer: &PostAnswer) -> std::borrow::Cow<'static, str> {
    match answer {
        PostAnswer::Granted { .. } => "granted".into(),
        PostAnswer::Held { .. } => "held".into(),
        PostAnswer::Unstable { .. } => "unstable".into(),
        PostAnswer::Revoked { .. } => "revoked".into(),
        PostAnswer::Refused { status, .. } => format!("refused:{status}").into(),
        PostAnswer::Failed { .. } => "failed".into(),
    }
}

fn post_generation(answer: &PostAnswer) -> Option<i64> {
    match answer {
        PostAnswer::Granted { generation, .. } => Some(*generation),
        _ => None,
    }
}

/// As [`post_label`], for a renewal (`expired`, `token_mismatch`, `forbidden`).
fn renew_label(answer: &RenewAnswer) -> &'static str {
    match answer {
        RenewAnswer::Renewed { .. } => "renewed",
        RenewAnswer::Revoked { .. } => "revoked",
        RenewAnswer::Expired => "expired",
        RenewAnswer::TokenMismatch => "token_mismatch",
        RenewAnswer::Forbidden { .. } => "forbidden",
        RenewAnswer::Unstable { .. } => "unstable",
        RenewAnswer::Failed { .. } => "failed",
    }
}

fn renew_generation(answer: &RenewAnswer) -> Option<i64> {
    match answer {
        RenewAnswer::Renewed { generation } => Some(*generation),
        RenewAnswer::Revoked { generation, .. } => *generation,
        _ => None,
    }
}

/// What the loop ended with, and the wrapper waiting for its verdict.
struct Loop {
    ending: Ending,
    reply: Option<oneshot::Sender<(i32, String)>>,
}

/// Drives one run until its final record; `shutdown` resolves on SIGTERM.
pub async fn drive(
    s: &Settings,
    status: watch::Sender<Status>,
    mut events: mpsc::Receiver<Event>,
    shutdown: impl Future<Output = ()>,
) -> FinalRecord {
    let mut run = Run {
        s,
        origin: Instant::now(),
        wall_origin: std::time::SystemTime::now(),
        hb: Heartbeat::new(s.timing),
        migration: None,
        hold: None,
        boundary: Boundary::new(s.boundary),
        outcome: None,
        status,
        started: false,
        pending: Vec::new(),
        ddl_version: 0,
        on_lease: None,
    };
    run.save(Phase::Acquiring, None);
    let _ = run.status.send(Status::Acquiring);
    let mut shutdown = std::pin::pin!(shutdown);
    let Loop { ending, mut reply } = main_loop(&mut run, &mut events, &mut shutdown).await;
    let mut ending = ending;
    if let Ending::Fenced { reason, .. } = &ending {
        tracing::warn!(
            fence = reason.code(),
            reason = %reason,
            in_ddl = run.boundary.in_ddl(),
            at_us = run.unix_us(run.ms()),
            confirmed_until_us = run.confirmed_until_us(),
            "fenced: the heartbeat stopped; never reconnecting, never acquiring again in this run"
        );
        let _ = run
            .status
            .send(Status::Fenced { reason: reason.to_string(), grace: Duration::from_millis(s.timing.grace) });
        let exit_known = matches!(ending, Ending::Fenced { process: Some(_), .. });
        if run.started && reply.is_none() && !exit_known {
            // The mutex stays ours until the migration has exited.
            let wait = Duration::from_millis(s.timing.grace) + s.wait_for_exit;
            if let Some((end, tx)) = wait_exit(&mut events, wait).await {
                tracing::info!(stopped_us = run.unix_us(run.ms()), "the fenced migration has exited");
                if let Ending::Fenced { process, .. } = &mut ending {
                    *process = Some(end);
                }
                reply = Some(tx);
            } else {
                tracing::warn!("the migration did not report its exit within the grace");
            }
        }
    }
    finish(&mut run, ending, reply).await
}

async fn wait_exit(
    events: &mut mpsc::Receiver<Event>,
    wait: Duration,
) -> Option<(ProcessEnd, oneshot::Sender<(i32, String)>)> {
    let until = Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(until, events.recv()).await {
            Ok(Some(Event::Exited(end, tx))) => return Some((end, tx)),
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return None,
        }
    }
}

#[allow(clippy::too_many_lines)] // the one select loop of the run; its arms are short
async fn main_loop(
    run: &mut Run<'_>,
    events: &mut mpsc::Receiver<Event>,
    shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
) -> Loop {
    let s = run.s;
    let policy = AcquirePolicy {
        started: 0,
        timeout: s.acquire_timeout.as_millis() as Millis,
        poll: s.acquire_poll.as_millis() as Millis,
    };
    let mut tasks: JoinSet<Io> = JoinSet::new();
    // Aborted when this loop returns (the JoinSet is dropped).
    let mut watchers: JoinSet<()> = JoinSet::new();
    let (nudge, mut nudged) = mpsc::channel::<LeaseKind>(4);
    let mut acquiring = Some(LeaseKind::Migration);
    let mut next_post: Millis = 0;
    let mut post_in_flight = false;
    let mut last_holder: Option<HolderInfo> = None;
    let mut shutdown_seen = false;
    let done = |ending: Ending, reply| Loop { ending, reply };
    loop {
        let now = run.ms();
        if let Some(kind) = acquiring
            && !post_in_flight
            && now >= next_post
        {
            run.spawn_post(&mut tasks, kind);
            post_in_flight = true;
        }
        for kind in run.hb.due(now) {
            run.spawn_renew(&mut tasks, kind);
        }
        if let Some(reason) = run.hb.fenced().cloned() {
            tasks.abort_all();
            // Lost before the migration started: it never will.
            if !run.started {
                let give_up = match reason {
                    FenceReason::GenerationChanged { granted, now, .. } => {
                        GiveUp::GenerationChanged { migration: granted, hold: now }
                    }
                    other => GiveUp::Lost { reason: other.to_string() },
                };
                return done(Ending::NotStarted(give_up), None);
            }
            return done(Ending::Fenced { reason, in_ddl: run.boundary.in_ddl(), process: None }, None);
        }
        let mut wake = run.hb.next_wake().unwrap_or(now + 60_000);
        if acquiring.is_some() && !post_in_flight {
            wake = wake.min(next_post);
        }
        tokio::select! {
            Some(joined) = tasks.join_next() => {
                let Ok(io) = joined else { continue };
                let now = run.ms();
                match io {
                    Io::Post { kind, sent, answer, token } => {
                        post_in_flight = false;
                        let step = after_post(kind, &answer, now, &policy, rand::random::<f64>(), last_holder.as_ref());
                        if let AcquireStep::Granted { generation, ttl_seconds } = step
                            && token.is_some()
                        {
                            run.hb.granted(kind, sent, generation, ttl_seconds);
                        }
                        run.log_call("acquire", kind, sent, &post_label(&answer), post_generation(&answer));
                        match step {
                            AcquireStep::Granted { generation, ttl_seconds } => {
                                let Some(token) = token else { continue };
                                tracing::info!(kind = kind.as_str(), generation, ttl_seconds, "lease granted");
                                match kind {
                                    LeaseKind::Migration => {
                                        run.migration = Some(token);
                                        run.spawn_watch(&mut watchers, kind, nudge.clone());
                                        acquiring = Some(LeaseKind::FailoverHold);
                                        next_post = now;
                                    }
                                    LeaseKind::FailoverHold => {
                                        run.hold = Some(token);
                                        run.spawn_watch(&mut watchers, kind, nudge.clone());
                                        acquiring = None;
                                        if let Some(detector) = &s.detector {
                                            // The baseline, before the migration may start.
                                            match detector.capture().await {
                                                Ok(()) => tracing::info!("schema fingerprint taken at the grant"),
                                                Err(e) => tracing::warn!(error = %e, "failed to take the schema fingerprint at the grant; the database detection is off for this run"),
                                            }
                                        }
                                        if run.hb.fenced().is_none() {
                                            tracing::info!(held_ms = now, "both leases held");
                                            run.save(Phase::Held, None);
                                            run.publish_held();
                                        }
                                    }
                                }
                            }
                            AcquireStep::RetryAt(at) => {
                                match &answer {
                                    PostAnswer::Held { holder, .. } => {
                                        if last_holder.as_ref() != Some(holder) {
                                            tracing::info!(kind = kind.as_str(), holder = %holder, "409 held: waiting for the holder");
                                            let _ = run.status.send(Status::Waiting { holder: holder.to_string() });
                                        }
                                        last_holder = Some(holder.clone());
                                    }
                                    // Waiting on the group is normal; an answer that
                                    // is an error (unreachable, TLS, 401, 403, 5xx)
                                    // is a warning even while it is retried.
                                    PostAnswer::Unstable { retry_after_seconds, message } => tracing::info!(
                                        kind = kind.as_str(),
                                        retry_after_seconds,
                                        retry_in_ms = at.saturating_sub(now),
                                        "423 unstable: {message}; asking again"
                                    ),
                                    PostAnswer::Failed { what } => tracing::warn!(
                                        kind = kind.as_str(),
                                        error = %what,
                                        retry_in_ms = at.saturating_sub(now),
                                        "the deploy API gave no usable answer; asking again"
                                    ),
                                    PostAnswer::Refused { status, code, message } => tracing::warn!(
                                        kind = kind.as_str(),
                                        status,
                                        code = %code,
                                        message = %message,
                                        retry_in_ms = at.saturating_sub(now),
                                        "lease refused; asking again"
                                    ),
                                    other => tracing::info!(kind = kind.as_str(), answer = ?other, retry_in_ms = at.saturating_sub(now), "lease not granted yet; asking again"),
                                }
                                next_post = at;
                            }
                            AcquireStep::GiveUp(give_up) => {
                                tasks.abort_all();
                                return done(Ending::NotStarted(give_up), None);
                            }
                        }
                    }
                    Io::Renew { kind, sent, version, ddl, answer } => {
                        match &answer {
                            RenewAnswer::Renewed { .. } => tracing::debug!(kind = kind.as_str(), "renewed"),
                            other => tracing::warn!(kind = kind.as_str(), answer = ?other, "renewal not confirmed"),
                        }
                        let confirmed = matches!(answer, RenewAnswer::Renewed { .. });
                        if confirmed && kind == LeaseKind::Migration {
                            run.on_lease = Some(ddl);
                        }
                        let fenced = run.hb.renewed(kind, sent, &answer, now).is_some();
                        run.log_call("renew", kind, sent, renew_label(&answer), renew_generation(&answer));
                        if !fenced && acquiring.is_none() {
                            run.publish_held();
                        }
                        if !fenced {
                            run.recorded(kind, version, confirmed);
                        }
                    }
                }
            }
            () = sleep_until(run.at(wake)) => {}
            Some(kind) = nudged.recv() => {
                tracing::debug!(kind = kind.as_str(), "renewing now: the watch says the lease may be gone");
                run.hb.renew_now(run.ms());
            }
            event = events.recv() => match event {
                Some(Event::Report(report, revision, ack)) => {
                    tracing::info!(report = ?report, revision = ?revision, "DDL boundary reported");
                    let was = run.boundary.wire_state();
                    run.boundary.report(report, revision);
                    run.save(Phase::Held, None);
                    run.confirm_when_recorded(was, ack);
                }
                Some(Event::Outcome { result, revision, error }) => {
                    tracing::info!(result = result.as_str(), revision = ?revision, "outcome reported");
                    if revision.is_some() {
                        run.boundary.revision = revision;
                    }
                    run.outcome = Some((result, error));
                }
                Some(Event::Started(ack)) => {
                    run.started = true;
                    let was = run.boundary.wire_state();
                    run.boundary.migration_started();
                    run.save(Phase::Held, None);
                    tracing::info!(ddl_state = run.boundary.wire_state().as_str(), "the migration is starting");
                    run.confirm_when_recorded(was, ack);
                }
                Some(Event::Exited(end, tx)) => {
                    tasks.abort_all();
                    // Exited after the deadline: the fence decides, not the exit.
                    if let Some(reason) = run.hb.tick(run.ms()).cloned() {
                        return done(Ending::Fenced { reason, in_ddl: run.boundary.in_ddl(), process: Some(end) }, Some(tx));
                    }
                    return done(Ending::Finished { process: end, in_ddl: run.boundary.in_ddl() }, Some(tx));
                }
                Some(Event::Nudge) => run.hb.renew_now(run.ms()),
                Some(Event::WrapperLost(end)) => {
                    tasks.abort_all();
                    tracing::warn!(end = ?end, "the wrapper ended without reporting the migration's exit");
                    if !run.started {
                        return done(Ending::NotStarted(GiveUp::Lost { reason: FenceReason::WrapperLost.to_string() }), None);
                    }
                    // Unknown, not failed: fenced, so the mutex is not released
                    // when the migration may have been in DDL.
                    run.hb.fence_now(FenceReason::WrapperLost);
                    let reason = run.hb.fenced().cloned().unwrap_or(FenceReason::WrapperLost);
                    return done(Ending::Fenced { reason, in_ddl: run.boundary.in_ddl(), process: Some(end) }, None);
                }
                None => {}
            },
            () = shutdown.as_mut(), if !shutdown_seen => {
                shutdown_seen = true;
                tracing::info!("SIGTERM received");
                if !run.started {
                    tasks.abort_all();
                    return done(Ending::NotStarted(GiveUp::Stopped), None);
                }
                run.hb.fence_now(FenceReason::Shutdown);
            }
        }
    }
}
