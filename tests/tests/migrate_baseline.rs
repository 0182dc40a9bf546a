//! Adopting a schema another tool migrated, on the real server
//! pair: a first `apply` into a schema that holds Flyway's history is
//! refused (it would run Flyway's revisions again) and names the
//! `baseline` to take; `baseline` records one row, refuses a second one, a
//! non-empty history and an empty schema; `apply` then runs only the
//! revisions above it.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test

use std::time::Duration;

use bloodraven_e2e::SitePair;
use bloodraven_e2e::migrate::{AppDb, Revisions, Run, exit};

const T: Duration = Duration::from_secs(120);

/// `bloodraven-migrate ARGS --database-url URL`, waited for: (exit code, log).
async fn run(revs: &Revisions, url: &str, args: &[&str]) -> (i32, String) {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--database-url", url]);
    Run::to_end(revs, &all, T).await
}

#[tokio::test]
async fn a_schema_flyway_migrated_is_refused_then_adopted_with_a_baseline() {
    let pair = SitePair::start("mg-baseline");
    let db = AppDb::create(&pair, false);
    // What Flyway left: its history (V1 and V2 succeeded, V3 failed) and V2's table.
    pair.sql(
        "iad",
        "CREATE TABLE app.flyway_schema_history (installed_rank INT PRIMARY KEY, version VARCHAR(50), \
           description VARCHAR(200) NOT NULL, type VARCHAR(20) NOT NULL, script VARCHAR(1000) NOT NULL, \
           checksum INT, installed_by VARCHAR(100) NOT NULL, installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, \
           execution_time INT NOT NULL, success TINYINT(1) NOT NULL); \
         INSERT INTO app.flyway_schema_history (installed_rank, version, description, type, script, checksum, installed_by, execution_time, success) VALUES \
           (1, '1', 'orders', 'SQL', 'V1__orders.sql', 11, 'ci', 5, 1), \
           (2, '2', 'customers', 'SQL', 'V2__customers.sql', 22, 'ci', 5, 1), \
           (3, '3', 'email', 'SQL', 'V3__email.sql', 33, 'ci', 5, 0); \
         CREATE TABLE app.customers (id INT PRIMARY KEY, name VARCHAR(50)) ENGINE=InnoDB;",
    );
    let revs = Revisions::new("mg-baseline");
    revs.add(
        1,
        "orders",
        "CREATE TABLE orders (id INT PRIMARY KEY, v INT NOT NULL DEFAULT 0, w INT NOT NULL DEFAULT 0);",
    )
    .add(2, "customers", "CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(50));")
    .add(3, "email", "ALTER TABLE customers ADD COLUMN email VARCHAR(100);")
    .add(4, "first_customer", "INSERT INTO customers (id, name, email) VALUES (1, 'ada', 'ada@example.com');");
    let dir = revs.dir.to_str().unwrap().to_owned();

    // A first apply would run V1 and V2 again: refused, naming Flyway's newest successful version.
    let (code, log) = run(&revs, &db.url, &["apply", "--dir", &dir]).await;
    assert_eq!(code, exit::REFUSED, "{log}");
    assert!(log.contains("flyway_schema_history") && log.contains("bloodraven-migrate baseline 2"), "{log}");
    assert!(log.contains("--ignore-foreign-history"), "says how to go on anyway:\n{log}");
    assert_eq!(
        db.value("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'app' AND TABLE_NAME = 'bloodraven_schema_history'"),
        "0",
        "a refused run creates nothing"
    );

    // The baseline: one row, and what it covers.
    let (code, out) = run(&revs, &db.url, &["baseline", "2", "--dir", &dir, "--description", "from flyway"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("covered by the baseline: V1 V2") && out.contains("apply will run: V3 V4"), "{out}");
    assert_eq!(
        db.value(
            "SELECT CONCAT_WS(' ', version, state, description, checksum = '') FROM app.bloodraven_schema_history"
        ),
        "2 baseline from flyway 1"
    );
    let (code, out) = run(&revs, &db.url, &["status", "--dir", &dir]).await;
    assert_eq!(code, 0, "{out}");
    let state = |v: &str| {
        out.lines().find(|l| l.starts_with(&format!("V{v} "))).unwrap_or_else(|| panic!("no V{v}:\n{out}")).to_owned()
    };
    assert!(state("1").contains("baselined") && state("2").contains("baseline"), "{out}");
    assert_eq!(out.lines().filter(|l| l.starts_with("V2 ")).count(), 1, "the baseline's own version once:\n{out}");
    assert!(state("3").contains("pending") && state("4").contains("pending"), "{out}");

    // A second baseline, and resolving the baseline row, are refused and change nothing.
    let (code, out) = run(&revs, &db.url, &["baseline", "3"]).await;
    assert_eq!(code, exit::REFUSED, "{out}");
    assert!(out.contains("already has 1 row"), "{out}");
    let (code, out) = run(&revs, &db.url, &["resolve", "2", "--applied"]).await;
    assert_eq!(code, exit::REFUSED, "{out}");
    assert!(out.contains("not dirty"), "{out}");
    assert_eq!(db.value("SELECT COUNT(*) FROM app.bloodraven_schema_history"), "1");

    // apply runs V3 and V4 only, once.
    let (code, log) = run(&revs, &db.url, &["apply", "--dir", &dir]).await;
    assert_eq!(code, 0, "{log}");
    assert!(!log.contains("revision V1 starting") && !log.contains("revision V2 starting"), "{log}");
    assert_eq!(db.history(3), "applied 1 1");
    assert_eq!(db.history(4), "applied 0 1");
    assert_eq!(db.value("SELECT CONCAT_WS(' ', id, name, email) FROM app.customers"), "1 ada ada@example.com");
    let (code, log) = run(&revs, &db.url, &["apply", "--dir", &dir]).await;
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("pending=0"), "{log}");
}

#[tokio::test]
async fn a_baseline_of_an_empty_schema_is_refused_and_foreign_history_can_be_ignored() {
    let pair = SitePair::start("mg-baseline-empty");
    let db = AppDb::create(&pair, false);
    let host = &pair.iad_host;
    pair.sql(
        "iad",
        &format!(
            "CREATE DATABASE empty_app; GRANT ALL ON empty_app.* TO 'migrator'@'{host}'; \
             CREATE DATABASE goose_app; GRANT ALL ON goose_app.* TO 'migrator'@'{host}'; \
             CREATE TABLE goose_app.goose_db_version (id INT PRIMARY KEY, version_id BIGINT, is_applied TINYINT(1));"
        ),
    );
    let empty_url = db.url.replace("/app", "/empty_app");
    let goose_url = db.url.replace("/app", "/goose_app");
    let revs = Revisions::new("mg-baseline-empty");
    revs.add(1, "t", "CREATE TABLE t (id INT PRIMARY KEY);");
    let dir = revs.dir.to_str().unwrap().to_owned();

    // An empty schema: most likely a wrong URL.
    let (code, out) = run(&revs, &empty_url, &["baseline", "1"]).await;
    assert_eq!(code, exit::REFUSED, "{out}");
    assert!(out.contains("holds no table") && out.contains("--allow-empty-schema"), "{out}");
    assert_eq!(
        db.value("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'empty_app'"),
        "0",
        "a refused baseline creates nothing"
    );
    let (code, out) = run(&revs, &empty_url, &["baseline", "1", "--allow-empty-schema"]).await;
    assert_eq!(code, 0, "{out}");

    // goose's history without a version to suggest: refused with the generic hint; the flag goes on.
    let (code, log) = run(&revs, &goose_url, &["apply", "--dir", &dir]).await;
    assert_eq!(code, exit::REFUSED, "{log}");
    assert!(log.contains("goose_db_version") && log.contains("baseline V"), "{log}");
    let (code, log) = run(&revs, &goose_url, &["apply", "--dir", &dir, "--ignore-foreign-history"]).await;
    assert_eq!(code, 0, "{log}");
    assert_eq!(db.value("SELECT state FROM goose_app.bloodraven_schema_history WHERE version = 1"), "applied");
}
