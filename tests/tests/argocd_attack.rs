//! The example app chart under Argo CD (tests/src/argocd.rs; on the run's
//! real node, with the operator, the webhook and real sites), attacked as
//! an ordinary user would while the PreSync migration hook runs:
//!
//! - `argocd app terminate-op`: Argo CD deletes the running Job; the
//!   revision in flight is cut off and rolls back (a DML revision), the
//!   Pod is gone, both leases are released, the Deployment is not touched,
//!   and the next sync applies the revision once (it used to skip it: the
//!   terminated sync left the wait Job behind, see the chart's
//!   wait-job.yaml);
//! - `kubectl delete job` of the running hook: the hook finalizer keeps the
//!   Job, its Pod may migrate on, the sync fails without touching the
//!   Deployment (the schema may be ahead of the code, never behind), and
//!   the next sync is correct;
//! - a new image tag while the hook runs, under an automated sync: the
//!   sync in progress keeps the tag it started with, and the Deployment
//!   never runs an image whose revisions are not applied.
//!
//! Argo CD: runs once hack/build-argocd.sh has built it (hack/e2e.sh).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test

use std::time::{Duration, Instant};

use bloodraven_e2e::app::{RELEASE, SCHEMA, V1, app_image};
use bloodraven_e2e::argocd_app::{ArgoApp, JOB};
use bloodraven_e2e::pods::job_pods;
use bloodraven_e2e::wait_for;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use serde_json::json;

const T: Duration = Duration::from_secs(240);

/// V2 creates a side-effect table; V3 inserts one row into it and sleeps
/// for `sleep` seconds (a DML revision: cut off, it rolls back).
fn revisions(sleep: u32) -> [(&'static str, String); 3] {
    [
        (V1.0, V1.1.to_owned()),
        (
            "V2__side_effect.sql",
            "CREATE TABLE side_effect (id INT AUTO_INCREMENT PRIMARY KEY, at TIMESTAMP(6) DEFAULT CURRENT_TIMESTAMP(6));"
                .to_owned(),
        ),
        ("V3__long.sql", format!("INSERT INTO side_effect () VALUES (); DO SLEEP({sleep});")),
    ]
}

fn image(revisions: &[(&str, String)]) -> String {
    app_image(&revisions.iter().map(|(n, s)| (*n, s.as_str())).collect::<Vec<_>>())
}

fn rows(t: &ArgoApp) -> String {
    t.env.pair.sql("iad", &format!("SELECT COUNT(*) FROM {SCHEMA}.side_effect")).trim().to_owned()
}

/// Creates the Application at V1 and syncs it.
async fn synced_v1(t: &ArgoApp) -> String {
    let v1 = app_image(&[V1]);
    t.create(&v1, json!({})).await;
    let (state, _) = t.sync().await;
    assert_eq!(state["phase"], "Succeeded", "{state}\n{}", t.argo.tail());
    assert_eq!(t.env.history(), "1:applied");
    format!("localhost/bloodraven/counter-app:{v1}")
}

#[tokio::test]
async fn terminating_the_sync_cuts_the_revision_off_releases_the_leases_and_the_next_sync_applies_it_once() {
    let t = ArgoApp::start("argo-term").await;
    let old = synced_v1(&t).await;
    let tag = image(&revisions(30));
    t.argo.set_values(RELEASE, t.env.values_json(&tag)).await;
    let after = t.last_started().await;
    t.argo.request_sync(RELEASE).await.unwrap();
    t.wait_sleeping().await;
    let held = t.held_slots().await;
    assert_eq!(held.len(), 2, "the sidecar holds the mutex and the failover-hold: {held:?}");
    let job = t.job_uid().await.unwrap();
    let pod = job_pods(&t.env.cluster, &t.env.ns.name, JOB).await.remove(0).metadata.name.unwrap();
    let followed = t.follow_job_logs().await;

    // `argocd app terminate-op`.
    let asked = Instant::now();
    t.argo.terminate(RELEASE).await;
    let state = t.argo.wait_operation_end(RELEASE, &after, T).await;
    let ended = asked.elapsed();
    assert_eq!(state["phase"], "Failed", "{state}");
    assert_eq!(state["message"], "Operation terminated", "{state}");

    // The Job and its Pod are gone, and so is the migration's session.
    let pods = Api::<Pod>::namespaced(t.env.cluster.client.clone(), &t.env.ns.name);
    wait_for("the terminated hook's Job and Pod to go", T, || async {
        let job_left = t.job_uid().await.as_deref() == Some(job.as_str());
        let pod_left = pods.get_opt(&pod).await.map_err(|e| e.to_string())?.is_some();
        if job_left || pod_left { Err(format!("Job left: {job_left}, Pod left: {pod_left}")) } else { Ok(()) }
    })
    .await;
    let gone = asked.elapsed();
    assert_eq!(t.sleeping(), 0, "the cut-off revision still runs on the site");
    let (runner, sidecar) = followed.await.unwrap();
    // Both leases released by the sidecar (a lost sidecar's would stay held
    // until the TTL lapsed, and the next sync would wait for them).
    let released = wait_for("both leases to be released", Duration::from_secs(20), || async {
        let held = t.held_slots().await;
        if held.is_empty() { Ok(asked.elapsed()) } else { Err(format!("held: {held:?}\nsidecar:\n{sidecar}")) }
    })
    .await;

    // V3 was cut off and rolled back: no row of it, no side effect; the
    // Deployment was not touched.
    assert_eq!(t.env.history(), "1:applied,2:applied", "runner:\n{runner}\nsidecar:\n{sidecar}");
    assert_eq!(rows(&t), "0", "the cut-off DML revision left its row");
    assert_eq!(t.env.deployment_image().await.as_deref(), Some(old.as_str()), "the Deployment was changed");

    // The next sync applies V3, once.
    let (state, took) = t.sync().await;
    assert_eq!(state["phase"], "Succeeded", "{state}");
    assert_eq!(t.env.history(), "1:applied,2:applied,3:applied");
    assert_eq!(rows(&t), "1", "V3 ran twice, or not at all");
    assert_eq!(
        t.env.deployment_image().await.as_deref(),
        Some(format!("localhost/bloodraven/counter-app:{tag}").as_str())
    );
    eprintln!(
        "argocd_attack: terminate-op: the sync ended {ended:.1?} after the request, the Job and Pod were gone at \
         {gone:.1?}, both leases released at {released:.1?}; the next sync took {took:.1?}\nthe cut-off runner's \
         log:\n{runner}\nits sidecar's log:\n{sidecar}"
    );
    t.env.cluster.delete_group(&t.env.group).await;
}

#[tokio::test]
async fn deleting_the_running_hook_job_by_hand_neither_hangs_the_sync_nor_runs_the_revision_twice() {
    let t = ArgoApp::start("argo-deljob").await;
    let old = synced_v1(&t).await;
    let tag = image(&revisions(15));
    let new = format!("localhost/bloodraven/counter-app:{tag}");
    t.argo.set_values(RELEASE, t.env.values_json(&tag)).await;
    let after = t.last_started().await;
    t.argo.request_sync(RELEASE).await.unwrap();
    t.wait_sleeping().await;
    let followed = t.follow_job_logs().await;

    // `kubectl delete job counter-app-migrate` (background propagation).
    let jobs = Api::<Job>::namespaced(t.env.cluster.client.clone(), &t.env.ns.name);
    let asked = Instant::now();
    jobs.delete(JOB, &DeleteParams::background()).await.unwrap();
    let deleting = jobs.get_opt(JOB).await.unwrap();
    let finalizers = deleting.as_ref().and_then(|j| j.metadata.finalizers.clone()).unwrap_or_default();

    // Meanwhile the Deployment never shows the new image before V3 is applied.
    let state = loop {
        let image = t.env.deployment_image().await.unwrap_or_default();
        let history = t.env.history();
        assert!(image != new || history.ends_with("3:applied"), "new image {image} with history {history}");
        let state = t.argo.operation_state(RELEASE).await;
        let ended = ["Succeeded", "Failed", "Error"].contains(&state["phase"].as_str().unwrap_or_default());
        if ended && state["startedAt"].as_str().unwrap_or_default() > after.as_str() {
            break state;
        }
        assert!(asked.elapsed() < T, "the sync hangs: {state}\n{}", t.argo.tail());
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let ended = asked.elapsed();
    let (runner, sidecar) = followed.await.unwrap();
    let history = t.env.history();
    let image = t.env.deployment_image().await.unwrap_or_default();
    eprintln!(
        "argocd_attack: kubectl delete job: finalizers then {finalizers:?}; the sync ended {ended:.1?} later: {} ({}); \
         history {history}; Deployment {image}\nrunner:\n{runner}\nsidecar:\n{sidecar}",
        state["phase"], state["message"]
    );
    // The hook finalizer keeps the deleted Job, so its Pod may finish V3
    // while Argo CD counts the hook as failed: the schema may then be ahead
    // of the code (as after any PreSync migration), never behind it.
    if state["phase"] == "Succeeded" {
        assert_eq!(history, "1:applied,2:applied,3:applied");
        assert_eq!(image, new);
    } else {
        assert!(["1:applied,2:applied", "1:applied,2:applied,3:applied"].contains(&history.as_str()), "{state}");
        assert_eq!(image, old, "a failed sync changed the Deployment");
    }
    assert!(["0", "1"].contains(&rows(&t).as_str()), "V3's side effect: {}", rows(&t));
    // Whatever the outcome, the next sync is correct and V3 ran once.
    let (state, _) = t.sync().await;
    assert_eq!(state["phase"], "Succeeded", "{state}");
    assert_eq!(t.env.history(), "1:applied,2:applied,3:applied");
    assert_eq!(rows(&t), "1", "V3 ran twice, or not at all");
    assert_eq!(t.env.deployment_image().await.as_deref(), Some(new.as_str()));
    t.env.cluster.delete_group(&t.env.group).await;
}

#[tokio::test]
async fn a_new_tag_while_an_automated_sync_runs_its_hook_never_deploys_code_ahead_of_its_schema() {
    let t = ArgoApp::start("argo-retag").await;
    let automated = json!({"automated": {"prune": true, "selfHeal": true}, "retry": {"limit": 0}});
    let v1 = app_image(&[V1]);
    t.create(&v1, automated).await;
    let state = t.argo.wait_operation_end(RELEASE, "", T).await;
    assert_eq!(state["phase"], "Succeeded", "{state}");

    // V2's image: V3 sleeps 15 s. While it runs, the tag moves on to an
    // image with a V4 as well.
    let mut revs = revisions(15).to_vec();
    let v2 = image(&revs);
    let after = t.last_started().await;
    t.argo.set_values(RELEASE, t.env.values_json(&v2)).await;
    t.wait_sleeping().await;
    revs.push(("V4__second.sql", "INSERT INTO side_effect () VALUES ();".to_owned()));
    let v4 = image(&revs);
    t.argo.set_values(RELEASE, t.env.values_json(&v4)).await;
    let first_job = t.job_uid().await.unwrap();

    // Every 300 ms: the Deployment's image never runs ahead of the history.
    let image_of = |tag: &str| format!("localhost/bloodraven/counter-app:{tag}");
    let started = Instant::now();
    let mut images = Vec::new();
    loop {
        let image = t.env.deployment_image().await.unwrap_or_default();
        let history = t.env.history();
        if image == image_of(&v2) {
            assert!(history.contains("3:applied"), "the image of V3 before V3 was applied: {history}");
        }
        if image == image_of(&v4) {
            assert!(history.contains("4:applied"), "the image of V4 before V4 was applied: {history}");
        }
        if images.last() != Some(&image) {
            images.push(image.clone());
        }
        let state = t.argo.operation_state(RELEASE).await;
        if image == image_of(&v4) && state["phase"] == "Succeeded" {
            break;
        }
        assert!(started.elapsed() < T, "V4 was not deployed: {state}\n{}", t.argo.tail());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let argo_history = t.argo.applications().get(RELEASE).await.unwrap().data["status"]["history"].clone();
    assert_eq!(t.env.history(), "1:applied,2:applied,3:applied,4:applied");
    assert_eq!(rows(&t), "2", "V3 and V4 each inserted one row");
    assert_ne!(t.job_uid().await.unwrap(), first_job, "the sync of the new tag ran no hook");
    assert!(t.last_started().await > after);
    eprintln!(
        "argocd_attack: a new tag during the hook: the Deployment went through {images:?}; Argo CD's history: {argo_history}"
    );
    t.env.cluster.delete_group(&t.env.group).await;
}
