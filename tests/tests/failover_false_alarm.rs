//! Automatic failover fails over a primary that is down, never one the
//! operator merely cannot log in to or finds at a mistyped endpoint (found
//! by an attack on the playground: a wrong password in the active site's
//! Secret, or a wrong port in spec, failed over a live primary within
//! seconds and left two writable sites). The real pair, a 3 s detection
//! budget.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::time::Duration;

use bloodraven_e2e::fixtures::{Scenario, has_condition, is_ready_at, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

const T: Duration = Duration::from_secs(60);
/// Well past the 3 s detection budget of `quick_group`.
const PAST_BUDGET: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_primary_that_refuses_the_password_or_moved_in_spec_is_not_failed_over() {
    let sc = Scenario::start("falsealarm", 1, LeaderTimings::default()).await;
    // iad gets a Secret of its own, so that breaking it leaves pdx observable.
    sc.ns.credentials_secret("iad-creds", "bloodraven", bloodraven_e2e::cluster::OPERATOR_DB_PASSWORD).await;
    let name = sc.quick_group("g").await;
    let groups = sc.cluster.groups();
    let params = PatchParams::default();
    let iad_secret =
        json!([{"op": "replace", "path": "/spec/sites/0/credentialsSecretRef/name", "value": "iad-creds"}]);
    groups.patch(&name, &params, &Patch::Json::<()>(serde_json::from_value(iad_secret).unwrap())).await.unwrap();
    wait_status(&sc.cluster, &name, "ready on iad's own Secret", T, |s| is_ready_at(s, "iad", 1)).await;

    // A botched password rotation: iad refuses the operator, but is up and writable.
    let secrets: Api<Secret> = Api::namespaced(sc.cluster.client.clone(), &sc.ns.name);
    let wrong = json!({"stringData": {"password": "rotated-wrong"}});
    secrets.patch("iad-creds", &params, &Patch::Merge(&wrong)).await.unwrap();
    wait_status(&sc.cluster, &name, "iad refuses the operator", T, |s| {
        has_condition(s, "Degraded", "True", Some("AuthenticationFailed"))
    })
    .await;
    tokio::time::sleep(PAST_BUDGET).await;
    // The operator cannot see iad: whether it has a primary is unknown, and
    // pdx (read-only) cannot be a second one.
    let s = wait_status(&sc.cluster, &name, "no failover, the primary unknown", T, |s| {
        has_condition(s, "NoPrimary", "Unknown", Some("SiteUnreachable"))?;
        has_condition(s, "SplitBrain", "False", None)
    })
    .await;
    assert_eq!((s.active_site.as_deref(), s.topology_generation), (Some("iad"), Some(1)), "{s:?}");
    assert_eq!(sc.pair.sql("iad", "SELECT @@read_only").trim(), "0", "the live primary stays the primary");
    assert_eq!(sc.pair.sql("pdx", "SELECT @@read_only").trim(), "1", "the standby was not promoted");
    let right = json!({"stringData": {"password": bloodraven_e2e::cluster::OPERATOR_DB_PASSWORD}});
    secrets.patch("iad-creds", &params, &Patch::Merge(&right)).await.unwrap();
    wait_status(&sc.cluster, &name, "ready again", T, |s| is_ready_at(s, "iad", 1)).await;

    // A mistyped port for the active site (one nothing listens on; not
    // port + 1, which free_port may have given the other site): refused like
    // a dead server, but the primary is alive at the endpoint it last
    // answered at.
    let port = sc.pair.port("iad");
    let typo = json!([{"op": "replace", "path": "/spec/sites/0/port", "value": bloodraven_e2e::free_port()}]);
    groups.patch(&name, &params, &Patch::Json::<()>(serde_json::from_value(typo).unwrap())).await.unwrap();
    wait_status(&sc.cluster, &name, "failover held for the changed endpoint", T, |s| {
        has_condition(s, "RecoveryPending", "True", Some("ActiveSiteEndpointChanged"))
    })
    .await;
    tokio::time::sleep(PAST_BUDGET).await;
    let s = sc.cluster.groups().get(&name).await.unwrap().status.unwrap();
    assert_eq!((s.active_site.as_deref(), s.topology_generation), (Some("iad"), Some(1)), "{s:?}");
    assert_eq!(sc.pair.sql("pdx", "SELECT @@read_only").trim(), "1", "the standby was not promoted");
    let back = json!([{"op": "replace", "path": "/spec/sites/0/port", "value": port}]);
    groups.patch(&name, &params, &Patch::Json::<()>(serde_json::from_value(back).unwrap())).await.unwrap();
    wait_status(&sc.cluster, &name, "ready at the right port", T, |s| is_ready_at(s, "iad", 1)).await;

    // A primary that is really down is still failed over.
    sc.pair.kill9("iad");
    wait_status(&sc.cluster, &name, "emergency failover to pdx", T, |s| {
        if s.active_site.as_deref() == Some("pdx") && s.topology_generation == Some(2) {
            Ok(())
        } else {
            Err("not yet".into())
        }
    })
    .await;
    sc.cluster.delete_group(&name).await;
}
