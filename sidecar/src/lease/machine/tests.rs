//! Tables for the acquisition and renewal answers, and property tests of
//! the heartbeat's invariants (module header of `machine.rs`).

use proptest::prelude::*;

use super::*;

fn timing() -> Timing {
    Timing::new(30, 5_000, 10_000).unwrap()
}

fn holder() -> HolderInfo {
    HolderInfo {
        operation_id: "op-a".into(),
        instance: "counter-app".into(),
        expires_at: "2030-01-01T00:00:00Z".into(),
    }
}

const POLICY: AcquirePolicy = AcquirePolicy { started: 0, timeout: 600_000, poll: 1_000 };

#[test]
fn timing_margin() {
    // (ttl s, timeout ms, grace ms, accepted)
    for (ttl, timeout, grace, ok) in [
        (30, 5_000, 10_000, true),
        (120, 5_000, 10_000, true),
        (5, 1_000, 1_000, true),
        (5, 5_000, 10_000, false),
        (30, 5_000, 14_000, true),  // 10 + 5 + 14 = 29: exactly 1 s left
        (30, 5_000, 14_001, false), // one ms less than MIN_MARGIN_MS
        (4, 100, 100, false),
        (121, 100, 100, false),
    ] {
        assert_eq!(Timing::new(ttl, timeout, grace).is_ok(), ok, "ttl {ttl} timeout {timeout} grace {grace}");
    }
    assert_eq!(Timing::new(30, 0, 0), Err(TimingError::ZeroTimeout));
}

#[test]
fn acquisition_table() {
    let k = LeaseKind::Migration;
    let step = |a: &PostAnswer, now| after_post(k, a, now, &POLICY, 0.0, None);
    assert_eq!(
        step(&PostAnswer::Granted { generation: 3, ttl_seconds: 30 }, 10),
        AcquireStep::Granted { generation: 3, ttl_seconds: 30 }
    );
    // Held: the earlier of the holder's expiry and one poll interval.
    assert_eq!(step(&PostAnswer::Held { holder: holder(), until_expiry: 400 }, 10), AcquireStep::RetryAt(410));
    assert_eq!(step(&PostAnswer::Held { holder: holder(), until_expiry: 25_000 }, 10), AcquireStep::RetryAt(1_010));
    assert_eq!(step(&PostAnswer::Held { holder: holder(), until_expiry: 0 }, 10), AcquireStep::RetryAt(110));
    assert_eq!(
        step(&PostAnswer::Unstable { retry_after_seconds: 5, message: String::new() }, 10),
        AcquireStep::RetryAt(5_010)
    );
    assert_eq!(step(&PostAnswer::Failed { what: "timeout".into() }, 10), AcquireStep::RetryAt(1_010));
    assert!(matches!(
        step(&PostAnswer::Revoked { reason: "TopologyChanged".into() }, 10),
        AcquireStep::GiveUp(GiveUp::Revoked { .. })
    ));
    // 401/403/404 are asked again while authorization may still settle, then final; 400 at once.
    let refused = PostAnswer::Refused { status: 403, code: "forbidden".into(), message: "m".into() };
    assert_eq!(step(&refused, 10), AcquireStep::RetryAt(1_010));
    assert!(matches!(step(&refused, REFUSAL_SETTLE_MS), AcquireStep::GiveUp(GiveUp::Refused { status: 403, .. })));
    let bad = PostAnswer::Refused { status: 400, code: "invalid_request".into(), message: "m".into() };
    assert!(matches!(step(&bad, 10), AcquireStep::GiveUp(GiveUp::Refused { status: 400, .. })));
    // Never past the acquire timeout; at it, give up naming the holder.
    assert_eq!(
        step(&PostAnswer::Held { holder: holder(), until_expiry: 5_000 }, 599_500),
        AcquireStep::RetryAt(600_000)
    );
    match step(&PostAnswer::Held { holder: holder(), until_expiry: 5_000 }, 600_000) {
        AcquireStep::GiveUp(g @ GiveUp::Timeout { holder: Some(_), .. }) => {
            let text = g.to_string();
            assert!(text.contains("op-a") && text.contains("counter-app"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    // A timeout after other answers still names the last holder seen.
    match after_post(k, &PostAnswer::Failed { what: "x".into() }, 700_000, &POLICY, 0.5, Some(&holder())) {
        AcquireStep::GiveUp(GiveUp::Timeout { holder: Some(h), .. }) => assert_eq!(h, holder()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn renewal_table() {
    let t = timing();
    let fresh = || {
        let mut hb = Heartbeat::new(t);
        hb.granted(LeaseKind::Migration, 0, 7, 30);
        hb.granted(LeaseKind::FailoverHold, 100, 7, 30);
        hb
    };
    // Deadline: the earlier grant's send time + ttl − grace.
    assert_eq!(fresh().deadline(), Some(20_000));
    let cases: Vec<(RenewAnswer, Option<&str>)> = vec![
        (RenewAnswer::Renewed { generation: 7 }, None),
        (RenewAnswer::Renewed { generation: 8 }, Some("generation_changed")),
        (RenewAnswer::Revoked { reason: "TopologyChanged".into(), generation: Some(8) }, Some("revoked")),
        (RenewAnswer::Expired, Some("expired")),
        (RenewAnswer::TokenMismatch, Some("token_mismatch")),
        (RenewAnswer::Forbidden { message: "m".into() }, Some("forbidden")),
        (RenewAnswer::Unstable { retry_after_seconds: 2 }, None),
        (RenewAnswer::Failed { what: "timeout".into() }, None),
    ];
    for (answer, fence) in cases {
        let mut hb = fresh();
        assert_eq!(hb.due(10_000), vec![LeaseKind::Migration]);
        let got = hb.renewed(LeaseKind::Migration, 10_000, &answer, 10_050).map(FenceReason::code);
        assert_eq!(got, fence, "{answer:?}");
        let deadline = hb.deadline();
        match answer {
            // Only an acknowledged renewal moves the migration's expiry (the hold's stays the earlier).
            RenewAnswer::Renewed { generation: 7 } => {
                assert_eq!(hb.clock(LeaseKind::Migration).unwrap().confirmed_until, 40_000);
                assert_eq!(deadline, Some(20_100));
            }
            _ => assert_eq!(deadline, Some(20_000), "{answer:?}"),
        }
    }
}

#[test]
fn a_hold_granted_at_another_generation_fences() {
    let mut hb = Heartbeat::new(timing());
    hb.granted(LeaseKind::Migration, 0, 7, 30);
    hb.granted(LeaseKind::FailoverHold, 50, 8, 30);
    assert_eq!(hb.fenced().map(FenceReason::code), Some("generation_changed"));
}

#[test]
fn a_stopped_sidecar_fences_on_its_first_tick_after_the_deadline() {
    let mut hb = Heartbeat::new(timing());
    hb.granted(LeaseKind::Migration, 0, 7, 30);
    hb.granted(LeaseKind::FailoverHold, 0, 7, 30);
    // SIGSTOP from 1 s to 60 s: the first thing it does at 60 s is tick.
    assert!(hb.tick(1_000).is_none());
    assert_eq!(hb.due(60_000), Vec::<LeaseKind>::new(), "no renewal once past the deadline");
    assert_eq!(hb.fenced(), Some(&FenceReason::DeadlinePassed));
    // A late 200 does not bring it back.
    assert!(hb.renewed(LeaseKind::Migration, 60_000, &RenewAnswer::Renewed { generation: 7 }, 60_010).is_some());
}

/// One step of a random run.
#[derive(Clone, Debug)]
enum Step {
    Wait(Millis),
    Answer(bool, RenewAnswer, Millis),
    Nudge,
}

fn answer() -> impl Strategy<Value = RenewAnswer> {
    prop_oneof![
        6 => (6i64..9).prop_map(|g| RenewAnswer::Renewed { generation: g }),
        1 => Just(RenewAnswer::Expired),
        1 => Just(RenewAnswer::TokenMismatch),
        1 => Just(RenewAnswer::Revoked { reason: "OperatorRevoked".into(), generation: None }),
        2 => (1u32..10).prop_map(|s| RenewAnswer::Unstable { retry_after_seconds: s }),
        2 => Just(RenewAnswer::Failed { what: "x".into() }),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0u64..15_000).prop_map(Step::Wait),
        (any::<bool>(), answer(), 0u64..6_000).prop_map(|(m, a, d)| Step::Answer(m, a, d)),
        Just(Step::Nudge),
    ]
}

proptest! {
    #[test]
    fn heartbeat_invariants(ttl in 5u64..=120, steps in proptest::collection::vec(step(), 1..60)) {
        let grace = (ttl * 1000 / 6).min(10_000);
        let timeout = (ttl * 1000 / 6).min(5_000);
        let t = Timing::new(ttl, timeout, grace).unwrap();
        let mut hb = Heartbeat::new(t);
        hb.granted(LeaseKind::Migration, 0, 7, ttl as u32);
        hb.granted(LeaseKind::FailoverHold, 0, 7, ttl as u32);
        let mut now: Millis = 0;
        // Send times of renewals in flight, per lease.
        let mut in_flight: [Option<Millis>; 2] = [None, None];
        // Latest send time of an acknowledged renewal at the grant's generation.
        let mut acked = [0u64; 2];
        let mut was_fenced = false;
        for st in steps {
            match st {
                Step::Wait(d) => now += d,
                Step::Nudge => hb.renew_now(now),
                Step::Answer(migration, a, delay) => {
                    let i = usize::from(!migration);
                    let kind = if migration { LeaseKind::Migration } else { LeaseKind::FailoverHold };
                    if let Some(sent) = in_flight[i].take() {
                        now = now.max(sent) + delay;
                        let fenced_before = hb.fenced().is_some();
                        let deadline_before = hb.deadline();
                        hb.renewed(kind, sent, &a, now);
                        if !fenced_before && a == (RenewAnswer::Renewed { generation: 7 }) {
                            acked[i] = acked[i].max(sent);
                            // Invariant 4: the renewal due next and a whole timeout fit before the deadline.
                            if hb.fenced().is_none() {
                                let c = hb.clock(kind).unwrap();
                                prop_assert!(sent + t.interval + t.request_timeout < c.confirmed_until - t.grace);
                                prop_assert!(c.next_renewal >= sent + t.interval);
                            }
                        } else if !matches!(a, RenewAnswer::Renewed { generation: 7 }) {
                            // Invariant 2: nothing else moves the deadline.
                            prop_assert!(hb.fenced().is_some() || hb.deadline() == deadline_before);
                        }
                        if let RenewAnswer::Renewed { generation } = a && generation != 7 {
                            prop_assert!(hb.fenced().is_some(), "a generation change always fences");
                        }
                    }
                }
            }
            for kind in hb.due(now) {
                let i = usize::from(kind != LeaseKind::Migration);
                prop_assert!(in_flight[i].is_none(), "one renewal in flight per lease");
                in_flight[i] = Some(now);
            }
            // Invariant 2: the deadline is exactly the acknowledged send times + ttl − grace.
            let expected = acked.iter().map(|a| a + t.ttl - t.grace).min();
            prop_assert!(hb.fenced().is_some() || hb.deadline() == expected);
            // Invariant 3: not fenced at now means now is before the deadline.
            if hb.fenced().is_none() {
                prop_assert!(now < hb.deadline().unwrap());
                prop_assert_eq!(hb.remaining(now), hb.deadline().unwrap() - now);
            }
            // Invariant 1: absorbing.
            if was_fenced {
                prop_assert!(hb.fenced().is_some());
                prop_assert!(hb.due(now + 1_000_000).is_empty());
                prop_assert_eq!(hb.next_wake(), None);
                prop_assert_eq!(hb.remaining(now), 0);
            }
            was_fenced = hb.fenced().is_some();
        }
    }

    #[test]
    fn acquisition_never_waits_past_the_timeout(
        now in 0u64..700_000,
        until_expiry in 0u64..200_000,
        retry in 0u32..200,
        jitter in 0.0f64..1.0,
        which in 0u8..3,
    ) {
        let answer = match which {
            0 => PostAnswer::Held { holder: holder(), until_expiry },
            1 => PostAnswer::Unstable { retry_after_seconds: retry, message: String::new() },
            _ => PostAnswer::Failed { what: "x".into() },
        };
        match after_post(LeaseKind::Migration, &answer, now, &POLICY, jitter, None) {
            AcquireStep::RetryAt(at) => {
                prop_assert!(now < POLICY.timeout);
                prop_assert!(at > now && at <= POLICY.timeout);
                if which == 0 {
                    // A release is noticed within about a poll interval.
                    prop_assert!(at - now <= POLICY.poll + 250);
                }
            }
            AcquireStep::GiveUp(GiveUp::Timeout { .. }) => prop_assert!(now >= POLICY.timeout),
            other => prop_assert!(false, "{other:?}"),
        }
    }
}
