//! Acquisition: the answers to a lease request (`POST`), the ways an
//! attempt gives up, and the decision after each answer ([`after_post`]):
//! ask again, wait, or give up.

use std::fmt;

use super::{Millis, REFUSAL_SETTLE_MS, RETRY_BACKOFF_MS};
use crate::wire::LeaseKind;

/// The holder a `409 held` named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderInfo {
    /// Its operationId.
    pub operation_id: String,
    /// Its MysqlDatabase name.
    pub instance: String,
    /// Its `expiresAt` as the operator wrote it (RFC 3339).
    pub expires_at: String,
}

impl fmt::Display for HolderInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "operation {} for {} (expires {})", self.operation_id, self.instance, self.expires_at)
    }
}

/// The answer to a `POST …/leases`, as the core needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PostAnswer {
    /// 201 or 200: granted at this generation with this TTL (seconds).
    Granted {
        /// `topologyGeneration` of the grant.
        generation: i64,
        /// `ttlSeconds` granted.
        ttl_seconds: u32,
    },
    /// `409 held`; `until_expiry` is the holder's `expiresAt` minus our wall
    /// clock, in ms (0 when already past).
    Held {
        /// The holder.
        holder: HolderInfo,
        /// ms until its expiry, on our clock.
        until_expiry: Millis,
    },
    /// `423 unstable` with `retryAfterSeconds`.
    Unstable {
        /// Seconds to wait.
        retry_after_seconds: u32,
        /// The deploy API's words for why (bounded, escaped; empty when none).
        message: String,
    },
    /// `409 revoked`: this operation was revoked before (tombstone).
    Revoked {
        /// `TopologyChanged` or `OperatorRevoked`.
        reason: String,
    },
    /// An answer that asking again will not change (401, 403, 404, 400, 413).
    Refused {
        /// HTTP status.
        status: u16,
        /// The error code.
        code: String,
        /// The server's message.
        message: String,
    },
    /// No usable answer (transport error, timeout, 5xx, `503 not_leader`).
    Failed {
        /// What happened.
        what: String,
    },
}

/// Why acquisition ended without both leases.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GiveUp {
    /// The acquire timeout passed; the last holder seen, if any.
    Timeout {
        /// The kind being asked for.
        kind: LeaseKind,
        /// The holder named by the last `409 held`.
        holder: Option<HolderInfo>,
        /// The last answer, for the record.
        last: String,
    },
    /// The operation is revoked (tombstone): it must never run.
    Revoked {
        /// The kind being asked for.
        kind: LeaseKind,
        /// The reason.
        reason: String,
    },
    /// A refusal that asking again will not change.
    Refused {
        /// The kind being asked for.
        kind: LeaseKind,
        /// HTTP status.
        status: u16,
        /// Error code.
        code: String,
        /// Server message.
        message: String,
    },
    /// The sidecar was stopped (SIGTERM) before both leases were held.
    Stopped,
    /// The migration lease was lost while the hold was asked for.
    Lost {
        /// Why (a fence reason).
        reason: String,
    },
    /// The hold was granted at another generation than the migration lease:
    /// the topology moved while we were acquiring.
    GenerationChanged {
        /// Migration grant generation.
        migration: i64,
        /// Hold grant generation.
        hold: i64,
    },
}

impl fmt::Display for GiveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GiveUp::Timeout { kind, holder: Some(h), .. } => {
                write!(f, "gave up waiting for the {} lease at the acquire timeout: held by {h}", kind.as_str())
            }
            GiveUp::Timeout { kind, holder: None, last } => {
                write!(f, "gave up asking for the {} lease at the acquire timeout: last answer {last}", kind.as_str())
            }
            GiveUp::Revoked { kind, reason } => write!(
                f,
                "the {} lease was refused with 409 revoked ({reason}): this operation was revoked and must not run again; use a new operationId after checking the schema",
                kind.as_str()
            ),
            GiveUp::Refused { kind, status, code, message } => {
                write!(f, "the {} lease was refused: {status} {code}: {message}", kind.as_str())
            }
            GiveUp::Stopped => write!(f, "the sidecar was stopped before both leases were held"),
            GiveUp::Lost { reason } => {
                write!(f, "the migration lease was lost while the failover-hold was asked for: {reason}")
            }
            GiveUp::GenerationChanged { migration, hold } => {
                write!(f, "the topology generation moved from {migration} to {hold} while the leases were acquired")
            }
        }
    }
}

/// What to do after a POST answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcquireStep {
    /// Granted: go on.
    Granted {
        /// Generation of the grant.
        generation: i64,
        /// TTL granted, seconds.
        ttl_seconds: u32,
    },
    /// Ask again at this time.
    RetryAt(Millis),
    /// Stop: the migration must not start.
    GiveUp(GiveUp),
}

/// Acquisition settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcquirePolicy {
    /// When acquisition started.
    pub started: Millis,
    /// The acquire timeout, ms.
    pub timeout: Millis,
    /// Longest wait between two POSTs while the mutex is held, ms: a
    /// release is noticed within about this long.
    pub poll: Millis,
}

/// Decides the next step after `answer` to the POST of `kind` at `now`.
/// `jitter` ∈ [0, 1) spreads waiters apart (up to a quarter of the wait,
/// at most 1 s more); `last_holder` is the holder named so far.
pub fn after_post(
    kind: LeaseKind,
    answer: &PostAnswer,
    now: Millis,
    policy: &AcquirePolicy,
    jitter: f64,
    last_holder: Option<&HolderInfo>,
) -> AcquireStep {
    let jitter = jitter.clamp(0.0, 0.999);
    let wait = match answer {
        PostAnswer::Granted { generation, ttl_seconds } => {
            return AcquireStep::Granted { generation: *generation, ttl_seconds: *ttl_seconds };
        }
        PostAnswer::Revoked { reason } => {
            return AcquireStep::GiveUp(GiveUp::Revoked { kind, reason: reason.clone() });
        }
        // Authorization follows a MysqlDatabase's creation through the
        // operator's watch caches: a pipeline that creates it and asks at
        // once may be told 401/403/404 for a moment. Asked again for
        // REFUSAL_SETTLE_MS, then taken as final.
        PostAnswer::Refused { status: 401 | 403 | 404, .. }
            if now < policy.started.saturating_add(REFUSAL_SETTLE_MS.min(policy.timeout)) =>
        {
            RETRY_BACKOFF_MS
        }
        PostAnswer::Refused { status, code, message } => {
            return AcquireStep::GiveUp(GiveUp::Refused {
                kind,
                status: *status,
                code: code.clone(),
                message: message.clone(),
            });
        }
        PostAnswer::Held { until_expiry, .. } => (*until_expiry).min(policy.poll),
        PostAnswer::Unstable { retry_after_seconds, .. } => u64::from(*retry_after_seconds).max(1) * 1000,
        PostAnswer::Failed { .. } => RETRY_BACKOFF_MS,
    };
    let spread = ((wait / 4).min(1000) as f64 * jitter) as Millis;
    let deadline = policy.started.saturating_add(policy.timeout);
    if now >= deadline {
        let holder = match answer {
            PostAnswer::Held { holder, .. } => Some(holder.clone()),
            _ => last_holder.cloned(),
        };
        return AcquireStep::GiveUp(GiveUp::Timeout { kind, holder, last: describe(answer) });
    }
    // Never sooner than 100 ms (a holder whose expiry just passed is swept
    // on the next POST), never past the deadline: one last ask there.
    AcquireStep::RetryAt(now.saturating_add(wait.max(100) + spread).min(deadline))
}

fn describe(answer: &PostAnswer) -> String {
    match answer {
        PostAnswer::Granted { .. } => "granted".into(),
        PostAnswer::Held { holder, .. } => format!("409 held by {holder}"),
        PostAnswer::Unstable { retry_after_seconds, message } => {
            format!("423 unstable (retry after {retry_after_seconds} s): {message}")
        }
        PostAnswer::Revoked { reason } => format!("409 revoked ({reason})"),
        PostAnswer::Refused { status, code, .. } => format!("{status} {code}"),
        PostAnswer::Failed { what } => what.clone(),
    }
}
