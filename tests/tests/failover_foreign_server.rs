//! A site address that reaches another group's server (found by the fourth
//! attack, kept as its input): one mistyped port in `spec.sites` made the
//! operator fence another group's primary again and again, promote another
//! group's replica on an emergency failover (`RESET SLAVE ALL` on it), and
//! point the `-primary` Service at another group's primary. A site is now
//! trusted only as the server it is known by (`status.health[].identity`,
//! its `server_id`); another server answering at its address is a failed
//! probe (`UnexpectedServer`) and nothing is done to it. Two real pairs:
//! the group's (server_ids 1, 2) and another group's (3, 4).
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::time::Duration;

use bloodraven_api::v1alpha1::{MysqlDatabase, MysqlFailoverGroupStatus};
use bloodraven_e2e::SitePair;
use bloodraven_e2e::deploy::database;
use bloodraven_e2e::fixtures::{Scenario, has_condition, is_ready_at, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::wait::wait_for;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

const T: Duration = Duration::from_secs(60);
/// Well past the 3 s detection budget of `quick_group`.
const PAST_BUDGET: Duration = Duration::from_secs(10);

/// `Ok` once `site`'s probe fails with `UnexpectedServer` naming `server_id`.
fn unexpected(s: &MysqlFailoverGroupStatus, site: &str, server_id: u32) -> Result<(), String> {
    let h = s.health.iter().find(|h| h.site == site).ok_or("no health")?;
    let named = h.message.as_deref().is_some_and(|m| m.contains(&format!("server_id {server_id}")));
    if h.error_reason.as_deref() == Some("UnexpectedServer") && named { Ok(()) } else { Err(format!("{h:?}")) }
}

#[tokio::test]
async fn a_site_address_that_reaches_another_groups_server_is_never_acted_on() {
    let sc = Scenario::start("foreign", 1, LeaderTimings::default()).await;
    let name = sc.quick_group("g").await;
    let other = SitePair::start_with_ids("foreign-o", (3, 4));
    let ns = sc.ns.name.clone();
    database(&sc.cluster, &ns, "app", &name, &[]).await;
    let groups = sc.cluster.groups();
    let params = PatchParams::default();
    let services: Api<Service> = Api::namespaced(sc.cluster.client.clone(), &ns);
    let target_port = |svc: &Service| {
        svc.spec.as_ref().and_then(|s| s.ports.as_ref()).and_then(|p| p.first()).and_then(|p| p.target_port.clone())
    };
    let iad_port = sc.pair.port("iad");
    wait_for("app-primary on iad's port", T, || async {
        let svc = services.get_opt("app-primary").await.map_err(|e| e.to_string())?.ok_or("no Service")?;
        (target_port(&svc) == Some(IntOrString::Int(i32::from(iad_port)))).then_some(()).ok_or(format!("{svc:?}"))
    })
    .await;
    let port = |site: usize, port: u16| {
        let ops = json!([{"op": "replace", "path": format!("/spec/sites/{site}/port"), "value": port}]);
        Patch::Json::<()>(serde_json::from_value(ops).unwrap())
    };

    // 1. The standby's port typed as the other group's primary (server 3):
    // it is writable and not the active site, but it is not pdx.
    groups.patch(&name, &params, &port(1, other.port("iad"))).await.unwrap();
    let s = wait_status(&sc.cluster, &name, "pdx's address answers as server 3", T, |s| unexpected(s, "pdx", 3)).await;
    tokio::time::sleep(PAST_BUDGET).await;
    assert_eq!(other.sql("iad", "SELECT @@read_only").trim(), "0", "another group's primary was fenced: {s:?}");
    let reasserted = bloodraven_e2e::fixtures::group_events(&sc.cluster, &name)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("PrimaryReasserted"))
        .count();
    assert_eq!(reasserted, 0, "no fence of anything: {s:?}");

    // 2. The standby's port typed as the other group's replica (server 4,
    // replicating from 3), then the primary dies: not promoted.
    groups.patch(&name, &params, &port(1, other.port("pdx"))).await.unwrap();
    wait_status(&sc.cluster, &name, "pdx's address answers as server 4", T, |s| unexpected(s, "pdx", 4)).await;
    sc.pair.kill9("iad");
    tokio::time::sleep(PAST_BUDGET).await;
    let s = groups.get(&name).await.unwrap().status.unwrap();
    assert_eq!((s.active_site.as_deref(), s.topology_generation), (Some("iad"), Some(1)), "{s:?}");
    has_condition(&s, "RecoveryPending", "True", Some("StandbyNotPromotable")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(other.sql("pdx", "SELECT @@read_only").trim(), "1", "another group's replica was promoted");
    let replication = other.replica_status("pdx");
    assert!(
        replication.contains(&other.port("iad").to_string()),
        "another group's replica lost its replication: {replication}"
    );

    // 3. The primary back, and its own port typed as the other group's
    // primary: the Service stays where the primary answered as itself.
    sc.pair.restart("iad", false);
    groups.patch(&name, &params, &port(1, sc.pair.port("pdx"))).await.unwrap();
    wait_status(&sc.cluster, &name, "ready at iad again", T, |s| is_ready_at(s, "iad", 1)).await;
    groups.patch(&name, &params, &port(0, other.port("iad"))).await.unwrap();
    wait_status(&sc.cluster, &name, "iad's address answers as server 3", T, |s| unexpected(s, "iad", 3)).await;
    let dbs: Api<MysqlDatabase> = Api::namespaced(sc.cluster.client.clone(), &ns);
    wait_for("PrimaryService False ActiveSiteEndpointUnconfirmed", T, || async {
        let db = dbs.get("app").await.map_err(|e| e.to_string())?;
        let c = db.status.unwrap_or_default().conditions.into_iter().find(|c| c.type_ == "PrimaryService");
        match c {
            Some(c) if c.reason == "ActiveSiteEndpointUnconfirmed" && c.message.contains("UnexpectedServer") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let svc = services.get("app-primary").await.unwrap();
    assert_eq!(target_port(&svc), Some(IntOrString::Int(i32::from(iad_port))), "the Service followed the typo");
    assert_eq!(other.sql("iad", "SELECT @@read_only").trim(), "0");
    let s = groups.get(&name).await.unwrap().status.unwrap();
    assert_eq!((s.active_site.as_deref(), s.topology_generation), (Some("iad"), Some(1)), "{s:?}");

    // Put right: the group is itself again.
    groups.patch(&name, &params, &port(0, iad_port)).await.unwrap();
    wait_status(&sc.cluster, &name, "ready at iad after the fix", T, |s| is_ready_at(s, "iad", 1)).await;
    sc.cluster.delete_group(&name).await;
}

/// Found by an attack on the requests: a planned failover resumed in
/// `Draining` after the old primary's address was edited to another
/// group's primary. The rules read a site that answers as another server as
/// unseen and fence it, so the next leader fenced that server. A step now
/// refuses a site that answers as another server, and waits, in its phase,
/// for the address to be put right.
#[tokio::test]
async fn a_request_resumed_after_its_site_address_was_edited_does_not_act_on_another_server() {
    const QUICK: LeaderTimings = LeaderTimings { lease_duration: 3, renew_deadline: 2, retry_period: 1 };
    let sc = Scenario::start("foreign-req", 0, QUICK).await;
    let mut op = bloodraven_e2e::Operator::start(&sc.cluster, &sc.ns, &sc.ns.name, "first", QUICK).await;
    let name = sc.bootstrapped_group("g").await;
    let other = SitePair::start_with_ids("foreign-r", (3, 4));
    let groups = sc.cluster.groups();
    let params = PatchParams::default();
    let port = |site: usize, port: u16| {
        let ops = json!([{"op": "replace", "path": format!("/spec/sites/{site}/port"), "value": port}]);
        Patch::Json::<()>(serde_json::from_value(ops).unwrap())
    };
    op.stop().await;
    let failpoint = ["--failpoint".into(), "planned-entered-Draining".into()];
    op = bloodraven_e2e::Operator::start_with(&sc.cluster, &sc.ns, &sc.ns.name, "crash", QUICK, &failpoint).await;
    let patch = json!({"spec": {"plannedFailover": {"targetSite": "pdx", "requestId": "p1"}}});
    groups.patch(&name, &params, &Patch::Merge(&patch)).await.unwrap();
    assert!(op.wait_exit(T).await.is_some_and(|s| !s.success()), "no failpoint:\n{}", op.log_tail());
    // With no leader, iad's port is typed as the other group's primary.
    groups.patch(&name, &params, &port(0, other.port("iad"))).await.unwrap();
    op = bloodraven_e2e::Operator::start(&sc.cluster, &sc.ns, &sc.ns.name, "next", QUICK).await;
    wait_status(&sc.cluster, &name, "iad's address answers as server 3", T, |s| unexpected(s, "iad", 3)).await;
    tokio::time::sleep(PAST_BUDGET).await;
    assert_eq!(other.sql("iad", "SELECT @@read_only").trim(), "0", "another group's primary was fenced");
    let s = groups.get(&name).await.unwrap().status.unwrap();
    let phase = s.planned_failover.as_ref().map(|p| p.phase.clone());
    assert_eq!(phase.as_deref(), Some("Draining"), "the request waits in its phase: {s:?}");
    // Put right: the request goes on with the real iad.
    groups.patch(&name, &params, &port(0, sc.pair.port("iad"))).await.unwrap();
    wait_status(&sc.cluster, &name, "p1 ended", T, |s| match &s.planned_failover {
        Some(p) if p.phase == "Completed" || p.phase == "Failed" => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;
    assert_eq!(other.sql("iad", "SELECT @@read_only").trim(), "0");
    let writable: Vec<String> = ["iad", "pdx"]
        .iter()
        .filter(|s| sc.pair.sql(s, "SELECT @@read_only").trim() == "0")
        .map(|s| (*s).to_owned())
        .collect();
    assert_eq!(writable.len(), 1, "one writable site after the request: {writable:?}");
    op.stop().await;
    sc.cluster.delete_group(&name).await;
}
