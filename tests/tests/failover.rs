//! Failover for real on the pair: planned failover
//! there and back under a live writer, a repeated request id, emergency
//! failover after `kill -9` (twice), the returning primary with and
//! without errant transactions, and a fence that cannot finish.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::time::{Duration, Instant};

use bloodraven_api::v1alpha1::MysqlFailoverGroupStatus;
use bloodraven_e2e::fixtures::{Scenario, condition, is_active_at, is_ready_at, wait_event, wait_events, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::wait::wait_for;
use bloodraven_e2e::writer::{self, Writer};
use kube::api::{Patch, PatchParams};
use mysql_async::prelude::Queryable as _;
use serde_json::json;

const T: Duration = Duration::from_secs(90);

async fn request(sc: &Scenario, group: &str, target: &str, id: &str) {
    let patch = json!({"spec": {"plannedFailover": {"targetSite": target, "requestId": id}}});
    sc.cluster.groups().patch(group, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

fn phase(s: &MysqlFailoverGroupStatus) -> (String, String) {
    s.planned_failover.as_ref().map(|p| (p.request_id.clone(), p.phase.clone())).unwrap_or_default()
}

fn completed(s: &MysqlFailoverGroupStatus, id: &str, site: &str, generation: i64) -> Result<(), String> {
    let (rid, ph) = phase(s);
    if rid != id || ph != "Completed" {
        return Err(format!("request {rid} in phase {ph:?}"));
    }
    is_ready_at(s, site, generation)
}

#[tokio::test]
async fn a_planned_failover_there_and_back_loses_no_acknowledged_write() {
    let sc = Scenario::start("switch", 1, LeaderTimings::default()).await;
    let name = sc.bootstrapped_group("g").await;
    writer::prepare(&sc.pair, "iad");
    bloodraven_e2e::deploy::database(&sc.cluster, &sc.ns.name, "app", &name, &[(&sc.ns.name, "deployer")]).await;
    let w = Writer::start(&sc.cluster, &sc.ns.name, "app");
    wait_for("the writer to write through app-primary", T, || async {
        let n = sc.pair.try_sql("iad", "SELECT COUNT(*) FROM bench.t")?;
        if n.trim().parse::<u64>().unwrap_or(0) > 10 { Ok(()) } else { Err(n) }
    })
    .await;

    request(&sc, &name, "pdx", "r1").await;
    let s =
        wait_status(&sc.cluster, &name, "r1 completed at pdx, generation 2", T, |s| completed(s, "r1", "pdx", 2)).await;
    let history: Vec<&str> = s.planned_failover.as_ref().unwrap().history.iter().map(|h| h.phase.as_str()).collect();
    assert_eq!(history, ["Pending", "Admitting", "Draining", "Promoting", "Repointing", "Completed"]);
    assert_eq!(s.planned_failover.as_ref().unwrap().source_site.as_deref(), Some("iad"));
    assert_eq!(sc.pair.sql("iad", "SELECT @@read_only").trim(), "1", "the old primary is read-only");
    assert_eq!(sc.pair.sql("pdx", "SELECT @@read_only").trim(), "0");
    let note = wait_event(&sc.cluster, &name, "PlannedFailoverCompleted").await;
    assert!(note.contains("r1"), "{note}");
    // The Service applications use was repointed with the decision.
    let services: kube::Api<k8s_openapi::api::core::v1::Service> =
        kube::Api::namespaced(sc.cluster.client.clone(), &sc.ns.name);
    wait_for("app-primary to point at pdx", T, || async {
        let svc = services.get("app-primary").await.map_err(|e| e.to_string())?;
        let a = svc.metadata.annotations.unwrap_or_default();
        let site = a.get("bloodraven.shipstream.io/active-site").cloned().unwrap_or_default();
        if site == "pdx" { Ok(()) } else { Err(format!("{a:?}")) }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    request(&sc, &name, "iad", "r2").await;
    wait_status(&sc.cluster, &name, "r2 completed at iad, generation 3", T, |s| completed(s, "r2", "iad", 3)).await;
    // Two failovers within a minute are two Events, each naming its own
    // request, target and sites (one series of the first was shown before).
    wait_events(
        &sc.cluster,
        &name,
        "PlannedFailoverCompleted",
        &[
            &["r1 to pdx", "pdx became the writable primary and iad"],
            &["r2 to iad", "iad became the writable primary and pdx"],
        ],
    )
    .await;
    // Stable again, with no reason left over from the operation (found on
    // the playground, when a second field manager wrote OperationInProgress:
    // it stood beside stable: true).
    wait_status(&sc.cluster, &name, "stable with no unstableReason", T, |s| {
        match (s.stable, s.unstable_reason.as_deref()) {
            (Some(true), None) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let written = w.stop().await;

    // An older request id again: not run twice.
    request(&sc, &name, "pdx", "r1").await;
    let want = sc.cluster.groups().get(&name).await.unwrap().metadata.generation;
    let s = wait_status(&sc.cluster, &name, "the repeated request to be seen", T, |s| {
        if s.observed_generation == want { Ok(()) } else { Err(format!("observed {:?}", s.observed_generation)) }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let s2 = sc.cluster.groups().get(&name).await.unwrap().status.unwrap();
    assert_eq!((s2.active_site.as_deref(), s2.topology_generation), (Some("iad"), Some(3)), "{s:?}");
    assert_eq!(phase(&s2), ("r2".to_owned(), "Completed".to_owned()));
    // Not silently: status and an Event say the id was used, and what to do.
    let ignored = s2.ignored_planned_failover.clone().unwrap_or_else(|| panic!("no ignoredPlannedFailover: {s2:?}"));
    assert_eq!(
        (ignored.request_id.as_str(), ignored.target_site.as_str(), ignored.reason.as_str()),
        ("r1", "pdx", "RequestIdReused")
    );
    assert!(ignored.message.contains("write a new requestId"), "{}", ignored.message);
    let notes = wait_events(&sc.cluster, &name, "RequestIdReused", &[&["requestId r1", "new requestId"]]).await;
    eprintln!("reused id: {}", notes[0]);
    // A new id is taken up, and the report of the ignored one is cleared.
    request(&sc, &name, "pdx", "r3").await;
    wait_status(&sc.cluster, &name, "r3 completed at pdx, generation 4, no ignored request", T, |s| {
        completed(s, "r3", "pdx", 4)?;
        if s.ignored_planned_failover.is_some() { Err(format!("{:?}", s.ignored_planned_failover)) } else { Ok(()) }
    })
    .await;

    // Every acknowledged write is on both sites, and the sites agree.
    assert!(written.acknowledged.len() > 50, "{} writes", written.acknowledged.len());
    wait_for("the sites to converge", T, || async {
        let (a, b) = (writer::checksum(&sc.pair, "iad"), writer::checksum(&sc.pair, "pdx"));
        if a == b { Ok(()) } else { Err(format!("iad {a} pdx {b}")) }
    })
    .await;
    for site in ["iad", "pdx"] {
        let lost = writer::missing(&sc.pair, site, &written.acknowledged);
        assert!(lost.is_empty(), "{} acknowledged writes missing on {site}: {lost:?}", lost.len());
    }
    let worst = written.gaps.iter().max().copied().unwrap_or_default();
    eprintln!(
        "planned failover writer: {} acknowledged, {} failed attempts, longest gap {worst:?}",
        written.acknowledged.len(),
        written.failures
    );
    sc.cluster.delete_group(&name).await;
}

#[tokio::test]
async fn kill_9_of_the_primary_twice_fails_over_each_time_and_the_returning_primary_rejoins() {
    let sc = Scenario::start("kill", 1, LeaderTimings::default()).await;
    // A short detection budget: 1 s × 3.
    let name = sc.quick_group("g").await;
    writer::prepare(&sc.pair, "iad");
    sc.pair.sql("iad", "INSERT INTO bench.t (id) VALUES (1), (2), (3)");
    wait_for("pdx to have the rows", T, || async {
        let n = sc.pair.try_sql("pdx", "SELECT COUNT(*) FROM bench.t")?;
        if n.trim() == "3" { Ok(()) } else { Err(n) }
    })
    .await;

    let killed = std::time::Instant::now();
    sc.pair.kill9("iad");
    sc.pair.wait_read_only("pdx", false, T).await;
    let writable_after = killed.elapsed();
    let s = wait_status(&sc.cluster, &name, "activeSite pdx at generation 2", T, |s| is_active_at(s, "pdx", 2)).await;
    eprintln!("kill -9 → pdx writable in {writable_after:?} (detection budget 3 s)");
    let note = wait_event(&sc.cluster, &name, "EmergencyFailover").await;
    assert!(note.contains("pdx") && note.contains("topologyGeneration 2"), "{note}");
    assert!(condition(&s, "SiteDiverged").is_none_or(|c| c.status == "False"));

    // The old primary comes back writable (read_only is not in its
    // configuration): fenced on first sight, clean, repointed.
    sc.pair.restart("iad", false);
    let note = wait_event(&sc.cluster, &name, "SiteRejoined").await;
    assert!(note.contains("iad"), "{note}");
    wait_status(&sc.cluster, &name, "Ready at pdx, generation 2", T, |s| is_ready_at(s, "pdx", 2)).await;
    // Nothing tells a person to configure iad's replication, which the
    // operator has just configured (a trial saw a Warning
    // ReplicationNotConfigured 19 ms after SiteRejoined, from the probe
    // taken before the repoint).
    let contradicting: Vec<String> = bloodraven_e2e::fixtures::group_events(&sc.cluster, &name)
        .await
        .into_iter()
        .filter(|e| matches!(e.reason.as_deref(), Some("ReplicationNotConfigured" | "ReplicationStopped")))
        .filter_map(|e| e.note)
        .filter(|n| n.contains("site iad"))
        .collect();
    assert!(contradicting.is_empty(), "{contradicting:?}");
    assert_eq!(sc.pair.sql("iad", "SELECT @@read_only").trim(), "1");
    sc.pair.sql("pdx", "INSERT INTO bench.t (id) VALUES (4)");
    wait_for("iad to replicate from pdx", T, || async {
        let n = sc.pair.try_sql("iad", "SELECT COUNT(*) FROM bench.t")?;
        if n.trim() == "4" { Ok(()) } else { Err(n) }
    })
    .await;

    // Twice in a row: now pdx dies, and iad takes over at generation 3.
    sc.pair.kill9("pdx");
    wait_status(&sc.cluster, &name, "activeSite iad at generation 3", T, |s| is_active_at(s, "iad", 3)).await;
    sc.pair.wait_read_only("iad", false, T).await;
    wait_events(
        &sc.cluster,
        &name,
        "EmergencyFailover",
        &[
            &["active site iad failed", "pdx is the active site at topologyGeneration 2"],
            &["active site pdx failed", "iad is the active site at topologyGeneration 3"],
        ],
    )
    .await;
    assert_eq!(sc.pair.sql("iad", "SELECT COUNT(*) FROM bench.t").trim(), "4");
    sc.cluster.delete_group(&name).await;
}

/// The last planned failover stays the request `kubectl get` shows; after
/// an emergency failover its message says it is no longer the latest
/// change (a trial read "pdx is the writable primary" while pdx was dead).
#[tokio::test]
async fn an_emergency_failover_after_a_planned_failover_is_said_on_the_finished_request() {
    let sc = Scenario::start("supersede", 1, LeaderTimings::default()).await;
    let name = sc.quick_group("g").await;
    request(&sc, &name, "pdx", "s1").await;
    wait_status(&sc.cluster, &name, "s1 completed at pdx, generation 2", T, |s| completed(s, "s1", "pdx", 2)).await;
    sc.pair.kill9("pdx");
    let s = wait_status(&sc.cluster, &name, "emergency failover to iad, generation 3", T, |s| {
        is_active_at(s, "iad", 3)?;
        let p = s.planned_failover.as_ref().ok_or("no plannedFailover")?;
        let m = p.message.clone().unwrap_or_default();
        if m.contains("since then") { Ok(()) } else { Err(m) }
    })
    .await;
    let p = s.planned_failover.unwrap();
    assert_eq!((p.request_id.as_str(), p.phase.as_str()), ("s1", "Completed"));
    let m = p.message.unwrap_or_default();
    assert!(
        m.starts_with("completed at topologyGeneration 2: pdx became the writable primary and iad a replica of it; since then an emergency failover from pdx made iad the active site at topologyGeneration 3"),
        "{m}"
    );
    sc.cluster.delete_group(&name).await;
}

#[tokio::test]
async fn on_a_fresh_pair_that_never_took_a_write_the_returning_primary_rejoins() {
    // A first trial's case: no application write before the failover, so
    // the promotion position is empty; the returning primary was fenced
    // and never repointed (ReplicationNotConfigured).
    let sc = Scenario::start("fresh", 1, LeaderTimings::default()).await;
    let name = sc.quick_group("g").await;
    sc.pair.kill9("iad");
    wait_status(&sc.cluster, &name, "activeSite pdx at generation 2", T, |s| is_active_at(s, "pdx", 2)).await;
    sc.pair.restart("iad", false);
    let note = wait_event(&sc.cluster, &name, "SiteRejoined").await;
    assert!(note.contains("iad") && note.contains("replicates from pdx"), "{note}");
    wait_status(&sc.cluster, &name, "Ready at pdx, generation 2", T, |s| is_ready_at(s, "pdx", 2)).await;
    sc.pair.sql("pdx", "CREATE DATABASE fresh_probe");
    wait_for("iad to replicate the first write from pdx", T, || async {
        let n =
            sc.pair.sql("iad", "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = 'fresh_probe'");
        if n.trim() == "1" { Ok(()) } else { Err(n) }
    })
    .await;
    sc.cluster.delete_group(&name).await;
}

#[tokio::test]
async fn a_standby_whose_replication_was_stopped_is_not_promoted() {
    // Found by the third attack: with replication stopped by hand, the
    // standby had "applied everything it received" and was promoted, losing
    // every write since. (The errant-GTID return is in partition.rs.)
    let sc = Scenario::start("stalestby", 1, LeaderTimings::default()).await;
    // A short detection budget: 1 s × 3.
    let name = sc.quick_group("g").await;
    writer::prepare(&sc.pair, "iad");
    wait_for("pdx to have the table", T, || async {
        let n = sc.pair.sql("pdx", "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA='bench'");
        if n.trim() == "1" { Ok(()) } else { Err(n) }
    })
    .await;
    sc.pair.stop_replica("pdx");
    for i in 1..=20 {
        sc.pair.sql("iad", &format!("INSERT INTO bench.t (id) VALUES ({i})"));
    }
    sc.pair.kill9("iad");
    let s = wait_status(&sc.cluster, &name, "RecoveryPending StandbyNotPromotable", T, |s| {
        match condition(s, "RecoveryPending") {
            Some(c) if c.status == "True" && c.reason == "StandbyNotPromotable" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(condition(&s, "RecoveryPending").unwrap().message.contains("not replicating"), "{s:?}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let s = sc.cluster.groups().get(&name).await.unwrap().status.unwrap();
    assert_eq!((s.active_site.as_deref(), s.topology_generation), (Some("iad"), Some(1)), "nothing promoted");
    assert_eq!(sc.pair.sql("pdx", "SELECT @@read_only").trim(), "1");
    // The primary comes back with every write; replication resumes.
    sc.pair.restart("iad", false);
    sc.pair.start_replica("pdx");
    wait_status(&sc.cluster, &name, "Ready at iad, generation 1", T, |s| is_ready_at(s, "iad", 1)).await;
    let ids: Vec<u64> = (1..=20).collect();
    wait_for("pdx to catch up", T, || async {
        let lost = writer::missing(&sc.pair, "pdx", &ids);
        if lost.is_empty() { Ok(()) } else { Err(format!("{lost:?}")) }
    })
    .await;
    sc.cluster.delete_group(&name).await;
}

#[tokio::test]
async fn a_fence_that_cannot_finish_fails_the_request_with_no_bump() {
    let sc = Scenario::start("fencefail", 1, LeaderTimings::default()).await;
    let name = sc.bootstrapped_group("g").await;
    let patch = json!({"spec": {"failover": {"fenceTimeoutSeconds": 2}}});
    sc.cluster.groups().patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    writer::prepare(&sc.pair, "iad");
    // A session holds a table write lock for a long time: SET GLOBAL
    // read_only waits for it, past the fence's bound.
    let holder = sc
        .pair
        .sql_command("iad", "LOCK TABLES bench.t WRITE; SELECT SLEEP(60)")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let holder = std::sync::Mutex::new(holder);
    wait_for("the lock holder to be connected", T, || async {
        let n =
            sc.pair.sql("iad", "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT SLEEP%'");
        if n.trim() == "0" { Err("not yet".to_owned()) } else { Ok(()) }
    })
    .await;
    request(&sc, &name, "pdx", "r-lock").await;
    let s = wait_status(&sc.cluster, &name, "r-lock failed", T, |s| match phase(s) {
        (id, ph) if id == "r-lock" && ph == "Failed" => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;
    let pf = s.planned_failover.as_ref().unwrap();
    assert!(pf.message.as_deref().unwrap_or("").contains("fence"), "{pf:?}");
    assert_eq!((s.active_site.as_deref(), s.topology_generation), (Some("iad"), Some(1)), "no bump");
    assert_eq!(sc.pair.sql("iad", "SELECT @@read_only").trim(), "0", "the old primary is writable again");
    let _ = holder.lock().unwrap().kill();
    wait_status(&sc.cluster, &name, "Ready at iad, generation 1", T, |s| is_ready_at(s, "iad", 1)).await;
    sc.cluster.delete_group(&name).await;
}

#[tokio::test]
async fn semi_sync_keeps_acknowledged_writes_through_kill_9_and_follows_the_roles() {
    let sc = Scenario::start("semisync", 1, LeaderTimings::default()).await;
    let name = sc.group("g", "iad").await;
    let patch = json!({"spec": {"failover": {"probeIntervalSeconds": 1, "failureThreshold": 3, "probeTimeoutSeconds": 1, "semiSync": true}}});
    sc.cluster.groups().patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    wait_status(&sc.cluster, &name, "bootstrap", T, |s| is_ready_at(s, "iad", 1)).await;
    let (source_on, replica_on, source_status, acknowledged_tx) = sc.pair.flavor.semi_sync_names();
    let switches = format!("SELECT @@{source_on}, @@{replica_on}");
    let status_of = |site: &'static str, var: &'static str| {
        let out = sc.pair.sql(site, &format!("SHOW GLOBAL STATUS LIKE '{var}'"));
        out.split_whitespace().nth(1).unwrap_or("").to_owned()
    };
    wait_for("semi-sync to be active on iad", T, || async {
        let on = status_of("iad", source_status);
        if on == "ON" { Ok(()) } else { Err(on) }
    })
    .await;
    writer::prepare(&sc.pair, "iad");
    for i in 1..=50 {
        sc.pair.sql("iad", &format!("INSERT INTO bench.t (id) VALUES ({i})"));
    }
    let acknowledged: u64 = status_of("iad", acknowledged_tx).parse().unwrap();
    assert!(acknowledged >= 50, "{acknowledged} commits acknowledged by the replica");
    sc.pair.kill9("iad");
    wait_status(&sc.cluster, &name, "activeSite pdx at generation 2", T, |s| is_active_at(s, "pdx", 2)).await;
    let ids: Vec<u64> = (1..=50).collect();
    assert_eq!(writer::missing(&sc.pair, "pdx", &ids), Vec::<u64>::new(), "acknowledged writes lost");
    // The roles follow the decision: pdx is the semi-sync primary now.
    wait_for("pdx to wait for acknowledgements", T, || async {
        let v = sc.pair.sql("pdx", &switches);
        if v.split_whitespace().collect::<Vec<_>>() == ["1", "0"] { Ok(()) } else { Err(v) }
    })
    .await;
    // And off again when the group no longer asks.
    let patch = json!({"spec": {"failover": {"semiSync": false}}});
    sc.cluster.groups().patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    wait_for("semi-sync off on pdx", T, || async {
        let v = sc.pair.sql("pdx", &switches);
        if v.split_whitespace().collect::<Vec<_>>() == ["0", "0"] { Ok(()) } else { Err(v) }
    })
    .await;
    sc.cluster.delete_group(&name).await;
}

/// The fallback to asynchronous replication is the operator's decision,
/// on the decided primary only: the server's own timeout is set to its
/// maximum (a paused primary failed away from would otherwise fall back as
/// soon as it ran again: `reassert.rs`). With the standby paused, a commit
/// on the primary waits `semiSyncFallbackSeconds`, then the operator
/// switches the primary's side off, the commit is acknowledged and the
/// group says so; once the standby replicates again, the side is on again
/// and commits are acknowledged by it.
#[tokio::test]
async fn semi_sync_falls_back_by_the_operators_decision_and_comes_back_with_the_standby() {
    let sc = Scenario::start("semifall", 1, LeaderTimings::default()).await;
    let name = sc.semi_sync_group("g", json!({"semiSyncFallbackSeconds": 3})).await;
    let (source_on, _, source_status, acknowledged_tx) = sc.pair.flavor.semi_sync_names();
    let timeout = source_on.replace("enabled", "timeout");
    let status_of = |site: &'static str, var: &'static str| {
        let out = sc.pair.sql(site, &format!("SHOW GLOBAL STATUS LIKE '{var}'"));
        out.split_whitespace().nth(1).unwrap_or("").to_owned()
    };
    let (_, mut w) = sc.writer_account("iad", "fall_t").await;
    w.query_drop("INSERT INTO w VALUES (1)").await.unwrap();
    // On a loaded machine a setup commit may itself have waited past the
    // fallback: the primary's side must be on (again) before the standby
    // is paused, or the commit below is acknowledged at once.
    wait_for("semi-sync on at iad before the standby is paused", T, || async {
        let on = status_of("iad", source_status);
        let sw = sc.pair.sql("iad", &format!("SELECT @@{source_on}"));
        if on == "ON" && sw.trim() == "1" { Ok(()) } else { Err(format!("{on} {sw}")) }
    })
    .await;

    // The standby stops acknowledging: the commit waits, for the fallback.
    sc.pair.signal("pdx", "STOP");
    let started = Instant::now();
    w.query_drop("INSERT INTO w VALUES (2)").await.expect("acknowledged after the fallback");
    let waited = started.elapsed();
    eprintln!(
        "figure: a commit with the standby paused waited {} ms (semiSyncFallbackSeconds 3, probe interval 1 s)",
        waited.as_millis()
    );
    assert!(waited >= Duration::from_secs(3), "acknowledged after {waited:?}, before the fallback");
    let s = wait_status(&sc.cluster, &name, "the fallback said", T, |s| match condition(s, "SemiSyncUnavailable") {
        Some(c) if c.status == "True" && c.reason == "StandbyNotAcknowledging" => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;
    let c = condition(&s, "SemiSyncUnavailable").unwrap();
    assert!(c.message.contains("primary iad") && c.message.contains("standby pdx"), "{}", c.message);
    let note = wait_event(&sc.cluster, &name, "StandbyNotAcknowledging").await;
    assert!(note.contains("SemiSyncUnavailable is True"), "{note}");
    assert_eq!(sc.pair.sql("iad", &format!("SELECT @@{source_on}")).trim(), "0");
    // Commits no longer wait meanwhile.
    let started = Instant::now();
    w.query_drop("INSERT INTO w VALUES (3)").await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(3), "a commit after the fallback waited {:?}", started.elapsed());

    // The standby back: the primary's side is on again, and acknowledged.
    sc.pair.signal("pdx", "CONT");
    wait_status(&sc.cluster, &name, "semi-sync available again", T, |s| match condition(s, "SemiSyncUnavailable") {
        Some(c) if c.status == "False" => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;
    wait_for("semi-sync to be active on iad again", T, || async {
        let on = status_of("iad", source_status);
        if on == "ON" { Ok(()) } else { Err(on) }
    })
    .await;
    let before: u64 = status_of("iad", acknowledged_tx).parse().unwrap();
    w.query_drop("INSERT INTO w VALUES (4)").await.unwrap();
    let after: u64 = status_of("iad", acknowledged_tx).parse().unwrap();
    assert_eq!(after, before + 1, "the standby acknowledges again");

    // A server timeout of the group's own, for when the operator cannot act.
    let patch = json!({"spec": {"failover": {"semiSyncServerTimeoutSeconds": 600}}});
    sc.cluster.groups().patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    wait_for("iad's semi-sync timeout to be the group's", T, || async {
        let v = sc.pair.sql("iad", &format!("SELECT @@{timeout}"));
        if v.trim() == "600000" { Ok(()) } else { Err(v) }
    })
    .await;
    sc.cluster.delete_group(&name).await;
}
