//! The deploy API's refusals: one JSON shape ([`ErrorBody`]), a closed set of
//! codes ([`ErrorCode`]), each with one HTTP status, and the revoke reasons
//! ([`RevokeReason`]: the topology generation changed, or a person revoked
//! by hand). docs/deploy-api.md lists them ("Errors", "Revocation and
//! tombstones").

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Holder;

/// The `error` of every refusal. Each code has one HTTP status (the number
/// that starts its description; `ErrorCode::status` in Rust). Clients branch
/// on the code, never on the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// 400: malformed JSON, an unknown field or kind, a path parameter or
    /// field outside its pattern or bounds; the message names the field.
    InvalidRequest,
    /// 401: no bearer token, or one the TokenReview does not accept for
    /// audience `bloodraven-deploy`.
    Unauthenticated,
    /// 403: the caller is not a deployment client of the MysqlDatabase (or a
    /// failover-hold was asked for without the migration mutex, or the lease
    /// was granted to another client).
    Forbidden,
    /// 403: the token is not the lease's current token (a repeated POST rotated it).
    TokenMismatch,
    /// 404: no MysqlFailoverGroup of that name.
    GroupNotFound,
    /// 404: the operation holds no live lease of that kind (it lapsed or was released).
    Expired,
    /// 404: no such path.
    NotFound,
    /// 405: the path exists, the method does not (`Allow` lists the methods).
    MethodNotAllowed,
    /// 408: the request body did not arrive within 10 s.
    RequestTimeout,
    /// 409: another operation holds the lease (`holder` says who, until when).
    Held,
    /// 409: the operation was revoked (`reason`, `topologyGeneration`); a
    /// tombstone answers for it until the group is deleted.
    Revoked,
    /// 409: a migration lease for an instance whose schema awaits a person's
    /// verification (an earlier operation ended after its DDL started;
    /// `verification` names it). No new migration of that instance runs
    /// until the group's `schema-verified` annotation clears it.
    SchemaVerificationRequired,
    /// 413: the body is larger than 64 KiB.
    PayloadTooLarge,
    /// 423: the group is between confirmed states (`retryAfterSeconds`); not
    /// a renewal: the deadline did not move.
    Unstable,
    /// 429: too many watches are open (on this lease, or on the operator);
    /// ask again after `retryAfterSeconds`.
    TooManyWatches,
    /// 429: the caller's namespace has as many request bodies being read
    /// as the operator reads for one namespace at once; ask again after
    /// `retryAfterSeconds`.
    TooManyRequests,
    /// 500: the operator could not complete the request; retry.
    Internal,
    /// 503: this operator replica is not the leader (or is stopping); ask again.
    NotLeader,
    /// 503: the TokenReview itself failed; retry.
    ReviewFailed,
    /// 503: the group's deploy leases kept changing under the request; retry.
    Contention,
}

impl ErrorCode {
    /// Every code, in status order.
    pub const ALL: [ErrorCode; 20] = [
        ErrorCode::InvalidRequest,
        ErrorCode::Unauthenticated,
        ErrorCode::Forbidden,
        ErrorCode::TokenMismatch,
        ErrorCode::GroupNotFound,
        ErrorCode::Expired,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::RequestTimeout,
        ErrorCode::Held,
        ErrorCode::Revoked,
        ErrorCode::SchemaVerificationRequired,
        ErrorCode::PayloadTooLarge,
        ErrorCode::Unstable,
        ErrorCode::TooManyWatches,
        ErrorCode::TooManyRequests,
        ErrorCode::Internal,
        ErrorCode::NotLeader,
        ErrorCode::ReviewFailed,
        ErrorCode::Contention,
    ];

    /// The code as JSON spells it (`token_mismatch`).
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::Unauthenticated => "unauthenticated",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::TokenMismatch => "token_mismatch",
            ErrorCode::GroupNotFound => "group_not_found",
            ErrorCode::Expired => "expired",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::RequestTimeout => "request_timeout",
            ErrorCode::Held => "held",
            ErrorCode::Revoked => "revoked",
            ErrorCode::SchemaVerificationRequired => "schema_verification_required",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::Unstable => "unstable",
            ErrorCode::TooManyWatches => "too_many_watches",
            ErrorCode::TooManyRequests => "too_many_requests",
            ErrorCode::Internal => "internal",
            ErrorCode::NotLeader => "not_leader",
            ErrorCode::ReviewFailed => "review_failed",
            ErrorCode::Contention => "contention",
        }
    }

    /// The HTTP status the code is always answered with (docs/deploy-api.md, "Errors").
    pub const fn status(self) -> u16 {
        match self {
            ErrorCode::InvalidRequest => 400,
            ErrorCode::Unauthenticated => 401,
            ErrorCode::Forbidden | ErrorCode::TokenMismatch => 403,
            ErrorCode::GroupNotFound | ErrorCode::Expired | ErrorCode::NotFound => 404,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::RequestTimeout => 408,
            ErrorCode::Held | ErrorCode::Revoked | ErrorCode::SchemaVerificationRequired => 409,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::Unstable => 423,
            ErrorCode::TooManyWatches | ErrorCode::TooManyRequests => 429,
            ErrorCode::Internal => 500,
            ErrorCode::NotLeader | ErrorCode::ReviewFailed | ErrorCode::Contention => 503,
        }
    }

    /// Whether authority over the lease is gone for good: stop the heartbeat
    /// and fence (`revoked`, `expired` and `token_mismatch` all mean the same thing).
    pub const fn is_loss_of_authority(self) -> bool {
        matches!(self, ErrorCode::Revoked | ErrorCode::Expired | ErrorCode::TokenMismatch)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a lease was revoked (`409 revoked`, `reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum RevokeReason {
    /// The group's topology generation moved past the grant's: the primary moved.
    TopologyChanged,
    /// A person annotated the group with `bloodraven.shipstream.io/revoke-deployment-leases`.
    OperatorRevoked,
}

impl RevokeReason {
    /// The reason as the API spells it.
    pub const fn as_str(self) -> &'static str {
        match self {
            RevokeReason::TopologyChanged => "TopologyChanged",
            RevokeReason::OperatorRevoked => "OperatorRevoked",
        }
    }

    /// What a revoked client must do, worded for what happened: only a
    /// moved primary is a reason not to reconnect.
    pub const fn advice(self) -> &'static str {
        match self {
            RevokeReason::TopologyChanged => "the primary moved: stop, and do not reconnect to the new primary",
            RevokeReason::OperatorRevoked => {
                "a person revoked every deploy lease of the group (annotation bloodraven.shipstream.io/revoke-deployment-leases) and the primary did not move: stop; a migration whose DDL had started needs its schema checked before a new operation, one whose DDL had not may be retried as a new one"
            }
        }
    }

    /// Parses [`RevokeReason::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "TopologyChanged" => Some(RevokeReason::TopologyChanged),
            "OperatorRevoked" => Some(RevokeReason::OperatorRevoked),
            _ => None,
        }
    }
}

/// Every refusal: `{"error": "<code>", "message": "..."}` plus the fields its
/// code carries: `holder` for `held`; `reason` and `topologyGeneration` for
/// `revoked`; `verification` for `schema_verification_required`;
/// `retryAfterSeconds` for `unstable` and `too_many_watches`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("additionalProperties" = false))]
pub struct ErrorBody {
    /// Stable error code.
    pub error: ErrorCode,
    /// What happened, for a person (never a token; request values escaped and bounded).
    pub message: String,
    /// `held`: who holds the lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<Holder>,
    /// `revoked`: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<RevokeReason>,
    /// `revoked`: the group's topology generation at revocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub topology_generation: Option<i64>,
    /// `unstable`, `too_many_watches`: seconds to wait before asking again (≥ 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub retry_after_seconds: Option<u32>,
    /// `schema_verification_required`: the operation whose schema awaits a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<super::VerificationView>,
}

impl ErrorBody {
    /// A refusal with `code` and `message` and no other field.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorBody {
            error: code,
            message: message.into(),
            holder: None,
            reason: None,
            topology_generation: None,
            retry_after_seconds: None,
            verification: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_spell_as_serde_does_and_keep_their_status() {
        for code in ErrorCode::ALL {
            assert_eq!(serde_json::to_value(code).unwrap(), code.as_str(), "{code:?}");
            let back: ErrorCode = serde_json::from_value(code.as_str().into()).unwrap();
            assert_eq!(back, code);
            assert!((400..600).contains(&code.status()));
        }
        assert_eq!(ErrorCode::TokenMismatch.status(), 403);
        assert_eq!(ErrorCode::Unstable.status(), 423);
        let loss: Vec<_> = ErrorCode::ALL.into_iter().filter(|c| c.is_loss_of_authority()).collect();
        assert_eq!(loss, [ErrorCode::TokenMismatch, ErrorCode::Expired, ErrorCode::Revoked]);
    }

    #[test]
    fn reasons_round_trip() {
        for r in [RevokeReason::TopologyChanged, RevokeReason::OperatorRevoked] {
            assert_eq!(RevokeReason::parse(r.as_str()), Some(r));
            assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
        }
        assert_eq!(RevokeReason::parse("topologychanged"), None);
    }

    #[test]
    fn a_bare_refusal_has_two_fields() {
        let body = ErrorBody::new(ErrorCode::Held, "m");
        assert_eq!(serde_json::to_string(&body).unwrap(), r#"{"error":"held","message":"m"}"#);
        let unknown = serde_json::from_str::<ErrorBody>(r#"{"error":"bogus","message":"m"}"#);
        assert!(unknown.is_err(), "an unknown code is not an ErrorCode");
    }
}
