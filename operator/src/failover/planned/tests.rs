use bloodraven_api::v1alpha1::{PhaseTransition, PlannedFailoverAdmission, PlannedFailoverStatus, reason};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::admission::errant;
use super::drain::{CATCH_UP_SLICE, Slice, catch_up_slice};
use super::request::replacing;
use super::*;

#[test]
fn catch_up_waits_in_slices_until_the_bound_counted_from_the_drain() {
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
fn errant_transactions_by_flavour() {
    assert_eq!(errant(Flavor::MariaDb, "0-1-10", "0-1-10", 1, ""), Ok(None));
    assert_eq!(errant(Flavor::MariaDb, "0-1-9", "0-1-10", 1, ""), Ok(None), "behind is not errant");
    assert_eq!(errant(Flavor::MariaDb, "0-2-11", "0-1-10", 1, ""), Ok(Some("0-2-11".into())));
    // Read a moment after a busy source: ahead with the source's own transactions.
    assert_eq!(errant(Flavor::MariaDb, "0-2-240", "0-2-238", 2, ""), Ok(None));
    assert_eq!(
        errant(Flavor::MariaDb, "0-1-10,1-2-3", "0-1-10", 1, ""),
        Ok(Some("1-2-3".into())),
        "a domain the base lacks"
    );
    assert_eq!(errant(Flavor::MariaDb, "", "0-1-10", 1, ""), Ok(None));
    assert!(errant(Flavor::MariaDb, "zzz", "0-1-1", 1, "").is_err());
    let u = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
    let source = "87f16bcf-efcf-11f1-85e2-02fc00000001";
    assert_eq!(errant(Flavor::MySql, &format!("{u}:1-5"), &format!("{u}:1-5"), 1, source), Ok(None));
    assert!(errant(Flavor::MySql, &format!("{u}:1-6"), &format!("{u}:1-5"), 1, source).unwrap().is_some());
    // Read a moment after a busy source: ahead with the source's own
    // transactions (the benchmark's input), in either case of its UUID.
    let have = format!("{u}:1-176,{source}:1-251");
    let base = format!("{u}:1-176,{source}:1-250");
    assert_eq!(errant(Flavor::MySql, &have, &base, 2, source), Ok(None));
    assert_eq!(errant(Flavor::MySql, &have, &base, 2, &source.to_uppercase()), Ok(None));
    // Its own writes on the replica are errant all the same.
    let mine = "d901bb47-efcd-11f1-90bb-02fc00000001";
    assert_eq!(errant(Flavor::MySql, &format!("{have},{mine}:1"), &base, 2, source), Ok(Some(format!("{mine}:1"))));
}
