//! A DDL cut off by a deleted hook Job, with helm on the run's real node:
//! the example app chart's migration Job (a pre-upgrade hook, injected with
//! the deploy-lease sidecar) runs a revision that creates a table, runs a
//! long statement, then alters the table. `helm upgrade --timeout 60s`
//! gives up while the long statement runs; the pipeline runs the upgrade
//! again at t = 70 s, and Helm's `before-hook-creation` policy deletes the
//! first Job, so its Pod gets SIGTERM inside the DDL.
//!
//! What must hold: the run is recorded as having ended inside its DDL
//! (`started`), the group raises `SchemaVerificationRequired` naming the
//! operation, the instance and the revision, in a verification record that
//! outlives the Job; the next upgrade does not run the half-done revision
//! again.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test

use std::time::Duration;

use bloodraven_api::names::deploy_lease::{INSTANCE, REVISION, ROLE_LABEL, ROLE_VERIFICATION};
use bloodraven_e2e::app::{AppEnv, SCHEMA, V1, app_image, helm};
use bloodraven_e2e::fixtures::{condition, wait_status};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};

const T: Duration = Duration::from_secs(240);
const JOB: &str = "counter-app-migrate";

#[tokio::test]
async fn a_hook_job_deleted_inside_its_ddl_is_recorded_for_a_person_with_its_revision() {
    let env = AppEnv::start("hook-timeout").await;
    let v1 = app_image(&[V1]);
    let (ok, out) = env.app("install", &v1);
    assert!(ok, "helm install of the app chart failed: {out}");
    assert_eq!(env.history(), "1:applied");

    let v2 = app_image(&[
        V1,
        (
            "V2__cut_off.sql",
            "CREATE TABLE cut_off (id INT PRIMARY KEY); DO SLEEP(300); ALTER TABLE cut_off ADD COLUMN c INT;",
        ),
    ]);
    // helm gives up after 60 s, with the long statement running.
    let mut args = env.app_args("upgrade", &v2);
    let at = args.iter().position(|a| a == "--timeout").unwrap();
    args[at + 1] = "60s".to_owned();
    let started = std::time::Instant::now();
    let (ok, out) =
        tokio::task::spawn_blocking(move || helm(&args.iter().map(String::as_str).collect::<Vec<_>>())).await.unwrap();
    assert!(!ok, "helm upgrade with a 60 s timeout succeeded: {out}");
    let sleeping = env.pair.sql(
        "iad",
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'migrator' AND INFO LIKE 'DO SLEEP%'",
    );
    assert_eq!(sleeping.trim(), "1", "the long statement runs when helm gives up");
    let jobs = Api::<Job>::namespaced(env.cluster.client.clone(), &env.ns.name);
    let first = jobs.get(JOB).await.unwrap().metadata.uid.unwrap();

    // The pipeline runs the upgrade again at t = 70 s. Helm's
    // before-hook-creation policy deletes the first Job (its Pod gets
    // SIGTERM inside the DDL) and creates the hook anew; the new run must
    // not apply the half-done revision.
    tokio::time::sleep(Duration::from_secs(70).saturating_sub(started.elapsed())).await;
    let (ok, out) = env.app("upgrade", &v2);
    assert!(!ok, "an upgrade ran over a revision cut off inside its DDL: {out}");

    let s = wait_status(&env.cluster, &env.group, "SchemaVerificationRequired", T, |s| {
        match condition(s, "SchemaVerificationRequired") {
            Some(c) if c.status == "True" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let message = condition(&s, "SchemaVerificationRequired").unwrap().message.clone();
    assert!(message.contains("instance counter-app") && message.contains("revision 2"), "{message}");

    // The record outlives the Job helm deleted, and names the revision.
    let leases = Api::<Lease>::namespaced(env.cluster.client.clone(), &env.op_ns.name);
    let records =
        leases.list(&ListParams::default().labels(&format!("{ROLE_LABEL}={ROLE_VERIFICATION}"))).await.unwrap();
    let record = records.items.first().unwrap_or_else(|| panic!("no verification record in {}", env.op_ns.name));
    let annotations = record.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations.get(REVISION).map(String::as_str), Some("2"), "{annotations:?}");
    assert_eq!(annotations.get(INSTANCE).map(String::as_str), Some("counter-app"), "{annotations:?}");
    let now = jobs.get_opt(JOB).await.unwrap();
    assert!(
        now.as_ref().is_none_or(|j| j.metadata.uid.as_deref() != Some(first.as_str())),
        "helm did not delete the first hook Job"
    );
    assert_eq!(env.history(), "1:applied,2:started", "the history row says where V2 stopped");
    let columns = env.pair.sql(
        "iad",
        &format!("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '{SCHEMA}' AND TABLE_NAME = 'cut_off' AND COLUMN_NAME = 'c'"),
    );
    assert_eq!(columns.trim(), "0", "the ALTER after the cut never ran");
    eprintln!("helm_hook_timeout: SchemaVerificationRequired says: {message}");
    env.cluster.delete_group(&env.group).await;
}
