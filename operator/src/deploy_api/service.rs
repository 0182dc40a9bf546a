//! The deploy-lease service: reads the group and its slots, asks the state
//! machine, writes the outcome with compare-and-swap, and retries on a
//! conflict. Calls for one group are also serialised in-process, so the
//! leader does not race itself; the CAS is what protects against a second
//! process (an old leader, a replica).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bloodraven_api::deploy::{DdlState, LeaseKind};
use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::{ObjectRef, Store as Reflector};

use super::lease::machine::{self, Grant, Granted, GroupFacts, Outcome, Refusal, RevokeReason, Slots, Tombstone};
use super::lease::store::{Read, Store, StoreError, token_sha256};
use crate::tolerant::{ReadError, Tolerant};

/// How often a decision is retried after a concurrent write.
const CAS_ATTEMPTS: usize = 8;

/// Errors of the service.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
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
pub struct GroupState {
    /// The group object.
    pub group: MysqlFailoverGroup,
    /// Generation and stability.
    pub facts: GroupFacts,
    /// Its slots.
    pub slots: Slots,
}

/// The deploy-lease service.
#[derive(Clone, Debug)]
pub struct Service {
    store: Store,
    /// Groups are read tolerantly: one that does not decode is not found.
    groups: Tolerant,
    /// A watch cache of groups, for the renewal fast path's generation check.
    cache: Option<Reflector<MysqlFailoverGroup>>,
    locks: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

/// Generation and stability of a group, from its status.
pub fn facts_of(group: &MysqlFailoverGroup) -> GroupFacts {
    let status = group.status.clone().unwrap_or_default();
    let unstable_reason = match status.stable {
        Some(true) => None,
        _ => Some(status.unstable_reason.unwrap_or_else(|| "NotObserved".to_owned())),
    };
    GroupFacts { generation: status.topology_generation, unstable_reason }
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
    pub fn new(store: Store, groups: Tolerant) -> Self {
        Service { store, groups, cache: None, locks: Arc::default() }
    }

    /// Uses `cache` for the group's generation and stability on the renewal
    /// fast path. A cache lagging a generation change by a watch delay is
    /// covered by the reconciler, which revokes on every change it sees.
    #[must_use]
    pub fn with_group_cache(mut self, cache: Reflector<MysqlFailoverGroup>) -> Self {
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
    pub async fn state(&self, name: &str) -> Result<GroupState, ServiceError> {
        let group = self.group(name).await?;
        let read = self.store.read(name).await?;
        Ok(GroupState { facts: facts_of(&group), group, slots: read.slots })
    }

    /// The instance a live lease of `operation_id` was granted for (for authorization of PUT/DELETE).
    pub async fn instance_of(
        &self,
        group: &str,
        kind: LeaseKind,
        operation_id: &str,
    ) -> Result<Option<String>, ServiceError> {
        let read = self.store.read(group).await?;
        if let Some(g) = read.slots.get(kind).filter(|g| g.operation_id == operation_id) {
            return Ok(Some(g.instance.clone()));
        }
        Ok(self.store.tombstone(group, operation_id).await?.map(|t| t.instance))
    }

    /// Runs `decide` on a fresh read until its outcome is written.
    async fn transact<T>(
        &self,
        group: &str,
        operation_id: Option<&str>,
        decide: impl Fn(&Read, Option<&Tombstone>, &GroupFacts, Timestamp) -> Outcome<T>,
    ) -> Result<T, ServiceError> {
        let lock = self.lock(group);
        let _guard = lock.lock().await;
        for _ in 0..CAS_ATTEMPTS {
            let g = self.group(group).await?;
            let facts = facts_of(&g);
            let read = self.store.read(group).await?;
            let tombstone = match operation_id {
                Some(op) => self.store.tombstone(group, op).await?,
                None => None,
            };
            let outcome = decide(&read, tombstone.as_ref(), &facts, now_micros());
            match self.store.write(group, &read, &outcome.slots, &outcome.new_tombstones).await {
                Ok(()) => return outcome.answer.map_err(ServiceError::Refused),
                // Someone wrote since the read: decide again on a fresh one.
                Err(StoreError::Conflict) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Err(ServiceError::Contention)
    }

    /// POST: grants (or re-grants) a lease; returns the grant and its token.
    pub async fn create(
        &self,
        group: &str,
        kind: LeaseKind,
        operation_id: &str,
        instance: &str,
        ttl_seconds: u32,
    ) -> Result<(Granted, String), ServiceError> {
        let token = new_token();
        let hash = token_sha256(&token);
        let granted = self
            .transact(group, Some(operation_id), |read, tomb, facts, now| {
                machine::create(&read.slots, tomb, facts, kind, operation_id, instance, ttl_seconds, &hash, now)
            })
            .await?;
        Ok((granted, token))
    }

    /// PUT: renews a lease. The common case (a live lease of this operation,
    /// the right token, an unchanged generation, a stable group) costs one
    /// compare-and-swap write against the Lease as this process last wrote
    /// it (one read first when it has no copy); anything else, a failed CAS
    /// included, takes the full path, which reads both slots and the tombstone.
    pub async fn renew(
        &self,
        group: &str,
        kind: LeaseKind,
        operation_id: &str,
        token: &str,
        ddl_state: Option<DdlState>,
    ) -> Result<(Grant, i64), ServiceError> {
        let hash = token_sha256(token);
        if let Some(grant) = self.renew_fast(group, kind, operation_id, &hash, ddl_state).await? {
            let generation = grant.generation;
            return Ok((grant, generation));
        }
        let grant = self
            .transact(group, Some(operation_id), |read, tomb, facts, now| {
                machine::renew(&read.slots, tomb, facts, kind, operation_id, &hash, ddl_state, now)
            })
            .await?;
        let generation = grant.generation;
        Ok((grant, generation))
    }

    async fn renew_fast(
        &self,
        group: &str,
        kind: LeaseKind,
        operation_id: &str,
        hash: &str,
        ddl_state: Option<DdlState>,
    ) -> Result<Option<Grant>, ServiceError> {
        let Some(cache) = &self.cache else { return Ok(None) };
        let Some(cached) = cache.get(&ObjectRef::new(group)) else { return Ok(None) };
        let facts = facts_of(&cached);
        let lock = self.lock(group);
        let _guard = lock.lock().await;
        let read = match self.store.remembered(group, kind) {
            Some(read) => read,
            None => self.store.read_kind(group, kind).await?,
        };
        let now = now_micros();
        let fits = read.slots.get(kind).is_some_and(|g| {
            g.live(now)
                && g.operation_id == operation_id
                && machine::constant_time_eq(g.token_sha256.as_bytes(), hash.as_bytes())
                && facts.generation == Some(g.generation)
                && facts.unstable_reason.is_none()
        });
        if !fits {
            return Ok(None);
        }
        let outcome = machine::renew(&read.slots, None, &facts, kind, operation_id, hash, ddl_state, now);
        let Ok(grant) = outcome.answer else { return Ok(None) };
        match self.store.write(group, &read, &outcome.slots, &[]).await {
            Ok(()) => Ok(Some(grant)),
            Err(StoreError::Conflict) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// DELETE: releases a lease (the mutex takes the operation's hold with it).
    pub async fn release(
        &self,
        group: &str,
        kind: LeaseKind,
        operation_id: &str,
        token: &str,
    ) -> Result<(), ServiceError> {
        let hash = token_sha256(token);
        self.transact(group, Some(operation_id), |read, tomb, _facts, now| {
            machine::release(&read.slots, tomb, kind, operation_id, &hash, now)
        })
        .await
    }

    /// Revokes every live lease of `group` for `reason` (at the group's
    /// current generation); returns the tombstones written.
    pub async fn revoke(&self, group: &str, reason: RevokeReason) -> Result<Vec<Tombstone>, ServiceError> {
        self.transact(group, None, |read, _tomb, facts, now| {
            let (slots, tombstones) = machine::revoke(&read.slots, reason, facts.generation.unwrap_or(0), now);
            Outcome { slots, new_tombstones: tombstones.clone(), answer: Ok(tombstones) }
        })
        .await
    }

    /// The store (for cleanup and metrics).
    pub fn store(&self) -> &Store {
        &self.store
    }
}
