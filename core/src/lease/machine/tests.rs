use bloodraven_api::deploy::LeaseKind;
use jiff::{SignedDuration, Timestamp};
use proptest::prelude::*;

use super::*;

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).unwrap()
}

fn stable(generation: i64) -> GroupFacts {
    GroupFacts { generation: Some(generation), unstable_reason: None, deferring: false }
}

fn grant_of<T: std::fmt::Debug>(o: &Outcome<T>) -> &T {
    o.answer.as_ref().unwrap()
}

/// The client every test grant is made to unless a test says otherwise.
const CLIENT: &str = "ci/deployer";

fn instances() -> &'static std::collections::BTreeSet<String> {
    static SET: std::sync::OnceLock<std::collections::BTreeSet<String>> = std::sync::OnceLock::new();
    SET.get_or_init(|| ["app", "counter-app", "other-app"].iter().map(|s| (*s).to_owned()).collect())
}

fn actor(client: &str) -> Actor<'_> {
    Actor { client, instances: instances() }
}

#[allow(clippy::too_many_arguments)]
fn post(
    slots: &Slots,
    tomb: Option<&Tombstone>,
    facts: &GroupFacts,
    kind: LeaseKind,
    operation_id: &str,
    instance: &str,
    ttl_seconds: u32,
    token_sha256: &str,
    now: Timestamp,
) -> Outcome<Granted> {
    post_as(CLIENT, slots, tomb, facts, kind, operation_id, instance, ttl_seconds, token_sha256, now)
}

#[allow(clippy::too_many_arguments)]
fn post_as(
    client: &str,
    slots: &Slots,
    tomb: Option<&Tombstone>,
    facts: &GroupFacts,
    kind: LeaseKind,
    operation_id: &str,
    instance: &str,
    ttl_seconds: u32,
    token_sha256: &str,
    now: Timestamp,
) -> Outcome<Granted> {
    let req = CreateRequest { kind, operation_id, instance, ttl_seconds, client, token_sha256, awaiting: &[] };
    create(slots, tomb, facts, &req, now)
}

#[allow(clippy::too_many_arguments)]
fn put(
    slots: &Slots,
    tomb: Option<&Tombstone>,
    facts: &GroupFacts,
    kind: LeaseKind,
    operation_id: &str,
    token_sha256: &str,
    ddl: Option<DdlState>,
    now: Timestamp,
) -> Outcome<Grant> {
    renew(
        slots,
        tomb,
        facts,
        kind,
        operation_id,
        &actor(CLIENT),
        token_sha256,
        &Progress { ddl_state: ddl, revision: None },
        now,
    )
}

fn delete(
    slots: &Slots,
    tomb: Option<&Tombstone>,
    kind: LeaseKind,
    operation_id: &str,
    token_sha256: &str,
    now: Timestamp,
) -> Outcome<Grant> {
    release(slots, tomb, kind, operation_id, &actor(CLIENT), token_sha256, 1, now)
}

/// A schema left mid-DDL needs a person before any new migration of its
/// instance: a record stored before, or one this request's own sweep makes
/// (the last holder lapsed inside DDL), refuses a new mutex for that
/// instance, with the record; other instances, and a repeat of a live
/// grant, are not refused.
#[test]
fn a_new_migration_of_an_instance_whose_schema_awaits_verification_is_refused() {
    let s0 = Slots::default();
    let stored = [Verification {
        operation_id: "op0".into(),
        instance: "app".into(),
        revision: Some("7".into()),
        ending: Ending::Revoked(RevokeReason::OperatorRevoked),
        generation: 3,
        client: Some(CLIENT.into()),
    }];
    let ask = |slots: &Slots, op: &str, instance: &str, awaiting: &[Verification], now| {
        let req = CreateRequest {
            kind: LeaseKind::Migration,
            operation_id: op,
            instance,
            ttl_seconds: 30,
            client: CLIENT,
            token_sha256: "h",
            awaiting,
        };
        create(slots, None, &stable(3), &req, now)
    };
    match ask(&s0, "op1", "app", &stored, t(0)).answer {
        Err(Refusal::VerificationRequired(v)) => {
            assert_eq!((v.operation_id.as_str(), v.instance.as_str()), ("op0", "app"));
        }
        other => panic!("{other:?}"),
    }
    assert!(ask(&s0, "op1", "other-app", &stored, t(0)).answer.is_ok(), "another instance");
    // A live grant taken before the record (an upgrade) is not cut off by a repeat.
    let live = ask(&s0, "op1", "app", &[], t(0)).slots;
    assert!(ask(&live, "op1", "app", &stored, t(1)).answer.is_ok(), "a repeat of a live grant");
    // The holder lapses after reporting `started`: the sweep's record refuses at once.
    let report = Progress { ddl_state: Some(DdlState::Started), revision: Some("8".into()) };
    let started = renew(&live, None, &stable(3), LeaseKind::Migration, "op1", &actor(CLIENT), "h", &report, t(1)).slots;
    let out = ask(&started, "op2", "app", &[], t(100));
    assert_eq!(out.verifications.len(), 1, "the lapse is recorded");
    match out.answer {
        Err(Refusal::VerificationRequired(v)) => assert_eq!(v.operation_id, "op1"),
        other => panic!("{other:?}"),
    }
}

/// A run that ends inside its DDL reports `started` and releases its mutex
/// (the migration failed, or Helm deleted its Job): a verification record
/// with its revision, never a silent release. `completed` or `failed`
/// before the DDL release without one.
#[test]
fn releasing_a_mutex_whose_ddl_started_keeps_a_verification_record() {
    let s0 = Slots::default();
    for (ddl, recorded) in [(DdlState::Started, true), (DdlState::Completed, false), (DdlState::Failed, false)] {
        let s = post(&s0, None, &stable(3), LeaseKind::Migration, "op1", "app", 30, "h1", t(0)).slots;
        let report = Progress { ddl_state: Some(ddl), revision: Some("4".into()) };
        let s = renew(&s, None, &stable(3), LeaseKind::Migration, "op1", &actor(CLIENT), "h1", &report, t(1)).slots;
        let out = delete(&s, None, LeaseKind::Migration, "op1", "h1", t(2));
        assert!(out.answer.is_ok(), "{ddl:?}");
        assert!(out.slots.migration.is_none());
        if recorded {
            assert_eq!(out.verifications.len(), 1, "{ddl:?}");
            let v = &out.verifications[0];
            assert_eq!(
                (v.ending, v.revision.as_deref(), v.operation_id.as_str()),
                (Ending::Released, Some("4"), "op1")
            );
            assert_eq!(Ending::parse(v.ending.as_str()), Some(Ending::Released));
        } else {
            assert!(out.verifications.is_empty(), "{ddl:?}");
        }
    }
}

#[test]
fn the_seed_flow_migration_then_hold_then_release() {
    let s0 = Slots::default();
    let m = post(&s0, None, &stable(17), LeaseKind::Migration, "op1", "counter-app", 30, "h1", t(0));
    assert!(grant_of(&m).created);
    assert_eq!(grant_of(&m).grant.generation, 17);
    let h = post(&m.slots, None, &stable(17), LeaseKind::FailoverHold, "op1", "counter-app", 30, "h2", t(1));
    assert!(grant_of(&h).created);
    let r = put(&h.slots, None, &stable(17), LeaseKind::FailoverHold, "op1", "h2", None, t(10));
    assert_eq!(grant_of(&r).expires_at(), t(40));
    let rel = delete(&r.slots, None, LeaseKind::Migration, "op1", "h1", t(11));
    assert!(rel.answer.is_ok());
    assert_eq!(rel.slots, Slots::default(), "releasing the mutex releases that operation's hold");
}

#[test]
fn refusals() {
    let s = post(&Slots::default(), None, &stable(3), LeaseKind::Migration, "op1", "app", 30, "h1", t(0)).slots;
    // Another operation: held, with the holder.
    let other = post(&s, None, &stable(3), LeaseKind::Migration, "op2", "app", 30, "x", t(1));
    assert!(
        matches!(&other.answer, Err(Refusal::Held { kind: LeaseKind::Migration, holder: h }) if h.operation_id == "op1" && h.expires_at == t(30).to_string())
    );
    // A hold without the mutex (or for another instance): forbidden.
    let hold = post(&s, None, &stable(3), LeaseKind::FailoverHold, "op2", "app", 30, "x", t(1));
    assert!(matches!(hold.answer, Err(Refusal::Forbidden(_))));
    let hold = post(&s, None, &stable(3), LeaseKind::FailoverHold, "op1", "other-app", 30, "x", t(1));
    assert!(matches!(hold.answer, Err(Refusal::Forbidden(_))));
    // Wrong token; expired; unstable (no extension).
    assert_eq!(
        put(&s, None, &stable(3), LeaseKind::Migration, "op1", "nope", None, t(1)).answer,
        Err(Refusal::TokenMismatch)
    );
    assert!(matches!(
        put(&s, None, &stable(3), LeaseKind::Migration, "op1", "h1", None, t(30)).answer,
        Err(Refusal::Expired(Absence { lapsed_at: Some(_), .. }))
    ));
    let unstable = GroupFacts { generation: Some(3), unstable_reason: Some("Degraded".into()), deferring: false };
    let u = put(&s, None, &unstable, LeaseKind::Migration, "op1", "h1", None, t(5));
    assert!(matches!(u.answer, Err(Refusal::Unstable { .. })));
    assert_eq!(u.slots, s, "423 never moves the deadline");
    // A planned failover deferred by the hold: renewals go on (the hold's
    // renewal is what moves the deferral), new grants get 423.
    let deferring = GroupFacts { deferring: true, unstable_reason: Some("OperationInProgress".into()), ..stable(3) };
    let d = put(&s, None, &deferring, LeaseKind::Migration, "op1", "h1", None, t(5));
    assert!(d.answer.is_ok(), "{:?}", d.answer);
    assert!(matches!(
        post(&Slots::default(), None, &deferring, LeaseKind::Migration, "op9", "app", 30, "h9", t(5)).answer,
        Err(Refusal::Unstable { .. })
    ));
    // Before bootstrap: unstable.
    let none = GroupFacts { generation: None, unstable_reason: None, deferring: false };
    assert!(matches!(
        post(&Slots::default(), None, &none, LeaseKind::Migration, "op", "app", 30, "h", t(0)).answer,
        Err(Refusal::Unstable { .. })
    ));
}

#[test]
fn a_generation_change_revokes_and_the_tombstone_answers_forever() {
    let s = post(&Slots::default(), None, &stable(3), LeaseKind::Migration, "op1", "app", 30, "h1", t(0)).slots;
    let r = put(&s, None, &stable(4), LeaseKind::Migration, "op1", "h1", Some(DdlState::Started), t(5));
    let Err(Refusal::Revoked(tomb)) = &r.answer else { panic!("{:?}", r.answer) };
    assert_eq!((tomb.reason, tomb.generation), (RevokeReason::TopologyChanged, 4));
    assert_eq!(tomb.token_sha256, "h1");
    assert_eq!(r.slots.migration.as_ref().and_then(|g| g.revoked), Some(RevokeReason::TopologyChanged));
    assert_eq!(r.new_tombstones.len(), 1);
    // Its client was last told "until t(30)" and may not have heard of the
    // revocation: no one else gets the mutex before then (invariant 10).
    let early = post(&r.slots, None, &stable(4), LeaseKind::Migration, "op2", "app", 30, "h2", t(29));
    assert!(
        matches!(&early.answer, Err(Refusal::Held { holder, .. }) if holder.operation_id == "op1"),
        "{:?}",
        early.answer
    );
    assert!(early.new_tombstones.is_empty(), "revoked once, not again on every call");
    // Nor does it count for a hold, renew, or repeat.
    let hold = post(&r.slots, None, &stable(4), LeaseKind::FailoverHold, "op1", "app", 30, "h9", t(6));
    assert!(matches!(hold.answer, Err(Refusal::Forbidden(_))), "{:?}", hold.answer);
    let renewal = put(&r.slots, None, &stable(4), LeaseKind::Migration, "op1", "h1", None, t(6));
    assert!(matches!(renewal.answer, Err(Refusal::Expired(_))), "{:?}", renewal.answer);
    let (swept, found) = sweep(&r.slots, 4, t(31));
    assert!(found.is_empty(), "its verification was recorded when it was revoked");
    // Past its deadline, another operation takes the mutex; the revoked one retries its POST.
    let s2 = post(&swept, None, &stable(4), LeaseKind::Migration, "op2", "app", 30, "h2", t(30)).slots;
    let retry = post(&s2, Some(tomb), &stable(4), LeaseKind::Migration, "op1", "app", 30, "h3", t(31));
    assert!(matches!(retry.answer, Err(Refusal::Revoked(_))));
}

#[test]
fn a_repeat_post_rotates_the_token() {
    let s = post(&Slots::default(), None, &stable(1), LeaseKind::Migration, "op1", "app", 30, "old", t(0)).slots;
    let again = post(&s, None, &stable(1), LeaseKind::Migration, "op1", "app", 60, "new", t(10));
    assert!(!grant_of(&again).created, "200, not 201");
    assert_eq!(
        put(&again.slots, None, &stable(1), LeaseKind::Migration, "op1", "old", None, t(11)).answer,
        Err(Refusal::TokenMismatch)
    );
    assert!(put(&again.slots, None, &stable(1), LeaseKind::Migration, "op1", "new", None, t(11)).answer.is_ok());
}

#[test]
fn operator_revocation_revokes_every_live_grant() {
    let s = post(&Slots::default(), None, &stable(2), LeaseKind::Migration, "op1", "app", 30, "h1", t(0)).slots;
    let s = post(&s, None, &stable(2), LeaseKind::FailoverHold, "op1", "app", 30, "h2", t(0)).slots;
    let (cleared, tombs) = revoke(&s, RevokeReason::OperatorRevoked, 2, t(1));
    assert_eq!(cleared.hold, None, "a revoked hold never defers a switchover");
    assert_eq!(cleared.migration.as_ref().and_then(|g| g.revoked), Some(RevokeReason::OperatorRevoked));
    assert_eq!(revoke(&cleared, RevokeReason::OperatorRevoked, 2, t(2)), (cleared.clone(), Vec::new()));
    assert_eq!(tombs.len(), 1, "one tombstone per operation");
    assert_eq!(tombs[0].reason, RevokeReason::OperatorRevoked);
}

#[test]
fn a_grant_acts_only_for_the_client_it_was_granted_to() {
    let s = post(&Slots::default(), None, &stable(1), LeaseKind::Migration, "op1", "app", 30, "h1", t(0)).slots;
    // Another tenant repeating the victim's POST: held, exactly as a second pipeline.
    let again = post_as("tenant-b/attacker", &s, None, &stable(1), LeaseKind::Migration, "op1", "app", 30, "x", t(1));
    assert!(
        matches!(&again.answer, Err(Refusal::Held { kind: LeaseKind::Migration, holder }) if holder.operation_id == "op1")
    );
    assert_eq!(again.slots, s, "the victim's token is untouched");
    // Nor can it take the hold of the victim's operation.
    let hold = post_as("tenant-b/attacker", &s, None, &stable(1), LeaseKind::FailoverHold, "op1", "app", 30, "x", t(1));
    assert!(matches!(hold.answer, Err(Refusal::Forbidden(_))));
    // Renewal or release by another caller is refused before the token is looked at.
    let other = actor("tenant-b/attacker");
    let r = renew(&s, None, &stable(1), LeaseKind::Migration, "op1", &other, "h1", &Progress::default(), t(1));
    assert!(matches!(r.answer, Err(Refusal::Forbidden(_))), "{:?}", r.answer);
    let d = release(&s, None, LeaseKind::Migration, "op1", &other, "h1", 1, t(1));
    assert!(matches!(d.answer, Err(Refusal::Forbidden(_))));
    assert_eq!(d.slots, s);
    // A client no longer listed for the instance loses the lease's use.
    let none = std::collections::BTreeSet::new();
    let gone = Actor { client: CLIENT, instances: &none };
    assert!(matches!(
        renew(&s, None, &stable(1), LeaseKind::Migration, "op1", &gone, "h1", &Progress::default(), t(1)).answer,
        Err(Refusal::Forbidden(_))
    ));
    // A grant stored before grants recorded their client: renewable with its
    // token, never repeatable by POST.
    let mut legacy = s.clone();
    legacy.migration.as_mut().unwrap().client = None;
    assert!(put(&legacy, None, &stable(1), LeaseKind::Migration, "op1", "h1", None, t(2)).answer.is_ok());
    assert!(matches!(
        post(&legacy, None, &stable(1), LeaseKind::Migration, "op1", "app", 30, "x", t(2)).answer,
        Err(Refusal::Held { .. })
    ));
}

#[test]
fn a_hold_never_outlives_its_operations_mutex() {
    // A takes the mutex (ttl 5) and the hold (ttl 30), stops renewing the mutex.
    let s = post(&Slots::default(), None, &stable(1), LeaseKind::Migration, "a", "app", 5, "ma", t(0)).slots;
    let s = post(&s, None, &stable(1), LeaseKind::FailoverHold, "a", "app", 30, "ha", t(0)).slots;
    assert!(s.effective_hold(t(4)).is_some());
    assert!(s.effective_hold(t(6)).is_none(), "the hold stops counting with the mutex");
    // B takes the mutex after the lapse, then the hold: never 409.
    let b = post(&s, None, &stable(1), LeaseKind::Migration, "b", "app", 30, "mb", t(6));
    assert!(grant_of(&b).created);
    assert_eq!(b.slots.hold, None, "A's orphaned hold is dropped with the takeover");
    // A renews its hold: refused, whether or not B took the mutex.
    let late = put(&s, None, &stable(1), LeaseKind::FailoverHold, "a", "ha", None, t(6));
    assert!(matches!(late.answer, Err(Refusal::Expired(_))), "{:?}", late.answer);
    assert_eq!(late.slots.hold, None);
    let hb = post(&b.slots, None, &stable(1), LeaseKind::FailoverHold, "b", "app", 30, "hb", t(7));
    assert!(grant_of(&hb).created);
}

#[test]
fn a_lease_lost_after_ddl_started_needs_verification() {
    let s = post(&Slots::default(), None, &stable(1), LeaseKind::Migration, "op1", "app", 5, "h1", t(0)).slots;
    let started = put(&s, None, &stable(1), LeaseKind::Migration, "op1", "h1", Some(DdlState::Started), t(1)).slots;
    // Revoked: the tombstone's operation needs a person.
    let (_, tombs) = revoke(&started, RevokeReason::OperatorRevoked, 1, t(2));
    let v = verifications_of(&tombs);
    assert_eq!(v.len(), 1);
    assert_eq!((v[0].operation_id.as_str(), v[0].instance.as_str()), ("op1", "app"));
    assert_eq!(v[0].ending, Ending::Revoked(RevokeReason::OperatorRevoked));
    // Lapsed and swept by the reconciler.
    let (cleared, lapsed) = sweep(&started, 1, t(7));
    assert_eq!(cleared.migration, None);
    assert_eq!(lapsed.len(), 1);
    assert_eq!(lapsed[0].ending, Ending::Lapsed);
    assert_eq!(sweep(&started, 1, t(3)).1, vec![], "a live grant is not swept");
    // Lapsed and taken over before any sweep: the takeover reports it.
    let taken = post(&started, None, &stable(1), LeaseKind::Migration, "op2", "app", 30, "h2", t(7));
    assert_eq!(taken.verifications.len(), 1);
    // Before DDL, or after it completed, nobody needs to look.
    let done = put(&s, None, &stable(1), LeaseKind::Migration, "op1", "h1", Some(DdlState::Completed), t(1)).slots;
    assert!(verifications_of(&revoke(&done, RevokeReason::OperatorRevoked, 1, t(2)).1).is_empty());
    assert!(sweep(&done, 1, t(7)).1.is_empty());
}

#[test]
fn one_tenants_revoked_operation_id_does_not_block_anothers() {
    // Attack input: tenant-b's operation release-1 is revoked; the victim's
    // operation of the same id must not answer `revoked`.
    let s = post_as(
        "tenant-b/pipe",
        &Slots::default(),
        None,
        &stable(1),
        LeaseKind::Migration,
        "release-1",
        "billing",
        30,
        "h",
        t(0),
    )
    .slots;
    let (s, tombs) = revoke(&s, RevokeReason::OperatorRevoked, 1, t(1));
    assert_eq!(tombs[0].client.as_deref(), Some("tenant-b/pipe"));
    // (once the revoked grant's deadline has passed: until then it holds the mutex)
    let victim =
        post(&s, Some(&tombs[0]), &stable(1), LeaseKind::Migration, "release-1", "counter-app", 30, "v", t(31));
    assert!(grant_of(&victim).created, "{:?}", victim.answer);
    // The revoked client itself stays revoked.
    let again = post_as(
        "tenant-b/pipe",
        &s,
        Some(&tombs[0]),
        &stable(1),
        LeaseKind::Migration,
        "release-1",
        "billing",
        30,
        "x",
        t(2),
    );
    assert!(matches!(again.answer, Err(Refusal::Revoked(_))));
    // A tombstone of an unknown client (stored before tombstones recorded it) answers everyone.
    let mut legacy = tombs[0].clone();
    legacy.client = None;
    assert!(matches!(
        post(&s, Some(&legacy), &stable(1), LeaseKind::Migration, "release-1", "counter-app", 30, "v", t(2)).answer,
        Err(Refusal::Revoked(_))
    ));
}

#[test]
fn ddl_started_reported_on_the_hold_is_not_lost() {
    let s = post(&Slots::default(), None, &stable(1), LeaseKind::Migration, "a", "app", 5, "ma", t(0)).slots;
    let s = post(&s, None, &stable(1), LeaseKind::FailoverHold, "a", "app", 60, "ha", t(0)).slots;
    let s = put(&s, None, &stable(1), LeaseKind::FailoverHold, "a", "ha", Some(DdlState::Started), t(1)).slots;
    // Taken over after the mutex lapsed.
    let b = post(&s, None, &stable(1), LeaseKind::Migration, "b", "app", 30, "mb", t(6));
    assert_eq!(b.verifications.len(), 1, "{:?}", b.verifications);
    assert_eq!(b.verifications[0].operation_id, "a");
    // Or the orphaned hold renewed.
    let r = put(&s, None, &stable(1), LeaseKind::FailoverHold, "a", "ha", None, t(6));
    assert!(matches!(r.answer, Err(Refusal::Expired(_))), "{:?}", r.answer);
    assert_eq!(r.verifications.len(), 1, "{:?} {:?}", r.answer, s);
    // Or swept by the reconciler.
    assert_eq!(sweep(&s, 1, t(6)).1.len(), 1);
}

#[test]
fn a_hold_does_not_come_back_when_its_operation_retakes_the_mutex() {
    let s = post(&Slots::default(), None, &stable(1), LeaseKind::Migration, "a", "app", 5, "ma", t(0)).slots;
    let s = post(&s, None, &stable(1), LeaseKind::FailoverHold, "a", "app", 60, "ha", t(0)).slots;
    let again = post(&s, None, &stable(1), LeaseKind::Migration, "a", "app", 30, "ma2", t(6));
    assert!(grant_of(&again).created);
    assert_eq!(again.slots.hold, None);
    assert!(matches!(
        put(&again.slots, None, &stable(1), LeaseKind::FailoverHold, "a", "ha", None, t(7)).answer,
        Err(Refusal::Expired(Absence { lapsed_at: None, .. }))
    ));
    // A repeat POST of a live mutex keeps the operation's hold.
    let s = post(&Slots::default(), None, &stable(1), LeaseKind::Migration, "a", "app", 30, "ma", t(0)).slots;
    let s = post(&s, None, &stable(1), LeaseKind::FailoverHold, "a", "app", 60, "ha", t(0)).slots;
    let repeat = post(&s, None, &stable(1), LeaseKind::Migration, "a", "app", 30, "ma3", t(1));
    assert!(!grant_of(&repeat).created);
    assert!(repeat.slots.hold.is_some());
}

/// One step a client (or the operator) may take.
#[derive(Clone, Debug)]
enum Step {
    Post(LeaseKind, u8, u32, u8),
    Renew(LeaseKind, u8, bool, u8),
    Release(LeaseKind, u8, bool, u8),
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
        4 => (kind(), 0u8..3, 0u32..200, 0u8..2).prop_map(|(k, op, ttl, c)| Step::Post(k, op, ttl, c)),
        4 => (kind(), 0u8..3, any::<bool>(), 0u8..2).prop_map(|(k, op, good, c)| Step::Renew(k, op, good, c)),
        2 => (kind(), 0u8..3, any::<bool>(), 0u8..2).prop_map(|(k, op, good, c)| Step::Release(k, op, good, c)),
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
        // 10: the deadline each operation's client was last told for its
        // migration lease (a release ends it at once: the client stopped).
        let mut confirmed: std::collections::HashMap<String, Timestamp> = std::collections::HashMap::new();
        let mut counter = 0u32;
        for s in steps {
            match s {
                Step::Post(kind, op, ttl, c) => {
                    let op = format!("op{op}");
                    let client = format!("ns/sa{c}");
                    counter += 1;
                    let token = format!("tok{counter}");
                    let tomb = tombs.iter().find(|t| t.operation_id == op && t.about(&client)).cloned();
                    let before = slots.clone();
                    let o = post_as(&client, &slots, tomb.as_ref(), &facts, kind, &op, "app", ttl, &token, now);
                    // 8: the live mutex holder is never told the hold is held.
                    if kind == LeaseKind::FailoverHold
                        && before.live(LeaseKind::Migration, now).is_some_and(|m| m.operation_id == op && m.client.as_deref() == Some(client.as_str()))
                    {
                        prop_assert!(!matches!(o.answer, Err(Refusal::Held { .. })), "{:?}", o.answer);
                    }
                    if let Ok(g) = &o.answer {
                        // 6: a repeat is honoured only for the client the grant was made to.
                        if !g.created {
                            prop_assert_eq!(before.get(kind).and_then(|b| b.client.clone()), Some(client.clone()));
                        }
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
                        // 10: a new mutex only once every other client's confirmed deadline has passed.
                        if kind == LeaseKind::Migration {
                            if g.created {
                                for (other, until) in &confirmed {
                                    prop_assert!(other == &op || *until <= now, "{op} granted at {now} while {other} is confirmed until {until}");
                                }
                            }
                            confirmed.insert(op.clone(), g.grant.expires_at());
                        }
                        // 6: the new token replaces the old one.
                        tokens.insert((kind, op.clone()), token);
                        // 8: a new mutex holder leaves no other operation's hold behind.
                        if kind == LeaseKind::Migration {
                            prop_assert!(o.slots.hold.as_ref().is_none_or(|h| h.operation_id == op));
                        }
                    }
                    // 4: a revoked op stays revoked.
                    if tomb.is_some() { prop_assert!(matches!(o.answer, Err(Refusal::Revoked(_)))); }
                    tombs.extend(o.new_tombstones.clone());
                    slots = o.slots;
                }
                Step::Renew(kind, op, good, c) => {
                    let op = format!("op{op}");
                    let client = format!("ns/sa{c}");
                    let token = if good { tokens.get(&(kind, op.clone())).cloned().unwrap_or_default() } else { "forged".into() };
                    let tomb = tombs.iter().find(|t| t.operation_id == op && t.about(&client)).cloned();
                    let before = slots.clone();
                    let watched = watch(&slots, tomb.as_ref(), &facts, kind, &op, &actor(&client), &token, now).cloned();
                    let o = renew(&slots, tomb.as_ref(), &facts, kind, &op, &actor(&client), &token, &Progress::default(), now);
                    // A watch ends exactly when the renewal would say authority is gone.
                    match &o.answer {
                        Ok(_) | Err(Refusal::Unstable { .. }) => {
                            prop_assert_eq!(watched.map(|g| g.operation_id), Ok(op.clone()));
                        }
                        Err(r) => prop_assert_eq!(watched.as_ref().err(), Some(r)),
                    }
                    if let (Ok(g), LeaseKind::Migration) = (&o.answer, kind) {
                        confirmed.insert(op.clone(), g.expires_at());
                    }
                    match &o.answer {
                        Ok(g) => {
                            // 7: only for the client it was granted to.
                            prop_assert_eq!(g.client.as_deref(), Some(client.as_str()));
                            // 8: a hold is renewed only while its operation holds a live mutex.
                            if kind == LeaseKind::FailoverHold {
                                prop_assert!(before.live(LeaseKind::Migration, now).is_some_and(|m| m.operation_id == op));
                            }
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
                Step::Release(kind, op, good, c) => {
                    let op = format!("op{op}");
                    let client = format!("ns/sa{c}");
                    let token = if good { tokens.get(&(kind, op.clone())).cloned().unwrap_or_default() } else { "forged".into() };
                    let tomb = tombs.iter().find(|t| t.operation_id == op && t.about(&client)).cloned();
                    let o = release(&slots, tomb.as_ref(), kind, &op, &actor(&client), &token, facts.generation.unwrap_or(0), now);
                    if let Ok(g) = &o.answer {
                        if kind == LeaseKind::Migration {
                            confirmed.remove(&op);
                        }
                        prop_assert!(good);
                        prop_assert!(o.slots.get(kind).is_none());
                        prop_assert_eq!(g.client.as_deref(), Some(client.as_str()));
                    }
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

#[test]
fn a_watch_sees_what_a_renewal_would_without_writing() {
    let s = post(&Slots::default(), None, &stable(1), LeaseKind::Migration, "a", "app", 30, "ma", t(0)).slots;
    let me = actor(CLIENT);
    let w = |slots: &Slots, facts: &GroupFacts, token: &str, now| {
        watch(slots, None, facts, LeaseKind::Migration, "a", &me, token, now).map(|g| g.generation)
    };
    assert_eq!(w(&s, &stable(1), "ma", t(1)), Ok(1));
    let degraded = GroupFacts { unstable_reason: Some("Degraded".into()), ..stable(1) };
    assert_eq!(w(&s, &degraded, "ma", t(1)), Ok(1), "an unstable group still holds the lease");
    assert_eq!(w(&s, &stable(1), "other", t(1)), Err(Refusal::TokenMismatch));
    assert!(matches!(w(&s, &stable(1), "ma", t(30)), Err(Refusal::Expired(_))), "lapsed at expiresAt");
    match w(&s, &stable(2), "ma", t(1)) {
        Err(Refusal::Revoked(t)) => assert_eq!((t.reason, t.generation), (RevokeReason::TopologyChanged, 2)),
        other => panic!("a moved generation revokes: {other:?}"),
    }
    let other_client = actor("ns/else");
    assert!(matches!(
        watch(&s, None, &stable(1), LeaseKind::Migration, "a", &other_client, "ma", t(1)),
        Err(Refusal::Forbidden(_))
    ));
}
