//! A planned failover's GTID catch-up does not hold the group's reconcile (found
//! by an attack: the wait ran as one `MASTER_GTID_WAIT` of up to
//! `catchUpTimeoutSeconds`, up to an hour, and meanwhile the group's probes,
//! status and spec changes went unseen). It waits in slices of at most 2 s;
//! its bound counts from the `Draining` transition, so it still ends the
//! request `Failed` on time, with the old primary writable again and no
//! generation change. The real pair; pdx applies late (`MASTER_DELAY`).
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::time::{Duration, Instant};

use bloodraven_e2e::fixtures::{Scenario, is_ready_at, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
use kube::api::{Patch, PatchParams};
use serde_json::json;

const T: Duration = Duration::from_secs(90);

#[tokio::test]
async fn the_catch_up_gives_the_reconcile_back_and_keeps_its_bound() {
    let sc = Scenario::start("catchup", 1, LeaderTimings::default()).await;
    let name = sc.bootstrapped_group("g").await;
    let groups = sc.cluster.groups();
    let params = PatchParams::default();
    let policy = json!({"spec": {"failover": {"maxLagSeconds": 86400, "catchUpTimeoutSeconds": 120}}});
    groups.patch(&name, &params, &Patch::Merge(&policy)).await.unwrap();
    // pdx applies 25 s late, so the drain waits in its catch-up.
    sc.pair.set_delay("pdx", 25);
    sc.pair.sql("iad", "CREATE DATABASE late_one");

    let request = json!({"spec": {"plannedFailover": {"targetSite": "pdx", "requestId": "c1"}}});
    groups.patch(&name, &params, &Patch::Merge(&request)).await.unwrap();
    wait_status(&sc.cluster, &name, "c1 draining", T, |s| match &s.planned_failover {
        Some(p) if p.phase == "Draining" => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;
    sc.pair.wait_read_only("iad", true, T).await;

    // A spec change while the catch-up waits is observed within seconds,
    // not after the wait (metadata.generation → status.observedGeneration).
    let edited = groups
        .patch(&name, &params, &Patch::Merge(&json!({"spec": {"failover": {"probeTimeoutSeconds": 3}}})))
        .await
        .unwrap();
    let generation = edited.metadata.generation;
    let asked = Instant::now();
    let s = wait_status(&sc.cluster, &name, "the edit observed while draining", Duration::from_secs(10), |s| {
        if s.observed_generation != generation {
            return Err(format!("observedGeneration {:?}, want {generation:?}", s.observed_generation));
        }
        Ok(())
    })
    .await;
    eprintln!("catch-up: spec edit observed after {:?} while draining", asked.elapsed());
    let phase = s.planned_failover.as_ref().map(|p| p.phase.clone());
    assert_eq!(phase.as_deref(), Some("Draining"), "observed during the catch-up, not after it: {s:?}");
    assert_eq!(s.unstable_reason.as_deref(), Some("OperationInProgress"), "{s:?}");

    // It completes once pdx has applied everything.
    wait_status(&sc.cluster, &name, "c1 completed at pdx, generation 2", T, |s| match &s.planned_failover {
        Some(p) if p.request_id == "c1" && p.phase == "Completed" => is_ready_at(s, "pdx", 2),
        other => Err(format!("{other:?}")),
    })
    .await;
    let applied = "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = 'late_one'";
    assert_eq!(sc.pair.sql("pdx", applied).trim(), "1", "pdx applied the write made before the drain");

    // Back to iad with a bound shorter than iad's delay: Failed on time,
    // pdx writable again, no generation change.
    groups
        .patch(&name, &params, &Patch::Merge(&json!({"spec": {"failover": {"catchUpTimeoutSeconds": 4}}})))
        .await
        .unwrap();
    sc.pair.set_delay("iad", 60);
    wait_status(&sc.cluster, &name, "iad replicating again", T, |s| {
        let iad = s.health.iter().find(|h| h.site == "iad").ok_or("no iad health")?;
        (iad.replication_running == Some(true)).then_some(()).ok_or_else(|| format!("{iad:?}"))
    })
    .await;
    sc.pair.sql("pdx", "CREATE DATABASE later_one");
    let back = json!({"spec": {"plannedFailover": {"targetSite": "iad", "requestId": "c2"}}});
    let asked = Instant::now();
    groups.patch(&name, &params, &Patch::Merge(&back)).await.unwrap();
    let s = wait_status(&sc.cluster, &name, "c2 failed: iad did not catch up", T, |s| match &s.planned_failover {
        Some(p) if p.request_id == "c2" && p.phase == "Failed" => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;
    let took = asked.elapsed();
    eprintln!("catch-up: c2 failed after {took:?} (fence bound 10 s + catch-up bound 4 s)");
    assert!(took < Duration::from_secs(45), "the bound still ends the wait: {took:?}");
    let message = s.planned_failover.unwrap().message.unwrap_or_default();
    assert!(message.contains("did not catch up"), "{message}");
    assert_eq!(
        (s.active_site.as_deref(), s.topology_generation),
        (Some("pdx"), Some(2)),
        "no bump for a failed request"
    );
    sc.pair.wait_read_only("pdx", false, T).await;
    sc.pair.set_delay("iad", 0);
    sc.cluster.delete_group(&name).await;
}
