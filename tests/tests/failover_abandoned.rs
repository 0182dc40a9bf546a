//! A standby that stopped receiving is never promoted without a word, on
//! the real node and sites: its replication link drops packets (both
//! threads still say running), the primary commits 200 transactions the
//! standby never gets, and then dies with `kill -9`. The group waits
//! (`StandbyBehind`), naming the transactions the promotion would abandon;
//! a person accepts the loss for that standby and generation; the promotion
//! records what it abandoned in status and in the Event.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed step must fail the test

use std::time::Duration;

use bloodraven_e2e::fixtures::{Scenario, condition, has_condition, is_active_at, wait_event, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::{wait_for, writer};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::json;

const T: Duration = Duration::from_secs(90);

#[tokio::test]
async fn a_standby_that_stopped_receiving_waits_and_is_promoted_only_knowingly() {
    let sc = Scenario::start("abandon", 1, LeaderTimings::default()).await;
    let name = sc.quick_group("g").await;
    writer::prepare_replicated(&sc.pair, T).await;
    let had = sc.pair.transactions("pdx");

    let block = sc.pair.block_replication("pdx");
    let inserts = (2..202).map(|i| format!("INSERT INTO bench.t (id) VALUES ({i});")).collect::<Vec<_>>().join(" ");
    sc.pair.sql("iad", &inserts);
    let last = sc.pair.transactions("iad");
    assert_eq!(last, had + 200, "200 transactions, one GTID each");
    // Both threads still say running: the stall is silent to the server.
    let threads = sc.pair.replication_threads("pdx");
    assert_eq!(threads, Some(("Yes".to_owned(), "Yes".to_owned())), "replication threads of pdx");
    // The input: the primary answers a few more probe rounds (1 s apart)
    // with its new position, then dies.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let range = sc.pair.gtid_range("iad", had + 1, last);
    sc.pair.kill9("iad");

    let s = wait_status(&sc.cluster, &name, "RecoveryPending: StandbyBehind", T, |s| {
        has_condition(s, "RecoveryPending", "True", Some("StandbyBehind"))
    })
    .await;
    let message = condition(&s, "RecoveryPending").unwrap().message.clone();
    assert!(message.contains("200 transaction(s)") && message.contains(&range), "{message}");
    assert_eq!(s.topology_generation, Some(1), "nothing decided");
    assert_eq!(sc.pair.sql("pdx", "SELECT @@read_only").trim(), "1", "pdx is not promoted");

    // A person accepts the loss for pdx at generation 1.
    let patch = json!({"metadata": {"annotations": {"bloodraven.shipstream.io/promote-despite-loss": "pdx@1"}}});
    sc.cluster.groups().patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let s = wait_status(&sc.cluster, &name, "pdx active at generation 2", T, |s| is_active_at(s, "pdx", 2)).await;
    sc.pair.wait_read_only("pdx", false, T).await;
    let e = s.emergency_failover.clone().expect("status.emergencyFailover");
    assert_eq!((e.from_site.as_str(), e.to_site.as_str(), e.topology_generation), ("iad", "pdx", 2));
    assert_eq!((e.abandoned_transactions, e.abandoned_gtids.as_deref()), (200, Some(range.as_str())), "{e:?}");
    assert!(e.loss_accepted, "{e:?}");
    let note = wait_event(&sc.cluster, &name, "EmergencyFailover").await;
    assert!(note.contains("abandoned 200 transaction(s)") && note.contains(&range), "{note}");
    wait_for("the acceptance to be removed", T, || async {
        let g = sc.cluster.groups().get(&name).await.map_err(|e| e.to_string())?;
        if g.annotations().contains_key("bloodraven.shipstream.io/promote-despite-loss") {
            Err("still annotated".to_owned())
        } else {
            Ok(())
        }
    })
    .await;

    // The old primary comes back, writable as it was configured, with the
    // 200 transactions pdx never received: it is fenced and kept out, and
    // SiteDiverged names the whole range the failover abandoned (MariaDB's
    // position shows only each domain's last GTID).
    drop(block);
    sc.pair.restart("iad", false);
    let s = wait_status(&sc.cluster, &name, "SiteDiverged to name what the failover abandoned", T, |s| {
        let c = condition(s, "SiteDiverged").ok_or("no SiteDiverged")?;
        let abandoned = format!("the emergency failover that promoted pdx abandoned {range}");
        if c.status == "True" && c.message.contains("site iad") && c.message.contains(&abandoned) {
            Ok(())
        } else {
            Err(format!("{}: {}", c.status, c.message))
        }
    })
    .await;
    assert_eq!(s.topology_generation, Some(2), "{s:?}");
    sc.pair.wait_read_only("iad", true, T).await;
    assert_eq!(sc.pair.sql("iad", "SELECT COUNT(*) FROM bench.t").trim(), "201", "its data is kept");
    sc.cluster.delete_group(&name).await;
}
