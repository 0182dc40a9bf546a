//! The lease core: pure decisions of one run, with time passed in as
//! milliseconds on a monotonic clock ([`Millis`], counted from any origin).
//! The driver (`driver.rs`) does the I/O around it.
//!
//! Model (docs/sidecar.md, "Behaviour"; docs/concepts.md, "Leases" and "The
//! generation is the fence"):
//!
//! - **Acquisition** ([`after_post`]): `migration`, then `failover-hold`.
//!   `409 held` waits until the holder's `expiresAt` plus jitter, or at most
//!   one poll interval, and asks again; `423 unstable` waits
//!   `retryAfterSeconds`; transport errors and `5xx` back off; all of it
//!   only until the acquire timeout. `409 revoked` and `400` end the
//!   attempt at once: asking again cannot change them; `401`, `403` and
//!   `404` too, after [`REFUSAL_SETTLE_MS`] (authorization follows a new
//!   MysqlDatabase through the operator's caches).
//! - **Heartbeat** ([`Heartbeat`]): each lease is renewed every ttl/3. A
//!   renewal acknowledged with the grant's generation confirms the lease
//!   until *send time* + ttl (the operator's clock started its TTL no
//!   earlier than we sent). The fence deadline is the earliest confirmed
//!   expiry minus the grace, so that the SIGKILL that follows the SIGTERM
//!   by `grace` lands no later than the lease can lapse on the operator.
//! - **Fence**: `409 revoked`, `404 expired`, `403` (`token_mismatch` or a
//!   caller no longer listed), a generation other than the grant's, or the
//!   fence deadline passing. A fence is final: the heartbeat stops, nothing
//!   is renewed or acquired again in this run.
//!
//! Invariants (property-tested in `machine/tests.rs`):
//! 1. A fence is absorbing: once fenced, no renewal is ever due and no
//!    answer clears it.
//! 2. Only an acknowledged renewal at the grant's generation moves the
//!    deadline, and only to its send time + ttl − grace; `423` and failures
//!    never move it.
//! 3. Not fenced at `now` implies `now` < the fence deadline, once `tick`
//!    has seen `now`.
//! 4. After every acknowledged renewal, the next renewal plus a whole
//!    request timeout ends before the fence deadline ([`Timing::new`]
//!    refuses settings where it would not).

use std::fmt;

use crate::wire::LeaseKind;

mod acquire;

pub use acquire::{AcquirePolicy, AcquireStep, GiveUp, HolderInfo, PostAnswer, after_post};

/// Milliseconds on a monotonic clock.
pub type Millis = u64;

/// Smallest margin, in ms, [`Timing::new`] accepts between the end of a
/// renewal that timed out and the fence deadline: one more attempt must fit.
pub const MIN_MARGIN_MS: Millis = 1_000;

/// Wait after a renewal or acquisition attempt that failed without an answer
/// (transport error, timeout, `5xx`, `503 not_leader`), in ms: short, since
/// the deadline keeps running.
pub const RETRY_BACKOFF_MS: Millis = 1_000;

/// How long, in ms from the start of acquisition, a `401`, `403` or `404`
/// to a POST is asked again before it is taken as final (authorization
/// caches follow a new MysqlDatabase within moments).
pub const REFUSAL_SETTLE_MS: Millis = 30_000;

/// The timing of a run, checked once at start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// Lease TTL in ms (the requested `--ttl`, in [5, 120] s).
    pub ttl: Millis,
    /// Renewal interval in ms: ttl/3.
    pub interval: Millis,
    /// Longest wait for one answer of the deploy API, in ms.
    pub request_timeout: Millis,
    /// Time between SIGTERM and SIGKILL of the migration, in ms.
    pub grace: Millis,
}

/// Settings [`Timing::new`] refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimingError {
    /// The TTL is outside what the deploy API grants.
    #[error("--ttl {0} s is outside [5, 120] s, the range the deploy API grants")]
    TtlOutOfRange(u64),
    /// A zero request timeout.
    #[error("--request-timeout must be more than 0")]
    ZeroTimeout,
    /// Renewal interval, request timeout and grace leave no margin before the TTL.
    #[error(
        "renew interval ({interval_ms} ms = ttl/3) + request timeout ({timeout_ms} ms) + grace ({grace_ms} ms) leaves {margin_ms} ms before the TTL ({ttl_ms} ms), less than the {min_ms} ms needed for one more attempt: lower --request-timeout or --grace, or raise --ttl"
    )]
    NoMargin {
        /// ttl/3.
        interval_ms: Millis,
        /// The request timeout.
        timeout_ms: Millis,
        /// The grace.
        grace_ms: Millis,
        /// ttl − interval − timeout − grace (negative when it does not fit).
        margin_ms: i128,
        /// The TTL.
        ttl_ms: Millis,
        /// [`MIN_MARGIN_MS`].
        min_ms: Millis,
    },
}

impl Timing {
    /// Checks `ttl_seconds` ∈ [5, 120] and that ttl/3 + `request_timeout` +
    /// `grace` + [`MIN_MARGIN_MS`] ≤ ttl: a renewal sent on time that
    /// times out still leaves room for one more before the fence deadline.
    pub fn new(ttl_seconds: u64, request_timeout: Millis, grace: Millis) -> Result<Timing, TimingError> {
        if !(5..=120).contains(&ttl_seconds) {
            return Err(TimingError::TtlOutOfRange(ttl_seconds));
        }
        if request_timeout == 0 {
            return Err(TimingError::ZeroTimeout);
        }
        let ttl = ttl_seconds * 1000;
        let interval = ttl / 3;
        let margin = i128::from(ttl) - i128::from(interval) - i128::from(request_timeout) - i128::from(grace);
        if margin < i128::from(MIN_MARGIN_MS) {
            return Err(TimingError::NoMargin {
                interval_ms: interval,
                timeout_ms: request_timeout,
                grace_ms: grace,
                margin_ms: margin,
                ttl_ms: ttl,
                min_ms: MIN_MARGIN_MS,
            });
        }
        Ok(Timing { ttl, interval, request_timeout, grace })
    }
}

/// The answer to a renewal (`PUT`), as the core needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RenewAnswer {
    /// 200 with the current generation.
    Renewed {
        /// `topologyGeneration` now.
        generation: i64,
    },
    /// `409 revoked`.
    Revoked {
        /// `TopologyChanged` or `OperatorRevoked`.
        reason: String,
        /// Generation at revocation, if given.
        generation: Option<i64>,
    },
    /// `404 expired` (or any 404: the lease is gone).
    Expired,
    /// `403 token_mismatch`.
    TokenMismatch,
    /// Another 403: the caller lost its authorization.
    Forbidden {
        /// The server's message.
        message: String,
    },
    /// `423 unstable`: not a renewal; the deadline stays.
    Unstable {
        /// Seconds to wait.
        retry_after_seconds: u32,
    },
    /// No usable answer: transport error, timeout, 5xx, 503, 401, 400.
    Failed {
        /// What happened.
        what: String,
    },
}

/// Why the run was fenced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FenceReason {
    /// `409 revoked` on a renewal.
    Revoked {
        /// Which lease said so.
        kind: LeaseKind,
        /// `TopologyChanged` or `OperatorRevoked`.
        reason: String,
        /// Generation at revocation.
        generation: Option<i64>,
    },
    /// `404 expired`.
    Expired {
        /// Which lease.
        kind: LeaseKind,
    },
    /// `403 token_mismatch`.
    TokenMismatch {
        /// Which lease.
        kind: LeaseKind,
    },
    /// Another `403`.
    Forbidden {
        /// Which lease.
        kind: LeaseKind,
        /// Server message.
        message: String,
    },
    /// A renewal answered another generation than the grant's.
    GenerationChanged {
        /// Which lease.
        kind: LeaseKind,
        /// Grant generation.
        granted: i64,
        /// Generation in the answer.
        now: i64,
    },
    /// No renewal confirmed the leases past the fence deadline.
    DeadlinePassed,
    /// The sidecar was told to stop (SIGTERM) while the migration ran.
    Shutdown,
    /// The sidecar restarted: its lease tokens (memory only) are gone.
    SidecarRestarted,
    /// `run`'s wrapper ended without reporting the migration's exit (killed):
    /// what the migration did is unknown; its processes were killed.
    WrapperLost,
}

impl FenceReason {
    /// A stable, short name for logs, the termination message and metrics.
    pub const fn code(&self) -> &'static str {
        match self {
            FenceReason::Revoked { .. } => "revoked",
            FenceReason::Expired { .. } => "expired",
            FenceReason::TokenMismatch { .. } => "token_mismatch",
            FenceReason::Forbidden { .. } => "forbidden",
            FenceReason::GenerationChanged { .. } => "generation_changed",
            FenceReason::DeadlinePassed => "deadline_passed",
            FenceReason::Shutdown => "shutdown",
            FenceReason::SidecarRestarted => "sidecar_restarted",
            FenceReason::WrapperLost => "wrapper_lost",
        }
    }
}

impl fmt::Display for FenceReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FenceReason::Revoked { kind, reason, generation } => write!(
                f,
                "the {} lease was revoked ({reason}, generation {}): {}",
                kind.as_str(),
                generation.map_or_else(|| "unknown".into(), |g| g.to_string()),
                bloodraven_api::deploy::RevokeReason::parse(reason)
                    .map_or("stop", bloodraven_api::deploy::RevokeReason::advice)
            ),
            FenceReason::Expired { kind } => write!(f, "the {} lease expired (404)", kind.as_str()),
            FenceReason::TokenMismatch { kind } => {
                write!(f, "the {} lease token is no longer valid (403 token_mismatch)", kind.as_str())
            }
            FenceReason::Forbidden { kind, message } => {
                write!(f, "renewing the {} lease was refused (403): {message}", kind.as_str())
            }
            FenceReason::GenerationChanged { kind, granted, now } => {
                write!(f, "the topology generation of the {} lease moved from {granted} to {now}", kind.as_str())
            }
            FenceReason::DeadlinePassed => write!(f, "no renewal was confirmed before the fence deadline"),
            FenceReason::Shutdown => write!(f, "the sidecar was stopped (SIGTERM) while the migration ran"),
            FenceReason::SidecarRestarted => {
                write!(f, "the sidecar restarted and lost its lease tokens; the leases lapse by their TTL")
            }
            FenceReason::WrapperLost => write!(
                f,
                "the migration's wrapper ended without reporting the migration's exit (killed?); every process it left was killed"
            ),
        }
    }
}

/// One lease's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseClock {
    /// TTL of the grant, ms: the shorter of ours and the server's.
    pub ttl: Millis,
    /// Generation of the grant.
    pub generation: i64,
    /// Confirmed until (send time of the last acknowledged request + ttl).
    pub confirmed_until: Millis,
    /// When the next renewal is due.
    pub next_renewal: Millis,
    /// Whether a renewal is in flight (at most one per lease).
    pub in_flight: bool,
}

/// The heartbeat of both leases, and the fence decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    timing: Timing,
    migration: Option<LeaseClock>,
    hold: Option<LeaseClock>,
    fenced: Option<FenceReason>,
}

impl Heartbeat {
    /// A heartbeat with no lease yet.
    pub fn new(timing: Timing) -> Heartbeat {
        Heartbeat { timing, migration: None, hold: None, fenced: None }
    }

    /// The timing.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// The fence, once decided.
    pub fn fenced(&self) -> Option<&FenceReason> {
        self.fenced.as_ref()
    }

    /// The clock of `kind`, once granted.
    pub fn clock(&self, kind: LeaseKind) -> Option<&LeaseClock> {
        match kind {
            LeaseKind::Migration => self.migration.as_ref(),
            LeaseKind::FailoverHold => self.hold.as_ref(),
        }
    }

    fn clock_mut(&mut self, kind: LeaseKind) -> &mut Option<LeaseClock> {
        match kind {
            LeaseKind::Migration => &mut self.migration,
            LeaseKind::FailoverHold => &mut self.hold,
        }
    }

    /// The effective TTL of a grant: the shorter of ours and the server's.
    fn ttl_of(&self, ttl_seconds: u32) -> Millis {
        self.timing.ttl.min(u64::from(ttl_seconds) * 1000)
    }

    /// Records a grant of `kind` whose POST was sent at `sent_at`. A hold
    /// granted at another generation than the migration lease fences.
    pub fn granted(&mut self, kind: LeaseKind, sent_at: Millis, generation: i64, ttl_seconds: u32) {
        if self.fenced.is_some() {
            return;
        }
        let ttl = self.ttl_of(ttl_seconds);
        *self.clock_mut(kind) = Some(LeaseClock {
            ttl,
            generation,
            confirmed_until: sent_at.saturating_add(ttl),
            next_renewal: sent_at.saturating_add(self.timing.interval),
            in_flight: false,
        });
        if let (Some(m), Some(h)) = (self.migration, self.hold)
            && m.generation != h.generation
        {
            self.fence(FenceReason::GenerationChanged {
                kind: LeaseKind::FailoverHold,
                granted: m.generation,
                now: h.generation,
            });
        }
    }

    /// The leases are no longer ours to renew (released, or about to be).
    pub fn forget(&mut self, kind: LeaseKind) {
        *self.clock_mut(kind) = None;
    }

    /// The fence deadline: the earliest confirmed expiry minus the grace.
    /// `None` before any grant.
    /// The generation `kind` was granted at, while it is held.
    pub fn granted_generation(&self, kind: LeaseKind) -> Option<i64> {
        match kind {
            LeaseKind::Migration => self.migration.map(|c| c.generation),
            LeaseKind::FailoverHold => self.hold.map(|c| c.generation),
        }
    }

    pub fn deadline(&self) -> Option<Millis> {
        [self.migration, self.hold]
            .into_iter()
            .flatten()
            .map(|c| c.confirmed_until.saturating_sub(self.timing.grace))
            .min()
    }

    /// ms left before the fence deadline at `now` (0 when fenced or past).
    pub fn remaining(&self, now: Millis) -> Millis {
        if self.fenced.is_some() {
            return 0;
        }
        self.deadline().map_or(0, |d| d.saturating_sub(now))
    }

    fn fence(&mut self, reason: FenceReason) {
        if self.fenced.is_none() {
            self.fenced = Some(reason);
        }
    }

    /// Fences for `reason` (SIGTERM to the sidecar, a restart), unless already fenced.
    pub fn fence_now(&mut self, reason: FenceReason) {
        self.fence(reason);
    }

    /// Makes every lease not in flight due at `now` (a push signal said a
    /// lease may be gone: the renewal answer decides).
    pub fn renew_now(&mut self, now: Millis) {
        for kind in [LeaseKind::Migration, LeaseKind::FailoverHold] {
            if let Some(c) = self.clock_mut(kind).as_mut()
                && !c.in_flight
            {
                c.next_renewal = c.next_renewal.min(now);
            }
        }
    }

    /// Checks the deadline at `now`; returns the fence if there is one.
    pub fn tick(&mut self, now: Millis) -> Option<&FenceReason> {
        if self.fenced.is_none()
            && let Some(d) = self.deadline()
            && now >= d
        {
            self.fence(FenceReason::DeadlinePassed);
        }
        self.fenced.as_ref()
    }

    /// The leases whose renewal is due at `now` (none once fenced); marks
    /// them in flight. The caller sends one PUT for each.
    pub fn due(&mut self, now: Millis) -> Vec<LeaseKind> {
        if self.tick(now).is_some() {
            return Vec::new();
        }
        let mut out = Vec::new();
        for kind in [LeaseKind::Migration, LeaseKind::FailoverHold] {
            if let Some(c) = self.clock_mut(kind).as_mut()
                && !c.in_flight
                && now >= c.next_renewal
            {
                c.in_flight = true;
                out.push(kind);
            }
        }
        out
    }

    /// When something is next due (a renewal or the fence deadline); `None`
    /// when fenced or before any grant.
    pub fn next_wake(&self) -> Option<Millis> {
        if self.fenced.is_some() {
            return None;
        }
        let renewals =
            [self.migration, self.hold].into_iter().flatten().filter(|c| !c.in_flight).map(|c| c.next_renewal);
        renewals.chain(self.deadline()).min()
    }

    /// Applies the answer to the renewal of `kind` sent at `sent_at`,
    /// received at `now`. Returns the fence if there is one.
    pub fn renewed(
        &mut self,
        kind: LeaseKind,
        sent_at: Millis,
        answer: &RenewAnswer,
        now: Millis,
    ) -> Option<&FenceReason> {
        if self.fenced.is_some() {
            return self.fenced.as_ref();
        }
        let interval = self.timing.interval;
        let Some(clock) = self.clock_mut(kind).as_mut() else { return self.fenced.as_ref() };
        clock.in_flight = false;
        let fence = match answer {
            RenewAnswer::Renewed { generation } if *generation == clock.generation => {
                clock.confirmed_until = clock.confirmed_until.max(sent_at.saturating_add(clock.ttl));
                clock.next_renewal = sent_at.saturating_add(interval).max(now);
                None
            }
            RenewAnswer::Renewed { generation } => {
                Some(FenceReason::GenerationChanged { kind, granted: clock.generation, now: *generation })
            }
            RenewAnswer::Revoked { reason, generation } => {
                Some(FenceReason::Revoked { kind, reason: reason.clone(), generation: *generation })
            }
            RenewAnswer::Expired => Some(FenceReason::Expired { kind }),
            RenewAnswer::TokenMismatch => Some(FenceReason::TokenMismatch { kind }),
            RenewAnswer::Forbidden { message } => Some(FenceReason::Forbidden { kind, message: message.clone() }),
            RenewAnswer::Unstable { retry_after_seconds } => {
                clock.next_renewal = now.saturating_add(u64::from(*retry_after_seconds).max(1) * 1000);
                None
            }
            RenewAnswer::Failed { .. } => {
                clock.next_renewal = now.saturating_add(RETRY_BACKOFF_MS);
                None
            }
        };
        if let Some(f) = fence {
            self.fence(f);
        }
        self.tick(now)
    }
}

#[cfg(test)]
mod tests;
