//! The deploy-lease state machine: pure decisions over one group's two
//! slots (`migration`, `failover-hold`) and its tombstones. The store
//! (`store.rs`) reads the slots, asks for a decision, and writes the result
//! with a resourceVersion precondition; a conflict re-reads and decides again.
//!
//! Invariants (docs/concepts.md, "Leases"; property-tested in `machine/tests.rs`):
//! 1. At most one live migration grant per group.
//! 2. A failover-hold is granted only to the live migration holder with the
//!    same operationId and instance.
//! 3. A grant is never returned already expired: its expiry is `now + ttl`, ttl ∈ [5, 120].
//! 4. A revoked operation stays revoked: every later POST, PUT or DELETE of
//!    that operationId answers `revoked`, even after another operation took
//!    the mutex.
//! 5. A renewal succeeds only with the current token, on a live lease, at
//!    the generation it was granted under, while the group is stable; an
//!    `unstable` answer never moves the deadline.
//! 6. A repeated POST of the holder's operation rotates the token: the old
//!    one stops working. It is honoured only for the client the grant was
//!    made to; any other caller gets `held`, as a second pipeline would.
//! 7. A grant acts only for the client it was granted to: renewal and
//!    release by another caller are refused before the token is looked at.
//! 8. A hold never outlives its operation's mutex: a failover-hold counts
//!    only while the same operation holds a live migration lease; its
//!    renewal is refused (and the hold cleared) once it does not, so the
//!    mutex holder can always take the hold.
//! 9. A grant that ends (revoked, or lapsed and swept or replaced) after
//!    reporting `ddlState: started` yields a [`Verification`]: a person
//!    must verify the schema (condition `SchemaVerificationRequired`, docs/runbook.md).
//! 10. No two confirmed migration grants of a group overlap in time: a
//!     revoked migration grant keeps the mutex (`409 held` to any other
//!     operation) until the deadline its client was last given, since that
//!     client may run until then without hearing of the revocation.

use bloodraven_api::deploy::{DdlState, LeaseKind};
use jiff::Timestamp;

/// Why leases were revoked: the contract's type.
pub use bloodraven_api::deploy::RevokeReason;

/// Seconds a client is told to wait after `423 unstable`.
pub use bloodraven_api::deploy::UNSTABLE_RETRY_AFTER_SECONDS;

mod records;

pub use records::{Absence, Ending, Grant, Granted, GroupFacts, Outcome, Refusal, Slots, Tombstone, Verification};

fn refuse<T>(slots: &Slots, refusal: Refusal) -> Outcome<T> {
    Outcome { slots: slots.clone(), new_tombstones: Vec::new(), verifications: Vec::new(), answer: Err(refusal) }
}

/// The DDL state an operation reported on any of its grants in `slots`
/// (`started` wins: it is the one that needs a person).
fn ddl_of(slots: &Slots, operation_id: &str) -> Option<DdlState> {
    let states = [slots.migration.as_ref(), slots.hold.as_ref()]
        .into_iter()
        .flatten()
        .filter(|g| g.operation_id == operation_id)
        .filter_map(|g| g.ddl_state);
    states.reduce(|a, b| if b == DdlState::Started { b } else { a })
}

fn verification(grant: &Grant, ending: Ending, generation: i64) -> Verification {
    Verification {
        operation_id: grant.operation_id.clone(),
        instance: grant.instance.clone(),
        revision: grant.revision.clone(),
        ending,
        generation,
        client: grant.client.clone(),
    }
}

/// Clears the grants of every operation that lost its mutex (its
/// migration lease lapsed, or only an orphaned hold is left) after
/// reporting `ddlState: started` on any of its grants, and returns the
/// verifications they need. Run by the reconciler on each probe, and by
/// every decision that could overwrite such a grant, so the loss is never
/// missed. Other lost grants are left: they are inert and get overwritten.
pub fn sweep(slots: &Slots, generation: i64, now: Timestamp) -> (Slots, Vec<Verification>) {
    let mut out = slots.clone();
    let mut found: Vec<Verification> = Vec::new();
    let ops: Vec<Grant> = [slots.migration.as_ref(), slots.hold.as_ref()].into_iter().flatten().cloned().collect();
    for grant in ops {
        let op = grant.operation_id.as_str();
        let mutex_live = slots.migration.as_ref().is_some_and(|m| m.operation_id == op && m.live(now));
        // A revoked grant's verification was recorded when it was revoked.
        if mutex_live || grant.revoked.is_some() || ddl_of(slots, op) != Some(DdlState::Started) {
            continue;
        }
        if !found.iter().any(|v| v.operation_id == op) {
            found.push(verification(&grant, Ending::Lapsed, generation));
        }
        for kind in [LeaseKind::Migration, LeaseKind::FailoverHold] {
            let slot = out.get_mut(kind);
            if slot.as_ref().is_some_and(|g| g.operation_id == op) {
                *slot = None;
            }
        }
    }
    (out, found)
}

/// Revokes every live grant in `slots` whose generation differs from
/// `generation` (TopologyChanged), or every live grant (OperatorRevoked).
/// Returns the slots after it and the tombstones to write. A revoked hold
/// is cleared (it must never defer a switchover); a revoked migration
/// grant keeps its slot, marked, until it lapses (invariant 10).
pub fn revoke(slots: &Slots, reason: RevokeReason, generation: i64, now: Timestamp) -> (Slots, Vec<Tombstone>) {
    let mut out = slots.clone();
    let mut tombstones = Vec::new();
    for kind in [LeaseKind::Migration, LeaseKind::FailoverHold] {
        let slot = out.get_mut(kind);
        let Some(grant) = slot.as_ref().filter(|g| g.revoked.is_none()) else { continue };
        let affected = match reason {
            RevokeReason::TopologyChanged => grant.generation != generation,
            RevokeReason::OperatorRevoked => true,
        };
        if !affected || !grant.live(now) {
            continue;
        }
        if !tombstones.iter().any(|t: &Tombstone| t.operation_id == grant.operation_id) {
            tombstones.push(Tombstone {
                operation_id: grant.operation_id.clone(),
                instance: grant.instance.clone(),
                token_sha256: grant.token_sha256.clone(),
                reason,
                generation,
                ddl_state: ddl_of(slots, &grant.operation_id),
                revision: grant.revision.clone(),
                client: grant.client.clone(),
            });
        }
        match kind {
            LeaseKind::Migration => {
                if let Some(g) = slot.as_mut() {
                    g.revoked = Some(reason);
                }
            }
            LeaseKind::FailoverHold => *slot = None,
        }
    }
    (out, tombstones)
}

/// The verifications that `tombstones` need: those of operations that had
/// reported `ddlState: started`.
pub fn verifications_of(tombstones: &[Tombstone]) -> Vec<Verification> {
    tombstones
        .iter()
        .filter(|t| t.ddl_state == Some(DdlState::Started))
        .map(|t| Verification {
            operation_id: t.operation_id.clone(),
            instance: t.instance.clone(),
            revision: t.revision.clone(),
            ending: Ending::Revoked(t.reason),
            generation: t.generation,
            client: t.client.clone(),
        })
        .collect()
}

/// A POST as the caller made it.
#[derive(Clone, Copy, Debug)]
pub struct CreateRequest<'a> {
    /// The lease kind asked for.
    pub kind: LeaseKind,
    /// The operation.
    pub operation_id: &'a str,
    /// Its MysqlDatabase name (already authorized for the caller).
    pub instance: &'a str,
    /// Requested TTL in seconds (clamped to [5, 120]).
    pub ttl_seconds: u32,
    /// The caller, `namespace/serviceAccount`.
    pub client: &'a str,
    /// SHA-256 of the fresh token the store hands out if this grants.
    pub token_sha256: &'a str,
    /// The group's schemas awaiting verification, as stored before this
    /// request: a new migration lease for one of their instances is refused.
    pub awaiting: &'a [Verification],
}

/// Decides a POST.
pub fn create(
    slots: &Slots,
    tombstone: Option<&Tombstone>,
    facts: &GroupFacts,
    req: &CreateRequest<'_>,
    now: Timestamp,
) -> Outcome<Granted> {
    let CreateRequest { kind, operation_id, instance, ttl_seconds, client, token_sha256, awaiting } = *req;
    if let Some(t) = tombstone.filter(|t| t.about(client)) {
        return refuse(slots, Refusal::Revoked(Box::new(t.clone())));
    }
    let (Some(generation), None) = (facts.generation, facts.unstable_reason.as_ref()) else {
        let reason = facts.unstable_reason.clone().unwrap_or_else(|| "BootstrapPending".into());
        return refuse(slots, Refusal::Unstable { reason });
    };
    // A grant of an older generation is revoked before anything else, and
    // a lost grant that had started DDL is recorded before it can be overwritten.
    let (slots_now, tombstones) = revoke(slots, RevokeReason::TopologyChanged, generation, now);
    let (mut slots_now, mut verifications) = sweep(&slots_now, generation, now);
    verifications.extend(verifications_of(&tombstones));
    let answer = |slots_now: Slots, tombstones: Vec<Tombstone>, verifications, answer| Outcome {
        slots: slots_now,
        new_tombstones: tombstones,
        verifications,
        answer,
    };
    if let Some(t) = tombstones.iter().find(|t| t.operation_id == operation_id && t.about(client)).cloned() {
        return answer(slots_now, tombstones, verifications, Err(Refusal::Revoked(Box::new(t))));
    }
    if kind == LeaseKind::FailoverHold {
        let holds_mutex = slots_now.live(LeaseKind::Migration, now).is_some_and(|m| {
            m.revoked.is_none() && m.operation_id == operation_id && m.instance == instance && m.granted_to(client)
        });
        if !holds_mutex {
            let why = format!(
                "a failover-hold is granted only to the current migration holder with the same operationId and instance; take the migration lease for operation {operation_id} first"
            );
            return answer(slots_now, tombstones, verifications, Err(Refusal::Forbidden(why)));
        }
    }
    let current = slots_now.live(kind, now).cloned();
    let created = match &current {
        Some(g)
            if g.revoked.is_some()
                || g.operation_id != operation_id
                || g.instance != instance
                || !g.granted_to(client) =>
        {
            // A schema a revoked holder left awaiting a person is the answer
            // a pipeline can act on; the revoked grant lapses by itself.
            let awaited = awaiting.iter().chain(verifications.iter()).find(|v| v.instance == instance).cloned();
            if let Some(v) = awaited.filter(|_| kind == LeaseKind::Migration && g.revoked.is_some()) {
                return answer(slots_now, tombstones, verifications, Err(Refusal::VerificationRequired(Box::new(v))));
            }
            return answer(slots_now, tombstones, verifications, Err(Refusal::Held { kind, holder: g.holder() }));
        }
        Some(_) => false,
        None => true,
    };
    // A schema left mid-DDL needs a person before any new migration of its
    // instance (a repeat of a live grant is not a new migration): one
    // recorded before, or one this very request's sweep just recorded.
    if kind == LeaseKind::Migration
        && created
        && let Some(v) = awaiting.iter().chain(verifications.iter()).find(|v| v.instance == instance).cloned()
    {
        return answer(slots_now, tombstones, verifications, Err(Refusal::VerificationRequired(Box::new(v))));
    }
    let previous_ddl = current.as_ref().and_then(|g| g.ddl_state);
    let previous_revision = current.as_ref().and_then(|g| g.revision.clone());
    let grant = Grant {
        operation_id: operation_id.to_owned(),
        instance: instance.to_owned(),
        token_sha256: token_sha256.to_owned(),
        generation,
        renewed_at: now,
        ttl_seconds: bloodraven_api::deploy::clamp_ttl(ttl_seconds),
        ddl_state: previous_ddl,
        revision: previous_revision,
        client: Some(client.to_owned()),
        revoked: None,
    };
    *slots_now.get_mut(kind) = Some(grant.clone());
    // A new mutex (not a repeat): any hold left, this operation's own from
    // before its mutex lapsed included, stopped counting then; drop it.
    if kind == LeaseKind::Migration && created {
        slots_now.hold = None;
    }
    answer(slots_now, tombstones, verifications, Ok(Granted { grant, created }))
}

/// Who renews or releases: the caller and the instances it may act for now.
#[derive(Clone, Copy, Debug)]
pub struct Actor<'a> {
    /// The caller, `namespace/serviceAccount`.
    pub client: &'a str,
    /// Names of the MysqlDatabases of the group the caller may act for.
    pub instances: &'a std::collections::BTreeSet<String>,
}

/// The live grant of `kind` that `operation_id` holds, if `actor` may act
/// for it and shows its token; or why not: revoked (tombstone), expired (no
/// live grant of that operation), forbidden (granted to another client, or
/// the client is no longer listed for its instance), or a token mismatch.
/// Shared by renewal and release.
fn held<'a>(
    slots: &'a Slots,
    tombstone: Option<&Tombstone>,
    kind: LeaseKind,
    operation_id: &str,
    actor: &Actor<'_>,
    token_sha256: &str,
    now: Timestamp,
) -> Result<&'a Grant, Refusal> {
    if let Some(t) = tombstone.filter(|t| t.about(actor.client)) {
        return Err(Refusal::Revoked(Box::new(t.clone())));
    }
    let grant = slots
        .get(kind)
        .filter(|g| g.live(now) && g.revoked.is_none() && g.operation_id == operation_id)
        .ok_or_else(|| Absence::of(slots, kind, operation_id))?;
    if grant.client.as_deref().is_some_and(|c| c != actor.client) {
        return Err(Refusal::Forbidden(format!(
            "this {} lease of operation {operation_id} was granted to another deployment client",
            kind.as_str()
        )));
    }
    if !actor.instances.contains(&grant.instance) {
        return Err(Refusal::Forbidden(format!(
            "the caller is no longer a deployment client of MysqlDatabase {}",
            grant.instance
        )));
    }
    if !constant_time_eq(grant.token_sha256.as_bytes(), token_sha256.as_bytes()) {
        return Err(Refusal::TokenMismatch);
    }
    Ok(grant)
}

/// When the group's generation has moved past `grant`'s: the slots and
/// tombstones of revoking every grant (`TopologyChanged`), and what the
/// caller is answered (`Revoked` with its tombstone, or `Expired`). Shared
/// by renewal and watch, so a watch answers exactly what a renewal would.
fn generation_moved(
    slots: &Slots,
    facts: &GroupFacts,
    kind: LeaseKind,
    grant: &Grant,
    operation_id: &str,
    actor: &Actor<'_>,
    now: Timestamp,
) -> Option<(Slots, Vec<Tombstone>, Refusal)> {
    let generation = facts.generation.filter(|g| *g != grant.generation)?;
    let (out, tombstones) = revoke(slots, RevokeReason::TopologyChanged, generation, now);
    let t = tombstones.iter().find(|t| t.operation_id == operation_id && t.about(actor.client)).cloned();
    let refusal = t.map_or_else(|| Absence::of(&out, kind, operation_id), |t| Refusal::Revoked(Box::new(t)));
    Some((out, tombstones, refusal))
}

/// What a renewal reports of the migration (each optional: kept as last
/// reported when absent).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// `ddlState`.
    pub ddl_state: Option<DdlState>,
    /// `revision`.
    pub revision: Option<String>,
}

/// Decides a PUT (renewal).
#[allow(clippy::too_many_arguments)]
pub fn renew(
    slots: &Slots,
    tombstone: Option<&Tombstone>,
    facts: &GroupFacts,
    kind: LeaseKind,
    operation_id: &str,
    actor: &Actor<'_>,
    token_sha256: &str,
    report: &Progress,
    now: Timestamp,
) -> Outcome<Grant> {
    let grant = match held(slots, tombstone, kind, operation_id, actor, token_sha256, now) {
        Ok(g) => g,
        Err(r) => return refuse(slots, r),
    };
    if let Some((out, tombstones, refusal)) = generation_moved(slots, facts, kind, grant, operation_id, actor, now) {
        let verifications = verifications_of(&tombstones);
        return Outcome { slots: out, new_tombstones: tombstones, verifications, answer: Err(refusal) };
    }
    if kind == LeaseKind::FailoverHold && slots.effective_hold(now).is_none() {
        // The operation's mutex lapsed or was taken: the hold ends with it
        // (invariant 8), recorded if the operation had started DDL.
        let (mut out, verifications) = sweep(slots, grant.generation, now);
        out.hold = None;
        return Outcome {
            slots: out,
            new_tombstones: Vec::new(),
            verifications,
            answer: Err(Absence::mutex_ended(operation_id)),
        };
    }
    if let Some(reason) = facts
        .unstable_reason
        .clone()
        .filter(|_| !facts.deferring)
        .or_else(|| facts.generation.is_none().then(|| "BootstrapPending".into()))
    {
        return refuse(slots, Refusal::Unstable { reason });
    }
    let mut renewed = grant.clone();
    renewed.renewed_at = now;
    if report.ddl_state.is_some() {
        renewed.ddl_state = report.ddl_state;
    }
    if report.revision.is_some() {
        renewed.revision.clone_from(&report.revision);
    }
    let mut out = slots.clone();
    *out.get_mut(kind) = Some(renewed.clone());
    Outcome { slots: out, new_tombstones: Vec::new(), verifications: Vec::new(), answer: Ok(renewed) }
}

/// Decides a watch (push revocation): the caller's grant of `kind` while it
/// is still the caller's, exactly as a renewal would find it, without
/// writing anything; or the refusal the renewal would answer now: `Revoked`
/// (a tombstone, or a generation that moved past the grant's: the revocation
/// the reconciler is about to write), `Expired` (lapsed, released, or a hold
/// whose mutex is gone), `TokenMismatch` or `Forbidden`. An unstable group
/// does not end a watch: the lease is still held (the renewal's `423` is
/// about extending it, not about holding it).
#[allow(clippy::too_many_arguments)]
pub fn watch<'a>(
    slots: &'a Slots,
    tombstone: Option<&Tombstone>,
    facts: &GroupFacts,
    kind: LeaseKind,
    operation_id: &str,
    actor: &Actor<'_>,
    token_sha256: &str,
    now: Timestamp,
) -> Result<&'a Grant, Refusal> {
    let grant = held(slots, tombstone, kind, operation_id, actor, token_sha256, now)?;
    if let Some((_, _, refusal)) = generation_moved(slots, facts, kind, grant, operation_id, actor, now) {
        return Err(refusal);
    }
    if kind == LeaseKind::FailoverHold && slots.effective_hold(now).is_none() {
        return Err(Absence::mutex_ended(operation_id));
    }
    Ok(grant)
}

/// Decides a DELETE (release); answers the grant released. Releasing the
/// migration mutex also releases that operation's failover-hold.
///
/// Releasing the migration lease of an operation whose last `ddlState` is
/// `started` (not `completed`) ends it inside its DDL, whatever ended the
/// run: a verification record (`ReleasedInDdl`) at `generation`, the group's
/// now.
#[allow(clippy::too_many_arguments)]
pub fn release(
    slots: &Slots,
    tombstone: Option<&Tombstone>,
    kind: LeaseKind,
    operation_id: &str,
    actor: &Actor<'_>,
    token_sha256: &str,
    generation: i64,
    now: Timestamp,
) -> Outcome<Grant> {
    let released = match held(slots, tombstone, kind, operation_id, actor, token_sha256, now) {
        Ok(g) => g.clone(),
        Err(r) => return refuse(slots, r),
    };
    let verifications = if kind == LeaseKind::Migration && ddl_of(slots, operation_id) == Some(DdlState::Started) {
        vec![verification(&released, Ending::Released, generation)]
    } else {
        Vec::new()
    };
    let mut out = slots.clone();
    *out.get_mut(kind) = None;
    if kind == LeaseKind::Migration && out.hold.as_ref().is_some_and(|h| h.operation_id == operation_id) {
        out.hold = None;
    }
    Outcome { slots: out, new_tombstones: Vec::new(), verifications, answer: Ok(released) }
}

/// Compares two byte strings in time that depends only on their lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

#[cfg(test)]
mod tests;
