//! The deploy API's wire types, and their translation into the lease
//! core's answers. The only module of this crate that knows the JSON shapes
//! (`bloodraven_api::deploy`, `docs/deploy-api.openapi.yaml`): moving to a
//! typed error-code enum changes this file alone.
//!
//! Translation (docs/deploy-api.md, "Reference"):
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
//! | watch | 200 | `Held` (wait ran out, still ours) |
//! | watch | 409, 404, 403 | `Gone`: renew now, and let the renewal's answer decide |
//! | watch | 429, 503, other, transport | `Retry` after a pause (renewals go on regardless) |
//!
//! A body that does not parse is never taken as success.

use std::fmt;

use bloodraven_api::deploy::{
    CreateLeaseRequest, ErrorBody, LeaseGrant, ReleaseRequest, RenewRequest, RenewResponse, WatchRequest,
};
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

/// The body of a PUT (renewal), with the DDL state and the revision when
/// known. A revision the API would refuse (a tool may report any text) is
/// left out rather than sent: a `400` would end the heartbeat.
pub fn renew_body(token: &LeaseToken, ddl_state: Option<DdlState>, revision: Option<&str>) -> Vec<u8> {
    let revision = revision.filter(|r| bloodraven_api::deploy::valid_revision(r)).map(str::to_owned);
    json(&RenewRequest { token: token.0.clone(), ddl_state, revision })
}

/// The body of a DELETE (release).
pub fn release_body(token: &LeaseToken) -> Vec<u8> {
    json(&ReleaseRequest { token: token.0.clone() })
}

/// The body of a watch: wait up to `wait_seconds` (≤ 60).
pub fn watch_body(token: &LeaseToken, wait_seconds: u32) -> Vec<u8> {
    json(&WatchRequest { token: token.0.clone(), wait_seconds: Some(wait_seconds) })
}

/// What a watch answer means to the sidecar.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchAnswer {
    /// 200: the wait ran out and the lease is still ours; watch again.
    Held,
    /// The lease may no longer be ours (`409 revoked`, `404 expired`,
    /// `403`): renew now, so that the renewal's answer — the one the core
    /// acts on — comes at once instead of at the next ttl/3.
    Gone(String),
    /// No answer about the lease (`429 too_many_watches`, `503
    /// not_leader`, another status, a transport error): watch again after
    /// the pause, in milliseconds. Renewals go on regardless.
    Retry(u64, String),
}

/// Translates a watch answer (`Err`: no answer, the transport's error).
pub fn watch_answer(answer: Result<(u16, Vec<u8>), String>) -> WatchAnswer {
    let (status, body) = match answer {
        Ok(a) => a,
        Err(what) => return WatchAnswer::Retry(1_000, what),
    };
    let (code, message) = summary(status, &body);
    match status {
        200 => WatchAnswer::Held,
        409 | 404 | 403 => WatchAnswer::Gone(format!("{status} {code}: {message}")),
        429 => {
            let after = error_body(&body).and_then(|e| e.retry_after_seconds).unwrap_or(1).clamp(1, 60);
            WatchAnswer::Retry(u64::from(after) * 1_000, format!("{status} {code}"))
        }
        503 => WatchAnswer::Retry(1_000, format!("{status} {code}")),
        // A refusal of the request itself (400, 401, 413, 5xx): not about
        // the lease; slowly, so a server that refuses every watch costs little.
        _ => WatchAnswer::Retry(5_000, format!("{status} {code}: {message}")),
    }
}

fn json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    // Serializing these plain structs cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

/// The error body, when the answer has one.
fn error_body(body: &[u8]) -> Option<ErrorBody> {
    serde_json::from_slice(body).ok()
}

/// The most of the deploy API's message that the sidecar keeps: its
/// longest messages (a refusal for a pending schema verification names the
/// instance twice, the operation, its revision and the annotation that
/// clears it) must reach the record whole, the advice at their end included.
const SERVER_MESSAGE_MAX: usize = 1000;

/// Short, printable text of an error answer for logs and records (the
/// server's message is bounded and escaped: it is not ours).
fn summary(status: u16, body: &[u8]) -> (String, String) {
    match error_body(body) {
        Some(e) => {
            (crate::record::bounded(e.error.as_str(), 64), crate::record::bounded(&e.message, SERVER_MESSAGE_MAX))
        }
        None => (format!("http_{status}"), crate::record::bounded(&String::from_utf8_lossy(body), 120)),
    }
}

/// What a POST asked for: a grant must be for exactly this.
#[derive(Clone, Copy, Debug)]
pub struct Asked<'a> {
    /// The lease kind.
    pub kind: LeaseKind,
    /// The operationId.
    pub operation_id: &'a str,
    /// The MysqlDatabase name.
    pub instance: &'a str,
}

/// Translates a POST answer; `now` is our wall clock (for the holder's
/// expiry). Returns the token too when granted. A grant for another kind,
/// operation or instance than `asked` is no grant (a confused server or a
/// caching proxy): the attack round found such a grant taken as ours, the
/// migration started on it, fenced only at its first renewal.
pub fn post_answer(status: u16, body: &[u8], now: DateTime<Utc>, asked: Asked<'_>) -> (PostAnswer, Option<LeaseToken>) {
    if status == 200 || status == 201 {
        return match serde_json::from_slice::<LeaseGrant>(body) {
            Ok(g) if g.kind != asked.kind || g.operation_id != asked.operation_id || g.instance != asked.instance => (
                PostAnswer::Failed {
                    what: format!(
                        "{status} with a grant for another lease ({} {} {}), not ours",
                        g.kind.as_str(),
                        crate::record::bounded(&g.operation_id, 128),
                        crate::record::bounded(&g.instance, 253)
                    ),
                },
                None,
            ),
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
        (423, _) => PostAnswer::Unstable {
            retry_after_seconds: e.as_ref().and_then(|e| e.retry_after_seconds).unwrap_or(1),
            message: summary(423, body).1,
        },
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

    #[test]
    fn a_long_refusal_reaches_the_record_with_its_advice() {
        let instance = "i".repeat(253);
        let op = "o".repeat(128);
        let message = format!(
            "no new migration of instance {instance} runs until a person checks its schema and annotates the group bloodraven.shipstream.io/schema-verified={op} (or all): operation {op} (revision {}) ended (OperatorRevoked) at topology generation 12 after its DDL started",
            "r".repeat(128)
        );
        let body = serde_json::json!({"error": "schema_verification_required", "message": message}).to_string();
        let (code, kept) = summary(409, body.as_bytes());
        assert_eq!(code, "schema_verification_required");
        assert_eq!(kept, message, "cut: {kept}");
    }

    #[test]
    fn watch_answers_say_watch_again_renew_now_or_pause() {
        let err = |status: u16, code: &str| {
            Ok((status, format!(r#"{{"error":"{code}","message":"m","retryAfterSeconds":7}}"#).into_bytes()))
        };
        let held = br#"{"expiresAt":"2030-01-01T00:00:30Z","topologyGeneration":1}"#.to_vec();
        assert_eq!(watch_answer(Ok((200, held))), WatchAnswer::Held);
        for (status, code) in [(409, "revoked"), (404, "expired"), (403, "token_mismatch"), (403, "forbidden")] {
            assert!(matches!(watch_answer(err(status, code)), WatchAnswer::Gone(w) if w.contains(code)), "{status}");
        }
        assert_eq!(
            watch_answer(err(429, "too_many_watches")),
            WatchAnswer::Retry(7_000, "429 too_many_watches".into())
        );
        assert_eq!(watch_answer(err(503, "not_leader")), WatchAnswer::Retry(1_000, "503 not_leader".into()));
        assert!(matches!(watch_answer(err(400, "invalid")), WatchAnswer::Retry(5_000, _)));
        assert!(matches!(watch_answer(Ok((502, b"<html>".to_vec()))), WatchAnswer::Retry(5_000, _)));
        assert!(
            matches!(watch_answer(Err("connection refused".into())), WatchAnswer::Retry(1_000, w) if w == "connection refused")
        );
        // The token is never in a body the sidecar logs.
        let body = String::from_utf8(watch_body(&LeaseToken("ab".repeat(32)), 30)).unwrap();
        assert_eq!(body, format!(r#"{{"token":"{}","waitSeconds":30}}"#, "ab".repeat(32)));
    }

    const ASKED: Asked<'static> = Asked { kind: LeaseKind::Migration, operation_id: "op", instance: "i" };

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2030-01-01T00:00:00Z").unwrap().with_timezone(&Utc)
    }

    #[test]
    fn post_answers() {
        let grant = br#"{"kind":"migration","operationId":"op","instance":"i","token":"secret","expiresAt":"2030-01-01T00:00:30Z","ttlSeconds":30,"topologyGeneration":7}"#;
        let (a, t) = post_answer(201, grant, now(), ASKED);
        assert_eq!(a, PostAnswer::Granted { generation: 7, ttl_seconds: 30 });
        assert_eq!(format!("{:?}", t.unwrap()), "LeaseToken(redacted)");
        let held = br#"{"error":"held","message":"m","holder":{"operationId":"op-a","instance":"counter-app","expiresAt":"2030-01-01T00:00:12.5Z"}}"#;
        match post_answer(409, held, now(), ASKED).0 {
            PostAnswer::Held { holder, until_expiry } => {
                assert_eq!((holder.operation_id.as_str(), until_expiry), ("op-a", 12_500));
            }
            other => panic!("{other:?}"),
        }
        let unstable =
            br#"{"error":"unstable","message":"the group is not stable (OperationInProgress)","retryAfterSeconds":5}"#;
        assert_eq!(
            post_answer(423, unstable, now(), ASKED).0,
            PostAnswer::Unstable {
                retry_after_seconds: 5,
                message: "the group is not stable (OperationInProgress)".into()
            },
            "the reason is kept for the log"
        );
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
            // Attack round: a grant for another lease is not ours.
            (201, br#"{"kind":"failover-hold","operationId":"op","instance":"i","token":"t","expiresAt":"x","ttlSeconds":30,"topologyGeneration":7}"#, "Failed"),
            (201, br#"{"kind":"migration","operationId":"other","instance":"i","token":"t","expiresAt":"x","ttlSeconds":30,"topologyGeneration":7}"#, "Failed"),
            (201, br#"{"kind":"migration","operationId":"op","instance":"other","token":"t","expiresAt":"x","ttlSeconds":30,"topologyGeneration":7}"#, "Failed"),
        ];
        for (status, body, want) in table {
            let got = format!("{:?}", post_answer(status, body, now(), ASKED).0);
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
        let body = String::from_utf8(renew_body(&t, Some(DdlState::Started), Some("7"))).unwrap();
        assert!(body.contains(r#""revision":"7""#), "{body}");
        let odd = String::from_utf8(renew_body(&t, Some(DdlState::Started), Some("V 7/../x"))).unwrap();
        assert!(!odd.contains("revision"), "a revision the API refuses is left out: {odd}");
        assert_eq!(body, r#"{"token":"s3cret","ddlState":"started","revision":"7"}"#);
        assert!(!format!("{t:?}").contains("s3cret"));
        let body = String::from_utf8(create_body(LeaseKind::FailoverHold, "op", "i", 30)).unwrap();
        assert_eq!(body, r#"{"kind":"failover-hold","operationId":"op","instance":"i","ttlSeconds":30}"#);
    }
}
