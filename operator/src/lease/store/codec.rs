//! How a slot, a tombstone and a verification record are written into
//! and read back from Lease objects: the annotations, the holder and the
//! renewal fields, and which group an object belongs to.

use std::collections::BTreeMap;

use bloodraven_api::deploy::{DdlState, LeaseKind};
use bloodraven_api::names::deploy_lease::{
    ANNOTATION_PREFIX as PREFIX, CLIENT as ANN_CLIENT, DDL_STATE as ANN_DDL, ENDING as ANN_ENDING, GROUP as ANN_GROUP,
    GROUP_HASH_LABEL as LABEL_GROUP, GROUP_UID as ANN_GROUP_UID, INSTANCE as ANN_INSTANCE, KIND as ANN_KIND,
    OPERATION_ID as ANN_OPERATION, REVISION as ANN_REVISION, REVOKE_REASON as ANN_REASON, ROLE_LABEL as LABEL_ROLE,
    ROLE_SLOT, TOKEN_SHA256 as ANN_TOKEN, TOPOLOGY_GENERATION as ANN_GENERATION, group_hash, slot_name,
};
use bloodraven_core::lease::machine::{Ending, Grant, RevokeReason, Tombstone, Verification};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

use super::GroupKey;

pub(super) fn annotations(lease: &Lease) -> BTreeMap<String, String> {
    lease.metadata.annotations.clone().unwrap_or_default()
}

pub(super) fn decode_grant(lease: &Lease) -> Option<Grant> {
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
        revision: a.get(ANN_REVISION).cloned(),
        client: a.get(ANN_CLIENT).cloned(),
        // A slot stored before revoked grants kept theirs holds none.
        revoked: a.get(ANN_REASON).and_then(|r| RevokeReason::parse(r)),
    })
}

/// The grant in `lease` if it belongs to `key`'s group.
pub(super) fn decode_owned(key: &GroupKey, lease: Option<&Lease>) -> Option<Grant> {
    lease.filter(|l| key.owns(l)).and_then(decode_grant)
}

/// The tombstone of `client`'s `operation_id` among `stored` (own, legacy)
/// that belongs to `key`'s group: `client`'s own first, else one stored
/// before tombstones recorded their client, which answers everyone.
pub(crate) fn owned_tombstone(
    key: &GroupKey,
    client: &str,
    operation_id: &str,
    stored: (Option<Lease>, Option<Lease>),
) -> Option<Tombstone> {
    let judge = |lease: Option<Lease>| {
        lease
            .filter(|l| key.owns(l))
            .as_ref()
            .and_then(decode_tombstone)
            .filter(|t| t.operation_id == operation_id && t.about(client))
    };
    judge(stored.0).or_else(|| judge(stored.1))
}

pub(super) fn encode_slot(key: &GroupKey, kind: LeaseKind, base: Option<&Lease>, grant: Option<&Grant>) -> Lease {
    let group = key.name.as_str();
    let mut lease = base.cloned().unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(slot_name(group, kind)),
            labels: Some(BTreeMap::from([
                (LABEL_GROUP.to_owned(), group_hash(group)),
                (LABEL_ROLE.to_owned(), ROLE_SLOT.to_owned()),
            ])),
            ..ObjectMeta::default()
        },
        spec: None,
    });
    let mut a: BTreeMap<String, String> =
        annotations(&lease).into_iter().filter(|(k, _)| !k.starts_with(PREFIX)).collect();
    a.insert(ANN_GROUP.to_owned(), group.to_owned());
    a.insert(ANN_GROUP_UID.to_owned(), key.uid.clone());
    a.insert(ANN_KIND.to_owned(), kind.as_str().to_owned());
    let mut spec = LeaseSpec::default();
    // A slot left by an older group of the same name starts afresh.
    let base_owned = base.is_some_and(|b| key.owns(b));
    if let Some(g) = grant {
        if let Some(c) = &g.client {
            a.insert(ANN_CLIENT.to_owned(), c.clone());
        }
        a.insert(ANN_INSTANCE.to_owned(), g.instance.clone());
        a.insert(ANN_TOKEN.to_owned(), g.token_sha256.clone());
        a.insert(ANN_GENERATION.to_owned(), g.generation.to_string());
        if let Some(d) = g.ddl_state {
            a.insert(ANN_DDL.to_owned(), d.as_str().to_owned());
        }
        if let Some(r) = &g.revision {
            a.insert(ANN_REVISION.to_owned(), r.clone());
        }
        if let Some(r) = g.revoked {
            a.insert(ANN_REASON.to_owned(), r.as_str().to_owned());
        }
        let same_holder = base_owned
            && lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) == Some(g.operation_id.as_str());
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

pub(super) fn decode_tombstone(lease: &Lease) -> Option<Tombstone> {
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
        revision: a.get(ANN_REVISION).cloned(),
        client: a.get(ANN_CLIENT).cloned(),
    })
}

pub(super) fn decode_verification(lease: &Lease) -> Option<Verification> {
    let a = annotations(lease);
    Some(Verification {
        operation_id: a.get(ANN_OPERATION)?.clone(),
        instance: a.get(ANN_INSTANCE).cloned().unwrap_or_default(),
        revision: a.get(ANN_REVISION).cloned(),
        ending: Ending::parse(a.get(ANN_ENDING)?)?,
        generation: a.get(ANN_GENERATION).and_then(|g| g.parse().ok()).unwrap_or(0),
        client: a.get(ANN_CLIENT).cloned(),
    })
}
