//! Found by a hostile attack on the decision record digests and the record
//! watch cache. Reproduced by hand on the playground first.
//!
//! 1. Replay. The digest (HMAC of the decision fields) proves a record's
//!    data was written by the operator at *some* time, not that it is the
//!    latest record: a person with write access to ConfigMaps in the
//!    operator's namespace who kept a copy of an older record
//!    (`kubectl get cm bloodraven-topology-… -o json`) can put its data
//!    back after a failover (`kubectl patch cm … --type=merge -p
//!    '{"data": <old data, old digest>}'`). It verifies, so status is
//!    "restored" from it: `topologyGeneration` goes *backwards* (4 → 3 on
//!    the playground), `activeSite` names the old, fenced primary, the
//!    `<db>-primary` Service is repointed to that read-only site, the group
//!    reports `UnexpectedPrimary` with `DecisionConflict=False ("the
//!    decision record verifies")`, and the record forgets the request ids
//!    taken up since. docs/failover.md: a record edited with `kubectl
//!    patch` "is not trusted: DecisionConflict=True ..., status is not
//!    restored from it"; docs say `topologyGeneration` "must never go
//!    backwards".
//!
//! 2. The cache never settles after a planned failover. `Cache::read_settled`
//!    uses the cached record only when `admitted` is empty, but a completed
//!    planned failover leaves `admitted` set for good ("r1 pdx iad"), so a
//!    group that was ever switched over reads its record from the API
//!    server on every probe. Measured on the playground (probe interval
//!    2 s, one group): 0 ConfigMap GETs in 20 s after a fresh bootstrap, 20
//!    in 20 s after one completed planned failover.
//!
//! Both failed before the fix: a verified record below the generation the
//! running operator has seen decided is now a DecisionConflict, and a
//! record whose request has ended is settled for the watch cache (the
//! operator's `bloodraven_decision_record_reads_total` counts reads by
//! source).
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::collections::BTreeMap;
use std::time::Duration;

use bloodraven_e2e::fixtures::{Scenario, completed, condition, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

const T: Duration = Duration::from_secs(90);

#[tokio::test]
async fn replaying_an_older_genuine_record_does_not_move_status_backwards() {
    let sc = Scenario::start("a4replay", 1, LeaderTimings::default()).await;
    let name = sc.bootstrapped_group("g").await;
    sc.request_failover(&name, "pdx", "r1").await;
    wait_status(&sc.cluster, &name, "r1 completed at pdx, generation 2", T, |s| completed(s, "r1", "pdx", 2)).await;
    // The attacker keeps a copy of the genuine generation-2 record ...
    let old: BTreeMap<String, String> = sc.record_of(&name).await.data.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    sc.request_failover(&name, "iad", "r2").await;
    wait_status(&sc.cluster, &name, "r2 completed at iad, generation 3", T, |s| completed(s, "r2", "iad", 3)).await;

    // ... and puts it back: kubectl patch cm <record> --type=merge -p '{"data": <old>}'.
    let record = sc.record_of(&name).await;
    let records: Api<ConfigMap> = Api::namespaced(sc.cluster.client.clone(), &sc.ns.name);
    let by_hand = PatchParams { field_manager: Some("kubectl-patch".into()), ..PatchParams::default() };
    records.patch(&record.name_any(), &by_hand, &Patch::Merge(&json!({"data": old}))).await.unwrap();

    // Three probe rounds and more.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let s = sc.cluster.groups().get(&name).await.unwrap().status.unwrap();
    let iad_ro = sc.pair.sql("iad", "SELECT @@read_only").trim().to_owned();
    eprintln!(
        "attack4: after replaying the generation-2 record: status active={:?} gen={:?}, DecisionConflict={:?}, Ready={:?}; iad read_only={iad_ro}",
        s.active_site,
        s.topology_generation,
        condition(&s, "DecisionConflict").map(|c| (&c.status, &c.reason)),
        condition(&s, "Ready").map(|c| (&c.status, &c.reason)),
    );
    assert!(s.topology_generation.unwrap_or(0) >= 3, "topologyGeneration must never go backwards");
    assert_eq!(s.active_site.as_deref(), Some("iad"), "status must not be restored from a replayed older record");
    assert_eq!(iad_ro, "0", "the real primary stays writable");
    assert_eq!(
        condition(&s, "DecisionConflict").map(|c| c.status.as_str()),
        Some("True"),
        "a record that went back in time was edited by hand"
    );
    sc.cluster.delete_group(&name).await;
}

#[tokio::test]
async fn a_completed_planned_failover_leaves_a_record_the_cache_can_settle_on() {
    let sc = Scenario::start("a4settle", 1, LeaderTimings::default()).await;
    let name = sc.bootstrapped_group("g").await;
    sc.request_failover(&name, "pdx", "r1").await;
    wait_status(&sc.cluster, &name, "r1 completed at pdx, generation 2", T, |s| completed(s, "r1", "pdx", 2)).await;
    let reads = |m: &str, source: &str| {
        let series = format!("bloodraven_decision_record_reads_total{{source=\"{source}\"}} ");
        m.lines().find_map(|l| l.strip_prefix(series.as_str())).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0)
    };
    // Settled: the completion is written and the watch caught up, so probes
    // read from the cache again.
    let at_completion = reads(&sc.operators[0].metrics().await.unwrap(), "cache");
    bloodraven_e2e::wait_for("a record read from the cache after the completion", T, || async {
        let now = reads(&sc.operators[0].metrics().await?, "cache");
        if now > at_completion + 1.0 { Ok(()) } else { Err(format!("{now}")) }
    })
    .await;
    let api_reads = |m: &str| reads(m, "api");
    let before = api_reads(&sc.operators[0].metrics().await.unwrap());
    // Ten probe rounds (1 s interval): each read its record from the API
    // server before the fix, because `admitted` stays set after the request.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let after = api_reads(&sc.operators[0].metrics().await.unwrap());
    assert!(after - before <= 1.0, "record GETs over ten probes of a settled group: {}", after - before);
    sc.cluster.delete_group(&name).await;
}
