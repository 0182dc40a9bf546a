//! What the planned disruptions that run a user's Job share (the ordered
//! update, restore-in-place): the state of one site's Job and its bound,
//! the automatic failover such a request holds, how its failure reads, and
//! the bridge to the planned failover's decision table, whose fence →
//! catch-up → decision → promotion → repoint they run rather than copy.
//!
//! The Job does the site's own work (a package upgrade, a configuration
//! change, a restore from the user's backup); the operator orchestrates
//! around it and never looks inside it. A Job is named for the request and
//! the site, so creating it again after a crash finds the one that runs.

use super::planned;

/// What the engine sees of one site's Job (the Job named for the request
/// and the site), fresh every round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState {
    /// Not created yet (or deleted by hand).
    Absent,
    /// Created and neither complete nor failed.
    Running,
    /// Its `Complete` condition is true.
    Complete,
    /// Its `Failed` condition is true (`activeDeadlineSeconds` exceeded
    /// included): the reason and message Kubernetes gives.
    Failed(String),
}

/// How a request ends when it fails.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// What happened and what to fix, for status and the Event.
    pub reason: String,
    /// The site that needs a person, when one does: a site whose Job
    /// failed, a site left read-only, a site not updated or not back in
    /// its role.
    pub attention: Option<String>,
}

impl Failure {
    pub(crate) fn new(reason: String, attention: Option<&str>) -> Failure {
        Failure { reason, attention: attention.map(str::to_owned) }
    }
}

/// What a request holds of automatic failover, and for how long.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hold {
    /// A switchover is draining (the primary may be fenced, a promotion
    /// moments away): automatic failover of the group waits, within the
    /// drain's bound (`fenceTimeoutSeconds` + `catchUpTimeoutSeconds` from
    /// entering the drain), exactly as for a planned failover
    /// ([`planned::holds_automatic_failover`]).
    Group,
    /// The named site, not the primary, runs its Job: automatic failover
    /// does not promote it (its server is stopped, half-upgraded, or being
    /// restored), within the Job's deadline (`activeDeadlineSeconds` from
    /// entering the phase). The primary is still watched: its loss is
    /// failed over once the hold ends, at most that deadline late.
    Promotion(String),
}

/// The hold of a Job phase: `site` runs its Job and is not the `active`
/// site, within the phase's bound (`past_deadline` false). A Job that has
/// not started, has ended, or ran past its deadline holds nothing; neither
/// does any Job on the primary (a deployment cannot buy a delay of the
/// primary's failover).
pub(crate) fn job_hold(site: &str, job: &JobState, past_deadline: bool, active: &str) -> Option<Hold> {
    (*job == JobState::Running && !past_deadline && site != active).then(|| Hold::Promotion(site.to_owned()))
}

/// One step of a Job phase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum JobStep {
    /// Create the site's Job.
    Run,
    /// Wait for it, bounded.
    Await,
    /// It completed: the phase is over.
    Done,
    /// It failed or ran out of its bound: why.
    Fail(String),
}

/// The step of a Job phase for `site`: run it, wait for it within the
/// phase's bound, and read its end. A Job still running (or gone) past the
/// bound fails the phase. The engine never deletes a Job: the group owns
/// it, and it keeps its logs until the group goes (its own
/// `activeDeadlineSeconds` ends its Pod).
pub(crate) fn job_step(site: &str, job: &JobState, past_deadline: bool) -> JobStep {
    match job {
        JobState::Complete => JobStep::Done,
        JobState::Failed(why) => JobStep::Fail(format!("the Job of {site} failed: {why}")),
        JobState::Absent | JobState::Running if past_deadline => {
            JobStep::Fail(format!("the Job of {site} did not complete within its deadline"))
        }
        JobState::Absent => JobStep::Run,
        JobState::Running => JobStep::Await,
    }
}

/// What the engine observes of a switchover between `old` (the primary
/// being replaced) and `target`, the planned failover's facts past its
/// admission.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SwitchoverFacts {
    /// Whether `old` is fenced (read-only, sessions ended); `None` while it
    /// cannot be observed: never taken for writable.
    pub old_fenced: Option<bool>,
    /// The outcome of the last fence attempt in this phase, if it failed: why.
    pub fence_failed: Option<String>,
    /// The catch-up wait: `None` not done yet, `Some(true)` caught up,
    /// `Some(false)` it ran out of its bound.
    pub caught_up: Option<bool>,
    /// Whether `target` is the writable primary with replication stopped.
    pub target_promoted: bool,
    /// Whether `old` replicates from `target`.
    pub old_repointed: bool,
}

/// One step of a switchover, as the planned failover's table decides it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Switch {
    /// Act on a site: fence, catch up, unfence, decide, promote, repoint.
    Site(planned::Action),
    /// The planned failover would enter this phase.
    Enter(planned::Phase),
    /// It ends failed: why, and whether `old` may be left read-only (the
    /// drain ran past its bound with `old` unseen).
    Fail {
        /// The planned failover's reason.
        reason: String,
        /// `old` may be left read-only.
        stranded: bool,
    },
}

/// The step of a switchover from `old` to `target` in the planned failover's
/// `phase` (`Draining`, `Promoting` or `Repointing`), decided by
/// [`planned::next`] itself: the decided `active` site and `generation`,
/// and the drain's bound (`past_deadline`).
pub(crate) fn switchover(
    phase: planned::Phase,
    old: &str,
    target: &str,
    active: &str,
    generation: Option<i64>,
    past_deadline: bool,
    sw: &SwitchoverFacts,
) -> Switch {
    let facts = planned::Facts {
        active: active.to_owned(),
        generation,
        // Past its admission the planned failover reads neither.
        source_generation: generation,
        target: target.to_owned(),
        hold: None,
        target_ready: Ok(()),
        old_fenced: sw.old_fenced,
        past_deadline,
        fence_failed: sw.fence_failed.clone(),
        caught_up: sw.caught_up,
        target_promoted: sw.target_promoted,
        old_repointed: sw.old_repointed,
    };
    match planned::next(phase, old, &facts) {
        planned::Action::Enter(next) => Switch::Enter(next),
        planned::Action::Fail(reason) => {
            // The table's only two strandings: unseen past the drain's bound.
            let stranded = phase == planned::Phase::Draining && sw.old_fenced.is_none() && past_deadline;
            Switch::Fail { reason, stranded }
        }
        // Admission's answers, never given past it: ending is the safe reading.
        action @ (planned::Action::Defer { .. } | planned::Action::Idle) => Switch::Fail {
            reason: format!("the switchover's table answered {action:?} in {phase}; the request ends"),
            stranded: false,
        },
        action => Switch::Site(action),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_runs_is_awaited_within_its_bound_and_its_end_is_read() {
        assert_eq!(job_step("pdx", &JobState::Absent, false), JobStep::Run);
        assert_eq!(job_step("pdx", &JobState::Running, false), JobStep::Await);
        assert_eq!(job_step("pdx", &JobState::Complete, true), JobStep::Done, "a completed Job counts, late or not");
        let JobStep::Fail(why) = job_step("pdx", &JobState::Failed("BackoffLimitExceeded".into()), false) else {
            panic!("a failed Job fails the phase")
        };
        assert!(why.contains("pdx") && why.contains("BackoffLimitExceeded"), "{why}");
        for job in [JobState::Absent, JobState::Running] {
            assert!(matches!(job_step("pdx", &job, true), JobStep::Fail(why) if why.contains("deadline")));
        }
    }

    #[test]
    fn a_job_holds_only_the_promotion_of_its_own_site_and_only_while_it_runs_within_its_deadline() {
        assert_eq!(job_hold("pdx", &JobState::Running, false, "iad"), Some(Hold::Promotion("pdx".into())));
        assert_eq!(job_hold("pdx", &JobState::Running, true, "iad"), None, "past the deadline");
        assert_eq!(job_hold("pdx", &JobState::Running, false, "pdx"), None, "never the primary");
        for job in [JobState::Absent, JobState::Complete, JobState::Failed("x".into())] {
            assert_eq!(job_hold("pdx", &job, false, "iad"), None, "{job:?}");
        }
    }

    #[test]
    fn the_switchover_is_the_planned_failovers_table() {
        let sw = SwitchoverFacts { old_fenced: Some(false), ..SwitchoverFacts::default() };
        let step =
            |sw: &SwitchoverFacts, past| switchover(planned::Phase::Draining, "iad", "pdx", "iad", Some(4), past, sw);
        assert_eq!(step(&sw, false), Switch::Site(planned::Action::Fence("iad".into())));
        let fenced = SwitchoverFacts { old_fenced: Some(true), caught_up: Some(true), ..SwitchoverFacts::default() };
        assert_eq!(step(&fenced, false), Switch::Site(planned::Action::Decide("pdx".into())));
        let unseen = SwitchoverFacts { old_fenced: None, ..SwitchoverFacts::default() };
        assert!(matches!(step(&unseen, true), Switch::Fail { stranded: true, .. }));
        let back = SwitchoverFacts { old_fenced: Some(false), caught_up: Some(false), ..SwitchoverFacts::default() };
        assert!(matches!(step(&back, true), Switch::Fail { stranded: false, .. }));
        let decided = switchover(planned::Phase::Draining, "iad", "pdx", "pdx", Some(5), false, &fenced);
        assert_eq!(decided, Switch::Enter(planned::Phase::Promoting));
    }
}
