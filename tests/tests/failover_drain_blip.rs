//! A few seconds' outage of the old primary while a planned failover drains
//! (found by the fourth attack, kept as its input): the fence failed with
//! the old primary out of sight, and the request ended `Failed` at once with
//! it fenced — both sites read-only for good. The old primary is now taken
//! as perhaps fenced: made writable again once it answers (within the
//! drain's bound), and only then does the request fail. The real pair; the
//! outage is a firewall rule that resets connections to iad's port.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::process::Command;
use std::time::Duration;

use bloodraven_e2e::fixtures::{Scenario, is_ready_at, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
use kube::api::{Patch, PatchParams};
use serde_json::json;

const T: Duration = Duration::from_secs(120);

/// An iptables rule that resets new TCP connections to `port`, removed on drop.
struct Outage {
    rule: Vec<String>,
}

impl Outage {
    fn start(port: u16) -> Outage {
        let rule: Vec<String> =
            ["INPUT", "-p", "tcp", "--dport", &port.to_string(), "-j", "REJECT", "--reject-with", "tcp-reset"]
                .iter()
                .map(|s| (*s).to_owned())
                .collect();
        let ok = Command::new("iptables").arg("-I").args(&rule).status().unwrap().success();
        assert!(ok, "iptables -I {rule:?}");
        Outage { rule }
    }
}

impl Drop for Outage {
    fn drop(&mut self) {
        let _ = Command::new("iptables").arg("-D").args(&self.rule).status();
    }
}

#[tokio::test]
async fn an_old_primary_out_of_sight_mid_drain_is_made_writable_before_the_request_fails() {
    let sc = Scenario::start("blip", 1, LeaderTimings::default()).await;
    let name = sc.bootstrapped_group("g").await;
    let groups = sc.cluster.groups();
    let params = PatchParams::default();
    // pdx applies 300 s late, so the drain waits in its catch-up (bound 20 s).
    let policy = json!({"spec": {"failover": {"maxLagSeconds": 86400, "catchUpTimeoutSeconds": 20}}});
    groups.patch(&name, &params, &Patch::Merge(&policy)).await.unwrap();
    sc.pair.set_delay("pdx", 300);
    sc.pair.sql("iad", "CREATE DATABASE blip_one");
    let request = json!({"spec": {"plannedFailover": {"targetSite": "pdx", "requestId": "b1"}}});
    groups.patch(&name, &params, &Patch::Merge(&request)).await.unwrap();
    wait_status(&sc.cluster, &name, "b1 draining", T, |s| match &s.planned_failover {
        Some(p) if p.phase == "Draining" => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;
    sc.pair.wait_read_only("iad", true, T).await;

    // 4 s out of sight, mid-drain.
    let outage = Outage::start(sc.pair.port("iad"));
    tokio::time::sleep(Duration::from_secs(4)).await;
    drop(outage);

    let s = wait_status(&sc.cluster, &name, "b1 failed", T, |s| match &s.planned_failover {
        Some(p) if p.request_id == "b1" && p.phase == "Failed" => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;
    let message = s.planned_failover.as_ref().and_then(|p| p.message.clone()).unwrap_or_default();
    assert!(!message.contains("may be left read-only"), "it answered within the bound: {message}");
    sc.pair.wait_read_only("iad", false, T).await;
    assert_eq!(sc.pair.sql("pdx", "SELECT @@read_only").trim(), "1");
    assert_eq!((s.active_site.as_deref(), s.topology_generation), (Some("iad"), Some(1)), "no decision: {s:?}");
    sc.pair.set_delay("pdx", 0);
    wait_status(&sc.cluster, &name, "ready at iad", T, |s| is_ready_at(s, "iad", 1)).await;
    sc.cluster.delete_group(&name).await;
}
