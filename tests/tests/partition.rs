//! A primary cut off from the operator and from the other site while its
//! own local clients still reach it: iad runs in its own network
//! namespace and the link is taken down. The operator promotes pdx after
//! the detection budget (it cannot fence what it cannot reach); iad keeps
//! taking local writes meanwhile. When the link comes back, iad is fenced
//! on first sight, its local writes are found errant, and it stays
//! read-only and unrepointed with SiteDiverged.
//!
//! And the converse: a primary cut off from the operator only, while its
//! replica still reaches it, is alive, and is not failed over
//! (`PrimaryReachableFromStandby`) until the replica loses it too.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::time::{Duration, Instant};

use bloodraven_e2e::fixtures::{SITE_SECRET, condition, create_group, group, is_active_at, is_ready_at, wait_status};
use bloodraven_e2e::netns::NetNs;
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::sites::Flavor;
use bloodraven_e2e::wait::wait_for;
use bloodraven_e2e::{Cluster, Operator, SitePair, TestNamespace, cluster::OPERATOR_DB_PASSWORD};

const T: Duration = Duration::from_secs(90);

/// An operator and a group on `pair`, active at iad, with a detection
/// budget of 1 s × 3 (probe timeout 1 s), bootstrapped.
async fn bootstrapped(pair: &SitePair, prefix: &str) -> (Cluster, TestNamespace, Operator, String) {
    let cluster = Cluster::connect().await;
    let ns = cluster.namespace(prefix).await;
    ns.credentials_secret(SITE_SECRET, "bloodraven", OPERATOR_DB_PASSWORD).await;
    let op = Operator::start(&cluster, &ns, &ns.name, "op", LeaderTimings::default()).await;
    let name = format!("{}-g", ns.name);
    let mut g = group(&name, &ns.name, pair.sites(&ns.name, SITE_SECRET), "iad");
    g.spec.failover.probe_interval_seconds = 1;
    g.spec.failover.failure_threshold = 3;
    g.spec.failover.probe_timeout_seconds = 1;
    create_group(&cluster, &g).await;
    wait_status(&cluster, &name, "bootstrap", T, |s| is_ready_at(s, "iad", 1)).await;
    (cluster, ns, op, name)
}

#[tokio::test]
async fn a_partitioned_primary_is_replaced_and_its_local_writes_are_found_errant() {
    let ns_link = NetNs::create();
    let pair = SitePair::start_in_netns("partition", &ns_link);
    let (cluster, _ns, _op, name) = bootstrapped(&pair, "partition").await;
    pair.sql("iad", "CREATE DATABASE part; CREATE TABLE part.t (id INT PRIMARY KEY); INSERT INTO part.t VALUES (1)");
    wait_for("pdx to have row 1", T, || async {
        let n = pair.try_sql("pdx", "SELECT COUNT(*) FROM part.t")?;
        if n.trim() == "1" { Ok(()) } else { Err(n) }
    })
    .await;

    ns_link.cut();
    // Local clients (the unix socket) still reach iad, and it still takes writes.
    pair.sql("iad", "INSERT INTO part.t VALUES (2)");
    wait_status(&cluster, &name, "pdx promoted at generation 2", T, |s| is_active_at(s, "pdx", 2)).await;
    pair.wait_read_only("pdx", false, T).await;
    pair.sql("iad", "INSERT INTO part.t VALUES (3)");
    assert_eq!(pair.sql("iad", "SELECT @@read_only").trim(), "0", "the operator cannot reach iad to fence it");

    ns_link.heal();
    let s = wait_status(&cluster, &name, "SiteDiverged on iad", T, |s| match condition(s, "SiteDiverged") {
        Some(c) if c.status == "True" && c.message.contains("iad") => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;
    assert_eq!((s.active_site.as_deref(), s.topology_generation), (Some("pdx"), Some(2)));
    assert_eq!(pair.sql("iad", "SELECT @@read_only").trim(), "1", "fenced on first sight");
    assert!(!pair.replicates("iad"), "never repointed");
    assert_eq!(
        pair.sql("iad", "SELECT GROUP_CONCAT(id ORDER BY id) FROM part.t").trim(),
        "1,2,3",
        "its writes are kept"
    );
    assert_eq!(pair.sql("pdx", "SELECT GROUP_CONCAT(id ORDER BY id) FROM part.t").trim(), "1");
    cluster.delete_group(&name).await;
}

/// Found by the nemesis suite: an operator partitioned from a healthy
/// primary failed it over, and both sites were writable until the
/// partition healed. The standby's receiver, on its own path, still hears
/// the primary: nothing is promoted while it does. Once the primary is
/// paused (silent to the standby too) the failover runs, and the time it
/// took is printed.
#[tokio::test]
async fn an_operator_cut_off_from_a_live_primary_fails_over_only_once_the_standby_loses_it_too() {
    let (iad_ns, pdx_ns) = (NetNs::create(), NetNs::create());
    let _routes = NetNs::route_between(&iad_ns, &pdx_ns);
    let pair = SitePair::start_in_two_netns("opcut", Flavor::of_run(), &iad_ns, &pdx_ns);
    let (cluster, _ns, _op, name) = bootstrapped(&pair, "opcut").await;
    pair.sql("iad", "CREATE DATABASE opcut; CREATE TABLE opcut.t (id INT PRIMARY KEY); INSERT INTO opcut.t VALUES (1)");

    let cut = iad_ns.cut_from_host(pair.iad_port);
    let s = wait_status(&cluster, &name, "RecoveryPending PrimaryReachableFromStandby", T, |s| {
        match condition(s, "RecoveryPending") {
            Some(c) if c.status == "True" && c.reason == "PrimaryReachableFromStandby" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let message = &condition(&s, "RecoveryPending").unwrap().message;
    assert!(message.contains("iad") && message.contains("pdx") && message.contains("heard from it"), "{message}");
    // The primary keeps taking writes, the standby keeps receiving them,
    // and for ten detection budgets nothing moves.
    let until = Instant::now() + Duration::from_secs(30);
    let mut id = 2;
    while Instant::now() < until {
        pair.sql("iad", &format!("INSERT INTO opcut.t VALUES ({id})"));
        id += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let s = cluster.groups().get_status(&name).await.unwrap().status.unwrap_or_default();
        assert_eq!((s.active_site.as_deref(), s.topology_generation), (Some("iad"), Some(1)), "{:?}", s.conditions);
        assert_eq!(pair.sql("pdx", "SELECT @@read_only").trim(), "1");
    }
    let last = id - 1;
    wait_for("pdx to have every row iad took", T, || async {
        let n = pair.try_sql("pdx", "SELECT MAX(id) FROM opcut.t")?;
        if n.trim() == last.to_string() { Ok(()) } else { Err(n) }
    })
    .await;

    // Paused: silent to the standby too. The budget is spent already, so
    // what remains is the standby's window (two heartbeat periods).
    pair.signal("iad", "STOP");
    let paused = Instant::now();
    wait_status(&cluster, &name, "pdx promoted at generation 2", T, |s| is_active_at(s, "pdx", 2)).await;
    pair.wait_read_only("pdx", false, T).await;
    eprintln!(
        "figure: operator cut from a live primary, then the primary paused: standby writable {} ms after the pause ({})",
        paused.elapsed().as_millis(),
        pair.flavor.name()
    );
    assert_eq!(pair.sql("pdx", "SELECT MAX(id) FROM opcut.t").trim(), last.to_string(), "nothing acknowledged is lost");
    pair.signal("iad", "CONT");
    drop(cut);
    pair.wait_read_only("iad", true, T).await;
    cluster.delete_group(&name).await;
}
