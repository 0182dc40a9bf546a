//! Primary reassertion on a real pair (kept here as the first
//! safety path): a replica restarted without `read_only`
//! in its configuration comes back writable; the operator makes it
//! read-only again and ends its client sessions, with an Event, because the
//! decision says which site is active. And the accounts that can write
//! through the fence: reported on MariaDB (`READ_ONLY ADMIN`), none on
//! MySQL (`super_read_only` stops every account).
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::time::{Duration, Instant};

use bloodraven_e2e::fixtures::{Scenario, is_ready_at, wait_event, wait_events, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::sites::Flavor;
use bloodraven_e2e::wait::wait_for;
use mysql_async::prelude::Queryable as _;
use serde_json::json;

const T: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_replica_restarted_writable_is_made_read_only_again() {
    let sc = Scenario::start("reassert", 1, LeaderTimings::default()).await;
    let name = sc.bootstrapped_group("g").await;

    // The replica's server restarts without read_only: it is writable.
    sc.pair.stop("pdx");
    sc.pair.restart("pdx", false);
    let note = wait_event(&sc.cluster, &name, "PrimaryReasserted").await;
    assert!(note.contains("pdx") && note.contains("iad is the decided active site"), "{note}");
    sc.pair.wait_read_only("pdx", true, T).await;
    wait_status(&sc.cluster, &name, "Ready at iad, generation 1", T, |s| is_ready_at(s, "iad", 1)).await;

    // Client sessions on it, connected while it is read-only: an
    // application account that `read_only` alone would not stop (MariaDB
    // READ_ONLY ADMIN; MySQL CONNECTION_ADMIN), and root. Then someone
    // makes the site writable.
    let privilege = match sc.pair.flavor {
        Flavor::MariaDb => "READ_ONLY ADMIN",
        Flavor::MySql => "CONNECTION_ADMIN",
    };
    // Made on the primary, and replicated.
    sc.pair.sql(
        "iad",
        &format!(
            "CREATE USER 'app'@'127.0.0.1' IDENTIFIED BY 'app-pw'; GRANT SELECT ON *.* TO 'app'@'127.0.0.1'; \
             GRANT {privilege} ON *.* TO 'app'@'127.0.0.1'"
        ),
    );
    wait_for("the app account on pdx", T, || async {
        let n = sc.pair.sql("pdx", "SELECT COUNT(*) FROM mysql.user WHERE User = 'app'");
        if n.trim() == "1" { Ok(()) } else { Err("not replicated yet".to_owned()) }
    })
    .await;
    let url = format!("mysql://app:app-pw@127.0.0.1:{}/mysql", sc.pair.port("pdx"));
    let opts = mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(&url).unwrap()).prefer_socket(false);
    let mut app = mysql_async::Conn::new(opts).await.unwrap();
    let app_session = tokio::spawn(async move { app.query_drop("SELECT SLEEP(300)").await });
    let root_session = sc
        .pair
        .sql_command("pdx", "SELECT SLEEP(301)")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let root_session = std::sync::Mutex::new(root_session);
    wait_for("both sessions to be connected", T, || async {
        let n = sc
            .pair
            .sql("pdx", "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT SLEEP(30%'");
        if n.trim() == "2" { Ok(()) } else { Err(format!("{} of 2", n.trim())) }
    })
    .await;
    sc.pair.sql("pdx", "SET GLOBAL read_only=0");
    let ended = tokio::time::timeout(T, app_session).await.expect("the app session on the fenced site is ended");
    assert!(ended.unwrap().is_err(), "the app session's statement was cut off");
    match sc.pair.flavor {
        // Root holds READ_ONLY ADMIN: its session is ended like any other.
        Flavor::MariaDb => {
            wait_for("the root session on the fenced site to be ended", T, || {
                let done = root_session.lock().unwrap().try_wait();
                async move {
                    match done {
                        Ok(Some(_)) => Ok(()),
                        other => Err(format!("still running: {other:?}")),
                    }
                }
            })
            .await;
        }
        // Root holds SYSTEM_USER, whose sessions the operator's account may
        // not end (1095): super_read_only stops its writes, and the Event says so.
        Flavor::MySql => {
            wait_events(
                &sc.cluster,
                &name,
                "PrimaryReasserted",
                &[&["ended 1 client session(s); 1 session(s) of SYSTEM_USER accounts could not be ended"]],
            )
            .await;
            assert!(root_session.lock().unwrap().try_wait().unwrap().is_none(), "root's session is left");
            assert_eq!(sc.pair.sql("pdx", "SELECT @@super_read_only").trim(), "1");
        }
    }
    assert_eq!(sc.pair.sql("pdx", "SELECT @@read_only").trim(), "1");
    let _ = root_session.lock().unwrap().kill();
    sc.cluster.delete_group(&name).await;
}

/// A fence is two steps: `read_only`, then ending the client sessions.
/// When the second fails (here the operator's account may not see the
/// other sessions on the site: `PROCESS` revoked), the site answers
/// read-only from then on, and an account with `READ_ONLY ADMIN` writes
/// through it. Reassertion owes that site a sweep, tries it on every
/// probe, and ends the session once it can. MariaDB only: on MySQL
/// `super_read_only` stops every account's writes whatever the sweep does.
#[tokio::test]
async fn a_fence_that_could_not_end_the_sessions_ends_them_once_it_can() {
    if Flavor::of_run() != Flavor::MariaDb {
        eprintln!("MariaDB only: super_read_only stops every MySQL account's writes");
        return;
    }
    let sc = Scenario::start("reassert-sweep", 1, LeaderTimings::default()).await;
    let name = sc.bootstrapped_group("g").await;
    sc.pair.sql(
        "iad",
        "CREATE DATABASE sweep_t; CREATE TABLE sweep_t.w (i INT PRIMARY KEY); \
         CREATE USER 'app'@'127.0.0.1' IDENTIFIED BY 'app-pw'; \
         GRANT INSERT, SELECT ON sweep_t.* TO 'app'@'127.0.0.1'; GRANT READ_ONLY ADMIN ON *.* TO 'app'@'127.0.0.1'",
    );
    wait_for("the app account on pdx", T, || async {
        let n = sc.pair.sql("pdx", "SELECT COUNT(*) FROM mysql.user WHERE User = 'app'");
        if n.trim() == "1" { Ok(()) } else { Err("not replicated yet".to_owned()) }
    })
    .await;
    let accounts = "'bloodraven'@'127.0.0.1', 'bloodraven'@'localhost', 'bloodraven'@'10.%'";
    sc.pair.sql("pdx", &format!("SET sql_log_bin=0; REVOKE PROCESS ON *.* FROM {accounts}"));
    let url = format!("mysql://app:app-pw@127.0.0.1:{}/sweep_t", sc.pair.port("pdx"));
    let opts = mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(&url).unwrap()).prefer_socket(false);
    let mut app = mysql_async::Conn::new(opts).await.unwrap();

    // Someone makes the standby writable: the fence's read_only lands, and
    // its sweep fails (1227).
    sc.pair.sql("pdx", "SET GLOBAL read_only=0");
    sc.pair.wait_read_only("pdx", true, T).await;
    // The session it could not end writes through read_only.
    app.query_drop("INSERT INTO w VALUES (1)").await.unwrap();
    let writes_on = sc.pair.sql("pdx", "SELECT COUNT(*) FROM sweep_t.w");
    assert_eq!(writes_on.trim(), "1", "the unended session wrote through read_only");

    // The operator may see the sessions again: the sweep it owes ends them.
    sc.pair.sql("pdx", &format!("SET sql_log_bin=0; GRANT PROCESS ON *.* TO {accounts}"));
    let note = wait_events(
        &sc.cluster,
        &name,
        "PrimaryReasserted",
        &[&["its sessions not yet ended", "fenced it in full and ended 1 client session(s)"]],
    )
    .await;
    eprintln!("{note:?}");
    let ended = app.query_drop("INSERT INTO w VALUES (2)").await;
    assert!(ended.is_err(), "the app session on the fenced site was ended");
    assert_eq!(sc.pair.sql("pdx", "SELECT COUNT(*) FROM sweep_t.w").trim(), "1");
    assert_eq!(sc.pair.sql("pdx", "SELECT @@read_only").trim(), "1");
    sc.cluster.delete_group(&name).await;
}

/// Found by the nemesis (seeds 7 and 8, semi-sync on): the primary was
/// paused, failed away from, and answered again, writable, its commits
/// waiting for a semi-sync acknowledgement nobody sends any more (its
/// standby was promoted). `SET GLOBAL read_only` waited for those commits
/// until `lock_wait_timeout` on every probe, and the site stayed writable
/// until the semi-sync timeout would have let them go, as acknowledged.
/// The fence ends their sessions; on MySQL, whose lossless semi-sync keeps
/// an ended session's commit waiting, it also switches the site's primary
/// side of semi-sync off. The client never sees its write acknowledged.
///
/// And the nemesis' deposed primary: paused past the servers' own timeout
/// (10 s by default), a primary fell back to asynchronous replication as
/// soon as it ran again and acknowledged writes until its fence. The
/// operator sets the timeout to its maximum and falls back itself, on the
/// decided primary only: here iad stays paused past 10 s, and nothing it
/// takes after is acknowledged.
#[tokio::test]
async fn a_returning_primary_whose_commits_wait_for_a_semi_sync_acknowledgement_is_fenced_all_the_same() {
    let sc = Scenario::start("fence-semisync", 1, LeaderTimings::default()).await;
    let name = sc.semi_sync_group("g", json!({})).await;
    // An application account, which the operator may end the sessions of.
    let (opts, mut w) = sc.writer_account("iad", "fence_t").await;
    w.query_drop("INSERT INTO w VALUES (1)").await.unwrap();
    // Another client's transaction, open with a row changed: its COMMIT
    // needs no global read lock, so it can reach the semi-sync wait while
    // the fence's read_only waits; it must not be acknowledged either.
    let mut t = mysql_async::Conn::new(opts).await.unwrap();
    t.query_drop("BEGIN").await.unwrap();
    t.query_drop("INSERT INTO w VALUES (3)").await.unwrap();
    // The primary stops answering; pdx is promoted. A write sent meanwhile
    // is read when iad answers again, and its commit waits.
    sc.pair.signal("iad", "STOP");
    let paused = Instant::now();
    wait_status(&sc.cluster, &name, "failed over to pdx", T, |s| {
        match (s.active_site.as_deref(), s.topology_generation) {
            (Some("pdx"), Some(2)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // Promoted: pdx replicates from iad no more (a write iad took before
    // that was acknowledged by pdx, and is on it).
    sc.pair.wait_read_only("pdx", false, T).await;
    let write = tokio::spawn(async move { w.query_drop("INSERT INTO w VALUES (2)").await });
    // Past the servers' default timeout, which would have acknowledged
    // the waiting commits as soon as iad ran again.
    tokio::time::sleep(Duration::from_secs(12).saturating_sub(paused.elapsed())).await;
    sc.pair.signal("iad", "CONT");
    // Sent about when the fence ends the sessions (a second after it
    // starts): before, the COMMIT waits like the write and is ended; after,
    // its session is gone. Either way it must fail; the delay only aims at
    // the window between the two, where a release could acknowledge it.
    let commit = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1200)).await;
        t.query_drop("COMMIT").await
    });
    let note = wait_event(&sc.cluster, &name, "PrimaryReasserted").await;
    assert!(note.contains("site iad") && note.contains("pdx is the decided active site"), "{note}");
    // Well before the semi-sync timeout.
    sc.pair.wait_read_only("iad", true, Duration::from_secs(30)).await;
    let ended = tokio::time::timeout(Duration::from_secs(30), write).await.expect("the waiting write was ended");
    assert!(ended.unwrap().is_err(), "the waiting write is never acknowledged");
    let committed = tokio::time::timeout(Duration::from_secs(30), commit).await.expect("the COMMIT answered");
    assert!(committed.unwrap().is_err(), "the open transaction's COMMIT is never acknowledged");
    // Usually the write reached its commit, which finished unacknowledged
    // once its session was ended: an errant transaction of the old
    // primary's. When the fence's read_only came first (the probe reached
    // the resumed server before the write did), the write waited behind it
    // and was rolled back. Either way its client saw an error, above.
    let reached = sc.pair.sql("iad", "SELECT COUNT(*) FROM fence_t.w WHERE i = 2");
    eprintln!("{note}; the write reached its commit: {}", reached.trim() == "1");
    // The write acknowledged before the pause is on the new primary.
    assert_eq!(sc.pair.sql("pdx", "SELECT COUNT(*) FROM fence_t.w WHERE i = 1").trim(), "1");
    sc.cluster.delete_group(&name).await;
}

/// The deposed primary's window, with semi-sync on: a commit already
/// waiting for its acknowledgement when the primary was paused (the link
/// to its standby lost its packets first) waited past the servers' own
/// timeout, 10 s by default, while the standby was promoted. With that timeout the server
/// acknowledged it as soon as it ran again, though the new primary never
/// received it. The operator sets the timeout to its maximum and falls
/// back only on the decided primary: the commit waits until the fence ends
/// its session, and its client sees an error.
#[tokio::test]
async fn a_commit_waiting_when_its_primary_was_paused_is_never_acknowledged_after_the_failover() {
    let sc = Scenario::start("fence-waiting", 1, LeaderTimings::default()).await;
    // The waiting commit is in iad's binary log and not on pdx: the
    // promotion abandons it, within the bound.
    let name = sc.semi_sync_group("g", json!({"maxAbandonedTransactions": 5})).await;
    let (_, _, primary_status, _) = sc.pair.flavor.semi_sync_names();
    let (_, mut w) = sc.writer_account("iad", "fence_w").await;
    w.query_drop("INSERT INTO w VALUES (1)").await.unwrap();

    // The standby's link loses its packets (a paused standby would still
    // find the commit in its socket's buffer, and acknowledge it); a
    // commit on iad waits for its acknowledgement; then iad stops.
    let block = sc.pair.block_replication("pdx");
    let write = tokio::spawn(async move { w.query_drop("INSERT INTO w VALUES (2)").await });
    let waiting = primary_status.replace("status", "wait_sessions");
    wait_for("the commit to wait on iad", T, || async {
        let v = sc.pair.sql("iad", &format!("SHOW GLOBAL STATUS LIKE '{waiting}'"));
        if v.split_whitespace().nth(1) == Some("1") { Ok(()) } else { Err(v) }
    })
    .await;
    let waited = Instant::now();
    sc.pair.signal("iad", "STOP");
    let s = wait_status(&sc.cluster, &name, "failed over to pdx", T, |s| {
        match (s.active_site.as_deref(), s.topology_generation) {
            (Some("pdx"), Some(2)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let abandoned = s.emergency_failover.as_ref().map(|e| e.abandoned_transactions);
    // Past the servers' default timeout, counted from the commit's wait.
    tokio::time::sleep(Duration::from_secs(12).saturating_sub(waited.elapsed())).await;
    sc.pair.signal("iad", "CONT");
    let ended = tokio::time::timeout(Duration::from_secs(30), write).await.expect("the waiting write was ended");
    assert!(ended.unwrap().is_err(), "the commit waiting when iad was paused was acknowledged after the failover");
    sc.pair.wait_read_only("iad", true, Duration::from_secs(30)).await;
    assert_eq!(sc.pair.sql("pdx", "SELECT COUNT(*) FROM fence_w.w WHERE i = 2").trim(), "0", "the standby had it");
    assert_eq!(sc.pair.sql("pdx", "SELECT COUNT(*) FROM fence_w.w WHERE i = 1").trim(), "1");
    drop(block);
    eprintln!(
        "the commit waiting at the pause was ended unacknowledged; the promotion abandoned {abandoned:?} transactions"
    );
    sc.cluster.delete_group(&name).await;
}

/// On MySQL the fence is `super_read_only`, which stops every account:
/// the condition is False and says so, even with an account holding
/// `SUPER`-era privileges (CONNECTION_ADMIN) that `read_only` alone lets write.
/// Found by the nemesis (seed 1 on MySQL): the paused primary was failed
/// away from, the new primary was killed and restarted read-only, and the
/// old one answered again, writable. Reassertion fenced only while the
/// decided site was writable, so the old primary took writes for the rest
/// of the run; they were not on the new primary. After a failover a
/// returning primary is fenced on first sight, whatever the decided site
/// shows.
#[tokio::test]
async fn a_returning_primary_is_fenced_while_the_new_primary_is_read_only() {
    let sc = Scenario::start("returning", 1, LeaderTimings::default()).await;
    let name = sc.quick_group("g").await;
    sc.pair.signal("iad", "STOP");
    wait_status(&sc.cluster, &name, "failed over to pdx", T, |s| {
        match (s.active_site.as_deref(), s.topology_generation) {
            (Some("pdx"), Some(2)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    sc.pair.wait_read_only("pdx", false, T).await;
    // The new primary dies and comes back read-only (the configuration
    // the runbook asks for); then the old one answers again, writable.
    sc.pair.kill9("pdx");
    sc.pair.restart("pdx", true);
    sc.pair.signal("iad", "CONT");
    let note = wait_event(&sc.cluster, &name, "PrimaryReasserted").await;
    assert!(note.contains("site iad") && note.contains("pdx is the decided active site"), "{note}");
    sc.pair.wait_read_only("iad", true, T).await;
    // Nothing is writable now: the group says so, and a person makes pdx
    // writable (runbook, NoPrimary); the decision stays.
    let s = wait_status(&sc.cluster, &name, "NoPrimary", T, |s| {
        bloodraven_e2e::fixtures::has_condition(s, "NoPrimary", "True", Some("NoWritableSite"))
    })
    .await;
    assert_eq!((s.active_site.as_deref(), s.topology_generation), (Some("pdx"), Some(2)));
    assert_eq!(sc.pair.sql("iad", "SELECT @@read_only").trim(), "1");
    sc.cluster.delete_group(&name).await;
}

#[tokio::test]
async fn on_mysql_no_account_writes_through_the_fence() {
    use bloodraven_e2e::fixtures::{completed, has_condition};
    if Flavor::of_run() != Flavor::MySql {
        eprintln!("MySQL only: the MariaDB counterpart is the test below");
        return;
    }
    let sc = Scenario::start("bypass-my", 1, LeaderTimings::default()).await;
    let name = sc.bootstrapped_group("g").await;
    sc.pair.sql(
        "iad",
        "CREATE USER 'app'@'%' IDENTIFIED BY 'app-pw'; GRANT CONNECTION_ADMIN, SYSTEM_VARIABLES_ADMIN ON *.* TO 'app'@'%'",
    );
    let t = "ReadOnlyBypassAccounts";
    let s =
        wait_status(&sc.cluster, &name, "bypass false", T, |s| has_condition(s, t, "False", Some("AsExpected"))).await;
    let message = &bloodraven_e2e::fixtures::condition(&s, t).unwrap().message;
    assert!(message.contains("super_read_only, which stops every account"), "{message}");
    // And a planned failover's fence leaves the account unable to write on the old primary.
    sc.request_failover(&name, "pdx", "r1").await;
    wait_status(&sc.cluster, &name, "planned failover to pdx", T, |s| completed(s, "r1", "pdx", 2)).await;
    let url = format!("mysql://app:app-pw@127.0.0.1:{}", sc.pair.port("iad"));
    let opts = mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(&url).unwrap()).prefer_socket(false);
    let mut app = mysql_async::Conn::new(opts).await.unwrap();
    let err = app.query_drop("CREATE DATABASE written_through_the_fence").await.unwrap_err();
    assert!(err.to_string().contains("1290") || err.to_string().contains("super-read-only"), "{err}");
    sc.cluster.delete_group(&name).await;
}

/// Accounts other than the operator's that can write through `read_only`
/// (MariaDB `READ_ONLY ADMIN`) get the `ReadOnlyBypassAccounts` condition
/// and an Event at the fence: those that hold it themselves, through a role
/// (of a role, not a default one: `SET ROLE` is enough) or through PUBLIC,
/// and an account of the operator's user name at another host, which
/// someone else may have made with their own password. With the default
/// grants the operator sees its own privileges only, and the condition says
/// so (Unknown) instead of claiming there are none. MariaDB only: MySQL
/// has no such account (the test above).
#[tokio::test]
async fn accounts_that_write_through_read_only_get_a_condition() {
    use bloodraven_e2e::fixtures::{completed, has_condition};
    if Flavor::of_run() != Flavor::MariaDb {
        eprintln!("MariaDB only: MySQL's counterpart is the test above");
        return;
    }
    let sc = Scenario::start("bypass", 1, LeaderTimings::default()).await;
    let name = sc.bootstrapped_group("g").await;
    let t = "ReadOnlyBypassAccounts";
    let s = wait_status(&sc.cluster, &name, "bypass unknown: grants not visible", T, |s| {
        has_condition(s, t, "Unknown", Some("GrantsNotVisible"))
    })
    .await;
    let message = &bloodraven_e2e::fixtures::condition(&s, t).unwrap().message;
    assert!(message.contains("SELECT ON mysql.*"), "{message}");

    // An application account with READ_ONLY ADMIN, a migration account that
    // gets it through a role granted to a role it may SET, an impostor of
    // the operator's account, and the operator allowed to see every
    // account's privileges; not replicated (each site's own).
    for site in ["iad", "pdx"] {
        sc.pair.sql(
            site,
            "SET sql_log_bin=0; CREATE USER 'app'@'%' IDENTIFIED BY 'app-pw'; \
             GRANT READ_ONLY ADMIN ON *.* TO 'app'@'%'; \
             CREATE ROLE rw_admin; GRANT READ_ONLY ADMIN ON *.* TO rw_admin; \
             CREATE ROLE deployer; GRANT rw_admin TO deployer; \
             CREATE USER 'migrator'@'%' IDENTIFIED BY 'migrator-pw'; GRANT deployer TO 'migrator'@'%'; \
             CREATE USER 'bloodraven'@'%' IDENTIFIED BY 'impostor-pw'; \
             GRANT READ_ONLY ADMIN ON *.* TO 'bloodraven'@'%'; \
             GRANT SELECT ON mysql.* TO 'bloodraven'@'127.0.0.1', 'bloodraven'@'localhost'",
        );
    }
    let named = |message: &str, site: &str| {
        for account in ["'app'@'%'", "'migrator'@'%' through role 'deployer'", "'bloodraven'@'%'"] {
            assert!(message.contains(account), "{site}: {account} is not named: {message}");
        }
        // The operator's own account (it connects over 127.0.0.1), and no
        // other: its namesakes at other hosts are other accounts.
        assert!(!message.contains("'bloodraven'@'127.0.0.1'"), "{message}");
        assert!(message.contains("'bloodraven'@'localhost'"), "{message}");
    };
    // The fence of a planned failover checks the old primary afresh.
    sc.request_failover(&name, "pdx", "r1").await;
    let note = wait_event(&sc.cluster, &name, "ReadOnlyAdminAccounts").await;
    assert!(note.contains("on site iad, 'app'@'%'"), "{note}");
    named(&note, "iad");
    wait_status(&sc.cluster, &name, "planned failover to pdx", T, |s| completed(s, "r1", "pdx", 2)).await;
    let s = wait_status(&sc.cluster, &name, "bypass true", T, |s| {
        has_condition(s, t, "True", Some("ReadOnlyAdminAccounts"))
    })
    .await;
    let message = &bloodraven_e2e::fixtures::condition(&s, t).unwrap().message;
    assert!(message.contains("on site iad, 'app'@'%'"), "{message}");
    named(message, "iad");

    // PUBLIC holding it on iad (the replica now): every account can write
    // there. A group created now checks both sites on first sight.
    sc.pair.sql("iad", "SET sql_log_bin=0; GRANT READ_ONLY ADMIN ON *.* TO PUBLIC");
    let other = sc.group("h", "pdx").await;
    wait_status(&sc.cluster, &other, "bootstrap at pdx", T, |s| is_ready_at(s, "pdx", 1)).await;
    let s = wait_status(&sc.cluster, &other, "bypass true on both sites", T, |s| {
        has_condition(s, t, "True", Some("ReadOnlyAdminAccounts"))?;
        let message = &bloodraven_e2e::fixtures::condition(s, t).unwrap().message;
        if message.contains("on site iad") && message.contains("on site pdx") {
            Ok(())
        } else {
            Err(format!("not both sites yet: {message}"))
        }
    })
    .await;
    sc.pair.sql("iad", "SET sql_log_bin=0; REVOKE READ_ONLY ADMIN ON *.* FROM PUBLIC");
    let message = &bloodraven_e2e::fixtures::condition(&s, t).unwrap().message;
    assert!(message.contains("on site iad, PUBLIC (every account), 'app'@'%'"), "{message}");
    assert!(message.contains("on site pdx, 'app'@'%'"), "{message}");
    assert_eq!(message.matches("PUBLIC (every account)").count(), 1, "PUBLIC on iad only: {message}");
    for site in message.split("; ").filter(|part| part.starts_with("on site ")) {
        named(site, site);
    }
    sc.cluster.delete_group(&other).await;
    sc.cluster.delete_group(&name).await;
}
