//! Health follows the real sites: a stopped replica SQL thread, a stopped
//! replica server, two writable sites, no writable site. A group that looks
//! wrong gets conditions and Events and is never "fixed" by guessing.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

use std::time::Duration;

use bloodraven_e2e::fixtures::{Scenario, has_condition, is_ready_at, wait_event, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::wait::wait_for;

const T: Duration = Duration::from_secs(60);

#[tokio::test]
async fn stopped_replica_thread_and_stopped_replica_server_are_reported() {
    let sc = Scenario::start("health", 1, LeaderTimings::default()).await;
    let (cluster, pair, operator) = (&sc.cluster, &sc.pair, sc.operator());
    let name = sc.bootstrapped_group("g").await;

    // The replica's SQL thread stops: ReplicationNotRunning, not stable.
    pair.stop_applier("pdx");
    let s = wait_status(cluster, &name, "ReplicationNotRunning", T, |s| {
        has_condition(s, "ReplicationNotRunning", "True", Some("ReplicationStopped"))
    })
    .await;
    assert_eq!(s.stable, Some(false));
    assert_eq!(s.unstable_reason.as_deref(), Some("ReplicationNotRunning"));
    assert_eq!(s.health.iter().find(|h| h.site == "pdx").unwrap().replication_running, Some(false));
    has_condition(&s, "Ready", "False", None).unwrap();
    let note = wait_event(cluster, &name, "ReplicationStopped").await;
    assert!(note.contains("pdx"), "{note}");

    pair.start_applier("pdx");
    wait_status(cluster, &name, "recovery after START SLAVE", T, |s| is_ready_at(s, "iad", 1)).await;

    // The replica server stops: Degraded (SiteUnreachable), pdx unreachable.
    pair.stop("pdx");
    let s =
        wait_status(cluster, &name, "Degraded", T, |s| has_condition(s, "Degraded", "True", Some("SiteUnreachable")))
            .await;
    let pdx = s.health.iter().find(|h| h.site == "pdx").unwrap();
    assert!(!pdx.reachable, "{pdx:?}");
    assert_eq!(pdx.error_reason.as_deref(), Some("SiteUnreachable"));
    assert_eq!(s.stable, Some(false));
    assert_eq!(s.topology_generation, Some(1), "observation alone never changes the generation");
    // The gauge follows the same probe round as status, set just after it.
    let down = format!("bloodraven_site_up{{group=\"{name}\",site=\"pdx\"}} 0");
    wait_for("bloodraven_site_up 0 for pdx", T, || async {
        let m = operator.metrics().await?;
        if m.contains(&down) {
            Ok(())
        } else {
            Err(m.lines().filter(|l| l.contains("site_up")).collect::<Vec<_>>().join("; "))
        }
    })
    .await;

    // It comes back (read-only, replicating): Ready again, still generation 1.
    pair.restart("pdx", true);
    wait_status(cluster, &name, "recovery after the replica restarts", T, |s| is_ready_at(s, "iad", 1)).await;
    cluster.delete_group(&name).await;
}

#[tokio::test]
async fn two_writable_sites_are_split_brain_and_none_is_no_primary() {
    let sc = Scenario::start("split", 1, LeaderTimings::default()).await;
    let (cluster, pair) = (&sc.cluster, &sc.pair);
    pair.sql("pdx", "SET GLOBAL read_only=0");
    let name = sc.group("g", "iad").await;

    let s = wait_status(cluster, &name, "SplitBrain", T, |s| {
        has_condition(s, "SplitBrain", "True", Some("MultipleWritableSites"))
    })
    .await;
    assert_eq!(s.topology_generation, None, "a split group is never bootstrapped");
    assert_eq!(s.active_site, None);
    assert_eq!(s.unstable_reason.as_deref(), Some("SplitBrain"));
    let note = wait_event(cluster, &name, "MultipleWritableSites").await;
    assert!(note.contains("iad") && note.contains("pdx"), "{note}");

    pair.sql("iad", "SET GLOBAL read_only=1");
    pair.sql("pdx", "SET GLOBAL read_only=1");
    let s =
        wait_status(cluster, &name, "NoPrimary", T, |s| has_condition(s, "NoPrimary", "True", Some("NoWritableSite")))
            .await;
    has_condition(&s, "SplitBrain", "False", None).unwrap();
    assert_eq!(s.topology_generation, None, "no writable site: nothing to bootstrap, nothing guessed");
    assert_eq!(s.stable, Some(false));
    wait_event(cluster, &name, "NoWritableSite").await;

    // Only the designated site made writable again completes bootstrap.
    pair.sql("iad", "SET GLOBAL read_only=0");
    wait_status(cluster, &name, "bootstrap once the shape is right", T, |s| is_ready_at(s, "iad", 1)).await;
    cluster.delete_group(&name).await;
}

#[tokio::test]
async fn the_other_site_writable_is_never_bootstrapped() {
    let sc = Scenario::start("wrongsite", 1, LeaderTimings::default()).await;
    let cluster = &sc.cluster;
    // The pair has iad writable; the group claims pdx should be.
    let name = sc.group("g", "pdx").await;
    let s = wait_status(cluster, &name, "UnexpectedPrimary", T, |s| {
        has_condition(s, "Degraded", "True", Some("UnexpectedPrimary"))
    })
    .await;
    assert_eq!(s.topology_generation, None);
    let message = &s.conditions.iter().find(|c| c.type_ == "Degraded").unwrap().message;
    assert!(message.contains("iad is writable") && message.contains("pdx"), "{message}");
    cluster.delete_group(&name).await;
}

/// `bloodraven_status_writes_total{outcome}` of the operator.
fn status_writes(metrics: &str, outcome: &str) -> u64 {
    let prefix = format!("bloodraven_status_writes_total{{outcome=\"{outcome}\"}}");
    metrics
        .lines()
        .find(|l| l.starts_with(&prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Status is written when an observation changes, not on every probe and
/// never because it is old: at a 1 s probe interval a steady group goes
/// many probes without a write; a change is written at once.
#[tokio::test]
async fn an_unchanged_group_is_not_rewritten_and_a_change_is() {
    let sc = Scenario::start("quiet", 1, LeaderTimings::default()).await;
    let (cluster, pair, operator) = (&sc.cluster, &sc.pair, sc.operator());
    let name = sc.bootstrapped_group("g").await;
    let groups = cluster.groups();

    // A window of 8 s in which the operator probed at least 5 times, found
    // nothing new, and the group's resourceVersion did not move. (Retried
    // within T: the first seconds after bootstrap may still bring changes.)
    wait_for("8 s of probes with no status write", T, || async {
        let before = groups.get(&name).await.map_err(|e| e.to_string())?;
        let unchanged_before = status_writes(&operator.metrics().await?, "unchanged");
        tokio::time::sleep(Duration::from_secs(8)).await;
        let after = groups.get(&name).await.map_err(|e| e.to_string())?;
        let unchanged = status_writes(&operator.metrics().await?, "unchanged") - unchanged_before;
        match (before.metadata.resource_version == after.metadata.resource_version, unchanged >= 5) {
            (true, true) => Ok(()),
            (kept, _) => Err(format!("resourceVersion kept: {kept}, probes found unchanged: {unchanged}")),
        }
    })
    .await;

    // A change is written at the next probe, as before.
    pair.stop_applier("pdx");
    wait_status(cluster, &name, "ReplicationNotRunning", T, |s| {
        has_condition(s, "ReplicationNotRunning", "True", Some("ReplicationStopped"))
    })
    .await;
    pair.start_applier("pdx");
    wait_status(cluster, &name, "recovery after START SLAVE", T, |s| is_ready_at(s, "iad", 1)).await;
    cluster.delete_group(&name).await;
}
