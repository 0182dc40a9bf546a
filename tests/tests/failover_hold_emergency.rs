//! A deploy hold never delays an emergency failover, on the real node and
//! sites. A pipeline holds the migration mutex and a failover-hold (TTL 120,
//! renewed all along, so a hold that delayed anything would delay it for
//! good), a planned failover waits behind it, and the primary is killed
//! with `kill -9`:
//!
//! - the standby is promoted within the detection budget of its leader;
//! - both leases are revoked (`409 revoked`, `TopologyChanged`);
//! - the waiting request ends `Failed`, superseded by the emergency
//!   failover, and never runs against the new topology.
//!
//! The same with the leases held by a real `bloodraven-sidecar run` (which
//! is fenced), and with the request left in `Admitting` by a leader that
//! died there.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test
#![allow(clippy::many_single_char_names)] // d the scenario, p its pipeline, m and h the two grants

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bloodraven_api::v1alpha1::MysqlFailoverGroupStatus;
use bloodraven_e2e::deploy::{Pipeline, scenario, start_operator_with, token_of};
use bloodraven_e2e::fixtures::{condition, is_active_at, wait_event, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::sidecar::{SidecarRun, exit, stamp};

const T: Duration = Duration::from_secs(90);
/// Quick takeovers: a killed leader's Lease lapses in 3 s.
const QUICK: LeaderTimings = LeaderTimings { lease_duration: 3, renew_deadline: 2, retry_period: 1 };

fn at_phase(s: &MysqlFailoverGroupStatus, id: &str, phase: &str) -> Result<(), String> {
    match &s.planned_failover {
        Some(p) if p.request_id == id && p.phase == phase => Ok(()),
        other => Err(format!("{other:?}")),
    }
}

/// The request `id` is Deferred behind a hold, and automatic failover is
/// not held for it.
fn deferred_holding_nothing(s: &MysqlFailoverGroupStatus, id: &str) -> Result<(), String> {
    at_phase(s, id, "Deferred")?;
    match condition(s, "AutomaticFailoverHeld") {
        Some(c) if c.status == "False" => Ok(()),
        other => Err(format!("AutomaticFailoverHeld: {other:?}")),
    }
}

/// The request `id` ended Failed, superseded, and never drained.
fn superseded(s: &MysqlFailoverGroupStatus, id: &str) -> Result<(), String> {
    at_phase(s, id, "Failed")?;
    let p = s.planned_failover.as_ref().unwrap();
    let message = p.message.clone().unwrap_or_default();
    if !message.contains("superseded by an emergency failover") {
        return Err(format!("message: {message}"));
    }
    if p.history.iter().any(|h| h.phase == "Draining") {
        return Err(format!("it drained: {:?}", p.history));
    }
    Ok(())
}

/// Renews both leases of `op` every 2 s, as a pipeline that keeps its hold
/// alive would, until a renewal is refused (`409`, `404`, `403`; a `423
/// unstable` while the primary is down only keeps it observing); returns
/// each answer.
fn renew_until_refused(p: &Pipeline, op: &str, migration: String, hold: String) -> Arc<Mutex<Vec<(u16, String)>>> {
    let answers = Arc::new(Mutex::new(Vec::new()));
    let (p, op, seen) = (p.clone(), op.to_owned(), answers.clone());
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let mut refused = false;
            for (kind, token) in [("migration", &migration), ("failover-hold", &hold)] {
                let r = p.put(kind, &op, token).await;
                let reason = r.body["reason"].as_str().unwrap_or("").to_owned();
                refused |= matches!(r.status, 403 | 404 | 409);
                seen.lock().unwrap().push((r.status, format!("{kind} {reason}")));
            }
            if refused {
                return;
            }
        }
    });
    answers
}

#[tokio::test]
async fn a_renewed_hold_and_a_deferred_planned_failover_never_delay_an_emergency_failover() {
    let d = scenario("hold-kill").await;
    let (p, cluster) = (&d.pipeline, &d.sc.cluster);
    let group = p.group.clone();
    let m = p.post_until(201, "migration", "op1", "counter-app", 60).await;
    let h = p.post("failover-hold", "op1", "counter-app", 120).await;
    assert_eq!(h.status, 201, "{h:?}");
    d.sc.request_failover(&group, "pdx", "r1").await;
    wait_status(cluster, &group, "r1 deferred, automatic failover not held", T, |s| deferred_holding_nothing(s, "r1"))
        .await;
    let answers = renew_until_refused(p, "op1", token_of(&m), token_of(&h));

    let killed = Instant::now();
    d.sc.pair.kill9("iad");
    wait_status(cluster, &group, "pdx active at generation 2", T, |s| is_active_at(s, "pdx", 2)).await;
    let after = killed.elapsed();
    d.sc.pair.wait_read_only("pdx", false, T).await;
    println!(
        "figure: kill -9 → emergency decision with a renewed hold and a deferred planned failover: {after:?} (detection: 3 missed probes at a 1 s interval, each up to 2 s)"
    );
    // A hold that delayed it would have delayed it for as long as it is renewed.
    assert!(after < Duration::from_secs(30), "the emergency failover took {after:?}");

    let s = wait_status(cluster, &group, "r1 failed, superseded", T, |s| superseded(s, "r1")).await;
    println!("r1: {:?}", s.planned_failover.as_ref().unwrap().message);
    decided_at_the_threshold(cluster, &group, "pdx").await;
    for kind in ["migration", "failover-hold"] {
        let token = if kind == "migration" { token_of(&m) } else { token_of(&h) };
        let r = p.put(kind, "op1", &token).await;
        assert_eq!((r.status, r.body["reason"].as_str()), (409, Some("TopologyChanged")), "{kind}: {r:?}");
    }
    wait_for_refusal(&answers).await;
    cluster.delete_group(&group).await;
}

/// The group's `failureThreshold` (the fixtures' default).
const THRESHOLD: u32 = 3;

/// The `EmergencyFailover` Event of the decision for `site`: it was taken
/// at the round the primary reached the threshold, not rounds later. A
/// hold or a waiting request that delayed it would show more missed probes
/// (the trial that found the fault saw "failed 19 probes in a row"): the
/// count is the load-independent proof; the time is printed as a figure.
async fn decided_at_the_threshold(cluster: &bloodraven_e2e::Cluster, group: &str, site: &str) {
    let note = wait_event(cluster, group, "EmergencyFailover").await;
    assert!(note.contains(site) && note.contains("topologyGeneration 2"), "{note}");
    let missed = format!("failed {THRESHOLD} probes in a row");
    assert!(note.contains(&missed), "the decision came after more than {THRESHOLD} missed probes: {note}");
}

/// Waits until the renewal task saw a refusal; checks it was the revocation.
async fn wait_for_refusal(answers: &Arc<Mutex<Vec<(u16, String)>>>) {
    bloodraven_e2e::wait_for("the pipeline's renewals to be refused", T, || async {
        let seen = answers.lock().unwrap().clone();
        match seen.iter().find(|(status, _)| matches!(status, 403 | 404 | 409)) {
            Some((409, what)) if what.ends_with("TopologyChanged") => Ok(()),
            Some(other) => panic!("refused otherwise: {other:?} ({seen:?})"),
            None => Err(format!("{seen:?}")),
        }
    })
    .await;
}

#[tokio::test]
async fn a_sidecar_holding_both_leases_is_fenced_by_an_emergency_failover_it_could_not_delay() {
    let d = scenario("hold-sidecar").await;
    let (p, cluster) = (&d.pipeline, &d.sc.cluster);
    let group = p.group.clone();
    // TTL 30: renewed every 10 s by the sidecar; the migration runs until fenced.
    let script = format!(
        "trap '{term}; exit 1' TERM; {started}; while :; do sleep 0.1; done",
        term = stamp("term"),
        started = stamp("started")
    );
    let mut run = SidecarRun::start(p, &d.tls, "hold-run", &["--ttl", "30", "--grace", "3"], &script);
    run.wait_for_marker("started", T).await;
    d.sc.request_failover(&group, "pdx", "r2").await;
    wait_status(cluster, &group, "r2 deferred, automatic failover not held", T, |s| deferred_holding_nothing(s, "r2"))
        .await;

    let killed = Instant::now();
    d.sc.pair.kill9("iad");
    wait_status(cluster, &group, "pdx active at generation 2", T, |s| is_active_at(s, "pdx", 2)).await;
    let after = killed.elapsed();
    println!(
        "figure: kill -9 → emergency decision with a sidecar holding both leases: {after:?} (detection: 3 missed probes at a 1 s interval, each up to 2 s)"
    );
    assert!(after < Duration::from_secs(30), "the emergency failover took {after:?}");
    decided_at_the_threshold(cluster, &group, "pdx").await;
    wait_status(cluster, &group, "r2 failed, superseded", T, |s| superseded(s, "r2")).await;
    // Fenced on its next renewal; its DDL had started (the default
    // boundary: from the start), so a person must verify the schema.
    run.wait_for_marker("term", T).await;
    assert_eq!(run.wait(T).await, exit::SCHEMA_VERIFICATION_REQUIRED, "{}", run.log());
    let r = run.record();
    assert_eq!(r["fence"].as_str(), Some("revoked"), "{r}");
    // Revoked because the primary moved, at the new generation.
    let why = r["lastError"].as_str().unwrap_or_default();
    assert!(why.contains("(TopologyChanged, generation 2)"), "{r}");
    cluster.delete_group(&group).await;
}

#[tokio::test]
async fn a_request_left_in_admitting_by_a_dead_leader_never_delays_an_emergency_failover() {
    let mut d = scenario("hold-admit").await;
    let cluster = d.sc.cluster.clone();
    let group = d.pipeline.group.clone();
    // A leader that dies right after it wrote Admitting.
    d.op.stop().await;
    let fail = ["--failpoint".to_owned(), "planned-entered-Admitting".to_owned()];
    let (mut first, base) = start_operator_with(&cluster, &d.sc.ns, "first", &d.tls, QUICK, &fail).await;
    let p = Pipeline { base, ..d.pipeline.clone() };
    let m = p.post_until(201, "migration", "op3", "counter-app", 60).await;
    let h = p.post("failover-hold", "op3", "counter-app", 120).await;
    assert_eq!(h.status, 201, "{h:?}");
    d.sc.request_failover(&group, "pdx", "r3").await;
    let status = first.wait_exit(T).await.unwrap_or_else(|| panic!("no failpoint reached:\n{}", first.log_tail()));
    assert!(!status.success(), "{status:?}");
    wait_status(&cluster, &group, "r3 left in Admitting", T, |s| at_phase(s, "r3", "Admitting")).await;

    // The primary dies while the request sits there; the next leader takes over.
    d.sc.pair.kill9("iad");
    let (_next, base) = start_operator_with(&cluster, &d.sc.ns, "next", &d.tls, QUICK, &[]).await;
    let started = Instant::now();
    let p = Pipeline { base, ..p };
    let answers = renew_until_refused(&p, "op3", token_of(&m), token_of(&h));
    wait_status(&cluster, &group, "pdx active at generation 2", T, |s| is_active_at(s, "pdx", 2)).await;
    let after = started.elapsed();
    println!(
        "figure: next leader's start → emergency decision with the request in Admitting and a renewed hold: {after:?}"
    );
    assert!(after < Duration::from_secs(45), "the emergency failover took {after:?}");
    decided_at_the_threshold(&cluster, &group, "pdx").await;
    wait_status(&cluster, &group, "r3 failed, superseded", T, |s| superseded(s, "r3")).await;
    wait_for_refusal(&answers).await;
    cluster.delete_group(&group).await;
}
