use proptest::prelude::*;

use super::*;

fn facts() -> Facts {
    Facts {
        active: "iad".into(),
        generation: Some(4),
        source_generation: Some(4),
        standby: "pdx".into(),
        switch_back: false,
        hold: None,
        admissible: Ok(()),
        job: JobState::Absent,
        past_deadline: false,
        updated_ready: Ok(()),
        switchover: SwitchoverFacts { old_fenced: Some(false), ..SwitchoverFacts::default() },
    }
}

fn failure(action: Action) -> Failure {
    match action {
        Action::Fail(f) => f,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn the_happy_path_in_order_with_the_switch_back() {
    let mut f = facts();
    f.switch_back = true;
    assert_eq!(next(Phase::Pending, "iad", &f), Action::Enter(Phase::Admitting));
    assert_eq!(next(Phase::Admitting, "iad", &f), Action::Enter(Phase::UpdatingStandby));
    assert_eq!(next(Phase::UpdatingStandby, "iad", &f), Action::RunJob("pdx".into()));
    f.job = JobState::Running;
    assert_eq!(next(Phase::UpdatingStandby, "iad", &f), Action::AwaitJob("pdx".into()));
    f.job = JobState::Complete;
    assert_eq!(next(Phase::UpdatingStandby, "iad", &f), Action::Enter(Phase::VerifyingStandby));
    f.updated_ready = Err("replication lag 30 s".into());
    assert_eq!(next(Phase::VerifyingStandby, "iad", &f), Action::AwaitReady("pdx".into()));
    f.updated_ready = Ok(());
    assert_eq!(next(Phase::VerifyingStandby, "iad", &f), Action::Enter(Phase::SwitchoverDraining));
    // The switchover: the planned failover's steps, iad → pdx.
    assert_eq!(next(Phase::SwitchoverDraining, "iad", &f), Action::Switchover(planned::Action::Fence("iad".into())));
    f.switchover.old_fenced = Some(true);
    assert_eq!(next(Phase::SwitchoverDraining, "iad", &f), Action::Switchover(planned::Action::CatchUp("pdx".into())));
    f.switchover.caught_up = Some(true);
    assert_eq!(next(Phase::SwitchoverDraining, "iad", &f), Action::Switchover(planned::Action::Decide("pdx".into())));
    (f.active, f.generation) = ("pdx".into(), Some(5));
    assert_eq!(next(Phase::SwitchoverDraining, "iad", &f), Action::Enter(Phase::SwitchoverPromoting));
    assert_eq!(next(Phase::SwitchoverPromoting, "iad", &f), Action::Switchover(planned::Action::Promote("pdx".into())));
    f.switchover.target_promoted = true;
    assert_eq!(next(Phase::SwitchoverPromoting, "iad", &f), Action::Enter(Phase::SwitchoverRepointing));
    assert_eq!(
        next(Phase::SwitchoverRepointing, "iad", &f),
        Action::Switchover(planned::Action::Repoint { site: "iad".into(), source: "pdx".into() })
    );
    f.switchover.old_repointed = true;
    assert_eq!(next(Phase::SwitchoverRepointing, "iad", &f), Action::Enter(Phase::UpdatingFormerPrimary));
    // The former primary, now a fenced replica.
    f.job = JobState::Absent;
    assert_eq!(next(Phase::UpdatingFormerPrimary, "iad", &f), Action::RunJob("iad".into()));
    f.job = JobState::Complete;
    assert_eq!(next(Phase::UpdatingFormerPrimary, "iad", &f), Action::Enter(Phase::VerifyingFormerPrimary));
    assert_eq!(next(Phase::VerifyingFormerPrimary, "iad", &f), Action::Enter(Phase::SwitchBackDraining));
    // The switch-back: pdx → iad, one more decision.
    f.switchover = SwitchoverFacts { old_fenced: Some(false), ..SwitchoverFacts::default() };
    assert_eq!(next(Phase::SwitchBackDraining, "iad", &f), Action::Switchover(planned::Action::Fence("pdx".into())));
    f.switchover.old_fenced = Some(true);
    f.switchover.caught_up = Some(true);
    assert_eq!(next(Phase::SwitchBackDraining, "iad", &f), Action::Switchover(planned::Action::Decide("iad".into())));
    (f.active, f.generation) = ("iad".into(), Some(6));
    assert_eq!(next(Phase::SwitchBackDraining, "iad", &f), Action::Enter(Phase::SwitchBackPromoting));
    f.switchover.target_promoted = true;
    f.switchover.old_repointed = true;
    assert_eq!(next(Phase::SwitchBackPromoting, "iad", &f), Action::Enter(Phase::SwitchBackRepointing));
    assert_eq!(next(Phase::SwitchBackRepointing, "iad", &f), Action::Enter(Phase::Completed));
    assert_eq!(next(Phase::Completed, "iad", &f), Action::Idle);
}

#[test]
fn without_the_switch_back_the_update_completes_after_the_former_primary() {
    let mut f = facts();
    (f.active, f.generation) = ("pdx".into(), Some(5));
    assert_eq!(next(Phase::VerifyingFormerPrimary, "iad", &f), Action::Enter(Phase::Completed));
}

#[test]
fn a_hold_defers_admission_only_and_the_request_revalidates_after_it() {
    let mut f = facts();
    f.hold = Some(("op-1".into(), "counter-app".into()));
    let deferred = Action::Defer { operation_id: "op-1".into(), instance: "counter-app".into() };
    assert_eq!(next(Phase::Admitting, "iad", &f), deferred);
    assert_eq!(next(Phase::Deferred, "iad", &f), deferred);
    // A hold appearing after admission defers nothing.
    assert_eq!(next(Phase::UpdatingStandby, "iad", &f), Action::RunJob("pdx".into()));
    f.hold = None;
    assert_eq!(
        next(Phase::Deferred, "iad", &f),
        Action::Enter(Phase::Admitting),
        "revalidates, never goes straight on"
    );
    f.admissible = Err("another operation is in flight: a planned failover to pdx".into());
    let why = failure(next(Phase::Admitting, "iad", &f));
    assert!(why.reason.contains("cannot be updated now") && why.reason.contains("another operation"), "{why:?}");
    assert_eq!(why.attention, None);
}

#[test]
fn a_standby_job_that_fails_or_times_out_ends_the_update_with_the_topology_as_it_was() {
    let mut f = facts();
    f.job = JobState::Failed("BackoffLimitExceeded".into());
    let why = failure(next(Phase::UpdatingStandby, "iad", &f));
    assert!(
        why.reason.contains("BackoffLimitExceeded")
            && why.reason.contains("iad is the primary at topologyGeneration 4")
    );
    assert_eq!(why.attention.as_deref(), Some("pdx"));
    f.job = JobState::Running;
    f.past_deadline = true;
    let why = failure(next(Phase::UpdatingStandby, "iad", &f));
    assert!(why.reason.contains("deadline"), "{why:?}");
    assert_eq!(why.attention.as_deref(), Some("pdx"));
    // An updated standby that never gets ready.
    let mut f = facts();
    f.updated_ready = Err("IO thread: Connecting".into());
    f.past_deadline = true;
    let why = failure(next(Phase::VerifyingStandby, "iad", &f));
    assert!(why.reason.contains("not ready within its bound") && why.reason.contains("Connecting"), "{why:?}");
    assert_eq!(why.attention.as_deref(), Some("pdx"));
}

#[test]
fn a_switchover_that_fails_before_its_decision_names_no_site_unless_one_may_be_read_only() {
    let mut f = facts();
    f.switchover = SwitchoverFacts { old_fenced: Some(false), caught_up: Some(false), ..SwitchoverFacts::default() };
    let why = failure(next(Phase::SwitchoverDraining, "iad", &f));
    assert!(why.reason.starts_with("the switchover failed") && why.reason.contains("writable again"), "{why:?}");
    assert_eq!(why.attention, None);
    f.switchover.old_fenced = None;
    f.past_deadline = true;
    let why = failure(next(Phase::SwitchoverDraining, "iad", &f));
    assert!(why.reason.contains("may be left read-only"), "{why:?}");
    assert_eq!(why.attention.as_deref(), Some("iad"));
}

#[test]
fn after_the_switchover_a_failure_keeps_the_new_topology_and_names_the_former_primary() {
    let mut f = facts();
    (f.active, f.generation) = ("pdx".into(), Some(5));
    f.job = JobState::Failed("DeadlineExceeded".into());
    let why = failure(next(Phase::UpdatingFormerPrimary, "iad", &f));
    assert!(why.reason.contains("pdx is the updated primary at topologyGeneration 5"), "{why:?}");
    assert_eq!(why.attention.as_deref(), Some("iad"));
    f.updated_ready = Err("not replicating".into());
    f.past_deadline = true;
    let why = failure(next(Phase::VerifyingFormerPrimary, "iad", &f));
    assert_eq!(why.attention.as_deref(), Some("iad"));
    // A switch-back that cannot catch up: pdx stays the primary, writable again.
    f.past_deadline = false;
    f.switchover = SwitchoverFacts { old_fenced: Some(false), caught_up: Some(false), ..SwitchoverFacts::default() };
    let why = failure(next(Phase::SwitchBackDraining, "iad", &f));
    assert!(why.reason.starts_with("the switch-back (both sites are updated) failed"), "{why:?}");
    assert_eq!(why.attention.as_deref(), Some("iad"));
}

#[test]
fn an_emergency_failover_supersedes_the_update_wherever_it_lands() {
    for phase in [Phase::Pending, Phase::Admitting, Phase::Deferred, Phase::UpdatingStandby, Phase::VerifyingStandby] {
        let mut f = facts();
        (f.active, f.generation) = ("pdx".into(), Some(5));
        f.hold = Some(("op-1".into(), "app".into()));
        let why = failure(next(phase, "iad", &f));
        assert!(why.reason.contains("superseded by an emergency failover"), "{phase:?}: {why:?}");
    }
    for phase in [Phase::UpdatingFormerPrimary, Phase::VerifyingFormerPrimary] {
        let mut f = facts();
        (f.active, f.generation) = ("iad".into(), Some(6));
        let why = failure(next(phase, "iad", &f));
        assert!(why.reason.contains("superseded after the switchover"), "{phase:?}: {why:?}");
        assert_eq!(why.attention.as_deref(), Some("iad"));
    }
    // Decided for pdx, then pdx died and iad was promoted again.
    let mut f = facts();
    f.generation = Some(6);
    let why = failure(next(Phase::SwitchoverPromoting, "iad", &f));
    assert!(why.reason.contains("superseded"), "{why:?}");
    assert_eq!(why.attention.as_deref(), Some("pdx"));
}

/// Found by the property test: the switchover decided, its new primary
/// died past the drain's bound before `SwitchoverPromoting` was persisted,
/// and an emergency failover promoted the old one back; the drain decided
/// again, a second bump for one switchover.
#[test]
fn a_drain_whose_decision_an_emergency_failover_moved_back_ends_and_never_decides_again() {
    let mut f = facts();
    f.generation = Some(6);
    f.past_deadline = true;
    f.switchover = SwitchoverFacts { old_fenced: Some(false), caught_up: Some(true), ..SwitchoverFacts::default() };
    let why = failure(next(Phase::SwitchoverDraining, "iad", &f));
    assert!(why.reason.contains("superseded by an emergency failover during the switchover"), "{why:?}");
    assert_eq!(why.attention.as_deref(), Some("pdx"));
    // Its own decision, or the target promoted by an emergency failover at one past the start: it goes on.
    (f.active, f.generation) = ("pdx".into(), Some(5));
    assert_eq!(next(Phase::SwitchoverDraining, "iad", &f), Action::Enter(Phase::SwitchoverPromoting));
    // Promoted, then back and forth again: not this switchover's decision.
    f.generation = Some(7);
    assert!(failure(next(Phase::SwitchoverPromoting, "iad", &f)).reason.contains("superseded"));
}

#[test]
fn the_hold_covers_the_promotion_of_the_site_whose_job_runs_within_its_deadline() {
    let mut f = facts();
    for phase in [Phase::Pending, Phase::Admitting, Phase::Deferred, Phase::VerifyingStandby, Phase::Completed] {
        f.job = JobState::Running;
        assert_eq!(holds_automatic_failover(phase, "iad", &f), None, "{phase:?}");
    }
    assert_eq!(holds_automatic_failover(Phase::UpdatingStandby, "iad", &f), Some(Hold::Promotion("pdx".into())));
    f.past_deadline = true;
    assert_eq!(holds_automatic_failover(Phase::UpdatingStandby, "iad", &f), None, "bounded by the Job's deadline");
    f.past_deadline = false;
    f.job = JobState::Complete;
    assert_eq!(holds_automatic_failover(Phase::UpdatingStandby, "iad", &f), None, "the Job ended");
    // After the switchover the former primary's Job holds its promotion.
    f.job = JobState::Running;
    f.active = "pdx".into();
    assert_eq!(holds_automatic_failover(Phase::UpdatingFormerPrimary, "iad", &f), Some(Hold::Promotion("iad".into())));
    // Never the primary: an emergency failover made the Job's site the primary.
    f.active = "iad".into();
    assert_eq!(holds_automatic_failover(Phase::UpdatingFormerPrimary, "iad", &f), None);
    // The drains hold the group, within their bound.
    for phase in [Phase::SwitchoverDraining, Phase::SwitchBackDraining] {
        f.past_deadline = false;
        assert_eq!(holds_automatic_failover(phase, "iad", &f), Some(Hold::Group));
        f.past_deadline = true;
        assert_eq!(holds_automatic_failover(phase, "iad", &f), None);
    }
    for phase in [Phase::SwitchoverPromoting, Phase::SwitchoverRepointing, Phase::SwitchBackRepointing] {
        assert_eq!(holds_automatic_failover(phase, "iad", &f), None, "{phase:?}");
    }
}

#[test]
fn every_switchover_phase_is_a_phase_of_the_planned_failover() {
    let legs: Vec<_> = Phase::ALL.into_iter().filter_map(switchover_phase).collect();
    assert_eq!(legs.len(), 6);
    assert_eq!(switchover_sites(Phase::SwitchoverRepointing, "iad", "pdx"), Some(("iad", "pdx")));
    assert_eq!(switchover_sites(Phase::SwitchBackDraining, "iad", "pdx"), Some(("pdx", "iad")));
    assert_eq!(switchover_sites(Phase::UpdatingStandby, "iad", "pdx"), None);
}

const NAMES: [&str; 2] = ["iad", "pdx"];

fn index(site: &str) -> usize {
    usize::from(site == "pdx")
}

/// A simulated pair of sites the actions run against: iad (0) is the
/// primary when the update is taken up, pdx (1) its replica.
#[derive(Clone, Debug)]
struct World {
    writable: [bool; 2],
    active: usize,
    generation: i64,
    phase: Phase,
    replica_of: [Option<usize>; 2],
    jobs: [JobState; 2],
    dead: [bool; 2],
    decisions: Vec<Leg>,
    emergencies: i64,
}

#[derive(Clone, Debug)]
enum Event {
    Step,
    Crash,
    Hold(bool),
    /// The leg's old primary cannot be reached (true) or can again (false).
    Blip(bool),
    /// The current phase's bound passes.
    Deadline,
    /// The primary dies; automatic failover promotes the other site unless
    /// held, and as soon as it is not.
    Emergency,
    /// A dead site comes back: as it was if it was not failed over yet,
    /// else read-only (returning-primary fencing).
    Revive,
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        40 => Just(Event::Step),
        1 => Just(Event::Crash),
        1 => any::<bool>().prop_map(Event::Hold),
        1 => any::<bool>().prop_map(Event::Blip),
        1 => Just(Event::Deadline),
        1 => Just(Event::Emergency),
        1 => Just(Event::Revive),
    ]
}

/// What the engine keeps only in memory: lost in a crash.
#[derive(Default)]
struct Local {
    fence_failed: Option<String>,
    caught_up: Option<bool>,
}

#[derive(Clone, Copy, Debug)]
struct Inputs {
    ready: [bool; 2],
    admissible: bool,
    switch_back: bool,
}

fn observe(w: &World, local: &Local, i: Inputs, hold: bool, unreachable: bool, past_deadline: bool) -> Facts {
    let (old, target) = switchover_sites(w.phase, "iad", "pdx").map_or((0, 1), |(o, t)| (index(o), index(t)));
    let verifying = match w.phase {
        Phase::VerifyingStandby => Some(1),
        Phase::VerifyingFormerPrimary => Some(0),
        _ => None,
    };
    Facts {
        active: NAMES[w.active].into(),
        generation: Some(w.generation),
        source_generation: Some(4),
        standby: "pdx".into(),
        switch_back: i.switch_back,
        hold: hold.then(|| ("op".to_owned(), "app".to_owned())),
        admissible: if i.admissible { Ok(()) } else { Err("SplitBrain".into()) },
        job: job_site(w.phase, "iad", "pdx").map_or(JobState::Absent, |s| w.jobs[index(s)].clone()),
        past_deadline,
        updated_ready: match verifying {
            Some(s) if i.ready[s] && !w.dead[s] && w.replica_of[s] == Some(w.active) => Ok(()),
            _ => Err("not replicating".into()),
        },
        switchover: SwitchoverFacts {
            old_fenced: (!unreachable && !w.dead[old]).then_some(!w.writable[old]),
            fence_failed: local.fence_failed.clone(),
            caught_up: local.caught_up,
            target_promoted: w.writable[target] && w.active == target && w.replica_of[target].is_none(),
            old_repointed: w.replica_of[old] == Some(target),
        },
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Runs an ordered update from iad against the simulated pair, with
    /// Jobs that may fail, sites that may not get ready, a fence that may
    /// fail, a catch-up that may run out, holds coming and going, blips,
    /// deadlines, the primary dying, and the engine crashing (losing what
    /// it only held in memory) at any step; checks the invariants of the
    /// module header.
    #[test]
    fn one_writable_site_and_one_bump_per_switchover(
        events in proptest::collection::vec(event(), 1..120),
        job_ok in proptest::array::uniform2(proptest::bool::weighted(0.85)),
        ready in proptest::array::uniform2(proptest::bool::weighted(0.85)),
        fence_fails in proptest::bool::weighted(0.15),
        catches_up in proptest::bool::weighted(0.85),
        admissible in proptest::bool::weighted(0.85),
        switch_back in any::<bool>(),
    ) {
        let inputs = Inputs { ready, admissible, switch_back };
        let mut w = World {
            writable: [true, false], active: 0, generation: 4, phase: Phase::Pending,
            replica_of: [None, Some(0)], jobs: [JobState::Absent, JobState::Absent], dead: [false; 2],
            decisions: Vec::new(), emergencies: 0,
        };
        let mut local = Local::default();
        let (mut hold, mut unreachable, mut past_deadline) = (false, false, false);
        let (mut pending_emergency, mut superseded, mut stranded) = (false, false, false);
        let mut was_writable = false;
        let mut failure: Option<Failure> = None;
        let tail = std::iter::repeat_n([Event::Step, Event::Step, Event::Step, Event::Deadline], 60).flatten();
        for e in events.into_iter().chain([Event::Hold(false), Event::Blip(false), Event::Revive]).chain(tail) {
            let f = observe(&w, &local, inputs, hold, unreachable, past_deadline);
            let held = holds_automatic_failover(w.phase, "iad", &f);
            if let Some(Hold::Promotion(site)) = &held {
                prop_assert_ne!(site.as_str(), NAMES[w.active], "never a hold on the primary");
                prop_assert!(!past_deadline);
            }
            // The primary died: failed over as soon as nothing holds it.
            if pending_emergency && held.is_none() {
                pending_emergency = false;
                let other = 1 - w.active;
                w.writable[other] = true;
                w.replica_of[other] = None;
                w.active = other;
                w.generation += 1;
                w.emergencies += 1;
                // A drain accepts only its own target at one past its start.
                superseded = match switchover_phase(w.phase) {
                    Some((leg, planned::Phase::Draining)) => {
                        let target = switchover_sites(w.phase, "iad", "pdx").map(|(_, t)| index(t));
                        Some(w.active) != target || w.generation != 5 + i64::from(leg == Leg::SwitchBack)
                    }
                    _ => true,
                };
                continue;
            }
            match e {
                Event::Crash => { local = Local::default(); continue; }
                Event::Hold(on) => { hold = on; continue; }
                Event::Blip(on) => { unreachable = on; continue; }
                Event::Deadline => { past_deadline = true; continue; }
                Event::Emergency => {
                    if !w.phase.is_final() && w.dead == [false; 2] {
                        w.dead[w.active] = true;
                        was_writable = w.writable[w.active];
                        w.writable[w.active] = false;
                        pending_emergency = true;
                    }
                    continue;
                }
                Event::Revive => {
                    for s in 0..2 {
                        if w.dead[s] {
                            w.dead[s] = false;
                            // Back before its failover: nothing to fail over.
                            w.writable[s] = pending_emergency && was_writable;
                            pending_emergency = false;
                        }
                    }
                    continue;
                }
                Event::Step => {}
            }
            let action = next(w.phase, "iad", &f);
            if superseded && !w.phase.is_final() {
                prop_assert!(matches!(&action, Action::Fail(why) if why.reason.contains("superseded")), "a superseded request only ends: {:?} in {:?}", action, w.phase);
            }
            if hold && matches!(w.phase, Phase::Admitting | Phase::Deferred) && !superseded {
                prop_assert!(matches!(action, Action::Defer { .. }), "no progress while a hold is live: {:?}", action);
            }
            let (old, target) = switchover_sites(w.phase, "iad", "pdx").map_or((0, 1), |(o, t)| (index(o), index(t)));
            let reachable = |s: usize, w: &World| !(w.dead[s] || (unreachable && s == old));
            match action {
                Action::Idle => break,
                Action::Enter(p) => {
                    w.phase = p;
                    local = Local::default();
                    past_deadline = false;
                }
                Action::Defer { .. } => {
                    prop_assert!(matches!(w.phase, Phase::Admitting | Phase::Deferred), "a hold defers admission only");
                    w.phase = Phase::Deferred;
                }
                Action::RunJob(s) => {
                    let s = index(&s);
                    prop_assert_ne!(s, w.active, "a Job never runs on the primary");
                    prop_assert_eq!(Some(NAMES[s]), job_site(w.phase, "iad", "pdx"));
                    prop_assert_eq!(&w.jobs[s], &JobState::Absent, "a Job runs once");
                    w.jobs[s] = JobState::Running;
                }
                Action::AwaitJob(s) => {
                    let s = index(&s);
                    w.jobs[s] = if job_ok[s] { JobState::Complete } else { JobState::Failed("BackoffLimitExceeded".into()) };
                }
                Action::AwaitReady(_) => {}
                Action::Switchover(a) => match a {
                    planned::Action::Fence(s) => {
                        prop_assert_eq!(index(&s), old);
                        if fence_fails || !reachable(old, &w) { local.fence_failed = Some("timeout".into()); } else { w.writable[old] = false; }
                    }
                    planned::Action::CatchUp(s) => {
                        prop_assert_eq!(index(&s), target);
                        local.caught_up = Some(catches_up);
                    }
                    planned::Action::Unfence(s) => {
                        prop_assert_eq!(index(&s), old);
                        prop_assert_eq!(w.active, old, "never unfence a site that lost its role");
                        if reachable(old, &w) { w.writable[old] = true; } else { local = Local::default(); }
                    }
                    planned::Action::Decide(s) => {
                        let leg = switchover_phase(w.phase).map(|(l, _)| l);
                        prop_assert_eq!(index(&s), target);
                        prop_assert_eq!(w.active, old, "decide only from the leg's old primary");
                        prop_assert!(!w.writable[old], "decide only with the old primary fenced");
                        prop_assert!(leg.is_some_and(|l| !w.decisions.contains(&l)), "one decision per switchover");
                        w.decisions.extend(leg);
                        w.active = target;
                        w.generation += 1;
                    }
                    planned::Action::Promote(s) => {
                        prop_assert_eq!(index(&s), w.active, "promote only the decided site");
                        w.writable[target] = true;
                        w.replica_of[target] = None;
                    }
                    planned::Action::Repoint { site, source } => {
                        prop_assert_eq!((index(&site), index(&source)), (old, target));
                        if reachable(old, &w) { w.replica_of[old] = Some(target); }
                    }
                    other => prop_assert!(false, "not a site action: {:?}", other),
                },
                Action::Fail(why) => {
                    stranded = why.reason.contains("may be left read-only");
                    if stranded {
                        prop_assert!(why.attention.is_some(), "a site left read-only is named");
                    }
                    failure = Some(why);
                    w.phase = Phase::Failed;
                }
            }
            prop_assert!(!(w.writable[0] && w.writable[1]), "two writable sites: {:?}", w);
            let decided = i64::try_from(w.decisions.len()).unwrap_or(i64::MAX);
            prop_assert_eq!(w.generation, 4 + decided + w.emergencies, "the generation moves once per decision");
        }
        prop_assert!(w.phase.is_final(), "the update ends once holds are gone and the sites answer: {:?}", w);
        if w.emergencies > 0 {
            return Ok(());
        }
        let failure = failure.unwrap_or_else(|| Failure::new(String::new(), None));
        if w.phase == Phase::Completed {
            let legs = if switch_back { vec![Leg::Switchover, Leg::SwitchBack] } else { vec![Leg::Switchover] };
            prop_assert_eq!(&w.decisions, &legs, "one bump, two with the switch-back");
            let primary = usize::from(!switch_back);
            prop_assert_eq!(w.active, primary);
            prop_assert!(w.writable[primary] && !w.writable[1 - primary]);
            prop_assert_eq!(w.replica_of[1 - primary], Some(primary));
            prop_assert_eq!(&w.jobs, &[JobState::Complete, JobState::Complete], "both sites updated");
        } else if w.decisions.is_empty() {
            prop_assert_eq!((w.generation, w.active), (4, 0), "a failure before the switchover moves nothing");
            prop_assert!(w.writable[0] || stranded, "the primary is writable, or the failure says it may not be");
            prop_assert_eq!(w.jobs[0].clone(), JobState::Absent, "the primary's Job never ran");
        } else {
            prop_assert!(failure.attention.is_some(), "after the switchover a failure names a site: {:?}", failure);
            prop_assert!(w.writable[w.active] || stranded, "the decided primary serves: {:?}", w);
        }
    }
}
