#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test
//! The decided roles survive edits and loss of status: the operator's
//! decision record restores them, so topologyGeneration never goes back.

use std::time::Duration;

use bloodraven_e2e::fixtures::{Scenario, is_ready_at, wait_event, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
use kube::api::{Patch, PatchParams};

const T: Duration = Duration::from_secs(60);

async fn edit_status(sc: &Scenario, name: &str, status: serde_json::Value) {
    sc.cluster
        .groups()
        .patch_status(name, &PatchParams::default(), &Patch::Merge(serde_json::json!({ "status": status })))
        .await
        .unwrap();
}

#[tokio::test]
async fn hand_edits_and_a_wiped_status_are_restored_never_rebootstrapped() {
    let sc = Scenario::start("decide", 1, LeaderTimings::default()).await;
    let name = sc.bootstrapped_group("g").await;

    edit_status(&sc, &name, serde_json::json!({ "topologyGeneration": 5 })).await;
    wait_status(&sc.cluster, &name, "the edit to be undone", T, |s| is_ready_at(s, "iad", 1)).await;
    let note = wait_event(&sc.cluster, &name, "StatusRestored").await;
    assert!(note.contains("topologyGeneration=5") && note.contains("topologyGeneration=1"), "{note}");

    edit_status(&sc, &name, serde_json::json!({ "activeSite": "pdx" })).await;
    wait_status(&sc.cluster, &name, "activeSite to be restored", T, |s| is_ready_at(s, "iad", 1)).await;

    // Status wiped (as by a restore from an old backup): restored, not bootstrapped again.
    edit_status(&sc, &name, serde_json::json!({ "activeSite": null, "topologyGeneration": null })).await;
    wait_status(&sc.cluster, &name, "the wiped decision to be restored", T, |s| is_ready_at(s, "iad", 1)).await;
    let log = std::fs::read_to_string(&sc.operator().log).unwrap();
    assert_eq!(log.matches("bootstrap complete").count(), 1, "bootstrap must run once:\n{}", sc.operator().log_tail());
    assert!(log.contains("status restored from the decision record"));

    // The schema refuses a generation below 1 outright.
    let err = sc
        .cluster
        .groups()
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"topologyGeneration": -3}})),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 422), "{err}");
    sc.cluster.delete_group(&name).await;
}

#[tokio::test]
async fn two_sites_on_one_server_are_reported_not_split_brain() {
    let sc = Scenario::start("sameserver", 1, LeaderTimings::default()).await;
    let name = format!("{}-g", sc.ns.name);
    let mut sites = sc.pair.sites(&sc.ns.name, bloodraven_e2e::fixtures::SITE_SECRET);
    sites[1].port = sc.pair.iad_port;
    sites[1].host = "localhost".into(); // same server by another name: the schema cannot tell
    bloodraven_e2e::fixtures::create_group(
        &sc.cluster,
        &bloodraven_e2e::fixtures::group(&name, &sc.ns.name, sites, "iad"),
    )
    .await;
    let s = wait_status(&sc.cluster, &name, "DuplicateServerId", T, |s| {
        bloodraven_e2e::fixtures::has_condition(s, "Degraded", "True", Some("DuplicateServerId"))
    })
    .await;
    bloodraven_e2e::fixtures::has_condition(&s, "SplitBrain", "Unknown", None).unwrap();
    assert_eq!(s.topology_generation, None);
    sc.cluster.delete_group(&name).await;
}
