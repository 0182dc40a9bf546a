//! The `/deploy/v1` routes. Every answer is JSON; every refusal is
//! `{"error": "<code>", "message": "..."}` with the fields its code carries
//! (DESIGN.md table; `docs/deploy-api.openapi.yaml` is the contract).
//!
//! Order of checks: leadership (503 `not_leader`), authentication (401),
//! body size (413) and shape (400 `invalid_request`, naming the field),
//! authorization (403), then the lease decision.

// Handlers return axum's Response as their error: it is what they answer.
#![allow(clippy::result_large_err)]

use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use bloodraven_api::deploy::{
    CreateLeaseRequest, ErrorBody, LeaseGrant, LeaseKind, LeaseView, MAX_BODY_BYTES, ReleaseRequest, RenewRequest,
    RenewResponse, clamp_ttl, valid_operation_id,
};
use serde::de::DeserializeOwned;
use serde_json::json;

use super::DeployState;
use super::auth::{AuthError, Caller, authorized, client_of_group};
use super::lease::machine::{Refusal, UNSTABLE_RETRY_AFTER_SECONDS};
use super::service::ServiceError;

/// Longest accepted token in a PUT/DELETE body.
const MAX_TOKEN_LEN: usize = 512;

/// The deploy API router.
pub fn router(state: DeployState) -> Router {
    Router::new()
        .route("/deploy/v1/groups/{group}", get(get_group))
        .route("/deploy/v1/groups/{group}/leases", post(create_lease))
        .route("/deploy/v1/groups/{group}/leases/{kind}/{operation_id}", put(renew_lease).delete(release_lease))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "not_found", "no such deploy API path") })
        .method_not_allowed_fallback(|| async {
            error(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "method not allowed on this path")
        })
        // Checked in the handlers, so a too-large body gets a JSON 413.
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// A JSON error response.
pub fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    body(
        status,
        &ErrorBody {
            error: code.to_owned(),
            message: message.into(),
            holder: None,
            reason: None,
            topology_generation: None,
            retry_after_seconds: None,
        },
    )
}

fn body<T: serde::Serialize>(status: StatusCode, value: &T) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], serde_json::to_string(value).unwrap_or_default())
        .into_response()
}

/// A finished request, for the log line and metrics.
struct Done<'a> {
    handler: &'static str,
    group: &'a str,
    instance: &'a str,
    operation_id: &'a str,
    started: Instant,
}

impl Done<'_> {
    fn finish(&self, state: &DeployState, response: Response) -> Response {
        let status = response.status().as_u16();
        tracing::info!(
            msg = "deploy api",
            handler = self.handler,
            group = self.group,
            instance = self.instance,
            "operationId" = self.operation_id,
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

fn refusal(r: Refusal) -> Response {
    let mut e = ErrorBody {
        error: String::new(),
        message: String::new(),
        holder: None,
        reason: None,
        topology_generation: None,
        retry_after_seconds: None,
    };
    let status = match r {
        Refusal::Held(h) => {
            e.error = "held".into();
            e.message = format!(
                "the migration mutex is held by operation {} for {} until {}",
                h.operation_id, h.instance, h.expires_at
            );
            e.holder = Some(h);
            StatusCode::CONFLICT
        }
        Refusal::Revoked(t) => {
            e.error = "revoked".into();
            e.message = format!(
                "operation {} was revoked ({}) at topology generation {}: stop, and do not reconnect to the new primary",
                t.operation_id,
                t.reason.as_str(),
                t.generation
            );
            e.reason = Some(t.reason.as_str().to_owned());
            e.topology_generation = Some(t.generation);
            StatusCode::CONFLICT
        }
        Refusal::Unstable { reason } => {
            e.error = "unstable".into();
            e.message =
                format!("the group is not stable ({reason}); this is not a renewal and the deadline did not move");
            e.retry_after_seconds = Some(UNSTABLE_RETRY_AFTER_SECONDS);
            StatusCode::LOCKED
        }
        Refusal::Forbidden(m) => {
            e.error = "forbidden".into();
            e.message = m;
            StatusCode::FORBIDDEN
        }
        Refusal::Expired => {
            e.error = "expired".into();
            e.message = "the operation holds no live lease of this kind: it expired or was released".into();
            StatusCode::NOT_FOUND
        }
        Refusal::TokenMismatch => {
            e.error = "token_mismatch".into();
            e.message = "the token is not this lease's current token".into();
            StatusCode::FORBIDDEN
        }
    };
    body(status, &e)
}

fn service_error(err: ServiceError, group: &str) -> Response {
    match err {
        ServiceError::GroupNotFound => {
            error(StatusCode::NOT_FOUND, "group_not_found", format!("no MysqlFailoverGroup {group}"))
        }
        ServiceError::Refused(r) => refusal(r),
        ServiceError::Contention => {
            error(StatusCode::SERVICE_UNAVAILABLE, "contention", "deploy leases kept changing; retry")
        }
        other => {
            tracing::warn!(group, error = %other, "deploy api failed");
            error(StatusCode::INTERNAL_SERVER_ERROR, "internal", "the operator could not complete the request; retry")
        }
    }
}

/// Leadership and authentication, shared by every handler.
async fn admit(state: &DeployState, headers: &HeaderMap) -> Result<Caller, Response> {
    if !state.leadership.is_leader() {
        return Err(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_leader",
            "this operator replica is not the leader; retry",
        ));
    }
    let header = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    match state.auth.authenticate(header).await {
        Ok(caller) => Ok(caller),
        Err(AuthError::Unauthenticated(m)) => Err(error(StatusCode::UNAUTHORIZED, "unauthenticated", m)),
        Err(AuthError::Review(e)) => {
            tracing::warn!(error = %e, "TokenReview request failed");
            Err(error(StatusCode::SERVICE_UNAVAILABLE, "review_failed", "the token could not be reviewed; retry"))
        }
    }
}

/// Parses a JSON body, naming the offending field on error.
fn parse<T: DeserializeOwned>(bytes: Result<Bytes, BytesRejection>) -> Result<T, Response> {
    let bytes = bytes.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                format!("request bodies are limited to {MAX_BODY_BYTES} bytes"),
            )
        } else {
            error(StatusCode::BAD_REQUEST, "invalid_request", "failed to read the request body")
        }
    })?;
    let de = &mut serde_json::Deserializer::from_slice(&bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        // serde_path_to_error says "." or "?" when no field was reached (a syntax error).
        let field = if path == "." || path == "?" { "body".to_owned() } else { path };
        error(StatusCode::BAD_REQUEST, "invalid_request", format!("invalid {field}: {}", e.inner()))
    })
}

fn invalid(field: &str, why: &str) -> Response {
    error(StatusCode::BAD_REQUEST, "invalid_request", format!("invalid {field}: {why}"))
}

/// A DNS subdomain (group and MysqlDatabase names).
fn valid_name(s: &str) -> bool {
    (1..=253).contains(&s.len())
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && s.as_bytes().first().is_some_and(u8::is_ascii_alphanumeric)
        && s.as_bytes().last().is_some_and(u8::is_ascii_alphanumeric)
}

fn check_path(group: &str, kind: Option<&str>, operation_id: Option<&str>) -> Result<Option<LeaseKind>, Response> {
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

fn check_token(token: &str) -> Result<(), Response> {
    if token.is_empty() || token.len() > MAX_TOKEN_LEN {
        return Err(invalid("token", "must be the lease token"));
    }
    Ok(())
}

async fn get_group(State(state): State<DeployState>, Path(group): Path<String>, headers: HeaderMap) -> Response {
    let done = Done { handler: "get_group", group: &group, instance: "", operation_id: "", started: Instant::now() };
    let response = async {
        let caller = admit(&state, &headers).await?;
        check_path(&group, None, None)?;
        if !client_of_group(&state.databases, &caller, &group) {
            return Err(error(StatusCode::FORBIDDEN, "forbidden", format!(
                "{}/{} is not a deployment client of any MysqlDatabase of group {group}", caller.namespace, caller.service_account
            )));
        }
        let view = state.service.state(&group).await.map_err(|e| service_error(e, &group))?;
        let now = k8s_openapi::jiff::Timestamp::now();
        let status = view.group.status.clone().unwrap_or_default();
        let leases: Vec<LeaseView> = [LeaseKind::Migration, LeaseKind::FailoverHold]
            .into_iter()
            .filter_map(|k| view.slots.get(k).filter(|g| g.live(now)).map(|g| (k, g)))
            .map(|(kind, g)| LeaseView {
                kind,
                operation_id: g.operation_id.clone(),
                instance: g.instance.clone(),
                expires_at: g.expires_at().to_string(),
                topology_generation: g.generation,
                ddl_state: g.ddl_state,
            })
            .collect();
        let operations: Vec<serde_json::Value> = status
            .planned_failover
            .iter()
            .filter(|p| !matches!(p.phase.as_str(), "Completed" | "Failed"))
            .map(|p| json!({"type": "PlannedFailover", "requestId": p.request_id, "targetSite": p.target_site, "phase": p.phase}))
            .collect();
        Ok(body(StatusCode::OK, &json!({
            "group": group,
            "activeSite": status.active_site,
            "topologyGeneration": status.topology_generation,
            "stable": view.facts.unstable_reason.is_none() && view.facts.generation.is_some(),
            "unstableReason": view.facts.unstable_reason,
            "health": status.health,
            "operations": operations,
            "leases": leases,
        })))
    }
    .await;
    done.finish(&state, response.unwrap_or_else(|r| r))
}

async fn create_lease(
    State(state): State<DeployState>,
    Path(group): Path<String>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let mut done =
        Done { handler: "create_lease", group: &group, instance: "", operation_id: "", started: Instant::now() };
    let caller = match admit(&state, &headers).await {
        Ok(c) => c,
        Err(r) => return done.finish(&state, r),
    };
    let req: CreateLeaseRequest = match parse(bytes) {
        Ok(r) => r,
        Err(r) => return done.finish(&state, r),
    };
    done.instance = &req.instance;
    done.operation_id = &req.operation_id;
    let response = async {
        check_path(&group, None, Some(&req.operation_id))?;
        if !valid_name(&req.instance) {
            return Err(invalid("instance", "must be the name of a MysqlDatabase"));
        }
        if !authorized(&state.databases, &caller, &group, &req.instance) {
            return Err(error(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!(
                    "{}/{} is not in spec.deploymentClients of a MysqlDatabase {} of group {group}",
                    caller.namespace, caller.service_account, req.instance
                ),
            ));
        }
        let (granted, token) = state
            .service
            .create(&group, req.kind, &req.operation_id, &req.instance, req.ttl_seconds)
            .await
            .map_err(|e| service_error(e, &group))?;
        let g = &granted.grant;
        let status = if granted.created { StatusCode::CREATED } else { StatusCode::OK };
        Ok(body(
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
    done.finish(&state, response.unwrap_or_else(|r| r))
}

/// PUT and DELETE share admission, parsing and authorization.
async fn lease_call<T: DeserializeOwned>(
    state: &DeployState,
    headers: &HeaderMap,
    group: &str,
    kind: &str,
    operation_id: &str,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<(LeaseKind, T, String), Response> {
    let caller = admit(state, headers).await?;
    let kind = check_path(group, Some(kind), Some(operation_id))?.ok_or_else(|| invalid("kind", "missing"))?;
    let req: T = parse(bytes)?;
    let instance = state.service.instance_of(group, kind, operation_id).await.map_err(|e| service_error(e, group))?;
    // Unknown operations answer 404 only to a caller who is a client of the group at all.
    let allowed = match &instance {
        Some(i) => authorized(&state.databases, &caller, group, i),
        None => client_of_group(&state.databases, &caller, group),
    };
    if !allowed {
        return Err(error(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "{}/{} is not a deployment client of this lease's MysqlDatabase",
                caller.namespace, caller.service_account
            ),
        ));
    }
    Ok((kind, req, instance.unwrap_or_default()))
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
    bytes: Result<Bytes, BytesRejection>,
    handler: &'static str,
    act: F,
) -> Response
where
    T: LeaseBody,
    F: FnOnce(DeployState, String, LeaseKind, String, T) -> Fut,
    Fut: std::future::Future<Output = Result<Response, Response>>,
{
    let started = Instant::now();
    let result = lease_call::<T>(&state, &headers, &group, &kind, &operation_id, bytes).await;
    let instance = result.as_ref().map(|(_, _, i)| i.clone()).unwrap_or_default();
    let response = match result {
        Ok((kind, req, _)) => match check_token(req.token()) {
            Ok(()) => act(state.clone(), group.clone(), kind, operation_id.clone(), req).await,
            Err(r) => Err(r),
        },
        Err(r) => Err(r),
    };
    let done = Done { handler, group: &group, instance: &instance, operation_id: &operation_id, started };
    done.finish(&state, response.unwrap_or_else(|r| r))
}

async fn renew_lease(
    State(state): State<DeployState>,
    Path(path): Path<(String, String, String)>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    lease_handler(state, path, headers, bytes, "renew_lease", |state, group, kind, op, req: RenewRequest| async move {
        let (grant, generation) = state
            .service
            .renew(&group, kind, &op, &req.token, req.ddl_state)
            .await
            .map_err(|e| service_error(e, &group))?;
        let renewed = RenewResponse { expires_at: grant.expires_at().to_string(), topology_generation: generation };
        Ok(body(StatusCode::OK, &renewed))
    })
    .await
}

async fn release_lease(
    State(state): State<DeployState>,
    Path(path): Path<(String, String, String)>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    lease_handler(
        state,
        path,
        headers,
        bytes,
        "release_lease",
        |state, group, kind, op, req: ReleaseRequest| async move {
            state.service.release(&group, kind, &op, &req.token).await.map_err(|e| service_error(e, &group))?;
            Ok(StatusCode::NO_CONTENT.into_response())
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(valid_name("playground") && valid_name("counter-app") && valid_name("a.b"));
        for bad in ["", "-a", "a-", "UPPER", "a_b", &"a".repeat(254)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
