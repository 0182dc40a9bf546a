//! State bound to the object it belongs to, on real
//! components: a group deleted and re-created under the same name never
//! inherits the old group's leases, tombstones or decision record, whether
//! its finalizer ran or was removed by hand; and a lease lost after its DDL
//! started raises `SchemaVerificationRequired` until a person clears it.

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test
#![allow(clippy::many_single_char_names)] // a, b, c name the operations of the input that exposed the flaw

use std::time::Duration;

use bloodraven_e2e::deploy::{self, Pipeline, token_of};
use bloodraven_e2e::fixtures::{SITE_SECRET, Scenario, condition, group, is_ready_at, wait_event, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::wait::wait_for;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const T: Duration = Duration::from_secs(60);
const FINALIZER: &str = "bloodraven.shipstream.io/cleanup";

struct Env {
    sc: Scenario,
    op: bloodraven_e2e::Operator,
    tls: deploy::TlsFiles,
    p: Pipeline,
}

async fn setup(prefix: &str) -> Env {
    let d = deploy::scenario(prefix).await;
    Env { sc: d.sc, op: d.op, tls: d.tls, p: d.pipeline }
}

impl Env {
    /// Annotates the group.
    async fn annotate(&self, key: &str, value: &str) {
        let patch = json!({"metadata": {"annotations": {key: value}}});
        self.sc.cluster.groups().patch(&self.p.group, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    }

    /// A live lease and a tombstone: `op-old` revoked by hand, `op-live` holding the mutex.
    async fn live_lease_and_tombstone(&self) {
        // A short TTL: once revoked, op-old keeps the mutex until its last deadline.
        let old = self.p.post_until(201, "migration", "op-old", "counter-app", 10).await;
        self.annotate("bloodraven.shipstream.io/revoke-deployment-leases", "now").await;
        wait_for("op-old to be revoked", T, || async {
            let r = self.p.put("migration", "op-old", &token_of(&old)).await;
            if r.status == 409 { Ok(()) } else { Err(format!("{r:?}")) }
        })
        .await;
        self.p.post_until(201, "migration", "op-live", "counter-app", 120).await;
    }

    /// The operator's Leases and records that name this group.
    async fn stored(&self) -> (Vec<Lease>, Vec<ConfigMap>) {
        let leases: Api<Lease> = Api::namespaced(self.sc.cluster.client.clone(), &self.sc.ns.name);
        let leases = leases.list(&ListParams::default().labels("bloodraven.shipstream.io/deploy-lease")).await.unwrap();
        let records: Api<ConfigMap> = Api::namespaced(self.sc.cluster.client.clone(), &self.sc.ns.name);
        let records =
            records.list(&ListParams::default().labels("bloodraven.shipstream.io/record=topology")).await.unwrap();
        let mine = |a: Option<&std::collections::BTreeMap<String, String>>, key: &str| {
            a.and_then(|a| a.get(key)).is_some_and(|g| *g == self.p.group)
        };
        (
            leases
                .items
                .into_iter()
                .filter(|l| mine(l.metadata.annotations.as_ref(), "bloodraven.shipstream.io/group"))
                .collect(),
            records.items.into_iter().filter(|c| mine(c.data.as_ref(), "group")).collect(),
        )
    }

    /// Re-creates the group with the same spec and waits for its bootstrap; returns its UID.
    async fn recreate(&self) -> String {
        let g = group(&self.p.group, &self.sc.ns.name, self.sc.pair.sites(&self.sc.ns.name, SITE_SECRET), "iad");
        let created = wait_for("the group to be created again", T, || async {
            self.sc.cluster.groups().create(&PostParams::default(), &g).await.map_err(|e| e.to_string())
        })
        .await;
        wait_status(&self.sc.cluster, &self.p.group, "the new group's bootstrap", T, |s| is_ready_at(s, "iad", 1))
            .await;
        created.metadata.uid.unwrap()
    }

    /// What the new group shows: no inherited lease, no inherited tombstone.
    async fn starts_afresh(&self, p: &Pipeline) {
        let g = wait_for("GET on the new group", T, || async {
            let g = p.get().await;
            if g.status == 200 { Ok(g) } else { Err(format!("{g:?}")) }
        })
        .await;
        assert_eq!(g.body["leases"], json!([]), "the old group's lease is not the new group's: {g:?}");
        let again = p.post("migration", "op-old", "counter-app", 30).await;
        assert_eq!(again.status, 201, "the old group's tombstone is not the new group's: {again:?}");
        assert_eq!(p.delete("migration", "op-old", &token_of(&again)).await.status, 204);
    }
}

#[tokio::test]
async fn a_group_recreated_under_the_same_name_inherits_nothing() {
    let mut e = setup("recreate").await;
    e.live_lease_and_tombstone().await;
    let groups = e.sc.cluster.groups();
    let old_uid = groups.get(&e.p.group).await.unwrap().metadata.uid.unwrap();
    assert!(
        groups.get(&e.p.group).await.unwrap().metadata.finalizers.unwrap_or_default().contains(&FINALIZER.to_owned())
    );

    // The input that exposed the flaw: operator stopped, group deleted, re-created, operator started.
    // The finalizer keeps the old group until an operator has cleaned up after it.
    assert!(e.op.stop().await);
    groups.delete(&e.p.group, &DeleteParams::default()).await.unwrap();
    let terminating = groups.get(&e.p.group).await.unwrap();
    assert!(terminating.metadata.deletion_timestamp.is_some(), "waits for its finalizer");
    let (op, base) = deploy::start_operator(&e.sc.cluster, &e.sc.ns, "op2", &e.tls, LeaderTimings::default()).await;
    e.op = op;
    e.p.base = base;
    let p = e.p.clone();
    wait_for("the old group to be finalized", T, || async {
        match groups.get_opt(&e.p.group).await.map_err(|e| e.to_string())? {
            Some(g) if g.metadata.uid.as_deref() == Some(old_uid.as_str()) => Err("still there".to_owned()),
            _ => Ok(()),
        }
    })
    .await;
    let (leases, records) = e.stored().await;
    assert!(leases.is_empty() && records.is_empty(), "cleaned up: {leases:?} {records:?}");
    let new_uid = e.recreate().await;
    assert_ne!(new_uid, old_uid);
    e.starts_afresh(&p).await;

    // The same with the finalizer removed by hand: nothing cleans up at
    // delete time, so the leftovers carry the old UID, are never read as the
    // new group's, and are swept when an operator becomes leader.
    e.live_lease_and_tombstone().await;
    let uid = groups.get(&e.p.group).await.unwrap().metadata.uid.unwrap();
    assert!(e.op.stop().await);
    let patch = json!({"metadata": {"finalizers": null}});
    groups.patch(&e.p.group, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    groups.delete(&e.p.group, &DeleteParams::default()).await.unwrap();
    let (leases, _) = e.stored().await;
    let role =
        |l: &Lease| l.metadata.labels.as_ref().and_then(|m| m.get("bloodraven.shipstream.io/deploy-lease")).cloned();
    let roles: Vec<Option<String>> = leases.iter().map(role).collect();
    assert!(
        roles.contains(&Some("slot".into())) && roles.contains(&Some("tombstone".into())),
        "left behind: the live slot and the tombstone: {roles:?}"
    );
    let newest = e.recreate_without_operator().await;
    assert_ne!(newest, uid);
    let (op, base) = deploy::start_operator(&e.sc.cluster, &e.sc.ns, "op3", &e.tls, LeaderTimings::default()).await;
    e.op = op;
    e.p.base = base;
    let p = e.p.clone();
    wait_status(&e.sc.cluster, &e.p.group, "the new group's bootstrap", T, |s| is_ready_at(s, "iad", 1)).await;
    e.starts_afresh(&p).await;
    wait_for("the leftovers of the old UID to be swept", T, || async {
        let (leases, records) = e.stored().await;
        let stale: Vec<String> = leases
            .iter()
            .filter(|l| {
                l.metadata.annotations.as_ref().and_then(|a| a.get("bloodraven.shipstream.io/group-uid"))
                    != Some(&newest)
            })
            .filter_map(|l| l.metadata.name.clone())
            .chain(
                records
                    .iter()
                    .filter(|c| c.data.as_ref().and_then(|d| d.get("groupUID")) != Some(&newest))
                    .filter_map(|c| c.metadata.name.clone()),
            )
            .collect();
        if stale.is_empty() { Ok(()) } else { Err(format!("stale: {stale:?}")) }
    })
    .await;
}

impl Env {
    /// Creates the group again while no operator runs; returns its UID.
    async fn recreate_without_operator(&self) -> String {
        let g = group(&self.p.group, &self.sc.ns.name, self.sc.pair.sites(&self.sc.ns.name, SITE_SECRET), "iad");
        let created = wait_for("the group to be created again", T, || async {
            self.sc.cluster.groups().create(&PostParams::default(), &g).await.map_err(|e| e.to_string())
        })
        .await;
        created.metadata.uid.unwrap()
    }
}

#[tokio::test]
async fn a_lease_lost_after_ddl_started_needs_a_person() {
    let e = setup("verify").await;
    let name = e.p.group.clone();
    let verification = |want: bool, op: Option<&'static str>| {
        move |s: &bloodraven_api::v1alpha1::MysqlFailoverGroupStatus| {
            let c = condition(s, "SchemaVerificationRequired").ok_or("no SchemaVerificationRequired")?;
            let on = c.status == "True";
            if on != want || op.is_some_and(|op| !c.message.contains(op)) {
                return Err(format!("SchemaVerificationRequired {} ({})", c.status, c.message));
            }
            Ok(())
        }
    };

    // Revoked after DDL started.
    let r = e.p.post_until(201, "migration", "op-r", "counter-app", 30).await;
    let put = e.p.put_body("migration", "op-r", json!({"token": token_of(&r), "ddlState": "started"})).await;
    assert_eq!(put.status, 200, "{put:?}");
    e.annotate("bloodraven.shipstream.io/revoke-deployment-leases", "now").await;
    let s =
        wait_status(&e.sc.cluster, &name, "SchemaVerificationRequired for op-r", T, verification(true, Some("op-r")))
            .await;
    assert!(condition(&s, "SchemaVerificationRequired").unwrap().message.contains("counter-app"));
    let note = wait_event(&e.sc.cluster, &name, "SchemaVerificationRequired").await;
    assert!(note.contains("op-r") && note.contains("counter-app") && note.contains("OperatorRevoked"), "{note}");

    // While op-r's schema awaits a person, no new migration of the instance.
    let refused = e.p.post_until(409, "migration", "op-l", "counter-app", 5).await;
    assert_eq!(
        (refused.body["error"].as_str(), refused.body["verification"]["operationId"].as_str()),
        (Some("schema_verification_required"), Some("op-r")),
        "{refused:?}"
    );
    // A mistyped operationId clears nothing and says so, naming what still
    // awaits verification; the condition stays.
    e.annotate("bloodraven.shipstream.io/schema-verified", "op-rr").await;
    let note = wait_event(&e.sc.cluster, &name, "SchemaVerifiedUnmatched").await;
    assert!(
        note.contains("op-rr (no such verification pending)") && note.contains("awaiting verification: op-r"),
        "{note}"
    );
    wait_for("the mistyped annotation to be removed", T, || async {
        let g = e.sc.cluster.groups().get(&name).await.map_err(|e| e.to_string())?;
        let left = g.metadata.annotations.unwrap_or_default().get("bloodraven.shipstream.io/schema-verified").cloned();
        left.map_or(Ok(()), |v| Err(format!("still there: {v}")))
    })
    .await;
    let s = e.sc.cluster.groups().get(&name).await.unwrap().status.unwrap();
    assert_eq!(condition(&s, "SchemaVerificationRequired").unwrap().status, "True", "a typo cleared it");
    // A person verified op-r: cleared.
    e.annotate("bloodraven.shipstream.io/schema-verified", "op-r").await;
    wait_status(&e.sc.cluster, &name, "op-r cleared", T, verification(false, None)).await;

    // Lapsed after DDL started (nobody takes the slot: the reconciler notices).
    let l = e.p.post_until(201, "migration", "op-l", "counter-app", 5).await;
    let put = e.p.put_body("migration", "op-l", json!({"token": token_of(&l), "ddlState": "started"})).await;
    assert_eq!(put.status, 200);
    let s =
        wait_status(&e.sc.cluster, &name, "SchemaVerificationRequired for op-l", T, verification(true, Some("op-l")))
            .await;
    assert!(condition(&s, "SchemaVerificationRequired").unwrap().message.contains("Lapsed"));
    let c = condition(&s, "SchemaVerificationRequired").unwrap();
    assert!(!c.message.contains("op-r"), "op-r still listed: {}", c.message);

    // Then all of them.
    e.annotate("bloodraven.shipstream.io/schema-verified", "all").await;
    wait_status(&e.sc.cluster, &name, "SchemaVerificationRequired cleared", T, verification(false, None)).await;
    let note = wait_event(&e.sc.cluster, &name, "SchemaVerified").await;
    assert!(note.contains("op-l") || note.contains("op-r"), "{note}");
    let g = e.sc.cluster.groups().get(&name).await.unwrap();
    assert!(!g.metadata.annotations.unwrap_or_default().contains_key("bloodraven.shipstream.io/schema-verified"));

    // A lease that ends before DDL (or after it completed) needs nobody.
    let b = e.p.post_until(201, "migration", "op-b", "counter-app", 30).await;
    let put = e.p.put_body("migration", "op-b", json!({"token": token_of(&b), "ddlState": "completed"})).await;
    assert_eq!(put.status, 200);
    assert_eq!(e.p.delete("migration", "op-b", &token_of(&b)).await.status, 204);
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let status = e.sc.cluster.groups().get(&name).await.unwrap().status.unwrap();
    let c = condition(&status, "SchemaVerificationRequired").unwrap();
    assert!(c.status == "False" && !c.message.contains("op-b"), "{c:?}");
}
