//! `POST /deploy/v1/groups/{group}/leases/{kind}/{operationId}/watch`: push
//! revocation as a long-poll (docs/sidecar.md, "Revocation latency: the watch").
//!
//! The request is admitted, parsed and authorized like a renewal (leader
//! only, TokenReview, `deploymentClients`, the lease token in the body —
//! never in the URL, which proxies and access logs keep). It then answers as
//! soon as the lease is no longer the caller's — revoked (`409`), lapsed or
//! released (`404 expired`), token rotated (`403 token_mismatch`), caller no
//! longer listed (`403 forbidden`) — or, when `waitSeconds` (default 30, at
//! most 60) pass first, `200` with the lease as last renewed. It never
//! writes: renewals stay the source of truth.
//!
//! How it learns: it subscribes to the lease service's change counter for
//! the group before each look, so the write that revokes (the reconciler's
//! revocation right after a decision, or after the revoke annotation)
//! wakes it at once; it also wakes at the grant's expiry, every
//! [`TICK`] to check leadership and shutdown (503 `not_leader`, so the
//! client asks the new leader), and reads the slots afresh every
//! [`FRESH_READ`] for writes this process did not make.
//!
//! Bounds (`crate::lease::watch`): at most 4 watches of one lease, and at
//! most half the listener's connection limit in total; more answer
//! `429 too_many_watches`. A watch holds its connection for at most its
//! wait, so the listener's own deadlines (which bound idle and slow
//! connections, not requests being answered) still leave every slot free
//! within a minute.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use bloodraven_api::deploy::{
    DEFAULT_WATCH_SECONDS, ErrorBody, ErrorCode, LeaseKind, MAX_WATCH_SECONDS, WatchRequest, WatchResponse,
};

use super::{ApiError, LeaseBody, error, invalid, json_response, lease_handler, service_error};
use crate::authority::Caller;
use crate::deploy_api::DeployState;
use crate::lease::store::token_sha256;
use crate::lease::watch::{Full, LeaseKey};
use bloodraven_core::lease::machine::Actor;

/// Longest a watch sleeps between looks at leadership and shutdown.
pub(super) const TICK: Duration = Duration::from_secs(1);

/// How often a watch reads the slots from the API server rather than from
/// this process's last write (writes by another process: a former leader,
/// the finalizer of a deleted group).
pub(super) const FRESH_READ: Duration = Duration::from_secs(10);

/// Seconds a client is told to wait after `429 too_many_watches`.
const TOO_MANY_RETRY_AFTER_SECONDS: u32 = 1;

/// One watch in `bloodraven_deploy_watches_open`, for as long as it lives.
struct Counted(prometheus::IntGauge);

impl Counted {
    fn new(gauge: &prometheus::IntGauge) -> Self {
        gauge.inc();
        Counted(gauge.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl LeaseBody for WatchRequest {
    fn token(&self) -> &str {
        &self.token
    }
}

pub(super) async fn watch_lease(
    State(state): State<DeployState>,
    Path(path): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    lease_handler(state, path, headers, body, "watch_lease", |state, group, kind, op, req: WatchRequest, caller, _| {
        watch(state, group, kind, op, req, caller)
    })
    .await
}

async fn watch(
    state: DeployState,
    group: String,
    kind: LeaseKind,
    operation_id: String,
    req: WatchRequest,
    caller: Caller,
) -> Result<(Response, String), ApiError> {
    let wait = req.wait_seconds.unwrap_or(DEFAULT_WATCH_SECONDS);
    if wait > MAX_WATCH_SECONDS {
        return Err(invalid("waitSeconds", "must be 0–60 seconds"));
    }
    let client = caller.id();
    let key = LeaseKey { group: group.clone(), kind, operation_id: operation_id.clone(), client: client.clone() };
    let _open = state.watches.open(key).map_err(|full| {
        let message = match full {
            Full::Lease => "4 watches of this lease are open already; ask again when one ends",
            Full::Total => "the operator has as many watches open as it serves; ask again",
        };
        ApiError::from(ErrorBody {
            retry_after_seconds: Some(TOO_MANY_RETRY_AFTER_SECONDS),
            ..ErrorBody::new(ErrorCode::TooManyWatches, message)
        })
    })?;
    let _counted = Counted::new(&state.metrics.deploy_watches_open);
    let hash = token_sha256(&req.token);
    let deadline = Instant::now() + Duration::from_secs(u64::from(wait));
    let mut changes = state.service.changes().subscribe(&group);
    let mut changes_open = true;
    let mut fresh_at = Instant::now();
    // A look is due first, after every change of the group's leases, at the
    // grant's expiry, at the fresh-read interval and at the deadline; the
    // ticks in between only check leadership and shutdown, and cost nothing.
    let mut look_due = true;
    let mut expiry = deadline;
    loop {
        if !state.leadership.is_leader() || state.shutdown.is_stopping() {
            return Err(error(
                ErrorCode::NotLeader,
                "this operator replica is no longer the leader (or is stopping); ask again",
            ));
        }
        let now = Instant::now();
        let fresh = now >= fresh_at;
        if look_due || fresh || now >= expiry || now >= deadline {
            if fresh {
                fresh_at = now + FRESH_READ;
            }
            // Seen before the look: a write from here on wakes the wait below.
            changes.borrow_and_update();
            // Authorization as it stands now: a caller removed from
            // deploymentClients loses its watch as it would its renewal.
            let instances: BTreeSet<String> = state.authority.instances(&caller, &group);
            let actor = Actor { client: &client, instances: &instances };
            let grant = state
                .service
                .watch_state(&group, kind, &operation_id, &actor, &hash, fresh)
                .await
                .map_err(|e| service_error(e, &group))?;
            look_due = false;
            if Instant::now() >= deadline {
                let held =
                    WatchResponse { expires_at: grant.expires_at().to_string(), topology_generation: grant.generation };
                return Ok((json_response(StatusCode::OK, &held), grant.instance));
            }
            // A moment after the expiry, so that look finds it lapsed.
            let to_expiry: Duration =
                grant.expires_at().duration_since(k8s_openapi::jiff::Timestamp::now()).try_into().unwrap_or_default();
            expiry = Instant::now() + to_expiry + Duration::from_millis(5);
        }
        let now = Instant::now();
        let sleep = [deadline, expiry, fresh_at]
            .into_iter()
            .map(|t| t.saturating_duration_since(now))
            .fold(TICK, Duration::min);
        tokio::select! {
            seen = changes.changed(), if changes_open => {
                changes_open = seen.is_ok();
                look_due = true;
            }
            () = tokio::time::sleep(sleep) => {}
            () = state.shutdown.stopped() => {}
        }
    }
}
