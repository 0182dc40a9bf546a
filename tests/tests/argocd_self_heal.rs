//! The example app chart under an automated Argo CD sync policy with
//! self-heal (tests/src/argocd.rs; on the run's real node, with the
//! operator, the webhook and real sites): what happens to the PreSync
//! migration hook.
//!
//! - a new image tag in the Application syncs by itself, and the hook runs
//!   before the Deployment changes, as on a requested sync;
//! - a restart of the Deployment (`kubectl rollout restart`) is not drift
//!   to Argo CD: no sync starts and the hook does not run, but the restart
//!   runs the same image, so no code meets a schema it was not built for;
//! - a hand edit of the Deployment's image is drift: self-heal syncs it
//!   back with a sync of the drifted resources only, which runs no hook.
//!   That is safe: Argo CD self-heals only to a revision whose last sync
//!   succeeded, so its migration has run.
//!
//! - an automated sync retries a failed sync 5 times unless the
//!   Application's `syncPolicy.retry` says otherwise: with `limit: 0`, a
//!   failing migration runs once, and the failed Job stays for a person.
//!
//! Automated prune leaves the database record and its `-primary` Service
//! alone throughout.
//!
//! Argo CD: runs once hack/build-argocd.sh has built it (hack/e2e.sh).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test

use std::time::{Duration, Instant};

use bloodraven_e2e::app::{RELEASE, V1, app_image};
use bloodraven_e2e::argocd::now_rfc3339;
use bloodraven_e2e::argocd_app::ArgoApp;
use bloodraven_e2e::wait_for;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

const T: Duration = Duration::from_secs(240);

#[tokio::test]
async fn automated_syncs_run_the_hook_and_self_heal_and_restarts_run_none() {
    let t = ArgoApp::start("argo-heal").await;
    let automated = json!({"automated": {"prune": true, "selfHeal": true}});
    let v1 = app_image(&[V1]);
    t.create(&v1, automated).await;
    let started = Instant::now();
    let state = t.argo.wait_operation_end(RELEASE, "", T).await;
    assert_eq!(state["phase"], "Succeeded", "{state}");
    eprintln!(
        "argocd_self_heal: the automated first sync ended {:.1?} after the Application was created",
        started.elapsed()
    );
    assert_eq!(t.env.history(), "1:applied");
    let first_job = t.job_uid().await.unwrap();
    let record = t.record_uids().await;

    // A new tag: an automated sync, with the hook.
    let v2 = app_image(&[V1, ("V2__first_counter.sql", "INSERT INTO counters (name, value) VALUES ('visits', 0);")]);
    let after = t.last_started().await;
    t.argo.set_values(RELEASE, t.env.values_json(&v2)).await;
    let state = t.argo.wait_operation_end(RELEASE, &after, T).await;
    assert_eq!(state["phase"], "Succeeded", "{state}");
    assert_eq!(t.env.history(), "1:applied,2:applied");
    let second_job = t.job_uid().await.unwrap();
    assert_ne!(second_job, first_job, "the automated sync ran no hook");
    let new = format!("localhost/bloodraven/counter-app:{v2}");
    assert_eq!(t.env.deployment_image().await.as_deref(), Some(new.as_str()));

    // `kubectl rollout restart`: an annotation on the Pod template.
    let deployments = Api::<Deployment>::namespaced(t.env.cluster.client.clone(), &t.env.ns.name);
    let restarted = now_rfc3339();
    let patch =
        json!({"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": restarted}}}}});
    deployments.patch(RELEASE, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let app = t.argo.wait_reconciled_after(RELEASE, &restarted, Duration::from_secs(120)).await;
    let sync_status = app.data["status"]["sync"]["status"].clone();
    assert_eq!(sync_status, "Synced", "a restart is drift to Argo CD: {}", app.data["status"]);
    assert_eq!(t.last_started().await, state["startedAt"].as_str().unwrap(), "a restart started a sync");
    assert_eq!(t.job_uid().await.as_deref(), Some(second_job.as_str()), "a restart ran the hook");
    let template = deployments.get(RELEASE).await.unwrap().spec.unwrap().template;
    let annotations = template.metadata.unwrap().annotations.unwrap_or_default();
    assert_eq!(annotations.get("kubectl.kubernetes.io/restartedAt"), Some(&restarted), "self-heal undid the restart");

    // A hand edit of the image (`kubectl set image`): drift, healed by a
    // sync of the Deployment alone, without the hook.
    let old = format!("localhost/bloodraven/counter-app:{v1}");
    let after = t.last_started().await;
    let edited = Instant::now();
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": old}]}}}});
    deployments.patch(RELEASE, &PatchParams::default(), &Patch::Strategic(&patch)).await.unwrap();
    let state = t.argo.wait_operation_end(RELEASE, &after, T).await;
    assert_eq!(state["phase"], "Succeeded", "{state}");
    let healed = edited.elapsed();
    assert_eq!(t.env.deployment_image().await.as_deref(), Some(new.as_str()), "self-heal did not restore the image");
    // A selective sync (`operation.sync.resources`: what was not Synced),
    // which applied the Deployment alone.
    assert!(state["operation"]["sync"]["resources"].is_array(), "self-heal syncs selected resources: {state}");
    let applied = &state["syncResult"]["resources"];
    assert_eq!(
        applied.as_array().map(|r| r.iter().map(|r| r["kind"].as_str().unwrap_or_default()).collect::<Vec<_>>()),
        Some(vec!["Deployment"]),
        "self-heal applied the drifted Deployment only: {state}"
    );
    assert_eq!(t.job_uid().await.as_deref(), Some(second_job.as_str()), "the self-heal sync ran the hook");
    assert_eq!(t.env.history(), "1:applied,2:applied");
    // Automated prune left the record and its Service alone (the chart
    // skips them; Argo CD v3 tracks what it applied by annotation, so the
    // labels a Helm install gave the record do not make it the app's).
    assert_eq!(t.record_uids().await, record, "the MysqlDatabase or its -primary Service was re-created");
    eprintln!(
        "argocd_self_heal: a restart started no sync; a hand edit of the image was healed {healed:.1?} later by a sync \
         of the Deployment alone, without the hook"
    );
    t.env.cluster.delete_group(&t.env.group).await;
}

#[tokio::test]
async fn an_automated_sync_of_a_failing_revision_runs_it_once_when_retry_is_off() {
    let t = ArgoApp::start("argo-noretry").await;
    // Automated syncs retry a failed sync 5 times unless the Application
    // says otherwise; `retry: {limit: 0}` turns that off, so a failing
    // migration runs once and waits for a person, as `backoffLimit: 0`
    // means it to.
    let policy = json!({"automated": {"prune": true, "selfHeal": true}, "retry": {"limit": 0}});
    let v1 = app_image(&[V1]);
    t.create(&v1, policy).await;
    let state = t.argo.wait_operation_end(RELEASE, "", T).await;
    assert_eq!(state["phase"], "Succeeded", "{state}");
    let bad = app_image(&[V1, ("V2__typo.sql", "INSERT INTO countres (name, value) VALUES ('visits', 0);")]);
    let after = t.last_started().await;
    t.argo.set_values(RELEASE, t.env.values_json(&bad)).await;
    let state = t.argo.wait_operation_end(RELEASE, &after, T).await;
    assert_eq!(state["phase"], "Failed", "{state}");
    assert_eq!(state["operation"]["retry"]["limit"].as_i64().unwrap_or(0), 0, "{state}");
    let failed_job = t.job_uid().await.unwrap();
    let failed_at = state["finishedAt"].as_str().unwrap().to_owned();
    // Two refreshes later (every 30 s here), nothing ran again: no retry,
    // no new automated sync of the same revision, the Job is the failed one.
    let app = wait_for("two refreshes after the failure", Duration::from_secs(150), || async {
        let app = t.argo.applications().get(RELEASE).await.map_err(|e| e.to_string())?;
        let at = app.data["status"]["reconciledAt"].as_str().unwrap_or_default().to_owned();
        let later = k8s_openapi::jiff::Timestamp::now().checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(35));
        let threshold = later.map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()).unwrap_or_default();
        if at > failed_at && threshold > failed_at { Ok(app) } else { Err(format!("reconciled at {at}")) }
    })
    .await;
    let state = &app.data["status"]["operationState"];
    assert_eq!(state["finishedAt"].as_str(), Some(failed_at.as_str()), "another sync ran: {state}");
    assert_eq!(state["retryCount"].as_i64().unwrap_or(0), 0, "{state}");
    assert_eq!(t.job_uid().await.as_deref(), Some(failed_job.as_str()), "the failing migration ran again");
    assert_eq!(t.env.history(), "1:applied");
    let conditions = app.data["status"]["conditions"].to_string();
    eprintln!(
        "argocd_self_heal: with retry off, a failing automated sync ran once; the Application's conditions: {conditions}"
    );
    t.env.cluster.delete_group(&t.env.group).await;
}
