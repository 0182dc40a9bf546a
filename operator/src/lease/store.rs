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
//! - `bloodraven-verify-<h(group)>-<h(operationId)>`: one per operation that
//!   lost its lease after reporting `ddlState: started`, kept until a person
//!   marks the schema verified (`SchemaVerificationRequired`).
//!
//! Every object carries its group's UID. An object of another UID (left by a
//! deleted group of the same name) is never read as the current group's:
//! a slot reads as free, a tombstone or verification as absent; the
//! finalizer and the start-up sweep delete such leftovers. An object stored
//! before objects carried the UID counts only if it was created no earlier
//! than the group.
//!
//! Every slot write is a create or a replace carrying the resourceVersion
//! read, so two writers (two replicas, or a leader change) can never both
//! grant the mutex: the loser gets [`StoreError::Conflict`] and decides again.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use bloodraven_api::deploy::LeaseKind;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::ResourceExt as _;
use kube::api::{DeleteParams, ListParams, PartialObjectMeta, PostParams};
use sha2::{Digest, Sha256};

use bloodraven_core::lease::machine::{Slots, Tombstone, Verification};

use bloodraven_api::names::deploy_lease::{
    self as names, ANNOUNCED as ANN_ANNOUNCED, CLIENT as ANN_CLIENT, DDL_STATE as ANN_DDL, ENDING as ANN_ENDING,
    GROUP as ANN_GROUP, GROUP_HASH_LABEL as LABEL_GROUP, GROUP_UID as ANN_GROUP_UID, INSTANCE as ANN_INSTANCE,
    KIND as ANN_KIND, OPERATION_ID as ANN_OPERATION, REVISION as ANN_REVISION, REVOKE_REASON as ANN_REASON,
    ROLE_LABEL as LABEL_ROLE, ROLE_SLOT, ROLE_TOMBSTONE, ROLE_VERIFICATION, TOKEN_SHA256 as ANN_TOKEN,
    TOPOLOGY_GENERATION as ANN_GENERATION, group_hash,
};
pub(crate) use bloodraven_api::names::deploy_lease::{slot_name, tombstone_name, verification_name};

mod codec;

pub(crate) use codec::owned_tombstone;
use codec::{annotations, decode_grant, decode_owned, decode_verification, encode_slot};

/// Written on the hold slot by a planned failover's admission (see [`Store::fence_hold_slot`]).
const ANN_ADMISSION: &str = names::ADMITTED;

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
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
        // 409: written since the read; 404: deleted since the read (a replace
        // of a slot the finalizer removed). Either way, decide again.
        kube::Error::Api(s) if s.code == 409 || s.code == 404 => StoreError::Conflict,
        source => StoreError::Kube { action, source },
    }
}

/// Hex SHA-256 of a token: what is stored and compared.
pub(crate) fn token_sha256(token: &str) -> String {
    format!("{:x}", Sha256::digest(token.as_bytes()))
}

/// The group a read or write is for: its name, and what ties objects to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GroupKey {
    /// The group's name.
    pub name: String,
    /// The group's UID.
    pub uid: String,
    /// The group's creation time (judges objects stored without a UID).
    pub created: Option<Timestamp>,
}

impl GroupKey {
    /// The key of `group`.
    pub(crate) fn of(group: &bloodraven_api::v1alpha1::MysqlFailoverGroup) -> Self {
        GroupKey {
            name: group.metadata.name.clone().unwrap_or_default(),
            uid: group.metadata.uid.clone().unwrap_or_default(),
            created: group.metadata.creation_timestamp.as_ref().map(|t| t.0),
        }
    }

    /// Whether `lease` belongs to this group (and not to an older one of the same name).
    pub(crate) fn owns(&self, lease: &Lease) -> bool {
        match lease.metadata.annotations.as_ref().and_then(|a| a.get(ANN_GROUP_UID)) {
            Some(uid) => *uid == self.uid,
            None => match (lease.metadata.creation_timestamp.as_ref(), self.created) {
                (Some(made), Some(created)) => made.0 >= created,
                _ => false,
            },
        }
    }
}

/// The slots as read, with the Lease objects for the compare-and-swap.
#[derive(Clone, Debug, Default)]
pub(crate) struct Read {
    /// Decoded slots.
    pub slots: Slots,
    /// The Lease of the migration slot, if it exists.
    pub migration: Option<Lease>,
    /// The Lease of the failover-hold slot, if it exists.
    pub hold: Option<Lease>,
}

impl Read {
    /// The slots `migration` and `hold` as `key`'s group owns them (a Lease
    /// of an older group of the same name decodes as an empty slot).
    pub(crate) fn owned(key: &GroupKey, migration: Option<Lease>, hold: Option<Lease>) -> Read {
        let slots = Slots { migration: decode_owned(key, migration.as_ref()), hold: decode_owned(key, hold.as_ref()) };
        Read { slots, migration, hold }
    }
}

/// The deploy-lease store of one operator namespace.
#[derive(Clone, Debug)]
pub(crate) struct Store {
    api: Api<Lease>,
    /// Metadata of the verification records, when watched
    /// ([`Store::watch_verifications`]): lets [`Store::verifications`] skip
    /// its LIST for a group that has none. `None` until the watch has listed.
    verification_index: Option<VerificationIndex>,
    /// Slot Leases as this process last wrote or read them, by name. Used
    /// only by the renewal fast path: a stale entry makes the
    /// compare-and-swap fail, which drops the entry and takes the full path.
    /// `None` records a slot Lease known not to exist.
    written: Arc<Mutex<HashMap<String, Option<Lease>>>>,
}

/// See [`Store::watch_verifications`].
#[derive(Clone, Debug)]
struct VerificationIndex {
    store: kube::runtime::reflector::Store<PartialObjectMeta<Lease>>,
    ready: crate::watch_cache::Listed,
}

/// Whether an object created at `created` certainly predates a list taken
/// at `listed_at` (creation timestamps have whole-second granularity).
pub(crate) fn created_before(
    created: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    listed_at: Timestamp,
) -> bool {
    let margin = listed_at.saturating_sub(k8s_openapi::jiff::SignedDuration::from_secs(1)).unwrap_or(listed_at);
    created.is_some_and(|c| c.0 < margin)
}

/// A verification record as listed: what it says, and whether its Event was published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pending {
    /// The record.
    pub verification: Verification,
    /// The Lease's name.
    pub name: String,
    /// Whether the `SchemaVerificationRequired` Event was published for it.
    pub announced: bool,
}

/// A record object (Lease) with the labels and annotations of `key`'s group.
fn record_lease(key: &GroupKey, name: String, role: &str, mut a: BTreeMap<String, String>) -> Lease {
    a.insert(ANN_GROUP.to_owned(), key.name.clone());
    a.insert(ANN_GROUP_UID.to_owned(), key.uid.clone());
    Lease {
        metadata: ObjectMeta {
            name: Some(name),
            labels: Some(BTreeMap::from([
                (LABEL_GROUP.to_owned(), group_hash(&key.name)),
                (LABEL_ROLE.to_owned(), role.to_owned()),
            ])),
            annotations: Some(a),
            ..ObjectMeta::default()
        },
        spec: None,
    }
}

impl Store {
    /// A store over `api` (the operator's namespace).
    pub(crate) fn new(api: Api<Lease>) -> Self {
        Store { api, verification_index: None, written: Arc::default() }
    }

    /// Also watches the metadata of the verification records of the Leases'
    /// namespace (a spawned task, retried with backoff for the life of the
    /// process), so that [`Store::verifications`] of a group without any
    /// costs no API request (a LIST per probe was 200
    /// LIST/s at a thousand groups). A group the watch shows with records,
    /// and every group before the watch's first list, is LISTed as before.
    #[must_use]
    pub(crate) fn watch_verifications(mut self) -> Self {
        use kube::runtime::{WatchStreamExt as _, reflector, watcher};
        let (store, writer) = reflector::store();
        let client = self.api.clone().into_client();
        let meta: Api<PartialObjectMeta<Lease>> = match self.api.namespace() {
            Some(ns) => Api::namespaced(client, ns),
            None => Api::all(client),
        };
        let config = watcher::Config::default().labels(&format!("{LABEL_ROLE}={ROLE_VERIFICATION}"));
        let stream = watcher(meta, config)
            .default_backoff()
            .modify(|m| {
                // Only the group label is read.
                m.metadata.annotations = None;
                m.metadata.managed_fields = None;
            })
            .reflect(writer);
        let ready = crate::watch_cache::spawn(stream, &store, "verification record");
        self.verification_index = Some(VerificationIndex { store, ready });
        self
    }

    /// Reads both slots of `key`'s group.
    pub(crate) async fn read(&self, key: &GroupKey) -> Result<Read, StoreError> {
        let (migration, hold) = self.read_slots(&key.name).await?;
        Ok(Read::owned(key, migration, hold))
    }

    /// The two slot Leases of the group named `group`, as stored (which
    /// group they belong to is judged by [`Read::owned`] once the group is
    /// known: the names alone allow reading them alongside it).
    pub(crate) async fn read_slots(&self, group: &str) -> Result<(Option<Lease>, Option<Lease>), StoreError> {
        let get = |kind| async move { self.api.get_opt(&slot_name(group, kind)).await.map_err(kube_err("read a")) };
        tokio::try_join!(get(LeaseKind::Migration), get(LeaseKind::FailoverHold))
    }

    /// The tombstone of `client`'s `operation_id` in `key`'s group, if it
    /// was revoked — or of that operationId of an unknown client (stored
    /// before tombstones recorded their client), which answers everyone.
    pub(crate) async fn tombstone(
        &self,
        key: &GroupKey,
        client: &str,
        operation_id: &str,
    ) -> Result<Option<Tombstone>, StoreError> {
        let stored = self.read_tombstones(&key.name, client, operation_id).await?;
        Ok(owned_tombstone(key, client, operation_id, stored))
    }

    /// The tombstone Leases of `client`'s and of an unknown client's
    /// `operation_id` in the group named `group`, as stored (judged by
    /// [`owned_tombstone`] once the group is known).
    pub(crate) async fn read_tombstones(
        &self,
        group: &str,
        client: &str,
        operation_id: &str,
    ) -> Result<(Option<Lease>, Option<Lease>), StoreError> {
        let get =
            |name: String| async move { self.api.get_opt(&name).await.map_err(kube_err("read a tombstone of a")) };
        tokio::try_join!(
            get(tombstone_name(group, Some(client), operation_id)),
            get(tombstone_name(group, None, operation_id))
        )
    }

    /// Writes a decision: tombstones and verification records first, then
    /// every slot that changed, each with the resourceVersion read (the
    /// hold before the mutex, so a hold never outlives a released mutex).
    pub(crate) async fn write(
        &self,
        key: &GroupKey,
        read: &Read,
        slots: &Slots,
        tombstones: &[Tombstone],
        verifications: &[Verification],
    ) -> Result<(), StoreError> {
        for t in tombstones {
            self.create_tombstone(key, t).await?;
        }
        for v in verifications {
            self.create_verification(key, v).await?;
        }
        for (kind, base) in [(LeaseKind::FailoverHold, &read.hold), (LeaseKind::Migration, &read.migration)] {
            if read.slots.get(kind) == slots.get(kind) {
                continue;
            }
            let lease = encode_slot(key, kind, base.as_ref(), slots.get(kind));
            self.put_slot(&slot_name(&key.name, kind), base.is_some(), &lease).await?;
        }
        Ok(())
    }

    /// Creates (`exists` false) or replaces at its resourceVersion a slot
    /// Lease, keeping the renewal fast path's copy in step: the written
    /// object, or none after a failure.
    async fn put_slot(&self, name: &str, exists: bool, lease: &Lease) -> Result<(), StoreError> {
        let pp = PostParams::default();
        let written = if exists {
            self.api.replace(name, &pp, lease).await.map_err(kube_err("update a"))
        } else {
            self.api.create(&pp, lease).await.map_err(kube_err("create a"))
        };
        let mut cache = self.written.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match written {
            Ok(l) => {
                cache.insert(name.to_owned(), Some(l));
                Ok(())
            }
            Err(e) => {
                cache.remove(name);
                Err(e)
            }
        }
    }

    /// Admission's fence against a concurrent hold grant: rewrites the hold
    /// slot as read (same grant, or none) with `marker` in an annotation,
    /// at the resourceVersion read. A grant written since the read makes
    /// this fail with [`StoreError::Conflict`]; a grant decided on the old
    /// read fails its own compare-and-swap and, re-reading the group, finds
    /// it unstable (`423`). So a hold is either seen by admission or never
    /// granted while the planned failover runs.
    pub(crate) async fn fence_hold_slot(&self, key: &GroupKey, read: &Read, marker: &str) -> Result<(), StoreError> {
        let mut lease =
            encode_slot(key, LeaseKind::FailoverHold, read.hold.as_ref(), read.slots.get(LeaseKind::FailoverHold));
        lease.metadata.annotations.get_or_insert_default().insert(ANN_ADMISSION.to_owned(), marker.to_owned());
        self.put_slot(&slot_name(&key.name, LeaseKind::FailoverHold), read.hold.is_some(), &lease).await
    }

    /// The slots of `key`'s group as this process last wrote or read them,
    /// if it remembers both (the renewal fast path: no read at all; a
    /// stale copy fails the compare-and-swap).
    pub(crate) fn remembered(&self, key: &GroupKey) -> Option<Read> {
        let cache = self.written.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let migration = cache.get(&slot_name(&key.name, LeaseKind::Migration)).cloned()?;
        let hold = cache.get(&slot_name(&key.name, LeaseKind::FailoverHold)).cloned()?;
        Some(Read {
            slots: Slots { migration: decode_owned(key, migration.as_ref()), hold: decode_owned(key, hold.as_ref()) },
            migration,
            hold,
        })
    }

    /// Remembers the Leases of a full read, for [`Store::remembered`].
    pub(crate) fn remember(&self, key: &GroupKey, read: &Read) {
        let mut cache = self.written.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (kind, lease) in [(LeaseKind::Migration, &read.migration), (LeaseKind::FailoverHold, &read.hold)] {
            cache.insert(slot_name(&key.name, kind), lease.clone());
        }
    }

    async fn create_record(&self, lease: &Lease, what: &'static str) -> Result<(), StoreError> {
        match self.api.create(&PostParams::default(), lease).await {
            Ok(_) => Ok(()),
            // Already recorded: the first record stands (one per operation).
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(source) => Err(StoreError::Kube { action: what, source }),
        }
    }

    async fn create_tombstone(&self, key: &GroupKey, t: &Tombstone) -> Result<(), StoreError> {
        let mut a = BTreeMap::from([
            (ANN_OPERATION.to_owned(), t.operation_id.clone()),
            (ANN_INSTANCE.to_owned(), t.instance.clone()),
            (ANN_TOKEN.to_owned(), t.token_sha256.clone()),
            (ANN_REASON.to_owned(), t.reason.as_str().to_owned()),
            (ANN_GENERATION.to_owned(), t.generation.to_string()),
        ]);
        if let Some(d) = t.ddl_state {
            a.insert(ANN_DDL.to_owned(), d.as_str().to_owned());
        }
        if let Some(r) = &t.revision {
            a.insert(ANN_REVISION.to_owned(), r.clone());
        }
        if let Some(c) = &t.client {
            a.insert(ANN_CLIENT.to_owned(), c.clone());
        }
        let lease =
            record_lease(key, tombstone_name(&key.name, t.client.as_deref(), &t.operation_id), ROLE_TOMBSTONE, a);
        self.create_record(&lease, "create a tombstone of a").await
    }

    async fn create_verification(&self, key: &GroupKey, v: &Verification) -> Result<(), StoreError> {
        let mut a = BTreeMap::from([
            (ANN_OPERATION.to_owned(), v.operation_id.clone()),
            (ANN_INSTANCE.to_owned(), v.instance.clone()),
            (ANN_ENDING.to_owned(), v.ending.as_str().to_owned()),
            (ANN_GENERATION.to_owned(), v.generation.to_string()),
        ]);
        if let Some(r) = &v.revision {
            a.insert(ANN_REVISION.to_owned(), r.clone());
        }
        if let Some(c) = &v.client {
            a.insert(ANN_CLIENT.to_owned(), c.clone());
        }
        let name = verification_name(&key.name, v.client.as_deref(), &v.operation_id);
        let lease = record_lease(key, name, ROLE_VERIFICATION, a);
        self.create_record(&lease, "create a verification record of a").await
    }

    /// The verification records of `key`'s group, oldest first; a group the
    /// watched index shows without any costs no request (the index may lag
    /// a record written a moment ago by a watch delay: for the reconcilers'
    /// rounds, which look again on the next one).
    pub(crate) async fn verifications(&self, key: &GroupKey) -> Result<Vec<Pending>, StoreError> {
        let hash = group_hash(&key.name);
        if let Some(index) = &self.verification_index
            && index.ready.get()
            && !index.store.state().iter().any(|m| m.labels().get(LABEL_GROUP) == Some(&hash))
        {
            return Ok(Vec::new());
        }
        self.verifications_listed(key).await
    }

    /// The verification records of `key`'s group, oldest first, listed
    /// from the API server: what a grant is decided on (a migration of an
    /// instance whose schema awaits verification is refused, so a record
    /// written a moment ago must count).
    pub(crate) async fn verifications_listed(&self, key: &GroupKey) -> Result<Vec<Pending>, StoreError> {
        let hash = group_hash(&key.name);
        let lp = ListParams::default().labels(&format!("{LABEL_GROUP}={hash},{LABEL_ROLE}={ROLE_VERIFICATION}"));
        let mut items = self.api.list(&lp).await.map_err(kube_err("list the verification records of a"))?.items;
        items.sort_by_key(|l| l.metadata.creation_timestamp.as_ref().map(|t| t.0));
        Ok(items
            .iter()
            .filter(|l| key.owns(l))
            .filter_map(|l| {
                Some(Pending {
                    verification: decode_verification(l)?,
                    name: l.metadata.name.clone()?,
                    announced: annotations(l).contains_key(ANN_ANNOUNCED),
                })
            })
            .collect())
    }

    /// Marks a verification record as announced (its Event was published).
    pub(crate) async fn mark_announced(&self, name: &str) -> Result<(), StoreError> {
        let patch = serde_json::json!({"metadata": {"annotations": {ANN_ANNOUNCED: "true"}}});
        self.api
            .patch(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
            .await
            .map(drop)
            .map_err(kube_err("mark a verification record of a"))
    }

    /// Deletes a verification record (a person verified the schema).
    pub(crate) async fn delete_record(&self, name: &str) -> Result<(), StoreError> {
        match self.api.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(kube_err("delete a record of a")(e)),
        }
    }

    /// Deletes every slot, tombstone and verification record of a deleted group.
    pub(crate) async fn forget_group(&self, group: &str) -> Result<(), StoreError> {
        let lp = ListParams::default().labels(&format!("{LABEL_GROUP}={}", group_hash(group)));
        self.api.delete_collection(&DeleteParams::default(), &lp).await.map(drop).map_err(kube_err("delete a"))?;
        let mut cache = self.written.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for kind in [LeaseKind::Migration, LeaseKind::FailoverHold] {
            cache.remove(&slot_name(group, kind));
        }
        Ok(())
    }

    /// Deletes every deploy Lease whose group no longer exists with the UID
    /// it records (`live`: name → UID of every group in the cluster, as
    /// listed from `listed_at` on). A Lease created after `listed_at` (less
    /// a second of timestamp granularity) may belong to a group created
    /// since, so it is left for the next sweep. Returns how many were deleted.
    pub(crate) async fn sweep<S: std::hash::BuildHasher>(
        &self,
        live: &HashMap<String, String, S>,
        listed_at: Timestamp,
    ) -> Result<usize, StoreError> {
        let lp = ListParams::default().labels(LABEL_ROLE);
        let list = self.api.list(&lp).await.map_err(kube_err("list a"))?;
        let mut deleted = 0;
        for lease in list.items.iter().filter(|l| created_before(l.metadata.creation_timestamp.as_ref(), listed_at)) {
            let a = annotations(lease);
            let stale = match (a.get(ANN_GROUP), a.get(ANN_GROUP_UID)) {
                (Some(group), Some(uid)) => live.get(group) != Some(uid),
                (Some(group), None) => !live.contains_key(group),
                (None, _) => false,
            };
            if stale && let Some(name) = &lease.metadata.name {
                self.delete_record(name).await?;
                deleted += 1;
            }
        }
        Ok(deleted)
    }

    /// Every slot of the namespace, by group (for the active-lease metric).
    pub(crate) async fn all_slots(&self) -> Result<HashMap<String, Slots>, StoreError> {
        let lp = ListParams::default().labels(&format!("{LABEL_ROLE}={ROLE_SLOT}"));
        let list = self.api.list(&lp).await.map_err(kube_err("list a"))?;
        let mut out: HashMap<String, Slots> = HashMap::new();
        for l in &list.items {
            let a = annotations(l);
            let (Some(group), Some(kind)) = (a.get(ANN_GROUP), a.get(ANN_KIND).and_then(|k| LeaseKind::parse(k)))
            else {
                continue;
            };
            *out.entry(group.clone()).or_default().get_mut(kind) = decode_grant(l);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
