//! Found by the third hostile attack (kept as its input): an edit of `spec.sites` that swaps the two sites' addresses
//! (a copy-paste mistake in a GitOps repository, or a site moved to a new
//! host under the wrong name) is accepted by the schema (the names are
//! unchanged, the addresses differ) and the operator acts on it as a
//! fact: the decided active name `iad` now points at the replica, the name
//! `pdx` at the real primary, and primary reassertion ("a site other than
//! the decided active one that is writable is made read-only") fences the
//! real primary and ends its sessions. The group is left with no writable
//! site.
//!
//! The sites' identities did not change (`server_id` 1 was decided active
//! and is still writable); only the names' addresses did. The operator's
//! own rule (operator/src/controller/failover_group/mod.rs): "A group that
//! looks wrong gets conditions and Events, never a guess." Expected: the
//! real primary stays writable, and the group reports the mismatch
//! (Degraded/UnexpectedPrimary or similar) for a person to fix.
//!
//! The fourth attack found the same edit moving the database's
//! `<name>-primary` Service to the read-only server: the Service follows a
//! spec endpoint only once the active site answers writable there, or a
//! decision moves the primary.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::time::Duration;

use bloodraven_api::v1alpha1::MysqlDatabase;
use bloodraven_e2e::deploy::database;
use bloodraven_e2e::fixtures::{Scenario, condition, group_events};
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::wait::wait_for;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

#[tokio::test]
async fn swapping_the_sites_addresses_in_spec_does_not_fence_the_real_primary() {
    let sc = Scenario::start("a3swap", 1, LeaderTimings::default()).await;
    let name = sc.bootstrapped_group("g").await;
    let ns = sc.ns.name.clone();
    database(&sc.cluster, &ns, "app", &name, &[]).await;
    let services: Api<Service> = Api::namespaced(sc.cluster.client.clone(), &ns);
    let dbs: Api<MysqlDatabase> = Api::namespaced(sc.cluster.client.clone(), &ns);
    let target_port = |svc: &Service| {
        svc.spec.as_ref().and_then(|s| s.ports.as_ref()).and_then(|p| p.first()).and_then(|p| p.target_port.clone())
    };
    let primary_port = IntOrString::Int(i32::from(sc.pair.iad_port));
    wait_for("app-primary on the real primary's port", Duration::from_secs(60), || async {
        let svc = services.get_opt("app-primary").await.map_err(|e| e.to_string())?.ok_or("no Service")?;
        (target_port(&svc) == Some(primary_port.clone())).then_some(()).ok_or(format!("{svc:?}"))
    })
    .await;
    let mut sites = sc.pair.sites(&sc.ns.name, bloodraven_e2e::fixtures::SITE_SECRET);
    let (a, b) = ((sites[0].host.clone(), sites[0].port), (sites[1].host.clone(), sites[1].port));
    (sites[0].host, sites[0].port) = b;
    (sites[1].host, sites[1].port) = a;
    let patch = json!({"spec": {"sites": sites}});
    sc.cluster.groups().patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();

    tokio::time::sleep(Duration::from_secs(15)).await;
    // The real primary is the server with server_id 1 (site directory `iad`).
    let real_primary_ro = sc.pair.sql("iad", "SELECT @@read_only").trim().to_owned();
    let s = sc.cluster.groups().get(&name).await.unwrap().status.unwrap();
    let reasserted: Vec<String> = group_events(&sc.cluster, &name)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("PrimaryReasserted"))
        .filter_map(|e| e.note)
        .collect();
    eprintln!(
        "attack3: after the swap: real primary (server_id 1) read_only={real_primary_ro}; NoPrimary={:?}; Degraded={:?}; PrimaryReasserted events {reasserted:?}",
        condition(&s, "NoPrimary").map(|c| (&c.status, &c.reason)),
        condition(&s, "Degraded").map(|c| (&c.status, &c.reason, &c.message)),
    );
    assert_eq!(real_primary_ro, "0", "the decided primary (server_id 1) must not be fenced because of a spec edit");
    let degraded = condition(&s, "Degraded").unwrap();
    assert_eq!(degraded.status.as_str(), "True", "{degraded:?}");
    // Each address answers as the other site's server: neither is trusted.
    for h in &s.health {
        assert_eq!(h.error_reason.as_deref(), Some("UnexpectedServer"), "{h:?}");
    }

    // Applications keep reaching the real primary, and the database says why.
    let svc = services.get("app-primary").await.unwrap();
    assert_eq!(target_port(&svc), Some(primary_port.clone()), "the Service followed the swap: {svc:?}");
    let db = dbs.get("app").await.unwrap();
    let c = db.status.unwrap_or_default().conditions.into_iter().find(|c| c.type_ == "PrimaryService").unwrap();
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "ActiveSiteEndpointUnconfirmed"), "{c:?}");
    assert!(c.message.contains("UnexpectedServer") && c.message.contains("iad"), "{c:?}");
    sc.cluster.delete_group(&name).await;
}
