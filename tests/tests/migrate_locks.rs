//! Lock contention on a real pair: an idle transaction
//! holding a metadata lock makes every attempt of an ALTER fail after the
//! lock timeout (1205) and the run fail after `maxAttempts`, naming the
//! blocker the way `diagnose` does; the blocker committing before attempt
//! N lets attempt N succeed.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test

use std::time::Duration;

use bloodraven_e2e::SitePair;
use bloodraven_e2e::migrate::{AppDb, Revisions, Run, exec, exit};
use mysql_async::prelude::Queryable as _;

const T: Duration = Duration::from_secs(120);

/// 1 s lock waits and 1 s backoffs keep the test short; the behaviour is the defaults'.
const QUICK: &[&str] = &["--lock-timeout", "1", "--retry-min-seconds", "1", "--retry-max-seconds", "1"];

#[tokio::test]
async fn an_idle_transaction_holding_a_metadata_lock_fails_every_attempt_and_the_run_names_it() {
    let pair = SitePair::start("mg-idle");
    let db = AppDb::create(&pair, true);
    let revs = Revisions::new("mg-idle");
    revs.add(1, "add_c", "ALTER TABLE orders ADD COLUMN c INT");

    // The application reads the table and then idles inside its transaction.
    let mut blocker = db.app().await;
    exec(&mut blocker, "BEGIN").await;
    let _: Vec<(i32, i32, i32)> = blocker.query("SELECT id, v, w FROM orders").await.unwrap();
    let blocker_id = blocker.id();

    let mut run = Run::apply(&revs, &db.url, &[QUICK, &["--max-attempts", "3"]].concat());
    assert_eq!(run.wait(T).await, exit::CONTENTION, "{}", run.log());
    let log = run.log();
    // Every attempt lost the race with 1205 and was retried, the last one not.
    assert_eq!(run.count("retrying in 1.0s"), 2, "{log}");
    assert!(log.lines().filter(|l| l.contains("retrying in")).all(|l| l.contains("1205")), "{log}");
    assert!(log.contains("lock contention on all 3 attempts"), "{log}");
    // The pre-flight look saw it before each DDL, with its age; the failure names it as diagnose does.
    assert!(run.count(&format!("possible blocker before DDL: connection {blocker_id} ")) >= 3, "{log}");
    let named = log.lines().any(|l| {
        l.contains("diagnose:")
            && l.contains(&format!("connection {blocker_id} "))
            && l.contains("idle in a transaction")
    });
    assert!(named, "the blocker is named in the failure's diagnosis:\n{log}");
    assert!(
        log.lines().any(|l| l.contains("diagnose:") && l.contains("holds MDL_SHARED_READ on app.orders")),
        "with the lock it holds:\n{log}"
    );
    assert!(log.contains("MDL_SHARED_READ on app.orders"), "{log}");
    // Nothing of the revision happened and nothing is dirty.
    assert_eq!(db.history(1), "", "no row for a revision that never took effect");
    assert_eq!(db.value("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA='app' AND TABLE_NAME='orders' AND COLUMN_NAME='c'"), "0");

    // `diagnose` prints the same, on its own.
    let mut d = Run::start(&revs, &["diagnose", "--database-url", &db.url], &[]);
    assert_eq!(d.wait(T).await, 0, "{}", d.log());
    let out = d.log();
    assert!(out.contains("open transactions (1)") && out.contains(&format!("connection {blocker_id} ")), "{out}");
    assert!(out.contains("idle in a transaction for"), "{out}");
    exec(&mut blocker, "COMMIT").await;
}

#[tokio::test]
async fn the_blocker_committing_before_attempt_n_lets_attempt_n_succeed() {
    let pair = SitePair::start("mg-commit");
    let db = AppDb::create(&pair, false);
    let revs = Revisions::new("mg-commit");
    revs.add(1, "add_c", "ALTER TABLE orders ADD COLUMN c INT NOT NULL DEFAULT 7");

    let mut blocker = db.app().await;
    exec(&mut blocker, "BEGIN").await;
    let _: Vec<(i32, i32, i32)> = blocker.query("SELECT id, v, w FROM orders").await.unwrap();

    let mut run = Run::apply(&revs, &db.url, &[QUICK, &["--max-attempts", "10"]].concat());
    // Two attempts fail while the transaction idles …
    run.wait_lines("retrying in", 2, T).await;
    exec(&mut blocker, "COMMIT").await;
    let failed_before_commit = run.count("retrying in");
    // … and the attempt after the commit succeeds.
    assert_eq!(run.wait(T).await, 0, "{}", run.log());
    let retries = run.count("retrying in");
    assert!(retries >= 2 && retries <= failed_before_commit + 1, "{}", run.log());
    assert_eq!(db.history(1), format!("applied 1 {}", retries + 1), "attempt N = retries + 1 succeeded");
    assert_eq!(db.value("SELECT GROUP_CONCAT(c) FROM app.orders"), "7,7");
    // Without metadata_lock_info the pre-flight still saw the open transaction.
    assert!(run.log().contains("possible blocker before DDL"), "{}", run.log());
}

#[tokio::test]
async fn on_blocker_fail_sends_nothing_and_fails_at_once_naming_the_blocker() {
    let pair = SitePair::start("mg-onfail");
    let db = AppDb::create(&pair, true);
    let revs = Revisions::new("mg-onfail");
    revs.add(1, "add_c", "ALTER TABLE orders ADD COLUMN c INT");
    let mut blocker = db.app().await;
    exec(&mut blocker, "BEGIN").await;
    let _: Vec<(i32, i32, i32)> = blocker.query("SELECT id, v, w FROM orders").await.unwrap();
    let blocker_id = blocker.id();

    let mut run = Run::apply(&revs, &db.url, &[QUICK, &["--on-blocker", "fail"]].concat());
    assert_eq!(run.wait(T).await, exit::CONTENTION, "{}", run.log());
    let log = run.log();
    assert_eq!(run.count("revision V1 starting"), 1, "one attempt only:\n{log}");
    assert_eq!(run.count("retrying in"), 0, "{log}");
    assert!(log.contains("--on-blocker fail: nothing was sent"), "{log}");
    assert!(log.contains(&format!("connection {blocker_id} ")), "{log}");
    // The ALTER was never sent: no session ever waited for the metadata lock.
    assert!(!log.contains("1205"), "{log}");
    assert_eq!(db.history(1), "");
    exec(&mut blocker, "COMMIT").await;
}
