//! Bootstrap on a real API server with a real replicating pair:
//! generation 1, health, metrics, Events; and a restart that changes nothing.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

use std::time::Duration;

use bloodraven_e2e::Operator;
use bloodraven_e2e::fixtures::{Scenario, wait_event, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::wait::wait_for;

const T: Duration = Duration::from_secs(60);

#[tokio::test]
async fn healthy_pair_bootstraps_to_generation_one() {
    let sc = Scenario::start("boot", 1, LeaderTimings::default()).await;
    let (cluster, pair, operator) = (&sc.cluster, &sc.pair, sc.operator());
    let name = sc.bootstrapped_group("g").await;
    let status = wait_status(cluster, &name, "status", T, |_| Ok(())).await;
    let iad = status.health.iter().find(|h| h.site == "iad").unwrap();
    let pdx = status.health.iter().find(|h| h.site == "pdx").unwrap();
    assert!(iad.reachable && iad.writable == Some(true), "{iad:?}");
    assert!(pdx.reachable && pdx.writable == Some(false), "{pdx:?}");
    assert_eq!(pdx.replication_running, Some(true), "{pdx:?}");
    assert_eq!(pdx.source_server_id, iad.server_id, "pdx replicates from iad");
    assert_eq!(iad.replication_running, Some(false), "the primary has no replication");
    assert!(iad.gtid_position.is_some() && pdx.gtid_position.is_some());
    for c in &status.conditions {
        assert!(c.observed_generation.is_some(), "condition {} lacks observedGeneration", c.type_);
    }
    assert_eq!(status.observed_generation, Some(1));

    // A write on the primary is seen by the replica's GTID position in status.
    pair.sql("iad", "CREATE DATABASE bootstrap_probe");
    let gtid = pair.gtid_position("iad");
    wait_status(cluster, &name, "pdx's GTID position to follow iad's", T, |s| {
        let pdx = s.health.iter().find(|h| h.site == "pdx").ok_or("no pdx health")?;
        if pdx.gtid_position.as_deref() == Some(gtid.as_str()) {
            Ok(())
        } else {
            Err(format!("pdx at {:?}, iad at {gtid}", pdx.gtid_position))
        }
    })
    .await;

    let note = wait_event(cluster, &name, "Bootstrapped").await;
    assert!(note.contains("iad"), "{note}");

    let metrics = wait_for("metrics to show the group", T, || async {
        let m = operator.metrics().await?;
        if m.contains(&format!("bloodraven_topology_generation{{group=\"{name}\"}} 1")) {
            Ok(m)
        } else {
            Err("not yet".into())
        }
    })
    .await;
    assert!(metrics.contains(&format!("bloodraven_site_up{{group=\"{name}\",site=\"pdx\"}} 1")), "{metrics}");
    assert!(
        metrics.contains(&format!("bloodraven_replication_lag_seconds{{group=\"{name}\",site=\"pdx\"}} 0")),
        "{metrics}"
    );
    assert!(metrics.contains("bloodraven_reconcile_total{controller=\"failovergroup\"}"), "{metrics}");
    assert!(metrics.contains("bloodraven_leader 1"), "{metrics}");
    assert_eq!(operator.plain_status("/healthz").await, Ok(200));
    assert_eq!(operator.plain_status("/readyz").await, Ok(200));
    assert_eq!(operator.plain_status("/deploy/v1/groups/x").await, Ok(404), "the plain port never serves /deploy");

    // Deleting the group removes its series.
    cluster.delete_group(&name).await;
    wait_for("the deleted group's metrics to go", T, || async {
        let m = operator.metrics().await?;
        let left: Vec<&str> = m.lines().filter(|l| l.contains(&format!("group=\"{name}\""))).collect();
        if left.is_empty() { Ok(()) } else { Err(format!("still exported: {left:?}")) }
    })
    .await;
}

#[tokio::test]
async fn restarting_the_operator_keeps_the_topology_generation() {
    let mut sc = Scenario::start("restart", 1, LeaderTimings::default()).await;
    let name = sc.bootstrapped_group("g").await;
    let (cluster, ns) = (&sc.cluster, &sc.ns);
    let first = &mut sc.operators[0];
    assert!(first.stop().await, "SIGTERM must end the operator cleanly; log:\n{}", first.log_tail());
    let stopped_at = k8s_openapi::jiff::Timestamp::now().as_millisecond() as f64 / 1000.0;
    let second = Operator::start(cluster, ns, &ns.name, "second", LeaderTimings::default()).await;
    // Several fresh probes by the new process (its probe gauge: an unchanged
    // status is not rewritten), all at generation 1.
    let mut probed = stopped_at;
    for _ in 1..=3 {
        probed = second.wait_probed_after(&name, probed, T).await;
        let s = wait_status(cluster, &name, "the status after a probe by the restarted operator", T, |_| Ok(())).await;
        assert_eq!(
            s.topology_generation,
            Some(1),
            "a restart must not change topologyGeneration (log:\n{})",
            second.log_tail()
        );
        assert_eq!(s.active_site.as_deref(), Some("iad"));
    }
    cluster.delete_group(&name).await;
}
