//! The `/deploy/v1` routes. Every answer is JSON; every refusal is
//! `{"error": "<code>", "message": "..."}` with the fields its code carries
//! (`docs/deploy-api.openapi.yaml` is the contract).
//!
//! Order of checks: leadership (503 `not_leader`), authentication (401),
//! path and body size (413) and shape (400 `invalid_request`, naming the
//! field), authorization (403, decided from watch caches alone, before any
//! other API-server read the request causes), then the lease decision,
//! which also checks that a lease is acted on only by the client it was
//! granted to.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use bloodraven_api::deploy::{
    CreateLeaseRequest, ErrorBody, ErrorCode, GroupView, LeaseGrant, LeaseKind, LeaseView, MAX_BODY_BYTES,
    OperationType, OperationView, ReleaseRequest, RenewRequest, RenewResponse, clamp_ttl, valid_name,
    valid_operation_id, valid_revision, valid_token,
};
use bloodraven_serving::log::{checked, escape};
use serde::de::DeserializeOwned;

use super::auth::{AuthError, Caller, PodIdentity};
use super::{DeployState, limits};
use crate::lease::service::ServiceError;
use bloodraven_core::failover::planned::Phase;
use bloodraven_core::lease::machine::{Actor, Progress, Refusal};
use bloodraven_serving::body::BodyError;

mod refusals;

pub(crate) use refusals::service_error;
use refusals::verification_view;

/// The deploy API router.
pub(crate) fn router(state: DeployState) -> Router {
    Router::new()
        .route("/deploy/v1/groups/{group}", get(get_group))
        .route("/deploy/v1/groups/{group}/leases", post(create_lease))
        .route("/deploy/v1/groups/{group}/leases/{kind}/{operation_id}", put(renew_lease).delete(release_lease))
        .route("/deploy/v1/groups/{group}/leases/{kind}/{operation_id}/watch", post(watch::watch_lease))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

async fn not_found(State(state): State<DeployState>) -> Response {
    let done = Done::new("not_found", Instant::now());
    done.finish(&state, error(ErrorCode::NotFound, "no such deploy API path").into_response())
}

async fn method_not_allowed(State(state): State<DeployState>) -> Response {
    let done = Done::new("method_not_allowed", Instant::now());
    done.finish(&state, error(ErrorCode::MethodNotAllowed, "method not allowed on this path").into_response())
}

/// A refusal of the deploy API, the error of every handler: its body (the
/// code, the message and the fields the code carries), answered as JSON
/// with the code's status (`docs/deploy-api.openapi.yaml`).
#[derive(Debug)]
pub(crate) struct ApiError(Box<ErrorBody>);

impl From<ErrorBody> for ApiError {
    fn from(body: ErrorBody) -> Self {
        ApiError(Box::new(body))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.error.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        json_response(status, &*self.0)
    }
}

/// A refusal with `code` and `message`.
pub(crate) fn error(code: ErrorCode, message: impl Into<String>) -> ApiError {
    ErrorBody::new(code, message).into()
}

fn json_response<T: serde::Serialize>(status: StatusCode, value: &T) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], serde_json::to_string(value).unwrap_or_default())
        .into_response()
}

/// A finished request, for the log line and metrics. Its request values are
/// set through [`Done::group`], [`Done::instance`] and
/// [`Done::operation_id`], which keep a value only once it passed its
/// validation and otherwise a bounded, escaped prefix marked as invalid
/// (`bloodraven_serving::log`): a request cannot put a long line, a line
/// break or a bidirectional override into the log. Metric labels are the
/// handler and the status code only.
struct Done<'a> {
    handler: &'static str,
    group: Cow<'a, str>,
    instance: Cow<'a, str>,
    operation_id: Cow<'a, str>,
    started: Instant,
}

impl<'a> Done<'a> {
    fn new(handler: &'static str, started: Instant) -> Self {
        Done {
            handler,
            group: Cow::Borrowed(""),
            instance: Cow::Borrowed(""),
            operation_id: Cow::Borrowed(""),
            started,
        }
    }

    /// A group name from the path (a DNS subdomain).
    fn group(mut self, group: &'a str) -> Self {
        self.group = checked(group, valid_name(group));
        self
    }

    /// A MysqlDatabase name (a DNS subdomain).
    fn instance(mut self, instance: &'a str) -> Self {
        self.instance = checked(instance, instance.is_empty() || valid_name(instance));
        self
    }

    /// An operationId from the path or the body.
    fn operation_id(mut self, operation_id: &'a str) -> Self {
        self.operation_id = checked(operation_id, operation_id.is_empty() || valid_operation_id(operation_id));
        self
    }

    fn finish(&self, state: &DeployState, response: Response) -> Response {
        let status = response.status().as_u16();
        tracing::info!(
            msg = "deploy api",
            handler = self.handler,
            group = %self.group,
            instance = %self.instance,
            "operationId" = %self.operation_id,
            status
        );
        let status = status.to_string();
        let labels = [self.handler, status.as_str()];
        state.metrics.deploy_requests_total.with_label_values(&labels).inc();
        state
            .metrics
            .deploy_request_duration_seconds
            .with_label_values(&labels)
            .observe(self.started.elapsed().as_secs_f64());
        response
    }
}

/// Leadership and authentication, shared by every handler.
async fn admit(state: &DeployState, headers: &HeaderMap) -> Result<Caller, ApiError> {
    admit_pod(state, headers).await.map(|(caller, _)| caller)
}

/// [`admit`], with the Pod the caller's token is bound to.
async fn admit_pod(state: &DeployState, headers: &HeaderMap) -> Result<(Caller, Option<PodIdentity>), ApiError> {
    if !state.leadership.is_leader() {
        return Err(error(ErrorCode::NotLeader, "this operator replica is not the leader; retry"));
    }
    let header = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    match state.auth.identify(header).await {
        Ok(identity) => Ok(identity),
        Err(AuthError::Unauthenticated(m)) => Err(error(ErrorCode::Unauthenticated, m)),
        Err(AuthError::Review(e)) => {
            tracing::warn!(error = %e, "TokenReview request failed");
            Err(error(ErrorCode::ReviewFailed, "the token could not be reviewed; retry"))
        }
    }
}

/// Reads the body — only after the caller is authenticated and authorized
/// for the group, and only while its namespace has fewer than
/// [`super::BODY_READS_PER_NAMESPACE`] being read — within
/// [`limits::BODY_TIMEOUT`] and [`MAX_BODY_BYTES`], and parses it as JSON,
/// naming the offending field on error.
async fn parse<T: DeserializeOwned>(
    state: &DeployState,
    caller: &Caller,
    headers: &HeaderMap,
    body: Body,
) -> Result<T, ApiError> {
    let Some(_reading) = state.body_reads.take(&caller.namespace) else {
        return Err(ApiError::from(ErrorBody {
            retry_after_seconds: Some(1),
            ..ErrorBody::new(
                ErrorCode::TooManyRequests,
                format!(
                    "{} request bodies of namespace {} are being read already; ask again",
                    super::BODY_READS_PER_NAMESPACE,
                    caller.namespace
                ),
            )
        }));
    };
    let too_large =
        || error(ErrorCode::PayloadTooLarge, format!("request bodies are limited to {MAX_BODY_BYTES} bytes"));
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    // Over the bound, the rest is read and discarded (within bounds) before
    // the 413, so a client that writes its whole body first reads it.
    let bytes = match bloodraven_serving::body::read(body, declared, MAX_BODY_BYTES, limits::BODY_TIMEOUT).await {
        Err(BodyError::Timeout) => {
            return Err(error(ErrorCode::RequestTimeout, "the request body did not arrive in time"));
        }
        Err(BodyError::TooLarge) => return Err(too_large()),
        Err(BodyError::Failed) => return Err(error(ErrorCode::InvalidRequest, "failed to read the request body")),
        Ok(bytes) => bytes,
    };
    let de = &mut serde_json::Deserializer::from_slice(&bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        // serde_path_to_error says "." or "?" when no field was reached (a syntax error).
        // The path can hold a key of the body and the parser's message a
        // value of it (`unknown variant ...`): both escaped and bounded.
        let field = if path == "." || path == "?" { "body".to_owned() } else { escape(&path, 64) };
        error(ErrorCode::InvalidRequest, format!("invalid {field}: {}", escape(&e.inner().to_string(), 160)))
    })
}

fn invalid(field: &str, why: &str) -> ApiError {
    error(ErrorCode::InvalidRequest, format!("invalid {field}: {why}"))
}

fn check_path(group: &str, kind: Option<&str>, operation_id: Option<&str>) -> Result<Option<LeaseKind>, ApiError> {
    if !valid_name(group) {
        return Err(invalid("group", "not a MysqlFailoverGroup name"));
    }
    if let Some(op) = operation_id
        && !valid_operation_id(op)
    {
        return Err(invalid("operationId", "must be 1–128 characters of [A-Za-z0-9._:-]"));
    }
    kind.map(|k| LeaseKind::parse(k).ok_or_else(|| invalid("kind", "must be migration or failover-hold"))).transpose()
}

fn check_token(token: &str) -> Result<(), ApiError> {
    if !valid_token(token) {
        return Err(invalid("token", "must be the lease token"));
    }
    Ok(())
}

async fn get_group(State(state): State<DeployState>, Path(group): Path<String>, headers: HeaderMap) -> Response {
    let done = Done::new("get_group", Instant::now()).group(&group);
    let response: Result<Response, ApiError> = async {
        let caller = admit(&state, &headers).await?;
        check_path(&group, None, None)?;
        authorize_group(&state, &caller, &group)?;
        let view = state.service.state(&group).await.map_err(|e| service_error(e, &group))?;
        let now = k8s_openapi::jiff::Timestamp::now();
        let status = view.group.status.clone().unwrap_or_default();
        let leases: Vec<LeaseView> = [LeaseKind::Migration, LeaseKind::FailoverHold]
            .into_iter()
            .filter_map(|k| view.slots.live(k, now).map(|g| (k, g)))
            .map(|(kind, g)| LeaseView {
                kind,
                operation_id: g.operation_id.clone(),
                instance: g.instance.clone(),
                expires_at: g.expires_at().to_string(),
                topology_generation: g.generation,
                ddl_state: g.ddl_state,
                revoked: g.revoked,
            })
            .collect();
        // A phase this operator does not know (written by hand) is not an
        // operation it runs: the engine reports it and leaves it alone.
        let operations = operations_in_flight(&status);
        let unstable_reason = view
            .facts
            .unstable_reason
            .clone()
            .or_else(|| view.facts.generation.is_none().then(|| "BootstrapPending".to_owned()));
        let view = GroupView {
            group: group.clone(),
            active_site: status.active_site,
            topology_generation: status.topology_generation,
            stable: unstable_reason.is_none(),
            unstable_reason,
            health: status.health,
            operations,
            leases,
            verifications: view.verifications.iter().map(verification_view).collect(),
        };
        Ok(json_response(StatusCode::OK, &view))
    }
    .await;
    done.finish(&state, response.unwrap_or_else(IntoResponse::into_response))
}

async fn create_lease(
    State(state): State<DeployState>,
    Path(group): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let done = Done::new("create_lease", Instant::now()).group(&group);
    let (caller, pod) = match admit_pod(&state, &headers).await {
        Ok(c) => c,
        Err(r) => return done.finish(&state, r.into_response()),
    };
    // Authorized before the body is read: only a deployment client of the
    // group may keep a connection busy for the body's deadline.
    let instances = match check_path(&group, None, None).and_then(|_| authorize_group(&state, &caller, &group)) {
        Ok(i) => i,
        Err(r) => return done.finish(&state, r.into_response()),
    };
    let req: CreateLeaseRequest = match parse(&state, &caller, &headers, body).await {
        Ok(r) => r,
        Err(r) => return done.finish(&state, r.into_response()),
    };
    let done = done.instance(&req.instance).operation_id(&req.operation_id);
    let response: Result<Response, ApiError> = async {
        check_path(&group, None, Some(&req.operation_id))?;
        if !valid_name(&req.instance) {
            return Err(invalid("instance", "must be the name of a MysqlDatabase"));
        }
        if !instances.contains(&req.instance) {
            // Only the caller's own instances are named: whether another
            // tenant's MysqlDatabase of that name exists is not the caller's to learn.
            return Err(error(ErrorCode::Forbidden,
                format!(
                    "no instance {} is attached to group {group} for {}: no Ready MysqlDatabase of that name lists it in spec.deploymentClients; its instances in this group are {}",
                    req.instance, caller.id(), instances.iter().map(String::as_str).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        let created =
            state.service.create(&group, req.kind, &req.operation_id, &req.instance, req.ttl_seconds, &caller.id()).await;
        let what = match req.kind {
            LeaseKind::Migration => "the migration mutex",
            LeaseKind::FailoverHold => "the failover-hold",
        };
        // A wait a Job's Pod is told (`409 held`, `423 unstable`) is said
        // where `kubectl describe job` shows it, with its cause.
        match (&created, &pod, &state.waiting) {
            (Err(ServiceError::Refused(Refusal::Held { holder, .. })), Some(pod), Some(waiting)) => {
                let message = format!(
                    "operation {} asks for {what} of group {group} for instance {}; it is held by operation {} for {} until {}",
                    req.operation_id, req.instance, holder.operation_id, holder.instance, holder.expires_at
                );
                waiting.note(&caller.namespace, pod, &holder.operation_id, &message);
            }
            (Err(ServiceError::Refused(Refusal::Unstable { reason })), Some(pod), Some(waiting)) => {
                let message = format!(
                    "operation {} asks for {what} of group {group} for instance {}; the group is not stable ({reason}), and leases are granted once it is (kubectl get mfg {group} -o wide shows why)",
                    req.operation_id, req.instance
                );
                waiting.note(&caller.namespace, pod, &format!("unstable {reason}"), &message);
            }
            _ => {}
        }
        let (granted, token) = created.map_err(|e| service_error(e, &group))?;
        let g = &granted.grant;
        let status = if granted.created { StatusCode::CREATED } else { StatusCode::OK };
        Ok(json_response(
            status,
            &LeaseGrant {
                kind: req.kind,
                operation_id: g.operation_id.clone(),
                instance: g.instance.clone(),
                token,
                expires_at: g.expires_at().to_string(),
                ttl_seconds: clamp_ttl(g.ttl_seconds),
                topology_generation: g.generation,
            },
        ))
    }
    .await;
    done.finish(&state, response.unwrap_or_else(IntoResponse::into_response))
}

/// The instances of `group` the caller may act for, from the watch caches
/// alone (no API-server read): 403 when there are none. A group this
/// operator does not know answers 404 `group_not_found` only to a caller
/// that a MysqlDatabase naming that group lists (its own MysqlDatabase's
/// status says as much); anyone else learns nothing from a 403.
fn authorize_group(state: &DeployState, caller: &Caller, group: &str) -> Result<BTreeSet<String>, ApiError> {
    let instances = state.authority.instances(caller, group);
    if !instances.is_empty() {
        return Ok(instances);
    }
    if state.authority.group(group).is_none() && state.authority.names_group(caller, group) {
        return Err(error(ErrorCode::GroupNotFound, format!("no MysqlFailoverGroup {group}")));
    }
    Err(error(
        ErrorCode::Forbidden,
        format!("{} is not a deployment client of any MysqlDatabase with authority in group {group}", caller.id()),
    ))
}

/// PUT and DELETE share admission, parsing and authorization.
async fn lease_call<T: DeserializeOwned>(
    state: &DeployState,
    headers: &HeaderMap,
    group: &str,
    kind: &str,
    operation_id: &str,
    body: Body,
) -> Result<(LeaseKind, T, Caller, BTreeSet<String>), ApiError> {
    let caller = admit(state, headers).await?;
    let kind = check_path(group, Some(kind), Some(operation_id))?.ok_or_else(|| invalid("kind", "missing"))?;
    // Authorized before the body is read: only a deployment client of the
    // group may keep a connection busy for the body's deadline.
    let instances = authorize_group(state, &caller, group)?;
    let req: T = parse(state, &caller, headers, body).await?;
    Ok((kind, req, caller, instances))
}

/// A PUT or DELETE body: both carry the lease token.
trait LeaseBody: DeserializeOwned {
    fn token(&self) -> &str;
}

impl LeaseBody for RenewRequest {
    fn token(&self) -> &str {
        &self.token
    }
}

impl LeaseBody for ReleaseRequest {
    fn token(&self) -> &str {
        &self.token
    }
}

/// PUT and DELETE: admission, parsing, authorization and the token check,
/// then `act`, then the log line and metrics.
async fn lease_handler<T, F, Fut>(
    state: DeployState,
    (group, kind, operation_id): (String, String, String),
    headers: HeaderMap,
    body: Body,
    handler: &'static str,
    act: F,
) -> Response
where
    T: LeaseBody,
    F: FnOnce(DeployState, String, LeaseKind, String, T, Caller, BTreeSet<String>) -> Fut,
    Fut: std::future::Future<Output = Result<(Response, String), ApiError>>,
{
    let started = Instant::now();
    let result = lease_call::<T>(&state, &headers, &group, &kind, &operation_id, body).await;
    let response = match result {
        Ok((kind, req, caller, instances)) => match check_token(req.token()) {
            Ok(()) => act(state.clone(), group.clone(), kind, operation_id.clone(), req, caller, instances).await,
            Err(r) => Err(r),
        },
        Err(r) => Err(r),
    };
    let (response, instance) = match response {
        Ok((r, instance)) => (r, instance),
        Err(r) => (r.into_response(), String::new()),
    };
    let done = Done::new(handler, started).group(&group).instance(&instance).operation_id(&operation_id);
    done.finish(&state, response)
}

async fn renew_lease(
    State(state): State<DeployState>,
    Path(path): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // Boxed: the shared state, authentication and the lease service's
    // call make this future large.
    Box::pin(lease_handler(
        state,
        path,
        headers,
        body,
        "renew_lease",
        |state, group, kind, op, req: RenewRequest, caller, instances| async move {
            if req.revision.as_deref().is_some_and(|r| !valid_revision(r)) {
                return Err(invalid("revision", "must be 1–64 characters of [A-Za-z0-9._:-]"));
            }
            let client = caller.id();
            let actor = Actor { client: &client, instances: &instances };
            let report = Progress { ddl_state: req.ddl_state, revision: req.revision };
            let grant = state
                .service
                .renew(&group, kind, &op, &actor, &req.token, &report)
                .await
                .map_err(|e| service_error(e, &group))?;
            let renewed =
                RenewResponse { expires_at: grant.expires_at().to_string(), topology_generation: grant.generation };
            Ok((json_response(StatusCode::OK, &renewed), grant.instance))
        },
    ))
    .await
}

async fn release_lease(
    State(state): State<DeployState>,
    Path(path): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // Boxed: the shared state, authentication and the lease service's
    // call make this future large.
    Box::pin(lease_handler(
        state,
        path,
        headers,
        body,
        "release_lease",
        |state, group, kind, op, req: ReleaseRequest, caller, instances| async move {
            let client = caller.id();
            let actor = Actor { client: &client, instances: &instances };
            let released = state
                .service
                .release(&group, kind, &op, &actor, &req.token)
                .await
                .map_err(|e| service_error(e, &group))?;
            Ok((StatusCode::NO_CONTENT.into_response(), released.instance))
        },
    ))
    .await
}

mod watch;

#[cfg(test)]
mod authz_tests;

#[cfg(test)]
mod tests;

/// The operations a group's status shows in flight, each with its phase;
/// a phase this operator does not know (written by hand) is not an
/// operation it runs: the engine reports it and leaves it alone.
fn operations_in_flight(status: &bloodraven_api::v1alpha1::MysqlFailoverGroupStatus) -> Vec<OperationView> {
    use bloodraven_api::deploy::OperationPhase;
    use bloodraven_api::v1alpha1::{OrderedUpdatePhase, RestorePhase};
    let planned = status.planned_failover.iter().filter_map(|p| {
        let phase = Phase::parse(&p.phase).filter(|ph| !ph.is_final())?;
        Some(OperationView {
            type_: OperationType::PlannedFailover,
            request_id: p.request_id.clone(),
            target_site: p.target_site.clone(),
            phase: OperationPhase::PlannedFailover(phase),
        })
    });
    let update = status.ordered_update.iter().filter_map(|p| {
        let phase = OrderedUpdatePhase::parse(&p.phase).filter(|ph| !ph.is_final())?;
        Some(OperationView {
            type_: OperationType::OrderedUpdate,
            request_id: p.request_id.clone(),
            // The site its current (or next) switchover promotes: the
            // standby, then, in a switch-back, the first primary.
            target_site: if matches!(
                phase,
                OrderedUpdatePhase::SwitchBackDraining
                    | OrderedUpdatePhase::SwitchBackPromoting
                    | OrderedUpdatePhase::SwitchBackRepointing
            ) {
                p.source_site.clone().unwrap_or_default()
            } else {
                p.standby_site.clone().unwrap_or_default()
            },
            phase: OperationPhase::OrderedUpdate(phase),
        })
    });
    let restore = status.restore_in_place.iter().filter_map(|p| {
        let phase = RestorePhase::parse(&p.phase).filter(|ph| !ph.is_final())?;
        Some(OperationView {
            type_: OperationType::RestoreInPlace,
            request_id: p.request_id.clone(),
            target_site: p.site.clone().unwrap_or_default(),
            phase: OperationPhase::RestoreInPlace(phase),
        })
    });
    planned.chain(update).chain(restore).collect()
}
