//! Wire types of the deploy API (`/deploy/v1`, TLS only). The JSON field
//! names are the contract of `shared/seeds/000_…` and `docs/deploy-api.openapi.yaml`;
//! Rust names follow them in snake_case.

use serde::{Deserialize, Serialize};

/// Smallest lease TTL in seconds; shorter requests are clamped up (lease seed).
pub const MIN_TTL_SECONDS: u32 = 5;
/// Largest lease TTL in seconds; longer requests are clamped down (lease seed).
pub const MAX_TTL_SECONDS: u32 = 120;
/// Largest request body, in bytes; larger bodies get 413.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Longest `operationId`, in characters.
pub const MAX_OPERATION_ID_LEN: usize = 128;

/// The two kinds of deploy lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum LeaseKind {
    /// The group-wide migration mutex: one holder per group.
    #[serde(rename = "migration")]
    Migration,
    /// Defers planned disruption; granted only to the current migration holder.
    #[serde(rename = "failover-hold")]
    FailoverHold,
}

impl LeaseKind {
    /// The kind as it appears in JSON and URLs.
    pub const fn as_str(self) -> &'static str {
        match self {
            LeaseKind::Migration => "migration",
            LeaseKind::FailoverHold => "failover-hold",
        }
    }

    /// Parses the URL/JSON spelling.
    pub fn parse(s: &str) -> Option<LeaseKind> {
        match s {
            "migration" => Some(LeaseKind::Migration),
            "failover-hold" => Some(LeaseKind::FailoverHold),
            _ => None,
        }
    }
}

/// Where the migration stands relative to its first DDL statement
/// (Bloodraven's extension; recorded on the Lease).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DdlState {
    /// No DDL has been sent yet: a fenced abort is safe.
    Before,
    /// DDL was sent: losing authority now needs a person to verify the schema.
    Started,
    /// Every DDL of the migration committed.
    Completed,
    /// The migration failed.
    Failed,
}

impl DdlState {
    /// The JSON spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            DdlState::Before => "before",
            DdlState::Started => "started",
            DdlState::Completed => "completed",
            DdlState::Failed => "failed",
        }
    }
}

/// `POST /deploy/v1/groups/{group}/leases` body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateLeaseRequest {
    /// `migration` or `failover-hold`.
    pub kind: LeaseKind,
    /// Caller-chosen id of the deploy operation: 1–128 characters of `[A-Za-z0-9._:-]`.
    pub operation_id: String,
    /// Name of the MysqlDatabase the operation migrates (not the SQL schema).
    pub instance: String,
    /// Requested TTL in seconds, clamped to [5, 120].
    pub ttl_seconds: u32,
}

/// 201/200 answer to a POST: the grant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseGrant {
    /// The lease kind.
    pub kind: LeaseKind,
    /// The operation holding it.
    pub operation_id: String,
    /// The MysqlDatabase name.
    pub instance: String,
    /// Bearer secret for renewals and release. Shown once; only its SHA-256 is stored.
    pub token: String,
    /// RFC 3339 expiry, judged on the operator's clock.
    pub expires_at: String,
    /// The TTL granted, after clamping.
    pub ttl_seconds: u32,
    /// The topology generation the lease was granted under.
    pub topology_generation: i64,
}

/// `PUT …/leases/{kind}/{operationId}` body (renewal).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RenewRequest {
    /// The lease token.
    pub token: String,
    /// Where the migration stands (optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ddl_state: Option<DdlState>,
}

/// 200 answer to a renewal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RenewResponse {
    /// New RFC 3339 expiry.
    pub expires_at: String,
    /// Current topology generation: compare with the grant's every time.
    pub topology_generation: i64,
}

/// `DELETE …/leases/{kind}/{operationId}` body (release).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReleaseRequest {
    /// The lease token.
    pub token: String,
}

/// The holder named in a `409 held`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Holder {
    /// The holding operation.
    pub operation_id: String,
    /// Its MysqlDatabase name.
    pub instance: String,
    /// RFC 3339 expiry of its lease.
    pub expires_at: String,
}

/// One live lease in `GET /deploy/v1/groups/{group}` (never the token).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseView {
    /// The lease kind.
    pub kind: LeaseKind,
    /// The holding operation.
    pub operation_id: String,
    /// Its MysqlDatabase name.
    pub instance: String,
    /// RFC 3339 expiry.
    pub expires_at: String,
    /// Generation of the grant.
    pub topology_generation: i64,
    /// Last reported DDL state, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ddl_state: Option<DdlState>,
}

/// Every refusal: `{"error": "<code>", "message": "..."}` plus the fields a
/// code carries (`holder` for `held`; `reason` and `topologyGeneration` for
/// `revoked`; `retryAfterSeconds` for `unstable`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    /// Stable error code (`invalid_request`, `unauthenticated`, `forbidden`,
    /// `group_not_found`, `held`, `revoked`, `expired`, `token_mismatch`,
    /// `unstable`, `not_leader`, `payload_too_large`, `not_found`, `internal`).
    pub error: String,
    /// What happened, for a person.
    pub message: String,
    /// `held`: who holds the mutex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<Holder>,
    /// `revoked`: `TopologyChanged` or `OperatorRevoked`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `revoked`: the generation at revocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_generation: Option<i64>,
    /// `unstable`: when to ask again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u32>,
}

/// Whether `id` is a valid `operationId`: 1–128 characters of `[A-Za-z0-9._:-]`.
pub fn valid_operation_id(id: &str) -> bool {
    (1..=MAX_OPERATION_ID_LEN).contains(&id.len())
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Clamps a requested TTL to [5, 120] seconds.
pub fn clamp_ttl(requested: u32) -> u32 {
    requested.clamp(MIN_TTL_SECONDS, MAX_TTL_SECONDS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_ids() {
        for ok in ["a", "a1c3f0e2-77", "deploy:42.retry_1", &"x".repeat(128)] {
            assert!(valid_operation_id(ok), "{ok}");
        }
        for bad in ["", "has space", "slash/no", "ünï", &"x".repeat(129), "semi;colon"] {
            assert!(!valid_operation_id(bad), "{bad}");
        }
    }

    #[test]
    fn ttl_is_clamped() {
        assert_eq!(clamp_ttl(0), 5);
        assert_eq!(clamp_ttl(30), 30);
        assert_eq!(clamp_ttl(10_000), 120);
    }

    #[test]
    fn kinds_and_unknown_fields() {
        let req: CreateLeaseRequest =
            serde_json::from_str(r#"{"kind":"failover-hold","operationId":"x","instance":"i","ttlSeconds":30}"#)
                .unwrap();
        assert_eq!(req.kind, LeaseKind::FailoverHold);
        assert!(
            serde_json::from_str::<CreateLeaseRequest>(
                r#"{"kind":"other","operationId":"x","instance":"i","ttlSeconds":30}"#
            )
            .is_err()
        );
        assert!(serde_json::from_str::<RenewRequest>(r#"{"token":"t","extra":1}"#).is_err());
        let err = ErrorBody {
            error: "held".into(),
            message: "m".into(),
            holder: None,
            reason: None,
            topology_generation: None,
            retry_after_seconds: None,
        };
        assert_eq!(serde_json::to_string(&err).unwrap(), r#"{"error":"held","message":"m"}"#);
    }
}
