//! The example app chart (`charts/examples/counter-app`) synced by a real
//! Argo CD (application controller and repo server built by
//! `hack/build-argocd.sh`; tests/src/argocd.rs) on the run's node: its
//! migration Job is a PreSync hook, injected with the deploy-lease sidecar by
//! the webhook charts/bloodraven installed.
//!
//! - a sync runs the injected Job behind both leases, and changes the
//!   Deployment only after the revision is applied; the MysqlDatabase and
//!   its `-primary` Service, which the chart skips under Argo CD, survive
//!   every sync (the same objects, with the labels a Helm install left);
//! - a failing revision fails the sync: the Deployment keeps its image, and
//!   the failed Job and its log stay, through the controller's refreshes,
//!   until the next sync replaces the Job;
//! - a second sync asked for while the hook runs does not run the
//!   migration twice.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).
//! Argo CD: runs once hack/build-argocd.sh has built it (hack/e2e.sh).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test

use std::time::{Duration, Instant};

use bloodraven_e2e::app::{RELEASE, SCHEMA, V1, app_image};
use bloodraven_e2e::argocd::now_rfc3339;
use bloodraven_e2e::argocd_app::{ArgoApp, JOB};
use bloodraven_e2e::pods::{logs, wait_job_end};
use bloodraven_e2e::wait_for;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use kube::api::Api;
use serde_json::json;

const T: Duration = Duration::from_secs(240);

/// Syncs the Application at an image holding V1 only; checks the sync
/// succeeded, V1 is applied, and the Job was injected and ran behind both
/// leases. Returns the tag.
async fn sync_v1(t: &ArgoApp) -> String {
    let v1 = app_image(&[V1]);
    t.create(&v1, json!({})).await;
    let (state, took) = t.sync().await;
    let (pod, runner, sidecar) = t.job_logs().await;
    assert_eq!(state["phase"], "Succeeded", "{state}\nrunner:\n{runner}\nsidecar:\n{sidecar}\n{}", t.argo.tail());
    assert_eq!(t.env.history(), "1:applied");
    let spec = pod.spec.unwrap();
    let init: Vec<&str> = spec.init_containers.iter().flatten().map(|c| c.name.as_str()).collect();
    assert!(init.contains(&"bloodraven-sidecar"), "the webhook injected the PreSync Job: {init:?}");
    assert!(sidecar.contains("both leases held"), "{sidecar}");
    assert!(!runner.contains("starting alone"), "behind the sidecar:\n{runner}");
    assert_eq!(
        t.env.deployment_image().await.as_deref(),
        Some(format!("localhost/bloodraven/counter-app:{v1}").as_str())
    );
    eprintln!("argocd_app: the first sync (V1) took {took:.1?}");
    v1
}

#[tokio::test]
async fn a_sync_migrates_behind_both_leases_before_the_deployment_changes_and_keeps_the_record() {
    let t = ArgoApp::start("argo-good").await;
    sync_v1(&t).await;
    let record = t.record_uids().await;
    let v2 = app_image(&[
        V1,
        ("V2__first_counter.sql", "DO SLEEP(4); INSERT INTO counters (name, value) VALUES ('visits', 0);"),
    ]);
    let new = format!("localhost/bloodraven/counter-app:{v2}");
    t.argo.set_values(RELEASE, t.env.values_json(&v2)).await;

    // Sync; meanwhile, every 200 ms, read the Deployment and then the
    // history: the new image read before V2 is applied would be a
    // Deployment applied before the migration finished.
    let after = t.last_started().await;
    let asked = Instant::now();
    t.argo.request_sync(RELEASE).await.unwrap();
    let mut samples = 0;
    let mut before_applied = 0;
    loop {
        let image = t.env.deployment_image().await.unwrap_or_default();
        let history = t.env.history();
        let applied = history.split(',').any(|r| r == "2:applied");
        assert!(image != new || applied, "the Deployment has the new image {image} while the history is {history:?}");
        samples += 1;
        before_applied += usize::from(!applied);
        let state = t.argo.operation_state(RELEASE).await;
        let ended = ["Succeeded", "Failed", "Error"].contains(&state["phase"].as_str().unwrap_or_default());
        if ended && state["startedAt"].as_str().unwrap_or_default() > after.as_str() {
            let (_, runner, sidecar) = t.job_logs().await;
            assert_eq!(
                state["phase"],
                "Succeeded",
                "{state}\nrunner:\n{runner}\nsidecar:\n{sidecar}\n{}",
                t.argo.tail()
            );
            assert!(sidecar.contains("both leases held"), "{sidecar}");
            break;
        }
        assert!(asked.elapsed() < T, "the sync did not end: {state}\n{}", t.argo.tail());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let took = asked.elapsed();
    assert_eq!(t.env.history(), "1:applied,2:applied");
    assert_eq!(t.env.deployment_image().await.as_deref(), Some(new.as_str()));
    assert!(before_applied >= 5, "too few samples before V2 was applied ({before_applied} of {samples})");

    // The record and its Service are the same objects: Argo CD neither
    // deleted nor re-created them, and did not take them over.
    assert_eq!(t.record_uids().await, record, "the MysqlDatabase or its -primary Service was re-created");
    let db = Api::<bloodraven_api::v1alpha1::MysqlDatabase>::namespaced(t.env.cluster.client.clone(), &t.env.ns.name)
        .get(RELEASE)
        .await
        .unwrap();
    let annotations = db.metadata.annotations.unwrap_or_default();
    assert!(
        !annotations.keys().any(|k| k.starts_with("argocd.argoproj.io/")),
        "Argo CD took the MysqlDatabase over: {annotations:?}"
    );
    let app = t.argo.applications().get(RELEASE).await.unwrap();
    eprintln!(
        "argocd_app: the second sync (V2, 4 s) took {took:.1?}; {samples} samples, {before_applied} before V2 was applied; \
         the Application is {} and {}",
        app.data["status"]["sync"]["status"], app.data["status"]["health"]["status"]
    );
    t.env.cluster.delete_group(&t.env.group).await;
}

#[tokio::test]
async fn a_failing_revision_fails_the_sync_and_its_job_stays_until_the_next_sync() {
    let t = ArgoApp::start("argo-bad").await;
    let v1 = sync_v1(&t).await;
    let old = format!("localhost/bloodraven/counter-app:{v1}");
    let deployments = Api::<Deployment>::namespaced(t.env.cluster.client.clone(), &t.env.ns.name);
    let generation = deployments.get(RELEASE).await.unwrap().metadata.generation;
    // V2 names a table that does not exist: the server refuses it (1146).
    let bad = app_image(&[V1, ("V2__typo.sql", "INSERT INTO countres (name, value) VALUES ('visits', 0);")]);
    t.argo.set_values(RELEASE, t.env.values_json(&bad)).await;
    let (state, took) = t.sync().await;
    assert_eq!(state["phase"], "Failed", "{state}");
    eprintln!("argocd_app: the failing sync took {took:.1?} and said: {}", state["message"]);

    // The Deployment was not changed.
    assert_eq!(deployments.get(RELEASE).await.unwrap().metadata.generation, generation, "the Deployment was changed");
    assert_eq!(t.env.deployment_image().await.as_deref(), Some(old.as_str()));
    assert_eq!(t.env.history(), "1:applied");

    // The failed Job and its Pod's log are there, with the runner's error,
    // and still there after the controller refreshed the Application
    // (every 30 s here) without a sync.
    let (_, ended, reason) = wait_job_end(&t.env.cluster, &t.env.ns.name, JOB, T).await;
    assert_eq!(ended, "Failed", "{reason}");
    let failed_uid = t.job_uid().await.unwrap();
    let (pod, runner, _) = t.job_logs().await;
    assert!(runner.contains("countres"), "the runner's log names the error:\n{runner}");
    let refreshed = now_rfc3339();
    t.argo.wait_reconciled_after(RELEASE, &refreshed, Duration::from_secs(120)).await;
    assert_eq!(t.job_uid().await.as_deref(), Some(failed_uid.as_str()), "the failed Job was removed or replaced");
    let again = logs(&t.env.cluster, &t.env.ns.name, pod.metadata.name.as_deref().unwrap(), "migrate").await;
    assert!(again.contains("countres"), "the failed Pod's log is gone: {again:?}");
    assert_eq!(t.last_started().await, state["startedAt"].as_str().unwrap(), "a sync started by itself");

    // The next sync, at a fixed image, replaces the Job (BeforeHookCreation)
    // and applies the fixed V2, at the first attempt: the chart's wait Job
    // does not outlive a sync (see wait-job.yaml).
    let fixed = app_image(&[V1, ("V2__first_counter.sql", "INSERT INTO counters (name, value) VALUES ('visits', 0);")]);
    t.argo.set_values(RELEASE, t.env.values_json(&fixed)).await;
    let (state, _) = t.sync().await;
    assert_eq!(state["phase"], "Succeeded", "{state}");
    assert_ne!(t.job_uid().await.as_deref(), Some(failed_uid.as_str()), "the failed Job was not replaced");
    assert_eq!(t.env.history(), "1:applied,2:applied");
    eprintln!("argocd_app: the failed Job and its log stayed until the next sync; runner log:\n{runner}");
    t.env.cluster.delete_group(&t.env.group).await;
}

#[tokio::test]
async fn a_second_sync_asked_for_while_the_hook_runs_does_not_migrate_twice() {
    let t = ArgoApp::start("argo-twice").await;
    sync_v1(&t).await;
    // V2 leaves one row per run in a side-effect table; V3 is long (20 s).
    let v2 = app_image(&[
        V1,
        (
            "V2__side_effect.sql",
            "CREATE TABLE side_effect (id INT AUTO_INCREMENT PRIMARY KEY, at TIMESTAMP(6) DEFAULT CURRENT_TIMESTAMP(6));",
        ),
        ("V3__long.sql", "INSERT INTO side_effect () VALUES (); DO SLEEP(20);"),
    ]);
    t.argo.set_values(RELEASE, t.env.values_json(&v2)).await;
    let after = t.last_started().await;
    t.argo.request_sync(RELEASE).await.unwrap();
    wait_for("the migration's SLEEP to run", T, || async {
        let n = t.env.pair.sql(
            "iad",
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'migrator' AND INFO LIKE 'DO SLEEP%'",
        );
        if n.trim() == "1" { Ok(()) } else { Err(format!("{} sessions sleeping; {}", n.trim(), t.argo.tail())) }
    })
    .await;
    let first = t.argo.operation_state(RELEASE).await;
    // What `argocd app sync` writes, again, while the first sync's hook runs.
    let second = t.argo.request_sync(RELEASE).await;
    let state = t.argo.wait_operation_end(RELEASE, &after, T).await;
    assert_eq!(state["phase"], "Succeeded", "{state}");
    // Whatever the controller made of the second request, once it is done
    // nothing is left to run.
    wait_for("no operation left", T, || async {
        let app = t.argo.applications().get(RELEASE).await.map_err(|e| e.to_string())?;
        let phase = app.data["status"]["operationState"]["phase"].as_str().unwrap_or_default().to_owned();
        if app.data["operation"].is_null() && phase != "Running" { Ok(()) } else { Err(phase) }
    })
    .await;
    let last = t.argo.operation_state(RELEASE).await;
    let count =
        |table: &str| t.env.pair.sql("iad", &format!("SELECT COUNT(*) FROM {SCHEMA}.{table}")).trim().to_owned();
    assert_eq!(count("side_effect"), "1", "the migration ran twice");
    assert_eq!(t.env.history(), "1:applied,2:applied,3:applied");
    eprintln!(
        "argocd_app: a second sync asked for during the hook: the API server answered {:?}; the first sync started at {}, \
         the last at {} ({})",
        second.map_err(|e| e.to_string()),
        first["startedAt"],
        last["startedAt"],
        last["phase"]
    );
    let jobs = Api::<Job>::namespaced(t.env.cluster.client.clone(), &t.env.ns.name);
    assert!(jobs.get_opt(JOB).await.unwrap().is_some());
    t.env.cluster.delete_group(&t.env.group).await;
}
