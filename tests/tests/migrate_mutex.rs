//! The migration runner behind the real sidecar and operator: two runners
//! started together, each under `bloodraven-sidecar run`, take the
//! migration mutex in turn and apply each revision exactly once; the
//! second reads the applied set only once it holds the mutex.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test

use std::time::Duration;

use bloodraven_e2e::deploy::scenario;
use bloodraven_e2e::migrate::{AppDb, Revisions, migrate_bin};
use bloodraven_e2e::sidecar::{SidecarRun, leases};

const T: Duration = Duration::from_secs(180);

#[tokio::test]
async fn two_runners_behind_the_mutex_apply_each_revision_once() {
    let d = scenario("mg-mutex").await;
    let db = AppDb::create(&d.sc.pair, false);
    let revs = Revisions::new("mg-mutex");
    revs.add(1, "counter", "CREATE TABLE counter (id INT AUTO_INCREMENT PRIMARY KEY, note VARCHAR(20)) ENGINE=InnoDB;");
    // Long enough that the second runner surely asks while the first holds the mutex.
    revs.add(2, "first_row", "INSERT INTO counter (note) VALUES ('v2');\nSELECT SLEEP(3);");
    revs.add(3, "second_row", "INSERT INTO counter (note) VALUES ('v3');");
    let script = format!(
        "exec {bin} apply --dir {dir} --database-url '{url}' --retry-min-seconds 1 --retry-max-seconds 1",
        bin = migrate_bin().display(),
        dir = revs.dir.display(),
        url = db.url
    );
    let flags = ["--ttl", "15", "--grace", "3", "--request-timeout", "2", "--ddl-boundary", "reported"];
    let mut a = SidecarRun::start(&d.pipeline, &d.tls, "mutex-a", &flags, &script);
    let mut b = SidecarRun::start(&d.pipeline, &d.tls, "mutex-b", &flags, &script);
    let (ca, cb) = (a.wait(T).await, b.wait(T).await);
    assert_eq!((ca, cb), (0, 0), "a:\n{}\nb:\n{}", a.full_log(), b.full_log());

    // Each revision once: two rows, three history rows, each in one attempt.
    assert_eq!(db.value("SELECT GROUP_CONCAT(note ORDER BY id) FROM app.counter"), "v2,v3");
    for v in 1..=3 {
        assert!(db.history(v).starts_with("applied"), "V{v}: {}", db.history(v));
        assert!(db.history(v).ends_with(" 1"), "V{v} in one attempt: {}", db.history(v));
    }
    // One of them waited for the other's mutex, then found nothing pending.
    let (la, lb) = (a.full_log(), b.full_log());
    let a_waited = la.contains("409 held");
    let (waited, applier) = if a_waited { (&la, &b) } else { (&lb, &a) };
    assert!(waited.contains("409 held"), "neither waited:\na:\n{la}\nb:\n{lb}");
    assert!(waited.contains("applied=3 pending=0"), "read the applied set under the mutex:\n{waited}");
    for log in [&la, &lb] {
        assert!(log.contains("starting behind the sidecar"), "{log}");
    }
    // The applier reported the DDL boundary; both records say succeeded and the leases are gone.
    let r = applier.record();
    assert_eq!(r["result"], "succeeded", "{r}");
    assert_eq!(r["revision"], "3", "{r}");
    assert_eq!(if a_waited { a.record() } else { b.record() }["result"], "succeeded");
    assert!(leases(&d.pipeline).await.is_empty());
}
