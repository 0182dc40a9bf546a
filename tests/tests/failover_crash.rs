//! The failover engine is crash-safe: the leader is killed at
//! every phase of a planned failover (a failpoint aborts the real binary
//! at that point, as SIGKILL would), and the next leader finishes the
//! request from the decision record, status and the sites: the generation
//! moves by exactly one, and at no sample are two sites writable.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bloodraven_api::v1alpha1::MysqlFailoverGroupStatus;
use bloodraven_e2e::Operator;
use bloodraven_e2e::fixtures::{Scenario, is_ready_at, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
use kube::api::{Patch, PatchParams};
use serde_json::json;

const T: Duration = Duration::from_secs(90);
/// Quick takeovers: a killed leader's Lease lapses in 3 s.
const QUICK: LeaderTimings = LeaderTimings { lease_duration: 3, renew_deadline: 2, retry_period: 1 };

/// Every point of a planned failover where a leader can die.
const POINTS: [&str; 10] = [
    "planned-entered-Admitting",
    "planned-entered-Draining",
    "planned-after-fence",
    "planned-after-catch-up",
    "decide-after-record",
    "planned-after-decide",
    "planned-entered-Promoting",
    "planned-after-promote",
    "planned-entered-Repointing",
    "planned-after-repoint",
];

fn completed(s: &MysqlFailoverGroupStatus, id: &str, site: &str, generation: i64) -> Result<(), String> {
    match &s.planned_failover {
        Some(p) if p.request_id == id && p.phase == "Completed" => is_ready_at(s, site, generation),
        other => Err(format!("{other:?}")),
    }
}

#[tokio::test]
async fn a_leader_killed_at_every_phase_is_finished_by_the_next_one() {
    let sc = Scenario::start("crash", 0, QUICK).await;
    let mut op = Operator::start(&sc.cluster, &sc.ns, &sc.ns.name, "first", QUICK).await;
    let name = sc.bootstrapped_group("g").await;

    // Sample both sites' roles all along: never two writable.
    let (stop, both, samples) =
        (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let roles = {
        let (stop, both, samples, dir, flavor) =
            (stop.clone(), both.clone(), samples.clone(), sc.pair.dir().to_owned(), sc.pair.flavor);
        tokio::task::spawn_blocking(move || {
            let ro = |site: &str| {
                let out =
                    bloodraven_e2e::sites::sql_command(flavor, &dir, site, "SELECT @@read_only").output().unwrap();
                String::from_utf8_lossy(&out.stdout).trim().to_owned()
            };
            while !stop.load(Ordering::Relaxed) {
                // Sandwiched reads: a site writable before and after the
                // other's read was writable at that moment too.
                let (a, b, c, d) = (ro("iad"), ro("pdx"), ro("iad"), ro("pdx"));
                if b == "0" && c == "0" && (a == "0" || d == "0") {
                    both.fetch_add(1, Ordering::Relaxed);
                }
                samples.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };

    let mut generation = 1;
    for (i, point) in POINTS.iter().enumerate() {
        let target = if i % 2 == 0 { "pdx" } else { "iad" };
        let id = format!("c{i}");
        op.stop().await;
        op = Operator::start_with(
            &sc.cluster,
            &sc.ns,
            &sc.ns.name,
            &format!("crash{i}"),
            QUICK,
            &["--failpoint".into(), (*point).into()],
        )
        .await;
        let patch = json!({"spec": {"plannedFailover": {"targetSite": target, "requestId": id}}});
        sc.cluster.groups().patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        let status = op
            .wait_exit(T)
            .await
            .unwrap_or_else(|| panic!("{point}: the leader did not reach its failpoint:\n{}", op.log_tail()));
        assert!(!status.success(), "{point}: {status:?}");
        assert!(std::fs::read_to_string(&op.log).unwrap().contains("failpoint reached"), "{point}: {}", op.log_tail());
        // The next leader finishes it: exactly one generation further.
        op = Operator::start(&sc.cluster, &sc.ns, &sc.ns.name, &format!("next{i}"), QUICK).await;
        generation += 1;
        wait_status(
            &sc.cluster,
            &name,
            &format!("{id} ({point}) completed at {target}, generation {generation}"),
            T,
            |s| completed(s, &id, target, generation),
        )
        .await;
        let other = if target == "pdx" { "iad" } else { "pdx" };
        assert_eq!(sc.pair.sql(other, "SELECT @@read_only").trim(), "1", "{point}");
        eprintln!("{point}: finished by the next leader at generation {generation}");
    }
    stop.store(true, Ordering::Relaxed);
    roles.await.unwrap();
    let (both, samples) = (both.load(Ordering::Relaxed), samples.load(Ordering::Relaxed));
    assert!(samples > 100, "{samples} samples");
    assert_eq!(both, 0, "two writable sites in {both} of {samples} samples");
    sc.cluster.delete_group(&name).await;
}

/// A person writes `phase: Failed` into a planned failover's status while
/// it runs (no leader meanwhile, so nothing overwrites it): after the fence
/// the old primary is read-only, and after the decision the target is not
/// promoted yet. Taken for the request's end, that left no writable site.
/// The history ends in a running phase the operator entered, and the
/// record holds the request in flight: the next leader runs it on, says
/// so, and it completes.
#[tokio::test]
async fn a_running_planned_failover_ended_in_status_by_hand_runs_on_to_its_end() {
    let sc = Scenario::start("crash-hand", 0, QUICK).await;
    let mut op = Operator::start(&sc.cluster, &sc.ns, &sc.ns.name, "first", QUICK).await;
    let name = sc.bootstrapped_group("g").await;
    for (i, point) in ["planned-after-fence", "planned-entered-Promoting"].iter().enumerate() {
        let generation = i64::try_from(i).unwrap() + 2;
        let target = if i % 2 == 0 { "pdx" } else { "iad" };
        let id = format!("h{i}");
        op.stop().await;
        let failpoint = ["--failpoint".into(), (*point).into()];
        op = Operator::start_with(&sc.cluster, &sc.ns, &sc.ns.name, &format!("crash{i}"), QUICK, &failpoint).await;
        let patch = json!({"spec": {"plannedFailover": {"targetSite": target, "requestId": id}}});
        sc.cluster.groups().patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        let status = op.wait_exit(T).await.unwrap_or_else(|| panic!("{point}: no failpoint:\n{}", op.log_tail()));
        assert!(!status.success(), "{point}: {status:?}");
        let by_hand = json!({"status": {"plannedFailover": {"phase": "Failed", "message": "stopped by hand"}}});
        sc.cluster.groups().patch_status(&name, &PatchParams::default(), &Patch::Merge(&by_hand)).await.unwrap();
        op = Operator::start(&sc.cluster, &sc.ns, &sc.ns.name, &format!("next{i}"), QUICK).await;
        wait_status(&sc.cluster, &name, &format!("{id} ({point}) completed at {target}"), T, |s| {
            completed(s, &id, target, generation)
        })
        .await;
        let notes = bloodraven_e2e::fixtures::wait_events(
            &sc.cluster,
            &name,
            "StatusRestored",
            &[&[&format!("planned failover {id} in phase Failed, which the operator did not write"), "runs on from"]],
        )
        .await;
        eprintln!("{point}: {notes:?}");
        let other = if target == "pdx" { "iad" } else { "pdx" };
        assert_eq!(sc.pair.sql(other, "SELECT @@read_only").trim(), "1", "{point}");
        assert_eq!(sc.pair.sql(target, "SELECT @@read_only").trim(), "0", "{point}");
    }
    op.stop().await;
    sc.cluster.delete_group(&name).await;
}

/// The leader, to be killed by its failpoint right after an emergency
/// decision is recorded, before the promotion.
async fn stopping_after_the_emergency_decision(sc: &Scenario) -> Operator {
    let failpoint = ["--failpoint".into(), "emergency-after-decide".into()];
    Operator::start_with(&sc.cluster, &sc.ns, &sc.ns.name, "first", QUICK, &failpoint).await
}

/// Waits until the pending promotion is finished: pdx active at generation
/// 2, `RecoveryPending` cleared.
async fn recovered_at_pdx(sc: &Scenario, name: &str) {
    wait_status(&sc.cluster, name, "RecoveryPending cleared at pdx, generation 2", T, |s| {
        match (s.active_site.as_deref(), s.topology_generation) {
            (Some("pdx"), Some(2)) => {}
            other => return Err(format!("{other:?}")),
        }
        match bloodraven_e2e::fixtures::condition(s, "RecoveryPending") {
            Some(c) if c.status == "False" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

#[tokio::test]
async fn a_leader_killed_between_an_emergency_decision_and_the_promotion_is_finished_by_the_next_one() {
    let sc = Scenario::start("crashemerg", 0, QUICK).await;
    let mut op = stopping_after_the_emergency_decision(&sc).await;
    // A short detection budget: 1 s × 3.
    let name = sc.quick_group("g").await;
    sc.pair.kill9("iad");
    let status =
        op.wait_exit(T).await.unwrap_or_else(|| panic!("the leader did not reach its failpoint:\n{}", op.log_tail()));
    assert!(!status.success(), "{status:?}");
    // Decided (record and status at pdx, generation 2) but pdx not promoted yet.
    let s = sc.cluster.groups().get(&name).await.unwrap().status.unwrap();
    assert_eq!(s.topology_generation, Some(2), "{s:?}");
    assert_eq!(sc.pair.sql("pdx", "SELECT @@read_only").trim(), "1", "not promoted before the crash");
    let _next = Operator::start(&sc.cluster, &sc.ns, &sc.ns.name, "next", QUICK).await;
    sc.pair.wait_read_only("pdx", false, T).await;
    recovered_at_pdx(&sc, &name).await;
    sc.cluster.delete_group(&name).await;
}

#[tokio::test]
async fn an_old_primary_that_answers_again_before_the_promotion_is_fenced_first() {
    // The seed-1 nemesis schedule's fault: the paused primary came back
    // writable while the emergency decision's promotion was pending, the
    // standby was promoted beside it, and the API server then went away
    // with two writable sites for 52 s.
    let sc = Scenario::start("crashpaused", 0, QUICK).await;
    let mut op = stopping_after_the_emergency_decision(&sc).await;
    let name = sc.quick_group("g").await;
    sc.pair.signal("iad", "STOP");
    op.wait_exit(T).await.unwrap_or_else(|| panic!("the leader did not reach its failpoint:\n{}", op.log_tail()));
    // Decided for pdx, not promoted; the old primary answers again, writable.
    sc.pair.signal("iad", "CONT");
    assert_eq!(sc.pair.sql("iad", "SELECT @@read_only").trim(), "0");
    let next = Operator::start(&sc.cluster, &sc.ns, &sc.ns.name, "next", QUICK).await;
    sc.pair.wait_read_only("pdx", false, T).await;
    assert_eq!(sc.pair.sql("iad", "SELECT @@read_only").trim(), "1");
    // In that order: iad fenced, then pdx promoted (a fence after the
    // promotion, by the round's reassertion, would leave a window of two
    // writable sites that a leader losing the API server right then keeps).
    let log = next.log();
    let (fenced, promoted) = (log.find("primary reasserted"), log.find("promoted after an emergency decision"));
    assert!(
        matches!((fenced, promoted), (Some(f), Some(p)) if f < p),
        "fenced at {fenced:?}, promoted at {promoted:?}:\n{}",
        next.log_tail()
    );
    recovered_at_pdx(&sc, &name).await;
    bloodraven_e2e::fixtures::wait_events(&sc.cluster, &name, "PrimaryReasserted", &[&["iad"]]).await;
    sc.cluster.delete_group(&name).await;
}

#[tokio::test]
async fn a_new_primary_that_dies_before_its_promotion_is_failed_over_and_the_request_ends_superseded() {
    let sc = Scenario::start("crashtarget", 0, QUICK).await;
    let mut op = Operator::start_with(
        &sc.cluster,
        &sc.ns,
        &sc.ns.name,
        "first",
        QUICK,
        &["--failpoint".into(), "planned-after-decide".into()],
    )
    .await;
    // A short detection budget: 1 s × 3.
    let name = sc.quick_group("g").await;
    let request = json!({"spec": {"plannedFailover": {"targetSite": "pdx", "requestId": "t1"}}});
    sc.cluster.groups().patch(&name, &PatchParams::default(), &Patch::Merge(&request)).await.unwrap();
    op.wait_exit(T).await.unwrap_or_else(|| panic!("the leader did not reach its failpoint:\n{}", op.log_tail()));
    // Decided for pdx (generation 2), iad fenced; pdx dies before its promotion.
    sc.pair.kill9("pdx");
    let _next = Operator::start(&sc.cluster, &sc.ns, &sc.ns.name, "next", QUICK).await;
    let s = wait_status(&sc.cluster, &name, "iad active again at generation 3, t1 superseded", T, |s| {
        match (s.active_site.as_deref(), s.topology_generation, s.planned_failover.as_ref().map(|p| p.phase.as_str())) {
            (Some("iad"), Some(3), Some("Failed")) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let message = s.planned_failover.unwrap().message.unwrap_or_default();
    assert!(message.contains("superseded"), "{message}");
    // Status shows the decision before its promotion has run (a leader that
    // lost its Lease between the two leaves it to the next reconcile).
    sc.pair.wait_read_only("iad", false, T).await;
    sc.cluster.delete_group(&name).await;
}

/// A group deleted while its planned failover has fenced the old primary is let
/// go only once the planned failover has ended: deleting it at once left both
/// sites read-only for good (found by an attack).
#[tokio::test]
async fn a_group_deleted_mid_planned_failover_is_let_go_with_a_writable_primary() {
    let sc = Scenario::start("crashdel", 0, QUICK).await;
    let mut op = Operator::start_with(
        &sc.cluster,
        &sc.ns,
        &sc.ns.name,
        "del0",
        QUICK,
        &["--failpoint".into(), "planned-after-fence".into()],
    )
    .await;
    let name = sc.bootstrapped_group("g").await;
    sc.request_failover(&name, "pdx", "d1").await;
    op.wait_exit(T).await.unwrap_or_else(|| panic!("the leader did not reach its failpoint:\n{}", op.log_tail()));
    assert_eq!(sc.pair.sql("iad", "SELECT @@read_only").trim(), "1", "iad was fenced");
    sc.cluster.groups().delete(&name, &kube::api::DeleteParams::default()).await.unwrap();
    let next = Operator::start(&sc.cluster, &sc.ns, &sc.ns.name, "del1", QUICK).await;
    bloodraven_e2e::wait::wait_for("the group to be gone", T, || async {
        match sc.cluster.groups().get_opt(&name).await {
            Ok(None) => Ok(()),
            other => Err(format!("{:?}", other.map(|g| g.and_then(|g| g.status).map(|s| s.planned_failover)))),
        }
    })
    .await;
    let (iad, pdx) = (sc.pair.sql("iad", "SELECT @@read_only"), sc.pair.sql("pdx", "SELECT @@read_only"));
    assert_eq!(
        (iad.trim(), pdx.trim()),
        ("1", "0"),
        "the planned failover was finished: pdx is the primary\n{}",
        next.log_tail()
    );
}
