//! Combined faults on the real node and sites, as a hostile but ordinary
//! user would stack them: each test combines faults the single-fault tests
//! take one at a time.
//!
//! - An errant write on the standby (root, `sql_log_bin=1`, in two GTID
//!   domains), the leader killed with SIGKILL, the primary killed while no
//!   operator runs, a fresh leader, a person's `promote-despite-loss` for
//!   the standby and a planned failover onto it: the errant standby is never
//!   promoted (`RecoveryPending`/`ErrantTransactions`), the generation stays.
//! - A planned failover deferred behind a renewed failover-hold while the
//!   standby's SQL thread is stopped by hand: the revalidated request fails
//!   naming the stopped thread, the primary's death promotes nothing
//!   (`StandbyNotPromotable`, not replicating) across a leader change, and
//!   once the thread runs again the standby is promoted with every row.
//! - A silently stalled standby (its link drops every packet), a renewed
//!   hold with a deferred planned failover, the primary killed after 200 commits
//!   the standby never got, and then a leader change: the first leader says
//!   `StandbyBehind`; the next one must not promote the stale standby
//!   without saying what it abandons.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test
#![allow(clippy::many_single_char_names)] // d the scenario, p its pipeline, m and h the two grants, s a status

use std::time::{Duration, Instant};

use bloodraven_api::v1alpha1::MysqlFailoverGroupStatus;
use bloodraven_e2e::deploy::{Pipeline, scenario, start_operator_with, token_of};
use bloodraven_e2e::fixtures::{Scenario, condition, group_events, has_condition, is_active_at, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::sites::Flavor;
use bloodraven_e2e::{Operator, writer};
use kube::api::{Patch, PatchParams};
use serde_json::json;

const T: Duration = Duration::from_secs(90);
/// Takeovers within a few seconds, with the ordering production keeps.
const TAKEOVER: LeaderTimings = LeaderTimings { lease_duration: 6, renew_deadline: 4, retry_period: 2 };

fn at_phase(s: &MysqlFailoverGroupStatus, id: &str, phase: &str) -> Result<(), String> {
    match &s.planned_failover {
        Some(p) if p.request_id == id && p.phase == phase => Ok(()),
        other => Err(format!("{other:?}")),
    }
}

fn never_drained(s: &MysqlFailoverGroupStatus) -> Result<(), String> {
    match &s.planned_failover {
        Some(p) if p.history.iter().any(|h| matches!(h.phase.as_str(), "Draining" | "Promoting" | "Completed")) => {
            Err(format!("a planned failover ran: {p:?}"))
        }
        _ => Ok(()),
    }
}

/// Every Event about the group, as `reason/action: note` lines.
async fn events_text(cluster: &bloodraven_e2e::Cluster, name: &str) -> String {
    group_events(cluster, name)
        .await
        .iter()
        .map(|e| {
            format!(
                "{}/{}: {}",
                e.reason.as_deref().unwrap_or(""),
                e.action.as_deref().unwrap_or(""),
                e.note.as_deref().unwrap_or("")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// For `window`, every half second: the decision did not move from iad at
/// generation 1, and pdx stayed read-only. Panics with the status and the
/// group's Events otherwise.
async fn nothing_promoted_for(sc: &Scenario, name: &str, window: Duration) -> MysqlFailoverGroupStatus {
    let started = Instant::now();
    loop {
        let s = sc.cluster.groups().get_status(name).await.unwrap().status.unwrap_or_default();
        let ro = sc.pair.sql("pdx", "SELECT @@read_only").trim().to_owned();
        let promoted = is_active_at(&s, "iad", 1).is_err() || ro != "1";
        let events = if promoted { events_text(&sc.cluster, name).await } else { String::new() };
        assert!(
            !promoted,
            "promoted: pdx read_only {ro}; status: {}\nevents:\n{events}",
            serde_json::to_string(&s).unwrap()
        );
        if started.elapsed() >= window {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Renews both leases of `op` every 2 s on `p` until aborted; a reply is
/// not judged (the test judges the group). Abort it before the operator
/// serving `p` goes away.
fn keep_renewing(p: &Pipeline, op: &str, migration: String, hold: String) -> tokio::task::JoinHandle<()> {
    let (p, op) = (p.clone(), op.to_owned());
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            for (kind, token) in [("migration", &migration), ("failover-hold", &hold)] {
                let r = p.put(kind, &op, token).await;
                println!("renewal of {kind}: {} {}", r.status, r.body);
            }
        }
    })
}

#[tokio::test]
async fn an_errant_standby_is_never_promoted_across_a_leader_crash_an_accepted_loss_and_a_request() {
    let mut sc = Scenario::start("sc-errant", 1, TAKEOVER).await;
    let name = sc.quick_group("g").await;
    writer::prepare_replicated(&sc.pair, T).await;
    let pdx_id = sc.pair.sql("pdx", "SELECT @@server_id").trim().to_owned();
    let had = sc.pair.transactions("pdx");

    // Writes of its own on the standby, binlogged (sql_log_bin=1). MariaDB:
    // in the replication domain and in a domain the primary never used.
    // MySQL: an administrator lifts super_read_only for them, under the
    // standby's own server UUID.
    let (in_zero, in_nine) = match sc.pair.flavor {
        Flavor::MariaDb => {
            sc.pair.sql(
                "pdx",
                "SET SESSION sql_log_bin=1; CREATE DATABASE errant; CREATE TABLE errant.t (id INT PRIMARY KEY); \
                 INSERT INTO errant.t VALUES (1); SET SESSION gtid_domain_id=9; INSERT INTO errant.t VALUES (2)",
            );
            (format!("0-{pdx_id}-{}..{}", had + 1, had + 3), format!("9-{pdx_id}-1"))
        }
        Flavor::MySql => {
            sc.pair.sql(
                "pdx",
                "SET GLOBAL super_read_only=0; SET SESSION sql_log_bin=1; CREATE DATABASE errant; \
                 CREATE TABLE errant.t (id INT PRIMARY KEY); INSERT INTO errant.t VALUES (1); \
                 INSERT INTO errant.t VALUES (2); SET GLOBAL super_read_only=1",
            );
            let range = sc.pair.gtid_range("pdx", 1, 4);
            (range.clone(), range)
        }
    };
    let s = wait_status(&sc.cluster, &name, "SiteDiverged on pdx, both domains", T, |s| {
        has_condition(s, "SiteDiverged", "True", Some("ErrantTransactions"))?;
        let m = &condition(s, "SiteDiverged").unwrap().message;
        if m.contains(&in_zero) && m.contains(&in_nine) { Ok(()) } else { Err(m.clone()) }
    })
    .await;
    println!("SiteDiverged: {}", condition(&s, "SiteDiverged").unwrap().message);

    // The leader dies without a word, the primary dies while no operator
    // runs, and a fresh leader comes up: it never sees the two compared.
    sc.operators[0].kill().await;
    sc.pair.kill9("iad");
    let next = Operator::start(&sc.cluster, &sc.ns, &sc.ns.name, "next", TAKEOVER).await;
    sc.operators.push(next);
    // A person accepts any loss of promoting pdx at generation 1, and asks
    // for a planned failover onto it.
    let accept = json!({"metadata": {"annotations": {"bloodraven.shipstream.io/promote-despite-loss": "pdx@1"}}});
    sc.cluster.groups().patch(&name, &PatchParams::default(), &Patch::Merge(&accept)).await.unwrap();
    sc.request_failover(&name, "pdx", "onto-errant").await;

    let s = wait_status(&sc.cluster, &name, "RecoveryPending: ErrantTransactions from the new leader", T, |s| {
        has_condition(s, "RecoveryPending", "True", Some("ErrantTransactions"))
    })
    .await;
    let message = condition(&s, "RecoveryPending").unwrap().message.clone();
    assert!(message.contains("not promoted") && message.contains(&in_nine), "{message}");
    // Longer than several detection budgets of the new leader.
    let s = nothing_promoted_for(&sc, &name, Duration::from_secs(20)).await;
    let health = s.health.iter().find(|h| h.site == "pdx").unwrap();
    let kept = health.errant_gtids.clone().unwrap_or_default();
    assert!(kept.contains(&in_zero) && kept.contains(&in_nine), "errantGtids kept: {health:?}");
    has_condition(&s, "SiteDiverged", "True", Some("ErrantTransactions")).unwrap();
    has_condition(&s, "RecoveryPending", "True", Some("ErrantTransactions")).unwrap();
    let s = wait_status(&sc.cluster, &name, "the request onto pdx failed", T, |s| at_phase(s, "onto-errant", "Failed"))
        .await;
    never_drained(&s).unwrap();
    println!("onto-errant: {:?}", s.planned_failover.as_ref().unwrap().message);
    assert!(s.emergency_failover.is_none(), "{:?}", s.emergency_failover);
    let events = events_text(&sc.cluster, &name).await;
    assert!(!events.contains("EmergencyFailover/"), "{events}");
    assert!(
        events.lines().any(|l| l.starts_with("ErrantTransactions/RecoveryPending") && l.contains("not promoted")),
        "{events}"
    );
    // Its data is kept.
    assert_eq!(sc.pair.sql("pdx", "SELECT COUNT(*) FROM errant.t").trim(), "2");
    sc.cluster.delete_group(&name).await;
}

#[tokio::test]
async fn a_stopped_sql_thread_fails_a_deferred_planned_failover_and_blocks_promotion_across_a_leader_change() {
    let mut d = scenario("sc-sqlstop").await;
    let cluster = d.sc.cluster.clone();
    let p = d.pipeline.clone();
    let group = p.group.clone();
    writer::prepare_replicated(&d.sc.pair, T).await;

    let m = p.post_until(201, "migration", "op1", "counter-app", 120).await;
    let h = p.post("failover-hold", "op1", "counter-app", 120).await;
    assert_eq!(h.status, 201, "{h:?}");
    d.sc.request_failover(&group, "pdx", "sql-1").await;
    wait_status(&cluster, &group, "sql-1 deferred", T, |s| at_phase(s, "sql-1", "Deferred")).await;
    let renewing = keep_renewing(&p, "op1", token_of(&m), token_of(&h));

    // While it waits: the standby's applier is stopped by hand, and the
    // primary commits five more (received by pdx, never applied).
    d.sc.pair.stop_applier("pdx");
    let inserts = (2..7).map(|i| format!("INSERT INTO bench.t (id) VALUES ({i});")).collect::<Vec<_>>().join(" ");
    d.sc.pair.sql("iad", &inserts);
    let s = wait_status(&cluster, &group, "ReplicationNotRunning on pdx", T, |s| {
        has_condition(s, "ReplicationNotRunning", "True", None)
    })
    .await;
    println!("ReplicationNotRunning: {:?}", condition(&s, "ReplicationNotRunning"));
    at_phase(&s, "sql-1", "Deferred").unwrap();

    // The hold is released (the mutex takes it along): the request is
    // admitted again and must fail, naming the stopped thread.
    renewing.abort();
    let released = p.delete("migration", "op1", &token_of(&m)).await;
    assert_eq!(released.status, 204, "{released:?}");
    let s = wait_status(&cluster, &group, "sql-1 failed", T, |s| at_phase(s, "sql-1", "Failed")).await;
    let why = s.planned_failover.as_ref().unwrap().message.clone().unwrap_or_default();
    println!("sql-1: {why}");
    assert!(why.contains("SQL thread: false") || why.contains("stalled"), "{why}");
    never_drained(&s).unwrap();
    assert_eq!(d.sc.pair.sql("iad", "SELECT @@read_only").trim(), "0", "iad was never fenced");
    assert_eq!(s.topology_generation, Some(1));

    // The primary dies with pdx's applier still stopped: nothing is promoted.
    d.sc.pair.kill9("iad");
    let s = wait_status(&cluster, &group, "RecoveryPending: StandbyNotPromotable", T, |s| {
        has_condition(s, "RecoveryPending", "True", Some("StandbyNotPromotable"))
    })
    .await;
    let message = condition(&s, "RecoveryPending").unwrap().message.clone();
    println!("RecoveryPending: {message}");
    assert!(message.contains("not replicating") || message.contains("has not applied everything"), "{message}");
    nothing_promoted_for(&d.sc, &group, Duration::from_secs(10)).await;

    // A leader change changes nothing.
    d.op.kill().await;
    let (_next, _base) = start_operator_with(&cluster, &d.sc.ns, "next", &d.tls, LeaderTimings::default(), &[]).await;
    nothing_promoted_for(&d.sc, &group, Duration::from_secs(25)).await;
    wait_status(&cluster, &group, "RecoveryPending: StandbyNotPromotable from the new leader", T, |s| {
        has_condition(s, "RecoveryPending", "True", Some("StandbyNotPromotable"))
    })
    .await;

    // A person restarts the applier: pdx applies all it received and is
    // promoted, with every acknowledged row.
    d.sc.pair.start_applier("pdx");
    let s = wait_status(&cluster, &group, "pdx active at generation 2", T, |s| is_active_at(s, "pdx", 2)).await;
    d.sc.pair.wait_read_only("pdx", false, T).await;
    assert_eq!(d.sc.pair.sql("pdx", "SELECT COUNT(*) FROM bench.t").trim(), "6", "every acknowledged row");
    println!("emergencyFailover: {:?}", s.emergency_failover);
    cluster.delete_group(&group).await;
}

#[tokio::test]
async fn a_stalled_standby_behind_a_held_planned_failover_is_not_promoted_blindly_after_a_leader_change() {
    let mut d = scenario("sc-blind").await;
    let cluster = d.sc.cluster.clone();
    let p = d.pipeline.clone();
    let group = p.group.clone();
    writer::prepare_replicated(&d.sc.pair, T).await;
    let had = d.sc.pair.transactions("pdx");

    // A pipeline holds the mutex and a failover-hold, renewed all along; a
    // planned failover waits behind it.
    let m = p.post_until(201, "migration", "op1", "counter-app", 120).await;
    let h = p.post("failover-hold", "op1", "counter-app", 120).await;
    assert_eq!(h.status, 201, "{h:?}");
    d.sc.request_failover(&group, "pdx", "blind-1").await;
    wait_status(&cluster, &group, "blind-1 deferred", T, |s| at_phase(s, "blind-1", "Deferred")).await;
    let renewing = keep_renewing(&p, "op1", token_of(&m), token_of(&h));

    // The standby's link drops every packet; the primary commits 200 more.
    let block = d.sc.pair.block_replication("pdx");
    let inserts = (2..202).map(|i| format!("INSERT INTO bench.t (id) VALUES ({i});")).collect::<Vec<_>>().join(" ");
    d.sc.pair.sql("iad", &inserts);
    let last = d.sc.pair.transactions("iad");
    assert_eq!(last, had + 200);
    let range = d.sc.pair.gtid_range("iad", had + 1, last);
    let s = wait_status(&cluster, &group, "ReplicationNotRunning: ReplicationStalled", T, |s| {
        has_condition(s, "ReplicationNotRunning", "True", Some("ReplicationStalled"))
    })
    .await;
    println!("stalled: {}", condition(&s, "ReplicationNotRunning").unwrap().message);

    // The primary dies. The leader that saw it answer refuses the loss.
    d.sc.pair.kill9("iad");
    let s = wait_status(&cluster, &group, "RecoveryPending: StandbyBehind (first leader)", T, |s| {
        has_condition(s, "RecoveryPending", "True", Some("StandbyBehind"))
    })
    .await;
    let first = condition(&s, "RecoveryPending").unwrap().message.clone();
    println!("first leader: {first}");
    assert!(first.contains("200 transaction(s)") && first.contains(&range), "{first}");
    assert_eq!(s.topology_generation, Some(1));

    // The leader dies (SIGKILL) and another takes over; the pipeline keeps
    // renewing through it.
    renewing.abort();
    d.op.kill().await;
    let (_next, base) = start_operator_with(&cluster, &d.sc.ns, "next", &d.tls, LeaderTimings::default(), &[]).await;
    let p = Pipeline { base, ..p };
    let renewing = keep_renewing(&p, "op1", token_of(&m), token_of(&h));

    // Same facts, same verdict: pdx still lacks the 200 transactions. The
    // lease lapses in 10 s, the new leader needs 3 misses: 40 s covers it
    // with room.
    let outcome = tokio::time::timeout(Duration::from_secs(40), async {
        loop {
            let s = cluster.groups().get_status(&group).await.unwrap().status.unwrap_or_default();
            if s.topology_generation != Some(1) {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;
    renewing.abort();
    if let Ok(s) = outcome {
        let ro = d.sc.pair.sql("pdx", "SELECT @@read_only").trim().to_owned();
        let rows = d.sc.pair.sql("pdx", "SELECT COUNT(*) FROM bench.t").trim().to_owned();
        let e = s.emergency_failover.clone();
        let health_iad = s.health.iter().find(|h| h.site == "iad").cloned();
        panic!(
            "the new leader promoted the stalled standby: generation {:?}, active {:?}, pdx read_only {ro}, pdx rows {rows} of 201;\n\
             emergencyFailover: {e:?}\niad health: {health_iad:?}\nplanned: {:?}\nevents:\n{}",
            s.topology_generation,
            s.active_site,
            s.planned_failover,
            events_text(&cluster, &group).await
        );
    }
    let s = cluster.groups().get_status(&group).await.unwrap().status.unwrap_or_default();
    has_condition(&s, "RecoveryPending", "True", Some("StandbyBehind")).unwrap();
    assert_eq!(d.sc.pair.sql("pdx", "SELECT @@read_only").trim(), "1");
    never_drained(&s).unwrap();
    drop(block);
    cluster.delete_group(&group).await;
}
