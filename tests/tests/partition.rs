//! A primary cut off from the operator and from the other site while its
//! own local clients still reach it: iad runs in its own network
//! namespace and the link is taken down. The operator promotes pdx after
//! the detection budget (it cannot fence what it cannot reach); iad keeps
//! taking local writes meanwhile. When the link comes back, iad is fenced
//! on first sight, its local writes are found errant, and it stays
//! read-only and unrepointed with SiteDiverged.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::time::Duration;

use bloodraven_e2e::fixtures::{SITE_SECRET, condition, create_group, group, is_active_at, is_ready_at, wait_status};
use bloodraven_e2e::netns::NetNs;
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::wait::wait_for;
use bloodraven_e2e::{Cluster, Operator, SitePair, cluster::OPERATOR_DB_PASSWORD};

const T: Duration = Duration::from_secs(90);

#[tokio::test]
async fn a_partitioned_primary_is_replaced_and_its_local_writes_are_found_errant() {
    let ns_link = NetNs::create();
    let pair = SitePair::start_in_netns("partition", &ns_link);
    let cluster = Cluster::connect().await;
    let ns = cluster.namespace("partition").await;
    ns.credentials_secret(SITE_SECRET, "bloodraven", OPERATOR_DB_PASSWORD).await;
    let _op = Operator::start(&cluster, &ns, &ns.name, "op", LeaderTimings::default()).await;
    let name = format!("{}-g", ns.name);
    let mut g = group(&name, &ns.name, pair.sites(&ns.name, SITE_SECRET), "iad");
    g.spec.failover.probe_interval_seconds = 1;
    g.spec.failover.failure_threshold = 3;
    g.spec.failover.probe_timeout_seconds = 1;
    create_group(&cluster, &g).await;
    wait_status(&cluster, &name, "bootstrap over the link", T, |s| is_ready_at(s, "iad", 1)).await;
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
