//! How a refusal of the lease domain, or a failure of the lease service,
//! becomes the API's error answer: its code, its message and the fields
//! the code carries.

use bloodraven_api::deploy::{ErrorBody, ErrorCode, LeaseKind, UNSTABLE_RETRY_AFTER_SECONDS, VerificationView};
use bloodraven_core::lease::machine::Refusal;

use super::{ApiError, error};
use crate::lease::service::ServiceError;

/// The answer to a refusal of the lease domain.
pub(crate) fn refusal(r: Refusal) -> ApiError {
    let body = match r {
        Refusal::Held { kind, holder: h } => {
            let what = match kind {
                LeaseKind::Migration => "the migration mutex",
                LeaseKind::FailoverHold => "the failover-hold",
            };
            let message =
                format!("{what} is held by operation {} for {} until {}", h.operation_id, h.instance, h.expires_at);
            ErrorBody { holder: Some(h), ..ErrorBody::new(ErrorCode::Held, message) }
        }
        Refusal::Revoked(t) => {
            let why = t.reason.advice();
            let message = format!(
                "operation {} was revoked ({}) at topology generation {}; {why}",
                t.operation_id,
                t.reason.as_str(),
                t.generation
            );
            ErrorBody {
                reason: Some(t.reason),
                topology_generation: Some(t.generation),
                ..ErrorBody::new(ErrorCode::Revoked, message)
            }
        }
        Refusal::Unstable { reason } => {
            let message =
                format!("the group is not stable ({reason}); this is not a renewal and the deadline did not move");
            ErrorBody {
                retry_after_seconds: Some(UNSTABLE_RETRY_AFTER_SECONDS),
                ..ErrorBody::new(ErrorCode::Unstable, message)
            }
        }
        Refusal::Forbidden(m) => ErrorBody::new(ErrorCode::Forbidden, m),
        Refusal::Expired(a) => {
            let kind = a.kind.as_str();
            let message = match (a.lapsed_at, a.mutex_ended) {
                (_, true) => format!(
                    "the failover-hold of operation {} ended with its migration lease (released, lapsed or taken)",
                    a.operation_id
                ),
                (Some(at), false) => format!(
                    "the {kind} lease of operation {} expired at {at}: no renewal came within its TTL",
                    a.operation_id
                ),
                (None, false) => format!(
                    "operation {} holds no {kind} lease: none was granted to it, or it was released, or it lapsed and another operation took it",
                    a.operation_id
                ),
            };
            ErrorBody::new(ErrorCode::Expired, message)
        }
        Refusal::TokenMismatch => {
            ErrorBody::new(ErrorCode::TokenMismatch, "the token is not this lease's current token")
        }
        Refusal::VerificationRequired(v) => {
            // The advice first: clients keep a bounded prefix of messages.
            let message = format!(
                "no new migration of instance {} runs until a person checks its schema and annotates the group bloodraven.shipstream.io/schema-verified={} (or all): operation {}{} ended ({}) at topology generation {} after its DDL started",
                v.instance,
                v.operation_id,
                v.operation_id,
                v.revision.as_deref().map(|r| format!(" (revision {r})")).unwrap_or_default(),
                v.ending.as_str(),
                v.generation,
            );
            ErrorBody {
                verification: Some(verification_view(&v)),
                ..ErrorBody::new(ErrorCode::SchemaVerificationRequired, message)
            }
        }
    };
    body.into()
}

/// A verification record as the API shows it.
pub(super) fn verification_view(v: &bloodraven_core::lease::machine::Verification) -> VerificationView {
    VerificationView {
        operation_id: v.operation_id.clone(),
        instance: v.instance.clone(),
        revision: v.revision.clone(),
        ending: v.ending.as_str().to_owned(),
        topology_generation: v.generation,
    }
}

pub(crate) fn service_error(err: ServiceError, group: &str) -> ApiError {
    match err {
        ServiceError::GroupNotFound => error(ErrorCode::GroupNotFound, format!("no MysqlFailoverGroup {group}")),
        ServiceError::Refused(r) => refusal(r),
        ServiceError::Contention => error(ErrorCode::Contention, "deploy leases kept changing; retry"),
        other => {
            tracing::warn!(group, error = %other, "deploy api failed");
            error(ErrorCode::Internal, "the operator could not complete the request; retry")
        }
    }
}
