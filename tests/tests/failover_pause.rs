//! A leader that loses its Lease acts no more: the leader is
//! SIGSTOPped mid-planned failover (waiting in the GTID catch-up) past the lease
//! duration; the other operator takes over and finishes the request; the
//! paused one, SIGCONTed, sends no decision and no write — the request is
//! decided exactly once.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::time::Duration;

use bloodraven_api::names::LEADER_LEASE_NAME;
use bloodraven_e2e::fixtures::{Scenario, group_events, is_ready_at, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

const T: Duration = Duration::from_secs(90);

#[tokio::test]
async fn a_leader_paused_mid_planned_failover_acts_no_more_after_its_deadline() {
    let sc = Scenario::start("pause", 2, LeaderTimings::default()).await;
    let name = sc.bootstrapped_group("g").await;
    let patch = json!({"spec": {"failover": {"maxLagSeconds": 86400, "catchUpTimeoutSeconds": 120}}});
    sc.cluster.groups().patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    // pdx applies 15 s late, so the drain waits in its catch-up.
    sc.pair.set_delay("pdx", 15);
    sc.pair.sql("iad", "CREATE DATABASE late_one");

    let request = json!({"spec": {"plannedFailover": {"targetSite": "pdx", "requestId": "p1"}}});
    sc.cluster.groups().patch(&name, &PatchParams::default(), &Patch::Merge(&request)).await.unwrap();
    wait_status(&sc.cluster, &name, "p1 draining", T, |s| match &s.planned_failover {
        Some(p) if p.phase == "Draining" => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;
    sc.pair.wait_read_only("iad", true, T).await;
    let leases: Api<Lease> = Api::namespaced(sc.cluster.client.clone(), &sc.ns.name);
    let holder = leases.get(LEADER_LEASE_NAME).await.unwrap().spec.unwrap().holder_identity.unwrap();
    let (paused, other) = if sc.operators[0].identity == holder { (0, 1) } else { (1, 0) };
    sc.operators[paused].signal("STOP");

    // The other one takes over and finishes it once pdx has applied.
    let s = wait_status(&sc.cluster, &name, "p1 completed at pdx, generation 2", T, |s| match &s.planned_failover {
        Some(p) if p.request_id == "p1" && p.phase == "Completed" => is_ready_at(s, "pdx", 2),
        other => Err(format!("{other:?}")),
    })
    .await;
    let new_holder = leases.get(LEADER_LEASE_NAME).await.unwrap().spec.unwrap().holder_identity.unwrap();
    assert_eq!(new_holder, sc.operators[other].identity);

    // Woken long after its renew deadline: it sends nothing more.
    sc.operators[paused].signal("CONT");
    tokio::time::sleep(Duration::from_secs(8)).await;
    let now = sc.cluster.groups().get(&name).await.unwrap().status.unwrap();
    assert_eq!((now.active_site.as_deref(), now.topology_generation), (Some("pdx"), Some(2)), "{s:?}");
    let decisions = group_events(&sc.cluster, &name)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("ActiveSiteChanged"))
        .map(|e| e.series.map_or(1, |s| s.count))
        .sum::<i32>();
    assert_eq!(decisions, 1, "the request was decided more than once");
    let log = std::fs::read_to_string(&sc.operators[paused].log).unwrap();
    assert!(
        !log.contains("planned failover decided"),
        "the paused leader decided:\n{}",
        sc.operators[paused].log_tail()
    );
    assert_eq!(sc.pair.sql("pdx", "SELECT @@read_only").trim(), "0");
    assert_eq!(sc.pair.sql("iad", "SELECT @@read_only").trim(), "1");
    sc.cluster.delete_group(&name).await;
}
