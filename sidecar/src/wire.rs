//! The deploy API's wire types, and their translation into the lease
//! core's answers. The only module of this crate that knows the JSON shapes
//! (`bloodraven_api::deploy`, `docs/deploy-api.openapi.yaml`): moving to a
//! typed error-code enum changes this file alone.
//!
//! Translation (lease seed; DESIGN.md "Deploy API" table):
//!
//! | call | answer | core |
//! |---|---|---|
//! | POST | 201, 200 | `Granted` |
//! | POST | 409 `held` | `Held` (holder, time to its `expiresAt`) |
//! | POST | 409 `revoked` | `Revoked` |
//! | POST | 423 `unstable` | `Unstable` |
//! | POST | 400, 401, 403, 404, 413, other 4xx | `Refused` |
//! | POST | 5xx (`not_leader`, `contention`, `review_failed`, `internal`), transport | `Failed` |
//! | PUT | 200 | `Renewed` (generation) |
//! | PUT | 409 `revoked` | `Revoked` |
//! | PUT | 404 | `Expired` |
//! | PUT | 403 `token_mismatch` | `TokenMismatch` |
//! | PUT | other 403 | `Forbidden` |
//! | PUT | 423 | `Unstable` |
//! | PUT | anything else, transport | `Failed` (not a renewal) |
//!
//! A body that does not parse is never taken as success.

use std::fmt;

use bloodraven_api::deploy::{CreateLeaseRequest, ErrorBody, LeaseGrant, ReleaseRequest, RenewRequest, RenewResponse};
pub use bloodraven_api::deploy::{DdlState, LeaseKind, valid_operation_id};
use chrono::{DateTime, Utc};

use crate::lease::machine::{HolderInfo, Millis, PostAnswer, RenewAnswer};

/// A lease token: memory only, never printed (its `Debug` is redacted).
#[derive(Clone, PartialEq, Eq)]
pub struct LeaseToken(String);

impl fmt::Debug for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LeaseToken(redacted)")
    }
}

/// The body of a POST.
pub fn create_body(kind: LeaseKind, operation_id: &str, instance: &str, ttl_seconds: u32) -> Vec<u8> {
    json(&CreateLeaseRequest {
        kind,
        operation_id: operation_id.to_owned(),
        instance: instance.to_owned(),
        ttl_seconds,
    })
}

/// The body of a PUT (renewal), with the DDL state when known.
pub fn renew_body(token: &LeaseToken, ddl_state: Option<DdlState>) -> Vec<u8> {
    json(&RenewRequest { token: token.0.clone(), ddl_state })
}

/// The body of a DELETE (release).
pub fn release_body(token: &LeaseToken) -> Vec<u8> {
    json(&ReleaseRequest { token: token.0.clone() })
}

fn json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    // Serializing these plain structs cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

/// The error body, when the answer has one.
fn error_body(body: &[u8]) -> Option<ErrorBody> {
    serde_json::from_slice(body).ok()
}

/// Short, printable text of an error answer for logs and records (the
/// server's message is bounded and escaped: it is not ours).
fn summary(status: u16, body: &[u8]) -> (String, String) {
    match error_body(body) {
        Some(e) => (crate::record::bounded(e.error.as_str(), 64), crate::record::bounded(&e.message, 300)),
        None => (format!("http_{status}"), crate::record::bounded(&String::from_utf8_lossy(body), 120)),
    }
}

/// Translates a POST answer; `now` is our wall clock (for the holder's
/// expiry). Returns the token too when granted.
pub fn post_answer(status: u16, body: &[u8], now: DateTime<Utc>) -> (PostAnswer, Option<LeaseToken>) {
    if status == 200 || status == 201 {
        return match serde_json::from_slice::<LeaseGrant>(body) {
            Ok(g) if !g.token.is_empty() => (
                PostAnswer::Granted { generation: g.topology_generation, ttl_seconds: g.ttl_seconds },
                Some(LeaseToken(g.token)),
            ),
            Ok(_) => (PostAnswer::Failed { what: format!("{status} without a token") }, None),
            Err(e) => (PostAnswer::Failed { what: format!("{status} with an unreadable grant: {e}") }, None),
        };
    }
    let e = error_body(body);
    let code = e.as_ref().map(|e| e.error.as_str());
    let answer = match (status, code) {
        (409, Some("held")) => match e.as_ref().and_then(|e| e.holder.as_ref()) {
            Some(h) => PostAnswer::Held {
                holder: HolderInfo {
                    operation_id: crate::record::bounded(&h.operation_id, 128),
                    instance: crate::record::bounded(&h.instance, 253),
                    expires_at: crate::record::bounded(&h.expires_at, 64),
                },
                until_expiry: until(&h.expires_at, now),
            },
            None => PostAnswer::Failed { what: "409 held without a holder".into() },
        },
        (409, Some("revoked")) => PostAnswer::Revoked {
            reason: e
                .as_ref()
                .and_then(|e| e.reason)
                .map_or_else(|| "unknown".into(), |r| crate::record::bounded(r.as_str(), 64)),
        },
        (423, _) => {
            PostAnswer::Unstable { retry_after_seconds: e.as_ref().and_then(|e| e.retry_after_seconds).unwrap_or(1) }
        }
        (s, _) if (400..500).contains(&s) && s != 408 && s != 429 => {
            let (code, message) = summary(s, body);
            PostAnswer::Refused { status: s, code, message }
        }
        (s, _) => {
            let (code, message) = summary(s, body);
            PostAnswer::Failed { what: format!("{s} {code}: {message}") }
        }
    };
    (answer, None)
}

/// ms from `now` until the RFC 3339 time `at` (0 when past or unreadable).
fn until(at: &str, now: DateTime<Utc>) -> Millis {
    DateTime::parse_from_rfc3339(at)
        .ok()
        .map_or(0, |t| (t.with_timezone(&Utc) - now).num_milliseconds().max(0) as Millis)
}

/// Translates a PUT answer.
pub fn renew_answer(status: u16, body: &[u8]) -> RenewAnswer {
    if status == 200 {
        return match serde_json::from_slice::<RenewResponse>(body) {
            Ok(r) => RenewAnswer::Renewed { generation: r.topology_generation },
            Err(e) => RenewAnswer::Failed { what: format!("200 with an unreadable body: {e}") },
        };
    }
    let e = error_body(body);
    match (status, e.as_ref().map(|e| e.error.as_str())) {
        (409, Some("revoked")) => RenewAnswer::Revoked {
            reason: e
                .as_ref()
                .and_then(|e| e.reason)
                .map_or_else(|| "unknown".into(), |r| crate::record::bounded(r.as_str(), 64)),
            generation: e.as_ref().and_then(|e| e.topology_generation),
        },
        (404, _) => RenewAnswer::Expired,
        (403, Some("token_mismatch")) => RenewAnswer::TokenMismatch,
        (403, _) => RenewAnswer::Forbidden { message: summary(403, body).1 },
        (423, _) => {
            RenewAnswer::Unstable { retry_after_seconds: e.as_ref().and_then(|e| e.retry_after_seconds).unwrap_or(1) }
        }
        (s, _) => {
            let (code, message) = summary(s, body);
            RenewAnswer::Failed { what: format!("{s} {code}: {message}") }
        }
    }
}

/// Whether a DELETE answer means the lease is no longer held by us: 204,
/// or a refusal saying it was already gone (404, 409 revoked, 403 token_mismatch).
pub fn released(status: u16) -> bool {
    matches!(status, 204 | 404 | 409 | 403)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2030-01-01T00:00:00Z").unwrap().with_timezone(&Utc)
    }

    #[test]
    fn post_answers() {
        let grant = br#"{"kind":"migration","operationId":"op","instance":"i","token":"secret","expiresAt":"2030-01-01T00:00:30Z","ttlSeconds":30,"topologyGeneration":7}"#;
        let (a, t) = post_answer(201, grant, now());
        assert_eq!(a, PostAnswer::Granted { generation: 7, ttl_seconds: 30 });
        assert_eq!(format!("{:?}", t.unwrap()), "LeaseToken(redacted)");
        let held = br#"{"error":"held","message":"m","holder":{"operationId":"op-a","instance":"counter-app","expiresAt":"2030-01-01T00:00:12.5Z"}}"#;
        match post_answer(409, held, now()).0 {
            PostAnswer::Held { holder, until_expiry } => {
                assert_eq!((holder.operation_id.as_str(), until_expiry), ("op-a", 12_500));
            }
            other => panic!("{other:?}"),
        }
        let table: Vec<(u16, &[u8], &str)> = vec![
            (409, br#"{"error":"revoked","message":"m","reason":"TopologyChanged","topologyGeneration":3}"#, "Revoked"),
            (423, br#"{"error":"unstable","message":"m","retryAfterSeconds":5}"#, "Unstable"),
            (403, br#"{"error":"forbidden","message":"not a client"}"#, "Refused"),
            (401, br#"{"error":"unauthenticated","message":"m"}"#, "Refused"),
            (404, br#"{"error":"group_not_found","message":"m"}"#, "Refused"),
            (503, br#"{"error":"not_leader","message":"m"}"#, "Failed"),
            (500, b"not json", "Failed"),
            (201, b"{}", "Failed"),
            (200, br#"{"kind":"migration","operationId":"op","instance":"i","token":"","expiresAt":"x","ttlSeconds":30,"topologyGeneration":7}"#, "Failed"),
            (409, br#"{"error":"held","message":"no holder"}"#, "Failed"),
        ];
        for (status, body, want) in table {
            let got = format!("{:?}", post_answer(status, body, now()).0);
            assert!(got.starts_with(want), "{status} {}: {got}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn renew_answers() {
        let table: Vec<(u16, &[u8], RenewAnswer)> = vec![
            (200, br#"{"expiresAt":"x","topologyGeneration":4}"#, RenewAnswer::Renewed { generation: 4 }),
            (
                409,
                br#"{"error":"revoked","message":"m","reason":"OperatorRevoked","topologyGeneration":4}"#,
                RenewAnswer::Revoked { reason: "OperatorRevoked".into(), generation: Some(4) },
            ),
            (404, br#"{"error":"expired","message":"m"}"#, RenewAnswer::Expired),
            (403, br#"{"error":"token_mismatch","message":"m"}"#, RenewAnswer::TokenMismatch),
            (403, br#"{"error":"forbidden","message":"gone"}"#, RenewAnswer::Forbidden { message: "gone".into() }),
            (
                423,
                br#"{"error":"unstable","message":"m","retryAfterSeconds":2}"#,
                RenewAnswer::Unstable { retry_after_seconds: 2 },
            ),
        ];
        for (status, body, want) in table {
            assert_eq!(renew_answer(status, body), want, "{status}");
        }
        // Never success without a readable 200 body.
        for (status, body) in
            [(200, &b"{}"[..]), (200, b"garbage"), (503, br#"{"error":"not_leader","message":"m"}"#), (401, b"")]
        {
            assert!(matches!(renew_answer(status, body), RenewAnswer::Failed { .. }), "{status}");
        }
    }

    #[test]
    fn bodies_carry_the_token_but_never_print_it() {
        let t = LeaseToken("s3cret".into());
        let body = String::from_utf8(renew_body(&t, Some(DdlState::Started))).unwrap();
        assert_eq!(body, r#"{"token":"s3cret","ddlState":"started"}"#);
        assert!(!format!("{t:?}").contains("s3cret"));
        let body = String::from_utf8(create_body(LeaseKind::FailoverHold, "op", "i", 30)).unwrap();
        assert_eq!(body, r#"{"kind":"failover-hold","operationId":"op","instance":"i","ttlSeconds":30}"#);
    }
}
