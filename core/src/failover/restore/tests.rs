use proptest::prelude::*;

use super::*;

fn expected() -> Identity {
    Identity { server_id: 2, server_uuid: "87f16bcf-efcf-11f1-85e2-02fc00000002".into() }
}

fn facts() -> Facts {
    Facts {
        active: "iad".into(),
        generation: Some(4),
        source_generation: Some(4),
        site: "pdx".into(),
        hold: None,
        admissible: Ok(()),
        job: JobState::Absent,
        past_deadline: false,
        restored: None,
        expected: expected(),
        switchover: SwitchoverFacts { old_fenced: Some(false), ..SwitchoverFacts::default() },
        services_at: Some("iad".into()),
        reclone_done: false,
    }
}

fn failure(action: Action) -> Failure {
    match action {
        Action::Fail(f) => f,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn the_happy_path_in_order() {
    let mut f = facts();
    assert_eq!(next(Phase::Pending, "iad", &f), Action::Enter(Phase::Admitting));
    assert_eq!(next(Phase::Admitting, "iad", &f), Action::Enter(Phase::Restoring));
    assert_eq!(next(Phase::Restoring, "iad", &f), Action::RunJob("pdx".into()));
    f.job = JobState::Running;
    assert_eq!(next(Phase::Restoring, "iad", &f), Action::AwaitJob("pdx".into()));
    f.job = JobState::Complete;
    assert_eq!(next(Phase::Restoring, "iad", &f), Action::Enter(Phase::Verifying));
    assert_eq!(next(Phase::Verifying, "iad", &f), Action::AwaitRestored("pdx".into()));
    f.restored = Some(Restored { replicating: false, identity: expected() });
    assert_eq!(next(Phase::Verifying, "iad", &f), Action::Enter(Phase::Fencing));
    // Nothing was fenced until now.
    assert_eq!(next(Phase::Fencing, "iad", &f), Action::Switchover(planned::Action::Fence("iad".into())));
    f.switchover.old_fenced = Some(true);
    assert_eq!(next(Phase::Fencing, "iad", &f), Action::Switchover(planned::Action::Decide("pdx".into())));
    (f.active, f.generation) = ("pdx".into(), Some(5));
    assert_eq!(next(Phase::Fencing, "iad", &f), Action::Enter(Phase::Promoting));
    assert_eq!(next(Phase::Promoting, "iad", &f), Action::Switchover(planned::Action::Promote("pdx".into())));
    f.switchover.target_promoted = true;
    assert_eq!(next(Phase::Promoting, "iad", &f), Action::Enter(Phase::Repointing));
    assert_eq!(next(Phase::Repointing, "iad", &f), Action::RepointServices("pdx".into()));
    f.services_at = Some("pdx".into());
    assert_eq!(next(Phase::Repointing, "iad", &f), Action::Enter(Phase::AwaitingReclone));
    assert_eq!(next(Phase::AwaitingReclone, "iad", &f), Action::AwaitReclone("iad".into()));
    f.reclone_done = true;
    assert_eq!(next(Phase::AwaitingReclone, "iad", &f), Action::Enter(Phase::Completed));
    assert_eq!(next(Phase::Completed, "iad", &f), Action::Idle);
}

#[test]
fn the_old_primary_is_awaiting_its_reclone_from_the_decision_and_is_fenced_again_if_seen_writable() {
    for phase in BEFORE_THE_DECISION {
        assert_eq!(awaiting_reclone(phase, "iad"), None, "{phase:?}");
    }
    for phase in [Phase::Promoting, Phase::Repointing, Phase::AwaitingReclone] {
        assert_eq!(awaiting_reclone(phase, "iad"), Some("iad"), "{phase:?}");
        let mut f = facts();
        (f.active, f.generation) = ("pdx".into(), Some(5));
        f.switchover.old_fenced = Some(false);
        assert_eq!(next(phase, "iad", &f), Action::Switchover(planned::Action::Fence("iad".into())), "{phase:?}");
    }
}

/// The phases in which the old primary's data still counts.
const BEFORE_THE_DECISION: [Phase; 8] = [
    Phase::Pending,
    Phase::Admitting,
    Phase::Deferred,
    Phase::Restoring,
    Phase::Verifying,
    Phase::Fencing,
    Phase::Completed,
    Phase::Failed,
];

#[test]
fn a_hold_defers_admission_only_and_the_active_site_is_refused() {
    let mut f = facts();
    f.hold = Some(("op-1".into(), "counter-app".into()));
    let deferred = Action::Defer { operation_id: "op-1".into(), instance: "counter-app".into() };
    assert_eq!(next(Phase::Admitting, "iad", &f), deferred);
    assert_eq!(next(Phase::Deferred, "iad", &f), deferred);
    assert_eq!(next(Phase::Restoring, "iad", &f), Action::RunJob("pdx".into()), "a hold defers admission only");
    f.hold = None;
    assert_eq!(next(Phase::Deferred, "iad", &f), Action::Enter(Phase::Admitting));
    f.site = "iad".into();
    let why = failure(next(Phase::Admitting, "iad", &f));
    assert!(why.reason.contains("iad is the active site") && why.reason.contains("switch over first"), "{why:?}");
    let mut f = facts();
    f.admissible = Err("another operation is in flight".into());
    assert!(failure(next(Phase::Admitting, "iad", &f)).reason.contains("another operation"));
}

#[test]
fn a_restore_job_that_fails_or_times_out_decides_nothing_and_names_the_site() {
    let mut f = facts();
    f.job = JobState::Failed("BackoffLimitExceeded".into());
    let why = failure(next(Phase::Restoring, "iad", &f));
    assert!(
        why.reason.contains("BackoffLimitExceeded")
            && why.reason.contains("iad is the primary at topologyGeneration 4")
    );
    assert_eq!(why.attention.as_deref(), Some("pdx"));
    f.job = JobState::Running;
    f.past_deadline = true;
    assert!(failure(next(Phase::Restoring, "iad", &f)).reason.contains("deadline"));
}

#[test]
fn a_restored_site_that_is_silent_replicates_or_is_another_server_is_not_promoted() {
    let mut f = facts();
    f.past_deadline = true;
    assert!(failure(next(Phase::Verifying, "iad", &f)).reason.contains("did not answer"));
    f.past_deadline = false;
    f.restored = Some(Restored { replicating: true, identity: expected() });
    assert!(failure(next(Phase::Verifying, "iad", &f)).reason.contains("replicates"));
    let other = Identity { server_id: 1, ..expected() };
    f.restored = Some(Restored { replicating: false, identity: other });
    let why = failure(next(Phase::Verifying, "iad", &f));
    assert!(why.reason.contains("another server") && why.reason.contains("server_id 1"), "{why:?}");
    assert_eq!(why.attention.as_deref(), Some("pdx"));
    // Another UUID with the same server_id is another server too; MariaDB has none to compare.
    let uuid = Identity { server_uuid: "3e11fa47-71ca-11e1-9e33-c80aa9429562".into(), ..expected() };
    f.restored = Some(Restored { replicating: false, identity: uuid });
    assert!(failure(next(Phase::Verifying, "iad", &f)).reason.contains("another server"));
    f.expected.server_uuid = String::new();
    f.restored = Some(Restored { replicating: false, identity: Identity { server_id: 2, server_uuid: String::new() } });
    assert_eq!(next(Phase::Verifying, "iad", &f), Action::Enter(Phase::Fencing));
    f.expected = expected();
    f.restored = Some(Restored {
        replicating: false,
        identity: Identity { server_uuid: expected().server_uuid.to_uppercase(), ..expected() },
    });
    assert_eq!(next(Phase::Verifying, "iad", &f), Action::Enter(Phase::Fencing), "UUIDs compare without case");
}

#[test]
fn a_fence_that_fails_makes_the_old_primary_writable_again_and_decides_nothing() {
    let mut f = facts();
    f.switchover.fence_failed = Some("lock wait timeout".into());
    f.switchover.old_fenced = Some(true);
    assert_eq!(next(Phase::Fencing, "iad", &f), Action::Switchover(planned::Action::Unfence("iad".into())));
    f.switchover.old_fenced = Some(false);
    let why = failure(next(Phase::Fencing, "iad", &f));
    assert!(why.reason.contains("could not fence iad") && why.reason.contains("nothing was decided"), "{why:?}");
    assert_eq!(why.attention.as_deref(), Some("pdx"));
    f.switchover.old_fenced = None;
    f.past_deadline = true;
    let why = failure(next(Phase::Fencing, "iad", &f));
    assert!(why.reason.contains("may be left read-only"), "{why:?}");
    assert_eq!(why.attention.as_deref(), Some("iad"));
}

#[test]
fn an_emergency_failover_supersedes_the_restore() {
    for phase in [Phase::Pending, Phase::Admitting, Phase::Deferred, Phase::Restoring, Phase::Verifying, Phase::Fencing]
    {
        let mut f = facts();
        f.generation = Some(6);
        assert!(failure(next(phase, "iad", &f)).reason.contains("superseded"), "{phase:?}");
    }
    for phase in [Phase::Promoting, Phase::Repointing, Phase::AwaitingReclone] {
        let mut f = facts();
        f.generation = Some(6);
        let why = failure(next(phase, "iad", &f));
        assert!(why.reason.contains("promotion of pdx was superseded"), "{phase:?}: {why:?}");
    }
}

#[test]
fn the_hold_covers_the_restored_sites_promotion_while_its_job_runs_and_the_fence() {
    let mut f = facts();
    f.job = JobState::Running;
    assert_eq!(holds_automatic_failover(Phase::Restoring, &f), Some(Hold::Promotion("pdx".into())));
    assert_eq!(holds_automatic_failover(Phase::Fencing, &f), Some(Hold::Group));
    f.past_deadline = true;
    assert_eq!(holds_automatic_failover(Phase::Restoring, &f), None);
    assert_eq!(holds_automatic_failover(Phase::Fencing, &f), None);
    f.past_deadline = false;
    for phase in
        [Phase::Pending, Phase::Admitting, Phase::Deferred, Phase::Verifying, Phase::Promoting, Phase::AwaitingReclone]
    {
        assert_eq!(holds_automatic_failover(phase, &f), None, "{phase:?}");
    }
}

const NAMES: [&str; 2] = ["iad", "pdx"];

#[derive(Clone, Debug)]
struct World {
    writable: [bool; 2],
    active: usize,
    generation: i64,
    phase: Phase,
    job: JobState,
    /// pdx's replication: on until the restore replaces its server.
    replicating: bool,
    services_at: usize,
    dead: [bool; 2],
    decisions: i64,
    emergencies: i64,
}

#[derive(Clone, Debug)]
enum Event {
    Step,
    Crash,
    Hold(bool),
    /// The old primary cannot be reached (true) or can again (false).
    Blip(bool),
    Deadline,
    /// The primary dies; automatic failover promotes the other site unless
    /// held, and as soon as it is not.
    Emergency,
    /// The fenced old primary restarts writable (no `read_only` in its configuration).
    Restart,
    /// A person marks the old primary re-cloned.
    Recloned,
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        40 => Just(Event::Step),
        1 => Just(Event::Crash),
        1 => any::<bool>().prop_map(Event::Hold),
        1 => any::<bool>().prop_map(Event::Blip),
        1 => Just(Event::Deadline),
        1 => Just(Event::Emergency),
        1 => Just(Event::Restart),
        1 => Just(Event::Recloned),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Runs a restore of pdx (iad the primary) against the simulated pair,
    /// with a Job that may fail, a restored server that may replicate or be
    /// another, a fence that may fail, holds, blips, deadlines, the primary
    /// dying, the old primary restarting writable, and the engine crashing
    /// at any step; checks the invariants of the module header.
    #[test]
    fn one_writable_site_one_bump_and_the_old_primary_kept_fenced(
        events in proptest::collection::vec(event(), 1..120),
        job_ok in proptest::bool::weighted(0.85),
        stand_alone in proptest::bool::weighted(0.85),
        same_server in proptest::bool::weighted(0.85),
        fence_fails in proptest::bool::weighted(0.15),
        admissible in proptest::bool::weighted(0.85),
    ) {
        let mut w = World {
            writable: [true, false], active: 0, generation: 4, phase: Phase::Pending, job: JobState::Absent,
            replicating: true, services_at: 0, dead: [false; 2], decisions: 0, emergencies: 0,
        };
        let mut fence_failed: Option<String> = None;
        let (mut hold, mut unreachable, mut past_deadline, mut recloned) = (false, false, false, false);
        let (mut pending_emergency, mut superseded, mut stranded, mut restarted) = (false, false, false, false);
        let mut failure: Option<Failure> = None;
        let tail = std::iter::repeat_n([Event::Step, Event::Step, Event::Step, Event::Deadline], 40).flatten();
        for e in events.into_iter().chain([Event::Hold(false), Event::Blip(false), Event::Recloned]).chain(tail) {
            let reachable = |s: usize, w: &World| !(w.dead[s] || (unreachable && s == 0));
            let f = Facts {
                active: NAMES[w.active].into(),
                generation: Some(w.generation),
                source_generation: Some(4),
                site: "pdx".into(),
                hold: hold.then(|| ("op".to_owned(), "app".to_owned())),
                admissible: if admissible { Ok(()) } else { Err("another operation is in flight".into()) },
                job: w.job.clone(),
                past_deadline,
                restored: (!w.dead[1] && w.job == JobState::Complete).then(|| Restored {
                    replicating: w.replicating,
                    identity: if same_server { expected() } else { Identity { server_id: 9, ..expected() } },
                }),
                expected: expected(),
                switchover: SwitchoverFacts {
                    old_fenced: reachable(0, &w).then_some(!w.writable[0]),
                    fence_failed: fence_failed.clone(),
                    caught_up: None,
                    target_promoted: w.writable[1] && w.active == 1,
                    old_repointed: false,
                },
                services_at: Some(NAMES[w.services_at].into()),
                reclone_done: recloned,
            };
            let held = holds_automatic_failover(w.phase, &f);
            if let Some(Hold::Promotion(site)) = &held {
                prop_assert_ne!(site.as_str(), NAMES[w.active], "never a hold on the primary");
            }
            if pending_emergency && held.is_none() {
                pending_emergency = false;
                let other = 1 - w.active;
                w.writable[other] = true;
                w.active = other;
                w.generation += 1;
                w.emergencies += 1;
                // A fence accepts only the restored site at one past its start.
                superseded = w.phase != Phase::Fencing || w.active != 1 || w.generation != 5;
                continue;
            }
            match e {
                Event::Crash => { fence_failed = None; continue; }
                Event::Hold(on) => { hold = on; continue; }
                Event::Blip(on) => { unreachable = on; continue; }
                Event::Deadline => { past_deadline = true; continue; }
                Event::Recloned => { recloned = true; continue; }
                Event::Emergency => {
                    if !w.phase.is_final() && w.dead == [false; 2] {
                        w.dead[w.active] = true;
                        w.writable[w.active] = false;
                        pending_emergency = true;
                    }
                    continue;
                }
                Event::Restart => {
                    if awaiting_reclone(w.phase, "iad").is_some() && !w.dead[0] && w.active == 1 {
                        w.writable[0] = true;
                        restarted = true;
                    }
                    continue;
                }
                Event::Step => {}
            }
            let action = next(w.phase, "iad", &f);
            if superseded && !w.phase.is_final() {
                prop_assert!(matches!(&action, Action::Fail(why) if why.reason.contains("superseded")), "a superseded request only ends: {:?}", action);
            }
            if hold && matches!(w.phase, Phase::Admitting | Phase::Deferred) && !superseded {
                prop_assert!(matches!(action, Action::Defer { .. }), "no progress while a hold is live: {:?}", action);
            }
            if restarted && f.switchover.old_fenced == Some(false) && !superseded && !w.phase.is_final() {
                prop_assert_eq!(&action, &Action::Switchover(planned::Action::Fence("iad".into())), "the old primary is fenced again first");
            }
            match action {
                Action::Idle => break,
                Action::Enter(p) => { w.phase = p; fence_failed = None; past_deadline = false; }
                Action::Defer { .. } => {
                    prop_assert!(matches!(w.phase, Phase::Admitting | Phase::Deferred), "a hold defers admission only");
                    w.phase = Phase::Deferred;
                }
                Action::RunJob(s) => {
                    prop_assert_eq!(s.as_str(), "pdx");
                    prop_assert_eq!(&w.job, &JobState::Absent, "the Job runs once");
                    prop_assert!(w.writable[0], "nothing is fenced while the Job restores");
                    w.job = JobState::Running;
                }
                Action::AwaitJob(_) => {
                    w.job = if job_ok { JobState::Complete } else { JobState::Failed("BackoffLimitExceeded".into()) };
                    w.replicating = !stand_alone;
                }
                Action::AwaitRestored(_) | Action::AwaitReclone(_) => {}
                Action::Switchover(a) => match a {
                    planned::Action::Fence(s) => {
                        prop_assert_eq!(s.as_str(), "iad");
                        if fence_fails && w.active == 0 || !reachable(0, &w) {
                            fence_failed = Some("timeout".into());
                        } else {
                            w.writable[0] = false;
                            restarted = false;
                        }
                    }
                    planned::Action::Unfence(s) => {
                        prop_assert_eq!(s.as_str(), "iad");
                        prop_assert_eq!(w.active, 0, "never unfence a site that lost its role");
                        if reachable(0, &w) { w.writable[0] = true; } else { fence_failed = None; }
                    }
                    planned::Action::Decide(s) => {
                        prop_assert_eq!(s.as_str(), "pdx");
                        prop_assert_eq!((w.active, w.decisions), (0, 0), "one decision per request");
                        prop_assert!(!w.writable[0], "decide only with the old primary fenced");
                        prop_assert!(!w.replicating && same_server, "only a verified restored site is decided");
                        w.active = 1;
                        w.generation += 1;
                        w.decisions += 1;
                    }
                    planned::Action::Promote(s) => {
                        prop_assert_eq!((s.as_str(), w.active), ("pdx", 1));
                        w.writable[1] = true;
                    }
                    other => prop_assert!(false, "not an action of a restore: {:?}", other),
                },
                Action::RepointServices(s) => {
                    prop_assert_eq!((s.as_str(), w.active), ("pdx", 1));
                    w.services_at = 1;
                }
                Action::Fail(why) => {
                    stranded = why.reason.contains("may be left read-only");
                    failure = Some(why);
                    w.phase = Phase::Failed;
                }
            }
            if !restarted {
                prop_assert!(!(w.writable[0] && w.writable[1]), "two writable sites: {:?}", w);
            }
            prop_assert_eq!(w.generation, 4 + w.decisions + w.emergencies, "the generation moves once per decision");
        }
        prop_assert!(w.phase.is_final(), "the restore ends once holds are gone and a person marked the re-clone: {:?}", w);
        if w.emergencies > 0 {
            return Ok(());
        }
        if w.phase == Phase::Completed {
            prop_assert_eq!((w.generation, w.decisions, w.active, w.services_at), (5, 1, 1, 1));
            // Restarted writable unseen (a blip) until the re-clone was marked done.
            prop_assert!(w.writable[1] && (!w.writable[0] || restarted), "the old primary stays fenced: {:?}", w);
            prop_assert!(recloned);
        } else {
            prop_assert_eq!((w.generation, w.decisions, w.active, w.services_at), (4, 0, 0, 0), "a failed restore decides nothing");
            prop_assert!(w.writable[0] || stranded, "the old primary serves, or the failure says it may not");
            prop_assert!(failure.is_some_and(|f| f.attention.is_some() || !matches!(w.job, JobState::Complete | JobState::Failed(_))));
        }
    }
}
