//! `bloodraven-sidecar run --ddl-boundary reported --db-url-file …`
//! against the real operator and a real pair: the sidecar's own look at the
//! database (a fingerprint of the schema and of migration tools' history
//! tables) finds DDL a migration did not report, so a revocation after it
//! asks for schema verification, and one before it does not.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test

use std::time::Duration;

use bloodraven_e2e::deploy::{DeployScenario, scenario};
use bloodraven_e2e::sidecar::{SidecarRun, exit, stamp};
use kube::api::{Patch, PatchParams};
use serde_json::json;

const T: Duration = Duration::from_secs(90);

/// Short leases, as in sidecar_run.rs: renewed every 5 s; SIGTERM at expiry − 3 s.
const QUICK: &[&str] = &["--ttl", "15", "--grace", "3", "--request-timeout", "2"];

async fn revoke(d: &DeployScenario) {
    let patch = json!({"metadata": {"annotations": {"bloodraven.shipstream.io/revoke-deployment-leases": bloodraven_e2e::suffix()}}});
    d.sc.cluster.groups().patch(&d.pipeline.group, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

#[tokio::test]
async fn the_database_detection_finds_ddl_a_migration_did_not_report() {
    let d = scenario("sc-dbddl").await;
    let p = &d.pipeline;
    d.sc.pair.sql(
        "iad",
        "CREATE DATABASE counter; CREATE USER 'app'@'127.0.0.1' IDENTIFIED BY 'app-pw'; \
         GRANT ALL ON counter.* TO 'app'@'127.0.0.1'; \
         CREATE TABLE counter.flyway_schema_history (installed_rank INT PRIMARY KEY, version VARCHAR(50)); \
         INSERT INTO counter.flyway_schema_history VALUES (1, '1'); CREATE TABLE counter.ticks (id INT PRIMARY KEY)",
    );
    let url_file = d.sc.pair.dir().join("db-url");
    std::fs::write(&url_file, format!("mysql://app:app-pw@127.0.0.1:{}/counter", d.sc.pair.port("iad"))).unwrap();
    let url_file = url_file.to_str().unwrap().to_owned();
    let script = format!("trap 'exit 0' TERM; {}; while :; do sleep 0.1; done", stamp("started"));
    // Reported boundary, and the migration reports nothing: only the database can tell.
    let mut flags: Vec<&str> = QUICK.to_vec();
    flags.extend(["--ddl-boundary", "reported", "--db-url-file", &url_file]);

    // Nothing changed in the database: a fenced run may be retried.
    let mut run = SidecarRun::start(p, &d.tls, "db-same", &flags, &script);
    run.wait_for_marker("started", T).await;
    revoke(&d).await;
    assert_eq!(run.wait(T).await, exit::FENCED, "{}", run.log());

    // The migration changed the schema and its history, unreported.
    let mut run = SidecarRun::start(p, &d.tls, "db-changed", &flags, &script);
    run.wait_for_marker("started", T).await;
    d.sc.pair.sql(
        "iad",
        "ALTER TABLE counter.ticks ADD COLUMN at BIGINT; INSERT INTO counter.flyway_schema_history VALUES (2, '2')",
    );
    revoke(&d).await;
    assert_eq!(run.wait(T).await, exit::SCHEMA_VERIFICATION_REQUIRED, "{}", run.log());
    assert_eq!(run.record()["result"], "schema-verification-required");
    assert!(run.full_log().contains("schema or history changes since the grant"), "{}", run.log());
}
