//! The records the deploy-lease machine decides over (grants, slots,
//! tombstones, verification records, the group's facts) and the answers
//! it gives (refusals, outcomes).

use bloodraven_api::deploy::{DdlState, Holder, LeaseKind};
use jiff::{SignedDuration, Timestamp};

use super::RevokeReason;

/// A live or lapsed grant held in a slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The operation holding the slot.
    pub operation_id: String,
    /// Its MysqlDatabase name.
    pub instance: String,
    /// Hex SHA-256 of the current token.
    pub token_sha256: String,
    /// Topology generation at grant time.
    pub generation: i64,
    /// Last grant or renewal, on the operator's clock.
    pub renewed_at: Timestamp,
    /// TTL in seconds, in [5, 120].
    pub ttl_seconds: u32,
    /// Last reported DDL state.
    pub ddl_state: Option<DdlState>,
    /// Last reported revision.
    pub revision: Option<String>,
    /// `namespace/serviceAccount` the grant was made to; `None` for a grant
    /// stored before grants recorded their client (renewable with its
    /// token by any authorized caller, never repeatable by POST).
    pub client: Option<String>,
    /// Set when the grant was revoked (a migration grant only: a revoked
    /// hold is cleared at once). It keeps its slot until it lapses, so no
    /// other operation is granted the mutex while its client, which may not
    /// have heard of the revocation yet (partitioned, or between
    /// renewals), still runs within the deadline it was last confirmed. It
    /// never renews, never counts for a hold, and is never repeated.
    pub revoked: Option<RevokeReason>,
}

impl Grant {
    /// `renewed_at + ttl`.
    pub fn expires_at(&self) -> Timestamp {
        self.renewed_at
            .saturating_add(SignedDuration::from_secs(i64::from(self.ttl_seconds)))
            .unwrap_or(self.renewed_at)
    }

    /// Whether the grant is live at `now`.
    pub fn live(&self, now: Timestamp) -> bool {
        now < self.expires_at()
    }

    /// Whether the grant was made to `client` (a legacy grant was made to nobody known).
    pub(super) fn granted_to(&self, client: &str) -> bool {
        self.client.as_deref() == Some(client)
    }

    /// The holder as a `409 held` names it.
    pub fn holder(&self) -> Holder {
        Holder {
            operation_id: self.operation_id.clone(),
            instance: self.instance.clone(),
            expires_at: self.expires_at().to_string(),
        }
    }
}

/// The revocation record of one operation, kept until the group is deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tombstone {
    /// The revoked operation.
    pub operation_id: String,
    /// Its MysqlDatabase name.
    pub instance: String,
    /// Hex SHA-256 of the token it held (never the token).
    pub token_sha256: String,
    /// Why it was revoked.
    pub reason: RevokeReason,
    /// The group's generation at revocation.
    pub generation: i64,
    /// The DDL state last reported before revocation.
    pub ddl_state: Option<DdlState>,
    /// The revision last reported before revocation.
    pub revision: Option<String>,
    /// The client the revoked grant was made to (`None`: a grant stored
    /// before grants recorded it). A tombstone answers only that client:
    /// two tenants may pick the same operationId.
    pub client: Option<String>,
}

impl Tombstone {
    /// Whether this tombstone is about `client`'s operation (a tombstone of
    /// an unknown client is about everyone's).
    pub fn about(&self, client: &str) -> bool {
        self.client.as_deref().is_none_or(|c| c == client)
    }
}

/// What the store knows of the group when deciding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupFacts {
    /// Current `status.topologyGeneration` (None before bootstrap).
    pub generation: Option<i64>,
    /// `None` when stable, else why not.
    pub unstable_reason: Option<String>,
    /// The only instability is a planned failover deferred by a
    /// failover-hold: renewals go on (each renewal of the hold moves the
    /// deferral's retry time; docs/concepts.md, "What a hold defers, and
    /// what never reads a lease"); new grants still get `423 unstable`.
    pub deferring: bool,
}

/// The two slots of one group, as read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Slots {
    /// The migration mutex.
    pub migration: Option<Grant>,
    /// The failover-hold.
    pub hold: Option<Grant>,
}

impl Slots {
    /// The slot of `kind`.
    pub fn get(&self, kind: LeaseKind) -> Option<&Grant> {
        match kind {
            LeaseKind::Migration => self.migration.as_ref(),
            LeaseKind::FailoverHold => self.hold.as_ref(),
        }
    }

    /// The failover-hold, when it counts: live, and its operation holds a
    /// live migration lease (invariant 8).
    pub fn effective_hold(&self, now: Timestamp) -> Option<&Grant> {
        let hold = self.hold.as_ref().filter(|h| h.live(now))?;
        self.migration
            .as_ref()
            .filter(|m| m.live(now) && m.revoked.is_none() && m.operation_id == hold.operation_id)?;
        Some(hold)
    }

    /// The live grant of `kind` as it counts: for the hold, [`Slots::effective_hold`].
    pub fn live(&self, kind: LeaseKind, now: Timestamp) -> Option<&Grant> {
        match kind {
            LeaseKind::Migration => self.migration.as_ref().filter(|m| m.live(now)),
            LeaseKind::FailoverHold => self.effective_hold(now),
        }
    }

    /// Mutable access to the slot of `kind`.
    pub fn get_mut(&mut self, kind: LeaseKind) -> &mut Option<Grant> {
        match kind {
            LeaseKind::Migration => &mut self.migration,
            LeaseKind::FailoverHold => &mut self.hold,
        }
    }
}

/// Why a person must verify the schema: how the grant that had started DDL ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// It was revoked.
    Revoked(RevokeReason),
    /// It lapsed: no renewal within its TTL.
    Lapsed,
    /// Its holder released it without reporting `completed`: the run ended
    /// inside its DDL (the migration failed, or was stopped, after DDL
    /// began).
    Released,
}

impl Ending {
    /// The word stored and shown (`TopologyChanged`, `OperatorRevoked`, `Lapsed`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Ending::Revoked(r) => r.as_str(),
            Ending::Lapsed => "Lapsed",
            Ending::Released => "ReleasedInDdl",
        }
    }

    /// Parses [`Ending::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "Lapsed" => Some(Ending::Lapsed),
            "ReleasedInDdl" => Some(Ending::Released),
            _ => RevokeReason::parse(s).map(Ending::Revoked),
        }
    }
}

/// An operation that lost its lease after reporting `ddlState: started`
/// (invariant 9): the group needs `SchemaVerificationRequired` until a
/// person says the schema was verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verification {
    /// The operation.
    pub operation_id: String,
    /// Its MysqlDatabase name.
    pub instance: String,
    /// The revision it last reported, if any.
    pub revision: Option<String>,
    /// How its lease ended.
    pub ending: Ending,
    /// The group's topology generation when it ended.
    pub generation: i64,
    /// The client its grant was made to, if recorded.
    pub client: Option<String>,
}

/// Why an operation holds no live lease of a kind (`404 expired`), so the
/// answer says what happened instead of "expired" for a lease that never was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Absence {
    /// The kind asked about.
    pub kind: LeaseKind,
    /// The operation asked about.
    pub operation_id: String,
    /// When its grant, still in the slot, lapsed; `None` when the slot holds
    /// no grant of this operation (none was made, it was released, or it
    /// lapsed and another operation took the slot).
    pub lapsed_at: Option<Timestamp>,
    /// A failover-hold that ended with its operation's migration lease.
    pub mutex_ended: bool,
}

impl Absence {
    pub(super) fn of(slots: &Slots, kind: LeaseKind, operation_id: &str) -> Refusal {
        let lapsed_at = slots.get(kind).filter(|g| g.operation_id == operation_id).map(Grant::expires_at);
        Refusal::Expired(Absence { kind, operation_id: operation_id.to_owned(), lapsed_at, mutex_ended: false })
    }

    pub(super) fn mutex_ended(operation_id: &str) -> Refusal {
        Refusal::Expired(Absence {
            kind: LeaseKind::FailoverHold,
            operation_id: operation_id.to_owned(),
            lapsed_at: None,
            mutex_ended: true,
        })
    }
}

/// A refusal shared by every call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `409 held`: the lease of `kind` is held by `holder`.
    Held {
        /// The kind that is held.
        kind: LeaseKind,
        /// Who holds it.
        holder: Holder,
    },
    /// `409 revoked`.
    Revoked(Box<Tombstone>),
    /// `423 unstable`.
    Unstable {
        /// Why the group is not stable.
        reason: String,
    },
    /// `403 forbidden` (a hold without the mutex).
    Forbidden(String),
    /// `404 expired`: the operation holds no live lease of that kind.
    Expired(Absence),
    /// `403 token_mismatch`.
    TokenMismatch,
    /// `409 schema_verification_required`: the instance's schema awaits a
    /// person (this verification record).
    VerificationRequired(Box<Verification>),
}

/// The outcome of a decision: the new slots and tombstones to write, and the answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome<T> {
    /// The slots to write (unchanged when nothing is written).
    pub slots: Slots,
    /// Tombstones to create.
    pub new_tombstones: Vec<Tombstone>,
    /// Schema verifications to record.
    pub verifications: Vec<Verification>,
    /// The answer to the caller.
    pub answer: Result<T, Refusal>,
}

/// A successful POST.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Granted {
    /// The grant written.
    pub grant: Grant,
    /// True for 201 (new), false for 200 (repeat with a rotated token).
    pub created: bool,
}
