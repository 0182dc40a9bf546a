use bloodraven_api::v1alpha1::{MysqlFailoverGroupSpec, PhaseTransition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::act::{in_flight_of, not_ours};
use super::*;

fn group(request_id: Option<&str>) -> MysqlFailoverGroup {
    let mut spec: MysqlFailoverGroupSpec = serde_json::from_value(serde_json::json!({
        "initialActiveSite": "iad",
        "sites": [
            {"name": "iad", "host": "h1", "port": 3306, "credentialsSecretRef": {"namespace": "n", "name": "s"}},
            {"name": "pdx", "host": "h2", "port": 3306, "credentialsSecretRef": {"namespace": "n", "name": "s"}},
        ],
        "failover": {"fenceTimeoutSeconds": 10},
    }))
    .unwrap();
    spec.restore_in_place = request_id.map(|id| {
        Box::new(
            serde_json::from_value(serde_json::json!({
                "requestId": id, "namespace": "jobs", "activeDeadlineSeconds": 3600,
                "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "r", "image": "r"}]}}}},
            }))
            .unwrap(),
        )
    });
    MysqlFailoverGroup::new("g", spec)
}

fn state(phase: Phase, entered: Option<Timestamp>) -> RestoreInPlaceStatus {
    RestoreInPlaceStatus {
        request_id: "r1".into(),
        site: Some("pdx".into()),
        phase: phase.as_str().into(),
        source_site: Some("iad".into()),
        source_generation: Some(3),
        namespace: Some("jobs".into()),
        active_deadline_seconds: Some(3600),
        history: entered
            .map(|t| PhaseTransition { phase: phase.as_str().into(), time: Time(t), message: None })
            .into_iter()
            .collect(),
        ..RestoreInPlaceStatus::default()
    }
}

#[test]
fn each_phase_runs_out_at_its_own_bound() {
    let t0: Timestamp = "2026-12-01T10:00:00Z".parse().unwrap();
    let at = |secs: i64| t0 + SignedDuration::from_secs(secs);
    let g = group(Some("r1"));
    let restoring = state(Phase::Restoring, Some(t0));
    assert!(!past_deadline(&g, &restoring, Phase::Restoring, at(3600 + 29)));
    assert!(past_deadline(&g, &restoring, Phase::Restoring, at(3600 + 31)));
    let verifying = state(Phase::Verifying, Some(t0));
    let answer = i64::try_from(ANSWER_BOUND.as_secs()).unwrap();
    assert!(!past_deadline(&g, &verifying, Phase::Verifying, at(answer)));
    assert!(past_deadline(&g, &verifying, Phase::Verifying, at(answer + 1)));
    // The fence: fenceTimeoutSeconds, and the shortest catch-up bound (1 s)
    // though nothing is caught up: the drain's bound, as its hold counts it.
    let fencing = state(Phase::Fencing, Some(t0));
    assert!(!past_deadline(&g, &fencing, Phase::Fencing, at(11)));
    assert!(past_deadline(&g, &fencing, Phase::Fencing, at(12)));
    assert!(past_deadline(&g, &state(Phase::Restoring, None), Phase::Restoring, at(0)), "a start nobody wrote");
    assert!(!past_deadline(&g, &state(Phase::AwaitingReclone, Some(t0)), Phase::AwaitingReclone, at(10_000_000)));
}

#[test]
fn the_operator_acts_only_on_a_restore_it_took_up_and_admitted() {
    let mut rec = crate::failover::record::Record { active_site: "iad".into(), generation: 3, ..Default::default() };
    let pending = state(Phase::Pending, None);
    assert_eq!(not_ours(&group(Some("r1")), Some(&rec), &pending), None);
    let at_primary = RestoreInPlaceStatus { site: Some("iad".into()), ..pending.clone() };
    assert!(not_ours(&group(Some("r1")), Some(&rec), &at_primary).unwrap().contains("not those its spec asks for"));
    assert!(not_ours(&group(None), Some(&rec), &pending).unwrap().contains("cancelled"));
    let restoring = state(Phase::Restoring, None);
    assert!(not_ours(&group(None), Some(&rec), &restoring).is_some(), "never taken up: status written by hand");
    rec.requests.push(recorded("r1"));
    rec.in_flight = in_flight_of(&restoring).into_iter().collect();
    assert_eq!(rec.in_flight, ["restore-in-place/r1 iad pdx 3 jobs 3600"]);
    assert_eq!(not_ours(&group(None), Some(&rec), &restoring), None);
    // The same request pointed at the primary, or at another namespace.
    for (site, namespace) in [("iad", "jobs"), ("pdx", "kube-system")] {
        let mut forged = restoring.clone();
        (forged.site, forged.namespace) = (Some(site.into()), Some(namespace.into()));
        assert!(not_ours(&group(None), Some(&rec), &forged).unwrap().contains("other terms"), "{forged:?}");
    }
    let fencing = state(Phase::Fencing, None);
    assert!(not_ours(&group(None), Some(&rec), &fencing).is_some(), "a fence the record never admitted");
    rec.admitted = Some(format!("{} pdx iad", recorded("r1")));
    assert_eq!(not_ours(&group(None), Some(&rec), &fencing), None);
    // Ended: written back into a running phase, it is not run again.
    rec.in_flight.clear();
    assert_eq!(not_ours(&group(None), Some(&rec), &fencing), None, "admitted before an upgrade");
    rec.admitted = None;
    for replay in [&pending, &restoring, &fencing] {
        assert!(not_ours(&group(Some("r1")), Some(&rec), replay).unwrap().contains("has ended"), "{}", replay.phase);
    }
    // After its decision the record's re-clone hold answers: status put
    // back from it (no namespace, nothing in flight) is acted on; with a
    // hold of another generation, or another primary decided, it is not.
    rec.active_site = "pdx".into();
    let put_back = RestoreInPlaceStatus { namespace: None, ..state(Phase::Promoting, None) };
    for (generation, active, ours) in [(4, "pdx", true), (5, "pdx", false), (4, "iad", false)] {
        rec.site_hold = Some(crate::failover::record::SiteHold::Reclone {
            site: "iad".into(),
            generation,
            request: recorded("r1"),
        });
        active.clone_into(&mut rec.active_site);
        assert_eq!(not_ours(&group(None), Some(&rec), &put_back).is_none(), ours, "{generation} {active}");
    }
    assert_eq!(recorded("r1"), "restore-in-place/r1");
}

#[test]
fn the_old_primary_awaits_its_reclone_from_the_decision_until_the_mark() {
    let mut g = group(Some("r1"));
    for (phase, awaiting) in [
        (Phase::Verifying, false),
        (Phase::Fencing, false),
        (Phase::Promoting, true),
        (Phase::Repointing, true),
        (Phase::AwaitingReclone, true),
        (Phase::Completed, false),
    ] {
        g.status = Some(bloodraven_api::v1alpha1::MysqlFailoverGroupStatus {
            restore_in_place: Some(Box::new(state(phase, None))),
            ..Default::default()
        });
        let drive = Drive { phase: Some(phase), ..Drive::idle(g.clone()) };
        assert_eq!(drive.reclone_site().is_some(), awaiting, "{phase}");
        assert_eq!(drive.holds_automatic_failover(), awaiting, "{phase}: never promoted while it awaits");
        assert_eq!(drive.running(), !phase.is_final() && phase != Phase::AwaitingReclone, "{phase}");
    }
}

#[test]
fn a_restored_site_answering_as_another_server_is_that_server_not_a_silent_one() {
    use crate::controller::failover_group::assess::{ProbeFailure, SiteProbe};
    use bloodraven_api::v1alpha1::reason;
    let failed = |reason, answered_as| SiteProbe {
        site: "pdx".into(),
        outcome: Err(ProbeFailure { reason, message: "m".into(), answered_as }),
    };
    let other = failed(reason::UNEXPECTED_SERVER, Some(7));
    assert_eq!(
        restored_of(Some(&other)),
        Some(Restored { replicating: false, identity: Identity { server_id: 7, server_uuid: String::new() } })
    );
    assert_eq!(restored_of(Some(&failed(reason::SITE_UNREACHABLE, None))), None);
    assert_eq!(restored_of(None), None);
}
