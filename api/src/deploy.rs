//! Wire types of the deploy API (`/deploy/v1`, TLS only): the request and
//! answer bodies, the refusals ([`ErrorCode`], [`ErrorBody`],
//! [`RevokeReason`]), the group view ([`GroupView`]), and the OpenAPI
//! document generated from them ([`openapi::document`], written to
//! `docs/deploy-api.openapi.yaml` by `cargo xtask openapi`, which `--check`s
//! it in CI). The server (operator) and every client (sidecar, tests) use
//! these types; the JSON field names are the contract (docs/deploy-api.md),
//! Rust names follow them in snake_case.
//!
//! Request types refuse unknown fields (the server answers `400
//! invalid_request` naming the field); answer types are read tolerantly by
//! clients, while the contract says exactly which fields the server sends.
//!
//! The group view embeds the custom resource's status types (`SiteHealth`),
//! and the OpenAPI document describes it, so both come with the `crd`
//! feature; the lease calls the sidecar makes need neither.

mod error;
#[cfg(feature = "crd")]
pub mod openapi;
mod schema;
mod view;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use error::{ErrorBody, ErrorCode, RevokeReason};
#[cfg(feature = "crd")]
pub use view::GroupView;
pub use view::{LeaseView, OperationPhase, OperationType, OperationView, VerificationView};

/// Smallest lease TTL in seconds; shorter requests are clamped up.
pub const MIN_TTL_SECONDS: u32 = 5;
/// Largest lease TTL in seconds; longer requests are clamped down.
pub const MAX_TTL_SECONDS: u32 = 120;
/// Largest request body, in bytes; larger bodies get `413 payload_too_large`.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Longest `operationId`, in characters.
pub const MAX_OPERATION_ID_LEN: usize = 128;
/// Longest lease token a PUT, DELETE or watch body may carry, in characters
/// (the operator hands out 64; the bound keeps a hostile body from costing more).
pub const MAX_TOKEN_CHARS: usize = 512;
/// Longest revision a renewal may name.
pub const MAX_REVISION_LEN: usize = 64;
/// Longest MysqlFailoverGroup or MysqlDatabase name (a DNS subdomain, RFC 1123).
pub const MAX_NAME_LEN: usize = 253;
/// Longest wait a watch may ask for, in seconds (see [`WatchRequest`]).
pub const MAX_WATCH_SECONDS: u32 = 60;
/// The wait of a watch that names none, in seconds.
pub const DEFAULT_WATCH_SECONDS: u32 = 30;
/// Seconds a client is told to wait after `423 unstable`.
pub const UNSTABLE_RETRY_AFTER_SECONDS: u32 = 5;

/// The two kinds of deploy lease, taken in one order: migration, then failover-hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub enum LeaseKind {
    /// The group-wide migration mutex: one holder per group.
    #[serde(rename = "migration")]
    Migration,
    /// Defers planned disruption; granted only to the current migration
    /// holder, with the same operationId and instance.
    #[serde(rename = "failover-hold")]
    FailoverHold,
}

impl LeaseKind {
    /// Both kinds, in the order a client takes them.
    pub const ALL: [LeaseKind; 2] = [LeaseKind::Migration, LeaseKind::FailoverHold];

    /// The kind as it appears in JSON and URLs.
    pub const fn as_str(self) -> &'static str {
        match self {
            LeaseKind::Migration => "migration",
            LeaseKind::FailoverHold => "failover-hold",
        }
    }

    /// Parses the URL/JSON spelling.
    pub fn parse(s: &str) -> Option<LeaseKind> {
        LeaseKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// Where the migration stands relative to its first DDL statement
/// (Bloodraven's extension; recorded on the Lease). A revocation after
/// `started` raises `SchemaVerificationRequired` on the group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
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

    /// Parses the JSON spelling.
    pub fn parse(s: &str) -> Option<DdlState> {
        [DdlState::Before, DdlState::Started, DdlState::Completed, DdlState::Failed]
            .into_iter()
            .find(|d| d.as_str() == s)
    }
}

/// `POST /deploy/v1/groups/{group}/leases` body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateLeaseRequest {
    /// `migration` first, then `failover-hold`.
    pub kind: LeaseKind,
    /// Caller-chosen id of the deploy operation: 1–128 characters of
    /// `[A-Za-z0-9._:-]`, not `.` or `..`.
    #[schemars(with = "schema::OperationId")]
    pub operation_id: String,
    /// Name of the MysqlDatabase the operation migrates (not the SQL schema).
    #[schemars(with = "schema::ResourceName")]
    pub instance: String,
    /// Requested TTL in seconds, clamped to [5, 120].
    #[serde(deserialize_with = "whole::u32")]
    #[schemars(range(min = 0, max = 4_294_967_295_u32))]
    pub ttl_seconds: u32,
}

/// 201/200 answer to a POST: the grant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("additionalProperties" = false))]
pub struct LeaseGrant {
    /// The lease kind.
    pub kind: LeaseKind,
    /// The operation holding it.
    #[schemars(with = "schema::OperationId")]
    pub operation_id: String,
    /// The MysqlDatabase name.
    #[schemars(with = "schema::ResourceName")]
    pub instance: String,
    /// Bearer secret for renewals, release and watches: 64 hex characters.
    /// Shown once; only its SHA-256 is stored.
    #[schemars(regex(pattern = r"^[0-9a-f]{64}$"))]
    pub token: String,
    /// Expiry, judged on the operator's clock.
    #[schemars(with = "schema::Timestamp")]
    pub expires_at: String,
    /// The TTL granted, after clamping to [5, 120].
    #[schemars(range(min = 5, max = 120))]
    pub ttl_seconds: u32,
    /// The topology generation the lease was granted under.
    #[schemars(range(min = 1))]
    pub topology_generation: i64,
}

/// `PUT …/leases/{kind}/{operationId}` body (renewal).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RenewRequest {
    /// The lease token.
    #[schemars(with = "schema::LeaseToken")]
    pub token: String,
    /// Where the migration stands (optional; recorded on the Lease).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ddl_state: Option<DdlState>,
    /// The revision the migration is applying (optional; recorded on the
    /// Lease, and in the verification record if the operation ends inside
    /// its DDL): 1–64 characters of `[A-Za-z0-9._:-]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<schema::Revision>")]
    pub revision: Option<String>,
}

/// 200 answer to a renewal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("additionalProperties" = false))]
pub struct RenewResponse {
    /// New expiry.
    #[schemars(with = "schema::Timestamp")]
    pub expires_at: String,
    /// Current topology generation: compare it with the grant's every time.
    #[schemars(range(min = 1))]
    pub topology_generation: i64,
}

/// `DELETE …/leases/{kind}/{operationId}` body (release).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReleaseRequest {
    /// The lease token.
    #[schemars(with = "schema::LeaseToken")]
    pub token: String,
}

/// `POST …/leases/{kind}/{operationId}/watch` body: wait until the lease is
/// no longer the caller's (revoked, lapsed or released, token rotated), or
/// `waitSeconds` passed. The token travels in the body, never in the URL.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WatchRequest {
    /// The lease token.
    #[schemars(with = "schema::LeaseToken")]
    pub token: String,
    /// Longest wait in seconds, 0–60 (default 30; 0 answers at once).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "whole::option_u32")]
    #[schemars(range(max = 60))]
    pub wait_seconds: Option<u32>,
}

/// 200 answer to a watch whose wait ran out: the lease is still the
/// caller's, as last renewed. Not a renewal: the deadline did not move.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("additionalProperties" = false))]
pub struct WatchResponse {
    /// Expiry as last renewed.
    #[schemars(with = "schema::Timestamp")]
    pub expires_at: String,
    /// The generation the lease was granted under (still the group's).
    #[schemars(range(min = 1))]
    pub topology_generation: i64,
}

/// The holder named in a `409 held`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("additionalProperties" = false))]
pub struct Holder {
    /// The holding operation.
    #[schemars(with = "schema::OperationId")]
    pub operation_id: String,
    /// Its MysqlDatabase name.
    #[schemars(with = "schema::ResourceName")]
    pub instance: String,
    /// Expiry of its lease.
    #[schemars(with = "schema::Timestamp")]
    pub expires_at: String,
}

/// Whole numbers as JSON Schema reads them: `integer` is any number whose
/// fractional part is zero, so `30.0` and `3e1` are integers to the contract
/// (and to every client that builds its body from it) while serde's `u32`
/// refuses them. Request fields the contract calls `integer` are read this way.
mod whole {
    use serde::de::{Deserialize, Deserializer, Error};

    /// The value of `n` if it is a whole number in `0..=u32::MAX`.
    pub(super) fn of(n: &serde_json::Number) -> Option<u32> {
        if let Some(u) = n.as_u64() {
            return u32::try_from(u).ok();
        }
        let f = n.as_f64()?;
        // Exact: a u32 fits an f64's mantissa.
        (f.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&f)).then_some(f as u32)
    }

    fn refuse<E: Error>(n: &serde_json::Number) -> E {
        E::custom(format_args!("invalid value: {n}, expected a whole number in 0..=4294967295"))
    }

    /// A required whole number.
    pub(super) fn u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
        let n = serde_json::Number::deserialize(d)?;
        of(&n).ok_or_else(|| refuse(&n))
    }

    /// An optional whole number (`null` or absent: `None`).
    pub(super) fn option_u32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
        Option::<serde_json::Number>::deserialize(d)?.map(|n| of(&n).ok_or_else(|| refuse(&n))).transpose()
    }
}

/// Whether `id` is a valid `operationId`: 1–128 characters of
/// `[A-Za-z0-9._:-]`, other than `.` and `..`, which a URL path
/// cannot carry (clients remove them as dot segments, RFC 3986 §5.2.4), so an
/// operation of that id could never be renewed or released.
pub fn valid_operation_id(id: &str) -> bool {
    (1..=MAX_OPERATION_ID_LEN).contains(&id.len())
        && id != "."
        && id != ".."
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Whether `revision` is a valid revision in a renewal: 1–64 characters of
/// `[A-Za-z0-9._:-]` (the pattern of [`schema::REVISION_PATTERN`]).
pub fn valid_revision(revision: &str) -> bool {
    (1..=MAX_REVISION_LEN).contains(&revision.len())
        && revision.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Whether `s` is a valid MysqlFailoverGroup or MysqlDatabase name as the API
/// checks it: 1–253 characters of `[a-z0-9.-]`, starting and ending with a
/// letter or digit (the pattern of [`schema::NAME_PATTERN`]).
pub fn valid_name(s: &str) -> bool {
    (1..=MAX_NAME_LEN).contains(&s.len())
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && s.as_bytes().first().is_some_and(u8::is_ascii_alphanumeric)
        && s.as_bytes().last().is_some_and(u8::is_ascii_alphanumeric)
}

/// Whether `token` has the shape a lease token may have in a request:
/// 1–512 characters (counted as JSON Schema counts them: code points).
pub fn valid_token(token: &str) -> bool {
    !token.is_empty() && token.chars().count() <= MAX_TOKEN_CHARS
}

/// Clamps a requested TTL to [5, 120] seconds.
pub fn clamp_ttl(requested: u32) -> u32 {
    requested.clamp(MIN_TTL_SECONDS, MAX_TTL_SECONDS)
}

#[cfg(test)]
mod tests;
