//! What is retried and what is not, on a real pair:
//! an injected deadlock (1213) is retried from the revision's first
//! statement and each update lands exactly once; the server's statement
//! timeout (MariaDB `max_statement_time`, 1969; MySQL
//! `max_execution_time`, 3024) fails on the first attempt; a fenced,
//! read-only site (1290) fails at once.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test

use std::time::Duration;

use bloodraven_e2e::SitePair;
use bloodraven_e2e::migrate::{AppDb, Revisions, Run, exec, exit};
use bloodraven_e2e::sites::Flavor;

const T: Duration = Duration::from_secs(120);

#[tokio::test]
async fn an_injected_deadlock_is_retried_from_the_first_statement_and_each_update_lands_once() {
    let pair = SitePair::start("mg-deadlock");
    let db = AppDb::create(&pair, false);
    // A heavier transaction on the application's side, so InnoDB picks the runner as the victim.
    // 200 rows from a recursive CTE (both flavors have them; MariaDB's
    // sequence engine MySQL has not).
    pair.sql(
        "iad",
        "CREATE TABLE app.ballast (id INT PRIMARY KEY, n INT) ENGINE=InnoDB; \
         INSERT INTO app.ballast SELECT n, 0 FROM \
         (WITH RECURSIVE s (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 200) SELECT n FROM s) AS rows200",
    );
    let revs = Revisions::new("mg-deadlock");
    revs.add(
        1,
        "bump_both",
        "UPDATE orders SET v = v + 10 WHERE id = 1;\nSELECT SLEEP(4);\nUPDATE orders SET v = v + 10 WHERE id = 2;",
    );
    let mut run = Run::apply(&revs, &db.url, &["--retry-min-seconds", "1", "--retry-max-seconds", "1"]);
    // The runner holds row 1 and sleeps (4 s: time for the application to go first on a busy machine);
    // the application takes row 2, then asks for row 1.
    db.wait_running("migrator", "SLEEP", T).await;
    let mut app = db.app().await;
    exec(&mut app, "BEGIN").await;
    exec(&mut app, "UPDATE ballast SET n = n + 1").await;
    exec(&mut app, "UPDATE orders SET w = w + 1 WHERE id = 2").await;
    let waiter = tokio::spawn(async move {
        exec(&mut app, "UPDATE orders SET w = w + 1 WHERE id = 1").await;
        exec(&mut app, "COMMIT").await;
    });
    // The runner wakes, asks for row 2: deadlock; it is the victim, rolled back, and retried.
    assert_eq!(run.wait(T).await, 0, "{}", run.log());
    waiter.await.unwrap();
    let log = run.log();
    let retry = log.lines().find(|l| l.contains("retrying in")).unwrap_or_else(|| panic!("no retry:\n{log}"));
    assert!(retry.contains("1213"), "{retry}");
    assert_eq!(run.count("revision V1 starting"), 2, "re-run from its first statement:\n{log}");
    // Each update landed exactly once (the first attempt's row-1 update was rolled back).
    assert_eq!(
        db.value("SELECT GROUP_CONCAT(CONCAT(id, ':', v, ':', w) ORDER BY id) FROM app.orders"),
        "1:11:1,2:12:1"
    );
    assert_eq!(db.history(1), "applied 0 2");
}

#[tokio::test]
async fn a_statement_timeout_is_not_retried() {
    let pair = SitePair::start("mg-stmt-time");
    let db = AppDb::create(&pair, false);
    // The server-wide statement timeout an operator set; the runner leaves
    // it alone. MySQL's bounds read-only SELECTs only, and a SLEEP() that is
    // a query's only work returns 1 instead of failing: the SLEEP sits in a
    // WHERE clause, which both servers end with their timeout error.
    let (set, unset, code) = match pair.flavor {
        Flavor::MariaDb => ("SET GLOBAL max_statement_time = 1", "SET GLOBAL max_statement_time = 0", "1969"),
        Flavor::MySql => ("SET GLOBAL max_execution_time = 1000", "SET GLOBAL max_execution_time = 0", "3024"),
    };
    pair.sql("iad", set);
    let revs = Revisions::new("mg-stmt-time");
    revs.add(1, "slow", "UPDATE orders SET v = v + 1;\nSELECT id FROM orders WHERE SLEEP(3) = 0;");
    let mut run = Run::apply(&revs, &db.url, &["--retry-min-seconds", "1", "--retry-max-seconds", "1"]);
    assert_eq!(run.wait(T).await, exit::FAILED, "{}", run.log());
    let log = run.log();
    assert_eq!(run.count("retrying in"), 0, "{log}");
    assert_eq!(run.count("revision V1 starting"), 1, "{log}");
    assert!(log.contains(code) && log.contains("statement timeout"), "{log}");
    pair.sql("iad", unset);
    assert_eq!(db.value("SELECT GROUP_CONCAT(v ORDER BY id) FROM app.orders"), "1,2", "rolled back whole");
    assert_eq!(db.history(1), "");
}

#[tokio::test]
async fn a_fenced_read_only_site_fails_at_once_with_1290() {
    let pair = SitePair::start("mg-fenced");
    let db = AppDb::create(&pair, false);
    let revs = Revisions::new("mg-fenced");
    revs.add(1, "first", "UPDATE orders SET v = v + 1;");
    let mut first = Run::apply(&revs, &db.url, &[]);
    assert_eq!(first.wait(T).await, 0, "{}", first.log());
    // The site is fenced (as failover fences an old primary); a new revision arrives.
    pair.sql("iad", "SET GLOBAL read_only = 1");
    revs.add(2, "second", "UPDATE orders SET v = v + 1;");
    let mut run = Run::apply(&revs, &db.url, &["--retry-min-seconds", "1", "--retry-max-seconds", "1"]);
    assert_eq!(run.wait(T).await, exit::FENCED, "{}", run.log());
    let log = run.log();
    assert!(log.contains("1290") && log.contains("read-only"), "{log}");
    assert_eq!(run.count("retrying in"), 0, "{log}");
    assert_eq!(run.count("revision V2 starting"), 1, "{log}");
    assert_eq!(db.value("SELECT GROUP_CONCAT(v ORDER BY id) FROM app.orders"), "2,3");
    assert_eq!(db.history(2), "");
}
