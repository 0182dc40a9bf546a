//! Found by the third hostile attack (kept as its input): decision record integrity (docs/failover.md "Decision record
//! integrity": a record whose decision fields are owned by any other field
//! manager "was edited by hand and is not trusted: DecisionConflict=True
//! ..., status is not restored from it, and the operator refuses every
//! failover"). Two ways round it that a person with `kubectl` and write
//! access to ConfigMaps in the operator's namespace has:
//!
//! - name the operator's field manager: `kubectl patch cm ...
//!   --field-manager=bloodraven-operator-decider` (field managers are not
//!   authenticated). The edit is trusted: status is "restored" from it and
//!   primary reassertion fences the real primary.
//! - drop the `bloodraven.shipstream.io/record-version` annotation in the
//!   same `kubectl edit`: the record is then "an older operator's", taken
//!   over when its site and generation agree with status, and the operator
//!   rewrites it under its own manager — the hand edit of `requests` is
//!   laundered and an old requestId runs a second time.
//!
//! Both should end in DecisionConflict; today neither does.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::time::Duration;

use bloodraven_e2e::fixtures::{Scenario, completed, condition, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

const T: Duration = Duration::from_secs(90);

#[tokio::test]
async fn a_record_edit_under_the_operators_own_field_manager_name_is_not_trusted() {
    let sc = Scenario::start("a3spoof", 1, LeaderTimings::default()).await;
    let name = sc.bootstrapped_group("g").await;
    let record = sc.record_of(&name).await;
    let records: Api<ConfigMap> = Api::namespaced(sc.cluster.client.clone(), &sc.ns.name);
    // kubectl patch cm <record> --field-manager=bloodraven-operator-decider ...
    let spoof = PatchParams { field_manager: Some("bloodraven-operator-decider".into()), ..PatchParams::default() };
    let edit = json!({"data": {"activeSite": "pdx", "topologyGeneration": "2"}});
    records.patch(&record.name_any(), &spoof, &Patch::Merge(&edit)).await.unwrap();

    // Give the operator three probe rounds.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let s = sc.cluster.groups().get(&name).await.unwrap().status.unwrap();
    let iad_ro = sc.pair.sql("iad", "SELECT @@read_only").trim().to_owned();
    let pdx_ro = sc.pair.sql("pdx", "SELECT @@read_only").trim().to_owned();
    eprintln!(
        "attack3: after the spoofed record edit: status active={:?} gen={:?}, DecisionConflict={:?}, NoPrimary={:?}; iad read_only={iad_ro}, pdx read_only={pdx_ro}",
        s.active_site,
        s.topology_generation,
        condition(&s, "DecisionConflict").map(|c| (&c.status, &c.reason)),
        condition(&s, "NoPrimary").map(|c| (&c.status, &c.reason)),
    );
    assert_eq!(
        (s.active_site.as_deref(), s.topology_generation),
        (Some("iad"), Some(1)),
        "status must not be restored from a hand-edited record"
    );
    assert_eq!(iad_ro, "0", "the real primary must stay writable");
    assert_eq!(condition(&s, "DecisionConflict").map(|c| c.status.as_str()), Some("True"));
    sc.cluster.delete_group(&name).await;
}

#[tokio::test]
async fn a_hand_edit_that_drops_the_record_version_is_not_laundered() {
    let sc = Scenario::start("a3legacy", 1, LeaderTimings::default()).await;
    let name = sc.bootstrapped_group("g").await;
    sc.request_failover(&name, "pdx", "r1").await;
    wait_status(&sc.cluster, &name, "r1 completed at pdx, generation 2", T, |s| completed(s, "r1", "pdx", 2)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    sc.request_failover(&name, "iad", "r2").await;
    wait_status(&sc.cluster, &name, "r2 completed at iad, generation 3", T, |s| completed(s, "r2", "iad", 3)).await;
    let record = sc.record_of(&name).await;
    let requests = record.data.as_ref().unwrap().get("requests").cloned().unwrap_or_default();
    assert!(requests.lines().any(|l| l == "r1"), "the record remembers r1: {requests:?}");

    // One `kubectl edit` of the record: forget the requests, and drop the
    // version annotation.
    let records: Api<ConfigMap> = Api::namespaced(sc.cluster.client.clone(), &sc.ns.name);
    let by_hand = PatchParams { field_manager: Some("kubectl-edit".into()), ..PatchParams::default() };
    let edit = json!({
        "metadata": {"annotations": {"bloodraven.shipstream.io/record-version": null}},
        "data": {"requests": ""},
    });
    records.patch(&record.name_any(), &by_hand, &Patch::Merge(&edit)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(12)).await;
    let s = sc.cluster.groups().get(&name).await.unwrap().status.unwrap();
    let after = records.get(&record.name_any()).await.unwrap();
    let managers: Vec<String> =
        after.metadata.managed_fields.iter().flatten().filter_map(|m| m.manager.clone()).collect();
    eprintln!(
        "attack3: after the edit: DecisionConflict={:?}; record managers {managers:?}, annotations {:?}",
        condition(&s, "DecisionConflict").map(|c| (&c.status, &c.reason, &c.message)),
        after.metadata.annotations
    );

    // The old id again: docs/failover.md "An id the group has run before ... is never run again".
    sc.request_failover(&name, "pdx", "r1").await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let s = sc.cluster.groups().get(&name).await.unwrap().status.unwrap();
    eprintln!(
        "attack3: after re-requesting r1: active={:?} gen={:?} planned={:?}",
        s.active_site, s.topology_generation, s.planned_failover
    );
    assert_eq!(
        (s.active_site.as_deref(), s.topology_generation),
        (Some("iad"), Some(3)),
        "r1 ran before; a hand-edited record must not make it run again"
    );
    assert_eq!(
        condition(&s, "DecisionConflict").map(|c| c.status.as_str()),
        Some("True"),
        "the record was edited by hand (kubectl-edit owned data.requests)"
    );
    sc.cluster.delete_group(&name).await;
}
