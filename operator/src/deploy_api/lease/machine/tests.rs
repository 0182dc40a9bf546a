use bloodraven_api::deploy::LeaseKind;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use proptest::prelude::*;

use super::*;

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).unwrap()
}

fn stable(generation: i64) -> GroupFacts {
    GroupFacts { generation: Some(generation), unstable_reason: None }
}

fn grant_of<T: std::fmt::Debug>(o: &Outcome<T>) -> &T {
    o.answer.as_ref().unwrap()
}

#[test]
fn the_seed_flow_migration_then_hold_then_release() {
    let s0 = Slots::default();
    let m = create(&s0, None, &stable(17), LeaseKind::Migration, "op1", "counter-app", 30, "h1", t(0));
    assert!(grant_of(&m).created);
    assert_eq!(grant_of(&m).grant.generation, 17);
    let h = create(&m.slots, None, &stable(17), LeaseKind::FailoverHold, "op1", "counter-app", 30, "h2", t(1));
    assert!(grant_of(&h).created);
    let r = renew(&h.slots, None, &stable(17), LeaseKind::FailoverHold, "op1", "h2", None, t(10));
    assert_eq!(grant_of(&r).expires_at(), t(40));
    let rel = release(&r.slots, None, LeaseKind::Migration, "op1", "h1", t(11));
    assert!(rel.answer.is_ok());
    assert_eq!(rel.slots, Slots::default(), "releasing the mutex releases that operation's hold");
}

#[test]
fn refusals() {
    let s = create(&Slots::default(), None, &stable(3), LeaseKind::Migration, "op1", "app", 30, "h1", t(0)).slots;
    // Another operation: held, with the holder.
    let other = create(&s, None, &stable(3), LeaseKind::Migration, "op2", "app", 30, "x", t(1));
    assert!(
        matches!(&other.answer, Err(Refusal::Held(h)) if h.operation_id == "op1" && h.expires_at == t(30).to_string())
    );
    // A hold without the mutex (or for another instance): forbidden.
    let hold = create(&s, None, &stable(3), LeaseKind::FailoverHold, "op2", "app", 30, "x", t(1));
    assert!(matches!(hold.answer, Err(Refusal::Forbidden(_))));
    let hold = create(&s, None, &stable(3), LeaseKind::FailoverHold, "op1", "other-app", 30, "x", t(1));
    assert!(matches!(hold.answer, Err(Refusal::Forbidden(_))));
    // Wrong token; expired; unstable (no extension).
    assert_eq!(
        renew(&s, None, &stable(3), LeaseKind::Migration, "op1", "nope", None, t(1)).answer,
        Err(Refusal::TokenMismatch)
    );
    assert_eq!(
        renew(&s, None, &stable(3), LeaseKind::Migration, "op1", "h1", None, t(30)).answer,
        Err(Refusal::Expired)
    );
    let unstable = GroupFacts { generation: Some(3), unstable_reason: Some("Degraded".into()) };
    let u = renew(&s, None, &unstable, LeaseKind::Migration, "op1", "h1", None, t(5));
    assert!(matches!(u.answer, Err(Refusal::Unstable { .. })));
    assert_eq!(u.slots, s, "423 never moves the deadline");
    // Before bootstrap: unstable.
    let none = GroupFacts { generation: None, unstable_reason: None };
    assert!(matches!(
        create(&Slots::default(), None, &none, LeaseKind::Migration, "op", "app", 30, "h", t(0)).answer,
        Err(Refusal::Unstable { .. })
    ));
}

#[test]
fn a_generation_change_revokes_and_the_tombstone_answers_forever() {
    let s = create(&Slots::default(), None, &stable(3), LeaseKind::Migration, "op1", "app", 30, "h1", t(0)).slots;
    let r = renew(&s, None, &stable(4), LeaseKind::Migration, "op1", "h1", Some(DdlState::Started), t(5));
    let Err(Refusal::Revoked(tomb)) = &r.answer else { panic!("{:?}", r.answer) };
    assert_eq!((tomb.reason, tomb.generation), (RevokeReason::TopologyChanged, 4));
    assert_eq!(tomb.token_sha256, "h1");
    assert_eq!(r.slots.migration, None);
    assert_eq!(r.new_tombstones.len(), 1);
    // Another operation takes the mutex; the revoked one retries its POST.
    let s2 = create(&r.slots, None, &stable(4), LeaseKind::Migration, "op2", "app", 30, "h2", t(6)).slots;
    let retry = create(&s2, Some(tomb), &stable(4), LeaseKind::Migration, "op1", "app", 30, "h3", t(7));
    assert!(matches!(retry.answer, Err(Refusal::Revoked(_))));
}

#[test]
fn a_repeat_post_rotates_the_token() {
    let s = create(&Slots::default(), None, &stable(1), LeaseKind::Migration, "op1", "app", 30, "old", t(0)).slots;
    let again = create(&s, None, &stable(1), LeaseKind::Migration, "op1", "app", 60, "new", t(10));
    assert!(!grant_of(&again).created, "200, not 201");
    assert_eq!(
        renew(&again.slots, None, &stable(1), LeaseKind::Migration, "op1", "old", None, t(11)).answer,
        Err(Refusal::TokenMismatch)
    );
    assert!(renew(&again.slots, None, &stable(1), LeaseKind::Migration, "op1", "new", None, t(11)).answer.is_ok());
}

#[test]
fn operator_revocation_revokes_every_live_grant() {
    let s = create(&Slots::default(), None, &stable(2), LeaseKind::Migration, "op1", "app", 30, "h1", t(0)).slots;
    let s = create(&s, None, &stable(2), LeaseKind::FailoverHold, "op1", "app", 30, "h2", t(0)).slots;
    let (cleared, tombs) = revoke(&s, RevokeReason::OperatorRevoked, 2, t(1));
    assert_eq!(cleared, Slots::default());
    assert_eq!(tombs.len(), 1, "one tombstone per operation");
    assert_eq!(tombs[0].reason, RevokeReason::OperatorRevoked);
}

/// One step a client (or the operator) may take.
#[derive(Clone, Debug)]
enum Step {
    Post(LeaseKind, u8, u32),
    Renew(LeaseKind, u8, bool),
    Release(LeaseKind, u8, bool),
    Advance(u32),
    BumpGeneration,
    OperatorRevoke,
    Unstable(bool),
}

fn kind() -> impl Strategy<Value = LeaseKind> {
    prop_oneof![Just(LeaseKind::Migration), Just(LeaseKind::FailoverHold)]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (kind(), 0u8..3, 0u32..200).prop_map(|(k, op, ttl)| Step::Post(k, op, ttl)),
        4 => (kind(), 0u8..3, any::<bool>()).prop_map(|(k, op, good)| Step::Renew(k, op, good)),
        2 => (kind(), 0u8..3, any::<bool>()).prop_map(|(k, op, good)| Step::Release(k, op, good)),
        3 => (0u32..150).prop_map(Step::Advance),
        1 => Just(Step::BumpGeneration),
        1 => Just(Step::OperatorRevoke),
        1 => any::<bool>().prop_map(Step::Unstable),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Drives random histories and checks the invariants of the module header.
    #[test]
    fn invariants_hold_over_any_history(steps in proptest::collection::vec(step(), 1..60)) {
        let mut slots = Slots::default();
        let mut tombs: Vec<Tombstone> = Vec::new();
        let mut facts = stable(1);
        let mut now = t(0);
        let mut tokens: std::collections::HashMap<(LeaseKind, String), String> = std::collections::HashMap::new();
        let mut counter = 0u32;
        for s in steps {
            match s {
                Step::Post(kind, op, ttl) => {
                    let op = format!("op{op}");
                    counter += 1;
                    let token = format!("tok{counter}");
                    let tomb = tombs.iter().find(|t| t.operation_id == op).cloned();
                    let before = slots.clone();
                    let o = create(&slots, tomb.as_ref(), &facts, kind, &op, "app", ttl, &token, now);
                    if let Ok(g) = &o.answer {
                        // 3: never granted already expired, TTL clamped.
                        prop_assert!(g.grant.live(now));
                        prop_assert!((5..=120).contains(&g.grant.ttl_seconds));
                        // 2: a hold only for the live migration holder.
                        if kind == LeaseKind::FailoverHold {
                            let m = o.slots.migration.as_ref().unwrap();
                            prop_assert!(m.live(now) && m.operation_id == op);
                        }
                        // 1: a live migration of another op is never replaced.
                        if kind == LeaseKind::Migration
                            && let Some(prev) = before.migration.as_ref().filter(|p| p.live(now) && p.generation == facts.generation.unwrap_or(0))
                        {
                            prop_assert_eq!(&prev.operation_id, &op);
                        }
                        // 6: the new token replaces the old one.
                        tokens.insert((kind, op.clone()), token);
                    }
                    // 4: a revoked op stays revoked.
                    if tomb.is_some() { prop_assert!(matches!(o.answer, Err(Refusal::Revoked(_)))); }
                    tombs.extend(o.new_tombstones.clone());
                    slots = o.slots;
                }
                Step::Renew(kind, op, good) => {
                    let op = format!("op{op}");
                    let token = if good { tokens.get(&(kind, op.clone())).cloned().unwrap_or_default() } else { "forged".into() };
                    let tomb = tombs.iter().find(|t| t.operation_id == op).cloned();
                    let before = slots.clone();
                    let o = renew(&slots, tomb.as_ref(), &facts, kind, &op, &token, None, now);
                    match &o.answer {
                        Ok(g) => {
                            // 5: only with the current token, live, same generation, stable.
                            prop_assert!(good);
                            prop_assert!(before.get(kind).is_some_and(|b| b.live(now) && b.token_sha256 == token));
                            prop_assert_eq!(Some(g.generation), facts.generation);
                            prop_assert!(facts.unstable_reason.is_none());
                        }
                        Err(Refusal::Unstable { .. }) => prop_assert_eq!(&o.slots, &before),
                        Err(_) => {}
                    }
                    if tomb.is_some() { prop_assert!(matches!(o.answer, Err(Refusal::Revoked(_)))); }
                    tombs.extend(o.new_tombstones.clone());
                    slots = o.slots;
                }
                Step::Release(kind, op, good) => {
                    let op = format!("op{op}");
                    let token = if good { tokens.get(&(kind, op.clone())).cloned().unwrap_or_default() } else { "forged".into() };
                    let tomb = tombs.iter().find(|t| t.operation_id == op).cloned();
                    let o = release(&slots, tomb.as_ref(), kind, &op, &token, now);
                    if o.answer.is_ok() { prop_assert!(good); prop_assert!(o.slots.get(kind).is_none()); }
                    if tomb.is_some() { prop_assert!(matches!(o.answer, Err(Refusal::Revoked(_)))); }
                    slots = o.slots;
                }
                Step::Advance(secs) => now = now.saturating_add(SignedDuration::from_secs(i64::from(secs))).unwrap(),
                Step::BumpGeneration => {
                    let g = facts.generation.unwrap_or(0) + 1;
                    facts.generation = Some(g);
                    let (s, t) = revoke(&slots, RevokeReason::TopologyChanged, g, now);
                    slots = s;
                    tombs.extend(t);
                }
                Step::OperatorRevoke => {
                    let (s, t) = revoke(&slots, RevokeReason::OperatorRevoked, facts.generation.unwrap_or(0), now);
                    slots = s;
                    tombs.extend(t);
                }
                Step::Unstable(on) => facts.unstable_reason = on.then(|| "Degraded".to_owned()),
            }
            // 1 and 2 over the state itself: a live hold belongs to the live migration holder's op
            // (or to an op whose mutex has since lapsed; never to a revoked op).
            if let Some(h) = slots.hold.as_ref().filter(|h| h.live(now)) {
                prop_assert!(!tombs.iter().any(|t| t.operation_id == h.operation_id && t.token_sha256 == h.token_sha256));
            }
        }
    }
}
