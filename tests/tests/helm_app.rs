//! The example app chart (`charts/examples/counter-app`) with
//! helm on the run's real node: its migration Job is a pre-install,
//! pre-upgrade hook, injected with the deploy-lease sidecar by the webhook
//! that charts/bloodraven installed, and runs `bloodraven-migrate` from the
//! same image tag as the app Deployment (images built from revision folders
//! by `hack/app-image.sh`).
//!
//! - a good revision is applied before the new Deployment is applied, let
//!   alone rolled out;
//! - a failing revision fails the release: the new Deployment is never
//!   applied, and the failed Job and its Pod's log stay;
//! - a second `helm upgrade` while a long hook runs does not run the
//!   migration twice (helm refuses it: another operation is in progress).
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test

use std::time::{Duration, Instant};

use bloodraven_e2e::app::{AppEnv, RELEASE, SCHEMA, V1, app_image, helm};
use bloodraven_e2e::pods::{job_pods, logs, wait_job_end};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

const T: Duration = Duration::from_secs(240);
const JOB: &str = "counter-app-migrate";

/// Installs the app chart at an image holding V1 only; checks V1 is applied
/// and the Deployment runs that image. Returns the tag.
async fn install_v1(env: &AppEnv) -> String {
    let v1 = app_image(&[V1]);
    let (ok, out) = env.app("install", &v1);
    assert!(ok, "helm install of the app chart failed: {out}");
    assert!(!out.contains("would violate PodSecurity"), "every Pod of the chart is `restricted`: {out}");
    assert_eq!(env.history(), "1:applied");
    assert_eq!(
        env.deployment_image().await.as_deref(),
        Some(format!("localhost/bloodraven/counter-app:{v1}").as_str())
    );
    // The pre-install wait succeeded and was removed (hook-succeeded); the
    // MysqlDatabase it waited for is there, created by the chart.
    let jobs = Api::<Job>::namespaced(env.cluster.client.clone(), &env.ns.name);
    assert!(jobs.get_opt("counter-app-wait-for-database").await.unwrap().is_none());
    let dbs = Api::<bloodraven_api::v1alpha1::MysqlDatabase>::namespaced(env.cluster.client.clone(), &env.ns.name);
    let db = dbs.get(RELEASE).await.unwrap();
    assert_eq!(db.spec.deployment_clients.len(), 1, "{:?}", db.spec.deployment_clients);
    assert_eq!(db.spec.deployment_clients[0].service_account, "counter-app-migrate");
    v1
}

/// The migration Job's Pod name and the runner's and the sidecar's logs.
async fn job_logs(env: &AppEnv) -> (String, String, String) {
    let pods = job_pods(&env.cluster, &env.ns.name, JOB).await;
    let pod = pods.first().unwrap_or_else(|| panic!("no Pod of Job {JOB}")).metadata.name.clone().unwrap();
    let runner = logs(&env.cluster, &env.ns.name, &pod, "migrate").await;
    let sidecar = logs(&env.cluster, &env.ns.name, &pod, "bloodraven-sidecar").await;
    (pod, runner, sidecar)
}

#[tokio::test]
async fn a_good_revision_is_applied_before_the_new_deployment_is() {
    let env = AppEnv::start("happ-good").await;
    let v1 = install_v1(&env).await;
    let old = format!("localhost/bloodraven/counter-app:{v1}");
    // V2 takes a few seconds (a DML revision: one transaction with its
    // history row), so that a Deployment applied too early would be seen.
    let v2 = app_image(&[
        V1,
        ("V2__first_counter.sql", "DO SLEEP(4); INSERT INTO counters (name, value) VALUES ('visits', 0);"),
    ]);
    let new = format!("localhost/bloodraven/counter-app:{v2}");

    // helm upgrade in the background; meanwhile, every 200 ms, read the
    // Deployment and then the history: a Deployment at the new image read
    // before a history without V2 applied would be a Deployment applied
    // before the migration finished.
    let started = Instant::now();
    let args = env.app_args("upgrade", &v2);
    let upgrade = tokio::task::spawn_blocking(move || helm(&args.iter().map(String::as_str).collect::<Vec<_>>()));
    let mut samples: Vec<(bool, String)> = Vec::new();
    while !upgrade.is_finished() {
        let image = env.deployment_image().await.unwrap_or_default();
        let history = env.history();
        let applied = history.split(',').any(|r| r == "2:applied");
        assert!(
            image != new || applied,
            "the Deployment has the new image {image} while the history is {history:?} (after {:?})",
            started.elapsed()
        );
        samples.push((applied, image));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (ok, out) = upgrade.await.unwrap();
    let (_, runner, sidecar) = job_logs(&env).await;
    assert!(ok, "helm upgrade failed: {out}\nrunner:\n{runner}\nsidecar:\n{sidecar}");
    assert_eq!(env.history(), "1:applied,2:applied", "{runner}");
    assert_eq!(env.pair.sql("iad", &format!("SELECT COUNT(*) FROM {SCHEMA}.counters")).trim(), "1");
    assert_eq!(env.deployment_image().await.as_deref(), Some(new.as_str()));
    assert!(!runner.contains("starting alone"), "behind the sidecar:\n{runner}");
    // The window was seen: samples while V2 ran, the old image in place.
    let before = samples.iter().filter(|(applied, image)| !applied && *image == old).count();
    assert!(before >= 5, "too few samples while V2 ran ({before}): {samples:?}");

    // The timestamps agree: V2's history row was finished (server clock,
    // microseconds) no later than the new ReplicaSet and its Pods were
    // created (API server clock, whole seconds; the same host).
    let finished: f64 = env
        .pair
        .sql(
            "iad",
            &format!("SELECT UNIX_TIMESTAMP(finished_at) FROM {SCHEMA}.bloodraven_schema_history WHERE version = 2"),
        )
        .trim()
        .parse()
        .unwrap();
    let rss = Api::<ReplicaSet>::namespaced(env.cluster.client.clone(), &env.ns.name)
        .list(&ListParams::default().labels("app.kubernetes.io/component=app"))
        .await
        .unwrap()
        .items;
    let rs = rss
        .iter()
        .find(|rs| {
            rs.spec
                .as_ref()
                .and_then(|s| s.template.as_ref())
                .and_then(|t| t.spec.as_ref())
                .map(|s| s.containers[0].image.clone())
                == Some(Some(new.clone()))
        })
        .unwrap_or_else(|| panic!("no ReplicaSet of {new}"));
    let rs_created = rs.metadata.creation_timestamp.as_ref().unwrap().0.as_second();
    // Whole seconds: created in the same second as the row was finished
    // at the latest.
    assert!(rs_created >= finished.floor() as i64, "ReplicaSet created at {rs_created}, V2 finished at {finished}");
    let rs_hash = rs.metadata.labels.as_ref().unwrap()["pod-template-hash"].clone();
    let pods = Api::<Pod>::namespaced(env.cluster.client.clone(), &env.ns.name)
        .list(&ListParams::default().labels(&format!("pod-template-hash={rs_hash}")))
        .await
        .unwrap()
        .items;
    assert!(!pods.is_empty(), "no Pod of the new ReplicaSet");
    for p in &pods {
        let created = p.metadata.creation_timestamp.as_ref().unwrap().0.as_second();
        assert!(created >= finished.floor() as i64, "Pod created at {created}, V2 finished at {finished}");
    }
    eprintln!(
        "helm_app: V2 finished at {finished:.3}, new ReplicaSet created at {rs_created} (whole seconds); {} samples, {before} of them while V2 ran with the old image",
        samples.len()
    );
    env.cluster.delete_group(&env.group).await;
}

#[tokio::test]
async fn a_failing_revision_fails_the_release_and_keeps_the_job_and_its_log() {
    let env = AppEnv::start("happ-bad").await;
    let v1 = install_v1(&env).await;
    let old = format!("localhost/bloodraven/counter-app:{v1}");
    let generation_before =
        Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(env.cluster.client.clone(), &env.ns.name)
            .get(RELEASE)
            .await
            .unwrap()
            .metadata
            .generation;
    // V2 names a table that does not exist: the server refuses it (1146),
    // the revision's own error, not retried.
    let bad = app_image(&[V1, ("V2__typo.sql", "INSERT INTO countres (name, value) VALUES ('visits', 0);")]);
    let (ok, out) = env.app("upgrade", &bad);
    assert!(!ok, "helm upgrade with a failing revision succeeded: {out}");
    assert!(out.contains("pre-upgrade hooks failed") || out.contains("BackoffLimitExceeded"), "{out}");

    // The new Deployment was never applied: same image, same generation.
    let deployment =
        Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(env.cluster.client.clone(), &env.ns.name)
            .get(RELEASE)
            .await
            .unwrap();
    assert_eq!(deployment.metadata.generation, generation_before, "the Deployment was changed");
    assert_eq!(env.deployment_image().await.as_deref(), Some(old.as_str()));
    assert_eq!(env.history(), "1:applied", "nothing of V2 is recorded");

    // The failed Job and its Pod's log are still there, with the runner's error.
    let (_, ended, reason) = wait_job_end(&env.cluster, &env.ns.name, JOB, T).await;
    assert_eq!(ended, "Failed", "{reason}");
    let (pod, runner, sidecar) = job_logs(&env).await;
    assert!(runner.contains("countres"), "the runner's log names the error:\n{runner}\nsidecar:\n{sidecar}");
    assert!(runner.contains("V2") || runner.contains("revision=2"), "{runner}");
    // helm status says failed.
    let (_, status) = helm(&["status", RELEASE, "-n", &env.ns.name]);
    assert!(status.contains("STATUS: failed"), "{status}");
    // Still there a while later (no TTL, no hook-failed deletion).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let jobs = Api::<Job>::namespaced(env.cluster.client.clone(), &env.ns.name);
    assert!(jobs.get_opt(JOB).await.unwrap().is_some(), "the failed Job is gone");
    let again = logs(&env.cluster, &env.ns.name, &pod, "migrate").await;
    assert!(again.contains("countres"), "the failed Pod's log is gone: {again:?}");
    eprintln!("helm_app: helm upgrade failed as it should:\n{}\nrunner log (kept):\n{runner}", out.trim());
    env.cluster.delete_group(&env.group).await;
}

#[tokio::test]
async fn a_second_upgrade_during_a_long_hook_does_not_run_the_migration_twice() {
    let env = AppEnv::start("happ-twice").await;
    install_v1(&env).await;
    // V2 is long (20 s), and leaves one row per run in a side-effect table.
    let v2 = app_image(&[
        V1,
        (
            "V2__side_effect.sql",
            "CREATE TABLE side_effect (id INT AUTO_INCREMENT PRIMARY KEY, at TIMESTAMP(6) DEFAULT CURRENT_TIMESTAMP(6));",
        ),
        ("V3__long.sql", "INSERT INTO side_effect () VALUES (); DO SLEEP(20);"),
    ]);
    let spawn_upgrade = |tag: &str| {
        let args = env.app_args("upgrade", tag);
        tokio::task::spawn_blocking(move || helm(&args.iter().map(String::as_str).collect::<Vec<_>>()))
    };
    let first = spawn_upgrade(&v2);
    // Until V3 runs: the runner's session sleeps. Should the upgrade end
    // first, or the wait time out, what the hook's Pod did is the failure.
    let sleeping = bloodraven_e2e::wait_for("the migration's SLEEP to run", T + T, || async {
        if first.is_finished() {
            return Ok(false);
        }
        let n = env.pair.sql(
            "iad",
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'migrator' AND INFO LIKE 'DO SLEEP%'",
        );
        if n.trim() == "1" { Ok(true) } else { Err(format!("{} sessions sleeping", n.trim())) }
    });
    if !tokio::time::timeout(T, sleeping).await.unwrap_or(false) {
        let pods = job_pods(&env.cluster, &env.ns.name, JOB).await;
        let statuses: Vec<_> = pods.iter().map(|p| (&p.metadata.name, &p.status)).collect();
        let (_, runner, sidecar) = job_logs(&env).await;
        let upgrade = if first.is_finished() { first.await.unwrap().1 } else { "still running".to_owned() };
        panic!(
            "the migration's SLEEP never ran; the upgrade: {upgrade}\nPods: {statuses:#?}\nrunner:\n{runner}\nsidecar:\n{sidecar}"
        );
    }
    let (second_ok, second) = spawn_upgrade(&v2).await.unwrap();
    let first_running = !first.is_finished();
    let (first_ok, first_out) = first.await.unwrap();
    let (_, runner, sidecar) = job_logs(&env).await;
    assert!(first_ok, "the first upgrade failed: {first_out}\nrunner:\n{runner}\nsidecar:\n{sidecar}");
    assert!(first_running, "the first upgrade ended before the second was refused");
    assert!(!second_ok, "a second helm upgrade during the hook succeeded: {second}");
    assert!(second.contains("another operation (install/upgrade/rollback) is in progress"), "{second}");
    let count = |table: &str| env.pair.sql("iad", &format!("SELECT COUNT(*) FROM {SCHEMA}.{table}")).trim().to_owned();
    assert_eq!(count("side_effect"), "1", "the migration ran twice");
    assert_eq!(env.history(), "1:applied,2:applied,3:applied");

    // helm upgrade again afterwards (the same release): the hook's Job is
    // replaced (before-hook-creation) and runs, with nothing pending.
    let (ok, out) = env.app("upgrade", &v2);
    let (_, runner_again, _) = job_logs(&env).await;
    assert!(ok, "{out}\n{runner_again}");
    assert_eq!(count("side_effect"), "1", "the migration ran again: {runner_again}");
    assert_eq!(env.history(), "1:applied,2:applied,3:applied");
    eprintln!("helm_app: the second helm upgrade during the hook said:\n{}", second.trim());
    env.cluster.delete_group(&env.group).await;
}
