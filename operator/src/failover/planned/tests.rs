use bloodraven_api::v1alpha1::{PhaseTransition, PlannedFailoverAdmission, PlannedFailoverStatus, reason};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::drain::catch_up_slice;
use super::request::replacing;
use super::*;
use bloodraven_core::failover::planned::drain::{CATCH_UP_SLICE, Slice};

#[test]
fn a_drain_counts_from_the_latest_draining_time_in_status() {
    let t0: Timestamp = "2026-12-01T10:00:00Z".parse().unwrap();
    let at = |secs: i64| t0 + k8s_openapi::jiff::SignedDuration::from_secs(secs);
    let entry = |phase: &str, secs: i64| PhaseTransition { phase: phase.into(), time: Time(at(secs)), message: None };
    let history = vec![entry("Pending", -5), entry("Admitting", -4), entry("Draining", 0)];
    let policy = bloodraven_api::v1alpha1::FailoverPolicy {
        fence_timeout_seconds: 10,
        catch_up_timeout_seconds: 30,
        ..Default::default()
    };
    // Deadline: drain + fence bound + catch-up bound = t0 + 40 s.
    assert_eq!(catch_up_slice(&history, &policy, at(1)), Slice { wait: CATCH_UP_SLICE, last: false });
    assert_eq!(catch_up_slice(&history, &policy, at(37)), Slice { wait: CATCH_UP_SLICE, last: false });
    assert_eq!(catch_up_slice(&history, &policy, at(39)), Slice { wait: Duration::from_secs(1), last: true });
    assert_eq!(
        catch_up_slice(&history, &policy, at(500)),
        Slice { wait: Duration::from_secs(1), last: true },
        "past the deadline: one last short look, then it fails"
    );
    assert!(!drain_deadline_passed(&history, &policy, at(40)) && drain_deadline_passed(&history, &policy, at(41)));
    // A new leader after a restart reads the same deadline from status.
    let mut later = history.clone();
    later.push(entry("Draining", 20));
    assert_eq!(
        catch_up_slice(&later, &policy, at(45)),
        Slice { wait: CATCH_UP_SLICE, last: false },
        "the latest drain counts"
    );
    // A Draining time in the future (a hand edit) counts as now, so the
    // bound still ends the drain (found by an attack).
    let edited = vec![entry("Draining", 100_000)];
    assert_eq!(drain_deadline(&edited, &policy, at(5)), Some(at(45)));
    // No drain in the history (status wiped): the whole bound, once.
    assert_eq!(catch_up_slice(&history[..2], &policy, at(1)), Slice { wait: Duration::from_secs(30), last: true });
    assert!(!drain_deadline_passed(&history[..2], &policy, at(10_000)));
}

#[test]
fn a_new_request_replaces_every_field_of_the_stored_one() {
    let stored = PlannedFailoverStatus {
        request_id: "r1".into(),
        target_site: "pdx".into(),
        phase: "Deferred".into(),
        source_site: Some("iad".into()),
        source_generation: Some(3),
        message: Some("deferred by op-1".into()),
        admission: Some(PlannedFailoverAdmission {
            defer_reason: Some(reason::DEPLOYMENT_HOLD.into()),
            retry_time: Some(Time("2026-12-01T10:00:00Z".parse().unwrap())),
            message: Some("the failover-hold of operation op-1".into()),
        }),
        history: vec![PhaseTransition {
            phase: "Deferred".into(),
            time: Time("2026-12-01T09:59:00Z".parse().unwrap()),
            message: None,
        }],
    };
    let fresh = PlannedFailoverStatus {
        request_id: "r2".into(),
        target_site: "iad".into(),
        phase: "Pending".into(),
        source_site: Some("pdx".into()),
        source_generation: Some(4),
        ..PlannedFailoverStatus::default()
    };
    let mut merged = serde_json::to_value(&stored).unwrap();
    json_patch::merge(&mut merged, &replacing(Some(&stored), &fresh));
    let merged: PlannedFailoverStatus = serde_json::from_value(merged).unwrap();
    assert_eq!(merged, fresh, "nothing of r1 is left");
    // A deferral's admission that changes loses what it no longer says.
    let mut later = stored.clone();
    later.admission = Some(PlannedFailoverAdmission { message: Some("m".into()), ..Default::default() });
    let mut merged = serde_json::to_value(&stored).unwrap();
    json_patch::merge(&mut merged, &replacing(Some(&stored), &later));
    assert_eq!(serde_json::from_value::<PlannedFailoverStatus>(merged).unwrap(), later);
}

#[test]
fn a_request_past_pending_runs_only_on_the_terms_the_record_holds_until_it_ends() {
    use super::request::{admission_of, in_flight_of, not_ours};
    let mut spec: bloodraven_api::v1alpha1::MysqlFailoverGroupSpec = serde_json::from_value(serde_json::json!({
        "initialActiveSite": "iad",
        "sites": [
            {"name": "iad", "host": "h1", "port": 3306, "credentialsSecretRef": {"namespace": "n", "name": "s"}},
            {"name": "pdx", "host": "h2", "port": 3306, "credentialsSecretRef": {"namespace": "n", "name": "s"}},
        ],
    }))
    .unwrap();
    spec.planned_failover =
        Some(serde_json::from_value(serde_json::json!({"requestId": "p1", "targetSite": "pdx"})).unwrap());
    let group = MysqlFailoverGroup::new("g", spec);
    let state = |phase: &str, source_generation: i64| PlannedFailoverStatus {
        request_id: "p1".into(),
        target_site: "pdx".into(),
        phase: phase.into(),
        source_site: Some("iad".into()),
        source_generation: Some(source_generation),
        ..PlannedFailoverStatus::default()
    };
    let mut rec = crate::failover::record::Record { active_site: "iad".into(), generation: 3, ..Default::default() };
    assert_eq!(not_ours(&group, Some(&rec), &state("Pending", 3)), None, "new");
    // A source or generation other than the decided ones is the rules'
    // to judge (superseded, before anything runs), not a forgery.
    assert_eq!(not_ours(&group, Some(&rec), &state("Pending", 2)), None);
    assert!(not_ours(&group, Some(&rec), &state("Admitting", 3)).unwrap().contains("never took it up"));
    rec.requests.push("p1".into());
    rec.in_flight = vec!["ordered-update/u1 pdx iad 3 jobs 600 false".into()];
    assert!(not_ours(&group, Some(&rec), &state("Admitting", 3)).unwrap().contains("other terms"));
    rec.in_flight.extend(in_flight_of(&state("Pending", 3)));
    assert_eq!(rec.in_flight[1], "p1 pdx iad 3");
    assert_eq!(not_ours(&group, Some(&rec), &state("Admitting", 3)), None);
    assert!(not_ours(&group, Some(&rec), &state("Admitting", 5)).unwrap().contains("other terms"));
    assert!(not_ours(&group, Some(&rec), &state("Draining", 3)).unwrap().contains("never admitted"));
    rec.admitted = Some(admission_of(&state("Draining", 3)));
    assert_eq!(not_ours(&group, Some(&rec), &state("Draining", 3)), None);
    // Ended (an emergency failover may have made iad the primary again
    // since): written back into any running phase, it is not run again.
    rec.in_flight.truncate(1);
    assert_eq!(not_ours(&group, Some(&rec), &state("Draining", 3)), None, "admitted before an upgrade");
    rec.admitted = None;
    for phase in ["Pending", "Admitting", "Deferred", "Draining", "Promoting"] {
        assert!(not_ours(&group, Some(&rec), &state(phase, 3)).unwrap().contains("has ended"), "{phase}");
    }
}
