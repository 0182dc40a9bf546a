//! The replica check of every probe round, on the real node and sites:
//!
//! - a write on the replica (as root, which `read_only` does not stop) is
//!   `SiteDiverged` with its GTIDs named within about a probe round, before
//!   replication breaks; the replica is refused as a planned failover's
//!   target and not promoted when the primary dies;
//! - a primary committing 100 transactions a second for a minute raises
//!   no false alarm (the replica is read before the primary);
//! - a replica whose link drops every packet (both threads still report
//!   running, `Seconds_Behind_Master` 0) is `ReplicationStalled`, not Ready,
//!   and refused as a target; it recovers when the link does.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed step must fail the test

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bloodraven_e2e::fixtures::{Scenario, condition, has_condition, wait_events, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::sites::Flavor;
use bloodraven_e2e::writer;
use mysql_async::prelude::Queryable;

const T: Duration = Duration::from_secs(90);

#[tokio::test]
async fn a_write_on_the_replica_is_found_within_a_round_and_never_a_failover_target() {
    let sc = Scenario::start("errant", 1, LeaderTimings::default()).await;
    let name = sc.quick_group("g").await;
    // MariaDB numbers the replication domain's transactions as one sequence
    // (pdx's own continue after what it applied); MySQL numbers each
    // server's from 1 under its UUID.
    let first = match sc.pair.flavor {
        Flavor::MariaDb => sc.pair.transactions("pdx") + 1,
        Flavor::MySql => 1,
    };

    // Three transactions of its own: root writes through read_only (on
    // MySQL, super_read_only stops root too: an administrator lifts it).
    let wrote = Instant::now();
    let writes = "CREATE DATABASE errant; CREATE TABLE errant.t (id INT PRIMARY KEY); INSERT INTO errant.t VALUES (1)";
    match sc.pair.flavor {
        Flavor::MariaDb => sc.pair.sql("pdx", writes),
        Flavor::MySql => {
            sc.pair.sql("pdx", &format!("SET GLOBAL super_read_only=0; {writes}; SET GLOBAL super_read_only=1"))
        }
    };
    let range = sc.pair.gtid_range("pdx", first, first + 2);
    let s = wait_status(&sc.cluster, &name, "SiteDiverged on pdx", T, |s| {
        has_condition(s, "SiteDiverged", "True", Some("ErrantTransactions"))
    })
    .await;
    let found = wrote.elapsed();
    println!("errant write on pdx found after {:.1} s (probe interval 1 s)", found.as_secs_f64());
    let message = condition(&s, "SiteDiverged").unwrap().message.clone();
    assert!(message.contains("site pdx") && message.contains(&range), "{message}");
    let health = s.health.iter().find(|h| h.site == "pdx").unwrap();
    assert_eq!(health.errant_gtids.as_deref(), Some(range.as_str()), "{health:?}");
    assert_eq!(condition(&s, "Ready").unwrap().status, "False", "a diverged standby is not a ready group");
    // Found before replication breaks: nothing was written on iad since.
    assert_eq!(condition(&s, "ReplicationNotRunning").unwrap().status, "False");
    assert!(found < Duration::from_secs(10), "found only after {found:?}");
    // On-call learns it from a Warning Event naming the site and the GTIDs.
    // (Ready turns False with the same reason: its Event is another one.)
    wait_events(&sc.cluster, &name, "ErrantTransactions", &[&["SiteDiverged is True", "site pdx", &range]]).await;

    // Refused as a planned failover's target, with the reason.
    sc.request_failover(&name, "pdx", "onto-errant").await;
    let s = wait_status(&sc.cluster, &name, "the request to fail", T, |s| match &s.planned_failover {
        Some(p) if p.request_id == "onto-errant" && p.phase == "Failed" => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;
    let why = s.planned_failover.as_ref().unwrap().message.clone().unwrap_or_default();
    assert!(why.contains("errant GTIDs") && why.contains(&range), "{why}");
    assert_eq!(s.topology_generation, Some(1));

    // The primary dies: the errant replica is not promoted.
    sc.pair.kill9("iad");
    let s = wait_status(&sc.cluster, &name, "RecoveryPending: ErrantTransactions", T, |s| {
        has_condition(s, "RecoveryPending", "True", Some("ErrantTransactions"))
    })
    .await;
    assert_eq!(s.topology_generation, Some(1), "nothing decided");
    assert_eq!(sc.pair.sql("pdx", "SELECT @@read_only").trim(), "1", "pdx is not promoted");
    // Its data is kept.
    assert_eq!(sc.pair.sql("pdx", "SELECT COUNT(*) FROM errant.t").trim(), "1");
    let health = s.health.iter().find(|h| h.site == "pdx").unwrap();
    assert_eq!(health.errant_gtids.as_deref(), Some(range.as_str()), "kept while iad cannot be compared");
    sc.cluster.delete_group(&name).await;
}

#[tokio::test]
async fn a_busy_primary_raises_no_false_alarm() {
    let sc = Scenario::start("busy", 1, LeaderTimings::default()).await;
    let name = sc.quick_group("g").await;
    writer::prepare(&sc.pair, "iad");
    let stop = Arc::new(AtomicBool::new(false));
    let commits = Arc::new(AtomicU64::new(0));
    let port = sc.pair.port("iad");
    // 100 commits/s: four connections of 25/s each, so that one slow
    // commit (fsync on a busy machine) does not lower the rate; a tick
    // missed is made up at once (tokio's default burst behaviour).
    let tasks: Vec<_> = (0..4u64)
        .map(|w| {
            let (stop, commits) = (stop.clone(), commits.clone());
            tokio::spawn(async move {
                let mut conn = mysql_async::Conn::new(writer::app_account(port)).await.unwrap();
                let mut tick = tokio::time::interval(Duration::from_millis(40));
                let mut id = w + 1;
                while !stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    conn.query_drop(format!("INSERT INTO bench.t (id) VALUES ({id})")).await.unwrap();
                    commits.fetch_add(1, Ordering::Relaxed);
                    id += 4;
                }
            })
        })
        .collect();
    let started = Instant::now();
    let mut rounds = 0;
    while started.elapsed() < Duration::from_secs(60) {
        let s = sc.cluster.groups().get_status(&name).await.unwrap().status.unwrap_or_default();
        for t in ["SiteDiverged", "ReplicationNotRunning"] {
            let c = condition(&s, t).unwrap();
            assert_eq!(c.status, "False", "{t} under a busy primary: {}", c.message);
        }
        assert!(s.health.iter().all(|h| h.errant_gtids.is_none()), "{:?}", s.health);
        rounds += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    let n = commits.load(Ordering::Relaxed);
    println!("{n} commits in 60 s ({:.0}/s), {rounds} status reads, no false alarm", n as f64 / 60.0);
    // 100/s for a minute, less a tenth for the last ticks and the start.
    assert!(n >= 5400, "the writers committed only {n} transactions (100/s for 60 s is 6000)");
    sc.cluster.delete_group(&name).await;
}

#[tokio::test]
async fn a_replica_that_receives_nothing_is_stalled_and_refused_as_a_target() {
    let sc = Scenario::start("stall", 1, LeaderTimings::default()).await;
    let name = sc.quick_group("g").await;
    writer::prepare_replicated(&sc.pair, T).await;

    let block = sc.pair.block_replication("pdx");
    let inserts = (2..52).map(|i| format!("INSERT INTO bench.t (id) VALUES ({i});")).collect::<Vec<_>>().join(" ");
    sc.pair.sql("iad", &inserts);
    let s = wait_status(&sc.cluster, &name, "ReplicationNotRunning: ReplicationStalled", T, |s| {
        has_condition(s, "ReplicationNotRunning", "True", Some("ReplicationStalled"))
    })
    .await;
    let message = condition(&s, "ReplicationNotRunning").unwrap().message.clone();
    assert!(message.contains("site pdx is stalled") && message.contains("50 ("), "{message}");
    assert_eq!(condition(&s, "Ready").unwrap().status, "False");
    assert_eq!(s.stable, Some(false));
    let health = s.health.iter().find(|h| h.site == "pdx").unwrap();
    assert_eq!(health.replication_running, Some(false), "{health:?}");
    // The server itself still says both threads run.
    assert_eq!(sc.pair.replication_threads("pdx"), Some(("Yes".to_owned(), "Yes".to_owned())));

    sc.request_failover(&name, "pdx", "onto-stalled").await;
    let s = wait_status(&sc.cluster, &name, "the request to fail", T, |s| match &s.planned_failover {
        Some(p) if p.request_id == "onto-stalled" && p.phase == "Failed" => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;
    let why = s.planned_failover.as_ref().unwrap().message.clone().unwrap_or_default();
    assert!(why.contains("stalled"), "{why}");
    assert!(
        s.planned_failover.as_ref().unwrap().history.iter().all(|h| h.phase != "Draining"),
        "never drained: {:?}",
        s.planned_failover
    );

    // The link heals and replication is restarted: it catches up and the
    // stall clears.
    drop(block);
    sc.pair.stop_replica("pdx");
    sc.pair.start_replica("pdx");
    wait_status(&sc.cluster, &name, "ReplicationNotRunning False", T, |s| {
        has_condition(s, "ReplicationNotRunning", "False", None)
    })
    .await;
    assert_eq!(sc.pair.sql("pdx", "SELECT COUNT(*) FROM bench.t").trim(), "51");
    sc.cluster.delete_group(&name).await;
}
