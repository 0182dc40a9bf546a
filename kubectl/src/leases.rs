//! The group's deploy leases as the operator stores them: Lease objects
//! in its namespace, labelled with the group's hash (docs/deploy-api.md,
//! "Where the leases live"). Read only; every write to them is the
//! operator's (the webhook refuses anyone else's).

use std::collections::BTreeMap;

use bloodraven_api::names::deploy_lease as names;
use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, ResourceExt as _};
use serde::Serialize;

use crate::kube_ctx::{Ctx, access};
use crate::output::{Format, Paint, Table, cell, render_as, short_duration};

/// A grant in a slot (a live lease, or one past its expiry the operator
/// has not swept yet).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Grant {
    pub kind: String,
    pub operation_id: String,
    pub instance: String,
    /// `namespace/serviceAccount` the grant was made to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    pub topology_generation: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ddl_state: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    pub expires_at: Option<String>,
    /// Past its expiry: no longer held.
    pub expired: bool,
    /// Revoked (a tombstone names the operation): held until `expiresAt`, never renewed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoked: Option<String>,
}

/// A revoked operation (tombstone).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Revocation {
    pub operation_id: String,
    pub instance: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    pub reason: String,
    pub topology_generation: Option<i64>,
}

/// An operation that ended inside its DDL: the schema awaits a person.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PendingVerification {
    pub operation_id: String,
    pub instance: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// How the lease ended: TopologyChanged, OperatorRevoked, Lapsed or Released.
    pub ending: String,
    pub topology_generation: Option<i64>,
    /// The operator published its Event (only announced records are cleared
    /// by a verification: a person can only have verified what they were told of).
    pub announced: bool,
}

/// Everything the operator keeps of a group's deploy leases.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Leases {
    pub grants: Vec<Grant>,
    pub revocations: Vec<Revocation>,
    pub pending_verifications: Vec<PendingVerification>,
}

impl Leases {
    /// Grants still held now.
    pub fn live(&self) -> impl Iterator<Item = &Grant> {
        self.grants.iter().filter(|g| !g.expired)
    }
}

/// Reads them (a 403 names `list leases` in the operator's namespace).
pub(crate) async fn read(ctx: &Ctx, group: &MysqlFailoverGroup) -> anyhow::Result<Leases> {
    let api: Api<Lease> = Api::namespaced(ctx.client.clone(), &ctx.operator_namespace);
    let selector = format!("{}={}", names::GROUP_HASH_LABEL, names::group_hash(&group.name_any()));
    let list = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| access(e, "list", "leases.coordination.k8s.io", Some(&ctx.operator_namespace)))?;
    Ok(decode(group, &list.items, Timestamp::now()))
}

fn generation(a: &BTreeMap<String, String>) -> Option<i64> {
    a.get(names::TOPOLOGY_GENERATION).and_then(|g| g.parse().ok())
}

/// What the Leases of `group` say at `now`. A Lease of another group UID
/// (left by a deleted group of the same name) is not this group's.
pub(crate) fn decode(group: &MysqlFailoverGroup, items: &[Lease], now: Timestamp) -> Leases {
    let uid = group.uid();
    let name = group.name_any();
    let mut out = Leases::default();
    for lease in items {
        let a = lease.annotations();
        if a.get(names::GROUP).is_some_and(|g| *g != name) {
            continue;
        }
        if let (Some(theirs), Some(ours)) = (a.get(names::GROUP_UID), uid.as_ref())
            && theirs != ours
        {
            continue;
        }
        let get = |k: &str| a.get(k).cloned();
        match lease.labels().get(names::ROLE_LABEL).map(String::as_str) {
            Some(names::ROLE_SLOT) => {
                let Some(spec) = &lease.spec else { continue };
                let Some(operation_id) = spec.holder_identity.clone().filter(|h| !h.is_empty()) else { continue };
                let expiry = spec.renew_time.as_ref().and_then(|t| {
                    let ttl = i64::from(spec.lease_duration_seconds.unwrap_or(0));
                    t.0.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(ttl)).ok()
                });
                out.grants.push(Grant {
                    kind: get(names::KIND).unwrap_or_default(),
                    operation_id,
                    instance: get(names::INSTANCE).unwrap_or_default(),
                    client: get(names::CLIENT),
                    topology_generation: generation(a),
                    ddl_state: get(names::DDL_STATE),
                    revision: get(names::REVISION),
                    expires_at: expiry.map(|t| t.to_string()),
                    expired: expiry.is_none_or(|t| t <= now),
                    revoked: None,
                });
            }
            Some(names::ROLE_TOMBSTONE) => out.revocations.push(Revocation {
                operation_id: get(names::OPERATION_ID).unwrap_or_default(),
                instance: get(names::INSTANCE).unwrap_or_default(),
                client: get(names::CLIENT),
                reason: get(names::REVOKE_REASON).unwrap_or_default(),
                topology_generation: generation(a),
            }),
            Some(names::ROLE_VERIFICATION) => out.pending_verifications.push(PendingVerification {
                operation_id: get(names::OPERATION_ID).unwrap_or_default(),
                instance: get(names::INSTANCE).unwrap_or_default(),
                revision: get(names::REVISION),
                ending: get(names::ENDING).unwrap_or_default(),
                topology_generation: generation(a),
                announced: a.contains_key(names::ANNOUNCED),
            }),
            _ => {}
        }
    }
    for g in &mut out.grants {
        g.revoked = out
            .revocations
            .iter()
            .find(|r| r.operation_id == g.operation_id && (r.client.is_none() || r.client == g.client))
            .map(|r| r.reason.clone());
    }
    // The migration mutex first, then the hold.
    out.grants.sort_by(|a, b| b.kind.cmp(&a.kind));
    out.revocations.sort_by(|a, b| a.operation_id.cmp(&b.operation_id));
    out.pending_verifications.sort_by(|a, b| a.operation_id.cmp(&b.operation_id));
    out
}

/// `expiresAt` as time left (`12s`) or `expired`.
pub(crate) fn time_left(g: &Grant, now: Timestamp) -> String {
    match g.expires_at.as_deref().and_then(|t| t.parse::<Timestamp>().ok()) {
        Some(t) if !g.expired => format!("in {}", short_duration(t.duration_since(now).as_secs())),
        _ => "expired".to_owned(),
    }
}

/// The grants as a table (status and leases share it).
pub(crate) fn grants_table(leases: &Leases, paint: Paint, now: Timestamp) -> Table {
    let mut t = Table::new(&["KIND", "HOLDER", "INSTANCE", "CLIENT", "GENERATION", "DDL", "EXPIRES", "REVOKED"]);
    for g in &leases.grants {
        t.row(vec![
            cell(&g.kind),
            cell(&g.operation_id),
            cell(&g.instance),
            cell(g.client.as_deref().unwrap_or("-")),
            g.topology_generation.map_or("-".into(), |n| n.to_string()),
            cell(g.ddl_state.as_deref().unwrap_or("-")),
            time_left(g, now),
            g.revoked.as_deref().map_or("-".into(), |r| paint.bad(&cell(r))),
        ]);
    }
    t
}

/// `leases GROUP`.
pub(crate) async fn run(ctx: &Ctx, group: &str, format: Option<Format>) -> anyhow::Result<u8> {
    let g = ctx.group(group).await?;
    let leases = read(ctx, &g).await?;
    if let Some(f) = format {
        print!("{}", render_as(&leases, f)?);
        return Ok(0);
    }
    let paint = Paint::stdout();
    let now = Timestamp::now();
    if leases.grants.is_empty() {
        println!("No deploy lease is held on group {}.", cell(group));
    } else {
        print!("{}", grants_table(&leases, paint, now).render(0));
    }
    if !leases.revocations.is_empty() {
        println!("\nRevoked operations (a retry with the same operationId is refused):");
        let mut t = Table::new(&["OPERATION", "INSTANCE", "CLIENT", "REASON", "GENERATION"]);
        for r in &leases.revocations {
            t.row(vec![
                cell(&r.operation_id),
                cell(&r.instance),
                cell(r.client.as_deref().unwrap_or("-")),
                cell(&r.reason),
                r.topology_generation.map_or("-".into(), |n| n.to_string()),
            ]);
        }
        print!("{}", t.render(0));
    }
    if !leases.pending_verifications.is_empty() {
        println!(
            "\n{} (then: kubectl bloodraven verify-schema {} OPERATION...):",
            paint.warn("Ended inside their DDL; verify the schema"),
            cell(group)
        );
        print!("{}", verifications_table(&leases).render(0));
    }
    Ok(0)
}

pub(crate) fn verifications_table(leases: &Leases) -> Table {
    let mut t = Table::new(&["OPERATION", "INSTANCE", "REVISION", "ENDED", "GENERATION"]);
    for v in &leases.pending_verifications {
        t.row(vec![
            cell(&v.operation_id),
            cell(&v.instance),
            cell(v.revision.as_deref().unwrap_or("-")),
            cell(&v.ending),
            v.topology_generation.map_or("-".into(), |n| n.to_string()),
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

    fn group() -> MysqlFailoverGroup {
        let mut g: MysqlFailoverGroup = serde_json::from_value(serde_json::json!({
            "apiVersion": "bloodraven.shipstream.io/v1alpha1", "kind": "MysqlFailoverGroup",
            "metadata": {"name": "g", "uid": "u1"},
            "spec": {"sites": [], "initialActiveSite": "iad"}
        }))
        .unwrap_or_else(|e| unreachable!("{e}"));
        g.metadata.uid = Some("u1".into());
        g
    }

    fn lease(role: &str, ann: &[(&str, &str)], spec: Option<LeaseSpec>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                labels: Some([(names::ROLE_LABEL.to_owned(), role.to_owned())].into()),
                annotations: Some(ann.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()),
                ..ObjectMeta::default()
            },
            spec,
        }
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap_or_else(|e| unreachable!("{e}"))
    }

    #[test]
    fn slots_tombstones_and_records_of_this_group_only() {
        let held = LeaseSpec {
            holder_identity: Some("op-1".into()),
            renew_time: Some(MicroTime(at("2026-01-01T00:00:00Z"))),
            lease_duration_seconds: Some(30),
            ..LeaseSpec::default()
        };
        let items = vec![
            lease(
                names::ROLE_SLOT,
                &[
                    (names::GROUP, "g"),
                    (names::GROUP_UID, "u1"),
                    (names::KIND, "migration"),
                    (names::INSTANCE, "app"),
                    (names::CLIENT, "ci/deployer"),
                    (names::TOPOLOGY_GENERATION, "3"),
                ],
                Some(held.clone()),
            ),
            // A free slot.
            lease(names::ROLE_SLOT, &[(names::GROUP, "g"), (names::KIND, "failover-hold")], Some(LeaseSpec::default())),
            // A deleted group's leftover of the same name.
            lease(names::ROLE_SLOT, &[(names::GROUP, "g"), (names::GROUP_UID, "u0")], Some(held)),
            lease(
                names::ROLE_TOMBSTONE,
                &[
                    (names::GROUP, "g"),
                    (names::OPERATION_ID, "op-1"),
                    (names::CLIENT, "ci/deployer"),
                    (names::REVOKE_REASON, "OperatorRevoked"),
                ],
                None,
            ),
            lease(
                names::ROLE_VERIFICATION,
                &[(names::GROUP, "g"), (names::OPERATION_ID, "op-0"), (names::ENDING, "Lapsed")],
                None,
            ),
        ];
        let l = decode(&group(), &items, at("2026-01-01T00:00:10Z"));
        assert_eq!(l.grants.len(), 1, "{l:?}");
        let g = &l.grants[0];
        assert_eq!(
            (g.operation_id.as_str(), g.expired, g.revoked.as_deref()),
            ("op-1", false, Some("OperatorRevoked"))
        );
        assert_eq!(g.expires_at.as_deref(), Some("2026-01-01T00:00:30Z"));
        assert_eq!(time_left(g, at("2026-01-01T00:00:10Z")), "in 20s");
        assert_eq!(l.pending_verifications[0].ending, "Lapsed");
        let later = decode(&group(), &items, at("2026-01-01T00:00:31Z"));
        assert!(later.grants[0].expired);
        assert_eq!(later.live().count(), 0);
    }
}
