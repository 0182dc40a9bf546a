//! The deploy-lease service: reads the group and its slots, asks the state
//! machine, writes the outcome with compare-and-swap, and retries on a
//! conflict. Calls for one group are also serialised in-process, so the
//! leader does not race itself; the CAS is what protects against a second
//! process (an old leader, a replica).
//!
//! This is the lease domain's interface: the HTTP handlers (`router`) and
//! the failover-group reconciler both call it, never the store directly.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bloodraven_api::deploy::LeaseKind;
use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::{ObjectRef, Store as Reflector};

use super::store::{GroupKey, Pending, Read, Store, StoreError, token_sha256};
use super::watch::Changes;
use crate::tolerant::{ReadError, Tolerant};
use bloodraven_core::lease::machine::{
    self, Actor, CreateRequest, Grant, Granted, GroupFacts, Outcome, Refusal, RevokeReason, Slots, Tombstone,
    Verification,
};

/// How often a decision is retried after a concurrent write.
const CAS_ATTEMPTS: usize = 8;

/// Errors of the service.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ServiceError {
    /// No MysqlFailoverGroup of that name.
    #[error("failover group not found")]
    GroupNotFound,
    /// The state machine refused.
    #[error("refused: {0:?}")]
    Refused(Refusal),
    /// Too many concurrent writers; the caller may retry.
    #[error("deploy leases of the group kept changing; retry")]
    Contention,
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Reading the group failed.
    #[error("failed to read the failover group: {0}")]
    Kube(#[from] kube::Error),
}

/// A group as the deploy API sees it.
#[derive(Clone, Debug)]
pub(crate) struct GroupState {
    /// The group object.
    pub group: MysqlFailoverGroup,
    /// Generation and stability.
    pub facts: GroupFacts,
    /// Its slots.
    pub slots: Slots,
    /// Its schemas awaiting verification, oldest first.
    pub verifications: Vec<Verification>,
}

/// What one maintenance pass of the reconciler did.
#[derive(Clone, Debug, Default)]
pub(crate) struct Maintained {
    /// Operations revoked (one tombstone each).
    pub revoked: Vec<Tombstone>,
}

/// The deploy-lease service.
#[derive(Clone, Debug)]
pub(crate) struct Service {
    store: Store,
    /// Groups are read tolerantly: one that does not decode is not found.
    groups: Tolerant,
    /// A watch cache of groups, for the renewal fast path's generation check.
    cache: Option<Reflector<MysqlFailoverGroup>>,
    locks: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
    /// Bumped after every write this service makes, per group (push revocation).
    changes: Changes,
}

/// Generation and stability of a group, from its status: `stable` and
/// `unstableReason` as the observer wrote them, except that a planned
/// failover whose phase is written and not final makes a stable group
/// unstable (`OperationInProgress`) at once. The engine writes its phase
/// before it touches a site and the observer marks the group right after;
/// no grant slips in between the two writes (a phase this operator does not
/// know, written by hand, is no operation). A request shown `Deferred` defers
/// only while the observer says the operation is what holds the group: one
/// the engine no longer drives (the group in `DecisionConflict`, say) keeps
/// no lease alive.
pub(crate) fn facts_of(group: &MysqlFailoverGroup) -> GroupFacts {
    use bloodraven_api::v1alpha1::reason::OPERATION_IN_PROGRESS;
    // Every operation has a `Deferred` phase, spelled alike.
    // A restore waiting for a person's re-clone is decided: deploys go on.
    let running = crate::failover::decision::operations_in_flight(group)
        .into_iter()
        .map(|(_, _, phase)| phase)
        .find(|phase| phase != "AwaitingReclone");
    let status = group.status.clone().unwrap_or_default();
    let unstable_reason = match status.stable {
        Some(true) => running.as_ref().map(|_| OPERATION_IN_PROGRESS.to_owned()),
        _ => Some(status.unstable_reason.unwrap_or_else(|| "NotObserved".to_owned())),
    };
    let deferring = running.as_deref() == Some("Deferred") && unstable_reason.as_deref() == Some(OPERATION_IN_PROGRESS);
    GroupFacts { generation: status.topology_generation, unstable_reason, deferring }
}

/// Now, to the microsecond: a Lease's `renewTime` keeps microseconds, so a
/// grant's `expiresAt` reads back exactly as it was answered.
fn now_micros() -> Timestamp {
    let now = Timestamp::now();
    Timestamp::from_microsecond(now.as_microsecond()).unwrap_or(now)
}

/// A fresh random token: 32 bytes as 64 hex characters.
fn new_token() -> String {
    use std::fmt::Write;
    rand::random::<[u8; 32]>().iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

impl Service {
    /// A service over `store`, reading groups with `groups`.
    pub(crate) fn new(store: Store, groups: Tolerant) -> Self {
        Service { store, groups, cache: None, locks: Arc::default(), changes: Changes::default() }
    }

    /// Uses `cache` for the group's generation and stability on the renewal
    /// fast path. A cache lagging a generation change by a watch delay is
    /// covered by the reconciler, which revokes on every change it sees.
    #[must_use]
    pub(crate) fn with_group_cache(mut self, cache: Reflector<MysqlFailoverGroup>) -> Self {
        self.cache = Some(cache);
        self
    }

    fn lock(&self, group: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        locks.entry(group.to_owned()).or_default().clone()
    }

    async fn group(&self, name: &str) -> Result<MysqlFailoverGroup, ServiceError> {
        // A group that does not decode cannot be served: answered as not
        // found (404 group_not_found), never as a 500 carrying the object.
        match self.groups.get::<MysqlFailoverGroup>(None, name).await {
            Ok(Some(group)) => Ok(group),
            Ok(None) | Err(ReadError::Invalid(_)) => Err(ServiceError::GroupNotFound),
            Err(ReadError::Kube(err)) => Err(ServiceError::Kube(err)),
        }
    }

    /// The group, its facts and its slots (for GET).
    pub(crate) async fn state(&self, name: &str) -> Result<GroupState, ServiceError> {
        let group = self.group(name).await?;
        let key = GroupKey::of(&group);
        let (read, pending) = tokio::try_join!(self.store.read(&key), self.store.verifications_listed(&key))?;
        let verifications = pending.into_iter().map(|p| p.verification).collect();
        Ok(GroupState { facts: facts_of(&group), group, slots: read.slots, verifications })
    }

    /// Runs `decide` on a fresh read until its outcome is written;
    /// `operation` (client, operationId) names the tombstone to read.
    async fn transact<T>(
        &self,
        group: &str,
        operation: Option<(&str, &str)>,
        decide: impl Fn(&Read, Option<&Tombstone>, &GroupFacts, Timestamp) -> Outcome<T>,
    ) -> Result<T, ServiceError> {
        let lock = self.lock(group);
        let _guard = lock.lock().await;
        for _ in 0..CAS_ATTEMPTS {
            // One round trip of reads, not three (the group, its slots, the
            // tombstone): the names depend on the group's name alone, and
            // ownership is judged once the group (its UID) is known.
            let tombstones = async {
                match operation {
                    Some((client, op)) => self.store.read_tombstones(group, client, op).await.map(Some),
                    None => Ok(None),
                }
            };
            let (g, (migration, hold), stored) = tokio::try_join!(
                async { self.group(group).await },
                async { self.store.read_slots(group).await.map_err(ServiceError::from) },
                async { tombstones.await.map_err(ServiceError::from) },
            )?;
            let key = GroupKey::of(&g);
            let facts = facts_of(&g);
            let read = Read::owned(&key, migration, hold);
            self.store.remember(&key, &read);
            let tombstone = match (operation, stored) {
                (Some((client, op)), Some(stored)) => crate::lease::store::owned_tombstone(&key, client, op, stored),
                _ => None,
            };
            let outcome = decide(&read, tombstone.as_ref(), &facts, now_micros());
            match self.store.write(&key, &read, &outcome.slots, &outcome.new_tombstones, &outcome.verifications).await {
                Ok(()) => {
                    if outcome.slots != read.slots || !outcome.new_tombstones.is_empty() {
                        self.changes.changed(group);
                    }
                    return outcome.answer.map_err(ServiceError::Refused);
                }
                // Someone wrote since the read: decide again on a fresh one.
                Err(StoreError::Conflict) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Err(ServiceError::Contention)
    }

    /// POST: grants (or re-grants) a lease to `client`; returns the grant and its token.
    pub(crate) async fn create(
        &self,
        group: &str,
        kind: LeaseKind,
        operation_id: &str,
        instance: &str,
        ttl_seconds: u32,
        client: &str,
    ) -> Result<(Granted, String), ServiceError> {
        let token = new_token();
        let hash = token_sha256(&token);
        // Read once, before the transaction: a record is only ever added by
        // a lease's end, which the transaction's own sweep also sees.
        let awaiting: Vec<Verification> = if kind == LeaseKind::Migration {
            let g = self.group(group).await?;
            self.store.verifications_listed(&GroupKey::of(&g)).await?.into_iter().map(|p| p.verification).collect()
        } else {
            Vec::new()
        };
        let req = CreateRequest {
            kind,
            operation_id,
            instance,
            ttl_seconds,
            client,
            token_sha256: &hash,
            awaiting: &awaiting,
        };
        let granted = self
            .transact(group, Some((client, operation_id)), |read, tomb, facts, now| {
                machine::create(&read.slots, tomb, facts, &req, now)
            })
            .await?;
        Ok((granted, token))
    }

    /// PUT: renews a lease for `actor`. The common case (a live lease of
    /// this operation, granted to this caller, the right token, an
    /// unchanged generation, a stable group) costs one compare-and-swap
    /// write against the Leases as this process last saw them; anything
    /// else, a failed CAS included, takes the full path, which reads both
    /// slots, the group and the tombstone.
    pub(crate) async fn renew(
        &self,
        group: &str,
        kind: LeaseKind,
        operation_id: &str,
        actor: &Actor<'_>,
        token: &str,
        report: &machine::Progress,
    ) -> Result<Grant, ServiceError> {
        let hash = token_sha256(token);
        if let Some(grant) = self.renew_fast(group, kind, operation_id, actor, &hash, report).await? {
            return Ok(grant);
        }
        self.transact(group, Some((actor.client, operation_id)), |read, tomb, facts, now| {
            machine::renew(&read.slots, tomb, facts, kind, operation_id, actor, &hash, report, now)
        })
        .await
    }

    async fn renew_fast(
        &self,
        group: &str,
        kind: LeaseKind,
        operation_id: &str,
        actor: &Actor<'_>,
        hash: &str,
        report: &machine::Progress,
    ) -> Result<Option<Grant>, ServiceError> {
        let Some(cache) = &self.cache else { return Ok(None) };
        let Some(cached) = cache.get(&ObjectRef::new(group)) else { return Ok(None) };
        let facts = facts_of(&cached);
        let key = GroupKey::of(&cached);
        let lock = self.lock(group);
        let _guard = lock.lock().await;
        let read = if let Some(read) = self.store.remembered(&key) {
            read
        } else {
            let read = self.store.read(&key).await?;
            self.store.remember(&key, &read);
            read
        };
        let now = now_micros();
        // Only the plain case: anything else is decided on a full read.
        let fits = read.slots.live(kind, now).is_some_and(|g| {
            g.operation_id == operation_id
                && machine::constant_time_eq(g.token_sha256.as_bytes(), hash.as_bytes())
                && facts.generation == Some(g.generation)
                && (facts.unstable_reason.is_none() || facts.deferring)
        });
        if !fits {
            return Ok(None);
        }
        let outcome = machine::renew(&read.slots, None, &facts, kind, operation_id, actor, hash, report, now);
        let Ok(grant) = outcome.answer else { return Ok(None) };
        match self.store.write(&key, &read, &outcome.slots, &[], &[]).await {
            Ok(()) => {
                self.changes.changed(group);
                Ok(Some(grant))
            }
            Err(StoreError::Conflict) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// DELETE: releases a lease (the mutex takes the operation's hold with
    /// it); returns the grant released.
    pub(crate) async fn release(
        &self,
        group: &str,
        kind: LeaseKind,
        operation_id: &str,
        actor: &Actor<'_>,
        token: &str,
    ) -> Result<Grant, ServiceError> {
        let hash = token_sha256(token);
        self.transact(group, Some((actor.client, operation_id)), |read, tomb, facts, now| {
            machine::release(&read.slots, tomb, kind, operation_id, actor, &hash, facts.generation.unwrap_or(0), now)
        })
        .await
    }

    /// The reconciler's pass over a group's leases: revokes grants of an
    /// older generation (`TopologyChanged`), every live grant when
    /// `operator_revoke` (`OperatorRevoked`), and sweeps lapsed grants that
    /// had started DDL into verification records.
    pub(crate) async fn maintain(&self, group: &str, operator_revoke: bool) -> Result<Maintained, ServiceError> {
        self.transact(group, None, |read, _tomb, facts, now| {
            let generation = facts.generation.unwrap_or(0);
            let (slots, mut revoked) = machine::revoke(&read.slots, RevokeReason::TopologyChanged, generation, now);
            let (slots, by_hand) = if operator_revoke {
                machine::revoke(&slots, RevokeReason::OperatorRevoked, generation, now)
            } else {
                (slots, Vec::new())
            };
            revoked.extend(by_hand);
            let (slots, lapsed) = machine::sweep(&slots, generation, now);
            let mut verifications = machine::verifications_of(&revoked);
            verifications.extend(lapsed);
            let answer = Ok(Maintained { revoked: revoked.clone() });
            Outcome { slots, new_tombstones: revoked, verifications, answer }
        })
        .await
    }

    /// A planned failover's admission check (docs/failover.md, "What a
    /// hold holds"): the group's live failover-hold, if any (`Some`: defer);
    /// otherwise the hold slot is fenced with `marker` at the
    /// resourceVersion read, so no hold granted on an earlier read can land
    /// after this answer (`None`: admitted). Call it only after status
    /// shows the group unstable, so a grant that re-reads finds `423`.
    pub(crate) async fn admit(&self, group: &str, marker: &str) -> Result<Option<Grant>, ServiceError> {
        let lock = self.lock(group);
        let _guard = lock.lock().await;
        for _ in 0..CAS_ATTEMPTS {
            let g = self.group(group).await?;
            let key = GroupKey::of(&g);
            let read = self.store.read(&key).await?;
            if let Some(hold) = read.slots.effective_hold(now_micros()) {
                return Ok(Some(hold.clone()));
            }
            match self.store.fence_hold_slot(&key, &read, marker).await {
                Ok(()) => return Ok(None),
                Err(StoreError::Conflict) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Err(ServiceError::Contention)
    }

    /// The live failover-hold of `group` as last stored (no write), for
    /// a deferred request's retry time and message.
    pub(crate) async fn live_hold(&self, group: &MysqlFailoverGroup) -> Result<Option<Grant>, ServiceError> {
        let read = self.store.read(&GroupKey::of(group)).await?;
        Ok(read.slots.effective_hold(now_micros()).cloned())
    }

    /// Where watches subscribe to this service's writes.
    pub(crate) fn changes(&self) -> &Changes {
        &self.changes
    }

    /// A watch's look at `operation_id`'s lease of `kind` (see
    /// [`machine::watch`]): the grant while it is still `actor`'s, or the
    /// refusal a renewal would answer now. Reads nothing when it can: the
    /// group's generation from the watch cache, the slots as this process
    /// last wrote or read them — unless `fresh` (a watch asks now and then,
    /// for writes this process did not make) or this process has no copy, when
    /// the slots are read. A watch's read is not remembered: it may be older
    /// than a write that lands meanwhile, and must not replace that write's
    /// copy. The tombstone is read only once the grant is gone, to tell
    /// `revoked` from `expired`.
    pub(crate) async fn watch_state(
        &self,
        group: &str,
        kind: LeaseKind,
        operation_id: &str,
        actor: &Actor<'_>,
        token_sha256: &str,
        fresh: bool,
    ) -> Result<Grant, ServiceError> {
        let g = match self.cache.as_ref().and_then(|c| c.get(&ObjectRef::new(group))) {
            Some(cached) => (*cached).clone(),
            None => self.group(group).await?,
        };
        let key = GroupKey::of(&g);
        let facts = facts_of(&g);
        let read = match self.store.remembered(&key).filter(|_| !fresh) {
            Some(read) => read,
            None => self.store.read(&key).await?,
        };
        let now = now_micros();
        match machine::watch(&read.slots, None, &facts, kind, operation_id, actor, token_sha256, now) {
            Ok(grant) => Ok(grant.clone()),
            Err(Refusal::Expired(absence)) => {
                let tombstone = self.store.tombstone(&key, actor.client, operation_id).await?;
                let answer = machine::watch(
                    &read.slots,
                    tombstone.as_ref(),
                    &facts,
                    kind,
                    operation_id,
                    actor,
                    token_sha256,
                    now,
                );
                Err(ServiceError::Refused(answer.err().unwrap_or(Refusal::Expired(absence))))
            }
            Err(refusal) => Err(ServiceError::Refused(refusal)),
        }
    }

    /// The verification records of a group (see [`Store::verifications`]).
    pub(crate) async fn verifications(&self, key: &GroupKey) -> Result<Vec<Pending>, StoreError> {
        self.store.verifications(key).await
    }

    /// Marks a verification record as announced by an Event.
    pub(crate) async fn mark_announced(&self, name: &str) -> Result<(), StoreError> {
        self.store.mark_announced(name).await
    }

    /// Deletes a verification record a person cleared.
    pub(crate) async fn delete_record(&self, name: &str) -> Result<(), StoreError> {
        self.store.delete_record(name).await
    }

    /// Deletes every deploy Lease of a deleted group.
    pub(crate) async fn forget_group(&self, group: &str) -> Result<(), StoreError> {
        self.store.forget_group(group).await
    }

    /// Deletes the deploy Leases of groups that no longer exist with the UID
    /// they record (see [`Store::sweep`]).
    pub(crate) async fn sweep<S: std::hash::BuildHasher>(
        &self,
        live: &HashMap<String, String, S>,
        listed_at: Timestamp,
    ) -> Result<usize, StoreError> {
        self.store.sweep(live, listed_at).await
    }

    /// The slots of every group (the deploy API's expiry metrics).
    pub(crate) async fn all_slots(&self) -> Result<HashMap<String, Slots>, StoreError> {
        self.store.all_slots().await
    }
}

#[cfg(test)]
mod tests {
    use bloodraven_api::v1alpha1::{MysqlFailoverGroup, MysqlFailoverGroupStatus, PlannedFailoverStatus};

    use super::facts_of;

    fn group(stable: Option<bool>, reason: Option<&str>, phase: Option<&str>) -> MysqlFailoverGroup {
        let mut g = MysqlFailoverGroup::new(
            "g",
            serde_json::from_value(serde_json::json!({
                "sites": [], "initialActiveSite": "a"
            }))
            .unwrap(),
        );
        g.status = Some(MysqlFailoverGroupStatus {
            topology_generation: Some(3),
            stable,
            unstable_reason: reason.map(str::to_owned),
            planned_failover: phase
                .map(|p| PlannedFailoverStatus { phase: p.to_owned(), ..PlannedFailoverStatus::default() }),
            ..MysqlFailoverGroupStatus::default()
        });
        g
    }

    #[test]
    fn a_running_planned_failover_is_unstable_before_the_observer_says_so() {
        for phase in ["Pending", "Admitting", "Draining", "Promoting", "Repointing"] {
            let f = facts_of(&group(Some(true), None, Some(phase)));
            assert_eq!(f.unstable_reason.as_deref(), Some("OperationInProgress"), "{phase}");
            assert!(!f.deferring, "{phase}");
        }
        let f = facts_of(&group(Some(true), None, Some("Deferred")));
        assert_eq!((f.unstable_reason.as_deref(), f.deferring), (Some("OperationInProgress"), true));
        // The observer's mark, as it writes it right after the phase.
        let f = facts_of(&group(Some(false), Some("OperationInProgress"), Some("Deferred")));
        assert_eq!((f.unstable_reason.as_deref(), f.deferring), (Some("OperationInProgress"), true));
    }

    #[test]
    fn a_request_the_engine_no_longer_drives_defers_nothing() {
        // The group in DecisionConflict (or an invalid spec): the engine is
        // not run, the observer says why, and a Deferred phase left in
        // status keeps no lease alive.
        for why in ["DecisionConflict", "Degraded"] {
            let f = facts_of(&group(Some(false), Some(why), Some("Deferred")));
            assert_eq!((f.unstable_reason.as_deref(), f.deferring), (Some(why), false), "{why}");
        }
    }

    #[test]
    fn an_ended_or_unknown_phase_leaves_stability_to_the_observer() {
        for phase in [Some("Completed"), Some("Failed"), Some("Sleeping"), Some(""), None] {
            let f = facts_of(&group(Some(true), None, phase));
            assert_eq!((f.unstable_reason.as_deref(), f.deferring, f.generation), (None, false, Some(3)), "{phase:?}");
            let f = facts_of(&group(Some(false), Some("Degraded"), phase));
            assert_eq!(f.unstable_reason.as_deref(), Some("Degraded"), "{phase:?}");
            let f = facts_of(&group(None, None, phase));
            assert_eq!(f.unstable_reason.as_deref(), Some("NotObserved"), "{phase:?}");
        }
    }
}
