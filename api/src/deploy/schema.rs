//! Named schemas of the contract that have no Rust type of their own: the
//! string shapes the server checks (`#[schemars(with = …)]` on the wire
//! types), each stated once so that the OpenAPI document and the server's
//! checks ([`super::valid_operation_id`], [`super::valid_name`],
//! [`super::valid_token`]) agree; `tests.rs` checks that they do.

// Marker types: only their schemas are used.
#![allow(dead_code)]

use schemars::JsonSchema;

/// The pattern of [`OperationId`] (the length is in it, as the contract states it).
pub const OPERATION_ID_PATTERN: &str = r"^[A-Za-z0-9._:-]{1,128}$";

/// The pattern of [`Revision`].
pub const REVISION_PATTERN: &str = r"^[A-Za-z0-9._:-]{1,64}$";

/// The pattern of [`ResourceName`].
pub const NAME_PATTERN: &str = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$";

/// A caller-chosen deploy operation id: 1–128 characters of
/// `[A-Za-z0-9._:-]`, other than `.` and `..` (a URL path cannot carry those:
/// clients and proxies remove them as dot segments, RFC 3986 §5.2.4).
#[derive(JsonSchema)]
#[schemars(extend("not" = {"enum": [".", ".."]}))]
pub struct OperationId(#[schemars(regex(pattern = OPERATION_ID_PATTERN), length(min = 1, max = 128))] String);

/// A migration revision as a renewal names it: 1–64 characters of
/// `[A-Za-z0-9._:-]` (a version such as `3`, `V3`, `20261201.1`).
#[derive(JsonSchema)]
pub struct Revision(#[schemars(regex(pattern = REVISION_PATTERN), length(min = 1, max = 64))] String);

/// A MysqlFailoverGroup or MysqlDatabase name: 1–253 characters of
/// `[a-z0-9.-]`, starting and ending with a letter or digit.
#[derive(JsonSchema)]
pub struct ResourceName(#[schemars(regex(pattern = NAME_PATTERN), length(min = 1, max = 253))] String);

/// A lease token as a request carries it: 1–512 characters (the operator
/// hands out 64 hex characters; anything else answers `403 token_mismatch`).
#[derive(JsonSchema)]
pub struct LeaseToken(#[schemars(length(min = 1, max = 512))] String);

/// An RFC 3339 time on the operator's clock (UTC, `Z`).
#[derive(JsonSchema)]
pub struct Timestamp(#[schemars(extend("format" = "date-time"))] String);
