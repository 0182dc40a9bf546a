use bloodraven_api::v1alpha1::{MysqlFailoverGroupSpec, OrderedUpdateStatus, PhaseTransition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::request::{admission_of, in_flight_of, not_ours, recorded_id};
use super::*;

fn group(request_id: Option<&str>) -> MysqlFailoverGroup {
    let mut spec: MysqlFailoverGroupSpec = serde_json::from_value(serde_json::json!({
        "initialActiveSite": "iad",
        "sites": [
            {"name": "iad", "host": "h1", "port": 3306, "credentialsSecretRef": {"namespace": "n", "name": "s"}},
            {"name": "pdx", "host": "h2", "port": 3306, "credentialsSecretRef": {"namespace": "n", "name": "s"}},
        ],
        "failover": {"fenceTimeoutSeconds": 10, "catchUpTimeoutSeconds": 30},
    }))
    .unwrap();
    spec.ordered_update = request_id.map(|id| {
        Box::new(
            serde_json::from_value(serde_json::json!({
                "requestId": id, "namespace": "jobs", "activeDeadlineSeconds": 600,
                "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "u", "image": "u"}]}}}},
            }))
            .unwrap(),
        )
    });
    MysqlFailoverGroup::new("g", spec)
}

fn state(phase: Phase, history: &[(&str, i64)], t0: Timestamp) -> OrderedUpdateStatus {
    OrderedUpdateStatus {
        request_id: "u1".into(),
        phase: phase.as_str().into(),
        source_site: Some("iad".into()),
        standby_site: Some("pdx".into()),
        source_generation: Some(4),
        namespace: Some("jobs".into()),
        active_deadline_seconds: Some(600),
        history: history
            .iter()
            .map(|(p, secs)| PhaseTransition {
                phase: (*p).into(),
                time: Time(t0 + SignedDuration::from_secs(*secs)),
                message: None,
            })
            .collect(),
        ..OrderedUpdateStatus::default()
    }
}

#[test]
fn each_phase_runs_out_at_its_own_bound_counted_from_entering_it() {
    let t0: Timestamp = "2026-12-01T10:00:00Z".parse().unwrap();
    let at = |secs: i64| t0 + SignedDuration::from_secs(secs);
    let g = group(Some("u1"));
    // A Job phase: its deadline (600 s) and the grace.
    let s = state(Phase::UpdatingStandby, &[("Pending", -9), ("UpdatingStandby", 0)], t0);
    assert!(!past_deadline(&g, &s, Phase::UpdatingStandby, at(600 + 29)));
    assert!(past_deadline(&g, &s, Phase::UpdatingStandby, at(600 + 31)));
    // A verifying phase: the readiness bound.
    let s = state(Phase::VerifyingStandby, &[("VerifyingStandby", 0)], t0);
    let ready = i64::try_from(READY_BOUND.as_secs()).unwrap();
    assert!(!past_deadline(&g, &s, Phase::VerifyingStandby, at(ready)));
    assert!(past_deadline(&g, &s, Phase::VerifyingStandby, at(ready + 1)));
    // A drain: fence + catch-up bounds, from the latest entry.
    let s = state(Phase::SwitchBackDraining, &[("SwitchoverDraining", -500), ("SwitchBackDraining", 0)], t0);
    assert!(!past_deadline(&g, &s, Phase::SwitchBackDraining, at(40)));
    assert!(past_deadline(&g, &s, Phase::SwitchBackDraining, at(41)));
    // A phase whose start nobody wrote is past its bound; one written in
    // the future counts from now.
    let s = state(Phase::UpdatingStandby, &[("Pending", 0)], t0);
    assert!(past_deadline(&g, &s, Phase::UpdatingStandby, at(1)));
    let s = state(Phase::UpdatingStandby, &[("UpdatingStandby", 100_000)], t0);
    assert!(!past_deadline(&g, &s, Phase::UpdatingStandby, at(1)));
    // No bound in the other phases.
    let s = state(Phase::Admitting, &[("Admitting", 0)], t0);
    assert!(!past_deadline(&g, &s, Phase::Admitting, at(1_000_000)));
}

#[test]
fn the_operator_acts_only_on_a_request_it_took_up_and_admitted() {
    let t0 = Timestamp::now();
    let mut rec = crate::failover::record::Record { active_site: "iad".into(), generation: 4, ..Default::default() };
    // Before it is taken up: it must still be asked for, on the terms the
    // spec asks for at the decided topology (status is not where they come
    // from).
    let pending = state(Phase::Pending, &[], t0);
    assert_eq!(not_ours(&group(Some("u1")), Some(&rec), &pending), None);
    for forged in [
        OrderedUpdateStatus { namespace: Some("other".into()), ..pending.clone() },
        OrderedUpdateStatus { switch_back: true, ..pending.clone() },
        OrderedUpdateStatus { standby_site: Some("iad".into()), ..pending.clone() },
    ] {
        let why = not_ours(&group(Some("u1")), Some(&rec), &forged).unwrap();
        assert!(why.contains("not those its spec asks for"), "{forged:?}: {why}");
    }
    assert!(not_ours(&group(Some("u2")), Some(&rec), &pending).unwrap().contains("cancelled"));
    assert!(not_ours(&group(None), Some(&rec), &pending).unwrap().contains("cancelled"));
    // Past Pending: the record holds it in flight, on the terms status
    // shows (status written by hand is not acted on), and a switchover is
    // admitted.
    let deferred = state(Phase::Deferred, &[], t0);
    let s = state(Phase::UpdatingStandby, &[], t0);
    assert!(not_ours(&group(Some("u1")), Some(&rec), &deferred).unwrap().contains("never took it up"));
    assert!(not_ours(&group(None), Some(&rec), &s).unwrap().contains("never took it up"));
    rec.requests.push(recorded_id("u1"));
    rec.in_flight = in_flight_of(&s).into_iter().collect();
    assert_eq!(rec.in_flight, ["ordered-update/u1 iad pdx 4 jobs 600 false"]);
    assert_eq!(not_ours(&group(Some("u1")), Some(&rec), &deferred), None);
    assert_eq!(not_ours(&group(None), Some(&rec), &s), None, "a Job phase runs on without the spec");
    // The same request pointed elsewhere: another site, namespace, bound,
    // generation, or a word that is not one.
    let edits: [fn(&mut OrderedUpdateStatus); 7] = [
        |s| s.standby_site = Some("iad".into()),
        |s| s.source_site = Some("pdx".into()),
        |s| s.namespace = Some("kube-system".into()),
        |s| s.active_deadline_seconds = Some(86_400),
        |s| s.source_generation = Some(5),
        |s| s.switch_back = true,
        |s| s.namespace = Some("jobs 600".into()),
    ];
    for edit in edits {
        let mut forged = s.clone();
        edit(&mut forged);
        let why = not_ours(&group(None), Some(&rec), &forged).unwrap();
        assert!(why.contains("other terms") || why.contains("not words"), "{forged:?}: {why}");
    }
    let promoting = state(Phase::SwitchoverPromoting, &[], t0);
    assert!(not_ours(&group(None), Some(&rec), &promoting).unwrap().contains("never admitted"));
    rec.admitted = Some(admission_of(&promoting, ordered_update::Leg::Switchover));
    assert_eq!(not_ours(&group(None), Some(&rec), &promoting), None);
    let back = state(Phase::SwitchBackDraining, &[], t0);
    assert!(not_ours(&group(None), Some(&rec), &back).is_some(), "the switch-back is admitted on its own");
    // Ended (the record no longer holds it in flight): written back into
    // any running phase, even Pending with the spec still asking, it is
    // not run again.
    // Admitted by an operator that kept no `inFlight` (an upgrade during
    // the switchover): the admission stands for it, a Job phase has none.
    rec.in_flight.clear();
    assert_eq!(not_ours(&group(None), Some(&rec), &promoting), None);
    assert!(not_ours(&group(None), Some(&rec), &s).unwrap().contains("has ended"));
    rec.admitted = None;
    for replay in [&pending, &deferred, &s, &promoting] {
        let why = not_ours(&group(Some("u1")), Some(&rec), replay).unwrap();
        assert!(why.contains("has ended"), "{}: {why}", replay.phase);
    }
    assert_eq!(recorded_id("u1"), "ordered-update/u1", "never a planned failover's id");
}

#[test]
fn a_drive_that_failed_still_holds_the_promotion_of_the_site_whose_job_ran_last_seen() {
    use bloodraven_api::v1alpha1::{MysqlFailoverGroupStatus, SiteJobStatus};
    let now = Timestamp::now();
    let mut s = state(Phase::UpdatingStandby, &[("UpdatingStandby", -10)], now);
    s.jobs.push(SiteJobStatus {
        site: "pdx".into(),
        role: "standby".into(),
        result: "Running".into(),
        ..Default::default()
    });
    let mut g = group(Some("u1"));
    let with = |g: &mut MysqlFailoverGroup, s: &OrderedUpdateStatus| {
        g.status = Some(MysqlFailoverGroupStatus {
            active_site: Some("iad".into()),
            topology_generation: Some(4),
            ordered_update: Some(Box::new(s.clone())),
            ..Default::default()
        });
    };
    with(&mut g, &s);
    assert_eq!(Drive::as_stored(g.clone()).hold(), Some(&Hold::Promotion("pdx".into())));
    // Past the Job's deadline, or with the Job seen ended: nothing held.
    let mut late = state(Phase::UpdatingStandby, &[("UpdatingStandby", -700)], now);
    late.jobs = s.jobs.clone();
    with(&mut g, &late);
    assert_eq!(Drive::as_stored(g.clone()).hold(), None);
    s.jobs[0].result = "Complete".into();
    with(&mut g, &s);
    assert_eq!(Drive::as_stored(g).hold(), None);
}
