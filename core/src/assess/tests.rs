use proptest::prelude::*;

use super::*;
use crate::observation::Flavor;

/// Two sites, iad the initial primary.
fn spec() -> Layout<'static> {
    Layout { sites: &["iad", "pdx"], initial_active_site: "iad", restoring: None }
}

fn obs(server_id: u32, writable: bool, replication: Option<ReplicationObservation>) -> SiteObservation {
    SiteObservation {
        flavor: Flavor::MariaDb,
        version: "10.11.14-MariaDB".into(),
        server_id,
        server_uuid: String::new(),
        writable,
        gtid_position: "0-1-5".into(),
        gtid_binlog_state: String::new(),
        gtid_slave_pos: String::new(),
        replication,
        semi_sync: None,
    }
}

#[allow(clippy::unnecessary_wraps)] // reads as the Option field it fills
fn from(source: u32, io: bool, sql: bool) -> Option<ReplicationObservation> {
    Some(ReplicationObservation {
        io_running: io,
        io_state: if io { "Yes".into() } else { "No".into() },
        sql_running: sql,
        lag_seconds: Some(0),
        source_server_id: Some(source),
        source_host: "127.0.0.1".into(),
        source_port: 3306,
        last_error: None,
        received_position: None,
        heartbeats: None,
        heartbeat_period_ms: None,
        stall: None,
    })
}

fn ok(site: &str, o: SiteObservation) -> SiteProbe {
    SiteProbe { site: site.into(), outcome: Ok(o) }
}

fn down(site: &str, reason: &'static str) -> SiteProbe {
    SiteProbe {
        site: site.into(),
        outcome: Err(ProbeFailure { reason, message: "connection refused".into(), answered_as: None }),
    }
}

fn status_of(a: &Assessment, t: ConditionType) -> (&str, &str) {
    let c = a.conditions.iter().find(|c| c.type_ == t.as_str()).unwrap();
    (c.status, c.reason)
}

#[test]
fn healthy_pair_bootstraps() {
    let a = assess(
        spec(),
        Decided::Undecided,
        &[ok("iad", obs(1, true, None)), ok("pdx", obs(2, false, from(1, true, true)))],
    );
    assert!(a.bootstrap);
    assert!(a.stable);
    assert_eq!(status_of(&a, ConditionType::Ready), ("True", reason::AS_EXPECTED));
}

#[test]
fn decided_group_does_not_bootstrap_again() {
    let probes = [ok("iad", obs(1, true, None)), ok("pdx", obs(2, false, from(1, true, true)))];
    let a = assess(spec(), Decided::At("iad", 4), &probes);
    assert!(!a.bootstrap);
    assert!(a.stable);
}

#[test]
fn table_of_unhealthy_topologies() {
    // (name, probes, condition expected True/Unknown, its reason, unstableReason)
    // (name, probes, condition expected, its status, its reason, unstableReason)
    type Case = (&'static str, Vec<SiteProbe>, ConditionType, &'static str, &'static str, &'static str);
    let cases: Vec<Case> = vec![
        (
            "stopped SQL thread",
            vec![ok("iad", obs(1, true, None)), ok("pdx", obs(2, false, from(1, true, false)))],
            ConditionType::ReplicationNotRunning,
            "True",
            reason::REPLICATION_STOPPED,
            "ReplicationNotRunning",
        ),
        (
            "replica not configured",
            vec![ok("iad", obs(1, true, None)), ok("pdx", obs(2, false, None))],
            ConditionType::ReplicationNotRunning,
            "True",
            reason::REPLICATION_NOT_CONFIGURED,
            "ReplicationNotRunning",
        ),
        (
            "replica from elsewhere",
            vec![ok("iad", obs(1, true, None)), ok("pdx", obs(2, false, from(9, true, true)))],
            ConditionType::ReplicationNotRunning,
            "True",
            reason::REPLICATING_FROM_ELSEWHERE,
            "ReplicationNotRunning",
        ),
        (
            "replica server down",
            vec![ok("iad", obs(1, true, None)), down("pdx", reason::SITE_UNREACHABLE)],
            ConditionType::Degraded,
            "True",
            reason::SITE_UNREACHABLE,
            "Degraded",
        ),
        (
            "wrong password",
            vec![ok("iad", obs(1, true, None)), down("pdx", reason::AUTHENTICATION_FAILED)],
            ConditionType::Degraded,
            "True",
            reason::AUTHENTICATION_FAILED,
            "Degraded",
        ),
        (
            "two writable sites",
            vec![ok("iad", obs(1, true, None)), ok("pdx", obs(2, true, from(1, true, true)))],
            ConditionType::SplitBrain,
            "True",
            reason::MULTIPLE_WRITABLE_SITES,
            "SplitBrain",
        ),
        (
            "no writable site",
            vec![ok("iad", obs(1, false, None)), ok("pdx", obs(2, false, from(1, true, true)))],
            ConditionType::NoPrimary,
            "True",
            reason::NO_WRITABLE_SITE,
            "NoPrimary",
        ),
        (
            "other site writable",
            vec![ok("iad", obs(1, false, from(2, true, true))), ok("pdx", obs(2, true, None))],
            ConditionType::Degraded,
            "True",
            reason::UNEXPECTED_PRIMARY,
            "Degraded",
        ),
        (
            "nothing reachable: NoPrimary is Unknown, Degraded explains why",
            vec![down("iad", reason::CREDENTIALS_UNAVAILABLE), down("pdx", reason::CREDENTIALS_UNAVAILABLE)],
            ConditionType::NoPrimary,
            "Unknown",
            reason::SITE_UNREACHABLE,
            "Degraded",
        ),
    ];
    for (name, probes, t, status, why, unstable) in cases {
        let a = assess(spec(), Decided::Undecided, &probes);
        assert_eq!(status_of(&a, t), (status, why), "{name}");
        assert!(!a.bootstrap, "{name}: must not bootstrap");
        assert!(!a.stable, "{name}: must not be stable");
        assert_eq!(a.unstable_reason.as_deref(), Some(unstable), "{name}");
        assert_eq!(status_of(&a, ConditionType::Ready).0, "False", "{name}");
        let unstable_type = ConditionType::ALL.iter().find(|t| t.as_str() == unstable).unwrap();
        assert_eq!(
            status_of(&a, ConditionType::Ready).1,
            status_of(&a, *unstable_type).1,
            "{name}: Ready carries the reason"
        );
    }
}

/// Both threads report running, but the replica check found it stalled.
#[test]
fn a_stalled_replica_is_not_running_replication() {
    let stalled =
        from(1, true, true).map(|r| ReplicationObservation { stall: Some("site pdx is stalled".into()), ..r });
    let a = assess(spec(), Decided::At("iad", 1), &[ok("iad", obs(1, true, None)), ok("pdx", obs(2, false, stalled))]);
    assert_eq!(status_of(&a, ConditionType::ReplicationNotRunning), ("True", reason::REPLICATION_STALLED));
    assert_eq!(status_of(&a, ConditionType::Ready), ("False", reason::REPLICATION_STALLED));
    assert!(!a.stable);
    assert_eq!(a.unstable_reason.as_deref(), Some("ReplicationNotRunning"));
}

#[test]
fn an_unobserved_active_site_is_not_reported_as_no_primary() {
    // iad (active) cannot be probed, pdx is read-only: iad may well be writable.
    let a = assess(
        spec(),
        Decided::At("iad", 3),
        &[down("iad", reason::AUTHENTICATION_FAILED), ok("pdx", obs(2, false, from(1, true, true)))],
    );
    assert_eq!(status_of(&a, ConditionType::NoPrimary), ("Unknown", reason::SITE_UNREACHABLE));
    assert_eq!(status_of(&a, ConditionType::Degraded), ("True", reason::AUTHENTICATION_FAILED));
    assert_eq!(status_of(&a, ConditionType::Ready).1, reason::AUTHENTICATION_FAILED);
    assert_eq!(a.unstable_reason.as_deref(), Some("Degraded"));
}

#[test]
fn two_sites_on_one_server_are_not_split_brain() {
    let a = assess(spec(), Decided::Undecided, &[ok("iad", obs(1, true, None)), ok("pdx", obs(1, true, None))]);
    assert_eq!(status_of(&a, ConditionType::Degraded), ("True", reason::DUPLICATE_SERVER_ID));
    assert_eq!(status_of(&a, ConditionType::SplitBrain).0, "Unknown");
    assert_eq!(status_of(&a, ConditionType::ReplicationNotRunning).0, "Unknown");
    assert!(!a.bootstrap);
}

#[test]
fn a_site_a_restore_writes_is_no_split_brain_and_is_named() {
    let probes = [ok("iad", obs(1, true, None)), ok("pdx", obs(2, true, None))];
    let a = assess(spec(), Decided::At("iad", 1), &probes);
    assert_eq!(status_of(&a, ConditionType::SplitBrain), ("True", reason::MULTIPLE_WRITABLE_SITES));
    let restoring = Layout { restoring: Some("pdx"), ..spec() };
    let a = assess(restoring, Decided::At("iad", 1), &probes);
    assert_eq!(status_of(&a, ConditionType::SplitBrain), ("False", reason::AS_EXPECTED));
    let c = a.conditions.iter().find(|c| c.type_ == "SplitBrain").unwrap();
    assert!(c.message.contains("pdx is writable too, and a restore-in-place's Job restores it"), "{}", c.message);
    // Another site writable beside the primary still is one.
    let a = assess(Layout { restoring: Some("iad"), ..spec() }, Decided::At("pdx", 2), &probes);
    assert_eq!(status_of(&a, ConditionType::SplitBrain).0, "False", "the restoring site is the only other");
}

#[test]
fn lag_alone_never_makes_a_group_unstable() {
    let mut r = from(1, true, true);
    if let Some(r) = r.as_mut() {
        r.lag_seconds = Some(86_400);
    }
    let a = assess(spec(), Decided::At("iad", 1), &[ok("iad", obs(1, true, None)), ok("pdx", obs(2, false, r))]);
    assert!(a.stable);
}

#[test]
fn half_written_status_is_never_rebootstrapped() {
    let a = assess(
        spec(),
        Decided::Invalid("status was edited by hand"),
        &[ok("iad", obs(1, true, None)), ok("pdx", obs(2, false, from(1, true, true)))],
    );
    assert!(!a.bootstrap);
    assert_eq!(status_of(&a, ConditionType::Ready), ("False", reason::INVALID_STATUS));
    assert_eq!(a.unstable_reason.as_deref(), Some("Degraded"));
}

fn arb_probe(site: &'static str) -> impl Strategy<Value = SiteProbe> {
    let replication =
        prop_oneof![Just(None), (1u32..4, any::<bool>(), any::<bool>()).prop_map(|(src, io, sql)| from(src, io, sql)),];
    prop_oneof![
        1 => Just(down(site, reason::SITE_UNREACHABLE)),
        4 => (1u32..4, any::<bool>(), replication).prop_map(move |(id, w, r)| ok(site, obs(id, w, r))),
    ]
}

proptest! {
    /// Bootstrap is only ever allowed for the exact healthy shape: the
    /// designated site alone writable and the other replicating from it.
    #[test]
    fn bootstrap_only_for_the_healthy_shape(iad in arb_probe("iad"), pdx in arb_probe("pdx")) {
        let a = assess(spec(), Decided::Undecided, &[iad.clone(), pdx.clone()]);
        if a.bootstrap {
            let iad = iad.outcome.unwrap();
            let pdx = pdx.outcome.unwrap();
            prop_assert!(iad.writable);
            prop_assert!(!pdx.writable);
            let r = pdx.replication.unwrap();
            prop_assert!(r.running());
            prop_assert_eq!(r.source_server_id, Some(iad.server_id));
        }
    }

    /// Stable implies Ready, exactly one writable site, and every site reachable.
    #[test]
    fn stable_implies_one_reachable_primary(iad in arb_probe("iad"), pdx in arb_probe("pdx"), decided in any::<bool>()) {
        let probes = [iad, pdx];
        let d = if decided { Decided::At("iad", 1) } else { Decided::Undecided };
        let a = assess(spec(), d, &probes);
        if a.stable {
            prop_assert_eq!(status_of(&a, ConditionType::Ready).0, "True");
            prop_assert!(probes.iter().all(|p| p.outcome.is_ok()));
            prop_assert_eq!(probes.iter().filter(|p| p.outcome.as_ref().is_ok_and(|o| o.writable)).count(), 1);
        }
        prop_assert_eq!(a.stable, a.unstable_reason.is_none());
    }
}

/// A site the operator cannot log in to or reach may be writable: with the
/// other site writable, SplitBrain is Unknown, not False (found by an
/// attack: a wrong password on the active site's Secret hid two writable
/// sites behind "at most one site is writable").
#[test]
fn split_brain_is_unknown_while_a_site_is_not_observed() {
    for reason in [reason::AUTHENTICATION_FAILED, reason::SITE_UNREACHABLE, reason::CREDENTIALS_UNAVAILABLE] {
        let a = assess(spec(), Decided::At("pdx", 2), &[down("iad", reason), ok("pdx", obs(2, true, None))]);
        assert_eq!(status_of(&a, ConditionType::SplitBrain), ("Unknown", reason::SITE_UNREACHABLE), "{reason}");
        assert!(!a.stable);
    }
    // Nothing writable among the observed: no split brain to suspect.
    let a =
        assess(spec(), Decided::At("pdx", 2), &[down("iad", reason::SITE_UNREACHABLE), ok("pdx", obs(2, false, None))]);
    assert_eq!(status_of(&a, ConditionType::SplitBrain).0, "False");
}
