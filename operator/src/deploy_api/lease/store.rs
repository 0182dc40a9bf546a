//! Deploy leases on `coordination.k8s.io/v1` Lease objects in the
//! operator's namespace, separate from the leader-election Lease.
//!
//! Layout, per group (names hashed so any group name fits):
//! - `bloodraven-deploy-<h(group)>-migration` and `…-failover-hold`: the two
//!   slots. `spec.holderIdentity` is the operationId, `renewTime` +
//!   `leaseDurationSeconds` the expiry (judged on the operator's clock from
//!   the record itself); annotations carry the instance, the token's
//!   SHA-256 (never the token), the grant generation and the DDL state. A
//!   free slot has no holder.
//! - `bloodraven-tombstone-<h(group)>-<h(operationId)>`: one per revoked
//!   operation (token hash, reason, generation), kept until the group is deleted.
//!
//! Every slot write is a create or a replace carrying the resourceVersion
//! read, so two writers (two replicas, or a leader change) can never both
//! grant the mutex: the loser gets [`StoreError::Conflict`] and decides again.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use bloodraven_api::deploy::{DdlState, LeaseKind};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use sha2::{Digest, Sha256};

use super::machine::{Grant, RevokeReason, Slots, Tombstone};

const PREFIX: &str = "bloodraven.shipstream.io/";
const ANN_GROUP: &str = "bloodraven.shipstream.io/group";
const ANN_KIND: &str = "bloodraven.shipstream.io/kind";
const ANN_OPERATION: &str = "bloodraven.shipstream.io/operation-id";
const ANN_INSTANCE: &str = "bloodraven.shipstream.io/instance";
const ANN_TOKEN: &str = "bloodraven.shipstream.io/token-sha256";
const ANN_GENERATION: &str = "bloodraven.shipstream.io/topology-generation";
const ANN_DDL: &str = "bloodraven.shipstream.io/ddl-state";
const ANN_REASON: &str = "bloodraven.shipstream.io/revoke-reason";
/// Label with the group's hash, on every slot and tombstone.
pub const LABEL_GROUP: &str = "bloodraven.shipstream.io/group-hash";
/// Label saying what the Lease is: `slot` or `tombstone`.
pub const LABEL_ROLE: &str = "bloodraven.shipstream.io/deploy-lease";

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Someone wrote since the read: decide again on a fresh read.
    #[error("deploy lease changed concurrently")]
    Conflict,
    /// The API server refused or failed.
    #[error("failed to {action} deploy lease: {source}")]
    Kube {
        /// What was being done.
        action: &'static str,
        /// The client error.
        #[source]
        source: kube::Error,
    },
}

fn kube_err(action: &'static str) -> impl FnOnce(kube::Error) -> StoreError {
    move |source| match source {
        kube::Error::Api(s) if s.code == 409 => StoreError::Conflict,
        source => StoreError::Kube { action, source },
    }
}

/// Hex SHA-256 of `s`, first `n` characters.
fn short_hash(s: &str, n: usize) -> String {
    format!("{:x}", Sha256::digest(s.as_bytes()))[..n].to_owned()
}

/// Hex SHA-256 of a token: what is stored and compared.
pub fn token_sha256(token: &str) -> String {
    format!("{:x}", Sha256::digest(token.as_bytes()))
}

/// Name of a group's slot Lease.
pub fn slot_name(group: &str, kind: LeaseKind) -> String {
    format!("bloodraven-deploy-{}-{}", short_hash(group, 16), kind.as_str())
}

/// Name of an operation's tombstone Lease.
pub fn tombstone_name(group: &str, operation_id: &str) -> String {
    format!("bloodraven-tombstone-{}-{}", short_hash(group, 16), short_hash(operation_id, 16))
}

/// The slots as read, with the Lease objects for the compare-and-swap.
#[derive(Clone, Debug, Default)]
pub struct Read {
    /// Decoded slots.
    pub slots: Slots,
    /// The Lease of the migration slot, if it exists.
    pub migration: Option<Lease>,
    /// The Lease of the failover-hold slot, if it exists.
    pub hold: Option<Lease>,
}

/// The deploy-lease store of one operator namespace.
#[derive(Clone, Debug)]
pub struct Store {
    api: Api<Lease>,
    /// Slot Leases as this process last wrote or read them, by name. Used
    /// only by the renewal fast path: a stale entry makes the
    /// compare-and-swap fail, which drops the entry and takes the full path.
    written: Arc<Mutex<HashMap<String, Lease>>>,
}

fn annotations(lease: &Lease) -> BTreeMap<String, String> {
    lease.metadata.annotations.clone().unwrap_or_default()
}

fn decode_grant(lease: &Lease) -> Option<Grant> {
    let spec = lease.spec.as_ref()?;
    let operation_id = spec.holder_identity.clone().filter(|h| !h.is_empty())?;
    let a = annotations(lease);
    Some(Grant {
        operation_id,
        instance: a.get(ANN_INSTANCE).cloned().unwrap_or_default(),
        token_sha256: a.get(ANN_TOKEN).cloned().unwrap_or_default(),
        generation: a.get(ANN_GENERATION).and_then(|g| g.parse().ok()).unwrap_or(0),
        renewed_at: spec.renew_time.as_ref()?.0,
        ttl_seconds: spec.lease_duration_seconds.and_then(|s| u32::try_from(s).ok()).unwrap_or(0),
        ddl_state: a.get(ANN_DDL).and_then(|d| serde_json::from_value(serde_json::Value::String(d.clone())).ok()),
    })
}

fn encode_slot(group: &str, kind: LeaseKind, base: Option<&Lease>, grant: Option<&Grant>) -> Lease {
    let mut lease = base.cloned().unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(slot_name(group, kind)),
            labels: Some(BTreeMap::from([
                (LABEL_GROUP.to_owned(), short_hash(group, 16)),
                (LABEL_ROLE.to_owned(), "slot".to_owned()),
            ])),
            ..ObjectMeta::default()
        },
        spec: None,
    });
    let mut a: BTreeMap<String, String> =
        annotations(&lease).into_iter().filter(|(k, _)| !k.starts_with(PREFIX)).collect();
    a.insert(ANN_GROUP.to_owned(), group.to_owned());
    a.insert(ANN_KIND.to_owned(), kind.as_str().to_owned());
    let mut spec = LeaseSpec::default();
    if let Some(g) = grant {
        a.insert(ANN_INSTANCE.to_owned(), g.instance.clone());
        a.insert(ANN_TOKEN.to_owned(), g.token_sha256.clone());
        a.insert(ANN_GENERATION.to_owned(), g.generation.to_string());
        if let Some(d) = g.ddl_state {
            a.insert(ANN_DDL.to_owned(), d.as_str().to_owned());
        }
        let same_holder =
            lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) == Some(g.operation_id.as_str());
        spec.holder_identity = Some(g.operation_id.clone());
        spec.lease_duration_seconds = i32::try_from(g.ttl_seconds).ok();
        spec.renew_time = Some(MicroTime(g.renewed_at));
        spec.acquire_time = if same_holder {
            lease.spec.as_ref().and_then(|s| s.acquire_time.clone())
        } else {
            Some(MicroTime(g.renewed_at))
        };
    }
    lease.metadata.annotations = Some(a);
    lease.spec = Some(spec);
    lease
}

fn decode_tombstone(lease: &Lease) -> Option<Tombstone> {
    let a = annotations(lease);
    Some(Tombstone {
        operation_id: a.get(ANN_OPERATION)?.clone(),
        instance: a.get(ANN_INSTANCE).cloned().unwrap_or_default(),
        token_sha256: a.get(ANN_TOKEN).cloned().unwrap_or_default(),
        reason: RevokeReason::parse(a.get(ANN_REASON)?)?,
        generation: a.get(ANN_GENERATION).and_then(|g| g.parse().ok()).unwrap_or(0),
        ddl_state: a
            .get(ANN_DDL)
            .and_then(|d| serde_json::from_value::<DdlState>(serde_json::Value::String(d.clone())).ok()),
    })
}

impl Store {
    /// A store over `api` (the operator's namespace).
    pub fn new(api: Api<Lease>) -> Self {
        Store { api, written: Arc::default() }
    }

    /// Reads both slots of `group`.
    pub async fn read(&self, group: &str) -> Result<Read, StoreError> {
        let get = |kind| async move { self.api.get_opt(&slot_name(group, kind)).await.map_err(kube_err("read a")) };
        let (migration, hold) = tokio::try_join!(get(LeaseKind::Migration), get(LeaseKind::FailoverHold))?;
        let slots =
            Slots { migration: migration.as_ref().and_then(decode_grant), hold: hold.as_ref().and_then(decode_grant) };
        Ok(Read { slots, migration, hold })
    }

    /// Reads only the slot of `kind` (the renewal fast path); the other slot
    /// reads as absent and is left alone by [`Store::write`].
    pub async fn read_kind(&self, group: &str, kind: LeaseKind) -> Result<Read, StoreError> {
        let lease = self.api.get_opt(&slot_name(group, kind)).await.map_err(kube_err("read a"))?;
        let mut read = Read::default();
        *read.slots.get_mut(kind) = lease.as_ref().and_then(decode_grant);
        match kind {
            LeaseKind::Migration => read.migration = lease,
            LeaseKind::FailoverHold => read.hold = lease,
        }
        Ok(read)
    }

    /// The tombstone of `operation_id` in `group`, if it was revoked.
    pub async fn tombstone(&self, group: &str, operation_id: &str) -> Result<Option<Tombstone>, StoreError> {
        let lease =
            self.api.get_opt(&tombstone_name(group, operation_id)).await.map_err(kube_err("read a tombstone of a"))?;
        Ok(lease.as_ref().and_then(decode_tombstone).filter(|t| t.operation_id == operation_id))
    }

    /// Writes a decision: tombstones first, then every slot that changed,
    /// each with the resourceVersion read (the hold before the mutex, so a
    /// hold never outlives a released mutex).
    pub async fn write(
        &self,
        group: &str,
        read: &Read,
        slots: &Slots,
        tombstones: &[Tombstone],
    ) -> Result<(), StoreError> {
        for t in tombstones {
            self.create_tombstone(group, t).await?;
        }
        for (kind, base) in [(LeaseKind::FailoverHold, &read.hold), (LeaseKind::Migration, &read.migration)] {
            if read.slots.get(kind) == slots.get(kind) {
                continue;
            }
            let lease = encode_slot(group, kind, base.as_ref(), slots.get(kind));
            let pp = PostParams::default();
            let name = slot_name(group, kind);
            let written = match base {
                None => self.api.create(&pp, &lease).await.map_err(kube_err("create a")),
                Some(_) => self.api.replace(&name, &pp, &lease).await.map_err(kube_err("update a")),
            };
            let mut cache = self.written.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match written {
                Ok(l) => {
                    cache.insert(name, l);
                }
                Err(e) => {
                    cache.remove(&name);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// The slot of `kind` as this process last wrote it, if it remembers
    /// (the renewal fast path: no read at all; a stale copy fails the CAS).
    pub fn remembered(&self, group: &str, kind: LeaseKind) -> Option<Read> {
        let cache = self.written.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let lease = cache.get(&slot_name(group, kind))?.clone();
        let mut read = Read::default();
        *read.slots.get_mut(kind) = decode_grant(&lease);
        match kind {
            LeaseKind::Migration => read.migration = Some(lease),
            LeaseKind::FailoverHold => read.hold = Some(lease),
        }
        Some(read)
    }

    async fn create_tombstone(&self, group: &str, t: &Tombstone) -> Result<(), StoreError> {
        let mut a = BTreeMap::from([
            (ANN_GROUP.to_owned(), group.to_owned()),
            (ANN_OPERATION.to_owned(), t.operation_id.clone()),
            (ANN_INSTANCE.to_owned(), t.instance.clone()),
            (ANN_TOKEN.to_owned(), t.token_sha256.clone()),
            (ANN_REASON.to_owned(), t.reason.as_str().to_owned()),
            (ANN_GENERATION.to_owned(), t.generation.to_string()),
        ]);
        if let Some(d) = t.ddl_state {
            a.insert(ANN_DDL.to_owned(), d.as_str().to_owned());
        }
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(tombstone_name(group, &t.operation_id)),
                labels: Some(BTreeMap::from([
                    (LABEL_GROUP.to_owned(), short_hash(group, 16)),
                    (LABEL_ROLE.to_owned(), "tombstone".to_owned()),
                ])),
                annotations: Some(a),
                ..ObjectMeta::default()
            },
            spec: None,
        };
        match self.api.create(&PostParams::default(), &lease).await {
            // Already revoked: the first tombstone stands.
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(source) => Err(StoreError::Kube { action: "create a tombstone of a", source }),
        }
    }

    /// Deletes every slot and tombstone of a deleted group.
    pub async fn forget_group(&self, group: &str) -> Result<(), StoreError> {
        let lp = ListParams::default().labels(&format!("{LABEL_GROUP}={}", short_hash(group, 16)));
        self.api.delete_collection(&DeleteParams::default(), &lp).await.map(drop).map_err(kube_err("delete a"))
    }

    /// Every slot Lease of the namespace (for the active-lease metric).
    pub async fn all_slots(&self) -> Result<Vec<(String, LeaseKind, Grant)>, StoreError> {
        let lp = ListParams::default().labels(&format!("{LABEL_ROLE}=slot"));
        let list = self.api.list(&lp).await.map_err(kube_err("list a"))?;
        Ok(list
            .items
            .iter()
            .filter_map(|l| {
                let a = annotations(l);
                let kind = LeaseKind::parse(a.get(ANN_KIND)?)?;
                Some((a.get(ANN_GROUP)?.clone(), kind, decode_grant(l)?))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    #[test]
    fn a_grant_round_trips_through_a_lease_and_the_token_is_never_stored() {
        let g = Grant {
            operation_id: "op-1".into(),
            instance: "counter-app".into(),
            token_sha256: token_sha256("secret-token"),
            generation: 17,
            renewed_at: Timestamp::from_second(1_700_000_000).unwrap(),
            ttl_seconds: 30,
            ddl_state: Some(DdlState::Started),
        };
        let lease = encode_slot("playground", LeaseKind::Migration, None, Some(&g));
        assert_eq!(decode_grant(&lease), Some(g.clone()));
        let text = serde_json::to_string(&lease).unwrap();
        assert!(!text.contains("secret-token"), "{text}");
        let freed = encode_slot("playground", LeaseKind::Migration, Some(&lease), None);
        assert_eq!(decode_grant(&freed), None);
        assert!(!serde_json::to_string(&freed).unwrap().contains(&g.token_sha256), "a free slot keeps no token hash");
    }

    #[test]
    fn names_fit_any_group() {
        let long = "g".repeat(253);
        assert!(slot_name(&long, LeaseKind::FailoverHold).len() <= 63);
        assert!(tombstone_name(&long, &"o".repeat(128)).len() <= 63);
        assert_ne!(tombstone_name("g", "a"), tombstone_name("g", "b"));
    }
}
