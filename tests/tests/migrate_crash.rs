//! What a broken run leaves, on a real pair: a DDL +
//! DML revision that fails on its DML is left dirty and the rerun refuses
//! until `resolve`; `kill -9` of the runner mid-DML leaves no trace; the
//! connection killed mid-revision is not reconnected; a fence's SIGTERM
//! ends the statement in flight on the server too; an injected Job
//! whose sidecar cannot vouch for a lease never touches the database; and
//! a person's run says it runs alone.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test

use std::time::Duration;

use bloodraven_e2e::SitePair;
use bloodraven_e2e::migrate::{AppDb, Revisions, Run, exit};

const T: Duration = Duration::from_secs(120);

#[tokio::test]
async fn a_ddl_and_dml_revision_failing_on_its_dml_is_dirty_and_the_rerun_refuses_until_resolved() {
    let pair = SitePair::start("mg-dirty");
    let db = AppDb::create(&pair, false);
    let revs = Revisions::new("mg-dirty");
    // The DDL commits on its own; the INSERT then fails (duplicate key 1062).
    revs.add(1, "add_c_and_row", "ALTER TABLE orders ADD COLUMN c INT;\nINSERT INTO orders (id, v) VALUES (1, 5);");
    let mut run = Run::apply(&revs, &db.url, &[]);
    assert_eq!(run.wait(T).await, exit::DIRTY, "{}", run.log());
    assert!(run.log().contains("1062") && run.log().contains("is dirty"), "{}", run.log());
    assert_eq!(db.history(1), "started 1 1", "marked started (ddlStarted) before its DDL, left so");
    assert_eq!(db.value("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA='app' AND TABLE_NAME='orders' AND COLUMN_NAME='c'"), "1");

    // The rerun refuses, and never re-issues the ALTER.
    revs.add(2, "later", "UPDATE orders SET v = v + 1;");
    let mut again = Run::apply(&revs, &db.url, &[]);
    assert_eq!(again.wait(T).await, exit::REFUSED, "{}", again.log());
    let log = again.log();
    assert!(log.contains("V1") && log.contains("dirty") && log.contains("resolve 1 --applied"), "{log}");
    assert_eq!(again.count("revision V1 starting"), 0, "{log}");
    assert_eq!(db.history(2), "");

    // A person checks the schema, fixes the data by hand, and resolves.
    let mut resolve = Run::start(&revs, &["resolve", "V1", "--applied", "--database-url", &db.url], &[]);
    assert_eq!(resolve.wait(T).await, 0, "{}", resolve.log());
    let mut status =
        Run::start(&revs, &["status", "--dir", revs.dir.to_str().unwrap(), "--database-url", &db.url], &[]);
    assert_eq!(status.wait(T).await, 0, "{}", status.log());
    assert!(status.log().lines().any(|l| l.starts_with("V2") && l.contains("pending")), "{}", status.log());
    let mut last = Run::apply(&revs, &db.url, &[]);
    assert_eq!(last.wait(T).await, 0, "{}", last.log());
    assert_eq!(db.history(1), "applied 1 1");
    assert_eq!(db.history(2), "applied 0 1");
    // Resolving what is not dirty is refused.
    let mut twice = Run::start(&revs, &["resolve", "1", "--rolled-back", "--database-url", &db.url], &[]);
    assert_eq!(twice.wait(T).await, exit::REFUSED, "{}", twice.log());
}

#[tokio::test]
async fn kill_9_mid_dml_leaves_no_trace_and_the_rerun_applies_it_once() {
    let pair = SitePair::start("mg-kill9");
    let db = AppDb::create(&pair, false);
    let revs = Revisions::new("mg-kill9");
    revs.add(
        1,
        "rows",
        "INSERT INTO orders (id, v) VALUES (10, 10);\nSELECT SLEEP(4);\nINSERT INTO orders (id, v) VALUES (11, 11);",
    );
    let mut run = Run::apply(&revs, &db.url, &[]);
    let id = db.wait_running("migrator", "SLEEP", T).await;
    run.kill9().await;
    // The server notices the closed connection and rolls the transaction back.
    db.wait_session_gone(id, T).await;
    assert_eq!(db.value("SELECT COUNT(*) FROM app.orders WHERE id >= 10"), "0", "no half revision");
    assert_eq!(db.history(1), "", "no history row, so nothing dirty");
    let mut rerun = Run::apply(&revs, &db.url, &[]);
    assert_eq!(rerun.wait(T).await, 0, "{}", rerun.log());
    assert_eq!(db.value("SELECT GROUP_CONCAT(id ORDER BY id) FROM app.orders WHERE id >= 10"), "10,11");
    assert_eq!(db.history(1), "applied 0 1");
}

/// A statement that computes without reading or writing its socket (an
/// `ALTER TABLE` copying rows; here `BENCHMARK`, which, like it, checks only
/// the session's killed flag) does not notice its client go: without the
/// runner's `KILL CONNECTION` it ran on for its whole length after the fence.
#[tokio::test]
async fn a_fence_signal_ends_the_statement_in_flight_on_the_server() {
    let pair = SitePair::start("mg-fence");
    let db = AppDb::create(&pair, false);
    // The premise, on this server: a client that goes away mid-statement
    // leaves the statement running.
    let mut gone = db.app().await;
    let task = tokio::spawn(async move {
        let _ = mysql_async::prelude::Queryable::query_drop(
            &mut gone,
            "SELECT BENCHMARK(2000000000, SHA2('premise', 256))",
        )
        .await;
    });
    let orphan = db.wait_running("appuser", "premise", T).await;
    task.abort();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let listed =
        format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {orphan} AND INFO IS NOT NULL");
    assert_eq!(db.value(&listed), "1", "the premise: a statement outlives its client");
    db.value(&format!("KILL {orphan}"));
    let revs = Revisions::new("mg-fence");
    revs.add(
        1,
        "rows",
        "INSERT INTO orders (id, v) VALUES (10, 10);\nSELECT BENCHMARK(2000000000, SHA2('fence', 256));\nINSERT INTO orders (id, v) VALUES (11, 11);",
    );
    let mut run = Run::apply(&revs, &db.url, &[]);
    let id = db.wait_running("migrator", "BENCHMARK", T).await;
    run.terminate();
    assert_eq!(run.wait(Duration::from_secs(10)).await, exit::FENCED, "{}", run.log());
    assert_eq!(run.count("ended the session on the server"), 1, "{}", run.log());
    // KILL has returned by then: the session is gone or marked killed and rolling back.
    db.wait_session_gone(id, Duration::from_secs(10)).await;
    assert_eq!(db.value("SELECT COUNT(*) FROM app.orders WHERE id >= 10"), "0", "rolled back");
    assert_eq!(db.history(1), "", "a DML revision leaves no history row");
}

#[tokio::test]
async fn the_connection_killed_mid_revision_is_not_reconnected() {
    let pair = SitePair::start("mg-conn");
    let db = AppDb::create(&pair, false);
    let revs = Revisions::new("mg-conn");
    revs.add(
        1,
        "rows",
        "INSERT INTO orders (id, v) VALUES (10, 10);\nSELECT SLEEP(30);\nINSERT INTO orders (id, v) VALUES (11, 11);",
    );
    revs.add(2, "after", "INSERT INTO orders (id, v) VALUES (12, 12);");
    let mut run = Run::apply(&revs, &db.url, &["--retry-min-seconds", "1", "--retry-max-seconds", "1"]);
    let id = db.wait_running("migrator", "SLEEP", T).await;
    pair.sql("iad", &format!("KILL CONNECTION {id}"));
    // Ends well before the SLEEP would have, without a second session or attempt.
    assert_eq!(run.wait(Duration::from_secs(20)).await, exit::CONNECTION_LOST, "{}", run.log());
    let log = run.log();
    assert!(log.contains("connection was lost") && log.contains("not reconnected"), "{log}");
    assert_eq!(run.count("session open"), 1, "{log}");
    assert_eq!(run.count("retrying in"), 0, "{log}");
    assert_eq!(run.count("revision V2 starting"), 0, "{log}");
    assert_eq!(db.value("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'migrator'"), "0");
    assert_eq!(db.value("SELECT COUNT(*) FROM app.orders WHERE id >= 10"), "0");
    assert_eq!(db.history(1), "");
}

#[tokio::test]
async fn an_injected_job_without_a_live_sidecar_never_touches_the_database_and_a_person_runs_alone() {
    let pair = SitePair::start("mg-guard");
    let db = AppDb::create(&pair, false);
    let revs = Revisions::new("mg-guard");
    revs.add(1, "rows", "INSERT INTO orders (id, v) VALUES (10, 10);");
    let socket = revs.dir.join("sidecar.sock");
    let dir = revs.dir.to_str().unwrap().to_owned();
    let args = ["apply", "--dir", dir.as_str(), "--database-url", db.url.as_str()];
    let mut guarded = Run::start(&revs, &args, &[("BLOODRAVEN_SOCKET", socket.to_str().unwrap())]);
    assert_eq!(guarded.wait(T).await, exit::FENCED, "{}", guarded.log());
    assert!(guarded.log().contains("refusing to touch the database"), "{}", guarded.log());
    assert_eq!(db.value("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA='app' AND TABLE_NAME='bloodraven_schema_history'"), "0");

    let mut alone = Run::apply(&revs, &db.url, &[]);
    assert_eq!(alone.wait(T).await, 0, "{}", alone.log());
    let first = alone.log().lines().next().unwrap_or_default().to_owned();
    assert!(first.contains("starting alone"), "the first log line says so: {first}");
    assert!(!alone.log().contains("migrator-e2e-pw"), "the password is never logged");
    assert_eq!(db.history(1), "applied 0 1");
}
